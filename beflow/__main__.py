from beflow.cli import main

main()

"""What beflow needs of the operating system: subprocesses, files an agent could have written, locks, signals, threads,
start-up and the terminal."""

"""The user's git repository: worktrees, commits and pushes, the credential helper, and the guards that keep an agent
from changing what is not its own."""

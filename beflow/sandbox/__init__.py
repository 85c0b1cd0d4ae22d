"""The sandbox of unattended runs (docs/safety.md#the-sandbox): bubblewrap on Linux, beflow's allowlist proxy
outside it.

- :mod:`.presets`: what each agent needs (its directories, its model API's hosts), in one table.
- :mod:`.policy`: what is mounted where, from a run's paths and the config (pure).
- :mod:`.bwrap`: the bubblewrap command line that makes those mounts, and the binary.
- :mod:`.proxy`: the HTTP CONNECT/forward proxy on a Unix socket, letting only allowed hosts through and counting
  the refused ones.
- :mod:`.bridge`: run inside the sandbox before acpx: the network is unshared, so it listens on the sandbox's own
  loopback and forwards each connection to the proxy's socket, then becomes acpx.
- :mod:`.box`: a run's sandbox, opened once its worktree is made and open until the run ends (its hooks and its
  agent's session run in it): the proxy served, the command lines wrapped, and a sandbox that did not start told
  apart from acpx's own failures.
- :mod:`.choice`: whether runs are sandboxed: ``sandbox.enabled``, and for ``"auto"`` whether bwrap starts here,
  asked once per process.
- :mod:`.check`: ``beflow doctor``'s check: the sandbox starts, the agent starts in it, its host is reached.
"""

"""beflow's test suite: it mirrors the package (docs/architecture.md#tests)."""

import sys

# The suite's modules (pytest's rewritten test modules, and beflow's) are kept as bytecode between runs even where
# the environment asks for none (PYTHONDONTWRITEBYTECODE): compiling them again costs each worker seconds of CPU a
# run. (This package is imported before its conftest and the modules that imports.)
sys.dont_write_bytecode = False

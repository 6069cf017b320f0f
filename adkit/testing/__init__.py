"""adkit.testing: a differential fuzzer and the checks behind it, for adkit's own tests
and for researchers testing their own rules and passes (`python -m adkit.testing.fuzz`).

Owns: re-exports only. Does not: hold checks (checks.py), programs (programs.py), the
loop (fuzzer.py) or the command line (fuzz.py, not imported here: `python -m` runs it).
"""
from . import checks, fuzzer
from .asserts import assert_close
from .checks import CHECKS, Context, Mismatch, run_checks
from .fuzzer import Failure, shrink

# NB: the loop is ak.testing.fuzzer.fuzz(...); the name `fuzz` is left to the command-line
# module adkit.testing.fuzz (importing it sets the package attribute `fuzz`).
__all__ = ["assert_close", "checks", "fuzzer", "CHECKS", "Context", "Mismatch",
           "run_checks", "Failure", "shrink"]

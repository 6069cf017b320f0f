"""adkit.testing: a differential fuzzer and the checks behind it, for adkit's own tests
and for researchers testing their own rules and passes (`python -m adkit.testing.fuzz`).

Owns: re-exports only. Does not: hold checks (checks.py), programs (programs.py) or the
loop (fuzz.py).
"""
from . import checks, fuzz
from .asserts import assert_close
from .checks import CHECKS, Context, Mismatch, run_checks
from .fuzz import Failure, shrink

__all__ = ["assert_close", "checks", "fuzz", "CHECKS", "Context", "Mismatch", "run_checks",
           "Failure", "shrink"]

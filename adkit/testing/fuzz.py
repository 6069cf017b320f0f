"""The fuzzer's command line:

    python -m adkit.testing.fuzz --programs 5000 --seed 0 [--checks jit,jit_grad]
        [--pass mymodule:my_pass] [--time-limit 600] [--dtype float32]

Owns: argument parsing and the exit code (1 when anything failed). Does not: fuzz
(fuzzer.py). A module of its own so that `python -m` runs it fresh.
"""
import argparse
import importlib
import sys

import numpy as np

from . import checks as checks_module
from .fuzzer import fuzz


def _load_pass(spec):
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--pass wants module:function, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m adkit.testing.fuzz",
                                     description="adkit's differential fuzzer")
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checks", default=None,
                        help="comma-separated, from: " + ", ".join(checks_module.CHECKS))
    parser.add_argument("--pass", dest="passes", action="append", default=[],
                        help="a user pass module:function (Graph -> Graph), repeatable")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = parser.parse_args(argv)
    names = args.checks.split(",") if args.checks else None
    unknown = set(names or ()) - set(checks_module.CHECKS)
    if unknown:
        parser.error(f"unknown checks: {', '.join(sorted(unknown))}")
    failures = fuzz(args.programs, args.seed, names, [_load_pass(p) for p in args.passes],
                    args.time_limit, np.dtype(args.dtype))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

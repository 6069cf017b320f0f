"""The differential fuzzer: random programs (programs.py) through every check (checks.py);
a failure is shrunk to a minimal program and printed as runnable Python.

Owns: the fuzzing loop, shrinking (greedy deletion of instructions until the same check
no longer fails) and the repro script. Does not: define checks or instructions, or parse
the command line (fuzz.py).
"""
import dataclasses
import time

import numpy as np

from . import checks as checks_module
from .programs import ADKIT, Program, _try, generate, run_reference


@dataclasses.dataclass
class Failure:
    check: str
    message: str
    program: Program
    seed: tuple

    def repro(self):
        """A runnable script: the program, then the check that fails on it."""
        arrays = ", ".join(f"x{i}.numpy()" for i in range(len(self.program.inputs)))
        return "\n".join([
            f"# adkit.testing.fuzz: check {self.check!r} failed",
            "# " + self.message.replace("\n", "\n# "),
            self.program.source(self.program.inputs[0].dtype.name), "",
            "from adkit.testing import checks",
            f"ctx = checks.Context(np.random.default_rng({list(self.seed)!r}))",
            f"checks.CHECKS[{self.check!r}](lambda *xs: program(*xs)[0], [{arrays}], ctx)",
        ])


def program_function(program):
    """The program as a function of adkit tensors returning its (one) output."""
    return lambda *xs: program.run(ADKIT, list(xs))[0]


def check_program(program, names, user_passes=(), seed=(0,)):
    """{check: message} of the checks that fail on `program`."""
    ctx = checks_module.Context(np.random.default_rng(list(seed)), tuple(user_passes))
    reference = run_reference(program)
    return checks_module.run_checks(program_function(program), program.inputs, ctx,
                                    names, reference=reference)


def shrink(program, check, user_passes=(), seed=(0,)):
    """The smallest program (greedy deletion of steps, then of trailing steps) on which
    `check` still fails."""
    current = program
    changed = True
    while changed and len(current.steps) > 1:
        changed = False
        for k in range(len(current.steps) - 1, -1, -1):
            steps = current.steps[:k] + current.steps[k + 1:]
            for candidate in _with_each_output(current.inputs, steps):
                if _still_fails(candidate, check, user_passes, seed):
                    current, changed = candidate, True
                    break
            if changed:
                break
    return current


def _with_each_output(inputs, steps):
    """Valid programs over `steps`, ending at their last step."""
    if not steps:
        return []
    candidate = Program(inputs, steps, [steps[-1][1]])
    return [candidate] if _try(candidate, inputs[0].dtype) is not None else []


def _still_fails(program, check, user_passes, seed):
    return check in check_program(program, [check], user_passes, seed)


def fuzz(programs=100, seed=0, names=None, user_passes=(), time_limit=None,
         dtype=np.float64, log=print):
    """Run `programs` random programs through the checks; the shrunk failures, one per
    (check, instruction set) class."""
    started, failures, seen = time.perf_counter(), [], set()
    done = 0
    for i in range(programs):
        if time_limit is not None and time.perf_counter() - started > time_limit:
            break
        program = generate(np.random.default_rng([seed, i]), dtype=dtype)
        found = check_program(program, names, user_passes, (seed, i))
        for check, message in found.items():
            small = shrink(program, check, user_passes, (seed, i))
            key = (check, tuple(sorted({s[0] for s in small.steps})))
            if key in seen:
                continue
            seen.add(key)
            failures.append(Failure(check, message, small, (seed, i)))
            log(failures[-1].repro() + "\n")
        done += 1
    elapsed = time.perf_counter() - started
    log(f"adkit.testing.fuzz: {done} programs, seed {seed}, {elapsed:.1f} s "
        f"({done / max(elapsed, 1e-9):.1f} programs/s), {len(failures)} failure classes")
    return failures

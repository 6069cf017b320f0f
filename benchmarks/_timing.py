"""What the benchmark scripts share: timing a call (medians) and running one framework
in a subprocess of its own (jax's and llvmlite's LLVMs must not share a process, and a
fresh process keeps first-call times honest).

    from _timing import best_seconds, in_turns, median_seconds, run_child, settle

(papers/ scripts import it too, with benchmarks/ on their path.)
"""
import json
import os
import statistics
import subprocess
import sys
import time


def settle():
    """Wait for ak.jit's background compiles (when adkit is loaded): steady times must
    be native code's, not the numpy tier a signature's first calls run on."""
    background = sys.modules.get("adkit.codegen.background")
    if background is not None:
        background.wait()


def median_seconds(fn, repeats, warmup=1):
    """The median time of `repeats` calls of fn(), after `warmup` calls (and any
    background compile they started)."""
    for _ in range(warmup):
        fn()
    settle()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def best_seconds(fn, repeats=5, budget=3.0, warmup=1):
    """The best time of up to `repeats` calls of fn(), after `warmup` calls (and any
    background compile they started), stopping early (after two) once `budget` seconds
    have gone: slow cases get fewer repeats."""
    for _ in range(warmup):
        fn()
    settle()
    best, start = float("inf"), time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if i >= 1 and time.perf_counter() - start > budget:
            break
    return best


def run_child(script, args, **env):
    """The JSON a script's child run prints last: `python script *args` from the working
    directory, with the extra environment variables; {"error": ...} if it failed."""
    out = subprocess.run([sys.executable, script, *map(str, args)], capture_output=True,
                         text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.getcwd(), **env))
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def in_turns(run, frameworks, rounds, key):
    """run(framework) `rounds` times, the frameworks taking turns (this machine's speed
    drifts over seconds: turns give all the same drift). Returns ({framework: the
    median of each number over its rounds, or its first error}, {framework: its
    per-round ratios of `key` to jax's}, the latter empty unless jax ran)."""
    runs = {f: [] for f in frameworks}
    for _ in range(rounds):
        for f in frameworks:
            runs[f].append(run(f))
    merged = {}
    for f, rs in runs.items():
        bad = [r for r in rs if "error" in r]
        merged[f] = bad[0] if bad else {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    ratios = {}
    if "error" not in merged.get("jax", {"error": "absent"}):
        ratios = {f: [r[key] / j[key] for r, j in zip(rs, runs["jax"])]
                  for f, rs in runs.items() if "error" not in merged[f]}
    return merged, ratios

"""Loops: ak.scan / ak.fori_loop beside jax.lax.scan / fori_loop, one run, as ratios.

    python benchmarks/loops.py [--quick] [--frameworks adkit,jax] [--rounds 3]

Cases (issue 12):
  tanh-N   grad of a loop h = tanh(h @ w) (h: 32 floats, w: 32x32), N steps: compile
           time (first call minus a steady call) and time per step of the gradient.
  lstm     the ADBench D-LSTM objective's gradient (2 layers, 1,024 characters of 14
           letters: 1,023 steps), written with a scan over the sequence.
  revolve  checkpointing of the tanh loop at n = 1,000 with s = 2, 5, 10, 30 snapshots
           (adkit only): forward steps taken, carries stored, peak memory, time.
Each framework runs in its own subprocess (jax's and llvmlite's LLVMs must not share a
process), pinned to one core by the caller if wanted (taskset -c 0). float64 throughout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np
from _timing import in_turns, settle

SIZES = [10, 100, 1000, 10000]
HIDDEN = 32


def _steady(fn, repeats):
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _first_and_steady(fn, repeats):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    settle()  # a background compile started by the first call
    fn()
    steady = _steady(fn, repeats)
    return first - steady, steady


def lstm_data(rng, layers=2, chars=1024, letters=14):
    main = rng.standard_normal((2 * layers, 4 * letters)) * 0.5
    extra = rng.standard_normal((3, letters)) * 0.5
    state = rng.standard_normal((2 * layers, letters)) * 0.5
    seq = rng.standard_normal((chars, letters))
    return main, extra, state, seq


def lstm_objective(lib, scan, main, extra, state, seq):
    """ADBench's D-LSTM objective (its `sum(..., 2)` quirk kept: log(2 + sum(exp)))."""
    layers, letters = state.shape[0] // 2, seq.shape[1]

    def model(weight, bias, hidden, cell, x):
        gates = lib.concatenate([x, hidden, x, hidden]) * weight + bias
        forget = 1 / (1 + lib.exp(-gates[0:letters]))
        ingate = 1 / (1 + lib.exp(-gates[letters:2 * letters]))
        outgate = 1 / (1 + lib.exp(-gates[2 * letters:3 * letters]))
        change = lib.tanh(gates[3 * letters:])
        cell = cell * forget + ingate * change
        return outgate * lib.tanh(cell), cell

    def step(carry, pair):
        s, total = carry
        x, gold = pair
        x = x * extra[0]
        new = []
        for i in range(layers):
            h, c = model(main[2 * i], main[2 * i + 1], s[2 * i], s[2 * i + 1], x)
            new += [h, c]
            x = h
        ypred = x * extra[1] + extra[2]
        ynorm = ypred - lib.log(lib.sum(lib.exp(ypred)) + 2)
        return (lib.stack(new), total + lib.sum(gold * ynorm)), None

    (_, total), _ = scan(step, (state, lib.sum(seq[0]) * 0), (seq[:-1], seq[1:]))
    return -total / ((seq.shape[0] - 1) * letters)


def run_adkit(case, repeats):
    import adkit as ak
    from adkit.control import revolve
    rng = np.random.default_rng(0)
    if case.startswith("tanh"):
        n = int(case.split("-")[1])
        w = ak.tensor(rng.standard_normal((HIDDEN, HIDDEN)) / HIDDEN ** 0.5)
        h0 = ak.tensor(rng.standard_normal(HIDDEN))
        loss = lambda w, h: ak.fori_loop(0, n, lambda i, h: (h @ w).tanh(), h).sum()  # noqa: E731
        g = ak.jit(ak.func.grad(loss))
        compile_s, steady = _first_and_steady(lambda: g(w, h0), repeats)
        return {"compile_s": compile_s, "per_step_us": steady / n * 1e6, "total_ms": steady * 1e3}
    if case == "lstm":
        main, extra, state, seq = (ak.tensor(a) for a in lstm_data(rng))
        lib = _AkLib(ak)
        f = ak.jit(ak.func.grad(lambda m: lstm_objective(lib, ak.scan, m, extra, state, seq)))
        compile_s, steady = _first_and_steady(lambda: f(main), repeats)
        return {"compile_s": compile_s, "total_ms": steady * 1e3}
    if case.startswith("revolve"):
        s = None if case == "revolve-None" else int(case.split("-")[1])
        w = ak.tensor(rng.standard_normal((HIDDEN, HIDDEN)) / HIDDEN ** 0.5)
        h0 = ak.tensor(rng.standard_normal(HIDDEN))
        loss = lambda w, h: ak.fori_loop(0, 1000, lambda i, h: (h @ w).tanh(), h,  # noqa: E731
                                         checkpoint=s).sum()
        g = ak.jit(ak.func.grad(loss))
        g(w, h0)
        settle()  # native code, not the numpy tier, is what is timed
        steady = _steady(lambda: g(w, h0), repeats)
        if s is None:  # every step's residuals stored, the carry among them
            run = {"forward_steps": 999, "stored_carries": 1000}
        else:  # the native executor walks exactly this schedule
            sim = revolve.simulate(revolve.schedule(1000, s), 1000)
            run = {"forward_steps": sim.forward_steps, "stored_carries": sim.slots_used}
        # peak memory: the compiled plan's own buffers (kept between calls) plus what a
        # call allocates (numpy's allocations are traced by tracemalloc)
        kept = sum(b.nbytes for b in g.compile(w, h0).buffers
                   if type(b).__name__ in ("TempBuffer", "ResultBuffer"))
        tracemalloc.start()
        g(w, h0)
        peak = kept + tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {"total_ms": steady * 1e3, "peak_kb": peak / 1024, **run}
    raise ValueError(case)


class _AkLib:
    def __init__(self, ak):
        self.ak = ak
        self.exp, self.log, self.tanh, self.stack = ak.exp, ak.log, ak.tanh, ak.stack

    def concatenate(self, xs):
        return self.ak.cat(xs)

    def sum(self, x):
        return x.sum()


def run_jax(case, repeats):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    if case.startswith("tanh"):
        n = int(case.split("-")[1])
        w = jnp.asarray(rng.standard_normal((HIDDEN, HIDDEN)) / HIDDEN ** 0.5)
        h0 = jnp.asarray(rng.standard_normal(HIDDEN))
        loss = lambda w, h: jax.lax.fori_loop(0, n, lambda i, h: jnp.tanh(h @ w), h).sum()  # noqa: E731
        g = jax.jit(jax.grad(loss))
        compile_s, steady = _first_and_steady(lambda: g(w, h0).block_until_ready(), repeats)
        return {"compile_s": compile_s, "per_step_us": steady / n * 1e6, "total_ms": steady * 1e3}
    if case == "lstm":
        main, extra, state, seq = (jnp.asarray(a) for a in lstm_data(rng))
        f = jax.jit(jax.grad(lambda m: lstm_objective(jnp, jax.lax.scan, m, extra, state, seq)))
        compile_s, steady = _first_and_steady(lambda: f(main).block_until_ready(), repeats)
        return {"compile_s": compile_s, "total_ms": steady * 1e3}
    return None


def _child(framework, case, repeats):
    out = subprocess.run([sys.executable, __file__, "--child", framework, case,
                          "--repeats", str(repeats)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.getcwd(),
                                  ADKIT_DISABLE_CACHE="1"))  # honest compile times
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--frameworks", default="adkit,jax")
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        framework, case = args.child
        runner = run_adkit if framework == "adkit" else run_jax
        print(json.dumps(runner(case, args.repeats)))
        return
    sizes = SIZES[:3] if args.quick else SIZES
    frameworks = args.frameworks.split(",")
    print(f"medians over {args.rounds} rounds, frameworks taking turns")
    print("| case | " + " | ".join(f"{f} compile s | {f} per step us / total ms"
                                     for f in frameworks) +
          " | ratio adkit/jax (median; rounds' range) |")
    print("|---" * (2 * len(frameworks) + 2) + "|")
    for case in [f"tanh-{n}" for n in sizes] + ["lstm"]:
        res, ratios = in_turns(lambda f: _child(f, case, args.repeats), frameworks,
                               args.rounds, "total_ms")
        cells = []
        for f in frameworks:
            r = res[f]
            if "error" in r:
                cells += ["error", r["error"][:40]]
                continue
            cells += [f"{r['compile_s']:.3f}",
                      f"{r.get('per_step_us', float('nan')):.2f} / {r['total_ms']:.2f}"]
        ratio = ""
        if "adkit" in ratios:
            ratio = (f"{res['adkit']['total_ms'] / res['jax']['total_ms']:.2f}; "
                     f"{min(ratios['adkit']):.2f}-{max(ratios['adkit']):.2f}")
        print(f"| {case} | " + " | ".join(cells) + f" | {ratio} |")
    if "adkit" in frameworks:
        print("\n| checkpoint (n=1000) | forward steps | carries stored | peak memory KB "
              "| grad ms |")
        print("|---|---|---|---|---|")
        for s in ["None", "2", "5", "10", "30"]:
            r = _child("adkit", f"revolve-{s}", args.repeats)
            if "error" in r:
                print(f"| {s} | error: {r['error'][:60]} | | | |")
                continue
            print(f"| {s} | {r['forward_steps']} | {r['stored_carries']} | "
                  f"{r['peak_kb']:.0f} | {r['total_ms']:.1f} |")


if __name__ == "__main__":
    main()

"""ak.jit beside jax.jit (and numpy): medians and ratios, one run.

    python benchmarks/jit_vs_jax.py [--quick]

Cases (issue 6): (a) a fused elementwise chain, value and gradient, 1e6 and 1e7 float64;
(b) call overhead on a tiny input; (c) first-call compile time of a ~50-node gradient
graph; (d) an MLP's forward+backward (two hidden layers of 256, batch 128).
Each framework runs in its own subprocess: jax's and llvmlite's LLVMs must not share a
process (they abort together), and a fresh process also makes compile times honest.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = ["a-1e6", "a-1e7", "b", "c", "d"]


def _time(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _chain(np_like, x, n_links=10):
    """A chain of elementwise ops, summed: ~4 ops per link."""
    y = x
    for i in range(n_links):
        y = np_like.sin(np_like.tanh(y * 1.01) * 0.5 + 0.1 * i) + y
    return y.sum() if hasattr(y, "sum") else np_like.sum(y)


def _mlp_data(rng):
    x = rng.standard_normal((128, 64))
    ws = [rng.standard_normal((64, 256)) * 0.1, rng.standard_normal((256, 256)) * 0.1,
          rng.standard_normal((256, 10)) * 0.1]
    return x, ws


def run_adkit(case, repeats):
    import adkit as ak
    import adkit.func as F
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = ak.tensor(rng.standard_normal(n))
        f = ak.jit(F.grad_and_value(lambda t: _chain(_AkNp, t, 2)))
        return _time(lambda: f(x), repeats)
    if case == "b":
        f = ak.jit(lambda t: (t * 2.0 + 1.0).tanh())
        x = ak.tensor(rng.standard_normal(10))
        return _time(lambda: f(x), repeats * 50)
    if case == "c":
        x = ak.tensor(rng.standard_normal(1000))
        t0 = time.perf_counter()
        ak.jit(F.grad(lambda t: _chain(_AkNp, t, 12)))(x)
        return time.perf_counter() - t0
    x, ws = _mlp_data(rng)
    x, ws = ak.tensor(x), [ak.tensor(w) for w in ws]

    def loss(ws, x):
        h = (x @ ws[0]).tanh()
        h = (h @ ws[1]).tanh()
        return ((h @ ws[2]) ** 2).mean()
    f = ak.jit(F.grad(loss))
    return _time(lambda: f(ws, x), repeats)


class _AkNp:
    """numpy-style names over adkit tensors, so one chain serves every framework."""

    @staticmethod
    def sin(t):
        return t.sin()

    @staticmethod
    def tanh(t):
        return t.tanh()


def run_jax(case, repeats):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = jnp.asarray(rng.standard_normal(n))
        f = jax.jit(jax.value_and_grad(lambda t: _chain(jnp, t, 2)))
        return _time(lambda: f(x)[1].block_until_ready(), repeats)
    if case == "b":
        f = jax.jit(lambda t: jnp.tanh(t * 2.0 + 1.0))
        x = jnp.asarray(rng.standard_normal(10))
        return _time(lambda: f(x).block_until_ready(), repeats * 50)
    if case == "c":
        x = jnp.asarray(rng.standard_normal(1000))
        t0 = time.perf_counter()
        jax.jit(jax.grad(lambda t: _chain(jnp, t, 12)))(x).block_until_ready()
        return time.perf_counter() - t0
    x, ws = _mlp_data(rng)
    x, ws = jnp.asarray(x), [jnp.asarray(w) for w in ws]

    def loss(ws, x):
        h = jnp.tanh(x @ ws[0])
        h = jnp.tanh(h @ ws[1])
        return jnp.mean((h @ ws[2]) ** 2)
    f = jax.jit(jax.grad(loss))
    return _time(lambda: [g.block_until_ready() for g in f(ws, x)], repeats)


def run_numpy(case, repeats):
    """numpy without AD: the forward only (a floor for the value part)."""
    rng = np.random.default_rng(0)
    if case.startswith("a"):
        n = int(float(case.split("-")[1]))
        x = rng.standard_normal(n)
        return _time(lambda: _chain(np, x, 2), repeats)
    if case == "b":
        x = rng.standard_normal(10)
        return _time(lambda: np.tanh(x * 2.0 + 1.0), repeats * 50)
    if case == "d":
        x, ws = _mlp_data(rng)
        return _time(lambda: np.mean((np.tanh(np.tanh(x @ ws[0]) @ ws[1]) @ ws[2]) ** 2),
                     repeats)
    return None


RUNNERS = {"adkit": run_adkit, "jax": run_jax, "numpy (forward only)": run_numpy}


def worker(name, case, repeats):
    try:
        print(json.dumps({"seconds": RUNNERS[name](case, repeats)}))
    except ImportError as e:
        print(json.dumps({"missing": str(e)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CASE"))
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    if args.worker:
        return worker(args.worker[0], args.worker[1], repeats)
    print(f"{'case':<8}{'framework':<24}{'median':>12}{'jax / this':>12}")
    for case in CASES:
        results = {}
        for name in RUNNERS:
            # no on-disk compile cache: case (c) measures a real compile
            env = dict(os.environ, ADKIT_DISABLE_CACHE="1")
            out = subprocess.run([sys.executable, __file__, "--worker", name, case,
                                  "--repeats", str(repeats)], capture_output=True, text=True,
                                 env=env)
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
            results[name] = json.loads(line).get("seconds")
        base = results.get("jax")
        for name, sec in results.items():
            if sec is None:
                continue
            ratio = f"{base / sec:.2f}x" if base else "-"
            print(f"{case:<8}{name:<24}{sec * 1e3:>10.3f}ms{ratio:>12}")


if __name__ == "__main__":
    main()

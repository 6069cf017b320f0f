"""Vector math in compiled kernels: glibc's libmvec against adkit's own polynomials
(codegen/vecmath.py), with numpy's ufunc beside them, one run, as ratios.

    python benchmarks/vector_math.py [--size N] [--dtypes float64,float32]

Each function runs as one jitted kernel over N values (1e6 by default, in its usual
domain) in a subprocess per mode (ADKIT_VECTOR_MATH=libmvec / polynomial: the choice
is made when code is generated). It is why kernels call libmvec wherever the host has
it (codegen/scalar.py): on this machine (AVX-512) libmvec was as fast or faster for every
function but asin and acos (within 3%), by 1.1-2.6x in float64 and 3-7.6x in float32.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

DOMAINS = {"exp": (-20, 20), "expm1": (-5, 5), "log": (0.01, 100), "log1p": (-0.9, 100),
           "sin": (-10, 10), "cos": (-10, 10), "tan": (-1.5, 1.5), "tanh": (-5, 5),
           "sinh": (-5, 5), "cosh": (-5, 5), "asin": (-1, 1), "acos": (-1, 1),
           "atan": (-10, 10)}


def _median_ms(fn, repeats=15):
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def _data(name, size, dtype):
    low, high = DOMAINS[name]
    return np.random.default_rng(0).uniform(low, high, size).astype(dtype)


def run_child(size, dtype):
    import adkit as ak
    out = {}
    for name in DOMAINS:
        x = ak.tensor(_data(name, size, dtype))
        f = ak.jit(lambda t, name=name: getattr(t, name)())
        out[name] = _median_ms(lambda f=f, x=x: f(x))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--child", nargs=2, metavar=("SIZE", "DTYPE"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(int(args.child[0]), args.child[1])))
        return
    print("| function | dtype | numpy ms | libmvec ms | polynomial ms | polynomial / libmvec |")
    print("|---|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        modes = {}
        for mode in ("libmvec", "polynomial"):
            env = dict(os.environ, ADKIT_VECTOR_MATH=mode, ADKIT_DISABLE_CACHE="1",
                       PYTHONPATH=os.getcwd())
            run = subprocess.run([sys.executable, __file__, "--child", str(args.size), dtype],
                                 capture_output=True, text=True, env=env, check=True)
            modes[mode] = json.loads(run.stdout.strip().splitlines()[-1])
        for name in DOMAINS:
            x = _data(name, args.size, dtype)
            ufunc = getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}.get(
                name, name))
            numpy_ms = _median_ms(lambda ufunc=ufunc, x=x: ufunc(x))
            lib, poly = modes["libmvec"][name], modes["polynomial"][name]
            print(f"| {name} | {dtype} | {numpy_ms:.2f} | {lib:.2f} | {poly:.2f} | "
                  f"{poly / lib:.2f} |")


if __name__ == "__main__":
    main()

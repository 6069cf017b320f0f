"""Vector math in compiled kernels: glibc's libmvec against adkit's own polynomials
(codegen/vecmath.py), with numpy's ufunc beside them, one run, as ratios.

    python benchmarks/vector_math.py [--size N] [--dtypes float64,float32]

Each function runs as one jitted kernel over N values (1e6 by default, in its usual
domain) in a subprocess per mode (ADKIT_VECTOR_MATH=libmvec / polynomial: the choice
is made when code is generated). It is why kernels call libmvec wherever the host has
it (codegen/scalar.py): on this machine (AVX-512) libmvec was as fast or faster for every
function but asin and acos (within 3%), by 1.1-2.6x in float64 and 3-7.6x in float32 --
except float64 tanh since its polynomial was rewritten (1.36 vs 1.91 ms per 1e6), which
is why float64 tanh is inline by default (scalar.POLYNOMIAL_FIRST).
"""
import argparse
import json

import numpy as np
from _timing import median_seconds, run_child

DOMAINS = {"exp": (-20, 20), "expm1": (-5, 5), "log": (0.01, 100), "log1p": (-0.9, 100),
           "sin": (-10, 10), "cos": (-10, 10), "tan": (-1.5, 1.5), "tanh": (-5, 5),
           "sinh": (-5, 5), "cosh": (-5, 5), "asin": (-1, 1), "acos": (-1, 1),
           "atan": (-10, 10)}


def _median_ms(fn, repeats=15):
    return median_seconds(fn, repeats) * 1e3


def _data(name, size, dtype):
    low, high = DOMAINS[name]
    return np.random.default_rng(0).uniform(low, high, size).astype(dtype)


def measure(size, dtype):
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
        print(json.dumps(measure(int(args.child[0]), args.child[1])))
        return
    print("| function | dtype | numpy ms | libmvec ms | polynomial ms | polynomial / libmvec |")
    print("|---|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        modes = {}
        for mode in ("libmvec", "polynomial"):
            modes[mode] = run_child(__file__, ["--child", args.size, dtype],
                                    ADKIT_VECTOR_MATH=mode, ADKIT_DISABLE_CACHE="1")
            if "error" in modes[mode]:
                raise SystemExit(f"{mode}: {modes[mode]['error']}")
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

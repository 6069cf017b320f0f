"""Sparse Jacobians of the 2-D Brusselator: dense ak.func.jacfwd against sparsity
detection, coloring and the jitted compressed Jacobian (ak.jit(ak.func.sparse_jacobian)).

    python benchmarks/sparse_jacobians.py [--sizes 8,16,32,64,128] [--dense-up-to 32]

The problem is the one in the documentation of Julia's SparseDiffTools, as
papers/sparse_jacobians/brusselator.py defines it (2 N^2 unknowns). Printed per
N: unknowns, nonzeros, colors, detection (trace + sparsity pass), the sparsity pass
alone (on the traced graph), coloring, one eager jvp, the first call of the jitted sparse Jacobian (detection, coloring, compiling), its
later calls, the eager sparse Jacobian, dense jacfwd (only up to --dense-up-to: one jvp
per unknown) and the dense/sparse ratio. Values are checked against dense where it runs.
"""
import argparse
import os
import sys
import time

import numpy as np
from _timing import median_seconds

import adkit as ak

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "papers",
                                "sparse_jacobians"))
from brusselator import adkit_residual as brusselator  # noqa: E402  (the problem)
from brusselator import grid_data  # noqa: E402


def state(n):
    """The documentation's initial condition, flat."""
    return ak.tensor(grid_data(n)[0])


def measure(n, dense_up_to, repeats):
    f, x = brusselator(n), state(n)
    row = {"N": n, "unknowns": 2 * n * n}
    row["detect"] = median_seconds(lambda: ak.func.jacobian_sparsity(f, x), repeats)
    graph = ak.trace(f, x)
    row["pass"] = median_seconds(lambda: ak.ir.passes.sparsity(graph), repeats)
    pattern = ak.func.jacobian_sparsity(f, x)
    row["nnz"] = pattern.nnz
    row["color"] = median_seconds(lambda: ak.ir.passes.color(pattern), repeats)
    row["colors"] = int(ak.ir.passes.color(pattern).max()) + 1
    row["jvp"] = median_seconds(lambda: ak.func.jvp(f, (x,), (x,)), repeats)
    jitted = ak.jit(ak.func.sparse_jacobian(f))
    t0 = time.perf_counter()
    sparse = jitted(x)
    row["jit_first"] = time.perf_counter() - t0
    row["jit"] = median_seconds(lambda: jitted(x), max(repeats, 20))
    eager = ak.func.sparse_jacobian(f)
    row["eager"] = median_seconds(lambda: eager(x), repeats)
    if n <= dense_up_to:
        t0 = time.perf_counter()
        dense = ak.func.jacfwd(f)(x).numpy()
        row["dense"] = time.perf_counter() - t0
        error = np.abs(sparse.todense().numpy() - dense).max() / np.abs(dense).max()
        assert error < 1e-12, f"N={n}: sparse and dense Jacobians differ by {error:.2e}"
        row["ratio"] = row["dense"] / row["jit"]
    return row


COLUMNS = [("N", "{:>4}"), ("unknowns", "{:>8}"), ("nnz", "{:>8}"), ("colors", "{:>6}"),
           ("detect", "{:>8.4f}"), ("pass", "{:>8.4f}"), ("color", "{:>8.4f}"), ("jvp", "{:>8.4f}"),
           ("jit_first", "{:>9.3f}"), ("jit", "{:>9.6f}"), ("eager", "{:>8.4f}"),
           ("dense", "{:>8.3f}"), ("ratio", "{:>8.0f}")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,16,32,64,128")
    parser.add_argument("--dense-up-to", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("times in seconds; ratio = dense jacfwd / jitted sparse Jacobian")
    print(" ".join(f"{name:>{len(fmt.format(0) if 'f' not in fmt else fmt.format(0.0))}}"
                   for name, fmt in COLUMNS))
    for n in map(int, args.sizes.split(",")):
        row = measure(n, args.dense_up_to, args.repeats)
        print(" ".join(fmt.format(row[name]) if name in row else
                       " " * len(fmt.format(0.0 if "f" in fmt else 0)) for name, fmt in COLUMNS),
              flush=True)


if __name__ == "__main__":
    main()

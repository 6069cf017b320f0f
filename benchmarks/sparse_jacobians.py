"""Sparse Jacobians of the 2-D Brusselator: dense ak.func.jacfwd against sparsity
detection, coloring and the jitted compressed Jacobian (ak.jit(ak.func.sparse_jacobian)).

    python benchmarks/sparse_jacobians.py [--sizes 8,16,32,64,128] [--dense-up-to 32]

The problem is the one in the documentation of Julia's SparseDiffTools: u and v on an
N x N periodic grid of [0, 1] (2 N^2 unknowns), alpha = 10 / dx^2, A = 3.4, B = 1,
    du = alpha (L u) + B + u^2 v - (A + 1) u,    dv = alpha (L v) + A u - u^2 v
(L the 5-point Laplacian; the forcing term is a constant and is left out). Printed per
N: unknowns, nonzeros, colors, detection (trace + sparsity pass), coloring, one eager
jvp, the first call of the jitted sparse Jacobian (detection, coloring, compiling), its
later calls, the eager sparse Jacobian, dense jacfwd (only up to --dense-up-to: one jvp
per unknown) and the dense/sparse ratio. Values are checked against dense where it runs.
"""
import argparse
import time

import numpy as np
from _timing import median_seconds

import adkit as ak

A, B, ALPHA = 3.4, 1.0, 10.0


def brusselator(n):
    """The right-hand side as a function of the flat state (u, v interleaved)."""
    scale = ALPHA * (n - 1) ** 2

    def laplacian(w):
        return (ak.cat([w[-1:], w[:-1]], 0) + ak.cat([w[1:], w[:1]], 0)
                + ak.cat([w[:, -1:], w[:, :-1]], 1) + ak.cat([w[:, 1:], w[:, :1]], 1) - 4 * w)

    def rhs(state):
        s = state.reshape(n, n, 2)
        u, v = s[..., 0], s[..., 1]
        uuv = u * u * v
        du = scale * laplacian(u) + B + uuv - (A + 1) * u
        dv = scale * laplacian(v) + A * u - uuv
        return ak.stack([du, dv], -1).reshape(-1)
    return rhs


def state(n):
    """A smooth, reproducible point (the initial condition of the documentation)."""
    xs = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(xs, xs, indexing="ij")
    u = 22.0 * (y * (1 - y)) ** 1.5
    v = 27.0 * (x * (1 - x)) ** 1.5
    return ak.tensor(np.stack([u, v], axis=-1).reshape(-1))


def measure(n, dense_up_to, repeats):
    f, x = brusselator(n), state(n)
    row = {"N": n, "unknowns": 2 * n * n}
    row["detect"] = median_seconds(lambda: ak.func.jacobian_sparsity(f, x), repeats)
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
           ("detect", "{:>8.4f}"), ("color", "{:>8.4f}"), ("jvp", "{:>8.4f}"),
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

"""The 2-D Brusselator's Jacobian: dense forward mode against sparsity detection, coloring
and compressed forward mode (adkit), with jax.jit's dense jacfwd beside them.

    python papers/sparse_jacobians/brusselator.py [--sizes 8,16,32,64,128] [--no-jax]
                                                  [--svg PATH]

The problem is the one in the documentation of Julia's SparseDiffTools (Gowda, Ma,
Rackauckas et al.): u and v on an N x N periodic grid of [0, 1]^2 (2 N^2 unknowns), with

    du = alpha (L u) + B + u^2 v - (A + 1) u + f(x, y)
    dv = alpha (L v) + A u - u^2 v

L the 5-point Laplacian, alpha = 10 / dx^2, A = 3.4, B = 1, f a constant forcing (it does
not change the Jacobian). Each residual reads 5 grid values of its own field and one of
the other: at most 6 nonzeros per row of a 2N^2 x 2N^2 Jacobian.

Printed per N: unknowns, nonzeros, colors, pattern detection time (tracing f, and the
sparsity pass over the graph), one eager jvp, dense
ak.func.jacfwd (up to N = 32: it costs one jvp per unknown), the jitted sparse Jacobian
(ak.jit(ak.func.sparse_jacobian(f))), their ratio, and jax.jit(jax.jacfwd(f)) (in a
subprocess: jax's LLVM must not share a process with llvmlite's). Writes
brusselator.svg beside this file (or --svg PATH): time against unknowns, log-log.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
A, B, ALPHA = 3.4, 1.0, 10.0


def grid_data(n):
    """The state (u, v stacked: shape (n, n, 2)) the Jacobian is taken at, and the
    forcing, both as numpy arrays (a smooth, reproducible point)."""
    xs = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(xs, xs, indexing="ij")
    u = 22.0 * (y * (1 - y)) ** 1.5
    v = 27.0 * (x * (1 - x)) ** 1.5
    forcing = 5.0 * (((x - 0.3) ** 2 + (y - 0.6) ** 2) <= 0.1 ** 2)
    return np.stack([u, v], axis=-1).reshape(-1), forcing


def residual(lib, state, forcing):
    """The Brusselator's right-hand side, written once for any numpy-like `lib`
    (adkit or jax.numpy): state flat (2 n^2,), result flat."""
    n = forcing.shape[0]
    s = state.reshape(n, n, 2)
    u, v = s[:, :, 0], s[:, :, 1]
    alpha = ALPHA * (n - 1) ** 2  # alpha / dx^2, dx = 1 / (n - 1)

    def laplacian(w):
        return (_roll(lib, w, 1, 0) + _roll(lib, w, -1, 0) + _roll(lib, w, 1, 1) +
                _roll(lib, w, -1, 1) - 4 * w)
    uuv = u * u * v
    du = alpha * laplacian(u) + B + uuv - (A + 1) * u + forcing
    dv = alpha * laplacian(v) + A * u - uuv
    return lib.stack([du, dv], -1).reshape(-1)


def _roll(lib, w, shift, axis):
    """Periodic shift by one along axis (cat of two slices: every lib has it)."""
    if axis == 0:
        parts = (w[-1:], w[:-1]) if shift == 1 else (w[1:], w[:1])
    else:
        parts = (w[:, -1:], w[:, :-1]) if shift == 1 else (w[:, 1:], w[:, :1])
    return lib.concatenate(parts, axis)


class AdkitLib:
    def __init__(self, ak):
        self.stack = ak.stack
        self.concatenate = lambda parts, axis: ak.cat(list(parts), axis)


def adkit_residual(n):
    """The residual on an n x n grid as an adkit function of the flat state (what
    benchmarks/sparse_jacobians.py and tests/test_sparsity.py differentiate)."""
    import adkit as ak
    lib, forcing = AdkitLib(ak), ak.tensor(grid_data(n)[1])
    return lambda state: residual(lib, state, forcing)


def _best(fn, repeats=5, budget=3.0):
    fn()
    samples, start = [], time.perf_counter()
    while len(samples) < repeats and (not samples or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return min(samples)


def _in_turns(fns, rounds=7, calls=5):
    """The best time per call of each fn, the fns taking turns in every round."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], (time.perf_counter() - t0) / calls)
    return best


def run_adkit(n, dense_up_to):
    import adkit as ak
    state, forcing = grid_data(n)
    lib, forcing_t, x = AdkitLib(ak), ak.tensor(forcing), ak.tensor(state)

    def f(s):
        return residual(lib, s, forcing_t)
    pattern = ak.func.jacobian_sparsity(f, x)
    colors = ak.ir.passes.color(pattern, "column")
    sparse = ak.jit(ak.func.sparse_jacobian(f), compile="eager")  # native from the start
    matrix = sparse(x)
    row = {"n": n, "unknowns": 2 * n * n, "nnz": int(pattern.nnz),
           "colors": int(colors.max()) + 1, "sparse_s": _best(lambda: sparse(x)),
           **_child(n, "--detect-child")}
    if n <= dense_up_to:
        dense = ak.func.jacfwd(f)
        row["dense_s"] = _best(lambda: dense(x), repeats=1)
        assert np.allclose(matrix.todense(), dense(x).numpy(), rtol=1e-12, atol=1e-9)
    return row


def run_detection(n):
    """Detection (tracing f, then the sparsity pass over its graph) against one eager
    jvp, in a process that has done nothing else: in one that has made large
    allocations (dense jacfwd), the allocator hands memory back warm and flatters
    whatever allocates most. Each is timed warm, the three taking turns (this
    machine's speed drifts)."""
    import adkit as ak
    state, forcing = grid_data(n)
    lib, forcing_t, x = AdkitLib(ak), ak.tensor(forcing), ak.tensor(state)

    def f(s):
        return residual(lib, s, forcing_t)
    graph = ak.trace(f, x)
    trace_s, pass_s, jvp_s = _in_turns([lambda: ak.trace(f, x),
                                        lambda: ak.ir.passes.sparsity(graph),
                                        lambda: ak.func.jvp(f, (x,), (x,))], rounds=9)
    return {"trace_s": trace_s, "pass_s": pass_s, "jvp_s": jvp_s}


def run_jax(n):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    state, forcing = grid_data(n)
    forcing = jnp.asarray(forcing)
    jac = jax.jit(jax.jacfwd(lambda s: residual(jnp, s, forcing)))
    x = jnp.asarray(state)
    return {"jax_dense_s": _best(lambda: jac(x).block_until_ready())}


def _child(n, flag="--jax-child"):
    out = subprocess.run([sys.executable, __file__, flag, str(n)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        if flag != "--jax-child":  # jax may be missing; adkit may not
            raise RuntimeError(out.stderr)
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def write_svg(rows, path):
    """Time against unknowns, log-log: dense jacfwd, sparse jitted, jax dense."""
    series = [("dense ak.func.jacfwd", "dense_s", "#c0392b"),
              ("sparse (jit)", "sparse_s", "#2471a3"), ("jax.jit(jacfwd)", "jax_dense_s",
                                                         "#7d3c98")]
    points = [(r["unknowns"], r[key]) for r in rows for _, key, _ in series if r.get(key)]
    xs, ys = np.log10([p[0] for p in points]), np.log10([p[1] for p in points])
    x0, x1, y0, y1 = xs.min() - 0.1, xs.max() + 0.1, ys.min() - 0.3, ys.max() + 0.3

    def at(u, t):
        return 60 + (np.log10(u) - x0) / (x1 - x0) * 480, 340 - (np.log10(t) - y0) / (y1 - y0) * 300
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="600" height="400">',
           '<rect width="600" height="400" fill="white"/>',
           '<text x="300" y="20" text-anchor="middle">Brusselator Jacobian: time (s) '
           'against unknowns, log-log</text>']
    for k, (label, key, colour) in enumerate(series):
        pts = [at(r["unknowns"], r[key]) for r in rows if r.get(key)]
        if pts:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        out.append(f'<text x="70" y="{40 + 16 * k}" fill="{colour}">{label}</text>')
    for power in range(int(np.ceil(y0)), int(np.floor(y1)) + 1):  # the time axis
        _, y = at(10 ** x0, 10.0 ** power)
        out.append(f'<line x1="60" x2="540" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="55" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
                   f'1e{power}</text>')
    for r in rows:
        x, _ = at(r["unknowns"], 10 ** y0)
        out.append(f'<text x="{x:.1f}" y="390" font-size="10" text-anchor="middle">'
                   f'{r["unknowns"]}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8,16,32,64,128")
    parser.add_argument("--dense-up-to", type=int, default=32)
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--svg", default=os.path.join(HERE, "brusselator.svg"))
    parser.add_argument("--jax-child")
    parser.add_argument("--detect-child")
    args = parser.parse_args()
    if args.jax_child or args.detect_child:
        run = run_jax if args.jax_child else run_detection
        print(json.dumps(run(int(args.jax_child or args.detect_child))))
        return
    rows = []
    print("| N | unknowns | nonzeros | colors | trace ms | sparsity pass ms | one jvp ms | "
          "pass / jvp | dense jacfwd ms | sparse jit ms | dense / sparse | "
          "jax.jit dense jacfwd ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in map(int, args.sizes.split(",")):
        row = run_adkit(n, args.dense_up_to)
        if not args.no_jax and n <= 64:
            row.update(_child(n))
        rows.append(row)
        ratio = f"{row['dense_s'] / row['sparse_s']:.0f}x" if row.get("dense_s") else "-"
        print(f"| {n} | {row['unknowns']} | {row['nnz']} | {row['colors']} | "
              f"{_ms(row['trace_s'])} | {_ms(row['pass_s'])} | {_ms(row['jvp_s'])} | "
              f"{row['pass_s'] / row['jvp_s']:.2f} | "
              f"{_ms(row.get('dense_s'))} | "
              f"{_ms(row['sparse_s'])} | {ratio} | {_ms(row.get('jax_dense_s'))} |")
    write_svg(rows, args.svg)


if __name__ == "__main__":
    main()

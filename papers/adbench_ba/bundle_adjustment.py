"""ADBench's bundle adjustment: the objective (every observation's residuals) and its
Jacobian (one 3 x 15 block per observation) at the published sizes ba1-ba5, adkit
beside jax and PyTorch (and HIPS autograd on a tiny problem), with the Jacobian /
objective ratio the paper plots.

    python papers/adbench_ba/bundle_adjustment.py [--sizes ba1,ba2,ba3,ba4,ba5]
        [--frameworks adkit,jax,torch] [--rounds 3] [--svg PATH] [--quick]

The residuals are ADBench's (benchmarks/ba.py writes one observation's once over a
small namespace): w (project(camera, point) - feature) and 1 - w^2. Every framework
computes them the same way, in one compiled function where it can: gather each
observation's camera and point (`cams[obs_cam]`: traced integer indices), then vmap of
the residual (objective) or of its jacrev (the Jacobian's blocks). Data as ADBench's
generator makes them (one camera/point/feature replicated, benchmarks/ba_jit.py).
Each framework runs in its own subprocess, the frameworks taking turns over --rounds;
medians in ms. With --sparse ba1, also the sparse Jacobian machinery (detection,
coloring, compressed jvps) on the whole residual vector, for comparison.
Writes ba.svg: Jacobian / objective per size and framework.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "papers")]

from _timing import best_seconds, in_turns, run_child  # noqa: E402  (benchmarks/_timing.py)
from ba import Lib, _data, one_observation  # noqa: E402  (benchmarks/ba.py)

SIZES = {  # ADBench's data files: ba{k}_n{cameras}_m{points}_p{observations}
    "ba1": (49, 7776, 31843), "ba2": (21, 11315, 36455), "ba3": (161, 48126, 182072),
    "ba4": (372, 47423, 204472), "ba5": (257, 65132, 225911),
    "tiny": (5, 40, 200),  # for --quick and the smoke test
}



def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def adkit_pair(size):
    import adkit as ak
    args, lib = _data(size, ak.tensor), Lib(ak)

    def residual(c, x, w, f):
        return one_observation(lib, c, x, w, f)
    jac = ak.func.jacrev(residual, argnums=(0, 1, 2))

    def objective(cams, x, w, obs_cam, obs_pt, feats):
        return ak.func.vmap(residual)(cams[obs_cam], x[obs_pt], w, feats)

    def blocks(cams, x, w, obs_cam, obs_pt, feats):
        return ak.func.vmap(jac)(cams[obs_cam], x[obs_pt], w, feats)
    objective, blocks = ak.jit(objective, compile="eager"), ak.jit(blocks, compile="eager")
    return (lambda: objective(*args)), (lambda: blocks(*args))


def jax_pair(size):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    args, lib = _data(size, jnp.asarray), Lib(jnp)

    def residual(c, x, w, f):
        return one_observation(lib, c, x, w, f)
    jac = jax.jacrev(residual, argnums=(0, 1, 2))
    objective = jax.jit(lambda cams, x, w, oc, op, f: jax.vmap(residual)(cams[oc], x[op], w, f))
    blocks = jax.jit(lambda cams, x, w, oc, op, f: jax.vmap(jac)(cams[oc], x[op], w, f))
    return (lambda: jax.block_until_ready(objective(*args))), \
        (lambda: jax.block_until_ready(blocks(*args)))


def torch_pair(size):
    import torch
    torch.set_num_threads(1)
    args, lib = _data(size, torch.tensor), Lib(torch)

    def residual(c, x, w, f):
        return one_observation(lib, c, x, w, f)
    jac = torch.func.jacrev(residual, argnums=(0, 1, 2))

    def objective():
        cams, x, w, oc, op, f = args
        return torch.func.vmap(residual)(cams[oc], x[op], w, f)

    def blocks():
        cams, x, w, oc, op, f = args
        return torch.func.vmap(jac)(cams[oc], x[op], w, f)
    return objective, blocks


def autograd_pair(size):
    """HIPS autograd has no vmap: a Python loop over the observations, one
    autograd.jacobian per block, as ADBench's autograd tool computes them."""
    import autograd.numpy as anp
    from autograd import jacobian
    cams, x, w, obs_cam, obs_pt, feats = _data(size, np.asarray)
    lib = Lib(anp)

    def residual(c, p, wi, f):
        return one_observation(lib, c, p, wi, f)
    jacs = [jacobian(residual, argnum) for argnum in (0, 1, 2)]

    def objective():
        return [residual(cams[c], x[p], w[k], feats[k])
                for k, (c, p) in enumerate(zip(obs_cam, obs_pt))]

    def blocks():
        return [[j(cams[c], x[p], w[k], feats[k]) for j in jacs]
                for k, (c, p) in enumerate(zip(obs_cam, obs_pt))]
    return objective, blocks


PAIRS = {"adkit": adkit_pair, "jax": jax_pair, "torch": torch_pair,
         "autograd": autograd_pair}
# HIPS autograd's loop costs 4-12 ms per observation's block (nine reverse sweeps in
# Python; measured under different loads): 2-7 minutes per Jacobian at ba1. It is
# timed once (it compiles nothing), on problems of up to this many observations: the
# tiny one
AUTOGRAD_UP_TO = 1_000


def child(framework, name):
    if framework == "sparse":
        return sparse_row(name)
    objective, blocks = PAIRS[framework](SIZES[name])
    timed = _once if framework == "autograd" else best_seconds
    objective_s, jacobian_s = timed(objective), timed(blocks)
    return {"objective_ms": objective_s * 1e3, "jacobian_ms": jacobian_s * 1e3,
            "ratio": jacobian_s / objective_s}


def sparse_row(name):
    """The sparse Jacobian machinery on the whole residual vector (the pattern detected
    on the traced graph, column coloring, compressed jvps, all under ak.jit): colors,
    detection, coloring, first call and steady call, beside the objective."""
    import adkit as ak
    cams, x, w, obs_cam, obs_pt, feats = _data(SIZES[name], ak.tensor)
    lib = Lib(ak)
    one = ak.func.vmap(lambda c, p, wi, f: one_observation(lib, c, p, wi, f))

    def residuals(cams, x, w):
        return one(cams[obs_cam], x[obs_pt], w, feats).reshape(-1)
    t0 = time.perf_counter()
    pattern = ak.func.jacobian_sparsity(residuals, cams, x, w, argnums=(0, 1, 2))
    t1 = time.perf_counter()
    colors = int(ak.ir.passes.color(pattern, "column").max()) + 1
    t2 = time.perf_counter()
    jacobian = ak.jit(ak.func.sparse_jacobian(residuals, argnums=(0, 1, 2)), compile="eager")
    t3 = time.perf_counter()
    jacobian(cams, x, w)
    first = time.perf_counter() - t3
    objective = ak.jit(residuals, compile="eager")
    return {"colors": colors, "nnz": pattern.nnz, "detect_s": t1 - t0, "color_s": t2 - t1,
            "first_s": first, "jacobian_ms": best_seconds(lambda: jacobian(cams, x, w)) * 1e3,
            "objective_ms": best_seconds(lambda: objective(cams, x, w)) * 1e3}


def _print_sparse(name):
    r = run_child(__file__, ["--child", "sparse", name])
    if "error" in r:
        print(f"sparse Jacobian on {name}: error: {r['error']}")
        return
    print(f"sparse Jacobian of {name}'s whole residual vector: {r['nnz']} nonzeros, "
          f"{r['colors']} colors; detection {r['detect_s']:.2f} s, coloring "
          f"{r['color_s']:.2f} s, first call {r['first_s']:.1f} s; steady "
          f"{r['jacobian_ms']:.3g} ms = {r['jacobian_ms'] / r['objective_ms']:.0f} "
          "objectives (the blocks above are the better tool here)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,ba1,ba2,ba3,ba4,ba5")
    parser.add_argument("--frameworks", default="adkit,jax,torch,autograd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--svg", default=os.path.join(HERE, "ba.svg"))
    parser.add_argument("--quick", action="store_true", help="a tiny problem, one round")
    parser.add_argument("--sparse", default="",
                        help="also run the sparse Jacobian machinery on this problem "
                             "(ba1: a few seconds)")
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        import json
        print(json.dumps(child(*args.child)))
        return
    if args.quick:
        args.sizes, args.rounds = "tiny", 1
    print("| problem | cameras | points | observations | framework | objective ms | "
          "Jacobian ms | Jacobian / objective |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.sizes.split(","):
        n, m, p = SIZES[name]
        frameworks = [f for f in args.frameworks.split(",")
                      if f != "autograd" or p <= AUTOGRAD_UP_TO]
        merged, _ = in_turns(lambda f: run_child(__file__, ["--child", f, name]),
                             frameworks, args.rounds, "jacobian_ms")
        for f in frameworks:
            r = merged[f]
            if "error" in r:
                print(f"| {name} | {n} | {m} | {p} | {f} | error: {r['error']} | | |")
                continue
            rows.append({"problem": name, "framework": f, **r})
            print(f"| {name} | {n} | {m} | {p} | {f} | {r['objective_ms']:.3g} | "
                  f"{r['jacobian_ms']:.3g} | {r['ratio']:.2f} |", flush=True)
    if args.sparse or args.quick:
        _print_sparse(args.sparse or "tiny")
    from ratio_bars import write_svg  # noqa: PLC0415  (papers/ratio_bars.py)
    write_svg(rows, args.svg, "ADBench BA: Jacobian / objective (published: hand-written "
              "about 7, Tapenade about 9)", published=7.0, size_label=lambda r: r["problem"])
    print(f"wrote {args.svg}")


if __name__ == "__main__":
    main()

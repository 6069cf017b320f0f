"""Optimizing before differentiating, as an ablation on adkit's IR: the reverse-mode
graph of a program optimized before `vjp` (and after) against the same program's
gradient optimized only after `vjp`, and against no optimization at all.

    python papers/enzyme_optimize_first/ablation.py [--workloads gmm,lstm,ba,chain]
        [--repeats 20] [--quick]

After Moses & Churavy, "Instead of rewriting foreign code for machine learning,
automatically synthesize fast gradients" (NeurIPS 2020), whose ablation runs LLVM's
optimizations before Enzyme's AD or only after it. Here the passes are adkit's and the
AD is `ak.ir.passes.vjp` on the traced graph:
- `none`: vjp(trace), compiled with no pass at all (`ak.jit(..., passes=[])`);
- `after`: vjp(trace), then jit's pipeline (DEFAULT_PIPELINE: inlining, simplify,
  decompose, fold, cse, dce, loop hoisting, fusion);
- `before`: the clean-up passes (DEFAULT_PIPELINE without fusion) on the traced
  program, then vjp, then jit's pipeline;
- `before-whole`: the same without `decompose`, so that ops reach vjp whole (their
  own derivative rules, not their parts').
Printed per workload: op nodes of the vjp graph before and after the pipeline, and the
steady time of the compiled gradient (ms), with the ratios after / before.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "papers", "adbench_gmm"), os.path.join(ROOT, "benchmarks")]


def gmm_workload(ak, size="small"):
    import gmm
    data = gmm.config_data(size)
    d, k, n = gmm.CONFIGS[size]
    ns = gmm.AdkitNs()
    layout = gmm.make_layout(ns, d, k, n, data["gamma"], data["m"])
    args = (ak.tensor(data["alphas"]), ak.tensor(data["means"]), ak.tensor(data["icf"]))
    x = ak.tensor(data["x"])
    return (lambda a, mu, icf: gmm.objective(ns, (a, mu, icf), x, data["gamma"], data["m"],
                                             layout)), args


def lstm_workload(ak):
    import loops
    main, extra, state, seq = (ak.tensor(a) for a in loops.lstm_data(np.random.default_rng(0)))
    lib = loops._AkLib(ak)
    return (lambda m, e: loops.lstm_objective(lib, ak.scan, m, e, state, seq)), (main, extra)


def ba_workload(ak, observations=2000):
    import ba
    import ba_jit
    cams, x, w, obs_cam, obs_pt, feats = ba_jit.make_data(observations // 20,
                                                          observations // 4, observations)
    lib = ba.Lib(ak)
    one = ak.func.vmap(lambda c, p, wi, f: ba.one_observation(lib, c, p, wi, f))

    def squared_residuals(cams, x, w):
        return (one(cams[obs_cam], x[obs_pt], w, feats) ** 2).sum()
    return squared_residuals, (cams, x, w)


def chain_workload(ak, n=100_000):
    """A loop-free chain with work that only optimization removes: exp(log(x)), x * 1,
    a common subexpression computed twice."""
    def f(x):
        y = ak.exp(ak.log(x * x + 1.0)) * 1.0
        a, b = ak.sin(y) * ak.cos(y), ak.sin(y) * ak.cos(y)
        return (a + b + y * 0.0).sum()
    return f, (ak.tensor(np.random.default_rng(0).random(n)),)


VARIANTS = ("none", "after", "before", "before-whole")
def bruss_workload(ak, n=32):
    """The 2-D Brusselator's right-hand side (papers/sparse_jacobians), squared and
    summed: a stencil of shifted slices and cats, as in Enzyme's Brusselator benchmark."""
    sys.path.insert(0, os.path.join(ROOT, "papers", "sparse_jacobians"))
    import brusselator
    f = brusselator.adkit_residual(n)
    return (lambda s: (f(s) ** 2).sum()), (ak.tensor(brusselator.grid_data(n)[0]),)


def ode_workload(ak, steps=25, h=0.04):
    """An explicit Runge-Kutta 4 integration of a Lotka-Volterra system over a batch of
    initial states, unrolled in Python (each stage recomputes shared terms, the kind of
    code an optimizer simplifies), the loss the final states' sum of squares."""
    a, b, c, d = 1.5, 1.0, 3.0, 1.0

    def rhs(y):
        u, v = y[:, 0], y[:, 1]
        return ak.stack([a * u - b * u * v, -c * v + d * u * v], 1)

    def f(y):
        for _ in range(steps):
            k1 = rhs(y)
            k2 = rhs(y + h / 2 * k1)
            k3 = rhs(y + h / 2 * k2)
            k4 = rhs(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return (y * y).sum()
    return f, (ak.tensor(np.random.default_rng(0).random((256, 2)) + 0.5),)


WORKLOADS = {"gmm": gmm_workload, "lstm": lstm_workload, "ba": ba_workload,
             "chain": chain_workload, "bruss": bruss_workload, "ode": ode_workload}


def derived(ak, f, args, variant):
    """(vjp graph, passes jit runs on it) for one variant."""
    passes = ak.ir.passes
    cleanup = [p for p in passes.DEFAULT_PIPELINE if p is not passes.fuse]
    graph = ak.trace(f, *args)
    if variant == "before":
        graph = passes.pipeline(cleanup)(graph)
    if variant == "before-whole":
        graph = passes.pipeline([p for p in cleanup if p is not passes.decompose])(graph)
    return passes.vjp(graph), ([] if variant == "none" else list(passes.DEFAULT_PIPELINE))


def op_nodes(graph):
    return len(graph.op_nodes())


def measure(ak, name, repeats):
    f, args = WORKLOADS[name](ak)
    value = f(*args)
    cotangent = ak.ones_like(value)
    rows = {}
    for variant in VARIANTS:
        graph, pipeline = derived(ak, f, args, variant)
        compiled = ak.jit(lambda *a, g=graph: g(*a), passes=pipeline, compile="eager")
        inputs = (*args, cotangent)
        result = compiled(*inputs)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            compiled(*inputs)
            best = min(best, time.perf_counter() - t0)
        rows[variant] = {"vjp_nodes": op_nodes(graph),
                         "final_nodes": op_nodes(compiled.lower(*inputs)),
                         "ms": best * 1e3, "grads": [r.numpy() for r in result[1:]]}
    for variant in VARIANTS:  # the same gradient every way
        for got, want in zip(rows[variant]["grads"], rows["after"]["grads"]):
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="chain and gmm only, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.workloads, args.repeats = "chain,gmm", 3
    import adkit as ak
    print("| workload | vjp nodes (none / after / before / before-whole) | compiled nodes "
          "(same order) | ms none | ms after | ms before | ms before-whole | "
          "after / before | after / before-whole |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.workloads.split(","):
        r = measure(ak, name, args.repeats)
        nodes = " / ".join(str(r[v]["vjp_nodes"]) for v in VARIANTS)
        final = " / ".join(str(r[v]["final_nodes"]) for v in VARIANTS)
        times = " | ".join(f"{r[v]['ms']:.3g}" for v in VARIANTS)
        print(f"| {name} | {nodes} | {final} | {times} | "
              f"{r['after']['ms'] / r['before']['ms']:.2f} | "
              f"{r['after']['ms'] / r['before-whole']['ms']:.2f} |", flush=True)


if __name__ == "__main__":
    main()

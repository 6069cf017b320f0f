"""Gradients at the cheap-gradient bound (issue 16, parts 3 and 5), adkit.jit beside
jax.jit and numpy, in rounds where the frameworks take turns.

    python benchmarks/grad_bound.py [--rounds 5] [--cases gmm-small,...,mlp]

gmm-<size>: ADBench's GMM (papers/adbench_gmm; sizes small, medium, large and d64k10 =
d 64, K 10, n 10,000): the objective and objective + gradient of each tool, timed in one
process; printed: medians over the rounds, and the median and range of the per-round
ratios gradient / objective (the paper's measure) and gradient / jax.jit's gradient.
mlp: jit_vs_jax.py's case d (two tanh layers of 256, batch 128, float64), forward +
backward, and the same process timing the eight matrix products the gradient needs
alone, jitted by the same framework (numpy: np.matmul; OpenBLAS on one thread, as ak.jit
runs its products): the ratio is the AD overhead over that floor.
numpy's MLP row is a hand-derived gradient. Each (framework, case) runs in a subprocess
of its own per round: jax's and llvmlite's LLVMs must not share a process.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _timing import run_child  # noqa: E402

CASES = ["gmm-small", "gmm-medium", "gmm-large", "gmm-d64k10", "mlp"]
FRAMEWORKS = {"gmm": ["adkit", "jax"], "mlp": ["adkit", "jax", "numpy"]}
GMM_SIZES = {"d64k10": (64, 10, 10000)}  # beside papers/adbench_gmm's CONFIGS


def _median(fn, min_seconds=0.3, min_calls=5):
    """Median time of fn() over at least min_calls calls and min_seconds, after one."""
    fn()
    samples, start = [], time.perf_counter()
    while len(samples) < min_calls or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def gmm_case(framework, size):
    sys.path.insert(0, os.path.join(HERE, "..", "papers", "adbench_gmm"))
    import gmm
    d, k, n = GMM_SIZES.get(size) or gmm.CONFIGS[size]
    tool = {"adkit": "adkit-jit", "jax": "jax-jit"}[framework]
    objective, value_and_grad, _ = gmm.make_tool(tool, gmm.generate(d, k, n))
    objective()
    value_and_grad()
    _wait_for_compiles(framework)
    return {"objective": _median(objective), "gradient": _median(value_and_grad)}


def _wait_for_compiles(framework):
    """adkit's first calls may run on numpy while LLVM compiles in the background."""
    if framework == "adkit":
        try:
            from adkit.codegen import background
        except ImportError:
            return
        background.wait()


def _mlp_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 64))
    ws = [rng.standard_normal((64, 256)) * 0.1, rng.standard_normal((256, 256)) * 0.1,
          rng.standard_normal((256, 10)) * 0.1]
    return x, ws


def _numpy_mlp_grad(ws, x):
    """Hand-derived gradient of mean((tanh(tanh(x W0) W1) W2)^2) in the weights."""
    h1 = np.tanh(x @ ws[0])
    h2 = np.tanh(h1 @ ws[1])
    out = h2 @ ws[2]
    g_out = out * (2.0 / out.size)
    g_h2 = (g_out @ ws[2].T) * (1.0 - h2 * h2)
    g_h1 = (g_h2 @ ws[1].T) * (1.0 - h1 * h1)
    return x.T @ g_h1, h1.T @ g_h2, h2.T @ g_out


def _products(mm, ws, x, a, b, c, o):
    """The gradient's eight matrix products (mm: the framework's matmul), on arrays of
    their shapes: a = x W0, b = tanh(a), c = tanh(b W1), o = c W2."""
    t = lambda m: m.T  # noqa: E731
    return (mm(x, ws[0]), mm(b, ws[1]), mm(c, ws[2]),                        # forward
            mm(o, t(ws[2])), mm(t(c), o), mm(a, t(ws[1])), mm(t(b), a), mm(t(x), a))


def _product_operands(ws, x):
    a = x @ ws[0]
    b = np.tanh(a)
    c = np.tanh(b @ ws[1])
    return a, b, c, c @ ws[2]


def _one_blas_thread():
    """numpy's OpenBLAS on one thread in this process (as ak.jit runs its products):
    on 2 shared cores its threads' spin-waits make small products 10-100x slower."""
    import ctypes
    import glob
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs",
                                  "*openblas*"))
    for lib in (ctypes.CDLL(path) for path in libs):
        # the process's count, and this thread's (which OpenBLAS reads first)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads_local"):
            if hasattr(lib, name):
                getattr(lib, name)(1)


def mlp_case(framework):
    """Forward + backward, and the framework's own (jitted) products alone, its floor."""
    _one_blas_thread()
    x, ws = _mlp_data()
    operands = _product_operands(ws, x)
    if framework == "numpy":
        run = lambda: _numpy_mlp_grad(ws, x)  # noqa: E731
        floor = lambda: _products(np.matmul, ws, x, *operands)  # noqa: E731
    elif framework == "jax":
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        f = jax.jit(jax.grad(lambda ws, x: jnp.mean((jnp.tanh(jnp.tanh(x @ ws[0]) @ ws[1])
                                                      @ ws[2]) ** 2)))
        p = jax.jit(lambda ws, x, *ops: _products(jnp.matmul, ws, x, *ops))
        jws, jx, jops = [jnp.asarray(w) for w in ws], jnp.asarray(x), \
            [jnp.asarray(o) for o in operands]
        run = lambda: [g.block_until_ready() for g in f(jws, jx)]  # noqa: E731
        floor = lambda: [r.block_until_ready() for r in p(jws, jx, *jops)]  # noqa: E731
    else:
        import adkit as ak
        f = ak.jit(ak.func.grad(lambda ws, x: ((((x @ ws[0]).tanh() @ ws[1]).tanh()
                                                @ ws[2]) ** 2).mean()))
        p = ak.jit(lambda ws, x, *ops: _products(ak.matmul, ws, x, *ops))
        aws, ax, aops = [ak.tensor(w) for w in ws], ak.tensor(x), \
            [ak.tensor(o) for o in operands]
        run = lambda: f(aws, ax)  # noqa: E731
        floor = lambda: p(aws, ax, *aops)  # noqa: E731
    run()
    floor()
    _wait_for_compiles(framework)
    # the two alternate so that both see the same drift of the machine's speed
    pairs = [(_median(run, 0.1), _median(floor, 0.1)) for _ in range(3)]
    return {"gradient": statistics.median(p for p, _ in pairs),
            "matmuls": statistics.median(m for _, m in pairs),
            "ratio": statistics.median(p / m for p, m in pairs)}


def worker(framework, case):
    try:
        if case == "mlp":
            out = mlp_case(framework)
        else:
            out = gmm_case(framework, case.split("-", 1)[1])
    except ImportError as e:
        out = {"error": f"missing: {e}"}
    print(json.dumps(out), flush=True)


def _range(values):
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def report(case, runs):
    """One line per framework: medians over the rounds and per-round ratios."""
    jax = runs.get("jax")
    for name, rs in runs.items():
        if any("error" in r for r in rs):
            print(f"{case:<12}{name:<8}{next(r['error'] for r in rs if 'error' in r)}")
            continue
        grad = statistics.median(r["gradient"] for r in rs) * 1e3
        if case == "mlp":
            mm = statistics.median(r["matmuls"] for r in rs) * 1e3
            line = f"{grad:>9.3f}{mm:>12.3f}{_range([r['ratio'] for r in rs]):>20}"
        else:
            obj = statistics.median(r["objective"] for r in rs) * 1e3
            line = f"{grad:>9.3f}{obj:>12.3f}" \
                   f"{_range([r['gradient'] / r['objective'] for r in rs]):>20}"
        if jax and not any("error" in r for r in jax):
            line += f"{_range([r['gradient'] / j['gradient'] for r, j in zip(rs, jax)]):>20}"
        print(f"{case:<12}{name:<8}{line}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CASE"))
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {os.cpu_count()} CPUs, load {load:.2f} at start; {args.rounds} rounds, "
          "frameworks taking turns; ratios: median [min-max] of the rounds'")
    print(f"{'case':<12}{'':<8}{'grad ms':>9}{'obj|mm ms':>12}{'grad/obj|mm':>20}"
          f"{'grad / jax':>20}")
    for case in args.cases.split(","):
        frameworks = FRAMEWORKS[case.split("-")[0]]
        runs = {f: [] for f in frameworks}
        for _ in range(args.rounds):
            for f in frameworks:
                # no on-disk compile cache in the children: every round compiles afresh
                runs[f].append(run_child(os.path.abspath(__file__), ["--worker", f, case],
                                         ADKIT_DISABLE_CACHE="1"))
        report(case, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory saved by recomputation on a deep chain: the `remat` pass on a vjp graph,
and `ak.checkpoint` in eager mode, each against the plain computation, with the time
they cost.

    python benchmarks/checkpoint_memory.py [--repeats 3] [--ops 200] [--size 100000]

The chain: `--ops` elementwise ops (sin, *1.01, tanh, +0.5, repeated) on a float64
vector of `--size` elements, then a sum. Reported: medians over repeats.
- IR: the vjp graph (ak.ir.passes.vjp) run by `run_freeing` below, an interpreter that
  frees each value after its last use and counts the peak of live bytes (ndarray bytes,
  each buffer once, inputs included); "keeps all" frees nothing, like ak.ir's `run`.
- eager: forward + backward, peak traced by tracemalloc (numpy reports its buffers to
  it), without and with `ak.checkpoint` on every segment of `--segment` ops.
"""
import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import adkit as ak  # noqa: E402
from adkit.func.checkpoint import checkpoint  # noqa: E402
from adkit.ir import evaluate  # noqa: E402
from adkit.ir.passes import vjp  # noqa: E402
from adkit.ir.passes.remat import remat  # noqa: E402

STEPS = (lambda y: y.sin(), lambda y: y * 1.01, lambda y: y.tanh(), lambda y: y + 0.5)


def segment(y, start, stop):
    """Ops number start..stop-1 of the chain."""
    for i in range(start, stop):
        y = STEPS[i % len(STEPS)](y)
    return y


def chain(x, n_ops, every=None, **options):
    """The chain, each segment of `every` ops checkpointed (None: plain)."""
    y = x
    for start in range(0, n_ops, every or n_ops):
        stop = min(n_ops, start + (every or n_ops))
        y = checkpoint(segment, y, start, stop, **options) if every \
            else segment(y, start, stop)
    return y.sum()


# ---------------------------------------------------------------- the freeing interpreter
def _owner(arr):
    """The ndarray that owns the buffer `arr` looks into (views count once)."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


class LiveBytes:
    """Bytes of the distinct buffers held, and the peak of that sum."""

    def __init__(self):
        self.refs, self.now, self.peak = {}, 0, 0

    def hold(self, tensor):
        owner = _owner(tensor._data)
        entry = self.refs.setdefault(id(owner), [owner.nbytes, 0])
        if entry[1] == 0:
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1

    def drop(self, tensor):
        key = id(_owner(tensor._data))
        entry = self.refs[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.refs[key]


def _last_uses(graph, order):
    """{position in order: nodes whose values die after the node at that position}."""
    position = {n: i for i, n in enumerate(order)}
    dying = {}
    for n in order:
        last = max((position[v] for v in graph.nx.successors(n)), default=position[n])
        dying.setdefault(last, []).append(n)
    return dying


def run_freeing(graph, inputs, free=True):
    """Evaluate node by node (in the graph's topological order, without autograd),
    dropping each value after its last reader when `free`; returns (outputs, peak live
    bytes)."""
    order = graph.topo_order()
    dying = _last_uses(graph, order) if free else {}
    env, outputs, live = {}, {}, LiveBytes()
    with ak.no_grad():
        for i, n in enumerate(order):
            data = graph.nx.nodes[n]
            env[n] = _value(graph, n, data, env, inputs, outputs)
            for t in env[n]:
                live.hold(t)
            for m in dying.get(i, ()):
                for t in env.pop(m):
                    live.drop(t)
    return [outputs[i] for i in range(len(outputs))], live.peak


def _value(graph, n, data, env, inputs, outputs):
    kind = data["kind"]
    if kind == "input":
        return (inputs[data["index"]],)
    if kind == "const":
        return (ak.as_tensor(data["value"]),)
    if kind == "op":
        return evaluate.run_node(graph, n, data, env)
    (_, u, out), = graph.args_of(n)
    outputs[data["index"]] = env[u][out]
    return (env[u][out],)  # held by the caller from here on: live until the end


# ---------------------------------------------------------------- measuring
def _median_time(fn, repeats):
    """Median seconds of `repeats` calls of fn."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_ir(args, x0):
    graph = vjp(ak.trace(lambda x: chain(x, args.ops), ak.tensor(x0)))
    inputs = [ak.tensor(x0), ak.tensor(1.0, dtype=ak.float64)]
    t0 = time.perf_counter()
    rematted = remat(graph)
    print(f"remat pass on the {len(graph)}-node vjp graph: "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms\n")
    variants = [("vjp graph, keeps all (ak.ir run)", graph, False),
                ("vjp graph, frees after last use", graph, True),
                ("remat (default: sqrt chain)", rematted, True),
                ("remat (max_depth=inf: one long chain)", remat(graph, max_depth=10 ** 9),
                 True)]
    want = run_freeing(graph, inputs)[0]
    rows = []
    for name, g, free in variants:
        got = run_freeing(g, inputs, free)[0]
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(want, got)), name
        peak = run_freeing(g, inputs, free)[1]  # the same every run: the order is fixed
        seconds = _median_time(lambda: run_freeing(g, inputs, free), args.repeats)
        rows.append((f"{name} [{len(g.op_nodes)} ops]", peak, seconds))
    return rows


def _eager_step(x0, n_ops, every, **options):
    def step():
        x = ak.tensor(x0, requires_grad=True)
        chain(x, n_ops, every, **options).backward()
        return x.grad
    return step


def _traced_peak(step):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_eager(args, x0):
    variants = [("eager, plain", _eager_step(x0, args.ops, None)),
                (f"eager, checkpoint every {args.segment} ops",
                 _eager_step(x0, args.ops, args.segment)),
                (f"eager, checkpoint every {args.segment} (use_reentrant=True)",
                 _eager_step(x0, args.ops, args.segment, use_reentrant=True))]
    want = variants[0][1]().numpy()
    rows = []
    for name, step in variants:
        assert np.array_equal(step().numpy(), want), name  # same gradient, bit for bit
        peak = statistics.median(_traced_peak(step) for _ in range(args.repeats))
        seconds = _median_time(step, args.repeats)
        rows.append((name, peak, seconds))
    return rows


def print_table(title, rows, base=0):
    """Rows of (name, peak bytes, seconds); ratios are to row `base`."""
    print(f"{title} (ratios to: {rows[base][0]})")
    print(f"{'':<52}{'peak MB':>9}{'ratio':>8}{'time ms':>10}{'ratio':>8}")
    base_peak, base_time = rows[base][1], rows[base][2]
    for name, peak, seconds in rows:
        print(f"{name:<52}{peak / 1e6:>9.1f}{peak / base_peak:>8.2f}"
              f"{seconds * 1e3:>10.1f}{seconds / base_time:>8.2f}")
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--segment", type=int, default=20)
    args = parser.parse_args(argv)
    x0 = np.random.default_rng(0).uniform(-1, 1, args.size)
    print(f"chain of {args.ops} elementwise ops on {args.size} float64 elements "
          f"({x0.nbytes / 1e6:.1f} MB per value), forward + backward, median of "
          f"{args.repeats}\n")
    ir_rows, eager_rows = bench_ir(args, x0), bench_eager(args, x0)
    print_table("IR: peak live bytes", ir_rows, base=1)
    print_table("eager: peak traced by tracemalloc", eager_rows)
    return ir_rows, eager_rows


if __name__ == "__main__":
    main()

"""A pass that analyses: floating-point operations and memory per node, and the peak
memory of running the graph in its topological order.

An analysis reads a graph and returns facts about it; it never changes it. This one
traces on shapes alone (`ak.ir.TensorSpec`: no example data), tells op kinds apart by
the public op families (`ak.ir.ops.Elementwise`, `ops.Reduction`) and classes
(`ops.Matmul`...), and reads shapes from each node's `specs`. It counts the gradient
of an MLP too: `ak.func.grad` traced is the backward graph.

Run: python3 examples/flop_count.py
"""
import math

import adkit as ak
from adkit.ir import TensorSpec, ops

PRODUCTS = (ops.Matmul, ops.Mm, ops.Bmm, ops.Mv, ops.Dot, ops.Outer)


def flops(graph, n):
    """Floating-point operations of op node n: one per output element for elementwise
    ops, one per input element for reductions, 2 M N K for products, 0 for moves."""
    node = graph.nx.nodes[n]
    op, out = node["op"], node["specs"][0]
    ins = [graph.specs_of(v.node)[v.out] for v in graph.args(n)]
    if op in PRODUCTS:
        (a, b) = ins  # batch x M x K times K x N (vectors: M or N is 1)
        k = a.shape[-1]
        return 2 * k * math.prod(out.shape)
    if issubclass(op, ops.Reduction):
        return math.prod(ins[0].shape)
    if issubclass(op, ops.Elementwise):
        return math.prod(out.shape)
    return 0  # views, copies, indexing: memory traffic, no arithmetic


def nbytes(spec):
    return math.prod(spec.shape) * spec.dtype.np.itemsize


def analyse(graph):
    """{op node: (flops, bytes it writes)} and the peak bytes live at once when the
    graph runs in topological order (inputs live throughout; a value dies after its
    last reader)."""
    per_node = {n: (flops(graph, n), sum(nbytes(s) for s in graph.nx.nodes[n]["specs"]))
                for n in graph.op_nodes()}
    order = graph.nodes()
    rank = {n: i for i, n in enumerate(order)}
    last_read = {n: max((rank[u] for u in graph.users(n)), default=len(order))
                 for n in order}
    live = sum(nbytes(s) for n in graph.inputs for s in graph.specs_of(n))
    peak = live
    for i, n in enumerate(order):
        if n in per_node:
            live += per_node[n][1]
            peak = max(peak, live)
        for m in graph.args(n):  # values read for the last time here are freed
            if last_read[m.node] == i and m.node in per_node:
                live -= per_node[m.node][1]
                last_read[m.node] = -1  # x * x: freed once
    return per_node, peak


def mlp_loss(x, w1, w2):
    return ((x @ w1).tanh() @ w2).pow(2).mean()


def main():
    specs = (TensorSpec((64, 32), ak.float32), TensorSpec((32, 128), ak.float32),
             TensorSpec((128, 10), ak.float32))
    results = {}
    for name, fn in (("loss", mlp_loss), ("gradient", ak.func.grad(mlp_loss, (1, 2)))):
        graph = ak.trace(fn, *specs)
        per_node, peak = analyse(graph)
        names = ak.ir.printing.name_values(graph)
        print(f"{name}: {sum(f for f, _ in per_node.values()):,} flops, "
              f"peak {peak / 1024:.1f} KiB live")
        for n, (f, b) in per_node.items():
            op = ak.ir.printing.op_name(graph.nx.nodes[n]["op"])
            print(f"  {names[(n, 0)]:>3} = {op:<10} {f:>9,} flops {b:>8,} bytes")
        results[name] = (per_node, peak)
    return results


if __name__ == "__main__":
    main()

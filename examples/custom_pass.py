"""A pass that rewrites: fold exp(log(x)) to x and replace x * 2 by x + x.

A pass is a plain function Graph -> Graph that edits a copy. This one uses only the
public API for pass writers: `ak.ir.ops` (op classes by name), `graph.op_nodes()`,
`graph.args(n)`, `graph.add_op(op, *values, **static_args)`,
`graph.replace_all_uses(old, new)` and `graph.validate()`. It runs on its own, in a
`passes.pipeline`, and inside `ak.jit(f, passes=[...])`.

Run: python3 examples/custom_pass.py
"""
import numpy as np

import adkit as ak
from adkit.ir import TensorSpec, ops, passes


def fold_and_strength_reduce(graph):
    """exp(log(x)) -> x;  x * 2 -> x + x. The replaced nodes are left unread: dce (or
    jit's own clean-up) removes them."""
    g = graph.copy()  # a pass never edits its input
    for n in g.op_nodes():  # topological order: each node's arguments come first
        node = g.nx.nodes[n]
        if node["op"] is ops.Exp:
            (x,) = g.args(n)
            if g.nx.nodes[x.node].get("op") is ops.Log:
                g.replace_all_uses(n, g.args(x.node)[0])  # exp(log(y)) is y
        elif node["op"] is ops.Mul and node["params"].get("y") == 2:
            (x,) = g.args(n)  # `x * 2` traced as mul[y=2]: 2 is a static argument
            g.replace_all_uses(n, g.add_op(ops.Add, x, x))
    g.validate()  # cycles, missing arguments, shapes the ops' rules disagree with
    return g


def model(x, w):
    h = ak.exp(ak.log(x @ w))  # only defined for positive x @ w: a test of the fold
    return (h * 2).sum(1) + h.mean()


def count(graph, op):
    return sum(graph.nx.nodes[n]["op"] is op for n in graph.op_nodes())


def main():
    x, w = ak.rand(4, 3, dtype=ak.float64) + 0.5, ak.rand(3, 5, dtype=ak.float64) + 0.5
    graph = ak.trace(model, TensorSpec((4, 3), ak.float64), TensorSpec((3, 5), ak.float64))
    new = passes.pipeline([fold_and_strength_reduce, passes.dce])(graph)
    print("before:", graph, "after:", new, sep="\n")
    assert count(new, ops.Exp) == count(new, ops.Log) == count(new, ops.Mul) == 0
    want, got = graph(x, w).numpy(), new(x, w).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # inside jit: the pass sees the traced graph; jit's own pipeline (clean-up,
    # fusion) runs after it because the list says so (`passes` replaces the default)
    fast = ak.jit(model, passes=[fold_and_strength_reduce, *passes.DEFAULT_PIPELINE])
    np.testing.assert_allclose(fast(x, w).numpy(), want, rtol=1e-12)
    assert count(fast.lower(x, w), ops.FusedKernel) >= 1
    print(f"same values: max |difference| = {np.max(np.abs(got - want)):.2e}")
    return graph, new


if __name__ == "__main__":
    main()

"""Write your own graph pass: replace every tanh(x) by 2*sigmoid(2x) - 1.

A pass is a plain function Graph -> Graph. Copy the graph, edit `graph.nx` (a networkx
MultiDiGraph: op nodes carry `op`, `params`, `specs`; an edge's key is the argument
position `pos` at its consumer, `out` the producer's output), check with `validate()`,
and compose with the built-in passes through `passes.pipeline`.

Run: python3 examples/custom_pass.py
"""
import networkx as nx
import numpy as np

import adkit as ak
from adkit.ir import passes
from adkit.ops.binary import Mul, Sub
from adkit.ops.unary import Sigmoid, Tanh


def tanh_via_sigmoid(graph):
    """tanh(x) -> 2 * sigmoid(2 * x) - 1, for every tanh node."""
    g = graph.copy()  # a pass never edits its input
    for n in g.op_nodes:  # topological order: reproducible node ids
        if g.nx.nodes[n]["op"] is not Tanh:
            continue
        (_, x, out), = g.args_of(n)
        twice = g.add_op(Mul, {0: (x, out)}, {"y": 2.0})
        squashed = g.add_op(Sigmoid, {0: (twice, 0)})
        scaled = g.add_op(Mul, {0: (squashed, 0)}, {"y": 2.0})
        result = g.add_op(Sub, {0: (scaled, 0)}, {"y": 1.0})
        # move tanh's consumers onto the new value, keeping each argument position
        for _, v, key, data in list(g.nx.out_edges(n, keys=True, data=True)):
            g.nx.remove_edge(n, v, key=key)
            g.nx.add_edge(result, v, key=key, **data)
        g.nx.remove_node(n)
    g.validate()
    return g


def layer(x, w):
    h = ak.tanh(x @ w + 1.0)
    return (h * ak.tanh(h)).sum(1)


def describe(name, graph):
    depth = nx.dag_longest_path_length(graph.nx)  # any networkx algorithm works on .nx
    print(f"{name}: {len(graph.op_nodes)} ops, depth {depth}")


def main():
    x, w = ak.randn(4, 3, dtype=ak.float64), ak.randn(3, 5, dtype=ak.float64)
    graph = ak.trace(layer, x, w)
    rewrite = passes.pipeline([tanh_via_sigmoid, passes.cse, passes.dce])
    new = rewrite(graph)
    print("before:", graph, "after:", new, sep="\n")
    describe("before", graph)
    describe("after", new)
    want, got = graph(x, w).numpy(), new(x, w).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    print(f"same values: max |difference| = {np.max(np.abs(got - want)):.2e}")
    assert not any(new.nx.nodes[n]["op"] is Tanh for n in new.op_nodes)


if __name__ == "__main__":
    main()

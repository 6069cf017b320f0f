"""A pass that fuses: x * sigmoid(x) becomes one user-defined op, `Silu`.

The new op is a class of the public unary elementwise family (`ak.ir.ops.
UnaryElementwise`): a numpy `forward`, a `derivative` written with adkit ops (so
backward, forward mode and higher derivatives follow), and a `lower(b, x)` hook that
`ak.jit` compiles into its fused loops. The pass finds `mul(x, sigmoid(x))` in either
argument order and replaces it by one `Silu` node with `add_op` and
`replace_all_uses`; values and gradients stay the same, eagerly and under jit.

Run: python3 examples/fused_op.py
"""
import numpy as np

import adkit as ak
from adkit.ir import ops, passes


class Silu(ops.UnaryElementwise):
    """y = x sigmoid(x);  dy/dx = sigmoid(x) (1 + x (1 - sigmoid(x)))."""
    public_name = "silu"

    @staticmethod
    def forward(x):
        return x / (1 + np.exp(-x))

    @staticmethod
    def derivative(x, out):
        s = ak.sigmoid(x)
        return s * (1 + x * (1 - s))

    @staticmethod
    def lower(b, x):
        """Native code, for ak.jit: x / (1 + exp(-x))."""
        return b.div(x, b.add(1.0, b.exp(b.neg(x))))


def fuse_silu(graph):
    """mul(x, sigmoid(x)) or mul(sigmoid(x), x) -> silu(x)."""
    g = graph.copy()
    for n in g.op_nodes():
        if g.nx.nodes[n]["op"] is not ops.Mul or len(g.args(n)) != 2:
            continue
        a, b = g.args(n)
        for x, s in ((a, b), (b, a)):
            if g.nx.nodes[s.node].get("op") is ops.Sigmoid and g.args(s.node) == [x]:
                g.replace_all_uses(n, g.add_op(Silu, x))
                break
    g.validate()
    return g


def layer(x, w):
    h = x @ w
    return (h * ak.sigmoid(h)).sum()


def count(graph, op):
    return sum(graph.nx.nodes[n]["op"] is op for n in graph.op_nodes())


def main():
    x, w = ak.randn(8, 4, dtype=ak.float64), ak.randn(4, 6, dtype=ak.float64)
    graph = ak.trace(layer, x, w)
    fused = passes.dce(fuse_silu(graph))
    print(fused)
    assert count(fused, Silu) == 1 and count(fused, ops.Sigmoid) == 0
    np.testing.assert_allclose(fused(x, w).numpy(), graph(x, w).numpy(), rtol=1e-12)
    # gradients of the fused graph come from Silu's own derivative rule
    grads = passes.vjp(fused)(x, w, ak.tensor(1.0, dtype=ak.float64))[1:]
    want = ak.func.grad(layer, (0, 1))(x, w)
    for got, ref in zip(grads, want):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)
    # inside jit the pass runs on the traced value-and-gradient graph, and Silu,
    # having a `lower` hook, is compiled into a fused kernel
    fast = ak.jit(ak.func.grad_and_value(layer, (0, 1)),
                  passes=[fuse_silu, *passes.DEFAULT_PIPELINE])
    grads, value = fast(x, w)
    np.testing.assert_allclose(value.numpy(), layer(x, w).numpy(), rtol=1e-12)
    for got, ref in zip(grads, want):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)
    lowered = fast.lower(x, w)
    kernels = [lowered.nx.nodes[n]["params"]["graph"] for n in lowered.op_nodes()
               if lowered.nx.nodes[n]["op"] is ops.FusedKernel]
    assert any(count(k, Silu) for k in kernels), "Silu should sit inside a fused kernel"
    print("fused: same values and gradients, eagerly and compiled")
    return graph, fused


if __name__ == "__main__":
    main()

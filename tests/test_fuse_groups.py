"""fuse's groups never feed each other (fuse._acyclic_with, started from each group's
readers outside it, which the grouping keeps as members join and groups merge)."""
import numpy as np

import adkit as ak
from adkit.ir import TensorSpec, passes

F64 = ak.float64


def _kernels(graph):
    return [n for n in graph.op_nodes() if graph.nx.nodes[n]["op"] is passes.FusedKernel]


def test_chains_joined_through_a_blas_product_stay_apart():
    """c = a * b where a's chain feeds b's through a BLAS product: one kernel for both
    chains would need m before it and after it."""
    def f(x, w):
        a = x.exp()
        m = a @ w  # long contraction: BLAS, outside every kernel
        b = x.sin() + m
        return a * b
    g = ak.trace(f, TensorSpec((64, 64), F64), TensorSpec((64, 64), F64))
    fused = passes.fuse(g)
    fused.validate()
    assert len(_kernels(fused)) == 2
    x, w = ak.randn(64, 64, dtype=F64), ak.randn(64, 64, dtype=F64) * 0.01
    np.testing.assert_allclose(fused(x, w).numpy(), f(x, w).numpy(), rtol=1e-12)


def test_a_long_chain_is_one_kernel():
    """Each link joins the chain's group (the walk from the group's readers, not from
    every member's, finds nothing coming back)."""
    def f(x):
        for i in range(40):
            x = (x * 1.01).tanh() + 0.1 * i
        return x.sum()
    g = ak.trace(f, TensorSpec((100,), F64))
    fused = passes.fuse(g)
    fused.validate()
    assert len(_kernels(fused)) == 1
    x = ak.randn(100, dtype=F64)
    np.testing.assert_allclose(fused(x).numpy(), f(x).numpy(), rtol=1e-12)

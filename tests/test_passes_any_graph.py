"""Every pass accepts any valid graph: here, graphs that still hold dead nodes (the
forward values a traced gradient computes and does not return)."""
import numpy as np
import pytest

import adkit as ak
from adkit.ir import passes


def _gradient_graph_with_dead_nodes():
    x = ak.tensor(np.array([[-1.2], [0.2], [-1.2]]))
    grad = ak.func.grad(lambda b: (b * b * ak.tensor(np.ones((3, 1)))).sum())
    return ak.trace(grad, x), x, grad(x)


@pytest.mark.parametrize("name", ["fuse", "dce", "cse", "fold_constants", "simplify",
                                  "decompose"])
def test_a_pass_on_a_graph_with_dead_nodes(name):
    graph, x, want = _gradient_graph_with_dead_nodes()
    out = getattr(passes, name)(graph)
    out.validate()
    np.testing.assert_allclose(out(x).numpy(), want.numpy(), rtol=1e-14)


def test_fuse_drops_a_dead_group_instead_of_a_kernel_without_outputs():
    graph, x, _ = _gradient_graph_with_dead_nodes()
    fused = passes.fuse(graph)
    kernels = [n for n in fused.op_nodes if fused.nx.nodes[n]["op"] is passes.FusedKernel]
    assert all(len(fused.nx.nodes[n]["params"]["graph"].outputs) > 0 for n in kernels)


EXPANDED_REDUCTIONS = {
    "sum_of_square_of_expanded": lambda x: (lambda v: (v * v).sum())(
        x.unsqueeze(0).expand(2, *x.shape)),
    "mean_of_expanded": lambda x: x.unsqueeze(0).expand(2, *x.shape).mean(-1, keepdim=True),
    "logsumexp_of_expanded": lambda x: x.unsqueeze(0).expand(2, *x.shape).logsumexp(0),
    "amax_of_expanded_row": lambda x: x[0].unsqueeze(0).expand(2, *x[0].shape).amax(0),
}


@pytest.mark.parametrize("name", list(EXPANDED_REDUCTIONS))
def test_fused_kernels_evaluated_by_numpy_compute_at_the_node_shapes(name):
    """A kernel reads an expanded input un-expanded; evaluated without native code (the
    numpy fallback, and shape inference), it must still reduce over the expanded shape
    (was: half the sum; found by the fuzzer)."""
    fn = EXPANDED_REDUCTIONS[name]
    x = ak.tensor(np.random.default_rng(2).standard_normal((3, 4)))
    graph = ak.trace(fn, x)
    for fused in (passes.fuse(graph), passes.fuse(passes.dce(graph))):
        fused.validate()
        np.testing.assert_allclose(fused(x).numpy(), fn(x).numpy(), rtol=1e-14)

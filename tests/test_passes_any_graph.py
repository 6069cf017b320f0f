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

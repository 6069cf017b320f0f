"""Every pass accepts any valid graph: here, graphs that still hold dead nodes (the
forward values a traced gradient computes and does not return)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


PASS_NAMES = ["dce", "cse", "fold_constants", "simplify", "decompose", "fuse"]


def _fuzz_graphs():
    """Traced functions and traced gradients of the fuzzer's random programs: views,
    in-place ops through views, dead nodes, multi-output ops, bools and ints."""
    from adkit.testing.checks import _grad_fn
    from adkit.testing.fuzzer import program_function
    from adkit.testing.programs import generate
    graphs = []
    for i in range(40):
        program = generate(np.random.default_rng([21, i]))
        fn = program_function(program)
        xs = [ak.tensor(x) for x in program.inputs]
        try:
            graphs.append((ak.trace(fn, *xs), xs))
            u = np.ones(np.shape(fn(*xs).numpy()))
            graphs.append((ak.trace(_grad_fn(fn, u, len(xs)), *xs), xs))
        except ak.ir.TracerValueError:  # traced indices: issue 13
            continue
    return graphs


GRAPHS = _fuzz_graphs()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_sequence_of_passes_keeps_graphs_valid_and_values_equal(data):
    graph, xs = GRAPHS[data.draw(st.integers(0, len(GRAPHS) - 1))]
    sequence = data.draw(st.lists(st.sampled_from(PASS_NAMES), min_size=1, max_size=6))
    want = graph(*xs)
    before = str(graph)
    out = graph
    for name in sequence:  # repeats included: fuse after fuse, dce after fuse...
        out = getattr(passes, name)(out)
        out.validate()
    assert str(graph) == before  # passes are pure
    wants = want if isinstance(want, tuple) else (want,)
    for got in (out(*xs), ak.jit(lambda *a: out(*a))(*xs)):  # evaluated, then compiled
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-13,
                                       err_msg=f"passes {sequence}")

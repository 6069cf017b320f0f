"""The reverse-mode engine: backward/grad semantics of the seed (torch.autograd), one test
per behaviour."""
import gc
import time
import warnings
import weakref

import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function


def leaf(values, dtype=ak.float64):
    return ak.tensor(values, dtype=dtype, requires_grad=True)


# ---------------------------------------------------------------- accumulation
def test_engine_backward_accumulates_into_leaf_grad():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4, 8, 12])


def test_engine_grad_does_not_touch_dot_grad():
    x = leaf([1.0, 2.0])
    (g,) = ak.autograd.grad((x * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), [2, 4])
    assert x.grad is None


def test_engine_grad_sums_over_paths_and_broadcasting():
    x = leaf([[1.0], [2.0]])
    y = leaf([10.0, 20.0, 30.0])
    z = (x * y + x).sum()
    gx, gy = ak.autograd.grad(z, (x, y))
    np.testing.assert_allclose(gx.numpy(), [[63.0], [63.0]])  # 10+20+30 + 3 broadcast copies
    np.testing.assert_allclose(gy.numpy(), [3.0, 3.0, 3.0])


def test_engine_user_gradient_is_not_aliased_by_dot_grad():
    x = leaf([1.0, 2.0])
    g = ak.tensor([1.0, 1.0], dtype=ak.float64)
    x.clone().backward(g)
    x.grad.zero_() if hasattr(x.grad, "zero_") else x.grad.numpy().fill(0)
    np.testing.assert_allclose(g.numpy(), [1.0, 1.0])


def test_engine_retain_grad_populates_non_leaf():
    x = leaf([1.0, 2.0])
    y = x * 3
    y.retain_grad()
    assert y.retains_grad
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [6.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [18.0, 36.0])


def test_engine_non_leaf_grad_access_warns():
    x = leaf([1.0])
    y = x * 2
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert y.grad is None


# ---------------------------------------------------------------- graph lifetime
def test_engine_second_backward_through_freed_graph_raises():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_engine_retain_graph_allows_second_backward():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)


def test_engine_graph_memory_released_after_backward():
    x = leaf(np.ones(1000))
    y = x.exp()
    z = y * y
    ref_y = weakref.ref(y)
    out = z.sum()
    del y, z
    gc.collect()
    assert ref_y() is not None  # held by the graph for backward
    out.backward()
    gc.collect()
    assert ref_y() is None  # saved tensors freed after backward


def test_engine_saved_output_is_not_a_reference_cycle():
    x = leaf([1.0, 2.0])
    y = x.exp()  # Exp saves its own output
    ref = weakref.ref(y)
    gc.disable()
    try:
        del y
        assert ref() is None  # freed by refcount alone, no cycle
    finally:
        gc.enable()


def test_engine_long_chain_is_iterative_and_linear():
    def run(n):
        x = leaf([1.0])
        y = x
        for _ in range(n):
            y = y * 1.0
        t0 = time.perf_counter()
        y.sum().backward()
        elapsed = time.perf_counter() - t0
        assert x.grad.item() == 1.0
        del y
        return elapsed

    small = run(10_000)
    large = run(100_000)  # would raise RecursionError with a recursive walk
    assert large < 25 * small + 0.5  # linear (10x the work), with slack for noise


# ---------------------------------------------------------------- create_graph
def test_engine_create_graph_gives_higher_derivatives():
    x = leaf([2.0])
    y = x * x * x
    (g1,) = ak.autograd.grad(y.sum(), x, create_graph=True)
    (g2,) = ak.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = ak.autograd.grad(g2.sum(), x)
    assert g1.item() == pytest.approx(12.0)
    assert g2.item() == pytest.approx(12.0)
    assert g3.item() == pytest.approx(6.0)


def test_engine_create_graph_backward_makes_grad_differentiable():
    x = leaf([3.0])
    (x * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (g2,) = ak.autograd.grad(x.grad.sum(), x)
    assert g2.item() == pytest.approx(2.0)


def test_engine_without_create_graph_grads_do_not_require_grad():
    x = leaf([3.0])
    (g,) = ak.autograd.grad((x * x).sum(), x)
    assert not g.requires_grad and g.grad_fn is None


# ---------------------------------------------------------------- hooks
def test_engine_tensor_hook_can_replace_gradient():
    x = leaf([1.0, 2.0])
    y = x * 2
    handle = y.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [20.0, 20.0])
    handle.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_engine_leaf_hook_runs_before_accumulation_and_for_grad():
    x = leaf([1.0])
    seen = []
    x.register_hook(lambda g: seen.append(g.item()))
    h2 = x.register_hook(lambda g: g + 1)
    (x * 3).sum().backward()
    assert seen == [3.0] and x.grad.item() == 4.0
    h2.remove()
    (g,) = ak.autograd.grad((x * 5).sum(), x)
    assert seen == [3.0, 5.0] and g.item() == 5.0


def test_engine_hook_on_tensor_not_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ak.tensor([1.0]).register_hook(lambda g: g)


def test_engine_node_hooks_and_prehooks():
    x = leaf([1.0, 2.0])
    y = x * 2
    calls = []
    y.grad_fn.register_prehook(lambda grad_outputs: calls.append("pre") or None)
    y.grad_fn.register_hook(lambda gi, go: (gi[0] * 0,))
    y.sum().backward()
    assert calls == ["pre"]
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0])


def test_engine_grad_fn_structure():
    x = leaf([1.0])
    y = x.exp()
    z = y * x
    assert z.grad_fn.name() == "MulBackward0"
    nodes = [n for n, _ in z.grad_fn.next_functions]
    assert nodes[0] is y.grad_fn
    assert type(nodes[1]).__name__ == "AccumulateGrad" and nodes[1].variable is x
    assert isinstance(z.grad_fn.metadata, dict)
    assert "grad_fn=<MulBackward0>" in repr(z)


# ---------------------------------------------------------------- inputs=
def test_engine_grad_of_non_leaf_input():
    x = leaf([1.0, 2.0])
    y = x * 2
    z = (y * y).sum()
    (gy,) = ak.autograd.grad(z, y)
    np.testing.assert_allclose(gy.numpy(), [4.0, 8.0])


def test_engine_allow_unused():
    x, unused = leaf([1.0]), leaf([2.0])
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        ak.autograd.grad((x * 2).sum(), (x, unused))
    gx, gu = ak.autograd.grad((x * 2).sum(), (x, unused), allow_unused=True)
    assert gu is None and gx.item() == 2.0
    gx, gu = ak.autograd.grad((x * 2).sum(), (x, unused), materialize_grads=True)
    np.testing.assert_array_equal(gu.numpy(), [0.0])
    with pytest.raises(ValueError, match="allow_unused"):
        ak.autograd.grad((x * 2).sum(), x, allow_unused=False, materialize_grads=True)


def test_engine_backward_inputs_restricts_accumulation():
    x, y = leaf([1.0]), leaf([2.0])
    (x * y).sum().backward(inputs=[x])
    assert x.grad.item() == 2.0 and y.grad is None
    with pytest.raises(RuntimeError, match="cannot be empty"):
        (x * y).sum().backward(inputs=[])


def test_engine_grad_input_not_requiring_grad():
    x = leaf([1.0])
    c = ak.tensor([1.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        ak.autograd.grad((x * 2).sum(), c)


def test_engine_only_computes_what_inputs_need():
    calls = []

    class Spy(Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g

    x, y = leaf([1.0]), leaf([1.0])
    z = (Spy.apply(x) + y).sum()
    ak.autograd.grad(z, y)
    assert calls == []  # the branch to x is not needed for grad w.r.t. y


# ---------------------------------------------------------------- _make_grads errors
def test_engine_implicit_grad_only_for_scalars():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()


def test_engine_grad_shape_mismatch_message():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of"):
        (x * 2).backward(ak.ones(3, dtype=ak.float64))


def test_engine_grad_wrong_type_message():
    x = leaf([1.0])
    with pytest.raises(TypeError, match="gradients can be either Tensors or None, but got list"):
        ak.autograd.backward([x * 2], [[1.0]])


def test_engine_root_without_grad_message():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        ak.tensor([1.0]).sum().backward()


# ---------------------------------------------------------------- deprecated API
def test_engine_grad_variables_keyword_is_deprecated_alias():
    x = leaf([1.0, 2.0])
    with pytest.warns(UserWarning, match="'grad_variables' is deprecated"):
        ak.autograd.backward([x * 2], grad_variables=[ak.ones(2, dtype=ak.float64)])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])
    with pytest.raises(RuntimeError, match="both passed to backward"), \
            pytest.warns(UserWarning, match="'grad_variables' is deprecated"):
        ak.autograd.backward([x * 2], grad_tensors=[ak.ones(2)], grad_variables=[ak.ones(2)])


def test_engine_only_inputs_is_deprecated():
    x = leaf([1.0])
    with pytest.warns(UserWarning, match="only_inputs argument is deprecated"):
        ak.autograd.grad((x * 2).sum(), x, only_inputs=False)


def test_engine_variable_and_variable_function():
    t = ak.tensor([1.0])
    v = ak.autograd.Variable(t, requires_grad=True)
    assert isinstance(v, ak.Tensor) and v.requires_grad
    assert isinstance(t, ak.autograd.Variable)
    with pytest.warns(UserWarning, match="deprecated"):
        w = ak.autograd.variable([1.0, 2.0])
    assert isinstance(w, ak.Tensor)


def test_engine_checkpoint_valid_flag():
    assert ak.autograd._is_checkpoint_valid()
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            seen.append(ak.autograd._is_checkpoint_valid())
            return g

    x = leaf([1.0])
    Probe.apply(x).sum().backward()
    ak.autograd.grad(Probe.apply(x).sum(), x)
    assert seen == [True, False]
    assert ak.autograd._is_checkpoint_valid()


# ---------------------------------------------------------------- backward validation
def test_engine_backward_returning_wrong_count_names_function():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="function BadBackward returned an incorrect number of "
                                           r"gradients \(expected 2, got 1\)"):
        Bad.apply(x, x).sum().backward()


def test_engine_backward_returning_wrong_shape_names_index():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return ak.ones(5, dtype=ak.float64)

    with pytest.raises(RuntimeError, match="returned an invalid gradient at index 0"):
        Bad.apply(leaf([1.0, 2.0])).sum().backward()


def test_engine_backward_gradient_is_cast_and_summed_like_torch():
    class Loose(Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return ak.ones(3, 2, dtype=ak.float32)  # expandable from (2,), wrong dtype

    x = leaf([1.0, 2.0])
    Loose.apply(x).sum().backward()
    assert x.grad.dtype == ak.float64
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])

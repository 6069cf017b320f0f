"""Every docstring example of the seed documents (torch/autograd/function.py, v1.5 and
current; the BackwardCFunction docs; torch/autograd/__init__.py), ported by changing the
import (torch -> adkit as ak, torch.autograd -> ak.autograd), with assertions on the results.
Forward-mode AD parts (fwAD.dual_level, jvp) are left to the forward-AD tests."""
import warnings

import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function
from adkit.autograd.function import BackwardCFunction, once_differentiable


def arr(t):
    return np.asarray(t.detach().numpy())


# ---------------------------------------------------------------- Function (class docstring)
class Exp(Function):
    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result


def test_seed_function_exp_example():
    """Exp: `output = Exp.apply(input)`; d/dx exp = exp, also to second order."""
    values = np.array([-1.0, 0.0, 0.5, 2.0])
    input = ak.tensor(values, requires_grad=True)
    output = Exp.apply(input)
    np.testing.assert_allclose(arr(output), np.exp(values))
    assert output.grad_fn.name() == "ExpBackward"
    g, = ak.autograd.grad(output.sum(), input, create_graph=True)
    np.testing.assert_allclose(arr(g), np.exp(values))
    gg, = ak.autograd.grad(g.sum(), input)
    np.testing.assert_allclose(arr(gg), np.exp(values))
    assert ak.autograd.gradcheck(Exp.apply, (input,))


# ---------------------------------------------------------------- save_for_backward
class SavedFunc(Function):
    @staticmethod
    def forward(ctx, x: ak.Tensor, y: ak.Tensor, z: int):
        w = x * z
        out = x * y + y * z + w * y
        ctx.save_for_backward(x, y, w, out)
        ctx.z = z  # z is not a tensor
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, y, w, out = ctx.saved_tensors
        z = ctx.z
        gx = grad_out * (y + y * z)
        gy = grad_out * (x + z + w)
        gz = None
        return gx, gy, gz


def test_seed_save_for_backward_example():
    """Func(x, y, z) = x*y + y*z + (x*z)*y with a=1, b=2, c=4: d = 18, grads 10 and 9."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double)
    b = ak.tensor(2., requires_grad=True, dtype=ak.double)
    c = 4
    d = SavedFunc.apply(a, b, c)
    assert d.item() == 18.0
    d.backward()
    assert (a.grad.item(), b.grad.item()) == (10.0, 9.0)


def test_seed_save_for_backward_example_saved_tensors():
    """The four saved tensors come back, in order, with the forward's values."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double)
    b = ak.tensor(2., requires_grad=True, dtype=ak.double)
    d = SavedFunc.apply(a, b, 4)
    assert [t.item() for t in d.grad_fn.saved_tensors] == [1.0, 2.0, 4.0, 18.0]
    assert d.grad_fn.z == 4


def test_seed_save_for_backward_example_is_once_differentiable():
    """Its backward is @once_differentiable: a second derivative through it raises."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double)
    b = ak.tensor(2., requires_grad=True, dtype=ak.double)
    d = SavedFunc.apply(a, b, 4)
    ga, = ak.autograd.grad(d * d, a, create_graph=True)
    assert ga.item() == 2 * 18.0 * 10.0
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        ga.backward()


# ---------------------------------------------------------------- save_for_forward (vjp part)
class ForwardSavedFunc(Function):
    @staticmethod
    def forward(ctx, x: ak.Tensor, y: ak.Tensor, z: int):
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(x, y)
        ctx.z = z
        return x * y * z

    @staticmethod
    def jvp(ctx, x_t, y_t, _):
        x, y = ctx.saved_tensors
        z = ctx.z
        return z * (y * x_t + x * y_t)

    @staticmethod
    def vjp(ctx, grad_out):
        x, y = ctx.saved_tensors
        z = ctx.z
        return z * grad_out * y, z * grad_out * x, None


def test_seed_save_for_forward_example_reverse_mode():
    """The save_for_forward example's Func in reverse mode: d = x*y*z = 8 and its vjp."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double)
    b = ak.tensor(2., requires_grad=True, dtype=ak.double)
    c = 4
    d = ForwardSavedFunc.apply(a, b, c)
    assert d.item() == 8.0
    d.backward()
    assert (a.grad.item(), b.grad.item()) == (8.0, 4.0)


# ---------------------------------------------------------------- mark_dirty
class Inplace(Function):
    @staticmethod
    def forward(ctx, x):
        x_npy = x.numpy()  # x_npy shares storage with x
        x_npy += 1
        ctx.mark_dirty(x)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        return grad_output


def test_seed_mark_dirty_example():
    """Inplace via x.numpy(): `b.backward()` then raises the version error."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double).clone()
    b = a * a
    out = Inplace.apply(a)  # This would lead to wrong gradients!
    assert out is a and a.item() == 2.0 and a._version == 1
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                                           "computation has been modified by an inplace "
                                           "operation"):
        b.backward()


class InplaceDetached(Function):
    @staticmethod
    def forward(ctx, x):
        x_npy = x.detach().numpy()  # shares storage with x
        x_npy += 1
        ctx.mark_dirty(x)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        return grad_output


def test_seed_mark_dirty_example_via_detach():
    """The same example with x.detach().numpy(): the error, and the right gradient when
    nothing saved the old value."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double).clone()
    b = a * a
    InplaceDetached.apply(a)
    assert a.item() == 2.0 and a.grad_fn.name() == "InplaceDetachedBackward"
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.backward()
    x = ak.tensor(3., requires_grad=True, dtype=ak.double)
    c = x.clone()
    (InplaceDetached.apply(c) * 5).backward()
    assert (c.item(), x.grad.item()) == (4.0, 5.0)


# ---------------------------------------------------------------- mark_non_differentiable
class SortFunc(Function):
    @staticmethod
    def forward(ctx, x):
        sorted, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, idx)
        return sorted, idx

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2):  # still need to accept g2
        x, idx = ctx.saved_tensors
        grad_input = ak.zeros_like(x)
        grad_input.index_add_(0, idx, g1)
        return grad_input


def test_seed_mark_non_differentiable_example():
    """sort + mark_non_differentiable(idx) + index_add_: the gradient is g1 scattered back
    to where each sorted value came from; idx needs no grad and g2 is zeros."""
    values = np.array([3.0, 1.0, 2.0, 5.0])
    x = ak.tensor(values, requires_grad=True)
    sorted, idx = SortFunc.apply(x)
    np.testing.assert_allclose(arr(sorted), np.sort(values))
    np.testing.assert_array_equal(arr(idx), np.argsort(values))
    assert sorted.requires_grad and not idx.requires_grad
    weights = np.array([10.0, 20.0, 30.0, 40.0])
    (sorted * ak.tensor(weights)).sum().backward()
    expected = np.zeros(4)
    expected[np.argsort(values)] = weights
    np.testing.assert_allclose(arr(x.grad), expected)


# ---------------------------------------------------------------- set_materialize_grads
class SimpleFunc(Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone(), x.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2):
        return g1 + g2  # No check for None necessary


class MaterializeFunc(Function):
    seen = []

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x.clone(), x.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2):
        MaterializeFunc.seen.append((g1 is None, g2 is None))
        x, = ctx.saved_tensors
        grad_input = ak.zeros_like(x)
        if g1 is not None:  # We must check for None now
            grad_input += g1
        if g2 is not None:
            grad_input += g2
        return grad_input


def test_seed_set_materialize_grads_simple_func():
    """SimpleFunc: the unused output's gradient arrives as zeros, so g1 + g2 works."""
    a = ak.tensor(1., requires_grad=True)
    b, _ = SimpleFunc.apply(a)
    b.backward()
    assert a.grad.item() == 1.0 and a.grad.dtype == ak.float32


def test_seed_set_materialize_grads_func():
    """Func with set_materialize_grads(False): `b, _ = Func.apply(a)` induces g2 to be
    undefined (None); using both outputs gives both gradients."""
    MaterializeFunc.seen.clear()
    a = ak.tensor(1., requires_grad=True)
    b, _ = MaterializeFunc.apply(a)  # induces g2 to be undefined
    b.backward()
    assert a.grad.item() == 1.0
    b, c = MaterializeFunc.apply(a)
    (b + 2 * c).backward()
    assert a.grad.item() == 4.0
    assert MaterializeFunc.seen == [(False, True), (False, False)]


# ---------------------------------------------------------------- forward / setup_context docs
class Usage1(Function):
    """Usage 1 (Combined forward and ctx)."""

    @staticmethod
    def forward(ctx, x, power, **kwargs):
        ctx.save_for_backward(x)
        ctx.power = power
        return x ** power

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * ctx.power * x ** (ctx.power - 1), None


class Usage2(Function):
    """Usage 2 (Separate forward and ctx)."""

    @staticmethod
    def forward(x, power):
        return x ** power

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, power = inputs
        ctx.save_for_backward(x, output)
        ctx.power = power

    @staticmethod
    def backward(ctx, grad):
        x, output = ctx.saved_tensors
        return grad * ctx.power * output / x, None


@pytest.mark.parametrize("fn", [Usage1, Usage2], ids=["combined", "separate"])
def test_seed_forward_usage_examples(fn):
    """Both ways of defining forward give the same values and gradients."""
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.double, requires_grad=True)
    y = fn.apply(x, 3)
    np.testing.assert_allclose(arr(y), [1.0, 8.0, 27.0])
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), [3.0, 12.0, 27.0])


def test_seed_backward_docstring_contract():
    """backward gets one grad per output (None for non-tensor outputs), returns one per
    input (None for non-tensors and inputs not requiring grad); needs_input_grad says
    which inputs need one."""
    seen = {}

    class Doc(Function):
        @staticmethod
        def forward(ctx, x, w, label):
            return x * w, label.upper()

        @staticmethod
        def backward(ctx, g, g_label):
            seen["g_label"] = g_label
            seen["needs"] = ctx.needs_input_grad
            return g * 2 if ctx.needs_input_grad[0] else None, None, None

    x = ak.tensor([1.0, 2.0], dtype=ak.double, requires_grad=True)
    w = ak.tensor([2.0, 2.0], dtype=ak.double)
    y, label = Doc.apply(x, w, "out")
    assert label == "OUT"
    y.sum().backward()
    assert seen == {"g_label": None, "needs": (True, False, False)}
    np.testing.assert_allclose(arr(x.grad), [2.0, 2.0])


def test_seed_backwardcfunction_apply_and_apply_jvp():
    """BackwardCFunction.apply runs the Function's backward/vjp when the node executes;
    apply_jvp runs its jvp."""
    a = ak.tensor(1., requires_grad=True, dtype=ak.double)
    b = ak.tensor(2., requires_grad=True, dtype=ak.double)
    node = ForwardSavedFunc.apply(a, b, 4).grad_fn
    assert isinstance(node, BackwardCFunction) and node._forward_cls is ForwardSavedFunc
    ga, gb, gz = node.apply(ak.tensor(1., dtype=ak.double))
    assert (ga.item(), gb.item(), gz) == (8.0, 4.0, None)
    one = ak.tensor(1., dtype=ak.double)
    assert node.apply_jvp(one, one, None).item() == 4 * (2.0 + 1.0)


# ---------------------------------------------------------------- torch/autograd/__init__.py
class Square(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


def test_seed_backward_docstring_jacobian_vector_product():
    """backward(tensors, grad_tensors): the vector-Jacobian product, accumulated in the
    leaves; retain_graph allows a second pass, create_graph gives differentiable grads."""
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.double, requires_grad=True)
    y = Square.apply(x)
    v = ak.tensor([1.0, 0.1, 0.01], dtype=ak.double)
    ak.autograd.backward(y, grad_tensors=v, retain_graph=True)
    np.testing.assert_allclose(arr(x.grad), [2.0, 0.4, 0.06])
    ak.autograd.backward([y], [v])
    np.testing.assert_allclose(arr(x.grad), [4.0, 0.8, 0.12])
    x.grad = None
    ak.autograd.backward(Square.apply(x).sum(), create_graph=True)
    assert x.grad.requires_grad
    np.testing.assert_allclose(arr(x.grad), [2.0, 4.0, 6.0])


def test_seed_grad_docstring():
    """grad(outputs, inputs, grad_outputs) returns the gradients without touching .grad;
    allow_unused gives None for unused inputs; only_inputs is deprecated."""
    x = ak.tensor([1.0, 2.0], dtype=ak.double, requires_grad=True)
    unused = ak.tensor([5.0], dtype=ak.double, requires_grad=True)
    y = Square.apply(x)
    gx, = ak.autograd.grad(y, x, grad_outputs=ak.tensor([3.0, 4.0], dtype=ak.double),
                           retain_graph=True)
    np.testing.assert_allclose(arr(gx), [6.0, 16.0])
    assert x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        ak.autograd.grad(y.sum(), [x, unused], retain_graph=True)
    gx, gu = ak.autograd.grad(y.sum(), [x, unused], allow_unused=True, retain_graph=True)
    assert gu is None
    np.testing.assert_allclose(arr(gx), [2.0, 4.0])
    with pytest.warns(UserWarning, match="only_inputs argument is deprecated"):
        ak.autograd.grad(y.sum(), x, only_inputs=False)


def test_seed_make_grads_errors():
    """_make_grads: shape mismatch, implicit grad of a non-scalar, and a wrong type."""
    x = ak.tensor([1.0, 2.0], dtype=ak.double, requires_grad=True)
    y = Square.apply(x)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape "
                                           r"of .*3.* and output\[0\] has a shape of .*2"):
        ak.autograd.backward(y, ak.ones(3, dtype=ak.double))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar "
                                           "outputs"):
        ak.autograd.backward(y)
    with pytest.raises(TypeError, match="gradients can be either Tensors or None, but got "
                                        "int"):
        ak.autograd.backward(y, [1])


def test_seed_backward_grad_variables_is_deprecated():
    """grad_variables still works with a warning; passing both is an error."""
    x = ak.tensor([1.0, 2.0], dtype=ak.double, requires_grad=True)
    v = ak.ones(2, dtype=ak.double)
    with pytest.warns((UserWarning, FutureWarning), match="grad_variables.? is deprecated. "
                                                          "Use .grad_tensors. instead."):
        ak.autograd.backward(Square.apply(x), grad_variables=v)
    np.testing.assert_allclose(arr(x.grad), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="'grad_tensors' and 'grad_variables' .deprecated. "
                                           "arguments both passed to backward"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ak.autograd.backward(Square.apply(x), grad_tensors=v, grad_variables=v)


def test_seed_variable_is_deprecated():
    """autograd.variable(...) warns and makes a tensor."""
    with pytest.warns(UserWarning, match=r"variable\(...\) is deprecated, use "
                                         r"torch.tensor\(...\) instead"):
        t = ak.autograd.variable([1.0, 2.0], requires_grad=True)
    assert isinstance(t, ak.Tensor) and t.requires_grad
    assert isinstance(t, ak.autograd.Variable)


def test_seed_is_checkpoint_valid():
    """_is_checkpoint_valid: True in backward(), False while grad() runs."""
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            seen.append(ak.autograd._is_checkpoint_valid())
            return g

    x = ak.tensor([1.0], requires_grad=True)
    Probe.apply(x).sum().backward()
    ak.autograd.grad(Probe.apply(x).sum(), x)
    assert seen == [True, False] and ak.autograd._is_checkpoint_valid()

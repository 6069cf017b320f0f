"""In-place ops: version counters, PyTorch's errors, dtype rules, and gradients through
chains of in-place ops (against PyTorch when it is installed)."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import gradcheck, gradgradcheck

MODIFIED = "has been modified by an inplace operation"


# ---------------------------------------------------------------- versions
@pytest.mark.parametrize("call", [
    lambda t: t.add_(1), lambda t: t.sub_(ak.ones(3), alpha=2), lambda t: t.mul_(2.0),
    lambda t: t.div_(ak.full((3,), 2.0)), lambda t: t.copy_(ak.ones(3)),
    lambda t: t.zero_(), lambda t: t.fill_(2.5), lambda t: t.clamp_(0.0, 1.0),
    lambda t: t.exp_(),
], ids=["add_", "sub_", "mul_", "div_", "copy_", "zero_", "fill_", "clamp_", "exp_"])
def test_each_op_bumps_version_and_returns_self(call):
    t = ak.tensor([0.5, -1.0, 2.0])
    assert t._version == 0
    assert call(t) is t
    assert t._version == 1
    assert call(t) is t and t._version == 2


def test_version_is_shared_with_views():
    base = ak.zeros(2, 3)
    view = base.reshape(6)
    view.add_(1)
    assert base._version == view._version == 1
    np.testing.assert_array_equal(base.numpy(), np.ones((2, 3)))


def test_operators_are_in_place():
    a = ak.zeros(3)
    b = a
    a += 2
    a *= 3
    a -= 1
    a /= 2
    assert a is b and a._version == 4
    np.testing.assert_allclose(a.numpy(), [2.5, 2.5, 2.5])
    a += np.ones(3, dtype=np.float32)
    assert a is b and a._version == 5


def test_operators_record_gradients():
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.float64, requires_grad=True)
    y = ak.tensor([0.5, -1.0, 4.0], dtype=ak.float64, requires_grad=True)
    a = x.clone()
    a += y
    a *= y
    a -= 1
    a /= 2
    assert a.grad_fn.name() == "DivBackward0"
    a.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.detach().numpy() / 2)
    np.testing.assert_allclose(y.grad.numpy(), (x.detach().numpy() + 2 * y.detach().numpy()) / 2)


# ---------------------------------------------------------------- autograd errors
def test_saved_tensor_modified_in_place_raises():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.sum().backward()


def test_exp_saves_its_output_but_mul_does_not_save_self():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    a = x.clone()
    a.exp_()
    a.add_(1)  # ExpInplace saved a's value: now stale
    with pytest.raises(RuntimeError, match=MODIFIED):
        a.sum().backward()
    y = ak.tensor([3.0, 4.0], requires_grad=True)
    b = x.clone()
    b.mul_(y)
    b.add_(1)  # mul_ saved y and a private copy of b, not b itself
    b.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0])


def test_leaf_requiring_grad_is_refused_and_left_unchanged():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    for call in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(),
                 lambda: x.copy_(ak.ones(2)), lambda: x.exp_()):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation."):
            call()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x += 1
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0])
    assert x._version == 0


def test_leaf_update_under_no_grad_is_allowed():
    """An optimizer step: p -= lr * p.grad, without recording anything."""
    p = ak.tensor([1.0, 2.0], requires_grad=True)
    (p * p).sum().backward()
    with ak.no_grad():
        p.sub_(p.grad, alpha=0.1)
        p.mul_(2.0)
        p += 1
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
    np.testing.assert_allclose(p.detach().numpy(), [2.6, 4.2], rtol=1e-6)
    assert p._version == 3


def test_in_place_on_non_grad_tensor_gains_history():
    a = ak.zeros(3)
    y = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a.add_(y, alpha=3)
    assert a.requires_grad and a.grad_fn.name() == "AddBackward0"
    a.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [3.0, 3.0, 3.0])


# ---------------------------------------------------------------- dtype and shape rules
@pytest.mark.parametrize("call,message", [
    (lambda: ak.arange(3).add_(1.5), "result type Float can't be cast to the desired output "
                                     "type Long"),
    (lambda: ak.arange(3).div_(2), "result type Float can't be cast to the desired output "
                                   "type Long"),
    (lambda: ak.arange(3).exp_(), "result type Float can't be cast to the desired output "
                                  "type Long"),
    (lambda: ak.tensor([True]).add_(1), "result type Long can't be cast to the desired "
                                        "output type Bool"),
    (lambda: ak.arange(3).add_(1, alpha=0.5), "argument alpha must not be a floating"),
    (lambda: ak.ones(3).add_(ak.ones(2, 3)), r"output with shape \[3\] doesn't match the "
                                             r"broadcast shape \[2, 3\]"),
    (lambda: ak.ones(3).expand(2, 3).add_(1), "more than one element of the written-to "
                                              "tensor refers to a single memory location"),
    (lambda: ak.ones(2, 3).copy_(ak.ones(4)), r"The size of tensor a \(3\) must match the "
                                              r"size of tensor b \(4\)"),
    (lambda: ak.ones(2, 3).fill_(ak.ones(3)), "fill_ only supports 0-dimension value tensor"),
    (lambda: ak.ones(3).clamp_(), "At least one of 'min' or 'max' must not be None"),
])
def test_errors_match_pytorch(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def _read_only(values):
    arr = np.array(values, dtype=np.float64)
    arr.flags.writeable = False
    return ak.from_numpy(arr)


@pytest.mark.parametrize("write", [
    lambda t: t.add_(1), lambda t: t.copy_(ak.ones(3)), lambda t: t.__setitem__(0, 5.0),
    lambda t: t[1:].mul_(2), lambda t: t.__setitem__(ak.tensor([0, 2]), 1.0)])
def test_writing_into_read_only_memory_says_so(write):
    """(PyTorch only warns at from_numpy and then writes into the array; the message
    for broadcast views stays PyTorch's)"""
    t = _read_only([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="memory is read-only .* clone()"):
        write(t)
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])


def test_int_tensor_plus_equals_float_raises():
    t = ak.arange(3)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t += 1.5
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2])


def test_copy_requires_a_tensor():
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        ak.ones(3).copy_(3)


def test_self_keeps_its_dtype():
    a = ak.ones(3)
    a.add_(ak.tensor([0.25, 0.5, 1.0], dtype=ak.float64))
    assert a.dtype == ak.float32
    i = ak.tensor([1, 2], dtype=ak.int32)
    i.mul_(ak.tensor([3, 4]))
    assert i.dtype == ak.int32 and i.tolist() == [3, 8]
    c = ak.zeros(3, dtype=ak.int64)
    c.copy_(ak.tensor([1.7, 2.2, -3.9]))
    assert c.tolist() == [1, 2, -3]
    c.fill_(2.5)
    assert c.tolist() == [2, 2, 2]
    c.clamp_(0, 1)
    assert c.tolist() == [1, 1, 1]


# ---------------------------------------------------------------- gradients
def _chain_arith(x, y):
    a = x.clone()
    a.mul_(y)
    a.add_(y, alpha=2)
    a.sub_(0.5)
    a.div_(y)
    return a.exp_()


def _chain_operators(x, y):
    a = x.clone()
    a += y
    a *= y
    a -= y
    a /= y
    return a


def _chain_copy(x, y):
    a = x.clone()
    a.copy_(y)  # y (3,) broadcast into (2, 3)
    a.mul_(x)
    return a


def _chain_fill_zero(x, y):
    a = x.clone()
    a.fill_(y.sum())
    b = x.clone()
    b.zero_()
    b.add_(y)
    return a * b


def _chain_clamp(x, y):
    a = x.clone()
    a.clamp_(-0.5, 0.7)
    b = x.clone()
    b.clamp_(min=y)  # a tensor bound, broadcast
    c = x.clone()
    c.clamp_(max=0.25)
    return a + b * c


CHAINS = [_chain_arith, _chain_operators, _chain_copy, _chain_fill_zero, _chain_clamp]


def _inputs(rng):
    x = rng.uniform(-1, 1, size=(2, 3))
    y = rng.uniform(0.5, 1.5, size=(3,))
    return x, y


@pytest.mark.parametrize("chain", CHAINS, ids=lambda f: f.__name__)
def test_chain_gradients_match_torch(chain):
    torch = pytest.importorskip("torch")
    x, y = _inputs(np.random.default_rng(0))
    seed = np.random.default_rng(1).uniform(-1, 1, size=(2, 3))
    ours = [ak.tensor(v, requires_grad=True) for v in (x, y)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, y)]
    out, out_t = chain(*ours), chain(*theirs)
    np.testing.assert_allclose(out.detach().numpy(), out_t.detach().numpy(), rtol=1e-12)
    (out * ak.tensor(seed)).sum().backward()
    (out_t * torch.tensor(seed)).sum().backward()
    for a, t in zip(ours, theirs):
        want = np.zeros_like(t.detach().numpy()) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-12, atol=1e-12)


def test_clamp_tensor_bounds_match_torch_at_ties_and_crossed_bounds():
    torch = pytest.importorskip("torch")
    x = np.array([0.0, -1.0, 2.0, 0.5, 0.3, 0.6])
    lo = np.array([0.0, 0.2, 0.2, 0.8, 0.4, 0.6])  # last three: lo > hi, lo == hi
    hi = np.array([1.0, 1.0, 1.0, 0.4, 0.4, 0.6])
    ours = [ak.tensor(v, requires_grad=True) for v in (x, lo, hi)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, lo, hi)]
    for (xx, low, high), lib in ((ours, ak), (theirs, torch)):
        a = xx.clone()
        a.clamp_(low, high)
        (a * lib.arange(1, 7, dtype=lib.float64)).sum().backward()
    np.testing.assert_array_equal(ours[0].detach().numpy(), theirs[0].detach().numpy())
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("chain", CHAINS, ids=lambda f: f.__name__)
def test_chain_gradcheck_and_gradgradcheck(chain):
    x, y = _inputs(np.random.default_rng(2))
    if chain is _chain_clamp:  # keep clear of the kinks
        x = np.array([[-0.9, -0.2, 0.1], [0.4, 0.9, 0.35]])
        y = np.array([0.0, -0.5, 0.2])
    args = [ak.tensor(v, requires_grad=True) for v in (x, y)]
    assert gradcheck(chain, args)
    assert gradgradcheck(chain, args)


def test_self_aliasing_operand_gets_the_true_gradient():
    """a.mul_(a): PyTorch raises at backward; adkit copies the aliased operand first, so
    the gradient is the true one, d(x^2)/dx = 2x."""
    x = ak.tensor([1.0, -2.0, 3.0], dtype=ak.float64, requires_grad=True)
    a = x.clone()
    a.mul_(a)
    a.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])
    x.grad = None
    b = x.clone()
    b.div_(b)
    b.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 0.0], atol=1e-15)


def test_copy_gradient_to_src_in_its_dtype():
    src = ak.tensor([1.0, 2.0, 3.0], dtype=ak.float64, requires_grad=True)
    a = ak.zeros(2, 3)  # float32
    a.copy_(src)
    assert a.dtype == ak.float32 and a.grad_fn.name() == "CopyBackward0"
    a.sum().backward()
    assert src.grad.dtype == ak.float64
    np.testing.assert_allclose(src.grad.numpy(), [2.0, 2.0, 2.0])


def test_inplace_on_results_of_ops_that_do_not_save_them():
    """Like PyTorch: mul saves its inputs, not its result, so the result may be modified
    in place; exp saves its result, so modifying it must raise."""
    x = ak.tensor([1.0, 2.0], dtype=ak.float64, requires_grad=True)
    y = x * 2
    y.add_(1)
    y[0] = 0.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 2.0])
    z = x.exp()
    z.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_inplace_through_views_rebases_the_base_like_torch():
    """`y[:, 0] *= 3`, `y[1] += ...`, writes through a transposed view: the base's
    gradient is PyTorch's (CopySlices)."""
    def run(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lib.float64,
                       requires_grad=True)
        y = x * 2
        y[:, 0] *= 3
        y[1] += x[0]
        v = y.t()
        v[0, 1] = 7.0
        (y * y).sum().backward()
        return x.grad.numpy()

    np.testing.assert_allclose(run(ak), [[72.0, 40.0, 54.0], [0.0, 48.0, 60.0]])
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(run(ak), run(torch))


def test_inplace_through_view_double_backward():
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.float64, requires_grad=True)

    def f(a):
        y = a * 1.0
        y[1:] *= a[:2]
        return (y * y).sum()

    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))


def test_inplace_on_view_of_leaf_requiring_grad_is_refused():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[0:1].mul_(2.0)
    np.testing.assert_allclose(x.detach().numpy(), [1.0, 2.0])  # refused before writing

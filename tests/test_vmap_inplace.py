"""In-place ops under vmap (adkit/ops/inplace.py batching rules): each op with a batched
self and a batched or unbatched other equals a per-example loop on copies, writes into the
caller's tensor, keeps promotion and broadcasting per example; PyTorch's error for an
unbatched self with a batched other; the clone-then-modify pattern, with gradients
(reverse and forward mode) against the per-example loop."""
import re

import numpy as np
import pytest

import adkit as ak
from adkit.func import jvp, vmap

B = 3
UNBATCHED_SELF = re.escape(
    "vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a "
    "Tensor `other` in extra_args that has more elements than `self`. This happened due to "
    "`other` being vmapped over but `self` not being vmapped over in a vmap. Please try to "
    "use out-of-place operators instead of inplace arithmetic.")

# name -> (call(self, other), whether other must be positive)
BINARY = {
    "add_": (lambda a, b: a.add_(b, alpha=2), False),
    "sub_": (lambda a, b: a.sub_(b, alpha=0.5), False),
    "mul_": (lambda a, b: a.mul_(b), False),
    "div_": (lambda a, b: a.div_(b), True),
    "copy_": (lambda a, b: a.copy_(b), False),
    "clamp_": (lambda a, b: a.clamp_(min=b), False),
    "clamp_both": (lambda a, b: a.clamp_(b - 0.25, b + 0.25), False),
    "clamp_max": (lambda a, b: a.clamp_(max=b), False),
}
UNARY = {
    "zero_": lambda a: a.zero_(),
    "exp_": lambda a: a.exp_(),
    "fill_number": lambda a: a.fill_(2.5),
    "fill_0d_tensor": lambda a: a.fill_(ak.tensor(-1.5, dtype=ak.float64)),
    "clamp_numbers": lambda a: a.clamp_(-0.5, 0.5),
    "add_number": lambda a: a.add_(2.0, alpha=3),
    "mul_number": lambda a: a.mul_(-2.0),
}
SELF_SHAPE = (3, 4)
OTHER_SHAPES = [(3, 4), (4,), (1, 4), (3, 1), ()]


def _array(shape, rng, positive=False):
    a = rng.standard_normal(shape)
    return np.abs(a) + 0.5 if positive else a


def _physical(example_shape, dim, rng, positive=False):
    """B examples of example_shape stacked along dim (an int, negative allowed)."""
    stacked = np.stack([_array(example_shape, rng, positive) for _ in range(B)])
    return np.moveaxis(stacked, 0, dim if dim >= 0 else len(example_shape) + 1 + dim)


def _example(arr, dim, b):
    return ak.tensor(np.take(arr, b, axis=dim))


def _check_writes(call, self_arr, self_dim, others, other_dims):
    """vmap(call) against the loop: the result, and the caller's tensor holding it."""
    def f(a, *rest):
        r = call(a, *rest)
        return a, r

    x = ak.tensor(self_arr)
    out_a, out_r = vmap(f, in_dims=(self_dim, *other_dims))(x, *[ak.tensor(o) for o in others])
    want = []
    for b in range(B):
        a = _example(self_arr, self_dim, b)
        rest = [_example(o, d, b) if d is not None else ak.tensor(o)
                for o, d in zip(others, other_dims)]
        r = call(a, *rest)
        assert r is a
        want.append(a.numpy())
    want = np.stack(want)
    for got in (out_a, out_r, x.movedim(self_dim, 0)):
        assert got.shape == want.shape and got.dtype == ak.tensor(want).dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert x._version >= 1


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("other_shape", OTHER_SHAPES, ids=str)
@pytest.mark.parametrize("dims", [(0, 0), (0, -1), (-1, 0), (1, None), (0, None)], ids=str)
def test_binary_inplace_matches_loop(name, other_shape, dims):
    call, positive = BINARY[name]
    rng = np.random.default_rng(0)
    self_dim, other_dim = dims
    self_arr = _physical(SELF_SHAPE, self_dim, rng)
    if other_dim is None:
        other = _array(other_shape, rng, positive)
    else:
        other = _physical(other_shape, other_dim, rng, positive)
    _check_writes(call, self_arr, self_dim, [other], [other_dim])


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("self_dim", [0, 1, -1])
def test_self_only_inplace_matches_loop(name, self_dim):
    rng = np.random.default_rng(1)
    _check_writes(UNARY[name], _physical(SELF_SHAPE, self_dim, rng), self_dim, [], [])


@pytest.mark.parametrize("value_dim", [0, None])
def test_fill_with_a_tensor_value(value_dim):
    rng = np.random.default_rng(2)
    value = rng.standard_normal(B) if value_dim == 0 else np.array(0.75)
    _check_writes(lambda a, v: a.fill_(v), _physical(SELF_SHAPE, 1, rng), 1, [value],
                  [value_dim])


def test_fill_refuses_a_value_with_dims_per_example():
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor "
                                           "but got tensor with 1 dimensions"):
        vmap(lambda a, v: a.fill_(v))(ak.zeros(B, 4), ak.ones(B, 4))


def test_promotion_is_per_example():
    """A per-example 0-d float64 other does not promote a float32 self (it would if the
    physical (B,)-shaped other were promoted as a dimensioned tensor)."""
    rng = np.random.default_rng(3)
    self_arr = _physical((4,), 0, rng).astype(np.float32)
    _check_writes(lambda a, b: a.mul_(b).add_(b), self_arr, 0, [rng.standard_normal(B)], [0])
    with pytest.raises(RuntimeError, match="result type Double can't be cast to the desired "
                                           "output type Long"):
        vmap(lambda a, b: a.add_(b))(ak.zeros(B, 4, dtype=ak.int64),
                                     ak.ones(B, dtype=ak.float64))


def test_broadcast_must_keep_the_per_example_shape():
    with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the "
                                           r"broadcast shape \[2, 4\]"):
        vmap(lambda a, b: a.add_(b))(ak.zeros(B, 4), ak.ones(B, 2, 4))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        vmap(lambda a, b: a.copy_(b))(ak.zeros(B, 4), ak.ones(B, 2, 4))


@pytest.mark.parametrize("call", [
    lambda a, b: a.add_(b), lambda a, b: a.sub_(b), lambda a, b: a.mul_(b),
    lambda a, b: a.div_(b), lambda a, b: a.copy_(b), lambda a, b: a.clamp_(min=b),
    lambda a, b: a.clamp_(max=b), lambda a, b: a.fill_(b.sum()),
], ids=["add_", "sub_", "mul_", "div_", "copy_", "clamp_min", "clamp_max", "fill_"])
def test_unbatched_self_with_batched_other_raises(call):
    x = ak.zeros(4)
    with pytest.raises(RuntimeError, match=UNBATCHED_SELF):
        vmap(call, in_dims=(None, 0))(x, ak.ones(B, 4))
    np.testing.assert_array_equal(x.numpy(), np.zeros(4))


def test_unbatched_self_and_other_inside_vmap_run_eagerly():
    x, w = ak.zeros(4), ak.ones(4)

    def f(a):
        x.add_(w)
        return a * 2
    vmap(f)(ak.ones(B, 4))
    np.testing.assert_array_equal(x.numpy(), np.ones(4))


def _clone_then_modify(a, w, s):
    """The common pattern: clone the input, then update it in place."""
    c = a.clone()
    c.mul_(w).add_(a, alpha=0.5)
    c.sub_(w * w)
    c.div_(w.abs() + 1)
    c.clamp_(min=-1.0, max=s)
    c.exp_()
    d = a.clone()
    d.copy_(w * 3)
    e = a.clone()
    e.fill_(s)
    f = a.clone()
    f.mul_(f)
    return c + d * a + e * w + f


def _inputs(rng, requires_grad):
    a = ak.tensor(rng.standard_normal((B, 4)), requires_grad=requires_grad)
    w = ak.tensor(rng.standard_normal((4, B)), requires_grad=requires_grad)
    s = ak.tensor(rng.uniform(0.5, 1.5, B), requires_grad=requires_grad)
    return a, w, s


def _loop(fn, a, w, s):
    return ak.stack([fn(a[b], w[:, b], s[b]) for b in range(B)])


def test_clone_then_modify_matches_loop_and_leaves_inputs_alone():
    a, w, s = _inputs(np.random.default_rng(4), False)
    before = [t.numpy().copy() for t in (a, w, s)]
    got = vmap(_clone_then_modify, in_dims=(0, 1, 0))(a, w, s)
    np.testing.assert_allclose(got.numpy(), _loop(_clone_then_modify, a, w, s).numpy(),
                               rtol=1e-12)
    for t, old in zip((a, w, s), before):
        np.testing.assert_array_equal(t.numpy(), old)


def test_gradients_through_clone_then_modify():
    a, w, s = _inputs(np.random.default_rng(5), True)
    got = ak.autograd.grad(vmap(_clone_then_modify, in_dims=(0, 1, 0))(a, w, s).sum(),
                           (a, w, s))
    want = ak.autograd.grad(_loop(_clone_then_modify, a, w, s).sum(), (a, w, s))
    for g, e in zip(got, want):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


def test_forward_mode_through_clone_then_modify():
    rng = np.random.default_rng(6)
    primals = _inputs(rng, False)
    tangents = _inputs(rng, False)
    out, tangent = jvp(lambda *p: vmap(_clone_then_modify, in_dims=(0, 1, 0))(*p),
                       primals, tangents)
    want_out, want_tangent = jvp(lambda *p: _loop(_clone_then_modify, *p), primals, tangents)
    np.testing.assert_allclose(out.numpy(), want_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent.numpy(), want_tangent.numpy(), rtol=1e-10, atol=1e-12)


def test_nested_vmap_writes_into_the_clone():
    rng = np.random.default_rng(7)
    a = ak.tensor(rng.standard_normal((2, B, 4)), requires_grad=True)
    w = ak.tensor(rng.standard_normal((B, 4)), requires_grad=True)

    def f(x, y):
        c = x.clone()
        c.mul_(y).add_(y)
        c.clamp_(min=y)
        return c
    got = vmap(vmap(f, in_dims=(0, 0)), in_dims=(0, None))(a, w)
    want = ak.stack([ak.stack([f(a[i, j], w[j]) for j in range(B)]) for i in range(2)])
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    g_got = ak.autograd.grad(got.sum(), (a, w))
    g_want = ak.autograd.grad(want.sum(), (a, w))
    for g, e in zip(g_got, g_want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


def test_clone_under_vmap_is_c_contiguous_per_example_so_view_works():
    """Found by the fuzzer: a scan's ys come out of vmap batched at dim 1; clone kept the
    batch dim there, so each example of the copy was not contiguous and view(-1) failed,
    where the loop of examples succeeds."""
    xs = ak.tensor(np.arange(24.0).reshape(3, 2, 4))  # batch dim 1, of size 2

    def f(x):
        y = x.clone()
        y.view(-1)[::2].zero_()
        return y
    got = ak.func.vmap(f, in_dims=1)(xs)
    want = ak.stack([f(xs[:, b]) for b in range(2)])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    scanned = ak.func.vmap(lambda x: f(ak.scan(lambda c, r: (c + r, c * r), x[0] * 0, x)[1]))
    batch = ak.tensor(np.random.default_rng(0).standard_normal((2, 3, 4)))
    np.testing.assert_allclose(scanned(batch).numpy(), np.stack(
        [f(ak.scan(lambda c, r: (c + r, c * r), b[0] * 0, b)[1]).numpy() for b in batch]))

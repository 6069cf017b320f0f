"""Linear algebra under vmap (adkit/ops/linalg.py batching rules): matmul with every
batched/unbatched mix of 1-D, 2-D and 3-D examples against a per-example loop, nested
vmap, the checked products (mm, bmm, dot, mv, outer), einsum with repeated labels, and
gradients through vmap(matmul) against the loop's; plus the reduction rules the op table
does not reach (sum_to_size, flattened argmax, max over a dim)."""
import itertools

import numpy as np
import pytest

import adkit as ak
from adkit.func import vmap

B = 3
RNG = np.random.default_rng(0)
# per-example shapes for x and y that matmul accepts together
X_SHAPES = [(4,), (2, 4), (2, 2, 4)]
Y_SHAPES = [(4,), (4, 5), (2, 4, 5)]


def _batched(shape, dim):
    """(physical array, in_dim): B examples of `shape` along dim, or one shared example."""
    if dim is None:
        return RNG.standard_normal(shape), None
    return np.stack([RNG.standard_normal(shape) for _ in range(B)], axis=dim), dim


def _example(arr, dim, b):
    return arr if dim is None else np.take(arr, b, axis=dim)


def _loop(fn, arrays, dims):
    return np.stack([fn(*[_example(a, d, b) for a, d in zip(arrays, dims)])
                     for b in range(B)])


@pytest.mark.parametrize("xs,ys", list(itertools.product(X_SHAPES, Y_SHAPES)))
@pytest.mark.parametrize("dims", [(0, 0), (0, None), (None, 0), (-1, 1), (1, -1)])
def test_matmul_matches_loop(xs, ys, dims):
    arrays, in_dims = zip(*[_batched(s, d) for s, d in zip((xs, ys), dims)])
    got = vmap(ak.matmul, in_dims=in_dims)(*[ak.tensor(a) for a in arrays])
    want = _loop(np.matmul, arrays, in_dims)
    assert tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op,shapes", [
    (ak.mm, [(2, 4), (4, 3)]), (ak.bmm, [(2, 2, 4), (2, 4, 3)]), (ak.dot, [(4,), (4,)]),
    (ak.mv, [(2, 4), (4,)]), (ak.outer, [(3,), (4,)])])
@pytest.mark.parametrize("dims", [(0, 0), (0, None), (None, -1)])
def test_checked_products_match_loop(op, shapes, dims):
    arrays, in_dims = zip(*[_batched(s, d) for s, d in zip(shapes, dims)])
    got = vmap(op, in_dims=in_dims)(*[ak.tensor(a) for a in arrays])
    want = _loop(lambda *e: op(*[ak.tensor(a) for a in e]).numpy(), arrays, in_dims)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_checked_products_keep_per_example_errors():
    x = ak.tensor(RNG.standard_normal((B, 2, 2, 3)))
    with pytest.raises(RuntimeError, match="self must be a matrix"):
        vmap(ak.mm, in_dims=(0, None))(x, ak.ones(3, 2, dtype=ak.float64))
    # bmm refuses what matmul would broadcast: (1, 2, 3) with (2, 3, 4)
    with pytest.raises(RuntimeError, match="Expected size for first two dimensions"):
        vmap(ak.bmm, in_dims=(0, None))(ak.tensor(RNG.standard_normal((B, 1, 2, 3))),
                                         ak.ones(2, 3, 4, dtype=ak.float64))
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied "
                                           r"\(2x3 and 4x5\)"):
        vmap(ak.matmul)(ak.tensor(RNG.standard_normal((B, 2, 3))),
                        ak.tensor(RNG.standard_normal((B, 4, 5))))


def test_nested_vmap_matmul():
    x = RNG.standard_normal((3, 4, 2, 5))
    y = RNG.standard_normal((3, 5))
    inner = vmap(ak.matmul, in_dims=(0, None))
    got = vmap(inner, in_dims=(0, 0))(ak.tensor(x), ak.tensor(y))
    np.testing.assert_allclose(got.numpy(), np.einsum("ijkl,il->ijk", x, y), rtol=1e-12)
    # all pairwise dot products: the inner level batches y, the outer level x
    p, q = RNG.standard_normal((3, 5)), RNG.standard_normal((4, 5))
    pairs = vmap(vmap(ak.matmul, in_dims=(None, 0)), in_dims=(0, None))
    np.testing.assert_allclose(pairs(ak.tensor(p), ak.tensor(q)).numpy(), p @ q.T,
                               rtol=1e-12)


@pytest.mark.parametrize("equation,shapes", [
    ("ii->i", [(3, 3)]), ("ii", [(4, 4)]), ("iij->ji", [(2, 2, 3)]),
    ("ii,ij->j", [(3, 3), (3, 2)]), ("i,i,i->i", [(3,)] * 3), ("...ii->...i", [(2, 3, 3)]),
    ("ij,jk", [(2, 3), (3, 2)])])
@pytest.mark.parametrize("batch_first_only", [False, True])
def test_einsum_with_repeated_labels(equation, shapes, batch_first_only):
    dims = [0] + [None if batch_first_only else -1] * (len(shapes) - 1)
    arrays, in_dims = zip(*[_batched(s, d) for s, d in zip(shapes, dims)])
    got = vmap(lambda *ops: ak.einsum(equation, *ops), in_dims=in_dims)(
        *[ak.tensor(a) for a in arrays])
    want = _loop(lambda *e: np.einsum(equation, *e), arrays, in_dims)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs,ys", [((4,), (4,)), ((4,), (4, 5)), ((2, 4), (4,)),
                                   ((2, 2, 4), (2, 4, 5)), ((2, 4), (2, 4, 5))])
@pytest.mark.parametrize("dims", [(0, 0), (0, None), (None, 0)])
def test_grad_through_vmap_matmul_matches_loop(xs, ys, dims):
    (xa, xd), (ya, yd) = _batched(xs, dims[0]), _batched(ys, dims[1])
    x = ak.tensor(xa, requires_grad=True)
    y = ak.tensor(ya, requires_grad=True)
    out = vmap(ak.matmul, in_dims=(xd, yd))(x, y)
    gx, gy = ak.autograd.grad((out * out).sum(), (x, y))
    x2 = ak.tensor(xa, requires_grad=True)
    y2 = ak.tensor(ya, requires_grad=True)
    total = sum((r * r).sum() for r in (
        (x2 if xd is None else x2[b]).matmul(y2 if yd is None else y2[b]) for b in range(B)))
    wx, wy = ak.autograd.grad(total, (x2, y2))
    np.testing.assert_allclose(gx.numpy(), wx.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), wy.numpy(), rtol=1e-12, atol=1e-12)


def test_sum_to_size_per_example_target():
    x = RNG.standard_normal((B, 2, 3, 4))
    for size in [(3, 4), (3, 1), (1, 1, 4), (2, 3, 4), ()]:
        got = vmap(lambda t, s=size: t.sum_to_size(s))(ak.tensor(x))
        want = np.stack([ak.tensor(e).sum_to_size(size).numpy() for e in x])
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    with pytest.raises(RuntimeError, match=r"size \[5\] is not expandable to size "
                                           r"\[2, 3, 4\]"):
        vmap(lambda t: t.sum_to_size(5))(ak.tensor(x))


def test_argmax_flattens_each_example_and_max_gives_two_batched_outputs():
    x = RNG.standard_normal((2, B, 3, 4))
    got = vmap(ak.argmax, in_dims=1)(ak.tensor(x))
    np.testing.assert_array_equal(got.numpy(), [np.argmax(x[:, b]) for b in range(B)])
    kept = vmap(lambda t: t.argmin(keepdim=True), in_dims=1)(ak.tensor(x))
    assert tuple(kept.shape) == (B, 1, 1, 1)
    values, indices = vmap(lambda t: ak.max(t, -1), in_dims=1)(ak.tensor(x))
    np.testing.assert_allclose(values.numpy(), np.moveaxis(x.max(-1), 1, 0))
    np.testing.assert_array_equal(indices.numpy(), np.moveaxis(x.argmax(-1), 1, 0))
    with pytest.raises(IndexError, match="Expected reduction dim to be specified"):
        vmap(ak.argmax)(ak.zeros(B, 0, 2))

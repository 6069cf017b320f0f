"""Shape and indexing ops: what the op table cannot express. Views share data and version
counter with their base; errors match PyTorch's; getitem/setitem gradients; random
getitem keys (Hypothesis) against a numpy reference."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adkit as ak

from . import op_db  # noqa: F401  (load the table first: op_db_indexing imports it)
from .op_db_indexing import ak_key, np_getitem, np_getitem_grad


def _base():
    return ak.tensor(np.arange(24.0).reshape(2, 3, 4))


VIEWS = {
    "reshape": lambda x: x.reshape(6, 4), "view": lambda x: x.view(-1),
    "flatten": lambda x: x.flatten(1), "unflatten": lambda x: x.unflatten(2, (2, 2)),
    "squeeze": lambda x: x[:1].squeeze(0), "unsqueeze": lambda x: x.unsqueeze(1),
    "expand": lambda x: x[:, :1].expand(2, 5, 4), "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 1), "T": lambda x: x.T, "t": lambda x: x[0].t(),
    "split": lambda x: x.split(2, 2)[1], "chunk": lambda x: x.chunk(3, 1)[2],
    "basic_getitem": lambda x: x[1, ::2, None, -2:], "ellipsis": lambda x: x[...],
    "broadcast_to": lambda x: ak.broadcast_to(x[0, 0], (3, 4)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_share_data_and_version_with_base(name):
    x = _base()
    v = VIEWS[name](x)
    assert np.shares_memory(v.numpy(), x.numpy())
    before = v._version
    x[...] = x.detach() * 0 + 7.0  # in place on the base
    assert v._version == x._version == before + 1
    np.testing.assert_array_equal(v.numpy(), 7.0)


def test_writing_through_a_view_changes_the_base():
    x = _base()
    v = x.transpose(0, 2)[1]
    v[0, 0] = -1.0
    assert x[0, 0, 1].item() == -1.0
    assert x._version == v._version == 1


@pytest.mark.parametrize("fn", [lambda x: x.flip(0), lambda x: x.repeat(1, 1, 1),
                                lambda x: ak.cat([x]), lambda x: ak.stack([x]),
                                lambda x: x[[0, 1]], lambda x: x[x > 3],
                                lambda x: x.index_select(0, ak.tensor([1])),
                                lambda x: x[0].t().contiguous()])
def test_copying_ops_do_not_share_memory(fn):
    x = _base()
    out = fn(x)
    assert not np.shares_memory(out.numpy(), x.numpy())
    assert out._base is None


def test_contiguous_returns_self_when_contiguous():
    x = _base()
    assert x.contiguous() is x
    y = x.transpose(0, 1)
    c = y.contiguous()
    assert c is not y and c.numpy().flags.c_contiguous
    np.testing.assert_array_equal(c.numpy(), y.numpy())


def test_view_of_non_viewable_input_raises():
    with pytest.raises(RuntimeError, match=r"view size is not compatible .* Use "
                                           r"\.reshape\(\.\.\.\) instead\."):
        _base().transpose(0, 1).view(-1)
    assert _base().transpose(0, 1).reshape(-1).shape == (24,)


def test_repeated_integer_indices_accumulate_gradients():
    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0])
    y = ak.tensor(np.ones((2, 3)), requires_grad=True)
    (y[ak.tensor([1, 1]), ak.tensor([2, 2])] * ak.tensor([2.0, 5.0])).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[0, 0, 0], [0, 0, 7]])


def test_getitem_gradient_is_differentiable():
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.float64, requires_grad=True)
    assert ak.autograd.gradgradcheck(lambda t: t[[0, 0, 2]] * t[[1, 2, 2]], [x])


def test_setitem_gradients():
    x = ak.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    v = ak.tensor([10.0, 20.0], requires_grad=True)
    w = ak.tensor(np.arange(12.0).reshape(3, 4) + 1)
    y = x.clone()
    y[1, 1:3] = v
    assert y._version == 1 and y.grad_fn.name() == "SetItemBackward0"
    (y * w).sum().backward()
    expected = w.numpy().copy()
    expected[1, 1:3] = 0
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    np.testing.assert_array_equal(v.grad.numpy(), [w[1, 1].item(), w[1, 2].item()])


def test_setitem_broadcast_value_gradient_is_summed():
    x = ak.zeros(3, 4)
    v = ak.tensor([[2.0]], requires_grad=True)
    x[ak.tensor([True, False, True])] = v
    np.testing.assert_array_equal(x.detach().numpy()[[0, 2]], 2.0)
    x.sum().backward()
    assert v.grad.shape == (1, 1) and v.grad.item() == 8.0


def test_setitem_on_leaf_requiring_grad_raises():
    x = ak.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 1.0


def test_setitem_gradgradcheck_both_inputs():
    x = ak.tensor(np.linspace(-1, 1, 6).reshape(2, 3), dtype=ak.float64, requires_grad=True)
    v = ak.tensor([0.5, -0.25], dtype=ak.float64, requires_grad=True)

    def fn(a, b):
        y = (a * a).clone()
        y[:, 1] = b * b
        return y
    assert ak.autograd.gradcheck(fn, [x, v])
    assert ak.autograd.gradgradcheck(fn, [x, v])


def test_split_gradient_with_unused_pieces():
    x = ak.tensor(np.arange(5.0), requires_grad=True)
    a, b, c = x.split([2, 1, 2])
    (b * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 3, 0, 0])


def test_sort_and_topk_return_named_tuples():
    x = ak.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    s = ak.sort(x, dim=1, descending=True)
    assert s.values.tolist() == [[3, 2, 1], [5, 4, 0]] and s.indices.tolist() == [[0, 2, 1],
                                                                                [1, 2, 0]]
    values, indices = x.topk(2, dim=0, largest=False)
    assert indices.dtype == ak.int64 and not indices.requires_grad
    assert values.tolist() == [[0, 1, 2], [3, 5, 4]]


def test_cat_promotes_dtypes_and_skips_legacy_empty():
    out = ak.cat([ak.ones(2, 2), ak.zeros(1, 2, dtype=ak.float64), ak.zeros(0)])
    assert out.dtype == ak.float64 and out.shape == (3, 2)


# ---------------------------------------------------------------- against PyTorch
CASES = {  # name -> fn(lib, x) where x is a (2, 3, 4) float32 tensor of lib
    "view_non_viewable": lambda lib, x: x.transpose(0, 1).view(-1),
    "view_bad_size": lambda lib, x: x.view(5, 5),
    "view_two_inferred": lambda lib, x: x.view(-1, -1),
    "reshape_negative": lambda lib, x: x.reshape(-2, 12),
    "reshape_ambiguous": lambda lib, x: lib.zeros(0, 3).reshape(-1, 0),
    "t_3d": lambda lib, x: x.t(),
    "transpose_range": lambda lib, x: x.transpose(0, 3),
    "permute_len": lambda lib, x: x.permute(0, 1),
    "permute_dup": lambda lib, x: x.permute(0, 1, 1),
    "squeeze_range": lambda lib, x: x.squeeze(5),
    "unsqueeze_range": lambda lib, x: x.unsqueeze(4),
    "flatten_order": lambda lib, x: x.flatten(2, 1),
    "unflatten_sizes": lambda lib, x: x.unflatten(1, (2, 2)),
    "expand_fewer": lambda lib, x: x.expand(3, 3),
    "expand_size": lambda lib, x: x.expand(2, 3, 5),
    "expand_negative": lambda lib, x: x.expand(-1, 2, 3, 4),
    "broadcast_tensors": lambda lib, x: lib.broadcast_tensors(x, x[:, :2]),
    "cat_sizes": lambda lib, x: lib.cat([x, x[:, :2, :3]], 1),
    "cat_ndim": lambda lib, x: lib.cat([x, x[0]]),
    "cat_zero_dim": lambda lib, x: lib.cat([x[0, 0, 0], x[0, 0, 0]]),
    "cat_empty": lambda lib, x: lib.cat([]),
    "cat_dim": lambda lib, x: lib.cat([x, x], 3),
    "stack_sizes": lambda lib, x: lib.stack([x, x[:1]]),
    "stack_empty": lambda lib, x: lib.stack([]),
    "split_zero": lambda lib, x: x.split(0),
    "split_sum": lambda lib, x: x.split([1, 1], 1),
    "split_negative": lambda lib, x: x.split([1, -1, 3], 1),
    "chunk_zero": lambda lib, x: x.chunk(0),
    "flip_dup": lambda lib, x: x.flip(0, 0),
    "repeat_fewer": lambda lib, x: x.repeat(2),
    "repeat_negative": lambda lib, x: x.repeat(-1, 1, 1),
    "getitem_int": lambda lib, x: x[2],
    "getitem_int_later": lambda lib, x: x[None, :, 5],
    "getitem_too_many": lambda lib, x: x[0, 0, 0, 0],
    "getitem_mask": lambda lib, x: x[lib.tensor([True, False, True])],
    "getitem_mask_later": lambda lib, x: x[0, :, lib.tensor([True, False])],
    "getitem_float_tensor": lambda lib, x: x[lib.tensor([0.5])],
    "getitem_float": lambda lib, x: x[1.5],
    "getitem_step": lambda lib, x: x[::-1],
    "getitem_broadcast": lambda lib, x: x[[[0, 1], [1, 0]], [0, 1, 2]],
    "setitem_shape": lambda lib, x: x.__setitem__([0, 1], lib.ones(5, 4)),
    "setitem_basic_shape": lambda lib, x: x.__setitem__(0, lib.ones(5, 4)),
    "setitem_basic_ndim": lambda lib, x: x.__setitem__((0, 0), lib.ones(2, 4)),
    "index_select_dtype": lambda lib, x: x.index_select(0, lib.tensor([0.0])),
    "index_select_vector": lambda lib, x: x.index_select(0, lib.tensor([[0]])),
    "index_select_range": lambda lib, x: x.index_select(0, lib.tensor([5])),
    "gather_ndim": lambda lib, x: x.gather(0, lib.tensor([0])),
    "gather_size": lambda lib, x: x.gather(1, lib.zeros(2, 2, 5, dtype=lib.int64)),
    "gather_range": lambda lib, x: x.gather(0, lib.zeros(2, 3, 4, dtype=lib.int64) + 5),
    "gather_dtype": lambda lib, x: x.gather(0, lib.zeros(2, 3, 4)),
    "scatter_add_dtype": lambda lib, x: x.scatter_add(
        1, lib.zeros(2, 2, 4, dtype=lib.int64), lib.ones(2, 2, 4, dtype=lib.float64)),
    "scatter_add_size": lambda lib, x: x.scatter_add(
        1, lib.zeros(2, 2, 4, dtype=lib.int64), lib.ones(2, 1, 4)),
    "index_add_count": lambda lib, x: x.index_add(0, lib.tensor([0, 1]), lib.ones(3, 3, 4)),
    "index_add_shape": lambda lib, x: x.index_add(1, lib.tensor([0, 1]), lib.ones(2, 2, 3)),
    "index_add_type": lambda lib, x: x.index_add(
        1, lib.tensor([0, 1]), lib.ones(2, 2, 4, dtype=lib.float64)),
    "index_add_range": lambda lib, x: x.index_add(0, lib.tensor([0, 5]), lib.ones(2, 3, 4)),
    "index_add_range_1d": lambda lib, x: x[0, 0].index_add(0, lib.tensor([5]), lib.ones(1)),
    "topk_range": lambda lib, x: x.topk(5, dim=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_errors_match_torch(name):
    torch = pytest.importorskip("torch")
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with pytest.raises(Exception) as expected:
        CASES[name](torch, torch.tensor(data))
    with pytest.raises(Exception) as got:
        CASES[name](ak, ak.tensor(data))
    assert got.type is expected.type, (got.value, expected.value)
    want = str(expected.value).replace("torch.", "")
    assert str(got.value) == want


def test_sort_nan_and_ties_match_torch():
    torch = pytest.importorskip("torch")
    data = np.array([[1.0, np.nan, 0.0, 1.0, 2.0, 2.0]], dtype=np.float32)
    for descending in (False, True):
        want = torch.sort(torch.tensor(data), descending=descending, stable=True)
        got = ak.sort(ak.tensor(data), descending=descending, stable=True)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


TORCH_KEYS = [
    (slice(None), 0, slice(None), [1, 2]), (0, slice(None), [1, 2]), ([0], None, [0]),
    (None, [1, 0], None, [1, 2]), (Ellipsis, [1, 0], 0), (1, [1, 0], slice(None), [0, 1]),
    ([1, 0], 1, [0, 1]), (np.array([True, False]), Ellipsis, [0, 0]), True,
    (slice(1, None, 2), np.arange(12).reshape(3, 4) % 3 == 0), (slice(None), np.array(1)),
    (slice(None), np.array(0), slice(None), np.array([1, 2])), (np.array(True), 1, [0, 0]),
]


@pytest.mark.parametrize("key", TORCH_KEYS, ids=[repr(k) for k in TORCH_KEYS])
def test_getitem_matches_torch_and_reference(key):
    torch = pytest.importorskip("torch")
    data = np.arange(120.0).reshape(2, 3, 4, 5)
    tkey = tuple(torch.tensor(k) if isinstance(k, (list, np.ndarray)) else k
                 for k in (key if isinstance(key, tuple) else (key,)))
    want = torch.tensor(data)[tkey].numpy()
    np.testing.assert_array_equal(ak.tensor(data)[ak_key(key)].numpy(), want)
    np.testing.assert_array_equal(np_getitem(data, key), want)


# ---------------------------------------------------------------- random keys
def _item(draw, n, use_masks, arr_shape):
    """One key item for a dim of size n."""
    kind = draw(st.sampled_from(["slice", "array"] + (["int"] if n else [])))
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "slice" or (n == 0 and not use_masks):
        bounds = st.none() | st.integers(-6, 6)
        return slice(draw(bounds), draw(bounds), draw(st.none() | st.integers(1, 3)))
    if use_masks:
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    size = int(np.prod(arr_shape))
    values = draw(st.lists(st.integers(-n, n - 1), min_size=size, max_size=size))
    return np.array(values, dtype=np.int64).reshape(arr_shape)


@st.composite
def shapes_and_keys(draw):
    """A shape and a key mixing ints, slices, None, an Ellipsis, and either int arrays
    (all of one shape) or one bool mask."""
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    n = len(shape)
    if draw(st.booleans()):  # explicit items for dims [0, a) and [b, n), Ellipsis between
        a = draw(st.integers(0, n))
        dims = list(range(a)) + [Ellipsis] + list(range(draw(st.integers(a, n)), n))
    else:
        dims = list(range(draw(st.integers(0, n))))
    use_masks = draw(st.booleans())
    arr_shape = draw(st.sampled_from([(1,), (2,), (3,), (2, 2), ()]))
    items = []
    for d in dims:
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        items.append(Ellipsis if d is Ellipsis else _item(draw, shape[d], use_masks, arr_shape))
    masks = [i for i, k in enumerate(items) if isinstance(k, np.ndarray) and k.dtype == bool]
    for i in masks[1:]:  # masks' nonzero() results need not broadcast together
        items[i] = slice(None)
    return shape, tuple(items)


@settings(max_examples=150)  # derandomized by the default profile (conftest.py)
@given(shapes_and_keys(), st.booleans(), st.integers(0, 2**32 - 1))
def test_random_getitem_keys_against_numpy(shape_key, as_tensors, seed):
    shape, key = shape_key
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape)
    x = ak.tensor(data, requires_grad=True)
    out = x[ak_key(key) if as_tensors else key]
    want = np_getitem(data, key)
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.detach().numpy(), want)
    grad = rng.standard_normal(want.shape)
    out.backward(ak.tensor(grad))
    np.testing.assert_allclose(x.grad.numpy(), np_getitem_grad(shape, key, grad),
                               rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- jvp rules
def _jvp_cases():
    from adkit.ops import indexing, join, scatter, shape, sorting
    r = np.random.default_rng(0)

    def a(*shape):
        return ak.tensor(r.standard_normal(shape))
    idx = ak.tensor(np.array([2, 0, 2]))
    basic, adv = indexing.parse_key((1, slice(None), [0, 0, 2]), (2, 3, 4))
    return {
        "reshape": (shape.Reshape, a(2, 3, 4), (6, -1)), "view": (shape.View, a(2, 6), (3, 4)),
        "squeeze": (shape.Squeeze, a(1, 3, 1), None), "unsqueeze": (shape.Unsqueeze, a(3, 2), 1),
        "expand": (shape.Expand, a(3, 1), (2, 3, 4)), "transpose": (shape.Transpose, a(2, 3), 0, 1),
        "permute": (shape.Permute, a(2, 3, 4), (2, 0, 1)), "contiguous": (shape.Contiguous, a(3, 2)),
        "cat": (join.Cat, 1, a(2, 3), a(2, 1)), "stack": (join.Stack, -1, a(2, 3), a(2, 3)),
        "split": (join.Split, a(5, 2), 2, 0), "flip": (shape.Flip, a(3, 4), (0, 1)),
        "repeat": (shape.Repeat, a(2, 3), (2, 1, 2)),
        "basic_index": (indexing.BasicIndex, a(2, 3, 4), basic),
        "advanced_index": (indexing.AdvancedIndex, a(3, 4), adv),
        "index_scatter": (indexing.IndexScatter, a(3, 3), (3, 4), adv, False),
        "index_put": (indexing.IndexPut, a(2, 3, 4), a(3), basic, adv),
        "index_select": (scatter.IndexSelect, a(3, 4), 0, idx),
        "gather": (scatter.Gather, a(3, 4), 1, ak.tensor(r.integers(0, 4, (3, 5)))),
        "scatter_add": (scatter.ScatterAdd, a(3, 4), 1, ak.tensor(r.integers(0, 4, (3, 5))),
                        a(3, 6)),
        "index_add": (scatter.IndexAdd, a(3, 4), 0, idx, a(3, 4), 2.0),
        "sort": (sorting.Sort, a(3, 4), 1, True, False), "topk": (sorting.Topk, a(3, 4), 2, 0, True, True),
    }


JVP_CASES = _jvp_cases()


@pytest.mark.parametrize("name", sorted(JVP_CASES))
def test_jvp_rules_match_finite_differences(name):
    cls, *args = JVP_CASES[name]
    floats = [i for i, v in enumerate(args) if isinstance(v, ak.Tensor) and
              v.is_floating_point()]
    r = np.random.default_rng(1)
    tangents = [ak.tensor(r.standard_normal(tuple(args[i].shape))) if i in floats else None
                for i in range(len(args))]
    inputs = [v.detach().requires_grad_() if i in floats else v for i, v in enumerate(args)]
    out = cls.apply(*inputs)
    first = out[0] if isinstance(out, tuple) else out
    out_t = first.grad_fn.apply_jvp(*tangents)

    def shifted(eps):
        moved = [ak.tensor(v.numpy() + eps * t.numpy()) if t is not None else v
                 for v, t in zip(args, tangents)]
        res = cls.apply(*moved)
        return res if isinstance(res, tuple) else (res,)
    numeric = [(p.numpy() - m.numpy()) / 2e-6 for p, m in zip(shifted(1e-6), shifted(-1e-6))]
    got = out_t if isinstance(out_t, tuple) else (out_t,)
    for g, n in zip(got, numeric):
        if g is not None and g.is_floating_point():
            np.testing.assert_allclose(g.detach().numpy(), n, rtol=1e-6, atol=1e-6)

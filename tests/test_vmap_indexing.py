"""vmap of indexing: random getitem/setitem keys (ints, slices, None, Ellipsis, integer
arrays, bool masks) against a per-example loop, for in_dims 0 and -1, with gradients
(the getitem backward is batched too); in-place setitem/index_add_ on batched and
unbatched selves; and the one-dim indexing ops with a batched index."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adkit as ak
from adkit.func import grad, vmap

INPLACE_ERROR = "vmap: inplace arithmetic\\(self, \\*extra_args\\) is not possible"
CONSUMING = ("int", "slice", "array", "mask")


# ---------------------------------------------------------------- random keys
@st.composite
def _kinds(draw, ndim):
    """Key item kinds with how many dims each uses, at most ndim in all, one Ellipsis."""
    kinds, budget = [], ndim
    for _ in range(draw(st.integers(0, ndim + 2))):
        choices = ["none"] + (["ellipsis"] if "ellipsis" not in [k for k, _ in kinds]
                              else []) + (list(CONSUMING) if budget else [])
        kind = draw(st.sampled_from(choices))
        used = draw(st.integers(1, min(budget, 2))) if kind == "mask" else \
            int(kind in CONSUMING)
        kinds.append((kind, used))
        budget -= used
    return kinds


@st.composite
def _item(draw, kind, sizes, length):
    """One key item for dims of `sizes` (integer arrays have `length` entries)."""
    n = sizes[0] if sizes else 1
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "slice":
        bound = st.none() | st.integers(-n - 1, n + 1)
        return slice(draw(bound), draw(bound), draw(st.none() | st.integers(1, 3)))
    if kind == "array":
        return np.array(draw(st.lists(st.integers(-n, n - 1), min_size=length,
                                      max_size=length)), np.int64)
    if kind == "mask":
        cells = draw(st.lists(st.booleans(), min_size=int(np.prod(sizes)),
                              max_size=int(np.prod(sizes))))
        return np.array(cells, bool).reshape(sizes)
    return None if kind == "none" else Ellipsis


@st.composite
def shapes_and_keys(draw):
    """(per-example shape, key): items before an Ellipsis index the leading dims, those
    after it the trailing ones, as PyTorch lays them out."""
    shape = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
    kinds = draw(_kinds(len(shape)))
    names = [k for k, _ in kinds]
    cut = names.index("ellipsis") if "ellipsis" in names else len(kinds)
    dim = len(shape) - sum(u for _, u in kinds[cut:])
    starts, start = [], 0
    for i, (_, used) in enumerate(kinds):
        start = dim if i == cut else start
        starts.append(start)
        start += used
    length = draw(st.integers(0, 3))
    key = tuple(draw(_item(k, shape[s:s + u], length))
                for (k, u), s in zip(kinds, starts))
    return shape, key if len(key) != 1 or draw(st.booleans()) else key[0]


def _ak_key(key):
    conv = (lambda k: ak.tensor(k) if isinstance(k, np.ndarray) else k)
    return tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)


def _batched(rng, shape, size, in_dim):
    """(physical array batched along in_dim, per-example arrays)."""
    examples = [np.asarray(rng.standard_normal(shape)) for _ in range(size)]
    return np.stack(examples, axis=in_dim if in_dim >= 0 else len(shape)), examples


def _per_example_or_error(fn, examples):
    try:
        return [fn(ak.tensor(e)).detach().numpy() for e in examples], None
    except (IndexError, RuntimeError) as e:
        return None, e


# ---------------------------------------------------------------- getitem
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes_and_keys(), st.integers(1, 3), st.sampled_from([0, -1]), st.integers(0, 99))
def test_getitem_and_its_gradient_match_a_per_example_loop(shape_key, size, in_dim, seed):
    shape, key = shape_key
    rng = np.random.default_rng(seed)
    phys, examples = _batched(rng, shape, size, in_dim)
    getitem = (lambda t: t[_ak_key(key)])
    want, err = _per_example_or_error(getitem, examples)
    if err is not None:
        with pytest.raises(type(err)):
            vmap(getitem, in_dims=in_dim)(ak.tensor(phys))
        return
    got = vmap(getitem, in_dims=in_dim)(ak.tensor(phys))
    assert tuple(got.shape) == (size,) + want[0].shape
    np.testing.assert_array_equal(got.numpy(), np.stack(want))
    loss = (lambda t: (getitem(t) ** 2).sum())
    got_grad = vmap(grad(loss), in_dims=in_dim)(ak.tensor(phys))
    want_grad = np.stack([grad(loss)(ak.tensor(e)).numpy() for e in examples])
    np.testing.assert_allclose(got_grad.numpy(), want_grad, rtol=1e-12)


def test_index_arrays_separated_by_a_slice_keep_the_batch_dim_first():
    x = ak.tensor(np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5))
    key = (np.array([0, 2]), slice(None), np.array([1, 3]))
    got = vmap(lambda t: t[_ak_key(key)])(x)
    assert tuple(got.shape) == (2, 2, 4)  # numpy alone would give (2, 2, 4) per example
    np.testing.assert_array_equal(got.numpy(), np.stack([x.numpy()[b][key] for b in range(2)]))


# ---------------------------------------------------------------- setitem
def _region(shape, key):
    """The shape of x[key] for x of `shape`."""
    return tuple(ak.zeros(shape)[_ak_key(key)].shape)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes_and_keys(), st.integers(1, 3), st.sampled_from([0, -1]),
       st.sampled_from(["batched", "shared", "number"]), st.integers(0, 99))
def test_setitem_writes_every_example_in_place(shape_key, size, in_dim, value_kind, seed):
    shape, key = shape_key
    rng = np.random.default_rng(seed)
    try:
        region = _region(shape, key)
    except (IndexError, RuntimeError):
        return  # an invalid key: covered by the getitem test
    phys, examples = _batched(rng, shape, size, in_dim)
    values = [np.asarray(rng.standard_normal(region)) for _ in range(size)]
    if value_kind == "number":
        value, value_dim, values = 2.5, None, [2.5] * size
    elif value_kind == "shared":
        value, value_dim, values = ak.tensor(values[0]), None, [values[0]] * size
    else:
        value, value_dim = ak.tensor(np.stack(values)), 0

    def assign(t, v):
        t[_ak_key(key)] = v
        return t

    x = ak.tensor(phys)
    got = vmap(assign, in_dims=(in_dim, value_dim))(x, value)
    want = [assign(ak.tensor(e), ak.tensor(v) if isinstance(v, np.ndarray) else v).numpy()
            for e, v in zip(examples, values)]
    np.testing.assert_array_equal(got.numpy(), np.stack(want))
    np.testing.assert_array_equal(np.moveaxis(x.numpy(), in_dim, 0), np.stack(want))


def test_setitem_on_an_unbatched_tensor_with_a_batched_value_raises():
    def assign(v):
        y = ak.zeros(3)
        y[0] = v
        return y
    with pytest.raises(RuntimeError, match=INPLACE_ERROR):
        vmap(assign)(ak.ones(4))


def test_setitem_under_vmap_is_differentiable_per_example():
    rng = np.random.default_rng(1)
    xs, vs = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 2))
    key = (np.array([0, 2]), np.array([1, 4]))

    def loss(x, v):
        y = x * 1.0
        y[_ak_key(key)] = v * 3
        y[:, 0] = y[:, 1] + 2
        return (y ** 2).sum()

    for argnums in (0, 1):
        got = vmap(grad(loss, argnums=argnums), in_dims=(-1, 0))(
            ak.tensor(np.moveaxis(xs, 0, -1)), ak.tensor(vs))
        want = [grad(loss, argnums=argnums)(ak.tensor(x), ak.tensor(v)).numpy()
                for x, v in zip(xs, vs)]
        np.testing.assert_allclose(got.numpy(), np.stack(want), rtol=1e-12)


# ---------------------------------------------------------------- one-dim indexing ops
_IDX = np.array([[0, 2], [1, 1], [2, 0]])
_ONE_DIM_OPS = {
    "index_select": lambda x, i, s: x.index_select(1, i),
    "gather": lambda x, i, s: x.gather(0, i[:, None].expand(2, 4)),
    "scatter_add": lambda x, i, s: x.scatter_add(0, i[:, None].expand(2, 4), s),
    "index_add": lambda x, i, s: x.index_add(0, i, s, alpha=1.5),
    "index_add_": lambda x, i, s: (x * 1.0).index_add_(0, i, s, alpha=1.5),
}


@pytest.mark.parametrize("name", sorted(_ONE_DIM_OPS))
@pytest.mark.parametrize("dims", [(0, 0, 0), (None, 0, None), (0, 0, None), (None, 0, 0),
                                  (-1, 0, -1), (0, None, 0)])
def test_one_dim_indexing_with_a_batched_index(name, dims):
    fn = _ONE_DIM_OPS[name]
    rng = np.random.default_rng(2)
    xs, ss = rng.standard_normal((3, 3, 4)), rng.standard_normal((3, 2, 4))
    args = []
    for arr, d in zip((xs, _IDX, ss), dims):
        args.append(ak.tensor(arr[0] if d is None else np.moveaxis(arr, 0, d)))
    if name == "index_add_" and dims[0] is None:  # in place on an unbatched self
        with pytest.raises(RuntimeError, match="vmap: index_add_\\(self"):
            vmap(fn, in_dims=dims)(*args)
        return
    got = vmap(fn, in_dims=dims)(*args)
    pick = (lambda arr, d, b: arr[0] if d is None else arr[b])
    want = [fn(*(ak.tensor(pick(a, d, b)) for a, d in zip((xs, _IDX, ss), dims))).numpy()
            for b in range(3)]
    np.testing.assert_allclose(got.numpy(), np.stack(want), rtol=1e-12)


def test_index_add_in_place_needs_a_batched_self():
    with pytest.raises(RuntimeError, match="vmap: index_add_\\(self, \\*extra_args\\)"):
        vmap(lambda s: ak.zeros(3).index_add_(0, ak.tensor([0]), s))(ak.ones(4, 1))


def test_index_add_in_place_with_a_batched_index_is_differentiable_per_example():
    rng = np.random.default_rng(3)
    xs, ss = rng.standard_normal((3, 3, 4)), rng.standard_normal((3, 2, 4))

    def loss(x, i, s):
        y = x * 1.0
        y.index_add_(0, i, s, alpha=2.0)
        return (y ** 2).sum()

    for argnums in (0, 2):
        got = vmap(grad(loss, argnums=argnums))(ak.tensor(xs), ak.tensor(_IDX), ak.tensor(ss))
        want = [grad(loss, argnums=argnums)(ak.tensor(x), ak.tensor(i), ak.tensor(s)).numpy()
                for x, i, s in zip(xs, _IDX, ss)]
        np.testing.assert_allclose(got.numpy(), np.stack(want), rtol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda x: x.sort(), lambda x: x.topk(1), lambda x: x.topk(0),
    lambda x: x.gather(0, ak.tensor([0, 0])), lambda x: x.index_select(0, ak.tensor([0])),
    lambda x: x.scatter_add(0, ak.tensor([0, 0]), x.reshape(1).expand(2) * 1.0),
    lambda x: x.index_add(0, ak.tensor([0]), x * 2.0), lambda x: x.squeeze(),
    lambda x: x.flip(0), lambda x: x.transpose(0, -1), lambda x: x.repeat(2, 1),
], ids=["sort", "topk1", "topk0", "gather", "index_select", "scatter_add", "index_add",
        "squeeze", "flip", "transpose", "repeat"])
def test_per_example_scalars(fn):
    xs = np.array([0.5, -1.0, 2.0])
    got = vmap(fn)(ak.tensor(xs))
    want = [fn(ak.tensor(np.array(x))) for x in xs]
    got, want = (got, want) if isinstance(got, tuple) else ((got,), [(w,) for w in want])
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g.numpy(), np.stack([w[k].numpy() for w in want]))


def test_squeeze_keeps_a_batch_dim_of_size_one():
    assert tuple(vmap(lambda t: t.squeeze())(ak.ones(1, 1, 3)).shape) == (1, 3)
    assert tuple(vmap(lambda t: t.squeeze(0), in_dims=-1)(ak.ones(1, 3, 1)).shape) == (1, 3)


def test_cat_skips_per_example_empty_vectors_but_promotes_their_dtype():
    ints = ak.tensor(np.zeros((2, 0), np.int64))
    floats = ak.tensor(np.ones((2, 3)))
    got = vmap(lambda a, b: ak.cat([a, b]), in_dims=(None, 0))(ak.zeros(0), ints)
    assert tuple(got.shape) == (2, 0) and got.dtype == ak.float32
    got = vmap(lambda a, b: ak.cat([a, b]))(ints, ak.tensor(np.ones((2, 2, 3), np.int32)))
    assert tuple(got.shape) == (2, 2, 3) and got.dtype == ak.int64
    got = vmap(lambda a: ak.cat([a, ak.zeros(0, dtype=ak.float64)]))(floats)
    np.testing.assert_array_equal(got.numpy(), np.ones((2, 3)))

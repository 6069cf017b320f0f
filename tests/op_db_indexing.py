"""Op rows: indexing (x[key], x[key] = v, index_select, gather, scatter_add, index_add,
sort, topk)."""
import numpy as np

import adkit as ak

from .op_db import FLOATS, OpInfo, SampleInput, make_array


def _is_array_item(k):
    return isinstance(k, (np.ndarray, list, bool, np.bool_))


def np_getitem(x, key):
    """x[key] with PyTorch's semantics, in numpy: ints, slices and None first, then the
    arrays on the result (numpy alone would count ints as advanced indices)."""
    key = key if isinstance(key, tuple) else (key,)
    first, second = [], []
    for k in key:
        arr = np.asarray(k) if _is_array_item(k) else None
        if arr is not None and arr.ndim == 0 and arr.dtype != bool:
            first.append(int(arr))  # a 0-d integer array acts as an int
        elif arr is not None and arr.ndim == 0:  # a new dim, indexed by [0] (or [])
            first.append(None)
            second.append(np.zeros(int(arr), np.int64))
        elif arr is not None:
            first += [slice(None)] * (arr.ndim if arr.dtype == bool else 1)
            second.append(arr)
        else:
            first.append(k)
            if not isinstance(k, (int, np.integer)):
                second.append(k if k is Ellipsis else slice(None))
    tail = () if any(k is Ellipsis for k in first) else (Ellipsis,)  # keep 0-d as arrays
    return x[tuple(first) + tail][tuple(second)]


def np_getitem_grad(shape, key, grad):
    """The gradient of x[key] w.r.t. x: grad scatter-added at the selected positions."""
    size = int(np.prod(shape))
    where = np_getitem(np.arange(size).reshape(shape), key)
    return np.bincount(where.ravel(), weights=grad.ravel(), minlength=size).reshape(shape)


def ak_key(key):
    """The same key with numpy arrays turned into adkit tensors."""
    conv = (lambda k: ak.tensor(k) if isinstance(k, np.ndarray) else k)
    return tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)


_MASK = np.array([[True, False, True, True], [False, False, True, False],
                  [True, True, False, False]])
_GETITEM_KEYS = [
    ((3, 4, 2), 1), ((3, 4, 2), (-1, slice(1, 3))), ((3, 4, 2), (slice(None, None, 2),
                                                               slice(1, None, 2))),
    ((3, 4, 2), (None, Ellipsis, 0)), ((3, 4, 2), (Ellipsis, None)),
    ((3, 4, 2), _MASK), ((3, 4, 2), (slice(None), np.array([True, False, True, True]))),
    ((3, 4, 2), np.array([0, 2, 0])), ((3, 4, 2), [2, -1, 2]),
    ((3, 4, 2), (slice(None), np.array([1, 1, 3]), 0)),
    ((3, 4, 2), (np.array([0, 2]), slice(None), np.array([1, 0]))),
    ((3, 4, 2), (1, np.array([[0, 1], [3, 3]]), slice(1, None))),
    ((3, 4, 2), (slice(1, 1),)), ((3, 4, 2), np.array([], np.int64)),
    ((2, 3), (np.array(True), 1)), ((), ()), ((), None), ((4,), Ellipsis),
]


def _getitem_samples(dtype, rng):
    return [SampleInput((make_array(shape, dtype, rng), key), name=repr(key))
            for shape, key in _GETITEM_KEYS]


def _getitem(x, key):
    return x[ak_key(key)]


_SETITEM_CASES = [  # (x shape, key, value shape or a number)
    ((3, 4), 1, (4,)), ((3, 4), (slice(None), 1), (1,)), ((3, 4), (Ellipsis, slice(1, 3)), ()),
    ((3, 4), (np.array([2, 0]),), (2, 4)), ((3, 4), _MASK, (6,)), ((3, 4), 0, 2.5),
    ((3, 4), (np.array([0, 2]), np.array([1, 3])), (1, 2)), ((3, 4), (None, 1), (1, 1, 4)),
    ((2, 3), (slice(0, 0),), (3,)),
]


def _setitem_samples(dtype, rng):
    out = []
    for shape, key, value in _SETITEM_CASES:
        v = make_array(value, dtype, rng) if isinstance(value, tuple) else value
        out.append(SampleInput((make_array(shape, dtype, rng), key, v), name=repr(key)))
    return out


def _setitem(x, key, value):
    y = x.clone()
    y[ak_key(key)] = value
    return y


def _np_setitem(x, key, value):
    y = x.copy()  # the cases above index the same way in numpy and PyTorch
    y[key] = value
    return y


def _ints(shape, high, rng):
    return rng.integers(0, high, size=shape).astype(np.int64)


def _index_select_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), 0, np.array([2, 0, 2]))),
            SampleInput((make_array((3, 4), dtype, rng), -1, np.array([3]))),
            SampleInput((make_array((2, 3, 2), dtype, rng), 1, np.array([], np.int64))),
            SampleInput((make_array((3,), dtype, rng), 0, np.array(1)))]


def _index_select_ref(x, dim, index):
    return np.take(x, np.reshape(index, -1), axis=dim)


def _gather_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), 1, _ints((3, 5), 4, rng))),
            SampleInput((make_array((3, 4), dtype, rng), 0, _ints((2, 3), 3, rng))),
            SampleInput((make_array((2, 3, 2), dtype, rng), -1, _ints((2, 3, 2), 2, rng))),
            SampleInput((make_array((4,), dtype, rng), 0, _ints((0,), 4, rng)))]


def _gather_ref(x, dim, index):
    d = dim % x.ndim
    key = tuple(slice(None) if k == d else slice(0, s) for k, s in enumerate(index.shape))
    return np.take_along_axis(x[key], index, d)


def _scatter_add_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), 1, _ints((3, 5), 4, rng),
                         make_array((3, 5), dtype, rng))),
            SampleInput((make_array((3, 4), dtype, rng), 0, _ints((2, 3), 3, rng),
                         make_array((2, 4), dtype, rng))),
            SampleInput((make_array((2, 3), dtype, rng), -1, _ints((2, 3), 3, rng),
                         make_array((2, 3), dtype, rng)))]


def _scatter_add_ref(x, dim, index, src):
    d = dim % x.ndim
    out = x.copy()
    grid = list(np.ogrid[tuple(slice(s) for s in index.shape)])
    grid[d] = index
    np.add.at(out, tuple(grid), src[tuple(slice(s) for s in index.shape)])
    return out


def _index_add_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), 0, np.array([2, 0, 2]),
                         make_array((3, 4), dtype, rng))),
            SampleInput((make_array((3, 4), dtype, rng), -1, np.array([1, 3]),
                         make_array((3, 2), dtype, rng)), {"alpha": 2.5}),
            SampleInput((make_array((2, 3, 2), dtype, rng), 1, np.array([], np.int64),
                         make_array((2, 0, 2), dtype, rng)))]


def _index_add_ref(x, dim, index, source, alpha=1):
    out = x.copy()
    np.add.at(out, (slice(None),) * (dim % x.ndim) + (index,), source * alpha)
    return out


def _unique_along(shape, n, dim, rng):
    """An int64 index of `shape` whose entries along `dim` are distinct, in [0, n)."""
    moved = np.moveaxis(np.zeros(shape, np.int64), dim, -1)
    rows = [rng.permutation(n)[:moved.shape[-1]] for _ in range(int(np.prod(moved.shape[:-1])))]
    return np.moveaxis(np.reshape(rows, moved.shape), -1, dim)


def _scatter_samples(dtype, rng):  # distinct indices: the written value is defined
    return [SampleInput((make_array((3, 4), dtype, rng), 0, _unique_along((2, 4), 3, 0, rng),
                         make_array((2, 5), dtype, rng))),
            SampleInput((make_array((3, 4), dtype, rng), -1, _unique_along((3, 2), 4, 1, rng),
                         make_array((3, 2), dtype, rng))),
            SampleInput((make_array((2, 3), dtype, rng), 1, _unique_along((2, 3), 3, 1, rng),
                         1.5))]


def _scatter_ref(x, dim, index, src):
    d = dim % x.ndim
    out = x.copy()
    grid = list(np.ogrid[tuple(slice(s) for s in index.shape)])
    grid[d] = index
    out[tuple(grid)] = src[tuple(slice(s) for s in index.shape)] \
        if isinstance(src, np.ndarray) else src
    return out


def _index_put_samples(dtype, rng):
    return [SampleInput((make_array((4, 3), dtype, rng), np.array([3, -1, 0, 3]),
                         make_array((4, 3), dtype, rng)), {"accumulate": True}),
            SampleInput((make_array((4, 3), dtype, rng), np.array([[2, 0], [-3, 3]]),
                         make_array((3,), dtype, rng))),
            SampleInput((make_array((5,), dtype, rng), np.array([4, 1]),
                         make_array((), dtype, rng)), {"accumulate": True})]


def _index_put_ref(x, index, values, accumulate=False):
    out = x.copy()
    if accumulate:
        np.add.at(out, index, np.broadcast_to(values, out[index].shape))
    else:
        out[index] = values
    return out


def _sort_samples(dtype, rng):
    def distinct(shape):  # no ties: gradients are defined and orders are unique
        n = int(np.prod(shape))
        return np.asarray((rng.permutation(n).reshape(shape) - n / 2).astype(dtype))
    return [SampleInput((distinct((3, 4)),)), SampleInput((distinct((3, 4)), 0)),
            SampleInput((distinct((2, 3, 2)),), {"descending": True, "dim": 1}),
            SampleInput((distinct(()),)), SampleInput((distinct((0, 3)),)),
            SampleInput((distinct((5,)),), {"stable": True})]


def _np_sort(x, dim=-1, descending=False, stable=False):
    if x.ndim == 0:
        return x, np.array(0)
    idx = np.argsort(-x if descending else x, axis=dim, kind="stable")
    return np.take_along_axis(x, idx, dim), idx


def _topk_samples(dtype, rng):
    samples = _sort_samples(dtype, rng)
    return [SampleInput((samples[0].args[0], 2)), SampleInput((samples[1].args[0], 3, 0)),
            SampleInput((samples[2].args[0], 1), {"dim": 1, "largest": False}),
            SampleInput((samples[5].args[0], 5)), SampleInput((samples[5].args[0], 0))]


def _np_topk(x, k, dim=-1, largest=True, sorted=True):
    values, idx = _np_sort(x, dim, descending=largest)
    key = (slice(None),) * (dim % x.ndim) + (slice(0, k),)
    return values[key], idx[key]


ROWS = [
    OpInfo("getitem", np_getitem, _getitem_samples, op=_getitem),
    OpInfo("setitem", _np_setitem, _setitem_samples, op=_setitem),
    OpInfo("index_select", _index_select_ref, _index_select_samples, method="index_select"),
    OpInfo("gather", _gather_ref, _gather_samples, method="gather"),
    OpInfo("scatter_add", _scatter_add_ref, _scatter_add_samples, method="scatter_add"),
    OpInfo("index_add", _index_add_ref, _index_add_samples, method="index_add"),
    OpInfo("index_add_", _index_add_ref, _index_add_samples,
           op=lambda x, d, i, s, **kw: x.clone().index_add_(d, i, s, **kw)),
    OpInfo("scatter", _scatter_ref, _scatter_samples, method="scatter"),
    OpInfo("index_put", _index_put_ref, _index_put_samples,
           op=lambda x, i, v, **kw: x.index_put((i,), v, **kw)),
    OpInfo("index_put_", _index_put_ref, _index_put_samples,
           op=lambda x, i, v, **kw: x.clone().index_put_((i,), v, **kw)),
    OpInfo("sort", _np_sort, _sort_samples, method="sort", dtypes=FLOATS + (np.int64,)),
    OpInfo("topk", _np_topk, _topk_samples, method="topk"),
]

"""Op rows: reductions (sum mean prod var std amax amin logsumexp norm max min argmax
argmin). Samples keep values away from ties (max-like ops) and from the kinks of norms;
prod has a sample with one zero (its gradient must stay exact there)."""
import numpy as np

import adkit as ak

from .op_db import OpInfo, SampleInput, make_array


def _axis(dim, x=None):
    """numpy's axis for a PyTorch dim (None or () -> all; a 0-d tensor reduces nothing)."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0) or (
            x is not None and x.ndim == 0):
        return None
    return tuple(dim) if isinstance(dim, (tuple, list)) else dim


def _dim_samples(dtype, rng, low=-2.0, high=2.0, empty=True, scalar_dim=True):
    """Whole-tensor, int dim, tuple dim with keepdim, negative dim, 0-d, empty."""
    x = make_array((2, 3, 4), dtype, rng, low, high)
    out = [SampleInput((x,), name="all"), SampleInput((x, 1), name="dim1"),
           SampleInput((x, (0, 2), True), name="dims02-keepdim"),
           SampleInput((x, -1), {"keepdim": True}, name="dim-1-keepdim"),
           SampleInput((make_array((), dtype, rng, low, high),), name="0-d")]
    if scalar_dim:
        out.append(SampleInput((make_array((), dtype, rng, low, high), 0), name="0-d-dim0"))
    if empty:
        out.append(SampleInput((make_array((0, 3), dtype, rng, low, high), 0), name="empty"))
    return out


def _sum_ref(x, dim=None, keepdim=False):
    return np.sum(x, axis=_axis(dim, x), keepdims=keepdim)


def _mean_ref(x, dim=None, keepdim=False):
    n = x.size // max(1, np.sum(x, axis=_axis(dim, x), keepdims=True).size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.sum(x, axis=_axis(dim, x), keepdims=keepdim) / n).astype(x.dtype)


def _prod_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng, 0.5, 1.5) * np.where(rng.random((2, 3, 4)) < 0.5,
                                                                -1, 1).astype(dtype)
    one_zero = x.copy()
    one_zero[0, 1, 2] = 0
    return [SampleInput((x,)), SampleInput((x, 1)), SampleInput((x, (0, 2), True)),
            SampleInput((one_zero,), name="one-zero"),
            SampleInput((one_zero, 2), name="one-zero-dim2"),
            SampleInput((one_zero[0], (0, 1)), name="one-zero-2d"),
            SampleInput((make_array((), dtype, rng, 0.5, 1.5),)),
            SampleInput((make_array((0, 3), dtype, rng), 0), name="empty")]


def _prod_ref(x, dim=None, keepdim=False):
    return np.prod(x, axis=_axis(dim, x), keepdims=keepdim)


def _var_samples(dtype, rng):
    x = make_array((3, 4), dtype, rng)
    return [SampleInput((x,)), SampleInput((x, 1)), SampleInput((x, (0, 1), True)),
            SampleInput((x, 0), {"correction": 0, "keepdim": True}, name="correction0"),
            SampleInput((x, 1, False, True), name="positional-unbiased-keepdim"),
            SampleInput((x, -1), {"unbiased": False, "keepdim": True}, name="unbiased"),
            SampleInput((x,), {"correction": 2}, name="correction2"),
            SampleInput((make_array((2, 3, 2), dtype, rng), (0, 2)), name="3-d")]


def _var_ref(x, dim=None, unbiased=None, keepdim=False, correction=None):
    ddof = correction if correction is not None else (1 if unbiased in (None, True) else 0)
    return np.var(x, axis=_axis(dim, x), ddof=ddof, keepdims=keepdim)


def _std_ref(*args, **kwargs):
    return np.sqrt(_var_ref(*args, **kwargs))


def _extremum_ref(fn):
    def ref(x, dim=None, keepdim=False):
        return fn(x, axis=_axis(dim, x), keepdims=keepdim)
    return ref


def _logsumexp_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng, -3, 3)
    big = make_array((3, 2), dtype, rng, 80, 90)  # exp overflows float32 without the shift
    return [SampleInput((x, 1)), SampleInput((x, (0, 2)), {"keepdim": True}),
            SampleInput((x, -1)), SampleInput((big, 0), name="large"),
            SampleInput((make_array((), dtype, rng), 0), name="0-d"),
            SampleInput((make_array((0, 3), dtype, rng), 0), name="empty")]


def _logsumexp_ref(x, dim, keepdim=False):
    x = x.astype(np.float64)
    m = np.max(x, axis=_axis(dim, x), keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=_axis(dim, x), keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axis=_axis(dim, x))


def _norm_samples(dtype, rng):
    sign = np.where(rng.random((3, 4)) < 0.5, -1, 1)
    x = (make_array((3, 4), dtype, rng, 0.3, 2.0) * sign).astype(dtype)
    out = [SampleInput((x,), name="default"), SampleInput((x, 2, 1), name="p2-dim1"),
           SampleInput((x, "fro", (0, 1), True), name="fro"),
           SampleInput((x, 1, -1), name="p1"), SampleInput((x, 3), {"dim": 0}, name="p3"),
           SampleInput((x, 0.5, 1), name="p0.5"), SampleInput((x, -1, 1), name="p-1"),
           SampleInput((x, float("inf"), 1), name="inf"),
           SampleInput((x, -float("inf")), name="-inf"),
           SampleInput((x, 0, 1), name="p0"),
           SampleInput((make_array((), dtype, rng, 0.5, 1.5),), name="0-d")]
    return out


def _norm_ref(x, p="fro", dim=None, keepdim=False):
    p = 2 if p == "fro" else p
    axis = _axis(dim, x)
    a = np.abs(x)
    if p == np.inf:
        return np.max(a, axis=axis, keepdims=keepdim)
    if p == -np.inf:
        return np.min(a, axis=axis, keepdims=keepdim)
    if p == 0:
        return np.sum(a != 0, axis=axis, keepdims=keepdim).astype(x.dtype)
    return np.sum(a ** p, axis=axis, keepdims=keepdim) ** (1.0 / p)


def _max_dim_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng)
    return [SampleInput((x, 1)), SampleInput((x, -1, True)),
            SampleInput((x,), {"dim": 0, "keepdim": True}),
            SampleInput((make_array((4,), dtype, rng), 0)),
            SampleInput((make_array((), dtype, rng), 0), name="0-d")]


def _max_dim_ref(vals, args):
    def ref(x, dim, keepdim=False):
        if x.ndim == 0:
            return x, np.asarray(0, dtype=np.int64)
        return (vals(x, axis=dim, keepdims=keepdim),
                args(x, axis=dim, keepdims=keepdim).astype(np.int64))
    return ref


def _max_all_samples(dtype, rng):
    return [SampleInput((make_array((2, 3, 4), dtype, rng),)),
            SampleInput((make_array((), dtype, rng),), name="0-d")]


def _binary_max_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), make_array((4,), dtype, rng)))]


def _arg_samples(dtype, rng):
    x = make_array((2, 3, 4), dtype, rng)
    return [SampleInput((x,)), SampleInput((x, 1)), SampleInput((x, -1, True)),
            SampleInput((x,), {"keepdim": True}, name="flat-keepdim"),
            SampleInput((make_array((), dtype, rng),), name="0-d")]


def _arg_ref(fn):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            out = np.asarray(fn(x.reshape(-1)))
            return out.reshape((1,) * x.ndim) if keepdim else out
        return fn(x, axis=dim, keepdims=keepdim)
    return ref


ROWS = [
    OpInfo("sum", _sum_ref, _dim_samples, method="sum"),
    OpInfo("mean", _mean_ref, _dim_samples, method="mean"),
    OpInfo("prod", _prod_ref, _prod_samples, method="prod"),
    OpInfo("var", _var_ref, _var_samples, method="var"),
    OpInfo("std", _std_ref, _var_samples, method="std"),
    OpInfo("amax", _extremum_ref(np.max),
           lambda d, r: _dim_samples(d, r, empty=False), method="amax"),
    OpInfo("amin", _extremum_ref(np.min),
           lambda d, r: _dim_samples(d, r, empty=False), method="amin"),
    OpInfo("logsumexp", _logsumexp_ref, _logsumexp_samples, method="logsumexp",
           atol={np.float32: 1e-4, np.float64: 1e-10}),
    OpInfo("norm", _norm_ref, _norm_samples, method="norm"),
    OpInfo("max", _max_dim_ref(np.max, np.argmax), _max_dim_samples, method="max"),
    OpInfo("min", _max_dim_ref(np.min, np.argmin), _max_dim_samples, method="min"),
    OpInfo("max_all", np.max, _max_all_samples, op=ak.max, method="max"),
    OpInfo("min_all", np.min, _max_all_samples, op=ak.min, method="min"),
    OpInfo("max_binary", np.maximum, _binary_max_samples, op=ak.max, method="max"),
    OpInfo("min_binary", np.minimum, _binary_max_samples, op=ak.min, method="min"),
    OpInfo("argmax", _arg_ref(np.argmax), _arg_samples, method="argmax",
           supports_grad=False, supports_gradgrad=False),
    OpInfo("argmin", _arg_ref(np.argmin), _arg_samples, method="argmin",
           supports_grad=False, supports_gradgrad=False),
]

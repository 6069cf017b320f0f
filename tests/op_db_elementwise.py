"""Op rows: unary and binary elementwise ops, comparisons, logical ops and where.

Domains keep samples away from poles, kinks and domain edges. Rows whose dtypes include
np.int64 check that integer inputs give integer results (abs, floor, maximum, ...);
integer inputs to float-valued ops (exp of int64 -> float32) are in test_elementwise.py.
"""
import math

import numpy as np

from .op_db import FLOATS, OpInfo, SampleInput, binary_samples, make_array, unary_samples

WITH_INT = FLOATS + (np.int64,)
WITH_INT_BOOL = WITH_INT + (np.bool_,)
SMALL_SHAPES = [(), (5,), (3, 4), (2, 0, 3)]


def _erf_ref(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _softplus_ref(x, beta=1.0, threshold=20.0):
    z = x * beta
    return np.where(z > threshold, x, np.log1p(np.exp(np.minimum(z, threshold))) / beta)


def _sigmoid_ref(x):
    return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _sign_ref(x):
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _clamp_ref(x, min=None, max=None):  # noqa: A002
    out = x if min is None else np.maximum(x, min)
    return out if max is None else np.minimum(out, max)


def _ints_only_int_scalars(samples):
    """For integer dtypes drop samples with a Python float operand (its result is a float,
    which the generic forward test cannot express)."""
    def wrapped(dtype, rng):
        out = samples(dtype, rng)
        if dtype.kind in "iub":
            out = [s for s in out if not any(isinstance(a, float) for a in s.args)]
        return out
    return wrapped


def _with_ties(samples):
    """Float samples rounded to halves, so that == and <= see equal elements."""
    def wrapped(dtype, rng):
        out = samples(dtype, rng)
        for s in out:
            s.args = tuple(np.round(a * 2) / 2 if isinstance(a, np.ndarray) and
                           a.dtype.kind == "f" else a for a in s.args)
        return out
    return wrapped


def _with_specials(dtype, rng):
    """Arrays with nan and +-inf among finite values (for isnan, isfinite, ...)."""
    out = [SampleInput((make_array(s, dtype, rng),), name=str(s)) for s in SMALL_SHAPES]
    if dtype.kind == "f":
        out.append(SampleInput((np.array([np.nan, np.inf, -np.inf, 0.0, 1.5], dtype),),
                               name="specials"))
    return out


def _round_samples(dtype, rng):
    x = make_array((3, 4), dtype, rng, -30.0, 30.0)
    out = [SampleInput((make_array(s, dtype, rng, -3.0, 3.0),), name=str(s))
           for s in SMALL_SHAPES]
    if dtype.kind == "f":
        out += [SampleInput((x,), {"decimals": 1}, name="decimals=1"),
                SampleInput((x,), {"decimals": -1}, name="decimals=-1")]
    return out


def _clamp_samples(dtype, rng):
    x = make_array((3, 4), dtype, rng)
    if dtype.kind != "f":
        return [SampleInput((x,), {"min": -1, "max": 1}, name="ints"),
                SampleInput((x,), {"min": 0}, name="min only")]
    lo = make_array((4,), dtype, rng, -1.5, -0.5)
    hi = make_array((3, 1), dtype, rng, 0.5, 1.5)
    return [SampleInput((x,), {"min": -0.5, "max": 0.5}, name="scalars"),
            SampleInput((x,), {"min": 0.2}, name="min only"),
            SampleInput((x,), {"max": -0.2}, name="max only"),
            SampleInput((make_array((), dtype, rng),), {"min": -1.0, "max": 1.0}, name="0-d"),
            SampleInput((make_array((2, 0), dtype, rng),), {"min": 0.0}, name="empty"),
            SampleInput((x, lo, hi), name="tensor bounds"),
            SampleInput((x, lo, None), name="tensor min"),
            SampleInput((x, None, hi), name="tensor max"),
            SampleInput((x, -0.5, hi), name="mixed bounds")]


def _softplus_samples(dtype, rng):
    x = make_array((3, 4), dtype, rng, -4.0, 4.0)
    return [SampleInput((x,), name="default"),
            SampleInput((make_array((), dtype, rng),), name="0-d"),
            SampleInput((x,), {"beta": 2.0}, name="beta"),
            SampleInput((x,), {"beta": 0.5, "threshold": 1.0}, name="threshold")]


def _pow_scalar_samples(dtype, rng):
    """Tensor ** Python number, including negative bases with integer exponents."""
    x = make_array((3, 4), dtype, rng, -2.0, 2.0)
    if dtype.kind != "f":
        return [SampleInput((x, e), name=f"**{e}") for e in (0, 1, 2, 3)]
    away = np.where(x < 0, x - 0.5, x + 0.5).astype(dtype)  # |x| >= 0.5
    positive = make_array((5,), dtype, rng, 0.5, 2.0)
    return [SampleInput((x, 2), name="**2"), SampleInput((x, 3), name="**3"),
            SampleInput((x, 0), name="**0"), SampleInput((x, 1), name="**1"),
            SampleInput((away, -1), name="**-1"), SampleInput((away, 2.0), name="**2.0"),
            SampleInput((positive, 0.5), name="**0.5"),
            SampleInput((make_array((), dtype, rng), 2), name="0-d")]


def _rpow_samples(dtype, rng):
    x = make_array((3, 4), dtype, rng, -2.0, 2.0)
    if dtype.kind != "f":
        return [SampleInput((np.abs(x),), {"base": 2}, name="2**"),
                SampleInput((np.abs(x),), {"base": -3}, name="-3**")]
    return [SampleInput((x,), {"base": 2.5}, name="2.5**"),
            SampleInput((x,), {"base": 2}, name="2**"),
            SampleInput((make_array((), dtype, rng),), {"base": 0.5}, name="0-d")]


def _where_samples(dtype, rng):
    def cond(shape):
        return rng.random(shape) < 0.5
    out = [SampleInput((cond((3, 4)), make_array((3, 4), dtype, rng),
                        make_array((3, 4), dtype, rng)), name="same"),
           SampleInput((cond((3, 1)), make_array((4,), dtype, rng),
                        make_array((3, 4), dtype, rng)), name="broadcast"),
           SampleInput((cond((2, 3)), make_array((), dtype, rng),
                        make_array((3,), dtype, rng)), name="0-d"),
           SampleInput((cond((0, 3)), make_array((3,), dtype, rng),
                        make_array((0, 3), dtype, rng)), name="empty"),
           SampleInput((cond((3, 4)), make_array((3, 4), dtype, rng), 0.0), name="y scalar"),
           SampleInput((cond((4,)), -1.0, make_array((3, 4), dtype, rng)), name="x scalar")]
    return _ints_only_int_scalars(lambda d, r: out)(dtype, rng)


def _zero_d_as_arrays(samples):
    """numpy turns 0-d results (a * 2, rng.random(()) < p) into numpy scalars; make them
    0-d arrays again, so that they become 0-d tensors (not Python-like numbers)."""
    def wrapped(dtype, rng):
        out = samples(dtype, rng)
        for s in out:
            s.args = tuple(np.asarray(a) if isinstance(a, np.generic) else a for a in s.args)
        return out
    return wrapped


def _row(name, ref, samples, **kw):
    return OpInfo(name, ref, _zero_d_as_arrays(samples), **kw)


def _unary(name, ref, low=-2.0, high=2.0, **kw):
    kw.setdefault("method", name)
    return _row(name, ref, unary_samples(low, high), **kw)


def _binary(name, ref, **kw):
    kw.setdefault("method", name)
    samples = kw.pop("samples", binary_samples())
    return _row(name, ref, _ints_only_int_scalars(samples), **kw)


def _predicate(name, ref, samples, dtypes=WITH_INT_BOOL, **kw):
    kw.setdefault("method", name)
    return _row(name, ref, samples, dtypes=dtypes, supports_grad=False,
                supports_gradgrad=False, **kw)


UNARY_ROWS = [
    _unary("neg", np.negative, dtypes=WITH_INT),
    _unary("exp", np.exp),
    _unary("log", np.log, 0.1, 3.0),
    _unary("log1p", np.log1p, -0.5, 2.0),
    _unary("expm1", np.expm1),
    _unary("sqrt", np.sqrt, 0.5, 2.0),
    _unary("rsqrt", lambda x: 1 / np.sqrt(x), 0.5, 2.0),
    _unary("reciprocal", np.reciprocal, 0.5, 2.0),
    _unary("abs", np.abs, dtypes=WITH_INT),
    _unary("sign", _sign_ref, dtypes=WITH_INT),
    _unary("sin", np.sin),
    _unary("cos", np.cos),
    _unary("tan", np.tan, -1.2, 1.2),
    _unary("tanh", np.tanh),
    _unary("sinh", np.sinh),
    _unary("cosh", np.cosh),
    _unary("asin", np.arcsin, -0.9, 0.9),
    _unary("acos", np.arccos, -0.9, 0.9),
    _unary("atan", np.arctan),
    _unary("sigmoid", _sigmoid_ref, -6.0, 6.0),
    _unary("relu", lambda x: np.maximum(x, 0), dtypes=WITH_INT),
    _unary("erf", _erf_ref, -3.0, 3.0),
    _unary("floor", np.floor, dtypes=WITH_INT),
    _unary("ceil", np.ceil, dtypes=WITH_INT),
    _row("round", np.round, _round_samples, method="round", dtypes=WITH_INT),
    _row("softplus", _softplus_ref, _softplus_samples),
    _row("clamp", _clamp_ref, _clamp_samples, method="clamp", dtypes=WITH_INT),
]

BINARY_ROWS = [
    _binary("add", np.add, dtypes=WITH_INT),
    _binary("sub", np.subtract, dtypes=WITH_INT),
    _binary("mul", np.multiply, dtypes=WITH_INT),
    _binary("div", np.true_divide, samples=binary_samples(low_y=0.5, high_y=2.0)),
    _binary("pow", np.power, samples=binary_samples(0.5, 2.0, -2.0, 2.0, scalar=1.5)),
    _row("pow_scalar_exponent", np.power, _pow_scalar_samples, op=lambda x, e: x ** e,
           method="pow", dtypes=WITH_INT),
    _row("pow_scalar_base", lambda x, base: np.power(base, x), _rpow_samples,
           op=lambda x, base: base ** x, dtypes=WITH_INT),
    _binary("maximum", np.maximum, dtypes=WITH_INT),
    _binary("minimum", np.minimum, dtypes=WITH_INT),
    _binary("atan2", np.arctan2),
]

COMPARISON_ROWS = [
    _predicate(name, ref, _with_ties(binary_samples()))
    for name, ref in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                      ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal),
                      ("logical_and", np.logical_and), ("logical_or", np.logical_or),
                      ("logical_xor", np.logical_xor)]
] + [
    _predicate("logical_not", np.logical_not, _with_ties(unary_samples())),
    _predicate("isnan", np.isnan, _with_specials),
    _predicate("isfinite", np.isfinite, _with_specials),
    _predicate("isinf", np.isinf, _with_specials),
    _row("where", np.where, _where_samples, dtypes=WITH_INT, grad_argnums=(1, 2)),
] + [
    _predicate(name, ref, binary_samples(-5, 5, scalar=3), dtypes=(np.int64, np.bool_))
    for name, ref in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                      ("bitwise_xor", np.bitwise_xor)]
] + [
    _predicate("bitwise_not", np.invert, unary_samples(-5, 5), dtypes=(np.int64, np.bool_)),
]

ROWS = UNARY_ROWS + BINARY_ROWS + COMPARISON_ROWS

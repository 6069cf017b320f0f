"""Elementwise ops beyond the op table: erf accuracy, result dtypes of integer inputs,
PyTorch's type promotion and error messages, gradients at special points (ties, bounds,
zero bases) against PyTorch, Python operators, dtype-cast methods, and every row's jvp
rule against finite differences."""
import math

import numpy as np
import pytest

import adkit as ak
from adkit.ops.special import erf_float64
from adkit.autograd.node import NOT_TENSOR

from ._op_cases import op_cases
from .op_db import to_tensor_args
from .op_db_elementwise import ROWS

DTYPE_NAMES = ["bool", "int32", "int64", "float16", "float32", "float64"]


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _ak(torch, t):
    """An adkit tensor with the data of a torch tensor (requires_grad copied)."""
    return ak.tensor(t.detach().numpy().copy(), requires_grad=t.requires_grad)


def _same_dtype(a, t):
    return str(a.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


def _assert_like_torch(a, t, rtol=1e-6, atol=1e-7):
    assert _same_dtype(a, t), f"dtype {a.dtype} != {t.dtype}"
    assert tuple(a.shape) == tuple(t.shape)
    np.testing.assert_allclose(np.asarray(a.detach().numpy(), dtype=np.float64),
                               t.detach().double().numpy(), rtol=rtol, atol=atol,
                               equal_nan=True)


def _sample_tensor(torch, dtype, shape=(3,)):
    values = {"bool": [True, False, True], "int32": [3, -2, 0], "int64": [-4, 1, 2]}
    data = values.get(dtype, [1.5, -0.25, 2.0])
    t = torch.tensor(data, dtype=getattr(torch, dtype))
    return t if shape == (3,) else t[0].clone()


# ---------------------------------------------------------------- erf
def test_erf_float64_matches_math_erf_everywhere():
    x = np.concatenate([np.linspace(-30, 30, 60001), np.geomspace(1e-300, 30, 5000),
                        -np.geomspace(1e-300, 30, 500),
                        [0.46875, np.nextafter(0.46875, 1), 4.0, np.nextafter(4.0, 5),
                         26.5, 26.6, 27.0, 5e-324, -0.0, 1e300, -1e300]])
    expected = np.array([math.erf(v) for v in x])
    got = erf_float64(x)
    rel = np.abs(got - expected) / np.maximum(np.abs(expected), 1e-300)
    assert rel.max() < 1e-15
    assert np.signbit(erf_float64(np.array([-0.0])))[0]


def test_erf_special_values_and_dtypes():
    got = ak.erf(ak.tensor([np.nan, np.inf, -np.inf, 0.0], dtype=ak.float64)).numpy()
    np.testing.assert_array_equal(got, [np.nan, 1.0, -1.0, 0.0])
    x32 = ak.tensor([0.3, -1.7, 5.0])
    out = ak.erf(x32)
    assert out.dtype == ak.float32
    np.testing.assert_allclose(out.numpy(), [math.erf(v) for v in x32.numpy()], rtol=1e-6)
    assert ak.erf(ak.tensor([1.0], dtype=ak.float16)).dtype == ak.float16
    assert ak.erf(ak.tensor([1, 2])).dtype == ak.float32


# ---------------------------------------------------------------- result dtypes
FLOAT_VALUED = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "sigmoid", "erf"]


@pytest.mark.parametrize("name", FLOAT_VALUED)
def test_integer_and_bool_inputs_give_default_float(name):
    ints = np.array([0, 1, 2, -1])
    with np.errstate(all="ignore"):
        expected = getattr(ak, name)(ak.tensor(ints.astype(np.float64))).numpy()
    for data in (ints, ints.astype(np.int32), ints > 0):
        out = getattr(ak, name)(ak.tensor(data))
        assert out.dtype == ak.float32
        want = expected if data.dtype != np.bool_ else \
            getattr(ak, name)(ak.tensor((ints > 0).astype(np.float64))).numpy()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, equal_nan=True)
    ak.set_default_dtype(ak.float64)
    try:
        assert getattr(ak, name)(ak.tensor(ints)).dtype == ak.float64
    finally:
        ak.set_default_dtype(ak.float32)
    assert getattr(ak, name)(ak.tensor([0.5], dtype=ak.float16)).dtype == ak.float16


@pytest.mark.parametrize("name", ["abs", "sign", "floor", "ceil", "round", "relu", "neg"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16"])
def test_dtype_keeping_ops_like_torch(torch, name, dtype):
    t = torch.tensor([3, -2, 0, 1], dtype=getattr(torch, dtype))
    _assert_like_torch(getattr(ak, name)(_ak(torch, t)), getattr(torch, name)(t))


def test_sign_of_bool_and_nan_like_torch(torch):
    b = torch.tensor([True, False])
    _assert_like_torch(ak.sign(_ak(torch, b)), torch.sign(b))
    x = torch.tensor([float("nan"), -0.0, -3.0, 2.0])
    _assert_like_torch(ak.sign(_ak(torch, x)), torch.sign(x))


@pytest.mark.parametrize("call,match", [
    (lambda: ak.abs(ak.tensor([True])), "\"abs_cpu\" not implemented for 'Bool'"),
    (lambda: ak.floor(ak.tensor([True])), "\"floor_vml_cpu\" not implemented for 'Bool'"),
    (lambda: ak.ceil(ak.tensor([True])), "\"ceil_vml_cpu\" not implemented for 'Bool'"),
    (lambda: ak.round(ak.tensor([True])), "\"round_vml_cpu\" not implemented for 'Bool'"),
    (lambda: ak.round(ak.tensor([1]), decimals=1), "\"round_cpu\" not implemented for 'Long'"),
    (lambda: ak.softplus(ak.tensor([1], dtype=ak.int32)),
     "\"softplus_cpu\" not implemented for 'Int'"),
    (lambda: ak.tensor([True]) ** ak.tensor([True]), "\"pow\" not implemented for 'Bool'"),
])
def test_not_implemented_for_dtype(call, match):
    with pytest.raises(NotImplementedError, match=match):
        call()


@pytest.mark.parametrize("call,match", [
    (lambda: ak.relu(ak.tensor([True])), "Boolean inputs not supported for relu"),
    (lambda: ak.tensor([2]) ** -1, "Integers to negative integer powers are not allowed."),
    (lambda: ak.clamp(ak.tensor([1.0])), "At least one of 'min' or 'max' must not be None"),
    (lambda: ak.where(ak.tensor([1.0]), 1.0, 2.0),
     "where expected condition to be a boolean tensor, but got a tensor with dtype Float"),
    (lambda: -ak.tensor([True]), "Negation, the `-` operator, on a bool tensor"),
])
def test_runtime_errors(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


# ---------------------------------------------------------------- type promotion
def _torch_result(torch, fn):
    try:
        return fn()
    except (RuntimeError, TypeError) as e:
        return e


def _check_binary_promotion(torch, name, a, b, ta, tb):
    expected = _torch_result(torch, lambda: getattr(torch, name)(ta, tb))
    if isinstance(expected, Exception):
        with pytest.raises((RuntimeError, TypeError)):
            getattr(ak, name)(a, b)
        return
    with np.errstate(all="ignore"):
        got = getattr(ak, name)(a, b)
    _assert_like_torch(got, expected, rtol=2e-3, atol=1e-3)


def _operand(torch, dtype, zero_d):
    t = _sample_tensor(torch, dtype, () if zero_d else (3,))
    return _ak(torch, t), t


@pytest.mark.parametrize("name", ["add", "mul", "div", "sub", "pow", "maximum", "minimum"])
@pytest.mark.parametrize("dtype_a", DTYPE_NAMES)
@pytest.mark.parametrize("dtype_b", DTYPE_NAMES)
def test_tensor_tensor_promotion_like_torch(torch, name, dtype_a, dtype_b):
    for zero_a, zero_b in [(False, False), (False, True), (True, False), (True, True)]:
        a, ta = _operand(torch, dtype_a, zero_a)
        b, tb = _operand(torch, dtype_b, zero_b)
        if name == "pow" and dtype_b.startswith("int"):
            b, tb = abs(b), tb.abs()  # non-negative exponents: defined for every base
        _check_binary_promotion(torch, name, a, b, ta, tb)


REFLECTED = {"add": lambda s, t: s + t, "mul": lambda s, t: s * t, "div": lambda s, t: s / t,
             "sub": lambda s, t: s - t, "pow": lambda s, t: s ** t}


@pytest.mark.parametrize("name", ["add", "mul", "div", "sub", "pow"])
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("scalar", [2, 2.5, True, -3, -3.5])
def test_tensor_scalar_promotion_like_torch(torch, name, dtype, scalar):
    """tensor op scalar (ak.NAME) and scalar op tensor (the reflected operator)."""
    for zero_d in (False, True):
        a, ta = _operand(torch, dtype, zero_d)
        _check_binary_promotion(torch, name, a, scalar, ta, scalar)
        expected = _torch_result(torch, lambda: REFLECTED[name](scalar, ta))
        if isinstance(expected, Exception):
            with pytest.raises((RuntimeError, TypeError)):
                REFLECTED[name](scalar, a)
        else:
            with np.errstate(all="ignore"):
                _assert_like_torch(REFLECTED[name](scalar, a), expected, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_operator_promotion_like_torch(torch, dtype, scalar):
    a, ta = _operand(torch, dtype, False)
    for fn in (lambda u, v: u + v, lambda u, v: v * u, lambda u, v: u / v,
               lambda u, v: v / u, lambda u, v: u < v, lambda u, v: v == u):
        expected = _torch_result(torch, lambda: fn(ta, scalar))
        if not isinstance(expected, Exception):
            with np.errstate(all="ignore"):
                _assert_like_torch(fn(a, scalar), expected, rtol=1e-3, atol=1e-3)


def test_atan2_and_clamp_promotion_like_torch(torch):
    i = torch.tensor([1, -2, 3])
    f = torch.tensor([0.5, 0.5, 0.5])
    _assert_like_torch(ak.atan2(_ak(torch, i), _ak(torch, i)), torch.atan2(i, i))
    _assert_like_torch(ak.atan2(_ak(torch, i), _ak(torch, f.double())), torch.atan2(i, f.double()))
    _assert_like_torch(ak.clamp(_ak(torch, i), 0.5), torch.clamp(i, 0.5))
    _assert_like_torch(ak.clamp(_ak(torch, i), 0), torch.clamp(i, 0))
    _assert_like_torch(ak.clamp(_ak(torch, i), _ak(torch, f)), torch.clamp(i, f))
    b = torch.tensor([True, False])
    _assert_like_torch(ak.clamp(_ak(torch, b), 0), torch.clamp(b, 0))
    _assert_like_torch(ak.clamp(_ak(torch, f), 1.0, 0.0), torch.clamp(f, 1.0, 0.0))


def test_comparisons_promote_like_torch(torch):
    x32 = torch.tensor([0.1, 0.2], dtype=torch.float32)
    assert (ak.tensor(x32.numpy()) == 0.1).tolist() == (x32 == 0.1).tolist()
    big = torch.tensor([16777217, 3])
    assert (_ak(torch, big) == 16777216.0).tolist() == (big == 16777216.0).tolist()
    assert (_ak(torch, big) < 3.5).tolist() == (big < 3.5).tolist()
    h = torch.tensor([1.0, 2.0], dtype=torch.float16)
    d = torch.tensor([1.0, 2.0001], dtype=torch.float64)
    assert (_ak(torch, h) == _ak(torch, d)).tolist() == (h == d).tolist()


# ---------------------------------------------------------------- pow
def test_pow_integer_tensor_exponents_like_torch(torch):
    base = torch.tensor([0, 2, -1, 1, -2, -1, 3])
    exponent = torch.tensor([-1, -1, -1, -3, -2, -3, 2])
    _assert_like_torch(_ak(torch, base) ** _ak(torch, exponent), base ** exponent)
    _assert_like_torch(2 ** _ak(torch, exponent), 2 ** exponent)
    _assert_like_torch((-1) ** _ak(torch, exponent), (-1) ** exponent)
    _assert_like_torch(_ak(torch, base) ** ak.tensor(-1), base ** torch.tensor(-1))
    i32 = base.int()
    _assert_like_torch(_ak(torch, i32) ** 2, i32 ** 2)
    _assert_like_torch(_ak(torch, i32) ** ak.tensor(2), i32 ** torch.tensor(2))


def _grads_like_torch(torch, fn, *tensors, rtol=1e-6):
    """fn(lib, *tensors) and its gradients match between lib=adkit and lib=torch."""
    ours = [_ak(torch, t) for t in tensors]
    out = fn(ak, *ours)
    expected = fn(torch, *tensors)
    _assert_like_torch(out, expected, rtol=rtol)
    grads = ak.autograd.grad(out.sum(), ours, allow_unused=True)
    t_grads = torch.autograd.grad(expected.sum(), tensors, allow_unused=True)
    for g, tg in zip(grads, t_grads):
        if g is None or tg is None:  # None means zero; either side may say so
            other = tg if g is None else g
            assert other is None or not np.any(other.detach().numpy())
        else:
            _assert_like_torch(g, tg, rtol=rtol)


@pytest.mark.parametrize("exponent", [0, 0.0, 1, 2, 3, -1, 0.5, 2.0])
def test_pow_scalar_exponent_grad_at_zero_and_negative_like_torch(torch, exponent):
    x = torch.tensor([-2.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, t: t ** exponent, x)


def test_pow_tensor_exponent_grad_special_points_like_torch(torch):
    x = torch.tensor([-2.0, 0.0, 0.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([2.0, 0.0, -1.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, a, b: a ** b, x, y)


@pytest.mark.parametrize("base", [0.0, 2.0, -2.0, 0, 3])
def test_pow_scalar_base_grad_like_torch(torch, base):
    y = torch.tensor([2.0, 0.0, -1.0, 0.5], dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, t: base ** t, y)


@pytest.mark.parametrize("exponent,second", [(3, lambda x: 6 * x), (1, lambda x: 0 * x),
                                             (2, lambda x: 2 + 0 * x)])
def test_pow_second_derivative_of_integer_powers(exponent, second):
    """No nan at x = 0 or x < 0: x**(y-1) with y - 1 == 0 has a zero derivative."""
    x = ak.tensor([-2.0, 0.0, 3.0], dtype=ak.float64, requires_grad=True)
    g, = ak.autograd.grad((x ** exponent).sum(), x, create_graph=True)
    gg, = ak.autograd.grad(g.sum(), x, allow_unused=True, materialize_grads=True)
    np.testing.assert_array_equal(gg.numpy(), second(x.detach().numpy()))


# ---------------------------------------------------------------- maximum, minimum, clamp
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_max_min_split_gradient_at_ties_like_torch(torch, name):
    x = torch.tensor([1.0, 2.0, 3.0, float("nan")], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.0, 1.0, 4.0, 0.0], dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, a, b: getattr(lib, name)(a, b), x, y)
    z = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, a, b: getattr(lib, name)(a, b), x, z)


@pytest.mark.parametrize("bounds", [(1.0, 2.0), (1.0, None), (None, 2.0), (2.0, 1.0)])
def test_clamp_scalar_bounds_gradient_like_torch(torch, bounds):
    x = torch.tensor([0.0, 1.0, 1.5, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    _grads_like_torch(torch, lambda lib, t: lib.clamp(t, *bounds), x)


@pytest.mark.parametrize("which", ["both", "min", "max", "crossed"])
def test_clamp_tensor_bounds_gradient_like_torch(torch, which):
    x = torch.tensor([0.0, 1.0, 1.5, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    lo = torch.full((5,), 1.0, dtype=torch.float64, requires_grad=True)
    hi = torch.full((5,), 2.0, dtype=torch.float64, requires_grad=True)
    if which == "crossed":
        lo, hi = hi, lo
    pick = {"both": lambda a, b: (a, b), "crossed": lambda a, b: (a, b),
            "min": lambda a, b: (a, None), "max": lambda a, b: (None, b)}[which]

    _grads_like_torch(torch, lambda lib, t, a, b: lib.clamp(t, *pick(a, b)), x, lo, hi)


def test_clamp_tensor_and_number_bounds_act_like_two_tensors():
    """PyTorch refuses clamp(t, tensor, number); adkit takes it as clamp(t, tensor,
    full_like(number))."""
    x = ak.tensor([0.0, 1.0, 1.5, 2.0, 3.0], dtype=ak.float64, requires_grad=True)
    lo = ak.tensor([1.0, 1.0, 2.5, 1.0, 1.0], dtype=ak.float64, requires_grad=True)
    got = ak.clamp(x, lo, 2.0)
    want = ak.clamp(x, lo, ak.full((5,), 2.0, dtype=ak.float64))
    assert got.tolist() == want.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]
    grads = ak.autograd.grad(got.sum(), (x, lo))
    want_grads = ak.autograd.grad(want.sum(), (x, lo))
    for g, w in zip(grads, want_grads):
        assert g.tolist() == w.tolist()
    assert grads[1].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # min 2.5 > max 2: max wins


def test_clamp_aliases_and_methods():
    x = ak.tensor([-2.0, 0.5, 3.0])
    expected = [-1.0, 0.5, 1.0]
    assert ak.clip(x, -1, 1).tolist() == expected
    assert x.clamp(min=-1, max=1).tolist() == expected
    assert x.clip(-1, 1).tolist() == expected
    assert ak.clamp_min(x, 0.0).tolist() == [0.0, 0.5, 3.0]
    assert x.clamp_max(1.0).tolist() == [-2.0, 0.5, 1.0]


# ---------------------------------------------------------------- softplus, round
@pytest.mark.parametrize("kwargs", [{}, {"beta": 2.0}, {"beta": 0.5, "threshold": 1.0},
                                    {"threshold": 5}])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softplus_like_torch(torch, kwargs, dtype):
    x = torch.tensor([-40.0, -3.0, 0.0, 1.9, 2.1, 19.9, 20.1, 50.0, 800.0],
                     dtype=getattr(torch, dtype), requires_grad=True)

    def fn(lib, t):
        softplus = torch.nn.functional.softplus if lib is torch else ak.softplus
        return softplus(t, **kwargs)
    _grads_like_torch(torch, fn, x, rtol=1e-5)


@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_decimals_like_torch(torch, decimals, dtype):
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 1.2345, 0.125, 1250.0, -7.77, 15.0, 25.0],
                     dtype=getattr(torch, dtype))
    _assert_like_torch(ak.round(_ak(torch, x), decimals=decimals),
                       torch.round(x, decimals=decimals), rtol=0, atol=0)


def test_zero_derivative_ops_record_grad_fn_with_zero_gradient():
    x = ak.tensor([0.3, -1.6, 2.5], requires_grad=True)
    for fn in (ak.floor, ak.ceil, ak.round, ak.sign, lambda t: ak.round(t, decimals=1)):
        out = fn(x)
        assert out.requires_grad and out.grad_fn is not None
        g, = ak.autograd.grad(out.sum(), x, allow_unused=True, materialize_grads=True)
        assert g.tolist() == [0.0, 0.0, 0.0]


def test_abs_and_relu_gradient_at_zero_like_torch(torch):
    x = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    for method in ("abs", "relu", "sqrt", "sign"):
        _grads_like_torch(torch, lambda lib, t: getattr(t, method)(), x)


# ---------------------------------------------------------------- comparisons, where
def test_comparisons_are_bool_without_gradient():
    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = ak.tensor([3.0, 2.0, 1.0])
    for out in (x < y, x <= y, x > y, x >= y, x == y, x != y, ak.lt(x, 2), ak.isnan(x),
                ak.isfinite(x), ak.isinf(x), ak.logical_and(x, y), ak.logical_not(x),
                ak.less(x, y), ak.greater_equal(x, y), ak.not_equal(x, y)):
        assert out.dtype == ak.bool
        assert not out.requires_grad and out.grad_fn is None
    assert (x < y).tolist() == [True, False, False]
    assert (1 < x).tolist() == [False, True, True]
    assert (2.0 >= x).tolist() == [True, True, False]
    assert (x == y).tolist() == [False, True, False]
    assert (x != 2).tolist() == [True, False, True]
    assert (x == None) is False  # noqa: E711  (Python falls back to identity)


def test_logical_ops_and_predicates():
    a = ak.tensor([0.0, 1.5, -2.0, np.nan])
    b = ak.tensor([3, 0, 1, 0])
    assert ak.logical_and(a, b).tolist() == [False, False, True, False]
    assert ak.logical_or(a, b).tolist() == [True, True, True, True]
    assert ak.logical_xor(a, b).tolist() == [True, True, False, True]
    assert ak.logical_not(a).tolist() == [True, False, False, False]
    specials = ak.tensor([np.nan, np.inf, -np.inf, 0.0])
    assert specials.isnan().tolist() == [True, False, False, False]
    assert specials.isfinite().tolist() == [False, False, False, True]
    assert specials.isinf().tolist() == [False, True, True, False]
    assert b.isnan().tolist() == [False] * 4 and b.isfinite().tolist() == [True] * 4


@pytest.mark.parametrize("x_kind", ["f32", "f64_0d", "i64", "f16", 1.0, 2, True])
@pytest.mark.parametrize("y_kind", ["f32", "i32", "f64_0d", 0.0, 3, False])
def test_where_promotion_like_torch(torch, x_kind, y_kind):
    cond = torch.tensor([True, False, True])

    def make(kind, values):
        if not isinstance(kind, str):
            return kind, kind
        dtype = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64,
                 "i32": torch.int32, "f16": torch.float16}[kind.split("_")[0]]
        t = torch.tensor(values, dtype=dtype)
        t = t[0].clone() if kind.endswith("0d") else t
        return _ak(torch, t), t
    x, tx = make(x_kind, [1, 2, 3])
    y, ty = make(y_kind, [-1, -2, -3])
    _assert_like_torch(ak.where(_ak(torch, cond), x, y), torch.where(cond, tx, ty))


def test_where_gradients_with_broadcasting_like_torch(torch):
    cond = torch.tensor([[True], [False], [True]])
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor(5.0, dtype=torch.float64, requires_grad=True)
    conds = {torch: cond, ak: _ak(torch, cond)}
    _grads_like_torch(torch, lambda lib, a, b: lib.where(conds[lib], a, b), x, y)


def test_where_with_scalar_branches_and_single_argument():
    cond = ak.tensor([True, False, True])
    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = ak.where(cond, x, 0.0)
    assert out.dtype == ak.float32 and out.tolist() == [1.0, 0.0, 3.0]
    g, = ak.autograd.grad(out.sum(), x)
    assert g.tolist() == [1.0, 0.0, 1.0]
    assert ak.where(cond, 1, 0).dtype == ak.int64
    assert ak.where(cond, 1.0, 0.0).dtype == ak.float32
    rows, cols = ak.where(ak.tensor([[True, False], [False, True]]))
    assert rows.tolist() == [0, 1] and cols.tolist() == [0, 1] and rows.dtype == ak.int64


# ---------------------------------------------------------------- Python operators, casts
def test_python_operators():
    x = ak.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = ak.tensor([1.0, 2.0, 0.0])
    assert (x ** 2).tolist() == [1.0, 4.0, 9.0]
    assert (2 ** x).tolist() == [2.0, 0.25, 8.0]
    assert (x ** y).tolist() == [1.0, 4.0, 1.0]
    assert (x < 1).tolist() == [False, True, False]
    assert (x == y).tolist() == [True, False, False]
    mask, mask2 = x > 0, y > 0
    assert (~mask).tolist() == [False, True, False]
    assert (mask & mask2).tolist() == [True, False, False]
    assert (mask | mask2).tolist() == [True, True, True]
    assert (mask ^ mask2).tolist() == [False, True, True]
    assert abs(x).tolist() == [1.0, 2.0, 3.0]
    assert (-x).tolist() == [-1.0, 2.0, -3.0]
    g, = ak.autograd.grad((x ** 2 + 2 ** x + abs(x)).sum(), x)
    expected = 2 * x.detach().numpy() + np.log(2) * 2 ** x.detach().numpy() + [1, -1, 1]
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-6)


def test_dtype_cast_methods():
    x = ak.tensor([1.5, -2.0], requires_grad=True)
    for method, dtype in [("double", ak.float64), ("float", ak.float32), ("half", ak.float16),
                          ("long", ak.int64), ("int", ak.int32), ("bool", ak.bool)]:
        assert getattr(x, method)().dtype == dtype
    assert x.float() is x  # already float32: no copy, as in PyTorch
    y = x.double()
    assert y.requires_grad and y.grad_fn is not None
    g, = ak.autograd.grad((y * y).sum(), x)
    assert g.dtype == ak.float32 and g.tolist() == [3.0, -4.0]


# ---------------------------------------------------------------- jvp rules
def _node_tangents(node, args, rng):
    """One tangent per forward parameter of `node`: random for the float tensor args it
    was called with directly, None elsewhere; None if an arg reached it otherwise."""
    variables = [getattr(fn, "variable", None) for fn, _ in node.next_functions]
    tensor_params = [i for i, edge in enumerate(node._edges) if edge is not NOT_TENSOR]
    tangents, directions = [None] * len(node._edges), {}
    for param, var in zip(tensor_params, variables):
        if var is None:
            continue
        index = next((k for k, a in enumerate(args) if a is var), None)
        if index is None:
            return None, None
        t = rng.standard_normal(var.shape)
        tangents[param] = ak.tensor(t)
        directions[index] = t
    return tangents, directions


@pytest.mark.parametrize("info,dtype,sample", op_cases(
    dtypes=[np.float64], only=lambda i: i.supports_grad and any(i is r for r in ROWS)))
def test_jvp_matches_finite_differences(info, dtype, sample):
    args = to_tensor_args(sample.args, requires_grad=True, grad_argnums=info.grad_argnums)
    out = info.op(*args, **sample.kwargs)
    if out.grad_fn is None or out.numel() == 0:
        pytest.skip("no differentiable output")
    rng = np.random.default_rng(0)
    tangents, directions = _node_tangents(out.grad_fn, args, rng)
    if not directions:
        pytest.skip("op is not one Function applied to its tensor arguments")
    with ak.no_grad():
        analytic = out.grad_fn.apply_jvp(*tangents)
    eps = 1e-6

    def shifted(sign):
        moved = [ak.tensor(a.detach().numpy() + sign * eps * directions[k])
                 if k in directions else a for k, a in enumerate(args)]
        return info.op(*moved, **sample.kwargs).detach().numpy()
    numeric = (shifted(1) - shifted(-1)) / (2 * eps)
    if analytic is None:  # a zero tangent (x ** 0)
        analytic = ak.zeros_like(out)
    assert tuple(analytic.shape) == tuple(out.shape)
    np.testing.assert_allclose(analytic.numpy(), numeric, rtol=1e-4, atol=1e-5)


def test_bitwise_operators_match_torch():
    torch = pytest.importorskip("torch")
    for values in ([1, 2, 3], [True, False, True]):
        x, t = ak.tensor(values), torch.tensor(values)
        for got, want in (((x & x), (t & t)), ((~x), (~t)), ((x | 1), (t | 1)),
                          ((x ^ x), (t ^ t)), ((1 & x), (1 & t))):
            assert got.tolist() == want.tolist() and str(got.dtype)[6:] == str(want.dtype)[6:]
    with pytest.raises(TypeError, match="only implemented on integer and Boolean"):
        ~ak.tensor([1.0])


def test_where_method_takes_self_as_the_value():
    x = ak.tensor([1.0, 2.0, 3.0])
    out = x.where(ak.tensor([True, False, True]), 0.0)
    assert out.tolist() == [1.0, 0.0, 3.0]

"""Unary elementwise ops: each is its numpy forward and its derivative in adkit ops.

Owns: neg, exp, log, ..., erf, rounding, softplus, dtype casts (`to`, `double()`,
`float()`, ...) and `clone` (clamp lives with maximum/minimum in binary.py). The family
(`UnaryElementwise`) builds backward (grad_out * f'(x)) and jvp (x_t * f'(x)). Integer
and bool inputs to transcendental ops give the default float dtype, as in PyTorch;
rounding, abs, sign, relu keep the dtype.
"""
import math

import numpy as np

from .. import dtypes
from ..tensor import Tensor, _check_device, device as _device
from ._families import MATH_CALL_NS, ArrayFunction, UnaryElementwise, public
from ._helpers import as_float_array, copy_in_order
from .comparison import Where, not_implemented_for


def _float_op(ufunc, x):
    """ufunc on x promoted to a float dtype; domain errors give nan/inf silently."""
    with np.errstate(all="ignore"):
        return ufunc(as_float_array(x))


def _total_op(ufunc, x):
    """ufunc defined on all reals, promoted to a float dtype. NB: no np.errstate (it
    costs twice the ufunc on small tensors); only inf/nan input or overflow can warn."""
    if x.dtype.kind != "f":
        x = x.astype(dtypes.get_default_dtype().np)
    return ufunc(x)


class Log(UnaryElementwise):
    """y = log(x);  dy/dx = 1/x."""
    public_name = "log"
    native_cost = 0.5  # ns per element: a cheaper math call than MATH_CALL_NS
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.log(x)."""
        return b.log(x)

    @staticmethod
    def forward(x):
        return _float_op(np.log, x)

    @staticmethod
    def derivative(x, out):
        return x.reciprocal()


class Log1p(UnaryElementwise):
    """y = log(1 + x);  dy/dx = 1/(1 + x)."""
    public_name = "log1p"
    native_cost = 0.6  # ns per element: a cheaper math call than MATH_CALL_NS
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.log1p(x)."""
        return b.log1p(x)

    @staticmethod
    def forward(x):
        return _float_op(np.log1p, x)

    @staticmethod
    def derivative(x, out):
        return (x + 1).reciprocal()


class Expm1(UnaryElementwise):
    """y = exp(x) - 1;  dy/dx = y + 1."""
    public_name = "expm1"
    native_cost = 0.6  # ns per element: a cheaper math call than MATH_CALL_NS
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.expm1(x)."""
        return b.expm1(x)

    @staticmethod
    def forward(x):
        return _total_op(np.expm1, x)

    @staticmethod
    def derivative(x, out):
        return out + 1


class Sqrt(UnaryElementwise):
    """y = sqrt(x);  dy/dx = 1/(2y)."""
    public_name = "sqrt"
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.sqrt(x)."""
        return b.sqrt(x)

    @staticmethod
    def forward(x):
        return _float_op(np.sqrt, x)

    @staticmethod
    def derivative(x, out):
        return 0.5 / out


class Rsqrt(UnaryElementwise):
    """y = 1/sqrt(x);  dy/dx = -y^3/2."""
    public_name = "rsqrt"
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.div(1.0, b.sqrt(x))."""
        return b.div(1.0, b.sqrt(x))

    @staticmethod
    def forward(x):
        x = as_float_array(x)
        with np.errstate(all="ignore"):
            return np.reciprocal(np.sqrt(x))

    @staticmethod
    def derivative(x, out):
        return out * out * out * -0.5


class Reciprocal(UnaryElementwise):
    """y = 1/x;  dy/dx = -y^2."""
    public_name = "reciprocal"
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.div(1.0, x)."""
        return b.div(1.0, x)

    @staticmethod
    def forward(x):
        return _float_op(np.reciprocal, x)

    @staticmethod
    def derivative(x, out):
        return -(out * out)


class Abs(UnaryElementwise):
    """y = |x|;  dy/dx = sign(x) (0 at 0)."""
    public_name = "abs"
    saves = ("x",)
    aliases = ("absolute",)

    @staticmethod
    def lower(b, x):
        """Native code: b.fabs(x)."""
        return b.fabs(x)

    @staticmethod
    def forward(x):
        if x.dtype == np.bool_:
            raise not_implemented_for("abs_cpu", x.dtype)
        return np.abs(x)

    @staticmethod
    def derivative(x, out):
        return x.sign()


class Sign(UnaryElementwise):
    """y = sign(x) in {-1, 0, 1} (0 for nan, as PyTorch);  dy/dx = 0."""
    public_name = "sign"
    saves = ()

    @staticmethod
    def lower(b, x):
        """Native code: 1, -1 or 0 (0 for nan)."""
        negative_or_zero = b.select(b.compare("<", x, 0.0), -1.0, 0.0)
        return b.select(b.compare(">", x, 0.0), 1.0, negative_or_zero)

    @staticmethod
    def forward(x):
        if x.dtype == np.bool_:
            return x.copy()
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)

    @staticmethod
    def derivative(x, out):
        return None


class Sin(UnaryElementwise):
    """y = sin(x);  dy/dx = cos(x)."""
    public_name = "sin"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.sin(x)."""
        return b.sin(x)

    @staticmethod
    def forward(x):
        return _total_op(np.sin, x)

    @staticmethod
    def derivative(x, out):
        return x.cos()


class Cos(UnaryElementwise):
    """y = cos(x);  dy/dx = -sin(x)."""
    public_name = "cos"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.cos(x)."""
        return b.cos(x)

    @staticmethod
    def forward(x):
        return _total_op(np.cos, x)

    @staticmethod
    def derivative(x, out):
        return -x.sin()


class Tan(UnaryElementwise):
    """y = tan(x);  dy/dx = 1 + y^2."""
    public_name = "tan"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.tan(x)."""
        return b.tan(x)

    @staticmethod
    def forward(x):
        return _float_op(np.tan, x)

    @staticmethod
    def derivative(x, out):
        return out * out + 1


class Tanh(UnaryElementwise):
    """y = tanh(x);  dy/dx = 1 - y^2."""
    public_name = "tanh"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.tanh(x)."""
        return b.tanh(x)

    @staticmethod
    def forward(x):
        return _total_op(np.tanh, x)

    @staticmethod
    def derivative(x, out):
        return 1 - out * out


class Sinh(UnaryElementwise):
    """y = sinh(x);  dy/dx = cosh(x)."""
    public_name = "sinh"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.sinh(x)."""
        return b.sinh(x)

    @staticmethod
    def forward(x):
        return _total_op(np.sinh, x)

    @staticmethod
    def derivative(x, out):
        return x.cosh()


class Cosh(UnaryElementwise):
    """y = cosh(x);  dy/dx = sinh(x)."""
    public_name = "cosh"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.cosh(x)."""
        return b.cosh(x)

    @staticmethod
    def forward(x):
        return _total_op(np.cosh, x)

    @staticmethod
    def derivative(x, out):
        return x.sinh()


class Asin(UnaryElementwise):
    """y = asin(x);  dy/dx = 1/sqrt(1 - x^2)."""
    public_name = "asin"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)
    aliases = ("arcsin",)

    @staticmethod
    def lower(b, x):
        """Native code: b.asin(x)."""
        return b.asin(x)

    @staticmethod
    def forward(x):
        return _float_op(np.arcsin, x)

    @staticmethod
    def derivative(x, out):
        return (1 - x * x).rsqrt()


class Acos(UnaryElementwise):
    """y = acos(x);  dy/dx = -1/sqrt(1 - x^2)."""
    public_name = "acos"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)
    aliases = ("arccos",)

    @staticmethod
    def lower(b, x):
        """Native code: b.acos(x)."""
        return b.acos(x)

    @staticmethod
    def forward(x):
        return _float_op(np.arccos, x)

    @staticmethod
    def derivative(x, out):
        return -(1 - x * x).rsqrt()


class Atan(UnaryElementwise):
    """y = atan(x);  dy/dx = 1/(1 + x^2)."""
    public_name = "atan"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)
    aliases = ("arctan",)

    @staticmethod
    def lower(b, x):
        """Native code: b.atan(x)."""
        return b.atan(x)

    @staticmethod
    def forward(x):
        return _total_op(np.arctan, x)

    @staticmethod
    def derivative(x, out):
        return (x * x + 1).reciprocal()


class Sigmoid(UnaryElementwise):
    """y = 1/(1 + exp(-x));  dy/dx = y (1 - y)."""
    public_name = "sigmoid"
    native_cost = 0.6  # ns per element: a cheaper math call than MATH_CALL_NS
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.div(1.0, b.add(1.0, b.exp(b.neg(x))))."""
        return b.div(1.0, b.add(1.0, b.exp(b.neg(x))))

    @staticmethod
    def forward(x):
        x = as_float_array(x)
        e = np.exp(-np.abs(x))  # never overflows
        r = 1 / (1 + e)
        return np.where(x >= 0, r, e * r)

    @staticmethod
    def derivative(x, out):
        return out * (1 - out)


class Relu(UnaryElementwise):
    """y = max(x, 0);  dy/dx = 1 if x > 0 else 0."""
    public_name = "relu"
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.maximum(x, 0.0) (NaN stays NaN, as in numpy)."""
        return b.maximum(x, 0.0)

    @staticmethod
    def forward(x):
        if x.dtype == np.bool_:
            raise RuntimeError("Boolean inputs not supported for relu")
        return np.maximum(x, 0)

    @staticmethod
    def derivative(x, out):
        return (x > 0).to(x.dtype)


class Softplus(ArrayFunction):
    """y = log(1 + exp(beta x)) / beta, or x where beta x > threshold (PyTorch's
    softplus);  dy/dx = sigmoid(beta x), or 1 where beta x > threshold."""
    public_name = "softplus"
    variants = ("function",)

    @staticmethod
    def forward(x, beta=1.0, threshold=20.0):
        if x.dtype.kind != "f":
            raise not_implemented_for("softplus_cpu", x.dtype)
        z = x * beta
        with np.errstate(over="ignore"):
            soft = np.log1p(np.exp(z)) / beta
        return np.where(z > threshold, x, soft)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.beta, ctx.threshold = inputs[1], inputs[2]
        ctx.save_for_backward(inputs[0])

    @classmethod
    def vmap(cls, info, in_dims, x, beta, threshold):
        """Batching rule: elementwise, so the batch dim stays where it is."""
        return cls.apply(x, beta, threshold), in_dims[0]

    @staticmethod
    def slope(ctx, x):
        z = x * ctx.beta
        return Where.apply(z > ctx.threshold, 1.0, z.sigmoid())

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * Softplus.slope(ctx, x), None, None

    @staticmethod
    def jvp(ctx, x_t, _beta, _threshold):
        x, = ctx.saved_tensors
        return x_t * Softplus.slope(ctx, x)


# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969); coefficients of netlib specfun CALERF. Relative error below 1e-15 in float64.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_INV_SQRT_PI = 5.6418958354775628695e-1


def _rational(t, num, den, lead, n):
    """Cody's nested evaluation: (num[lead] t^(n+1) + ... ) / (t^(n+1) + ...)."""
    xnum, xden = num[lead] * t, t
    for i in range(n):
        xnum = (xnum + num[i]) * t
        xden = (xden + den[i]) * t
    return xnum + num[n], xden + den[n]


def _exp_neg_square(y):
    """exp(-y^2) without the rounding error of squaring y: split y = y16 + rest."""
    y16 = np.trunc(y * 16) / 16
    return np.exp(-y16 * y16) * np.exp(-(y - y16) * (y + y16))


def _erfc_positive(y):
    """erfc(y) for float64 y > 0.46875 (Cody's second and third intervals)."""
    out = np.empty_like(y)
    mid = y <= 4.0
    ym = y[mid]
    num, den = _rational(ym, _ERF_C, _ERF_D, 8, 7)
    out[mid] = _exp_neg_square(ym) * num / den
    yb = np.minimum(y[~mid], 27.0)  # erfc underflows to 0 beyond 26.6
    t = 1.0 / (yb * yb)
    num, den = _rational(t, _ERF_P, _ERF_Q, 5, 4)
    out[~mid] = _exp_neg_square(yb) * (_INV_SQRT_PI - t * num / den) / yb
    return out


def erf_float64(x):
    """erf of a float64 array, vectorized (nan stays nan, erf(+-inf) = +-1)."""
    y = np.abs(x)
    out = x.copy()  # nan entries fall in no interval and stay nan
    small = y <= 0.46875
    xs = x[small]
    num, den = _rational(xs * xs, _ERF_A, _ERF_B, 4, 3)
    out[small] = xs * num / den
    large = y > 0.46875
    out[large] = np.copysign(1.0 - _erfc_positive(y[large]), x[large])
    return out


class Erf(UnaryElementwise):
    """y = erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt;  dy/dx = 2/sqrt(pi) exp(-x^2)."""
    public_name = "erf"
    native_cost = MATH_CALL_NS  # a math library call per element
    saves = ("x",)

    @staticmethod
    def lower(b, x):
        """Native code: b.erf(x)."""
        return b.erf(x)

    @staticmethod
    def forward(x):
        x = as_float_array(x)
        return erf_float64(np.asarray(x, dtype=np.float64)).astype(x.dtype, copy=False)

    @staticmethod
    def derivative(x, out):
        return (-(x * x)).exp() * (2 / math.sqrt(math.pi))


def _integral_copy(x, kernel):
    """Rounding an integer tensor is a copy; bool has no rounding kernel (PyTorch)."""
    if x.dtype == np.bool_:
        raise not_implemented_for(kernel, x.dtype)
    return x.copy()


class Floor(UnaryElementwise):
    """y = floor(x);  dy/dx = 0."""
    public_name = "floor"
    saves = ()

    @staticmethod
    def lower(b, x):
        """Native code: b.floor(x)."""
        return b.floor(x)

    @staticmethod
    def forward(x):
        return np.floor(x) if x.dtype.kind == "f" else _integral_copy(x, "floor_vml_cpu")

    @staticmethod
    def derivative(x, out):
        return None


class Ceil(UnaryElementwise):
    """y = ceil(x);  dy/dx = 0."""
    public_name = "ceil"
    saves = ()

    @staticmethod
    def lower(b, x):
        """Native code: b.ceil(x)."""
        return b.ceil(x)

    @staticmethod
    def forward(x):
        return np.ceil(x) if x.dtype.kind == "f" else _integral_copy(x, "ceil_vml_cpu")

    @staticmethod
    def derivative(x, out):
        return None


class Round(ArrayFunction):
    """y = x rounded half to even to `decimals` decimal places (PyTorch's
    nearbyint(x * 10^d) / 10^d);  dy/dx = 0."""
    public_name = "round"

    @staticmethod
    def forward(x, decimals=0):
        if x.dtype.kind != "f":
            if decimals != 0 and x.dtype != np.bool_:
                raise not_implemented_for("round_cpu", x.dtype)
            return _integral_copy(x, "round_vml_cpu")
        if decimals == 0:
            return np.rint(x)
        if decimals > 0:
            scale = 10.0 ** decimals
            return np.rint(x * scale) / scale
        scale = 10.0 ** -decimals
        return np.rint(x / scale) * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return None, None

    @staticmethod
    def jvp(ctx, x_t, _decimals):
        return x_t * 0

    @classmethod
    def vmap(cls, info, in_dims, x, decimals):
        """Batching rule: elementwise, so the batch dim stays where it is."""
        return cls.apply(x, decimals), in_dims[0]


class Neg(UnaryElementwise):
    """y = -x;  dy/dx = -1."""
    public_name = "neg"
    aliases = ("negative",)

    @staticmethod
    def lower(b, x):
        """Native code: b.neg(x)."""
        return b.neg(x)

    @staticmethod
    def forward(x):
        if x.dtype == np.bool_:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not "
                               "supported. If you are trying to invert a mask, use the `~` "
                               "or `logical_not()` operator instead.")
        return np.negative(x)

    @staticmethod
    def backward(ctx, grad_out):
        return -grad_out

    @staticmethod
    def jvp(ctx, x_t):
        return -x_t

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class Exp(UnaryElementwise):
    """y = exp(x);  dy/dx = y."""
    public_name = "exp"
    native_cost = 0.5  # ns per element: a cheaper math call than MATH_CALL_NS
    saves = ("out",)

    @staticmethod
    def lower(b, x):
        """Native code: b.exp(x)."""
        return b.exp(x)

    @staticmethod
    def forward(x):
        return _total_op(np.exp, x)

    @staticmethod
    def derivative(x, out):
        return out


class ToDtype(ArrayFunction):
    """y = x converted to `dtype`;  grad_x = grad_out converted back to x's dtype."""
    public_name = "to"
    variants = ("method",)

    @staticmethod
    def lower(b, x, dtype):
        """Native code: a bool as 0/1; a float of the kernel's dtype as it is."""
        return b.to_float(x)

    @staticmethod
    def forward(x, dtype):
        return x.astype(dtypes.to_dtype(dtype).np)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_dtype = inputs[0]._data.dtype
        ctx.output_dtype = output._data.dtype

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.to(ctx.input_dtype), None

    @staticmethod
    def jvp(ctx, x_t, _):
        return x_t.to(ctx.output_dtype)

    @classmethod
    def vmap(cls, info, in_dims, x, dtype):
        """Batching rule: elementwise, so the batch dim stays where it is."""
        return cls.apply(x, dtype), in_dims[0]

    @classmethod
    def interface(cls, x, *args, dtype=None, device=None, non_blocking=False, copy=False):
        """PyTorch's forms: to(dtype), to(device), to(device, dtype), to(other tensor),
        with dtype=/device=/copy= keywords (the device must be the CPU)."""
        for arg in args:
            if isinstance(arg, Tensor):
                dtype = arg.dtype
            elif isinstance(arg, (str, _device)):
                device = arg
            elif arg is not None and not isinstance(arg, bool):
                dtype = arg
        _check_device(device)
        dtype = dtypes.to_dtype(dtype)
        if dtype is None or dtype == x.dtype:
            return x.clone() if copy else x
        return cls.apply(x, dtype.np)


def _cast_method(name, dtype):
    def cast(x):
        return x.to(dtype)
    cast.__name__ = name
    cast.__doc__ = f"`x.{name}()` is `x.to({dtype!r})`."
    return public(name, variants=("method",))(cast)


double = _cast_method("double", dtypes.float64)
to_float = _cast_method("float", dtypes.float32)
half = _cast_method("half", dtypes.float16)
long = _cast_method("long", dtypes.int64)
to_int = _cast_method("int", dtypes.int32)
to_bool = _cast_method("bool", dtypes.bool_)


class Clone(ArrayFunction):
    """y = a copy of x (C order);  grad_x = grad_out."""
    public_name = "clone"
    native_copy = staticmethod(copy_in_order)  # contiguous too: it is a Clone

    @staticmethod
    def forward(x):
        return x.copy(order="C")

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out

    @staticmethod
    def jvp(ctx, x_t):
        return x_t

    @classmethod
    def vmap(cls, info, in_dims, x):
        """Batching rule: a C-order copy with the batch dim in front, so each example is
        C-contiguous, as clone makes it eagerly (a later view(-1) must work per example
        as it does in a loop; a batch dim left in the middle would split each example)."""
        return cls.apply(x.movedim(in_dims[0], 0)), 0

"""Unary elementwise ops: each is its numpy forward and its derivative in adkit ops.

Owns: neg, exp, log, ..., sigmoid, relu, softplus (erf is in special.py, floor, ceil
and round in rounding.py, casts and clone in conversion.py; clamp lives with
maximum/minimum in binary.py). The family (`UnaryElementwise`) builds backward
(grad_out * f'(x)) and jvp (x_t * f'(x)). Integer and bool inputs to transcendental ops
give the default float dtype, as in PyTorch; abs, sign, relu keep the dtype.
"""

import numpy as np

from .. import dtypes
from . import _sparsity
from ._families import MATH_CALL_NS, ArrayFunction, UnaryElementwise
from ._helpers import as_float_array
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
    # lint_where: where the derivative is infinite or undefined, by argument position:
    # (that domain, a value outside it that safe_where puts in masked lanes, and
    # "positive" when an argument proved positive is outside it)
    singular = {0: ("x <= 0", 1.0, "positive")}
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
    singular = {0: ("x <= -1", 0.0, None)}  # see Log
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
    ufunc = np.expm1
    singular = {0: ("x > 709 (overflow)", 0.0, None)}  # see Log
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

    array_rule = derivative  # operators only: the same on arrays


class Sqrt(UnaryElementwise):
    """y = sqrt(x);  dy/dx = 1/(2y)."""
    public_name = "sqrt"
    singular = {0: ("x <= 0", 1.0, "positive")}  # see Log
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
    singular = {0: ("x <= 0", 1.0, "positive")}  # see Log
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

    array_rule = derivative  # operators only: the same on arrays


class Reciprocal(UnaryElementwise):
    """y = 1/x;  dy/dx = -y^2."""
    public_name = "reciprocal"
    singular = {0: ("x == 0", 1.0, "positive")}  # see Log
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

    array_rule = derivative  # operators only: the same on arrays


class Abs(UnaryElementwise):
    """y = |x|;  dy/dx = sign(x) (0 at 0)."""
    public_name = "abs"
    ufunc = np.abs
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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays (Sign's forward: 0 at 0 and nan)."""
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


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
    ufunc = np.sin
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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays."""
        return np.cos(x)


class Cos(UnaryElementwise):
    """y = cos(x);  dy/dx = -sin(x)."""
    public_name = "cos"
    ufunc = np.cos
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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays."""
        return -np.sin(x)


class Tan(UnaryElementwise):
    """y = tan(x);  dy/dx = 1 + y^2."""
    public_name = "tan"
    singular = {0: ("cos(x) == 0", 0.0, None)}  # see Log
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

    array_rule = derivative  # operators only: the same on arrays


class Tanh(UnaryElementwise):
    """y = tanh(x);  dy/dx = 1 - y^2."""
    public_name = "tanh"
    ufunc = np.tanh
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

    array_rule = derivative  # operators only: the same on arrays


class Sinh(UnaryElementwise):
    """y = sinh(x);  dy/dx = cosh(x)."""
    public_name = "sinh"
    ufunc = np.sinh
    singular = {0: ("|x| > 710 (overflow)", 0.0, None)}  # see Log
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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays."""
        return np.cosh(x)


class Cosh(UnaryElementwise):
    """y = cosh(x);  dy/dx = sinh(x)."""
    public_name = "cosh"
    ufunc = np.cosh
    singular = {0: ("|x| > 710 (overflow)", 0.0, None)}  # see Log
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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays."""
        return np.sinh(x)


class Asin(UnaryElementwise):
    """y = asin(x);  dy/dx = 1/sqrt(1 - x^2)."""
    public_name = "asin"
    singular = {0: ("|x| >= 1", 0.0, None)}  # see Log
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
    singular = {0: ("|x| >= 1", 0.0, None)}  # see Log
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
    ufunc = np.arctan
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

    array_rule = derivative  # operators only: the same on arrays


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

    @staticmethod
    def array_rule(x, out):
        """derivative on arrays."""
        return (x > 0).astype(x.dtype)


class Softplus(ArrayFunction):
    """y = log(1 + exp(beta x)) / beta, or x where beta x > threshold (PyTorch's
    softplus);  dy/dx = sigmoid(beta x), or 1 where beta x > threshold."""
    sparsity = classmethod(lambda cls, *args: _sparsity.elementwise(args))  # sparsity rule
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




class Neg(UnaryElementwise):
    """y = -x;  dy/dx = -1."""
    curvature = "linear"  # for the Hessian sparsity pass
    public_name = "neg"
    aliases = ("negative",)
    ufunc = np.negative
    saves = ()  # backward and jvp read nothing

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


class Exp(UnaryElementwise):
    """y = exp(x);  dy/dx = y."""
    public_name = "exp"
    ufunc = np.exp
    singular = {0: ("x > 709 (overflow)", 0.0, None)}  # see Log
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

    array_rule = derivative  # operators only: the same on arrays

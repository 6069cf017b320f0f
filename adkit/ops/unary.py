"""Unary elementwise ops: each is its numpy forward and its derivative in adkit ops.

Owns: neg, exp, ..., plus dtype casts (`to`) and `clone`. The family
(`UnaryElementwise`) builds backward (grad_out * f'(x)) and jvp (x_t * f'(x)).
"""
import numpy as np

from .. import dtypes
from ._families import ArrayFunction, UnaryElementwise
from ._helpers import as_float_array


class Neg(UnaryElementwise):
    """y = -x;  dy/dx = -1."""
    public_name = "neg"
    aliases = ("negative",)

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

    @staticmethod
    def forward(x):
        return np.exp(as_float_array(x))

    @staticmethod
    def derivative(x, out):
        return out


class ToDtype(ArrayFunction):
    """y = x converted to `dtype`;  grad_x = grad_out converted back to x's dtype."""
    public_name = "to"
    variants = ("method",)

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
    def interface(cls, x, dtype=None, *args, **kwargs):
        dtype = dtypes.to_dtype(kwargs.get("dtype", dtype))
        if dtype is None or dtype == x.dtype:
            return x
        return cls.apply(x, dtype.np)


class Clone(ArrayFunction):
    """y = a copy of x;  grad_x = grad_out."""
    public_name = "clone"

    @staticmethod
    def forward(x):
        return x.copy()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out

    @staticmethod
    def jvp(ctx, x_t):
        return x_t

"""Conversions: `to` (dtype casts, with PyTorch's forms), the cast methods (`double()`,
`float()`, `long()`...) and `clone`.

Owns: `ToDtype`, the cast methods, `Clone`. Does not: hold arithmetic (unary.py).
"""
from .. import dtypes
from ..tensor import Tensor, _check_device
from ..tensor import device as _device
from . import _sparsity
from ._families import ArrayFunction, public
from ._helpers import copy_in_order


class ToDtype(ArrayFunction):
    """y = x converted to `dtype`;  grad_x = grad_out converted back to x's dtype."""
    sparsity = classmethod(lambda cls, *args: _sparsity.elementwise(args))  # sparsity rule
    curvature = "linear"
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
    sparsity = classmethod(lambda cls, *args: _sparsity.elementwise(args))  # sparsity rule
    curvature = "linear"
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

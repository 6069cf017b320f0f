"""Rounding: floor, ceil and round (zero derivative; integers are copied as they are,
bools refused as PyTorch does).

Owns: `Floor`, `Ceil`, `Round`. Does not: hold other unary ops (unary.py).
"""
import numpy as np

from . import _sparsity
from ._families import ArrayFunction, UnaryElementwise
from .comparison import not_implemented_for


def _integral_copy(x, kernel):
    """Rounding an integer tensor is a copy; bool has no rounding kernel (PyTorch)."""
    if x.dtype == np.bool_:
        raise not_implemented_for(kernel, x.dtype)
    return x.copy()


class Floor(UnaryElementwise):
    """y = floor(x);  dy/dx = 0."""
    sparsity = classmethod(lambda cls, *args: _sparsity.no_derivative())  # dy/dx = 0
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
    sparsity = classmethod(lambda cls, *args: _sparsity.no_derivative())  # dy/dx = 0
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
    sparsity = classmethod(lambda cls, *args: _sparsity.no_derivative())  # dy/dx = 0
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

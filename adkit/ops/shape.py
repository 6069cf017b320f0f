"""Shape ops: reshape, view, expand, ... Views share data and version counter with their
input (`is_view`), as in PyTorch.

Owns: each op's forward (numpy, usually a view) and its rules.
"""
import numpy as np

from ._families import ArrayFunction


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


class Reshape(ArrayFunction):
    """y = x with a new shape (one dim may be -1);  grad_x = grad_out reshaped back."""
    public_name = "reshape"
    is_view = True

    @staticmethod
    def forward(x, shape):
        try:
            return np.reshape(x, shape)
        except ValueError:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size "
                               f"{x.size}") from None

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.reshape(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, shape):
        return x_t.reshape(shape)

    @classmethod
    def interface(cls, x, *shape):
        return cls.apply(x, _shape_args(shape))


class Expand(ArrayFunction):
    """y = x broadcast to `shape` (-1 keeps a dim);  grad_x = sum_to(grad_out, x.shape)."""
    public_name = "expand"
    variants = ("method",)
    is_view = True

    @staticmethod
    def forward(x, shape):
        lead = len(shape) - x.ndim
        if lead < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must "
                               f"be greater or equal to the number of dimensions in the "
                               f"tensor ({x.ndim})")
        shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s
                      for i, s in enumerate(shape))
        try:
            return np.broadcast_to(x, shape)
        except ValueError:
            raise RuntimeError(f"The expanded size of the tensor ({list(shape)}) must match "
                               f"the existing size ({list(x.shape)}) at non-singleton "
                               "dimensions") from None

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.input_shape = tuple(inputs[0].shape)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out.sum_to_size(ctx.input_shape), None

    @staticmethod
    def jvp(ctx, x_t, shape):
        return x_t.expand(shape)

    @classmethod
    def interface(cls, x, *shape):
        return cls.apply(x, _shape_args(shape))

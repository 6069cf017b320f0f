"""The deprecated Variable API of torch.autograd: `Variable` and `variable`.

Owns: nothing new: a Variable is a Tensor (isinstance holds for every tensor).
"""
import warnings

from ..tensor import Tensor, tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """Deprecated alias: `Variable(t, requires_grad=...)` returns a tensor; every tensor
    is an instance of Variable."""

    def __new__(cls, data, requires_grad=False, volatile=False):
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)


def variable(*args, **kwargs):
    warnings.warn("torch.autograd.variable(...) is deprecated, use torch.tensor(...) instead",
                  stacklevel=2)
    return tensor(*args, **kwargs)

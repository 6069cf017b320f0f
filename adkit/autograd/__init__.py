"""adkit.autograd mirrors torch.autograd: Function, backward, grad, grad modes, gradcheck."""
import warnings

from ..tensor import Tensor, tensor as _tensor
from .engine import _is_checkpoint_valid, backward, grad
from .function import (BackwardCFunction, Function, FunctionCtx, FunctionMeta)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                        is_inference_mode_enabled, no_grad, set_grad_enabled)


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
    return _tensor(*args, **kwargs)


__all__ = ["Variable", "Function", "backward", "grad_mode", "grad", "no_grad",
           "enable_grad", "set_grad_enabled", "inference_mode"]

"""adkit.autograd mirrors torch.autograd: Function, backward, grad, grad modes, gradcheck,
anomaly detection, saved-tensor hooks, the functional API. Re-exports only."""
from . import forward_ad, functional, graph
from .anomaly_mode import detect_anomaly, set_detect_anomaly
from .engine import _is_checkpoint_valid, backward, grad
from .function import (BackwardCFunction, Function, FunctionCtx, FunctionMeta,
                       InplaceFunction, NestedIOFunction, once_differentiable)
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                        is_inference_mode_enabled, no_grad, set_grad_enabled)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .variable import Variable, variable

__all__ = ["Variable", "Function", "backward", "grad_mode", "grad", "no_grad",
           "enable_grad", "set_grad_enabled", "inference_mode", "NestedIOFunction",
           "detect_anomaly", "set_detect_anomaly", "gradcheck", "gradgradcheck",
           "functional", "graph", "variable", "_is_checkpoint_valid", "BackwardCFunction",
           "FunctionCtx", "FunctionMeta", "InplaceFunction", "once_differentiable",
           "GradcheckError", "is_grad_enabled", "is_inference_mode_enabled"]

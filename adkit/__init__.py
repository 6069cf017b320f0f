"""adkit: PyTorch's autograd on numpy, with JAX-style transforms and a tracing compiler.

Re-exports only; no logic here.
"""
from . import autograd, codegen, dtypes, func, ir, nn, ops
from .autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                 is_inference_mode_enabled, no_grad, set_grad_enabled)
from .dtypes import (bool_ as bool, float16, float32, float64, get_default_dtype, int32,
                     int64, set_default_dtype)
from .tensor import (Size, Tensor, arange, device, is_inference, as_tensor, empty, empty_like, eye, from_numpy,
                     full, full_like, linspace, ones, ones_like, tensor, zeros, zeros_like)
from .interop import from_dlpack

double = float64
long = int64
half = float16
float = float32  # noqa: A001  (PyTorch's name)
int = int32  # noqa: A001

globals().update(ops.FUNCTIONS)

from .func import checkpoint, vmap  # noqa: E402  (after the ops: not ops themselves)
from .ir import trace  # noqa: E402
from .control import cond, fori_loop, scan, switch, while_loop  # noqa: E402
from .codegen import jit  # noqa: E402
from . import testing  # noqa: E402  (above codegen: it checks every path)

__version__ = "0.1.0"

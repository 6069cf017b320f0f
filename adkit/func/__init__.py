"""adkit.func mirrors torch.func: composable function transforms (grad, vjp, jvp, vmap,
jacrev, jacfwd, hessian, linearize; jacobian picks jacfwd or jacrev). Re-exports only."""
from ._autodiff import (grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize,
                        vjp)
from ._vmap import BatchedTensor, BatchInterpreter, vmap
from .checkpoint import checkpoint
from .sparse_types import SparseMatrix, SparsityPattern
from .sparse import jacobian_sparsity, sparse_hessian, sparse_jacobian
from .jacobian import jacobian

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "vmap", "jacrev", "jacfwd", "jacobian", "hessian",
           "linearize", "checkpoint", "BatchedTensor", "BatchInterpreter"]
__all__ += ["SparsityPattern", "SparseMatrix"]
__all__ += ["jacobian_sparsity", "sparse_jacobian", "sparse_hessian"]

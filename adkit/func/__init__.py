"""adkit.func mirrors torch.func: composable function transforms."""
from ._vmap import BatchedTensor, BatchInterpreter, vmap

__all__ = ["vmap", "BatchedTensor", "BatchInterpreter"]

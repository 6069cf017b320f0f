"""adkit.codegen: the llvmlite backend and ak.jit (the only package that imports
llvmlite)."""
from .jit import Compiled, Jitted, jit

__all__ = ["jit", "Jitted", "Compiled"]

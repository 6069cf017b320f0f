"""adkit.ir.passes: graph -> new graph functions that leave their input as it was.

Owns: the public list of passes. Transforms (autodiff.py): `vjp`, `jvp`, `vmap`;
memory (remat.py): `remat`;
clean-up (cleanup.py): `dce`, `cse`, `fold_constants`, `pipeline`; algebra
(simplify.py): `simplify`; lowering (decompose.py, fuse.py): `decompose`, `fuse`.
Does not: hold pass logic itself.
A user pass is a plain function of the same shape: copy, edit `graph.nx`, return.
NB: the name `simplify` here is the function; its rule table is
`from adkit.ir.passes.simplify import RULES` (extend it and pass `rules=`).
"""
from .autodiff import jvp, vjp, vmap
from .cleanup import cse, dce, fold_constants, pipeline
from .decompose import decompose
from .fuse import FusedKernel, fuse
from .remat import remat
from .simplify import simplify

__all__ = ["vjp", "jvp", "vmap", "remat", "dce", "cse", "fold_constants", "simplify",
           "fuse", "FusedKernel", "decompose", "pipeline"]

"""adkit.ir.passes: graph -> new graph functions that leave their input as it was.

Owns: the public list of passes. Transforms (autodiff.py): `vjp`, `jvp`, `vmap`;
memory (remat.py): `remat`; NaN through where (where_lint.py): `lint_where`,
`safe_where`; sparse derivatives (sparsity.py, coloring.py): `sparsity`,
`hessian_sparsity`, `color`;
clean-up (cleanup.py): `dce`, `cse`, `fold_constants`, `pipeline`; algebra
(simplify.py): `simplify`; lowering (decompose.py, fuse.py): `inline_calls`,
`decompose`, `fuse`.
Does not: hold pass logic itself.
A user pass is a plain function of the same shape: copy, edit `graph.nx`, return;
`recursive(my_pass)` applies it inside the bodies of loops and branches too.
adkit's clean-up and lowering passes also have an in-place form, `p.in_place(g)`
(editing.py), for a caller that owns g: jit's pipeline copies the traced graph once
and edits that copy (`editing.apply_passes`).
NB: the name `simplify` here is the function; its rule table is
`from adkit.ir.passes.simplify import RULES` (extend it and pass `rules=`).
"""
from . import cleanup as _cleanup
from . import decompose as _decompose
from . import fuse as _fuse
from . import simplify as _simplify
from .autodiff import jvp, vjp, vmap
from .bodies import map_bodies, recursive
from .cleanup import pipeline
from .fuse import FusedKernel
from .remat import remat
from .coloring import check_coloring, color
from .sparsity import hessian_sparsity, sparsity
from .where_lint import Diagnostic, lint_where, safe_where

# the clean-up and lowering passes reach into the bodies of loops and branches
dce = recursive(_cleanup.dce)
cse = recursive(_cleanup.cse)
fold_constants = recursive(_cleanup.fold_constants)
simplify = recursive(_simplify.simplify)
decompose = recursive(_decompose.decompose)
inline_calls = recursive(_decompose.inline_calls)
fuse = recursive(_fuse.fuse)

__all__ = ["vjp", "jvp", "vmap", "remat", "dce", "cse", "fold_constants", "simplify",
           "fuse", "FusedKernel", "decompose", "inline_calls", "pipeline", "map_bodies", "recursive",
           "lint_where", "safe_where", "Diagnostic"]
__all__ += ["sparsity", "hessian_sparsity"]
__all__ += ["color", "check_coloring", "DEFAULT_PIPELINE"]


def __getattr__(name):
    """DEFAULT_PIPELINE: ak.jit's optimization passes, in order (a tuple; give
    `ak.jit(f, passes=[my_pass, *DEFAULT_PIPELINE])` to run a pass before them). It
    holds control-flow passes too, so it is looked up where jit defines it."""
    if name == "DEFAULT_PIPELINE":
        from ...codegen.compiled import OPTIMIZE  # upward call (see tests/test_layering.py)
        return tuple(OPTIMIZE.passes)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

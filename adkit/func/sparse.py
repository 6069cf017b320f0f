"""Sparse Jacobians and Hessians by coloring: one jvp (vjp, Hessian-vector product) per
color instead of one per input (output) element.

Owns: `jacobian_sparsity`, `sparse_jacobian`, `sparse_hessian`. For each input
signature (shapes, dtypes, static arguments) the function is traced once, on shapes
only, and its pattern detected on the graph (ak.ir.passes.sparsity / hessian_sparsity)
and colored (ak.ir.passes.color); then every call evaluates the compressed derivative,
all colors at once under vmap, and reads the nonzeros out of it. Since the pattern
needs no values, the whole evaluation traces: `ak.jit(sparse_jacobian(f))` compiles it
into one function. Does not: detect or color patterns itself (adkit/ir/passes).
"""
import numpy as np

from .. import ops
from .._pytree import tree_flatten
from ..tensor import Tensor, tensor
from ._autodiff import _argnums_tuple, _replace_args, grad, input_signature, jvp, vjp
from ._vmap import vmap
from .sparse_types import SparseMatrix, SparsityPattern

MODES = ("auto", "fwd", "rev")


def _trace(func, args):
    from ..ir.trace import trace  # upward call (see tests/test_layering.py)
    return trace(func, *args)


def _passes():
    from ..ir import passes  # upward call (see tests/test_layering.py)
    return passes


def _graph_and_inputs(func, args, argnums, name):
    """The graph of func(*args) and the graph inputs of the differentiated arguments,
    which must be tensors; the result must be one tensor."""
    argnums = _argnums_tuple(argnums, len(args), name)[0]
    for i in argnums:
        if not isinstance(args[i], Tensor):
            raise TypeError(f"{name}: argument {i} is differentiated, so it must be a "
                            f"tensor, got {type(args[i]).__name__}")
        if args[i].dtype.np.kind not in "fc":
            raise TypeError(f"{name}: argument {i} must have a floating dtype, got "
                            f"{args[i].dtype}")
    graph = _trace(func, args)
    if len(graph.outputs) != 1 or graph.static_outputs or graph.out_tree.kind != "leaf":
        raise TypeError(f"{name}: the function must return a single tensor, got "
                        f"{_describe_output(graph)}")
    first_input = np.cumsum([0] + [_n_tensor_leaves(a) for a in args])
    return graph, [int(first_input[i]) for i in argnums], argnums


def _describe_output(graph):
    n = len(graph.outputs)
    if graph.static_outputs:
        kinds = sorted({type(v).__name__ for v in graph.static_outputs.values()})
        return f"{n} tensor(s) and non-tensor value(s) of type {', '.join(kinds)}"
    return f"a structure ({graph.out_tree.kind}) of {n} tensors"


def _n_tensor_leaves(arg):
    leaves, _ = tree_flatten(arg, is_leaf=lambda x: isinstance(x, (Tensor, np.ndarray)))
    return sum(isinstance(x, (Tensor, np.ndarray)) for x in leaves)


def jacobian_sparsity(func, *example_args, argnums=0):
    """The sparsity pattern of func's Jacobian at arguments shaped like `example_args`
    (their values are not read): rows are the output's elements (row-major), columns
    the differentiated arguments' elements, flattened and concatenated. Detected
    statically on the traced graph; conservative (never misses a nonzero)."""
    graph, wrt, _ = _graph_and_inputs(func, example_args, argnums, "jacobian_sparsity")
    return _passes().sparsity(graph, wrt=wrt)


def _check_given(pattern, shape, name):
    if not isinstance(pattern, SparsityPattern):
        raise TypeError(f"{name}: sparsity must be a SparsityPattern, got "
                        f"{type(pattern).__name__}")
    if pattern.shape != shape:
        raise ValueError(f"{name}: the given sparsity pattern has shape {pattern.shape}, "
                         f"but the derivative here has shape {shape}")
    return pattern


def _with_args(func, args, argnums):
    """func as a function of the differentiated arguments only."""
    return lambda *diff_args: func(*_replace_args(args, argnums, diff_args))


def _seeds(colors, n_colors, args, argnums):
    """One seed per color (the sum of its columns' unit vectors), split per argument
    and shaped like it: a tuple of tensors (n_colors, *arg.shape)."""
    seeds = np.zeros((n_colors, colors.size))
    seeds[colors, np.arange(colors.size)] = 1.0
    parts, start = [], 0
    for i in argnums:
        size = args[i].numel()
        part = seeds[:, start:start + size].reshape((n_colors,) + tuple(args[i].shape))
        parts.append(tensor(part.astype(args[i].dtype.np)))
        start += size
    return tuple(parts)


def _flat(parts, n_colors):
    """Per-argument batched tensors (n_colors, ...) as one (n_colors, n) tensor."""
    flat = [p.reshape((n_colors, -1)) for p in parts]
    return flat[0] if len(flat) == 1 else ops.FUNCTIONS["cat"](flat, 1)


class _Plan:
    """What a signature's calls share: the pattern, the coloring, and where each
    nonzero is read in the compressed derivative (compressed[color_at, element_at])."""

    def __init__(self, pattern, colors, color_at, element_at):
        self.pattern, self.colors = pattern, colors
        self.n_colors = int(colors.max()) + 1 if colors.size else 0
        self.color_at, self.element_at = color_at, element_at

    def read(self, compressed):
        """The nonzeros' values out of the compressed (n_colors, n) tensor."""
        if self.pattern.nnz == 0:
            return compressed.reshape(-1)[:0]
        return compressed[tensor(self.color_at), tensor(self.element_at)]

    def result(self, values):
        p = self.pattern
        return SparseMatrix(values, p.rows, p.cols, p.shape)


def _jacobian_plan(func, args, argnums, sparsity, mode):
    graph, wrt, argnums = _graph_and_inputs(func, args, argnums, "sparse_jacobian")
    passes = _passes()
    n_out = int(np.prod(graph.output_specs()[0].shape, dtype=np.int64))
    n_in = sum(args[i].numel() for i in argnums)
    pattern = passes.sparsity(graph, wrt=wrt) if sparsity is None else \
        _check_given(sparsity, (n_out, n_in), "sparse_jacobian")
    if mode == "auto":
        mode, colors = _fewer_colors(pattern, passes.color)
    else:
        colors = passes.color(pattern, "column" if mode == "fwd" else "row")
    if mode == "fwd":  # column j of color c is compressed[c, :] at row i
        plan = _Plan(pattern, colors, colors[pattern.cols], pattern.rows)
    else:  # row i of color c is compressed[c, :] at column j
        plan = _Plan(pattern, colors, colors[pattern.rows], pattern.cols)
    plan.mode, plan.out_shape = mode, tuple(graph.output_specs()[0].shape)
    return plan


def _fewer_colors(pattern, color):
    """("fwd", column colors) or ("rev", row colors), whichever needs fewer colors (fwd
    on a tie). A column coloring needs at least as many colors as the longest row has
    entries (they all share that row), a row coloring as many as the longest column:
    the coloring with the lower bound is made first, and the other only if it could
    need fewer. NB: greedy coloring costs the sum of its vertices' distance-2
    neighborhoods; bundle adjustment's row coloring (each camera column in 1,300 rows)
    took 2 minutes at ba1, where the column coloring (14 colors) took 2 s."""
    n_rows, n_cols = pattern.shape
    longest_row = int(np.bincount(pattern.rows, minlength=n_rows).max(initial=0))
    longest_col = int(np.bincount(pattern.cols, minlength=n_cols).max(initial=0))
    if longest_row <= longest_col:
        by_column = color(pattern, "column")
        if by_column.max(initial=-1) + 1 <= longest_col:  # rev cannot need fewer
            return "fwd", by_column
        by_row = color(pattern, "row")
    else:
        by_row = color(pattern, "row")
        if by_row.max(initial=-1) + 1 < longest_row:  # fwd cannot tie or need fewer
            return "rev", by_row
        by_column = color(pattern, "column")
    if by_row.max(initial=-1) < by_column.max(initial=-1):
        return "rev", by_row
    return "fwd", by_column


def sparse_jacobian(func, argnums=0, *, sparsity=None, mode="auto"):
    """A function returning func's Jacobian as a SparseMatrix (rows: the output's
    elements; columns: the differentiated arguments' elements, concatenated). Its
    pattern (detected, or `sparsity`) is colored, then one jvp per column color
    ("fwd") or one vjp per row color ("rev"), all batched by vmap; "auto" takes the
    mode with fewer colors."""
    if mode not in MODES:
        raise ValueError(f"sparse_jacobian: mode must be one of {MODES}, got {mode!r}")
    plans = {}

    def wrapper(*args):
        key = (input_signature(args), _argnums_tuple(argnums, len(args), "sparse_jacobian")[0])
        if key not in plans:
            plans[key] = _jacobian_plan(func, args, argnums, sparsity, mode)
        plan = plans[key]
        diff = key[1]
        primals = tuple(args[i] for i in diff)
        partial = _with_args(func, args, diff)
        if plan.n_colors == 0:
            return plan.result(ops.FUNCTIONS["zeros"](0, dtype=primals[0].dtype))
        if plan.mode == "fwd":
            seeds = _seeds(plan.colors, plan.n_colors, args, diff)
            tangents = vmap(lambda *t: jvp(partial, primals, t)[1])(*seeds)
            compressed = tangents.reshape((plan.n_colors, -1))
        else:
            _, pullback = vjp(partial, *primals)
            seeds = np.zeros((plan.n_colors, plan.colors.size))
            seeds[plan.colors, np.arange(plan.colors.size)] = 1.0
            cotangents = tensor(seeds.reshape((plan.n_colors,) + plan.out_shape)
                                .astype(primals[0].dtype.np))
            compressed = _flat(vmap(pullback)(cotangents), plan.n_colors)
        return plan.result(plan.read(compressed))

    wrapper.plan_for = lambda *args: plans.get(
        (input_signature(args), _argnums_tuple(argnums, len(args), "sparse_jacobian")[0]))
    return wrapper


def _hessian_plan(func, args, argnums, sparsity):
    graph, wrt, _ = _graph_and_inputs(func, args, argnums, "sparse_hessian")
    if int(np.prod(graph.output_specs()[0].shape, dtype=np.int64)) != 1:
        raise TypeError("sparse_hessian: the function must return a scalar (one element), "
                        f"got shape {tuple(graph.output_specs()[0].shape)}")
    passes = _passes()
    n = args[argnums].numel()
    pattern = passes.hessian_sparsity(graph, wrt=wrt) if sparsity is None else \
        _check_given(sparsity, (n, n), "sparse_hessian")
    colors = passes.color(pattern, "star")
    # H[i, j] is compressed[color[j], i] when j is the only column of its color in row
    # i; else (a star coloring promises it) i is the only one of its color in row j
    rows, cols = pattern.rows, pattern.cols
    width = int(colors.max(initial=0)) + 1
    keys = rows * width + colors[cols]
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    alone = counts[inverse] == 1
    return _Plan(pattern, colors, np.where(alone, colors[cols], colors[rows]),
                 np.where(alone, rows, cols))


def sparse_hessian(func, argnums=0, *, sparsity=None):
    """A function returning the Hessian of scalar-valued func with respect to argument
    `argnums` (an int) as a SparseMatrix: its pattern (detected, or `sparsity`) is star
    colored, then one Hessian-vector product per color (forward over reverse: a jvp of
    grad, all colors batched by vmap)."""
    if not isinstance(argnums, int):
        raise TypeError(f"sparse_hessian: argnums must be an int, got {argnums!r}")
    plans = {}

    def wrapper(*args):
        key = input_signature(args)
        if key not in plans:
            plans[key] = _hessian_plan(func, args, argnums, sparsity)
        plan = plans[key]
        x = args[argnums]
        if plan.n_colors == 0:
            return plan.result(ops.FUNCTIONS["zeros"](0, dtype=x.dtype))
        gradient = grad(_with_args(func, args, (argnums,)))
        (seeds,) = _seeds(plan.colors, plan.n_colors, args, (argnums,))
        products = vmap(lambda t: jvp(gradient, (x,), (t,))[1])(seeds)
        return plan.result(plan.read(products.reshape((plan.n_colors, -1))))

    wrapper.plan_for = lambda *args: plans.get(input_signature(args))
    return wrapper

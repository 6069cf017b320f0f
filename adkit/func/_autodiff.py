"""The autodiff transforms of adkit.func: grad, grad_and_value, vjp, jvp, jacrev, jacfwd,
hessian, linearize (torch.func's signatures: argnums, has_aux, pytrees).

Owns: turning functions into derivative functions. Reverse mode runs the autograd
engine, forward mode the forward-AD levels, both on physical tensors (see _levels.py), so
every transform composes with vmap, with each other at any depth, and with tracing.
Does not: hold derivative rules (each op's Function has them).
"""
import contextlib
import contextvars
import functools

import numpy as np

from .._pytree import tree_flatten, tree_unflatten
from ..autograd import engine, forward_ad
from ..autograd.grad_mode import enable_grad
from ..ops import FUNCTIONS
from ..tensor import Tensor, _make
from . import _levels
from ._vmap import BatchedTensor, vmap, wrap


def _is_tensor(x):
    return isinstance(x, Tensor)


def _argnums_tuple(argnums, n_args, name):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError(f"{name}: argnums must be non-empty")
    for a in nums:
        if not isinstance(a, int) or not -n_args <= a < n_args:
            raise RuntimeError(f"Got argnums={argnums}, but only {n_args} positional inputs")
    return tuple(a % n_args for a in nums), isinstance(argnums, int)


# ids of the fresh leaves of the reverse-mode transforms whose function (or vjp_fn) is
# running: an enclosing transform may still differentiate with respect to these. A
# finished transform's leaves are dead ends (nothing outside can ask for them).
_ACTIVE_LEAVES = contextvars.ContextVar("adkit_active_transform_leaves", default=frozenset())


class _Prepared:
    """Differentiable stand-ins for the leaves of some arguments: each leaf lifted to the
    active vmap levels, with a fresh physical tensor the engine differentiates against."""

    def __init__(self, trees, levels):
        self.levels = levels
        self.specs, self.physicals, self.values = [], [], []
        for tree in trees:
            leaves, spec = tree_flatten(tree, is_leaf=_is_tensor)
            self.specs.append(spec)
            values = []
            for leaf in leaves:
                if not isinstance(leaf, Tensor):
                    values.append(leaf)
                    continue
                phys = _levels.physical(leaf, levels)
                with _levels.below(levels):
                    if phys.requires_grad:
                        phys = phys.view_as(phys)
                    else:
                        fresh = phys.detach().requires_grad_(_differentiable(phys))
                        fresh._fw = phys._fw  # keep forward-AD tangents (jvp of grad)
                        fresh._transform_leaf = True
                        phys = fresh
                self.physicals.append(phys)
                values.append(_levels.rebatch(phys, levels))
            self.values.append(values)

    def trees(self):
        return [tree_unflatten(s, v) for s, v in zip(self.specs, self.values)]

    def own_leaves(self):
        """ids of the fresh leaves this transform made (not the caller's tensors)."""
        return {id(p) for p in self.physicals if p.is_leaf}

    @contextlib.contextmanager
    def active(self):
        """While the function runs, its values may be differentiated by this transform:
        a transform inside it must keep their history to these leaves."""
        token = _ACTIVE_LEAVES.set(_ACTIVE_LEAVES.get() | self.own_leaves())
        try:
            yield
        finally:
            _ACTIVE_LEAVES.reset(token)

    def regroup(self, flat_grads):
        """Gradients (one per physical leaf) back into the arguments' structures."""
        it = iter(flat_grads)
        out = []
        for spec, values in zip(self.specs, self.values):
            out.append(tree_unflatten(spec, [next(it) if isinstance(v, Tensor) else None
                                             for v in values]))
        return out


def _differentiable(t):
    """Whether a grad transform can differentiate t (PyTorch's error otherwise)."""
    if not t.is_floating_point():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    return True


def input_signature(args):
    """A hashable key for what a trace of f(*args) depends on: tensor shapes and dtypes, and the
    other arguments themselves (by identity when they cannot be hashed)."""
    leaves, tree = tree_flatten(args, is_leaf=lambda x: isinstance(x, (Tensor, np.ndarray)))
    key = []
    for leaf in leaves:
        if isinstance(leaf, (Tensor, np.ndarray)):
            key.append(("tensor", tuple(leaf.shape), str(leaf.dtype)))
        else:
            try:
                hash(leaf)
                key.append(("static", leaf))
            except TypeError:
                key.append(("static id", id(leaf)))
    return tree, tuple(key)


def _replace_args(args, argnums, new_trees):
    args = list(args)
    for i, tree in zip(argnums, new_trees):
        args[i] = tree
    return args


def grad_and_value(func, argnums=0, has_aux=False):
    """f -> (x -> (df/dx, f(x))) for a function returning a 0-d tensor."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums, single = _argnums_tuple(argnums, len(args), "grad_and_value")
        levels = _levels.active_levels()
        with enable_grad():
            prepared = _Prepared([args[i] for i in nums], levels)
            with prepared.active():
                output = func(*_replace_args(args, nums, prepared.trees()), **kwargs)
        output, aux = _split_aux(output, has_aux, "grad_and_value")
        if not isinstance(output, Tensor) or output.dim() != 0:
            what = (f"tensor with {output.dim()} dims" if isinstance(output, Tensor)
                    else type(output).__name__)
            raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                               f"scalar Tensor, got {what}. Maybe you wanted to use the vjp "
                               "or jacrev APIs instead?")
        out_phys = _levels.physical(output, levels)
        with _levels.below(levels):
            ones = _make(np.ones(out_phys._data.shape, out_phys._data.dtype))
            grads = _grads([out_phys], prepared.physicals, [ones])
        grads = [_levels.rebatch(g, levels) for g in grads]
        grouped = prepared.regroup(grads)
        result = grouped[0] if single else tuple(grouped)
        result = (result, (output, aux)) if has_aux else (result, output)
        return _cut(result, prepared.own_leaves())
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """f -> (x -> df/dx) for a function returning a 0-d tensor (torch.func.grad)."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def _split_aux(output, has_aux, name):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(f"{name}(f)(*args): output of function f should be a tuple: "
                           "(output, aux) if has_aux is True")
    return output


def _grads(outputs, inputs, grad_outputs):
    """The engine's gradients, zeros for inputs that do not influence the outputs. They
    are differentiable (create_graph) only when something outside may differentiate them:
    their history reaches a leaf that is not this transform's own (an enclosing grad's
    input, or a tensor of the caller's that requires grad)."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    wanted = [t for t in inputs if t.requires_grad]
    if not pairs or not wanted:  # nothing depends on the inputs: zero gradients
        return [_make(np.zeros(t._data.shape, t._data.dtype)) for t in inputs]
    outputs, grad_outputs = [o for o, _ in pairs], [g for _, g in pairs]
    create = _reaches_outside(outputs, {id(t) for t in inputs if t.is_leaf})
    grads = iter(engine.grad(outputs, wanted, grad_outputs, create_graph=create,
                             retain_graph=True, allow_unused=True, materialize_grads=True))
    return [next(grads) if t.requires_grad else
            _make(np.zeros(t._data.shape, t._data.dtype)) for t in inputs]


def _cut(tree, own):
    """Tensors of `tree` detached unless their history reaches a leaf outside `own` (the
    ids of the transform's own fresh leaves): torch.func returns plain tensors, except
    where an enclosing transform or the caller may still differentiate them."""
    leaves, spec = tree_flatten(tree, is_leaf=_is_tensor)
    leaves = [x.detach() if isinstance(x, Tensor) and x.requires_grad and
              not _reaches_outside([_innermost(x)], own) else x for x in leaves]
    return tree_unflatten(spec, leaves)


def _innermost(x):
    while isinstance(x, BatchedTensor):
        x = x._value
    return x


def _reaches_outside(outputs, own):
    """Whether the outputs' history reaches a leaf whose id is not in `own`, e.g. a
    caller's parameter or an enclosing transform's input (a finished transform's leaf
    does not count)."""
    active = _ACTIVE_LEAVES.get()
    seen, stack = set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) not in own and (
                id(variable) in active or not getattr(variable, "_transform_leaf", False)):
            return True
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return False


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn[, aux]): vjp_fn(cotangents) gives one gradient per primal,
    in the primals' structure (torch.func.vjp)."""
    levels = _levels.active_levels()
    with enable_grad():
        prepared = _Prepared(primals, levels)
        with prepared.active():
            output = func(*prepared.trees())
    output, aux = _split_aux(output, has_aux, "vjp")
    out_leaves, out_spec = tree_flatten(output, is_leaf=_is_tensor)
    out_phys = [_levels.physical(o, levels) for o in out_leaves]
    # what the caller sees is cut from the vjp's own leaves (vjp_fn keeps out_phys)
    output, aux = _cut(output, prepared.own_leaves()), _cut(aux, prepared.own_leaves())

    def vjp_fn(*cotangents):
        cts = cotangents[0] if len(cotangents) == 1 else cotangents
        ct_leaves, ct_spec = tree_flatten(cts, is_leaf=_is_tensor)
        if ct_spec != out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function. cotangents: "
                               f"{ct_spec}, primal output: {out_spec} (* is one tensor)")
        grad_outputs = [_cotangent(c, levels) for c in ct_leaves]
        with prepared.active():
            grads = _grads(out_phys, prepared.physicals, grad_outputs)
        grads = [_from_physical(g, levels) for g in grads]
        return tuple(prepared.regroup(grads))

    return (output, vjp_fn, aux) if has_aux else (output, vjp_fn)


def _cotangent(c, levels):
    """A cotangent as the engine needs it: physical at the vjp's levels; batched (the
    backward then runs batched) at at most one vmap level begun after the vjp."""
    newer, inner = _levels.split_newer(c, levels)
    if not newer:
        return _levels.physical(c, levels)
    if len(newer) > 1:
        raise RuntimeError("vjp_fn: cotangents batched by more than one vmap begun after "
                           "the vjp are not supported")
    (level, bdim), = newer
    phys = _levels.physical(inner, levels)
    return wrap(level, phys, len(levels) + bdim)


def _from_physical(g, levels):
    """The inverse of _cotangent for a gradient."""
    newer, inner = _levels.split_newer(g, levels)
    if not newer:
        return _levels.rebatch(g, levels)
    (level, bdim), = newer
    with _levels.below(levels):
        inner = inner.movedim(bdim, len(levels))
    return wrap(level, _levels.rebatch(inner, levels), 0)


def jvp(func, primals, tangents, *, has_aux=False):
    """(func(*primals), J @ tangents[, aux]), by forward-mode AD (torch.func.jvp)."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to be "
                           "tuples")
    p_leaves, p_spec = tree_flatten(primals, is_leaf=_is_tensor)
    t_leaves, t_spec = tree_flatten(tangents, is_leaf=_is_tensor)
    if p_spec != t_spec:
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure")
    levels = _levels.active_levels()
    with forward_ad.nested_level(_levels.position_below(levels)) as level:
        duals = [_dual(p, t, level, levels) for p, t in zip(p_leaves, t_leaves)]
        output = func(*tree_unflatten(p_spec, duals))
        output, aux = _split_aux(output, has_aux, "jvp")
        out_leaves, out_spec = tree_flatten(output, is_leaf=_is_tensor)
        primal_out, tangent_out = [], []
        for o in out_leaves:
            phys = _levels.physical(o, levels)
            with _levels.below(levels):
                primal, tangent = forward_ad.unpack_dual(phys, level=level)
                if tangent is None:
                    tangent = _make(np.zeros(phys._data.shape, phys._data.dtype))
            primal_out.append(_levels.rebatch(primal, levels))
            tangent_out.append(_levels.rebatch(tangent, levels))
    result = (tree_unflatten(out_spec, primal_out), tree_unflatten(out_spec, tangent_out))
    return result + (aux,) if has_aux else result


def _dual(primal, tangent, level, levels):
    """A primal leaf carrying its tangent at `level`, made on the physical tensors under
    the enclosing vmap `levels` (the jvp level sits below them) and batched again."""
    for what, leaf in (("primals", primal), ("tangents", tangent)):
        if not isinstance(leaf, Tensor):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected {what} to only contain "
                               f"Tensors, got {type(leaf)}")
    pp, tp = _levels.physical(primal, levels), _levels.physical(tangent, levels)
    with _levels.below(levels):
        dual = forward_ad.make_dual(pp, tp, level=level)
    return _levels.rebatch(dual, levels)


def linearize(func, *primals):
    """(func(*primals), jvp_fn): jvp_fn(*tangents) = J @ tangents at primals."""
    output = func(*primals)

    def jvp_fn(*tangents):
        return jvp(func, primals, tangents)[1]
    return output, jvp_fn


def _basis(t):
    """One-hot tensors spanning t's shape, stacked: shape (t.numel(), *t.shape)."""
    n = t.numel()
    return _make(np.eye(n, dtype=t._data.dtype).reshape((n,) + tuple(t.shape)))


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """The Jacobian by reverse mode: vmap of the vjp over the output basis. For output o
    and input x: shape o.shape + x.shape (nested as the pytrees are)."""
    @functools.wraps(func)
    def wrapper(*args):
        nums, single = _argnums_tuple(argnums, len(args), "jacrev")

        def partial_fn(*diff):
            return func(*_replace_args(args, nums, diff))
        result = vjp(partial_fn, *[args[i] for i in nums], has_aux=has_aux)
        output, vjp_fn = result[0], result[1]
        out_leaves, out_spec = tree_flatten(output, is_leaf=_is_tensor)
        rows = []
        for k, o in enumerate(out_leaves):
            def one_row(ct, k=k):
                cts = [ct if j == k else _make(np.zeros(p._data.shape, p._data.dtype))
                       for j, p in enumerate(out_leaves)]
                return vjp_fn(tree_unflatten(out_spec, cts))
            per_input = vmap(one_row, chunk_size=chunk_size)(_basis(o))
            per_input = [_unflatten_jacobian(g, o) for g in tree_flatten(
                per_input, is_leaf=_is_tensor)[0]]
            grads = tree_unflatten(tree_flatten(tuple(args[i] for i in nums),
                                                is_leaf=_is_tensor)[1], per_input)
            rows.append(grads[0] if single else grads)
        jac = tree_unflatten(out_spec, rows)
        return (jac, result[2]) if has_aux else jac
    return wrapper


def _unflatten_jacobian(g, out):
    """(out.numel(), *in.shape) -> out.shape + in.shape."""
    return g.reshape(tuple(out.shape) + tuple(g.shape[1:]))


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian by forward mode: one jvp per input basis vector (the primals stay
    unbatched, so value-dependent Python control flow works, as in torch.func)."""
    @functools.wraps(func)
    def wrapper(*args):
        nums, single = _argnums_tuple(argnums, len(args), "jacfwd")
        d_leaves, d_spec = tree_flatten(tuple(args[i] for i in nums), is_leaf=_is_tensor)

        def call(*ds):
            return func(*_replace_args(args, nums, ds))
        columns, aux = [], None
        for k, x in enumerate(d_leaves):
            if x.numel() == 0:  # no basis vectors: zeros of out.shape + x.shape
                out = call(*tree_unflatten(d_spec, d_leaves))
                out = out[0] if has_aux else out
                columns.append(_tree_map(lambda o, x=x: _make(np.zeros(
                    tuple(o.shape) + tuple(x.shape), o._data.dtype)), out))
                continue
            tangent_outs = []
            for basis in _basis(x):
                tangents = [basis.reshape(tuple(x.shape)) if j == k else
                            _make(np.zeros(p._data.shape, p._data.dtype))
                            for j, p in enumerate(d_leaves)]
                res = jvp(call, tuple(tree_unflatten(d_spec, d_leaves)),
                          tuple(tree_unflatten(d_spec, tangents)), has_aux=has_aux)
                aux = res[2] if has_aux else aux
                tangent_outs.append(res[1])
            columns.append(_stack_columns(tangent_outs, x))
        jac = _transpose_tree(columns, d_spec, single)
        return (jac, aux) if has_aux else jac
    return wrapper


def _stack_columns(tangent_outs, x):
    """[output tree per input element] -> output tree of (out.shape + x.shape)."""
    leaves = [tree_flatten(t, is_leaf=_is_tensor)[0] for t in tangent_outs]
    spec = tree_flatten(tangent_outs[0], is_leaf=_is_tensor)[1]
    stacked = [FUNCTIONS["stack"]([col[i] for col in leaves], -1).reshape(
        tuple(leaves[0][i].shape) + tuple(x.shape)) for i in range(len(leaves[0]))]
    return tree_unflatten(spec, stacked)


def _tree_map(fn, tree):
    leaves, spec = tree_flatten(tree, is_leaf=_is_tensor)
    return tree_unflatten(spec, [fn(x) if isinstance(x, Tensor) else x for x in leaves])


def _transpose_tree(columns, d_spec, single):
    """[per input leaf: output tree] -> output tree of (input structure)."""
    out_leaves_per_col = [tree_flatten(c, is_leaf=_is_tensor) for c in columns]
    out_spec = out_leaves_per_col[0][1]
    n_out = len(out_leaves_per_col[0][0])
    result = []
    for i in range(n_out):
        per_input = tree_unflatten(d_spec, [leaves[i] for leaves, _ in out_leaves_per_col])
        result.append(per_input[0] if single else per_input)
    return tree_unflatten(out_spec, result)


def hessian(func, argnums=0):
    """The Hessian of a scalar function: jacfwd(jacrev(f))."""
    return jacfwd(jacrev(func, argnums), argnums)


__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
           "linearize", "BatchedTensor"]

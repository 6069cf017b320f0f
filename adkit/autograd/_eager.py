"""The eager path of `Function.apply`: run forward on concrete data, wrap the outputs,
and record the node (the tape) when grad is needed.

Owns: what PyTorch's THPFunction_apply / _wrap_outputs do: linking a node to its inputs'
nodes, marking outputs dirty / non-differentiable / views, packing saved tensors.
Does not: bind arguments or dispatch to interpreters (function.py), run backward.
NB: the hot path of eager mode, measured by benchmarks/eager_overhead.py. The common
call of an elementwise op (float operands of one dtype) runs in the code _fastpath.py
generates for its class, which falls back on the paths here for every other call.
"""
import warnings
import weakref

import numpy as np

from ..tensor import Tensor, _make
from .anomaly_mode import STATE as ANOMALY, record_forward_trace
from .grad_mode import STATE
from .node import (NO_EDGE, NOT_TENSOR, SEQUENCE, before_in_place_write, grad_accumulator,
                   pack_saved)
from .views import ViewFn, rebase_history, refresh_views, register_view


_new_node = object.__new__  # NB: nodes have no __init__; this skips type.__call__


def eager_apply(cls, args):
    """The eager path: forward on concrete data, then the tape entry if grad is needed."""
    if cls._plain_arrays:
        return cls._array_op(cls, args)
    if not cls._arrays_in:
        return _apply_user_function(cls, args, needs_tape(args))[0]
    requires = needs_tape(args)
    if cls.modifies is not None:  # an in-place op: refuse before writing
        check_inplace(args[cls.modifies])
    raw = _forward_on_arrays(cls, args, [a._data if isinstance(a, Tensor) else a
                                         for a in args])
    return _wrap_and_record(cls, args, raw, requires)


def array_entry(arity):
    """The eager path of a built-in op that writes into nothing and makes no view (most
    of them), for its forward's number of parameters: unrolled for one and two (a loop
    over the arguments runs twice the bytecodes). NB: the hot path of eager mode; grad
    mode is read only when an input requires grad (backward's own ops need no
    thread-local read)."""
    return {1: apply_unary, 2: apply_binary}.get(arity, apply_array_op)


def apply_binary(cls, args):
    """array_entry's path for forward(x, y)."""
    x, y = args
    requires = False
    if isinstance(x, Tensor):
        requires = x._requires_grad
        x = x._data
    if isinstance(y, Tensor):
        requires = requires or y._requires_grad
        y = y._data
    try:
        raw = cls.forward(x, y)
    except AttributeError as e:  # NB: no cost until raised (zero-cost try)
        raise _container_argument_error(cls, args, e) from None
    if raw is not x and raw is not y and type(raw) is np.ndarray:  # one fresh array
        out = _make(raw)
        return _record_one(cls, args, out, raw) if requires and STATE.enabled else out
    return _wrap_and_record(cls, args, raw, requires and STATE.enabled)


def apply_unary(cls, args):
    """array_entry's path for forward(x)."""
    x = args[0]
    requires = False
    if isinstance(x, Tensor):
        requires = x._requires_grad
        x = x._data
    try:
        raw = cls.forward(x)
    except AttributeError as e:
        raise _container_argument_error(cls, args, e) from None
    if raw is not x and type(raw) is np.ndarray:
        out = _make(raw)
        return _record_one(cls, args, out, raw) if requires and STATE.enabled else out
    return _wrap_and_record(cls, args, raw, requires and STATE.enabled)


def apply_array_op(cls, args):
    """array_entry's path for any other forward."""
    arrays, requires = _unwrapped(args)
    try:
        raw = cls.forward(*arrays)
    except AttributeError as e:
        raise _container_argument_error(cls, args, e) from None
    if type(raw) is np.ndarray and not _contains(arrays, raw):
        out = _make(raw)
        return _record_one(cls, args, out, raw) if requires and STATE.enabled else out
    # an input given back (the general path makes it a view), several outputs
    return _wrap_and_record(cls, args, raw, requires and STATE.enabled)


def _unwrapped(args):
    """The arguments with tensors replaced by their arrays, and whether any of those
    tensors requires grad."""
    arrays = []
    requires = False
    for a in args:
        if isinstance(a, Tensor):
            arrays.append(a._data)
            if a._requires_grad:
                requires = True
        else:
            arrays.append(a)
    return arrays, requires


def _forward_on_arrays(cls, args, arrays):
    try:
        return cls.forward(*arrays)
    except AttributeError as e:  # NB: no cost until raised (zero-cost try)
        raise _container_argument_error(cls, args, e) from None


def _record_one(cls, args, out, raw):
    """The tape entry of a built-in op with one fresh output (_finish's common case)."""
    ctx = _new_node(cls._backward_cls)
    _link_inputs(ctx, args)
    cls.setup_context(ctx, args, out)
    if ctx.dirty_tensors or ctx.non_differentiable:
        return _finish(cls, ctx, args, out, True)
    if raw.dtype.kind == "f":
        out._requires_grad = True
        out._grad_fn = ctx
    ctx._output_meta = ((raw.shape, raw.dtype),)
    to_save = ctx.to_save
    if to_save:
        ctx._saved = pack_saved(ctx, to_save)
        ctx.to_save = ()
    return out


def _wrap_and_record(cls, args, raw, requires):
    """A built-in op's outputs as tensors, with their history: views, in-place writes,
    several outputs. Outputs that are inputs need setup_context even without grad: it
    says whether they were modified in place (mark_dirty), which bumps their version."""
    if type(raw) is np.ndarray:
        outputs = _is_input_data(raw, args)
        if outputs is None:  # one fresh array
            outputs = _make(raw)
            if not requires:
                if cls.is_view:
                    _make_view_of(outputs, args, cls)
                return outputs
            if not cls.is_view:
                return _record_one(cls, args, outputs, raw)
    else:
        outputs = _wrap_arrays(raw, args)
    ctx = cls._backward_cls()
    if requires:
        _link_inputs(ctx, args)
    else:
        ctx.needs_input_grad = _requires_flags(args)
    cls.setup_context(ctx, args, outputs)
    return _finish(cls, ctx, args, outputs, requires)


def _container_argument_error(cls, args, error):
    """PyTorch's TypeError for a list or tuple where the op wanted a tensor (its forward
    failed reading it as an array: "'list' object has no attribute 'dtype'"), else the
    original error."""
    names = (cls._binding or (None, ()))[1]
    for i, a in enumerate(args):
        kind = type(a).__name__
        if isinstance(a, (list, tuple)) and f"'{kind}' object" in str(error):
            name = cls.public_name or cls.__name__
            param = names[i] if i < len(names) else f"arg{i}"
            return TypeError(f"{name}(): argument '{param}' (position {i + 1}) must be "
                             f"Tensor, not {kind} (ak.tensor({kind}) makes one)")
    return error


def eager_apply_keeping_ctx(cls, args):
    """The eager path of a forward(ctx, ...) Function, returning (outputs, ctx): forward
    AD runs the jvp rule on the ctx that forward filled."""
    return _apply_user_function(cls, args, needs_tape(args))


def _apply_user_function(cls, args, requires):
    """(outputs, ctx) of a Function whose forward takes tensors (user Functions)."""
    ctx = cls._backward_cls()
    if requires:
        _link_inputs(ctx, args)
    else:
        ctx.needs_input_grad = _requires_flags(args)
    prev = STATE.enabled
    STATE.enabled = False
    try:
        if cls._uses_setup_context():
            outputs = cls.forward(*args)
        else:
            outputs = cls.forward(ctx, *args)
    finally:
        STATE.enabled = prev
    if cls._uses_setup_context():
        cls.setup_context(ctx, args, outputs)
    return _finish(cls, ctx, args, outputs, requires), ctx


def record(cls, args, outputs):
    """The tape entry for outputs computed some other way (a tracer's graph node): link
    the node to its inputs, let the Function save what its rules need, set the outputs'
    history. A forward(ctx, ...) Function runs its forward once more to fill ctx."""
    ctx = cls._backward_cls()
    _link_inputs(ctx, args)
    if cls._arrays_in or cls._uses_setup_context():
        cls.setup_context(ctx, args, outputs)
    else:
        prev, STATE.enabled = STATE.enabled, False
        try:
            cls.forward(ctx, *args)
        finally:
            STATE.enabled = prev
    return _finish(cls, ctx, args, outputs, True)


def needs_tape(args):
    """Whether a call on these arguments must be recorded for backward."""
    if STATE.enabled:
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                return True
    return False


def _is_input_data(arr, args):
    """The input tensor whose data `arr` is (an in-place op returned it), else None."""
    for a in args:
        if isinstance(a, Tensor) and a._data is arr:
            return a
    return None


def _wrap_arrays(raw, args):
    """Turn a built-in forward's ndarray(s) into tensors; an array that *is* an input's
    data comes back as that input tensor (in-place ops)."""
    if type(raw) is tuple:
        return tuple(_wrap_array(r, args) for r in raw)
    return _wrap_array(raw, args)


def _wrap_array(arr, args):
    if type(arr) is not np.ndarray:
        if arr is None or isinstance(arr, Tensor):
            return arr
        arr = np.asarray(arr)
    same = _is_input_data(arr, args)  # NB: not `or`: a tensor's truth is its value's
    return same if same is not None else _make(arr)


def _link_inputs(ctx, args):
    """Before forward: the node's edge for each argument (taken before any in-place
    change rebases them) and `needs_input_grad`. NB: unary and binary calls unrolled
    (the hot path of recording)."""
    if len(args) == 2:
        x, y = args  # NB: a non-leaf's edge inline, the rest in _edge_of
        ex = (x._grad_fn, x._output_nr) if type(x) is Tensor and x._grad_fn else _edge_of(x)
        ey = (y._grad_fn, y._output_nr) if type(y) is Tensor and y._grad_fn else _edge_of(y)
        ctx._edges = (ex, ey)
        ctx.needs_input_grad = _NEEDS2[ex[0] is not None][ey[0] is not None]
    elif len(args) == 1:
        x = args[0]
        ex = (x._grad_fn, x._output_nr) if type(x) is Tensor and x._grad_fn else _edge_of(x)
        ctx._edges = (ex,)
        ctx.needs_input_grad = _NEEDS1[ex[0] is not None]
    else:
        edges = ctx._edges = tuple([_edge_of(a) for a in args])
        ctx.needs_input_grad = tuple([e[0] is not None for e in edges])
    ctx._sequence_nr = next(SEQUENCE)
    if ANOMALY.enabled:
        record_forward_trace(ctx)


# needs_input_grad of unary and binary calls, shared (one tuple less per node):
# _NEEDS1[x] == (x,), _NEEDS2[x][y] == (x, y)
_NEEDS1 = ((False,), (True,))
_NEEDS2 = (((False, False), (False, True)), ((True, False), (True, True)))


def _edge_of(a):
    """The edge to the node through which an argument's gradient flows: NO_EDGE when it
    needs none, NOT_TENSOR when it is no tensor (backward's results, one per argument,
    line up with the edges)."""
    if isinstance(a, Tensor):
        fn = a._grad_fn
        if fn is not None:
            return fn, a._output_nr
        return (grad_accumulator(a), 0) if a._requires_grad else NO_EDGE
    return NOT_TENSOR


def _finish(cls, ctx, args, outputs, requires):
    """Set the history of the outputs (PyTorch's _wrap_outputs) and save tensors."""
    is_tuple = type(outputs) is tuple
    outs = list(outputs) if is_tuple else [outputs]
    dirty = ctx.dirty_tensors
    non_diff = ctx.non_differentiable
    rebased = []  # views modified in place: their bases get new history below
    for i, out in enumerate(outs):
        if not isinstance(out, Tensor):
            continue
        if dirty and _contains(dirty, out):
            _mark_modified(out, requires)
            if requires and out._base is not None:
                rebased.append(out)
            if not requires and out._requires_grad and not cls._arrays_in:
                # PyTorch: a custom Function gives a fresh alias outside autograd (a
                # built-in in-place op, like x.add_(), returns x itself)
                outs[i] = out = _alias(out)
        elif _contains(args, out):
            outs[i] = out = _alias(out)  # an input returned as is becomes a view of it
        elif cls.is_view:
            _make_view_of(out, args, cls)
        if requires:
            if out._data.dtype.kind == "f" and not (non_diff and _contains(non_diff, out)):
                if out._retains_grad:  # written in place: retain_grad follows it
                    _move_retained_grad(out, ctx, i)
                out._requires_grad = True
                out._grad_fn = ctx
                out._output_nr = i
            else:
                out._requires_grad = False
    if dirty:
        for d in dirty:
            if not _contains(args, d):
                warnings.warn("ctx.mark_dirty() received a tensor that was not an input. "
                              "Only input Tensors that have been modified in-place should "
                              "be passed to ctx.mark_dirty().", stacklevel=4)
            if not _contains(outs, d) and not any(_same_data(d, o) for o in outs):
                raise RuntimeError("Some elements marked as dirty during the forward method "
                                   "were not returned as output. The inputs that are "
                                   "modified inplace must all be outputs of the Function.")
    for view in rebased:
        ctx._dirty_positions = _tensor_positions(args)
        rebase_history(view, ctx)
    if requires:
        for d in dirty:
            refresh_views(d._base if d._base is not None else d)
    if requires:
        ctx._num_outputs = len(outs)
        ctx._output_meta = outputs_meta(outs)
        if ctx.to_save:
            ctx._saved = pack_saved(ctx, ctx.to_save)
            ctx.to_save = ()
    return tuple(outs) if is_tuple else outs[0]


def outputs_meta(outputs):
    """(shape, dtype) of each output (None for non-tensors): what gradients flowing into
    the node must be, and what rules may read of the outputs they did not save."""
    return tuple([(o._data.shape, o._data.dtype) if isinstance(o, Tensor) else None
                  for o in outputs])


def _move_retained_grad(tensor, new_node, output_nr):
    """A tensor that retains its grad and was written in place retains the gradient of
    its new value (PyTorch): the retain hook moves from its old node to the new one."""
    old = tensor._grad_fn
    hooks = getattr(old, "_retain_grad_hooks", None)
    if hooks and tensor._output_nr in hooks and hooks[tensor._output_nr]() is tensor:
        del hooks[tensor._output_nr]
    if new_node._retain_grad_hooks is None:
        new_node._retain_grad_hooks = {}
    new_node._no_hooks = False
    new_node._retain_grad_hooks[output_nr] = weakref.ref(tensor)


def _tensor_positions(args):
    """{id(tensor): its argument position} (the order of the node's edges)."""
    return {id(a): i for i, a in enumerate(args) if isinstance(a, Tensor)}


def _requires_flags(args):
    """needs_input_grad outside grad mode: PyTorch still reports requires_grad."""
    return tuple(isinstance(a, Tensor) and a._requires_grad for a in args)


def _same_data(a, b):
    return isinstance(b, Tensor) and a._data is b._data


def _contains(seq, obj):
    """`obj in seq` by identity (tensors compare elementwise with ==)."""
    for x in seq:
        if x is obj:
            return True
    return False


def check_inplace(tensor):
    """PyTorch's refusals for writing into a tensor: an inference tensor outside
    inference_mode; under grad mode, a leaf that requires grad or a view of one."""
    if isinstance(tensor, Tensor):
        before_in_place_write(tensor)
    if isinstance(tensor, Tensor) and tensor._inference and not STATE.inference:
        raise RuntimeError("Inplace update to inference tensor outside InferenceMode is "
                           "not allowed.You can make a clone to get a normal tensor before "
                           "doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                           "for more details.")
    if STATE.enabled and isinstance(tensor, Tensor) and tensor._requires_grad:
        if tensor._grad_fn is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        base = tensor._base
        if base is not None and base._requires_grad and base._grad_fn is None:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used "
                               "in an in-place operation.")


def _mark_modified(tensor, requires):
    """An input modified in place: bump its version; under grad mode it gets new history."""
    if not isinstance(tensor, Tensor):
        raise TypeError("mark_dirty expects tensors that are inputs of forward")
    check_inplace(tensor)
    tensor._version_counter[0] += 1


def _alias(tensor):
    view = _make(tensor._data, None, 0, False, tensor._version_counter)
    view._base = tensor._base if tensor._base is not None else tensor
    view._view_fn = tensor._view_fn
    register_view(view._base, view)
    return view


def _make_view_of(out, args, cls):
    """Outputs of view ops share data and version counter with the root base, and
    remember how to re-derive themselves from it (for in-place changes: views.py)."""
    base = args[0]
    if isinstance(base, Tensor) and np.may_share_memory(out._data, base._data):
        out._version_counter = base._version_counter
        out._base = base._base if base._base is not None else base
        out._view_fn = ViewFn(cls, args[1:], base._view_fn if base._base is not None
                              else None)
        register_view(out._base, out)

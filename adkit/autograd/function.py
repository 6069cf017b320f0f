"""autograd.Function: the one mechanism behind every built-in and user operation.

Owns: `FunctionCtx`, `BackwardCFunction` (the ctx that is also the graph node),
`FunctionMeta` (makes `<Name>Backward` per class), `Function.apply` (argument binding,
dispatch to the current interpreter, else the eager path that records the tape).
Does not: walk the backward graph (engine.py) or define any op's math (adkit/ops).
Semantics follow PyTorch's torch/autograd/function.py (see ../shared/seeds/).
"""
import inspect
import itertools
import warnings

import numpy as np

from .. import _dispatch
from .._hooks import HookDict, add_hook
from ..tensor import Tensor, _make
from .anomaly_mode import STATE as ANOMALY, record_forward_trace
from .grad_mode import STATE
from .node import FREED_MESSAGE, SEQUENCE, Node, grad_accumulator, pack_saved, unpack_saved

# Unique id for each class inheriting from Function, incremented in FunctionMeta.
AUTOGRAD_FUNCTION_COUNTER = itertools.count()


class FunctionCtx:
    """What `forward`/`setup_context` use to hand information to `backward`/`jvp`."""

    def save_for_backward(self, *tensors):
        """Save tensors (or None) for `backward`, read back through `saved_tensors`."""
        for i, t in enumerate(tensors):
            if t is not None and type(t) is not Tensor and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        """Save tensors (or None) for `jvp`."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_forward expects all arguments to be tensors; you "
                                "should save non-tensors as attributes on ctx.")
        self.saved_for_forward = tensors

    def mark_dirty(self, *args):
        """Mark input tensors as modified in place by `forward`."""
        self.dirty_tensors = args

    def mark_shared_storage(self, *pairs):
        warnings.warn("`mark_shared_storage` is deprecated. Tensors with shared storages "
                      "are automatically tracked. Note that calls to `set_()` are not "
                      "tracked", FutureWarning, stacklevel=2)

    def mark_non_differentiable(self, *args):
        """Mark outputs that do not require grad (backward still gets zeros for them)."""
        self.non_differentiable = args

    def set_materialize_grads(self, value):
        """If False, backward receives None (not zeros) for outputs without a gradient."""
        self.materialize_grads = value


class _HookMixin:
    @staticmethod
    def _register_hook(backward_hooks, hook):
        if backward_hooks is None:
            backward_hooks = HookDict()
        return backward_hooks, add_hook(backward_hooks, hook)


class BackwardCFunction(Node, FunctionCtx, _HookMixin):
    """The graph node of one Function call; it is also the `ctx` the rules receive."""

    # Defaults, so that a node costs nothing for what it does not use.
    to_save = ()
    saved_for_forward = ()
    dirty_tensors = ()
    non_differentiable = ()
    materialize_grads = True
    needs_input_grad = ()
    _saved = ()
    _freed = False

    def apply(self, *args):
        """Run the Function's backward (or vjp) on the gradients of its outputs."""
        user_fn = self._user_backward
        if user_fn is None:
            user_fn = type(self)._resolve_backward()
        return user_fn(self, *args)

    _user_backward = None  # backward or vjp of _forward_cls, resolved on first use

    @classmethod
    def _resolve_backward(cls):
        fwd = cls._forward_cls
        backward_fn, vjp_fn = fwd.backward, fwd.vjp
        if backward_fn is not Function.backward and vjp_fn is not Function.vjp \
                and backward_fn is not vjp_fn:
            raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom "
                               "Function is not allowed. You should only implement one "
                               "of them.")
        cls._user_backward = staticmethod(vjp_fn if vjp_fn is not Function.vjp
                                          else backward_fn)
        return vjp_fn if vjp_fn is not Function.vjp else backward_fn

    def apply_jvp(self, *args):
        """Run the Function's jvp on the tangents of its inputs."""
        return self._forward_cls.jvp(self, *args)

    def _compiled_autograd_key(self):
        return self._forward_cls._compiled_autograd_key(self)

    @property
    def saved_tensors(self):
        if self._freed:
            raise RuntimeError(FREED_MESSAGE)
        return unpack_saved(self, self._saved)

    def _release(self):
        if self._saved:
            self._saved = ()
            self._freed = True

    def _run(self, grads):
        if self.materialize_grads and None in grads:
            grads = [_zeros(meta) if g is None and meta is not None else g
                     for g, meta in zip(grads, self._output_meta)]
        result = self.apply(*grads)
        metas = self._input_meta
        if type(result) is not tuple:
            result = (result,)
        if len(result) == len(metas):  # fast path: every gradient already right
            checked = []
            for g, meta in zip(result, metas):
                if meta is None:
                    if g is not None:
                        break
                    continue
                if g is not None and (type(g) is not Tensor or g._data.shape != meta[0]
                                      or g._data.dtype != meta[1]):
                    break
                checked.append(g)
            else:
                return checked
        return _check_backward_result(self, result)


def _zeros(meta):
    shape, dtype = meta
    return _make(np.zeros(shape, dtype))


def _check_backward_result(node, result):
    """Validate what backward returned (PyTorch's validate_outputs) and keep one gradient
    per differentiable input, in `next_functions` order."""
    if not isinstance(result, tuple):
        result = (result,)
    metas = node._input_meta
    n = len(metas)
    if len(result) != n:
        if len(result) < n or any(g is not None for g in result[n:]):
            raise RuntimeError(f"function {node.name()} returned an incorrect number of "
                               f"gradients (expected {n}, got {len(result)})")
        result = result[:n]
    grads = []
    for i, (g, meta) in enumerate(zip(result, metas)):
        if meta is None:
            if g is not None:
                raise RuntimeError(f"function {node.name()} returned a gradient different "
                                   f"than None at position {i + 1}, but the corresponding "
                                   "forward input was not a Variable")
            continue
        if g is not None:
            g = _check_one_grad(node, i, g, meta)
        grads.append(g)
    return grads


def _check_one_grad(node, i, g, meta):
    shape, dtype = meta
    if not isinstance(g, Tensor):
        raise TypeError(f"function {node.name()} returned a gradient of type "
                        f"{type(g).__name__} at index {i}; expected a Tensor or None")
    if g._data.shape != shape:
        if not _expandable_to(shape, g._data.shape):
            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index "
                               f"{i} - got {list(g._data.shape)} but expected shape "
                               f"compatible with {list(shape)}")
        g = g.sum_to_size(shape)
    if g._data.dtype != dtype:
        g = g.to(dtype)
    return g


def _expandable_to(shape, desired):
    if len(shape) > len(desired):
        return False
    return all(s == d or s == 1 for s, d in zip(reversed(shape), reversed(desired)))


class FunctionMeta(type):
    """Gives each Function class its `_backward_cls`, `<Name>Backward`, and caches how
    `apply` binds arguments to `forward`."""

    def __init__(cls, name, bases, attrs):
        backward_cls = type(name + "Backward", (BackwardCFunction,), {"_forward_cls": cls})
        backward_cls._autograd_function_id = next(AUTOGRAD_FUNCTION_COUNTER)
        backward_cls._compiled_autograd_should_lift = attrs.get(
            "_compiled_autograd_should_lift", True)
        cls._backward_cls = backward_cls
        super().__init__(name, bases, attrs)
        cls._binding = None  # (n_positional, Signature) computed on first apply


def _binding(cls):
    """How many parameters forward takes (after ctx), and its signature for binding."""
    sig = inspect.signature(cls.forward)
    params = list(sig.parameters.values())
    if not cls._uses_setup_context() and not cls._arrays_in:
        params = params[1:]  # forward(ctx, ...)
    sig = sig.replace(parameters=params)
    simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    cls._binding = (len(params) if simple else -1, sig)
    return cls._binding


def _bind_args(cls, args, kwargs):
    """Bind a call to forward's signature, defaults included, as positional arguments."""
    n, sig = cls._binding or _binding(cls)
    if n == len(args) and not kwargs:
        return args
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{cls.__name__}.apply(): {e}") from None
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"{cls.__name__}.apply(): keyword-only arguments of forward are "
                        "not supported; make them positional")
    return bound.args


class _SingleLevelFunction(FunctionCtx, _HookMixin, metaclass=FunctionMeta):
    # Built-in ops set this: forward gets ndarrays (tensors unwrapped) and returns
    # ndarrays; setup_context then sees the wrapped output tensors.
    _arrays_in = False
    # View ops set this: outputs share input 0's data and version counter.
    is_view = False

    @staticmethod
    def forward(*args, **kwargs):
        """Compute the outputs. Either `forward(ctx, *args)`, or `forward(*args)` together
        with `setup_context(ctx, inputs, output)`. Runs with grad mode off."""
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Save what backward/jvp need (only when forward does not take ctx)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """One gradient per forward input (None for inputs needing none), from one
        gradient per output. Written with adkit ops, so it is itself differentiable."""
        raise NotImplementedError("You must implement either the backward or vjp method "
                                  "for your custom autograd.Function to use it with "
                                  "backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """One tangent per output from one tangent per input (forward-mode AD)."""
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def _uses_setup_context(cls):
        return cls.setup_context is not _SingleLevelFunction.setup_context


class Function(_SingleLevelFunction):
    """Base class for operations with custom derivative rules; see PyTorch's
    torch.autograd.Function. Call it as `MyFn.apply(*args)`."""

    def __init__(self, *args, **kwargs):
        warnings.warn(f"{self.__class__} should not be instantiated. Methods on autograd "
                      "functions are all static, so you should invoke them on the class "
                      "itself. Instantiating an autograd function will raise an error in a "
                      "future version of PyTorch.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    generate_vmap_rule = False

    @staticmethod
    def _compiled_autograd_key(ctx):
        return (ctx._autograd_function_id,)

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function: bind arguments (defaults included), then hand the call to the
        active interpreter, or run it eagerly and record it for backward."""
        binding = cls._binding
        if kwargs or binding is None or binding[0] != len(args):
            args = _bind_args(cls, args, kwargs)
        stack = _dispatch._STACK.get()
        if stack:
            return stack[-1].process(cls, args)
        return _eager_apply(cls, args)


def _eager_apply(cls, args):
    """The eager path: forward on concrete data, then the tape entry if grad is needed."""
    requires = False
    if STATE.enabled:
        for a in args:
            if type(a) is Tensor and a._requires_grad:
                requires = True
                break
    if cls._arrays_in:
        raw = cls.forward(*[a._data if type(a) is Tensor else a for a in args])
        if type(raw) is np.ndarray:  # the common case: one fresh array
            outputs = _make(raw)
            aliased = _is_input_data(raw, args)
            if aliased is not None:
                outputs = aliased
            elif not requires:
                if cls.is_view:
                    _make_view_of(outputs, args[0])
                return outputs
            else:
                ctx = cls._backward_cls()
                _link_inputs(ctx, args)
                cls.setup_context(ctx, args, outputs)
                if not ctx.dirty_tensors:
                    return _record_single(cls, ctx, args, outputs)
                return _finish(cls, ctx, args, outputs, requires)
        else:
            outputs = _wrap_arrays(raw, args)
        # Outputs that are inputs need setup_context even without grad: it says whether
        # they were modified in place (mark_dirty), which bumps their version.
        ctx = cls._backward_cls()
        if requires:
            _link_inputs(ctx, args)
        else:
            ctx.needs_input_grad = (False,) * len(args)
        cls.setup_context(ctx, args, outputs)
        return _finish(cls, ctx, args, outputs, requires)
    ctx = cls._backward_cls()
    if requires:
        _link_inputs(ctx, args)
    else:
        ctx.needs_input_grad = (False,) * len(args)
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
    return _finish(cls, ctx, args, outputs, requires)


def _is_input_data(arr, args):
    """The input tensor whose data `arr` is (an in-place op returned it), else None."""
    for a in args:
        if type(a) is Tensor and a._data is arr:
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
    return _is_input_data(arr, args) or _make(arr)


def _link_inputs(ctx, args):
    """Before forward: the node's edges to its inputs' nodes (taken before any in-place
    change rebases them), `needs_input_grad`, and what backward's results must match."""
    edges, metas, needs = [], [], []
    for a in args:
        if type(a) is Tensor:
            fn = a._grad_fn
            if fn is not None:
                edges.append((fn, a._output_nr))
                needs.append(True)
            elif a._requires_grad:
                edges.append((grad_accumulator(a), 0))
                needs.append(True)
            else:
                edges.append(_NO_EDGE)
                needs.append(False)
            metas.append((a._data.shape, a._data.dtype))
        else:
            metas.append(None)
            needs.append(False)
    ctx.next_functions = tuple(edges)
    ctx.needs_input_grad = tuple(needs)
    ctx._input_meta = metas
    ctx._sequence_nr = next(SEQUENCE)
    if ANOMALY.enabled:
        record_forward_trace(ctx)


def _record_single(cls, ctx, args, out):
    """_finish for the common case: one fresh output tensor, nothing marked dirty."""
    if cls.is_view:
        _make_view_of(out, args[0])
    non_diff = ctx.non_differentiable
    if out._data.dtype.kind == "f" and not (non_diff and _contains(non_diff, out)):
        out._requires_grad = True
        out._grad_fn = ctx
    ctx._output_meta = ((out._data.shape, out._data.dtype),)
    if ctx.to_save:
        ctx._saved = pack_saved(ctx, ctx.to_save)
        ctx.to_save = ()
    return out


def _finish(cls, ctx, args, outputs, requires):
    """Set the history of the outputs (PyTorch's _wrap_outputs) and save tensors."""
    is_tuple = type(outputs) is tuple
    outs = list(outputs) if is_tuple else [outputs]
    dirty = ctx.dirty_tensors
    non_diff = ctx.non_differentiable
    for i, out in enumerate(outs):
        if not isinstance(out, Tensor):
            continue
        if dirty and _contains(dirty, out):
            _mark_modified(out, requires)
        elif _contains(args, out):
            outs[i] = out = _alias(out)  # an input returned as is becomes a view of it
        elif cls.is_view:
            _make_view_of(out, args[0])
        if requires:
            if out._data.dtype.kind == "f" and not (non_diff and _contains(non_diff, out)):
                out._requires_grad = True
                out._grad_fn = ctx
                out._output_nr = i
            else:
                out._requires_grad = False
    if dirty:
        for d in dirty:
            if not _contains(outs, d):
                raise RuntimeError("Some elements marked as dirty during the forward method "
                                   "were not returned as output. The inputs that are "
                                   "modified inplace must all be outputs of the Function.")
    if requires:
        ctx._num_outputs = len(outs)
        ctx._output_meta = [(o._data.shape, o._data.dtype) if isinstance(o, Tensor)
                            else None for o in outs]
        if ctx.to_save:
            ctx._saved = pack_saved(ctx, ctx.to_save)
            ctx.to_save = ()
    return tuple(outs) if is_tuple else outs[0]


_NO_EDGE = (None, 0)


def _contains(seq, obj):
    """`obj in seq` by identity (tensors compare elementwise with ==)."""
    for x in seq:
        if x is obj:
            return True
    return False


def _mark_modified(tensor, requires):
    """An input modified in place: bump its version; under grad mode it gets new history."""
    if not isinstance(tensor, Tensor):
        raise TypeError("mark_dirty expects tensors that are inputs of forward")
    if STATE.enabled and tensor._requires_grad:
        if tensor._grad_fn is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        base = tensor._base
        if base is not None and base._requires_grad:
            raise RuntimeError("a view of a tensor that requires grad is being modified "
                               "in place; adkit does not rebase the history of views yet. "
                               "Modify the base tensor, or use an out-of-place op.")
    tensor._version_counter[0] += 1


def _alias(tensor):
    view = _make(tensor._data, None, 0, False, tensor._version_counter)
    view._base = tensor._base if tensor._base is not None else tensor
    return view


def _make_view_of(out, base):
    if type(base) is Tensor and np.may_share_memory(out._data, base._data):
        out._version_counter = base._version_counter
        out._base = base._base if base._base is not None else base

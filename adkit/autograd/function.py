"""autograd.Function: the one mechanism behind every built-in and user operation.

Owns: `FunctionCtx`, `BackwardCFunction` (the ctx that is also the graph node),
`FunctionMeta` (makes `<Name>Backward` per class), `Function.apply` (argument binding,
dispatch to the current interpreter, else the eager path that records the tape).
Does not: walk the backward graph (engine.py) or define any op's math (adkit/ops).
Semantics follow PyTorch's torch/autograd/function.py (see ../shared/seeds/).
"""
import functools
import inspect
import itertools
import warnings

import numpy as np

from .. import _dispatch
from .._hooks import HookDict, add_hook
from ..tensor import Tensor, _make
from ._eager import array_entry, eager_apply
from .grad_mode import is_grad_enabled, no_grad
from .node import FREED_MESSAGE, Node, unpack_saved

# Unique id for each class inheriting from Function, incremented in FunctionMeta.
AUTOGRAD_FUNCTION_COUNTER = itertools.count()


class FunctionCtx:
    """What `forward`/`setup_context` use to hand information to `backward`/`jvp`."""

    def save_for_backward(self, *tensors):
        """Save tensors (or None) for `backward`, read back through `saved_tensors`."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor) and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        """Save tensors (or None) for `jvp`."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise AssertionError("save_for_forward expects all arguments to be tensors; "
                                     "you should save non-tensors as attributes on ctx.")
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


# Formerly known as _ContextMethodMixin (kept for the seed's old name).
_ContextMethodMixin = FunctionCtx


def _is_setup_context_defined(fn):
    return fn != _SingleLevelFunction.setup_context


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
        if backward_fn is not Function.backward and vjp_fn is not Function.vjp:
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
        """One gradient per edge (per forward argument) from the gradients of the
        outputs. The engine checks each against the node it flows into."""
        if self.materialize_grads:
            for g in grads:
                if g is None:
                    grads = [_zeros(meta) if g is None and meta is not None else g
                             for g, meta in zip(grads, self._output_meta)]
                    break
        user_fn = self._user_backward  # what self.apply runs, minus one call frame
        if user_fn is None:
            user_fn = type(self)._resolve_backward()
        result = user_fn(self, *grads)
        if type(result) is not tuple:
            result = (result,)
        if len(result) != len(self._edges):
            result = _trimmed(self, result)
        return result


def _zeros(meta):
    shape, dtype = meta
    return _make(np.zeros(shape, dtype))


def _trimmed(node, result):
    """What backward returned, one gradient per argument (PyTorch's check: extra
    gradients are allowed if they are None)."""
    n = len(node._edges)
    if len(result) < n or any(g is not None for g in result[n:]):
        raise RuntimeError(f"function {node.name()} returned an incorrect number of "
                           f"gradients (expected {n}, got {len(result)})")
    return result[:n]


class FunctionMeta(type):
    """Gives each Function class its `_backward_cls`, `<Name>Backward`, and caches how
    `apply` binds arguments to `forward`."""

    def __init__(cls, name, bases, attrs):
        backward_cls = type(_node_name(name, attrs), (BackwardCFunction,),
                            {"_forward_cls": cls})
        backward_cls._autograd_function_id = next(AUTOGRAD_FUNCTION_COUNTER)
        backward_cls._compiled_autograd_should_lift = attrs.get(
            "_compiled_autograd_should_lift", True)
        for attr, value in getattr(cls, "ctx_defaults", {}).items():
            setattr(backward_cls, attr, value)  # what ctx reads when setup_context set none
        cls._backward_cls = backward_cls
        super().__init__(name, bases, attrs)
        cls._binding = None  # (n_positional, Signature) computed on first apply
        cls._nargs = None  # how many positional arguments apply passes on as they are
        # eager mode's fast path: a built-in op that writes into nothing and makes no view
        cls._plain_arrays = (getattr(cls, "_arrays_in", False) and
                             getattr(cls, "modifies", None) is None and
                             not getattr(cls, "is_view", False))
        cls._array_op = array_entry(_arity(cls)) if cls._plain_arrays else None


def _node_name(name, attrs):
    """PyTorch's node names: a built-in op's node is `<Op>Backward0` (an in-place op
    shares its out-of-place op's name: mul_ -> MulBackward0); a user Function's is
    `<ClassName>Backward`."""
    if attrs.get("__module__", "").startswith("adkit.ops."):
        return name.replace("Inplace", "").rstrip("_") + "Backward0"
    return name + "Backward"


_NO_DEFAULT = inspect.Parameter.empty
_interpreters = _dispatch.interpreters


def _binding(cls):
    """How `apply` binds a call to forward: (number of parameters after ctx, or -1 when
    forward takes *args/**kwargs; their names; their defaults; the Signature)."""
    if cls.forward is _SingleLevelFunction.forward:
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")
    sig = inspect.signature(cls.forward)
    params = list(sig.parameters.values())
    if not cls._uses_setup_context() and not cls._arrays_in:
        params = params[1:]  # forward(ctx, ...)
    sig = sig.replace(parameters=params)
    simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    names = tuple(p.name for p in params)
    defaults = tuple(p.default for p in params)
    cls._binding = (len(params) if simple else -1, names, defaults, sig)
    cls._nargs = cls._binding[0]
    return cls._binding


def _arity(cls):
    """The number of forward's parameters (-1: *args, or no forward yet)."""
    if cls.forward is _SingleLevelFunction.forward:
        return -1
    return (cls._binding or _binding(cls))[0]


def plain_arity(cls):
    """How many positional arguments cls's forward takes, when calling its eager path
    with exactly that many (`cls._array_op(cls, args)`, after checking that no
    interpreter is active) does what `cls.apply` does: a built-in op that writes into
    nothing and makes no view, with a plain signature. Else None."""
    if not cls._plain_arrays:
        return None
    n = (cls._binding or _binding(cls))[0]
    return n if n >= 0 else None


def _bind_args(cls, args, kwargs):
    """Bind a call to forward's signature, defaults included, as positional arguments.
    NB: plain positional/keyword signatures are bound by hand: inspect's bind costs
    several microseconds, more than a small op itself."""
    n, names, defaults, sig = cls._binding or _binding(cls)
    if n >= len(args):
        bound = list(args)
        used = 0
        for i in range(len(args), n):
            name = names[i]
            if name in kwargs:
                bound.append(kwargs[name])
                used += 1
            elif defaults[i] is not _NO_DEFAULT:
                bound.append(defaults[i])
            else:
                break  # a missing argument: let inspect word the error
        else:
            if used == len(kwargs):
                return tuple(bound)
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
    # In-place built-ins set this to the position of the argument they write into, so
    # the eager path can refuse (leaf requiring grad...) before any data changes.
    modifies = None

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

    # Whether adkit may batch this Function by running its forward/backward/jvp under
    # vmap (they must be written with adkit ops); else define the vmap staticmethod.
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        """The batching rule: return (output, out_dims) for args batched along in_dims
        (None where an argument is not batched); info.batch_size and info.randomness
        describe the vmap."""
        raise NotImplementedError("To use autograd.Function with vmap, you must either "
                                  "override the vmap staticmethod or set "
                                  "generate_vmap_rule=True.")

    @staticmethod
    def _compiled_autograd_key(ctx):
        return (ctx._autograd_function_id,)

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function: bind arguments (defaults included), then hand the call to the
        active interpreter, or run it eagerly and record it for backward."""
        if kwargs or cls._nargs != len(args):
            args = _bind_args(cls, args, kwargs)
        stack = _interpreters()
        if stack:
            return stack[-1].process(cls, args)
        if cls._plain_arrays:  # NB: most ops; one call frame fewer on the hot path
            return cls._array_op(cls, args)
        return eager_apply(cls, args)


# ---------------------------------------------------------------- the seed's helpers
class DelayedError(Function):
    """Passes its inputs through; differentiating it raises `message` (what
    once_differentiable hangs on the outputs of a backward)."""

    @staticmethod
    def forward(ctx, message, *tensors):
        ctx.message = message
        return tensors[0] if len(tensors) == 1 else tensors

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def once_differentiable(fn):
    """Decorate a backward that is not itself differentiable: it runs under no_grad, and
    differentiating its results raises instead of silently giving wrong answers."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not is_grad_enabled():
            return outputs
        requires_grad = any(isinstance(arg, Tensor) and arg.requires_grad for arg in args)
        if not requires_grad:
            return outputs
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs

        def fake_requires_grad(var):
            if var is not None:
                var = var.detach()
                var.requires_grad = True
            return var

        result = DelayedError.apply("trying to differentiate twice a function that was "
                                    "marked with @once_differentiable",
                                    *[fake_requires_grad(v) for v in outputs])
        return result if single or isinstance(result, tuple) else (result,)
    return wrapper


class InplaceFunction(Function):
    """Kept for backward compatibility (see the seed); use Function."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace


def _nested_map(condition, fn, condition_msg=None):
    def _map(obj):
        if condition(obj):
            return fn(obj)
        if obj is None:
            return None
        if isinstance(obj, (list, tuple)):
            mapped = (_map(x) for x in obj)
            return type(obj)(*mapped) if hasattr(obj, "_fields") else type(obj)(mapped)
        if isinstance(obj, dict):
            return {x: _map(obj[x]) for x in obj}
        raise ValueError("Auto nesting doesn't know how to process an input object of type "
                         + type(obj).__name__ + (". Accepted types: " + condition_msg +
                                                 ", or lists/tuples of them"
                                                 if condition_msg else ""))
    return _map


def _iter_filter(condition, allow_unknown=False, condition_msg=None):
    def _iter(obj):
        if condition(obj):
            yield obj
        elif obj is None:
            return
        elif isinstance(obj, (list, tuple)):
            for o in obj:
                yield from _iter(o)
        elif isinstance(obj, dict):
            for o in obj.values():
                yield from _iter(o)
        elif allow_unknown:
            yield obj
        else:
            raise ValueError("Auto nesting doesn't know how to process an input object of "
                             "type " + type(obj).__name__ +
                             (". Accepted types: " + condition_msg +
                              ", or lists/tuples of them" if condition_msg else ""))
    return _iter


def _unflatten(flat, proto):
    """Rebuild the nested list/tuple structure of `proto` from the flat sequence."""
    def helper(flat, proto):
        if not isinstance(proto, (list, tuple)):
            return flat[0], flat[1:]
        res = []
        for e in proto:
            if e is None:
                res.append(e)
            else:
                res_e, flat = helper(flat, e)
                res.append(res_e)
        return type(proto)(res), flat
    return helper(flat, proto)[0]


_iter_tensors = _iter_filter(lambda x: isinstance(x, Tensor), condition_msg="Tensors")
_iter_None_tensors = _iter_filter(lambda o: o is None or isinstance(o, Tensor),
                                  condition_msg="Tensors or None")
_map_tensor_data = _nested_map(lambda x: isinstance(x, Tensor), lambda o: o.detach(),
                               condition_msg="Tensors")


class _NestedIOCall(Function):
    """Runs one call of a NestedIOFunction instance on its flattened tensors."""

    @staticmethod
    def forward(ctx, fn, *flat_inputs):
        fn._ctx = ctx
        result = fn.forward_extended(*_map_tensor_data(fn._nested_input))
        del fn._nested_input
        fn._nested_output = result
        ctx.fn = fn
        ctx.save_for_backward(*fn.to_save)
        # forward_extended saw detached aliases of the inputs: map those it marked dirty
        # (and returns) back to the input tensors themselves.
        by_data = {id(a._data): a for a in flat_inputs}
        dirty = tuple(by_data.get(id(d._data), d) for d in fn.dirty_tensors)
        ctx.mark_dirty(*dirty)
        ctx.mark_non_differentiable(*fn.non_differentiable)
        flat = tuple(by_data[id(t._data)] if any(t._data is d._data for d in dirty) else t
                     for t in _iter_tensors(result))
        return flat[0] if len(flat) == 1 else flat

    @staticmethod
    def backward(ctx, *grads):
        fn = ctx.fn
        nested_grads = _unflatten(grads, fn._nested_output)
        result = fn.backward_extended(*nested_grads)
        return (None,) + tuple(_iter_None_tensors(result))


class NestedIOFunction(Function):
    """Kept for backward compatibility (see the seed): an instance is called on nested
    lists/tuples of tensors; subclasses write `forward_extended(self, *inputs)` and
    `backward_extended(self, *grad_outputs)` as instance methods."""

    to_save = ()
    dirty_tensors = ()
    non_differentiable = ()

    def _do_forward(self, *input):
        self._nested_input = input
        flat_input = tuple(_iter_tensors(input))
        flat_output = _NestedIOCall.apply(self, *flat_input)
        if not isinstance(flat_output, tuple):
            flat_output = (flat_output,)
        return _unflatten(flat_output, self._nested_output)

    __call__ = _do_forward

    def save_for_backward(self, *args):
        self.to_save = tuple(_iter_tensors(args))
        self._to_save_nested = args

    @property
    def saved_tensors(self):
        return _unflatten(self._ctx.saved_tensors, self._to_save_nested)

    @property
    def needs_input_grad(self):
        return self._ctx.needs_input_grad[1:]

    def mark_dirty(self, *args, **kwargs):
        self.dirty_tensors = tuple(_iter_tensors((args, kwargs)))

    def mark_non_differentiable(self, *args, **kwargs):
        self.non_differentiable = tuple(_iter_tensors((args, kwargs)))

    def forward_extended(self, *input):
        raise NotImplementedError("NestedIOFunction subclasses define forward_extended")

    def backward_extended(self, *grad_output):
        raise NotImplementedError("NestedIOFunction subclasses define backward_extended")

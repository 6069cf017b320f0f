"""ak.checkpoint: trade compute for memory by recomputing a segment's forward in backward.

Owns: `checkpoint(function, *args, use_reentrant=False, preserve_rng_state=True,
determinism_check="default", **kwargs)` with torch.utils.checkpoint.checkpoint's semantics
(and its wrapper form `checkpoint(f)`), and the two implementations `use_reentrant` picks.
Does not: touch graphs (`ak.ir.passes.remat` makes the same trade on a traced vjp graph)
or decide where to cut a model into segments (the caller does).

Style (the default, use_reentrant=False): saved-tensor hooks, PyTorch's non-reentrant
checkpoint. The segment runs once with grad on, inside `saved_tensors_hooks` whose pack
hook drops each tensor an op saves and keeps a small handle: the tape (the nodes, with
their edges) is built but holds no intermediate value. The first unpack in backward
reruns the segment under recording hooks and hands out what the rerun saved, k-th pack
for k-th handle. Chosen because the tape stays the ordinary one, so everything composes
with no special case: tensors closed over (weights) get gradients, `ak.autograd.grad`
and `backward(inputs=...)` work, any pytree of inputs and outputs works, nested
checkpoints work (the inputs are saved through the outer hooks, so an outer checkpoint
drops them too), forward-mode AD passes through, and with `create_graph=True` the rerun
keeps its graph on the original inputs, so double backward is exact. Gradients equal the
plain function's bit for bit (same ops, same order, same values).
use_reentrant=True: `_CheckpointFunction`, an `ak.autograd.Function` whose forward runs
the segment under no_grad and whose backward reruns it on detached inputs and calls
`backward()` inside the engine (PyTorch's reentrant checkpoint, with its limits: it
refuses `ak.autograd.grad()`, keyword arguments and double backward).
NB: `preserve_rng_state` replays the generator behind ak.rand/ak.randn in the rerun.
Under `ak.trace` the segment's ops are recorded inline (a graph has no checkpoint node;
`remat` does the job there), but a `grad()` traced through a checkpoint records the
recomputation too.
"""
import copy
import functools
import warnings
import weakref

from .._pytree import tree_flatten, tree_unflatten
from ..autograd import engine
from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..autograd.graph import saved_tensors_hooks
from ..autograd.node import pack_saved, unpack_saved
from ..ops.random import _Generator
from ..tensor import Tensor

_DETERMINISM_CHECKS = ("default", "none")
# NB: pack_saved keeps a tensor whose grad_fn *is* the node as bare data (a node's own
# output); the inputs a frame saves belong to no node, so it passes this stand-in.
_NO_NODE = object()
_A_TENSOR = object()  # where a tensor argument goes back (None may be an argument)


def checkpoint(function, *args, use_reentrant=False, preserve_rng_state=True,
               determinism_check="default", **kwargs):
    """`function(*args, **kwargs)`, keeping only the inputs for backward: backward reruns
    `function` with grad on and backpropagates through the rerun.

    `checkpoint(f)` (a function and nothing else to call it with; options allowed)
    returns `f` wrapped, so that each call is checkpointed. `determinism_check="default"`
    makes the rerun check that it saves tensors of the same shapes and dtypes as the
    first run ("none" skips the check)."""
    if determinism_check not in _DETERMINISM_CHECKS:
        raise ValueError(f"determinism_check should be one of {_DETERMINISM_CHECKS}, but "
                         f"got {determinism_check!r}")
    options = dict(use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state,
                   determinism_check=determinism_check)
    if not args and not kwargs:
        return _wrapped(function, options)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs) +
                             " (use_reentrant=True takes positional arguments only; use "
                             "use_reentrant=False)")
        if is_grad_enabled() and not any(_is_tensor(a) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be "
                          "None", stacklevel=2)
        return _CheckpointFunction.apply(function, preserve_rng_state, *args)
    return _checkpoint_with_hooks(function, args, kwargs, preserve_rng_state,
                                  determinism_check == "default")


def _wrapped(function, options):
    if not callable(function):
        raise TypeError(f"checkpoint: expected a function, got {type(function).__name__}")

    @functools.wraps(function)
    def checkpointed(*args, **kwargs):
        return checkpoint(function, *args, **options, **kwargs)
    return checkpointed


# ---------------------------------------------------------------- the rng
def _rng_snapshot():
    return copy.deepcopy(_Generator.numpy)


class _replayed_rng:
    """Run the block with the generator as it was at `snapshot` (a copy of it), then put
    back the generator of the caller."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def __enter__(self):
        self.saved = _Generator.numpy
        if self.snapshot is not None:
            _Generator.numpy = copy.deepcopy(self.snapshot)

    def __exit__(self, *exc):
        _Generator.numpy = self.saved
        return False


# ---------------------------------------------------------------- saved-tensor hooks
def _is_tensor(x):
    return isinstance(x, Tensor)


def _checkpoint_with_hooks(function, args, kwargs, preserve_rng_state, check):
    """The non-reentrant checkpoint: run once under dropping hooks (see the module
    docstring); a `_Frame` knows how to rerun the call."""
    if not is_grad_enabled():
        return function(*args, **kwargs)  # nothing will be saved: nothing to drop
    frame = _Frame(function, args, kwargs, preserve_rng_state, check)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        return function(*args, **kwargs)


class _Handle:
    """What a node of the segment keeps instead of a saved tensor: a weak reference to
    it (while something else keeps it alive and unchanged, e.g. forward-mode AD reading
    it at once, or an output the caller holds, it is handed back without a rerun). The
    frame holds its handles weakly, in the order they were made, so a rerun only keeps
    what some node still needs."""

    __slots__ = ("ref", "version", "__weakref__")

    def __init__(self, tensor):
        self.ref = weakref.ref(tensor)
        self.version = tensor._version_counter[0]

    def alive(self):
        """The saved tensor itself, if it still exists unmodified, else None."""
        tensor = self.ref()
        if tensor is not None and tensor._version_counter[0] == self.version:
            return tensor
        return None


class _Frame:
    """One checkpointed call: how to rerun it, and what each rerun saved, by handle.

    `recomputed[keep_graph]` maps live handles to (tensor, version): the rerun under
    grad mode off (a plain backward) keeps detached tensors; under grad mode on
    (create_graph) it keeps them with their history on the original inputs."""

    def __init__(self, function, args, kwargs, preserve_rng_state, check):
        leaves, self.tree = tree_flatten((args, kwargs), is_leaf=_is_tensor)
        self.function = function
        self.leaves = [_A_TENSOR if _is_tensor(x) else x for x in leaves]
        # NB: saved through the hooks active now, so an outer checkpoint drops them too
        self.inputs = pack_saved(_NO_NODE, [x for x in leaves if _is_tensor(x)])
        self.rng = _rng_snapshot() if preserve_rng_state else None
        self.check = check
        self.metas = []  # (shape, dtype) of each tensor the first run saved, in order
        self.handles = []  # weak references to their handles, in the same order
        self.recomputed = {False: weakref.WeakKeyDictionary(),
                           True: weakref.WeakKeyDictionary()}

    def pack(self, tensor):
        handle = _Handle(tensor)
        self.metas.append(_meta(tensor))
        self.handles.append(weakref.ref(handle))
        return handle

    def unpack(self, handle):
        alive = handle.alive()
        if alive is not None:
            return alive
        keep_graph = is_grad_enabled()
        store = self.recomputed[keep_graph]
        if handle not in store:
            self._rerun(keep_graph)
        tensor, version = store[handle]
        if tensor._version_counter[0] != version:
            raise RuntimeError("ak.checkpoint: a tensor saved by an op inside the "
                               "checkpointed function was modified in place after the op "
                               "saved it (during the recomputation)")
        return tensor

    def _arguments(self):
        it = iter(unpack_saved(_NO_NODE, self.inputs))
        leaves = [next(it) if x is _A_TENSOR else x for x in self.leaves]
        return tree_unflatten(self.tree, leaves)

    def _rerun(self, keep_graph):
        args, kwargs = self._arguments()
        recorder = _Recorder(self, keep_graph)
        with enable_grad(), _replayed_rng(self.rng), \
                saved_tensors_hooks(recorder.pack, _unpack_recorded):
            self.function(*args, **kwargs)
        if self.check and recorder.count != len(self.metas):
            raise RuntimeError(_nondeterminism(f"saved {recorder.count} tensors, but the "
                                               f"first run saved {len(self.metas)}"))


class _Recorder:
    """The pack hook of a rerun: the k-th saved tensor goes to the k-th handle."""

    def __init__(self, frame, keep_graph):
        self.frame, self.keep_graph, self.count = frame, keep_graph, 0
        self.store = frame.recomputed[keep_graph]

    def pack(self, tensor):
        k, self.count = self.count, self.count + 1
        frame = self.frame
        if frame.check and (k >= len(frame.metas) or
                            frame.metas[k] != _meta(tensor)):
            want = frame.metas[k] if k < len(frame.metas) else "nothing"
            raise RuntimeError(_nondeterminism(
                f"saved tensor {k} is {_meta(tensor)} in the recomputation "
                f"but was {want} in the first run"))
        handle = frame.handles[k]() if k < len(frame.handles) else None
        # NB: detached, but still requiring grad: a nested checkpoint reruns on it
        kept = tensor if self.keep_graph else _detached_like(tensor)
        if handle is not None:  # else no node needs it any more
            self.store[handle] = (kept, kept._version_counter[0])
        # the rerun's own nodes are differentiated only under create_graph; else they
        # may only read what is still alive (forward-mode AD reading at once)
        return tensor if self.keep_graph else weakref.ref(tensor)


def _meta(tensor):
    return tuple(tensor.shape), tensor.dtype


def _unpack_recorded(packed):
    tensor = packed() if isinstance(packed, weakref.ref) else packed
    if tensor is None:
        raise RuntimeError("ak.checkpoint: the graph of a recomputation run without "
                           "create_graph=True cannot be differentiated")
    return tensor


def _nondeterminism(what):
    return ("ak.checkpoint: the recomputation of the checkpointed function differs from "
            f"its first run: it {what}. The function must run the same ops on tensors of "
            "the same shapes each time (pass determinism_check='none' to skip this check)")


# ---------------------------------------------------------------- use_reentrant=True
class _CheckpointFunction(Function):
    """outputs = run_function(*args), saving only the tensor args; backward reruns
    run_function on detached copies with grad on and backpropagates through the rerun
    with `backward()` (PyTorch's reentrant checkpoint)."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng = _rng_snapshot() if preserve_rng_state else None
        ctx.inputs = [_A_TENSOR if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return run_function(*args)  # grad mode is off in a Function's forward

    @staticmethod
    def backward(ctx, *grad_outputs):
        _check_reentrant_backward()
        it = iter(ctx.saved_tensors)
        inputs = [_detached_like(next(it)) if a is _A_TENSOR else a for a in ctx.inputs]
        with enable_grad(), _replayed_rng(ctx.rng):
            outputs = ctx.run_function(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() "
                               "is not necessary")
        engine.backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None
                                    for a in inputs)


def _check_reentrant_backward():
    if is_grad_enabled():
        raise RuntimeError("ak.checkpoint(use_reentrant=True) does not support "
                           "create_graph=True (double backward): its backward runs on "
                           "detached inputs; use use_reentrant=False")
    if not engine._is_checkpoint_valid():
        raise RuntimeError("ak.checkpoint(use_reentrant=True) is not compatible with "
                           "ak.autograd.grad(): it accumulates into .grad; use "
                           "use_reentrant=False")


def _detached_like(t):
    d = t.detach()
    d.requires_grad = t.requires_grad
    return d


__all__ = ["checkpoint"]

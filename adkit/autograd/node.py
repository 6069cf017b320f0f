"""Backward-graph nodes: the base `Node`, `AccumulateGrad` for leaves, and saved tensors.

Owns: what every node of the backward graph carries (`next_functions`, hooks, sequence
number, metadata), leaf gradient accumulation and the saved-tensor records with their
version checks. Does not: walk the graph (engine.py) or run forwards (function.py).
"""
import itertools
import threading
import weakref

import numpy as np

from .._hooks import HookDict, add_hook
from ..tensor import Tensor, _make
from .grad_mode import STATE

SEQUENCE = itertools.count()
_LAST = 2 ** 62  # AccumulateGrad runs as soon as it is ready, like PyTorch's


# A node's edge for an argument that needs no gradient; NOT_TENSOR (equal, but a
# different object: not a literal, which the compiler would share) marks an argument
# that was no tensor at all.
NO_EDGE = (None, 0)
NOT_TENSOR = tuple([None, 0])


class Node:
    """A node of the backward graph. `_edges[i]` is `(node, output_nr)` for the i-th
    argument of the forward op (`(None, 0)` where it needs no gradient); its `_run`
    returns one gradient per edge. `_output_meta[i]` is `(shape, dtype)` of output i:
    what the gradients flowing into it must be (the engine checks them)."""

    _edges = ()
    _output_meta = ()
    _num_outputs = 1
    _pre_hooks = None
    _post_hooks = None
    _tensor_pre_hooks = None
    _retain_grad_hooks = None
    _metadata = None
    _sequence_nr = 0
    _saved = ()  # what _release frees (see BackwardCFunction)
    # False once any hook is registered: the engine's fast path reads this one flag
    _no_hooks = True

    def name(self):
        return type(self).__name__

    @property
    def next_functions(self):
        """`(node, output_nr)` for each tensor input of the forward op (PyTorch's)."""
        return tuple(e for e in self._edges if e is not NOT_TENSOR)

    @property
    def metadata(self):
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    def register_hook(self, fn):
        """`fn(grad_inputs, grad_outputs)` runs after this node; a returned tuple replaces
        grad_inputs."""
        if self._post_hooks is None:
            self._post_hooks = HookDict()
        self._no_hooks = False
        return add_hook(self._post_hooks, fn)

    def register_prehook(self, fn):
        """`fn(grad_outputs)` runs before this node; a returned tuple replaces them."""
        if self._pre_hooks is None:
            self._pre_hooks = HookDict()
        self._no_hooks = False
        return add_hook(self._pre_hooks, fn)

    def _add_tensor_pre_hook(self, output_nr, fn):
        if self._tensor_pre_hooks is None:
            self._tensor_pre_hooks = {}
        self._no_hooks = False
        return add_hook(self._tensor_pre_hooks.setdefault(output_nr, HookDict()), fn)

    def _add_retain_grad_hook(self, tensor):
        if self._retain_grad_hooks is None:
            self._retain_grad_hooks = {}
        self._no_hooks = False
        self._retain_grad_hooks[tensor._output_nr] = weakref.ref(tensor)

    def _tensor_hooks(self, output_nr):
        hooks = self._tensor_pre_hooks
        return hooks.get(output_nr) if hooks else None

    def _run(self, grads):
        """Gradients for `next_functions` from the gradients of this node's outputs."""
        raise NotImplementedError(f"{self.name()} cannot be run by the engine")

    def _release(self):
        """Free what the node saved (called after backward unless retain_graph)."""

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"


class AccumulateGrad(Node):
    """The node at a leaf that requires grad: adds the incoming gradient into `.grad`."""

    _sequence_nr = _LAST
    _no_hooks = False  # its tensor hooks live on the leaf: the engine always looks

    def __init__(self, variable):
        self.variable = variable

    @property
    def _output_meta(self):
        data = self.variable._data
        return ((data.shape, data.dtype),)

    def _tensor_hooks(self, output_nr):
        return self.variable._hooks

    @property
    def _tensor_pre_hooks(self):
        return {0: self.variable._hooks} if self.variable._hooks else None

    def _run(self, grads):
        accumulate_into(self.variable, grads[0])
        hooks = self.variable.__dict__.get("_post_accumulate_hooks")
        if hooks:  # register_post_accumulate_grad_hook: called with the tensor itself
            for hook in list(hooks.values()):
                hook(self.variable)
        return ()


def accumulate_into(var, grad):
    """`var.grad += grad`, keeping the graph of `grad` when grad mode is on (create_graph),
    and never aliasing a gradient tensor that somebody else holds."""
    if grad is None:
        return
    old = var._grad
    if STATE.enabled:
        var._grad = grad if old is None else old + grad
    elif old is None:
        var._grad = _make(np.array(grad._data, copy=True))
    elif old._requires_grad:
        var._grad = _make(old._data + grad._data)
    else:
        np.add(old._data, grad._data, out=old._data, casting="unsafe")
        old._version_counter[0] += 1


def grad_accumulator(tensor):
    """The (shared) AccumulateGrad node of a leaf, made on first use."""
    ref = tensor._accumulator
    node = ref() if ref is not None else None
    if node is None:
        node = AccumulateGrad(tensor)
        tensor._accumulator = weakref.ref(node)
    return node


def gradient_edge(tensor):
    """`(node, output_nr)` through which gradients reach `tensor`."""
    if tensor._grad_fn is not None:
        return tensor._grad_fn, tensor._output_nr
    return grad_accumulator(tensor), 0


# ---------------------------------------------------------------- saved tensors
# A saved tensor is packed as (tensor, version) for anything but an output of the saving
# node. An output is packed as (data, version counter, version, output_nr): keeping the
# tensor would hold its grad_fn, which holds the pack: a reference cycle.
class _SavedHooks(threading.local):
    def __init__(self):
        self.stack = []  # (pack_hook, unpack_hook) pairs, innermost last
        self.disabled_message = None


SAVED_HOOKS = _SavedHooks()


class _MutationWatch(threading.local):
    """Inside allow_mutation_on_saved_tensors (graph.py): saved tensors by the id of
    their version counter (shared by a tensor and all its views), each a holder
    [tensor, copy made before its first in-place write, or None]."""
    def __init__(self):
        self.watched = None


MUTATION_WATCH = _MutationWatch()


def before_in_place_write(tensor):
    """Copy-on-write for allow_mutation_on_saved_tensors: saved tensors sharing memory
    with `tensor` keep their current values for backward."""
    watched = MUTATION_WATCH.watched
    if watched:
        for holder in watched.get(id(tensor._version_counter), ()):
            if holder[1] is None:
                holder[1] = _make(np.array(holder[0]._data, copy=True))


def pack_saved(node, tensors):
    """Pack the tensors `node` saves for backward, recording their versions now (or,
    under saved_tensors_hooks, keeping whatever the pack hook returns)."""
    if SAVED_HOOKS.stack:
        return _pack_with_hooks(tensors)
    packs = []
    for t in tensors:
        if t is None:
            packs.append(None)
        elif t._grad_fn is node and type(t) is Tensor:
            # t.__dict__ is where forward-AD tangents will be attached: kept so that a
            # backward run under a dual level sees the output's tangent (jvp of grad)
            packs.append((t._data, t._version_counter, t._version_counter[0], t._output_nr,
                          t.__dict__))
        # (a tracer is kept itself: its identity is its graph node, not its data)
        elif t._inference and not STATE.inference:
            raise RuntimeError(INFERENCE_SAVED_MESSAGE)
        else:
            packs.append((t, t._version_counter[0]))
    return tuple(packs)


def _pack_with_hooks(tensors):
    if SAVED_HOOKS.disabled_message is not None:
        raise RuntimeError(SAVED_HOOKS.disabled_message)
    pack_hook, unpack_hook = SAVED_HOOKS.stack[-1]
    prev, STATE.enabled = STATE.enabled, False  # as in PyTorch: hooks run without grad
    try:
        return tuple(None if t is None else (_checked_pack(pack_hook, t), unpack_hook, None)
                     for t in tensors)
    finally:
        STATE.enabled = prev


def _checked_pack(pack_hook, t):
    """pack_hook(t), refusing a hook that writes into t (PyTorch's check: by version)."""
    version = t._version_counter[0]
    packed = pack_hook(t)
    if t._version_counter[0] != version:
        raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors "
                           "provided as input to pack hook cannot be modified by in-place "
                           "operations as this can lead to unexpected side-effects. Please "
                           "open an issue if you need to perform in-place operations on the "
                           "input to a pack hook.")
    return packed


def _checked_unpack(unpack_hook, packed):
    value = unpack_hook(packed)
    if not isinstance(value, Tensor):
        raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got "
                        f"result of type {type(value).__name__}")
    return value


def unpack_saved(node, packs):
    """The saved tensors, after checking that none was modified in place since."""
    result = []
    for p in packs:
        if p is None:
            result.append(None)
        elif len(p) == 2:  # an input, or any tensor but the node's own output
            t, version = p
            if t._version_counter[0] != version:
                raise RuntimeError(_modified_message(node, t._data, t._version_counter,
                                                     version, t._grad_fn, t._output_nr))
            result.append(t)
        elif len(p) == 3:  # packed by a saved_tensors_hooks pack hook
            result.append(_checked_unpack(p[1], p[0]))
        else:
            result.append(_unpack_output(node, p))
    return tuple(result)


def _unpack_output(node, pack):
    """The node's own output, rebuilt from its pack (see pack_saved)."""
    data, counter, version, nr, attrs = pack
    if counter[0] != version:
        raise RuntimeError(_modified_message(node, data, counter, version, node, nr))
    t = _make(data, node, nr, True, counter)
    if "_fw" in attrs:
        t._fw = attrs["_fw"]
    return t


def _modified_message(node, data, counter, version, grad_fn, output_nr):
    what = f"[adkit.{data.dtype.name} {list(data.shape)}]"
    if grad_fn is not None:
        what += f", which is output {output_nr} of {grad_fn.name()},"
    return ("one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: {what} is at version {counter[0]}; expected version "
            f"{version} instead. Hint: the backtrace further above shows the operation "
            "that failed to compute its gradient. The variable in question was changed in "
            "there or anywhere later. Good luck!")


INFERENCE_SAVED_MESSAGE = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make "
    "a clone to get a normal tensor and use it in autograd, or use `ak.no_grad()` instead "
    "of `ak.inference_mode()`.")

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need "
    "to backward through the graph a second time or if you need to access saved tensors "
    "after calling backward.")

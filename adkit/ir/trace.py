"""Tracing: `ak.trace(f, *example_args)` runs f on abstract tensors and records every
`Function.apply` as one node of an `ak.ir.Graph`.

Owns: `TracerTensor` (a Tensor that knows only shape and dtype), `TracingInterpreter`
(the interpreter-stack level that turns apply calls into nodes) and `trace`.
An in-place op that writes a traced value nothing else can see (no view, no views, not
an input) is recorded as its class's `traced_out_of_place` op, so the graph stays pure.
Does not: evaluate, print or transform graphs.
Invariant: a tracer's `_data` is a zero-strided stand-in array: shape/dtype code works,
and reading values raises TracerValueError with what to do instead.
"""
import os
import sys

import numpy as np

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd._eager import needs_tape, record
from ..tensor import AbstractTensor, Tensor
from . import printing, rules
from .graph import Graph
from .tracer_views import mark_views


class TracerValueError(RuntimeError):
    """A traced function tried to read the value of a tensor."""


_HOW_TO_FIX = ("While tracing, tensors have a shape and a dtype but no values, so Python "
               "control flow or conversions cannot depend on them. Use ak.where(cond, a, b) "
               "to choose by value, pass the value as a static (non-tensor) argument, or "
               "run the function eagerly instead of tracing it.")


class TracerTensor(AbstractTensor):
    """A tensor inside a trace: (graph node, output number) plus shape and dtype."""

    __slots__ = ("_interpreter", "_node", "_out")

    def _value_error(self, what):
        raise TracerValueError(f"{what} needs the value of a traced tensor "
                               f"({self._describe()}). {_HOW_TO_FIX}")

    def _describe(self):
        spec = rules.spec_of(self)
        return f"{spec.dtype.name}{list(spec.shape)}"

    def __repr__(self):
        return f"TracerTensor({self._describe()}, node={self._node})"

    def detach(self):
        """The same traced value, cut from the autograd tape (still a tracer)."""
        return _new_tracer(self._interpreter, self._node, self._out, rules.spec_of(self))

    @property
    def data(self):
        return self.detach()


def _new_tracer(interpreter, node, out, spec):
    t = TracerTensor.__new__(TracerTensor)
    t._data = rules.stand_in(spec)
    t._requires_grad = False
    t._grad_fn = None
    t._output_nr = 0
    t._grad = None
    t._version_counter = [0]
    t._retains_grad = False
    t._hooks = None
    t._accumulator = None
    t._base = None
    t._interpreter, t._node, t._out = interpreter, node, out
    return t


class TracingInterpreter(_dispatch.Interpreter):
    """Records each Function.apply as an op node; concrete tensors become const nodes."""

    # what the trace is for, as errors name it ("ak.jit(f)"): set by trace()'s callers
    purpose = None
    # trace_for's frame while it runs: where a node's source line is looked for ends
    # there (the caller's line is not the traced code's)
    boundary = None

    def __init__(self, graph):
        self.graph = graph
        self._consts = {}  # id(tensor) -> const node, so a closed-over tensor is one node

    def new_input(self, spec, index):
        return _new_tracer(self, self.graph.add_input(spec, index), 0, spec)

    def lift(self, value):
        """(node, out) for a tensor argument: a tracer of this trace, or a constant."""
        if isinstance(value, TracerTensor):
            if value._interpreter is not self:
                raise TracerValueError("a traced tensor of another trace reached this one "
                                       "(closing over an outer trace's values is not "
                                       "supported); pass it as an argument instead")
            return value._node, value._out
        key = id(value)
        if key not in self._consts:  # captured by value, as JAX does: a snapshot
            node = self.graph.add_const(np.array(value._data))
            if value.requires_grad:  # jit then records calls for autograd (a parameter)
                self.graph.nx.nodes[node]["requires_grad"] = True
            self._consts[key] = (node, value)
        return self._consts[key][0], 0

    def process(self, cls, args):
        """Add one op node for `cls(*args)`; like the eager path, a call that needs grad
        is taped (so grad() while tracing builds the backward graph from the ops' own
        rules). Forward-AD levels above this one have already handled tangents."""
        outputs = self._add_node(cls, args)
        if cls.is_view and isinstance(args[0], Tensor):
            if isinstance(args[0], TracerTensor) and "_of_constant" not in args[0].__dict__:
                mark_views(cls, args, outputs)  # so a write through it reaches its base
            else:  # a view of a constant: the graph cannot write into the constant
                for out in outputs if isinstance(outputs, tuple) else (outputs,):
                    out._of_constant = True
        if needs_tape(args):
            return record(cls, args, outputs)
        return outputs

    def _add_node(self, cls, args):
        tensors, params = rules.split_args(cls, args, _is_tensor)
        edges = {pos: self.lift(t) for pos, t in tensors.items()}
        specs_in = {pos: self.graph.specs_of(u)[out] for pos, (u, out) in edges.items()}
        try:
            inferred = _inferred(cls, specs_in, params)
        except TracerValueError:
            raise
        except Exception as e:  # the user's call does not fit the op: say where it is
            raise _inference_error(cls, specs_in, e, _user_source(self.boundary),
                                   self.purpose) from None
        op, aliases = cls, inferred.aliases
        if self._writes_unseen(cls, aliases, tensors):
            op, aliases = cls.traced_out_of_place, (None,) * len(aliases)
        node = self.graph.add_op(op, edges, params, inferred.specs,
                                 source=_user_source(self.boundary),
                                 aliases=aliases)
        outs = []
        for i, (spec, alias) in enumerate(zip(inferred.specs, inferred.aliases)):
            if alias is not None:  # an in-place op: the input now names the new value
                t = tensors[alias]
                if not isinstance(t, TracerTensor) or "_of_constant" in t.__dict__:
                    raise TracerValueError(
                        f"{printing.op_name(cls)} modifies in place a tensor (or a view of "
                        "one) that is not a traced value: a closed-over tensor, or one made "
                        "inside with ak.zeros/ak.tensor..., which tracing records as a "
                        "constant; the graph cannot change a constant: clone it first, or "
                        "pass it as an argument, or use out-of-place ops")
                t._node, t._out = node, i
                outs.append(t)
            else:
                outs.append(_new_tracer(self, node, i, spec))
        return tuple(outs) if inferred.is_tuple else outs[0]

    def _writes_unseen(self, cls, aliases, tensors):
        """Whether in-place op `cls`, whose class names its out-of-place version
        (`traced_out_of_place`), writes a value nothing else can see: a traced op result
        that is no view and has no live views. Recording the out-of-place op then
        computes the same (the tracer names the new value, as it would the written one),
        and the graph keeps no in-place node: passes and native code treat it like any
        other. Inputs, constants and views keep the in-place node (their writes are seen
        outside it)."""
        written = [tensors[a] for a in aliases if a is not None]
        if getattr(cls, "traced_out_of_place", None) is None or len(written) != 1:
            return False
        t = written[0]
        if not isinstance(t, TracerTensor) or t._interpreter is not self or \
                t._base is not None or "_of_constant" in t.__dict__:
            return False
        if self.graph.nx.nodes[t._node]["kind"] != "op":
            return False
        return not any(v._base is t for v in t.__dict__.get("_views", ()))


# (op, input specs, params) -> its rules.Inference, for adkit's own out-of-place ops:
# a gradient repeats a few (op, shapes) pairs many times, and inference (stand-in
# arrays, the op's rule) was half of tracing's time per node
_INFERRED = {}
_INFERRED_MAX = 4096


def _inferred(cls, specs_in, params):
    """rules.infer, remembered for adkit's own ops that write nothing in place (their
    shape rules depend on the specs and params alone), when the params are plain."""
    key = None
    if _memoizable(cls):
        try:  # specs_in is in position order (built from split_args' tensors)
            key = (cls, tuple(specs_in.items()), _plain(params) if params else _NO_PARAMS)
            found = _INFERRED.get(key)  # (hashes the key: a dtype's hash is Python's)
        except TypeError:  # an unhashable or unfamiliar param: inferred each time
            key = found = None
        if found is not None:
            return found
    inferred = rules.infer(cls, specs_in, params)
    if key is not None:
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        _INFERRED[key] = inferred
    return inferred


_MEMOIZABLE = {}  # op class -> whether _inferred may remember its inferences


def _memoizable(cls):
    found = _MEMOIZABLE.get(cls)
    if found is None:
        if len(_MEMOIZABLE) > 4096:  # classes made on the fly (user Functions in a loop)
            _MEMOIZABLE.clear()
        found = _MEMOIZABLE[cls] = getattr(cls, "modifies", None) is None and \
            getattr(cls, "__module__", "").startswith("adkit.")
    return found


_PLAIN_TYPES = (bool, int, float, str, type(None))


def _plain(value):
    """A hashable form of a param that keeps its type (2, 2.0 and True differ, and
    so may a result's dtype); TypeError for anything but plain values, tuples of them
    and dicts of them."""
    t = type(value)
    if t in _PLAIN_TYPES:
        return t, value
    if t is tuple or t is list:
        return t, tuple(_plain(v) for v in value)
    if t is dict:
        return t, tuple((k, _plain(v)) for k, v in value.items())
    raise TypeError(f"{t.__name__} is not a plain param")


_NO_PARAMS = _plain({})  # most nodes' (elementwise ops on tensors only)


def _inference_error(cls, specs_in, error, source=None, purpose=None):
    """The same kind of error, saying which op failed on which input shapes, at which
    line of the user's code, in which transform (and, for a user Function, how to give
    it a shape rule). adkit's own frames are left out (raised `from None`)."""
    shapes = ", ".join(f"{s.dtype.name}{list(s.shape)}" for s in specs_in.values())
    where = ", ".join(w for w in (f"at {source}" if source else None,
                                  f"while tracing {purpose}" if purpose else None) if w)
    message = (f"{printing.op_name(cls)} on inputs of shape {shapes}"
               f"{f' ({where})' if where else ''}: {error}")
    if not cls._arrays_in and getattr(cls, "infer", None) is None:
        message += (". While tracing, adkit learns a Function's output shapes by running its "
                    "forward on zeros; if that cannot work, give the Function a staticmethod "
                    "`infer(*args)` returning its output(s) as arrays or "
                    "adkit.ir.TensorSpec(shape, dtype)")
    try:
        return type(error)(message)
    except Exception:
        return RuntimeError(message)


_ADKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# code file name -> its base name, or None for adkit's own files: asked once per node,
# and most nodes come from a handful of files
_SOURCE_NAMES = {}


def _source_name(filename):
    if filename not in _SOURCE_NAMES:
        if len(_SOURCE_NAMES) > 4096:  # generated code's names in long sessions
            _SOURCE_NAMES.clear()
        _SOURCE_NAMES[filename] = None if filename.startswith(_ADKIT_DIR) else \
            os.path.basename(filename)
    return _SOURCE_NAMES[filename]


def _user_source(boundary):
    """file:line of the innermost frame outside adkit (where the user called the op),
    looked for below the trace's `boundary` frame: None for an op the traced code did
    not call itself (a gradient's, made by the autograd engine). The line that called
    the jitted function is no op's source: a graph's source lines are part of its disk
    cache key (plan_cache.py), which would then depend on where it was called from."""
    names = _SOURCE_NAMES
    frame = sys._getframe(2)
    while frame is not None and frame is not boundary:  # (~10 frames a node)
        filename = frame.f_code.co_filename
        name = names[filename] if filename in names else _source_name(filename)
        if name is not None:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _is_tensor(x):
    return isinstance(x, Tensor)


def _is_tensor_leaf(x):
    return isinstance(x, (Tensor, np.ndarray, rules.TensorSpec))


def trace(f, *example_args, **kwargs):
    """Trace `f(*example_args, **kwargs)` into a Graph. Tensor, ndarray and
    `ak.ir.TensorSpec(shape, dtype)` leaves of the argument pytrees become inputs, in
    order; other leaves and all kwargs are static. Only shapes and dtypes of the examples
    are used, never their values, so specs can stand for them (mixed freely)."""
    return trace_for(f"ak.trace({_name(f)})", f, example_args, kwargs)


def _name(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or \
        type(f).__name__


def trace_for(purpose, f, example_args, kwargs):
    """`trace`, for a caller that errors should name (`purpose`, e.g. "ak.jit(f)")."""
    graph = Graph()
    interp = TracingInterpreter(graph)
    interp.purpose = purpose
    leaves, in_tree = tree_flatten(example_args, is_leaf=_is_tensor_leaf)
    traced_leaves, n_inputs = [], 0
    for i, leaf in enumerate(leaves):
        if _is_tensor_leaf(leaf):
            spec = leaf if isinstance(leaf, rules.TensorSpec) else rules.spec_of(leaf)
            traced_leaves.append(interp.new_input(spec, n_inputs))
            n_inputs += 1
        else:
            graph.static_args[i] = leaf
            traced_leaves.append(leaf)
    graph.in_tree = in_tree
    interp.boundary = sys._getframe()
    try:
        with _dispatch.interpreting(interp):
            result = f(*tree_unflatten(in_tree, traced_leaves), **kwargs)
    finally:
        interp.boundary = None  # (a frame holds its locals: no cycle is kept)
    out_leaves, graph.out_tree = tree_flatten(result, is_leaf=_is_tensor_leaf)
    for i, leaf in enumerate(out_leaves):
        if isinstance(leaf, Tensor):
            graph.add_output(interp.lift(leaf))
        else:
            graph.static_outputs[i] = leaf
    return graph

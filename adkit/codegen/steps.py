"""The steps a compiled graph's plan is made of: one class per kind of step.

Owns: `Step` (the protocol every step follows), `SegmentStep` (one call into native
code, running a list of native calls), `NumpyStep` (a node without a lowering, on numpy)
and `BufferValues` (natively made results handed to numpy). Does not: make the plan
(plan.py), emit the calls (program.py) or hold the buffers (jit.py).

A plan is a list of steps run in order on `values` (one slot per graph value: Tensors)
and `arrays` (the buffer list native code reads). A new kind of step is one class
here: the planner, the buffer sharing and jit.py see steps only through this protocol.
"""
import ctypes
from collections import namedtuple

import numpy as np

from ..ir import printing, rules
from ..ops._helpers import c_strides
from ..tensor import Tensor, _make
from . import program
from .deferred import DeferredAttribute


class Step:
    """One step of a plan. Besides `run`, a step tells the planner which buffers it
    uses when (`uses`), which buffers numpy gets views of (`fetched`), and emits and
    links its native code, if it has any (`emit`, `link`)."""

    def run(self, values, arrays):
        """Run on the value slots and the buffer list."""
        raise NotImplementedError(f"{type(self).__name__} has no run rule")

    def uses(self):
        """[(buffers read, buffers written)], one entry per moment of the step, in
        order (buffers whose lives do not overlap share memory)."""
        return [((), ())]

    def fetched(self):
        """The buffers this step gives numpy views of (they keep their own memory)."""
        return set()

    def emit(self, module, vector_bytes):
        """Add the step's native code to the LLVM module (most steps have none)."""

    def link(self, native):
        """Bind the step to its compiled code in `native` (a runtime.NativeModule)."""


class SegmentStep(Step):
    """One call into native code: entry function `name` running `calls` (NativeCalls)
    in order on the buffer list. When a call may fail (a bounds check), `status` is the
    buffer it reports in, and `fn` raises the failed check's error (the entry returns
    its code); otherwise `fn` is the entry itself."""

    unstored_attributes = ("fn",)  # set by link (plan_codec.py stores the rest)
    calls = DeferredAttribute()  # (a stored plan's runs need the entry point only)

    def __init__(self, name, calls, status=None):
        self.name, self.calls, self.status, self.fn = name, calls, status, None
        self.checks = []

    @property
    def kernels(self):
        return [kernel for call in self.calls for kernel in call.kernels]

    def run(self, values, arrays):
        self.fn(arrays)

    def uses(self):
        return [(call.reads, call.writes) for call in self.calls]

    def emit(self, module, vector_bytes):
        self.checks = program.emit_segment(module, self.name, self.calls, vector_bytes,
                                           self.status)

    def link(self, native):
        entry = native.function(self.name, ctypes.c_int64, ctypes.py_object)
        self.fn = entry if self.status is None else self._checked(entry)

    def _checked(self, entry):
        """The entry, raising the error of the check whose code it returns."""
        status, checks = self.status, self.checks

        def run(arrays):
            code = entry(arrays)
            if code:
                raise checks[code - 1].error(arrays[status])
        return run


class BufferValues(Step):
    """Natively made results as numpy values: their buffers, whole, or viewed as their
    Layouts say when they live in a part of one (a batch laid out side by side).
    `pairs`: [(value slot, Layout)]."""

    def __init__(self, slots_and_layouts):
        self.pairs = [(slot, layout.buffer, _view_of_buffer(layout))
                      for slot, layout in slots_and_layouts]

    def run(self, values, arrays):
        for slot, buf, view in self.pairs:
            if values[slot] is None:
                values[slot] = _make(arrays[buf] if view is None else view(arrays[buf]))

    def fetched(self):
        return {buf for _, buf, _ in self.pairs}


def _view_of_buffer(layout):
    """None when `layout` is its buffer's whole array in C order, else the BufferView
    making the numpy view of it from that array."""
    shape, strides = tuple(layout.shape), tuple(layout.strides)
    if not layout.offset and strides == c_strides(shape):
        return None
    itemsize = np.dtype(layout.dtype).itemsize
    return BufferView(shape, np.dtype(layout.dtype), layout.offset * itemsize,
                      tuple(s * itemsize for s in strides))


class BufferView(namedtuple("BufferView", ("shape", "dtype", "offset", "strides"))):
    """A strided numpy view of a buffer's array (offset and strides in bytes): data, so
    a plan holding it can be stored (plan_codec.py)."""

    __slots__ = ()

    def __call__(self, array):
        return np.ndarray(self.shape, self.dtype, buffer=array, offset=self.offset,
                          strides=self.strides)


class NumpyStep(Step):
    """A node without a native lowering: its op on numpy, between segments. `fetch`
    (steps) gives it native values as numpy views; `publish` ([(slot, buffer)]: Buffer
    objects) puts its float results where native code reads them (contiguous, checked
    against the traced spec). Also re-makes a native view as numpy's view of its base."""

    def __init__(self, graph, n, args, base, fetch, publish):
        self.graph, self.n, self.args, self.base = graph, n, args, base
        self.fetch = fetch
        self.publish = [(slot, buf.index, buf.shape, buf.dtype) for slot, buf in publish]
        data = graph.nx.nodes[n]
        self.op = op = data["op"]
        self.n_out = len(data["specs"])
        # the positional arguments with the static ones in place, tensors filled per call
        self.template = rules.join_args(op, dict.fromkeys(args), data["params"])
        # a built-in op on arrays with one output needs none of apply's autograd
        # bookkeeping here (nothing in a compiled run requires grad): call its forward
        self.direct = getattr(op, "_arrays_in", False) and op.modifies is None

    def fetched(self):
        return set().union(*(step.fetched() for step in self.fetch))

    def run(self, values, arrays):
        if values[self.base] is not None:  # a view already made for another step
            return
        for fetch in self.fetch:
            fetch.run(values, arrays)
        call = list(self.template)
        for pos, slot in self.args.items():
            call[pos] = values[slot]
        try:
            if self.direct:
                raw = self.op.forward(*[a._data if isinstance(a, Tensor) else a
                                        for a in call])
                if not isinstance(raw, (tuple, list)):
                    raw = (raw,)
                for i in range(self.n_out):
                    r = raw[i]
                    values[self.base + i] = _make(r if type(r) is np.ndarray
                                                  else np.asarray(r))
            else:
                result = self.op.apply(*call)
                if self.n_out == 1 and not isinstance(result, tuple):
                    values[self.base] = result
                else:
                    values[self.base:self.base + self.n_out] = result
            self._publish(values, arrays)
        except Exception as e:
            e.add_note(f"While executing node {self.n}: "
                       f"{printing.node_line(self.graph, self.n)}")
            raise

    def _publish(self, values, arrays):
        for slot, buf, shape, dtype in self.publish:
            a = values[slot]._data
            if a.shape != shape or a.dtype != dtype:
                raise RuntimeError(
                    f"jit: this node made a {a.dtype}{list(a.shape)} value where "
                    f"tracing recorded {np.dtype(dtype)}{list(shape)}; compiled code "
                    f"relies on the traced shape")
            flags = a.flags
            arrays[buf] = a if flags.c_contiguous and flags.aligned \
                else np.ascontiguousarray(a)

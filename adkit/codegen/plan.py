"""The run plan of a compiled graph: where each value lives and what runs where.

Owns: `Planner` (layouts, buffers, native calls, the schedule, shared memory blocks)
and the steps a plan is made of: `SegmentStep` (one call into native code),
`NumpyStep` (a node without a lowering, on numpy) and `BufferValues` (native results
handed to numpy). Does not: emit IR (kernels.py, program.py) or run the plan (jit.py).
"""
import os

import numpy as np

from ..ir import passes, printing, rules
from ..ir.passes.cleanup import has_in_place_ops
from ..ir.passes.fuse import REDUCTIONS, contraction, reduction_dims
from ..ops.indexing import AdvancedIndex, IndexScatter
from ..ops.join import Cat
from ..ops.linalg import _MatrixProduct
from ..ops.reduction import Mean
from ..ops.shape import Flip, Reshape, View, _flip_axes
from ..ops.unary import Clone
from ..tensor import Tensor, _make
from . import kernels, program

# Threads: a kernel is split over the cores when one thread would take longer than
# PARALLEL_MIN_NS by this estimate (ns per element: the loop and memory, each plain
# arithmetic step, each math-library call). Starting and joining a native thread
# costs ~70-140 us on the 2-core development machine, so below that one thread is
# faster (measured crossovers: x * 2 + 1 at ~1e6 elements, exp at ~5e5, tanh(sin(x))
# at ~1e5; benchmarks in the closing note of issue 6).
PARALLEL_MIN_NS = 500_000
NS_PER_ELEMENT, NS_PER_STEP = 0.35, 0.05
NS_PER_MATH_CALL = {"exp": 0.5, "log": 0.5, "log1p": 0.6, "expm1": 0.6, "sigmoid": 0.6}
NS_PER_OTHER_MATH_CALL = 1.2  # sin, tanh, pow, erf...
_MATH_OPS = {"exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh",
             "asin", "acos", "atan", "erf", "pow", "atan2", "sigmoid"}


def estimated_ns(kernel):
    """A single thread's time for `kernel` by the cost model above."""
    per_element = NS_PER_ELEMENT
    for step in kernel.steps:
        if isinstance(step, kernels.Contraction):
            per_element += 2 * step.k * NS_PER_STEP
            continue
        name = getattr(step.op, "public_name", None)
        per_element += NS_PER_MATH_CALL.get(name, NS_PER_OTHER_MATH_CALL) \
            if name in _MATH_OPS else NS_PER_STEP
    return kernel.size * per_element


def root(array):
    """The array that owns the memory `array` views."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class Planner:
    """Decides where each value lives and what runs where, once per Compiled.

    Values of float and bool dtypes get a Layout: inputs and constants their own
    buffers; the results of kernels, matmuls and copies fresh contiguous buffers (reused
    between calls, or handed out for graph outputs); views a Layout of their base's
    buffer (found by running the op's numpy forward on a probe array and reading the
    strides numpy chose). A numpy step's result that native code reads is put in a
    buffer (contiguous, checked against its traced spec) right after the step. Native
    nodes are scheduled into as few segments as the dependencies allow."""

    def __init__(self, graph):
        self.graph = graph
        self.slots, self.layouts, self.buffers = {}, {}, []
        self.consts, self.kernels, self.kernel_calls = [], [], []
        self.template_specs, self.result_specs = {}, {}
        self.input_buffers, self.publish, self.calls = [], {}, {}
        returned = [graph.args_of(n)[0][1:] for n in graph.outputs]
        # with in-place ops, every node runs with numpy in program order: a write
        # through a view reaches other values only by sharing numpy's memory
        self.in_place = has_in_place_ops(graph)
        kind = {}
        for n in graph.topo_order():
            data = graph.nx.nodes[n]
            if data["kind"] == "output":
                continue
            base = len(self.slots)
            for i in range(len(graph.specs_of(n))):
                self.slots[(n, i)] = base + i
            if data["kind"] == "input":
                spec = graph.specs_of(n)[0]
                if _native_dtype(spec) and not self.in_place:
                    buf = self._buffer(None)
                    self.input_buffers.append((buf, graph.inputs.index(n)))
                    self.layouts[(n, 0)] = _contiguous(buf, spec)
            elif data["kind"] == "const":
                tensor = _make(data["value"])
                self.consts.append((base, tensor))
                if _native_dtype(graph.specs_of(n)[0]):
                    array = np.ascontiguousarray(tensor._data)
                    buf = self._buffer(array)
                    self.layouts[(n, 0)] = _contiguous(buf, graph.specs_of(n)[0])
            else:
                kind[n] = "numpy" if self.in_place else self._classify(n, returned)
        self.kind = kind
        self.n_slots = len(self.slots)
        self.input_slots = [self.slots[(n, 0)] for n in graph.inputs]
        self._schedule(kind)
        self.output_slots = [self.slots[key] for key in returned]
        self.output_buffers = [self.layouts[key].buffer if kind.get(key[0]) in (
            "kernel", "matmul", "copy") else None for key in returned]
        self.output_fetch = self._fetch(returned)

    # ------------------------------------------------------------ values and buffers
    def _buffer(self, spec_or_array, result=False):
        buf = len(self.buffers)
        self.buffers.append(spec_or_array)
        if isinstance(spec_or_array, np.ndarray):
            self.template_specs[buf] = spec_or_array
        elif spec_or_array is not None:
            (self.result_specs if result else self.template_specs)[buf] = spec_or_array
        return buf

    def _layout(self, key):
        """The Layout of value `key`, giving a numpy step's float result a buffer it
        is copied into; None for values native code cannot read."""
        if key in self.layouts:
            return self.layouts[key]
        spec = self.graph.specs_of(key[0])[key[1]]
        if not _native_dtype(spec):
            return None
        buf = self._buffer(None)  # filled per call by the step that makes it
        self.publish.setdefault(key[0], []).append((key[1], buf, spec))
        self.layouts[key] = _contiguous(buf, spec)
        return self.layouts[key]

    def _result(self, n, i, returned):
        spec = self.graph.specs_of(n)[i]
        buf = self._buffer((tuple(spec.shape), spec.dtype.np), result=(n, i) in returned)
        self.layouts[(n, i)] = _contiguous(buf, spec)
        return self.layouts[(n, i)]

    # ------------------------------------------------------------ what runs where
    def _classify(self, n, returned):
        graph = self.graph
        data = graph.nx.nodes[n]
        op = data["op"]
        args = graph.args_of(n)
        if op is passes.FusedKernel:
            ins = [self._layout((u, out)) for _, u, out in sorted(args)]
            kernel, scales, ins = _kernel_for(graph, n, f"kernel{len(self.kernels)}", ins)
            return self._kernel_call(n, kernel, ins, scales, returned)
        if _is_plain_product(graph, n):
            a, b = (self._layout((u, out)) for _, u, out in sorted(args))
            out = program.Layout(None, 0, tuple(data["specs"][0].shape),
                                 program.contiguous_strides(data["specs"][0].shape),
                                 data["specs"][0].dtype.np)
            if a is not None and b is not None and program.MatmulCall.plan(a, b, out):
                out = self._result(n, 0, returned)
                self.calls[n] = program.MatmulCall(a, b, out)
                return "matmul"
        # (view() is left to numpy: whether it may view depends on the caller's strides)
        elif op.is_view and op is not View and getattr(op, "_arrays_in", False) \
                and op.modifies is None \
                and len(args) == 1 and self._layout((args[0][1], args[0][2])) is not None:
            views = _view_layouts(op, data["params"], args[0][0],
                                  self.layouts[(args[0][1], args[0][2])], data["specs"])
            if views is not None:
                for i, layout in enumerate(views):
                    self.layouts[(n, i)] = layout
                return "view"
        copies = self._copy_loops(n, returned)
        if copies is not None:
            self.calls[n] = copies
            return "kernel"
        if op in _MOVES and len(data["specs"]) == 1 and data["specs"][0].dtype.np in _FLOATS:
            call = self._copy_call(n, returned)
            if call is not None:
                self.calls[n] = call
                return "copy"
        return "numpy"

    def _kernel_call(self, n, kernel, ins, scales, returned):
        outs = [self._result(n, i, returned) for i in range(len(self.graph.specs_of(n)))]
        self.calls[n] = self._add_kernel(kernel, ins, outs, scales)
        return "kernel"

    def _add_kernel(self, kernel, ins, outs, scales=None):
        workers = (os.cpu_count() or 1) if estimated_ns(kernel) >= PARALLEL_MIN_NS else 1
        call = program.KernelCall(kernel, ins, outs, workers, scales)
        self.kernels.append(kernel)
        self.kernel_calls.append(call)
        return call

    def _copy_loops(self, n, returned):
        """Strided copy loops (kernels without steps) for ops that copy elements in
        an order strides can describe: a reshape that must copy, clone and contiguous
        (the input in its own order), flip (the input read with negated strides), cat
        (each input into its slice of the output). None for other nodes."""
        graph = self.graph
        data = graph.nx.nodes[n]
        op, spec = data["op"], data["specs"][0]
        if not (isinstance(op, type) and issubclass(op, _COPIES + (Flip, Cat))) or \
                len(data["specs"]) != 1 or spec.dtype.np not in _FLOATS:
            return None
        layouts = [self._layout((u, out)) for _, u, out in graph.args_of(n)]
        if not layouts or any(x is None or x.dtype != spec.dtype.np for x in layouts):
            return None
        if op is Flip:
            (layout,) = layouts
            offset, strides = layout.offset, list(layout.strides)
            axes = _flip_axes(data["params"]["dims"], len(layout.shape)) if layout.shape \
                else ()  # a 0-d value flips to itself
            for axis in axes:
                offset += (layout.shape[axis] - 1) * strides[axis]
                strides[axis] = -strides[axis]
            layouts = [layout._replace(offset=offset, strides=tuple(strides))]
        if op is not Cat:
            if len(layouts) != 1:
                return None
            out = self._result(n, 0, returned)  # C order of the input is the result's
            written = program.contiguous_strides(layouts[0].shape)
            return self._add_kernel(_copy_kernel(self, layouts[0], written), layouts, [out])
        if any(len(x.shape) != len(spec.shape) for x in layouts):
            return None  # PyTorch's legacy skipping of empty 1-D inputs: numpy's job
        out = self._result(n, 0, returned)
        dim, start, calls = data["params"]["dim"] % len(spec.shape), 0, []
        for layout in layouts:  # each input into its slice of the output
            piece = out._replace(offset=start * out.strides[dim], shape=layout.shape)
            calls.append(self._add_kernel(_copy_kernel(self, layout, out.strides),
                                          [layout], [piece]))
            start += layout.shape[dim]
        return calls

    def _copy_call(self, n, returned):
        """A CopyCall for an op that only moves elements (cat, x[index], the
        scatter of index's gradient, a reshape that must copy), with its index tables:
        found by running the op's numpy forward on arrays of element numbers (0 marks
        an element no source gives); a scatter-add's table comes from its key."""
        graph = self.graph
        data = graph.nx.nodes[n]
        op, params, spec = data["op"], data["params"], data["specs"][0]
        args = graph.args_of(n)
        layouts = [self._layout((u, out)) for _, u, out in args]
        if any(x is None or x.dtype != spec.dtype.np or 0 in x.shape for x in layouts) \
                or 0 in spec.shape:
            return None
        size = int(np.prod(spec.shape))
        if size + sum(int(np.prod(x.shape)) for x in layouts) > _MOVE_MAX_ELEMENTS:
            return None  # its index tables would cost more memory than numpy's copy
        if op is IndexScatter and not params["basic"]:  # np.add.at: repeats accumulate
            (layout,) = layouts
            dst = np.arange(size, dtype=np.int64).reshape(spec.shape)[params["key"]]
            if dst.shape != layout.shape:
                return None
            tables = [(0, np.arange(dst.size, dtype=np.int64), dst.reshape(-1))]
            fill, accumulate = True, True
        else:
            probes, start = {}, 1
            for (pos, _, _), layout in zip(args, layouts):
                count = int(np.prod(layout.shape))
                probes[pos] = np.arange(start, start + count, dtype=np.float64).reshape(
                    layout.shape)
                start += count
            try:
                result = np.asarray(op.forward(*rules.join_args(op, probes, params)))
            except Exception:
                return None
            if result.shape != tuple(spec.shape) or result.dtype != np.float64:
                return None
            ids = result.reshape(-1).astype(np.int64)
            tables, start = [], 1
            for k, layout in enumerate(layouts):
                count = int(np.prod(layout.shape))
                dst = np.flatnonzero((ids >= start) & (ids < start + count))
                tables.append((k, ids[dst] - start, dst))
                start += count
            fill, accumulate = bool((ids == 0).any()), False
        out = self._result(n, 0, returned)
        sources = []
        for k, logical, dst in tables:
            offsets = program.element_offsets(layouts[k])[logical]
            sources.append((layouts[k].buffer, self._buffer(np.ascontiguousarray(offsets)),
                            self._buffer(np.ascontiguousarray(dst, dtype=np.int64)),
                            len(dst)))
        return program.CopyCall(sources, out, spec.dtype.np, fill, accumulate)

    def _schedule(self, kind):
        """Steps in an order the dependencies allow, with as many native nodes as
        possible in each segment: ready native nodes first, then ready numpy nodes."""
        graph = self.graph
        deps = {n: {u for _, u, _ in graph.args_of(n) if u in kind} for n in kind}
        pending = [n for n in graph.topo_order() if n in kind]
        done, self.steps, self.segments = set(), [], []
        while pending:
            before, natives = len(done), []
            for n in pending:
                if kind[n] != "numpy" and deps[n] <= done:
                    natives.append(n)
                    done.add(n)
            calls = [call for n in natives if kind[n] in ("kernel", "matmul", "copy")
                     for call in (self.calls[n] if isinstance(self.calls[n], list)
                                  else [self.calls[n]])]
            if calls:
                self.steps.append(f"segment{len(self.segments)}")
                self.segments.append(calls)
            rest = [n for n in pending if n not in done]
            for n in rest:
                if kind[n] == "numpy" and deps[n] <= done:
                    done.add(n)
                    self.steps.append(self._numpy_step(n))
            if len(done) == before:
                raise AssertionError("jit: the plan cannot order these nodes")
            pending = [n for n in rest if n not in done]

    def share_buffers(self):
        """(block sizes in bytes, {buffer: block}) for intermediates that only native
        code reads: each lives from the call that writes it to the last call that
        reads it, and buffers whose lives do not overlap share a block. One that a
        numpy step or an output reads (perhaps through a view numpy keeps) lives to
        the end and keeps its own memory."""
        first, last, pinned, index = {}, {}, set(), 0
        temps = {buf for buf, v in self.template_specs.items()
                 if not isinstance(v, np.ndarray)}
        fetches = [s for s in self.steps if isinstance(s, NumpyStep)]
        for step in fetches:
            pinned |= _fetched_buffers(step.fetch)
        pinned |= _fetched_buffers(self.output_fetch)
        for step in self.steps:
            if not isinstance(step, str):
                index += 1
                continue
            for call in self.segments[int(step[len("segment"):])]:
                index += 1
                for buf in call.writes:
                    first.setdefault(buf, index)
                    last[buf] = max(last.get(buf, index), index)
                for buf in call.reads:
                    last[buf] = max(last.get(buf, index), index)
        sizes, block_of, free = [], {}, []  # free: (size, block) of blocks not in use
        ending = {}
        shareable = sorted((first[b], b) for b in temps - pinned if b in first)
        for start, buf in shareable:
            for b in [b for b, end in ending.items() if end < start]:
                free.append((sizes[block_of[b]], block_of[b]))
                del ending[b]
            shape, dtype = self.template_specs[buf]
            nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
            fits = sorted(f for f in free if f[0] >= nbytes)
            if fits:
                free.remove(fits[0])
                block_of[buf] = fits[0][1]
            else:
                sizes.append(nbytes)
                block_of[buf] = len(sizes) - 1
            ending[buf] = last[buf]
        return sizes, block_of

    def _numpy_step(self, n):
        graph = self.graph
        args = {pos: self.slots[(u, out)] for pos, u, out in graph.args_of(n)}
        fetch = self._fetch([(u, out) for _, u, out in graph.args_of(n)])
        publish = [(self.slots[(n, 0)] + i, buf, tuple(spec.shape), spec.dtype.np)
                   for i, buf, spec in self.publish.get(n, ())]
        return NumpyStep(graph, n, args, self.slots[(n, 0)], fetch, publish)

    def _fetch(self, keys):
        """Steps that give natively made values (among `keys`) numpy values, in
        dependency order: a kernel's or matmul's result is its buffer; a view is its
        op's numpy forward on its base's value (so views of inputs see the caller's
        real strides, exactly as in eager mode)."""
        steps, seen = [], set()

        def visit(key):
            u = key[0]
            if u in seen or self.kind.get(u) not in ("kernel", "matmul", "copy", "view"):
                return
            seen.add(u)
            if self.kind[u] == "view":
                (_, v, v_out), = self.graph.args_of(u)
                visit((v, v_out))
                steps.append(NumpyStep(self.graph, u, {self.graph.args_of(u)[0][0]:
                                                        self.slots[(v, v_out)]},
                                        self.slots[(u, 0)], [], []))
            else:
                n_out = len(self.graph.specs_of(u))
                steps.append(BufferValues([(self.slots[(u, i)], self.layouts[(u, i)].buffer)
                                            for i in range(n_out)]))
        for key in keys:
            visit(key)
        return steps


def _fetched_buffers(fetches):
    """The buffers a list of fetch steps gives numpy views of."""
    found = set()
    for step in fetches:
        if isinstance(step, BufferValues):
            found |= {buf for _, buf in step.pairs}
        else:
            found |= _fetched_buffers(step.fetch)
    return found


class BufferValues:
    """A natively made result as a numpy value: its (whole, contiguous) buffer."""

    def __init__(self, slots_and_buffers):
        self.pairs = slots_and_buffers

    def run(self, values, arrays):
        for slot, buf in self.pairs:
            if values[slot] is None:
                values[slot] = _make(arrays[buf])


class SegmentStep:
    """One call into native code: a segment's entry function on the buffer list."""

    def __init__(self, fn):
        self.fn = fn

    def run(self, values, arrays):
        self.fn(arrays)


class NumpyStep:
    """A node without a native lowering: its op on numpy, between segments. `fetch`
    gives it native values as numpy views; `publish` puts its float results where
    native code reads them (contiguous, checked against the traced spec)."""

    def __init__(self, graph, n, args, base, fetch, publish):
        self.graph, self.n, self.args, self.base = graph, n, args, base
        self.fetch, self.publish = fetch, publish
        data = graph.nx.nodes[n]
        self.op = op = data["op"]
        self.n_out = len(data["specs"])
        # the positional arguments with the static ones in place, tensors filled per call
        self.template = rules.join_args(op, dict.fromkeys(args), data["params"])
        # a built-in op on arrays with one output needs none of apply's autograd
        # bookkeeping here (nothing in a compiled run requires grad): call its forward
        self.direct = getattr(op, "_arrays_in", False) and op.modifies is None

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
        except Exception as e:
            e.add_note(f"While executing node {self.n}: "
                       f"{printing.node_line(self.graph, self.n)}")
            raise


# ops that only move elements: native code copies them with index tables (two int64
# per element moved, so only up to this many elements)
_MOVE_MAX_ELEMENTS = 1 << 20
_MOVES = (Cat, AdvancedIndex, IndexScatter)  # cat: when a strided copy cannot do it
# ops that copy their input in its own (C) order: one strided copy loop, any size
_COPIES = (Reshape, Clone)  # and their subclasses (contiguous is a clone)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _copy_kernel(planner, layout, out_strides):
    """A kernel with no steps: `layout`'s elements, in its own order, to out_strides."""
    out = kernels.Output(("in", 0), out_strides, None)
    return kernels.Kernel(f"kernel{len(planner.kernels)}", layout.dtype, layout.shape,
                          [layout.strides], [], [out])


def _native_dtype(spec):
    """Whether native code can hold values of spec's dtype (kernels read and write
    bools; everything else it does is float32/float64)."""
    return spec.dtype.np in _FLOATS or spec.dtype.np == np.bool_


def _contiguous(buf, spec):
    shape = tuple(spec.shape)
    return program.Layout(buf, 0, shape, program.contiguous_strides(shape), spec.dtype.np)


def _view_layouts(op, params, pos, layout, specs):
    """The Layouts of view op `op`'s results on `layout`: numpy's own forward run on a
    probe array laid out like it, its results' offsets and strides read off. None when
    numpy copies (e.g. reshaping a transpose) or the value is empty."""
    if 0 in layout.shape or any(s < 0 for s in layout.strides):
        return None
    dtype = np.dtype(layout.dtype)
    extent = layout.offset + 1 + sum((n - 1) * s for n, s in zip(layout.shape,
                                                                 layout.strides))
    memory = np.empty(extent, dtype)
    probe = np.ndarray(layout.shape, dtype, buffer=memory, offset=layout.offset *
                       dtype.itemsize, strides=tuple(s * dtype.itemsize
                                                     for s in layout.strides))
    try:
        result = op.forward(*rules.join_args(op, {pos: probe}, params))
    except Exception:
        return None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    start = memory.__array_interface__["data"][0]
    layouts = []
    for r, spec in zip(results, specs):
        if not isinstance(r, np.ndarray) or root(r) is not memory or r.dtype != dtype \
                or r.shape != tuple(spec.shape):
            return None
        offset, rest = divmod(r.__array_interface__["data"][0] - start, dtype.itemsize)
        if rest or any(s % dtype.itemsize or s < 0 for s in r.strides):
            return None
        layouts.append(program.Layout(layout.buffer, offset, r.shape,
                                      tuple(s // dtype.itemsize for s in r.strides), dtype))
    return layouts if len(layouts) == len(specs) else None


def _is_plain_product(graph, n):
    data = graph.nx.nodes[n]
    op = data["op"]
    if not (isinstance(op, type) and issubclass(op, _MatrixProduct)):
        return False
    arg_specs = [graph.specs_of(u)[out] for _, u, out in graph.args_of(n)]
    out = data["specs"][0]
    return (len(arg_specs) == 2 and out.dtype.np.kind == "f"
            and all(s.dtype == out.dtype for s in arg_specs))


def _kernel_for(graph, n, name, in_layouts):
    """The Kernel of FusedKernel node n reading `in_layouts`: the sub-graph's
    elementwise ops as steps, its reductions as combining outputs, its matmuls as
    Contractions (each operand once more as an input, with strides that place a row or
    a column at each iteration point); and {output: scale} for means, and the layouts
    of the kernel's inputs (in_layouts, then the matmul operands')."""
    sub = graph.nx.nodes[n]["params"]["graph"]
    index = {i: k for k, i in enumerate(sub.inputs)}
    steps, position, reduced = [], {}, {}
    members = [m for m in sub.op_nodes if reduction_dims(sub, m) is None]
    if members:
        shape = tuple(sub.specs_of(members[0])[0].shape)
    else:
        shape = tuple(sub.specs_of(sub.args_of(sub.op_nodes[0])[0][1])[0].shape)
    layouts = list(in_layouts)
    strides = [program.broadcast_strides(layout, shape) for layout in in_layouts]
    read_in_place = set()  # inputs an elementwise step reads at the iteration point

    def ref(u):
        if u in index:
            read_in_place.add(index[u])
            return ("in", index[u])
        return ("tmp", position[u])
    for m in sub.op_nodes:
        md = sub.nx.nodes[m]
        dims = reduction_dims(sub, m)
        if dims is not None:
            reduced[m] = dims
            continue
        position[m] = len(steps)
        if contraction(sub, m) is not None:
            (_, a, _), (_, b, _) = sub.args_of(m)
            a_ref, a_k = _operand(layouts, strides, in_layouts[index[a]], shape, 0)
            b_ref, b_k = _operand(layouts, strides, in_layouts[index[b]], shape, 1)
            steps.append(kernels.Contraction(a_ref, b_ref, contraction(sub, m), a_k, b_k))
            continue
        args = []
        for pos, u, _ in sub.args_of(m):
            while len(args) < pos:
                args.append(None)
            args.append(ref(u))
        steps.append(kernels.Step(md["op"], args, md["params"]))
    outputs, scales = [], {}
    for k, o in enumerate(sub.outputs):
        m = sub.args_of(o)[0][1]
        if m not in reduced:
            dtype = sub.specs_of(m)[0].dtype.np
            outputs.append(kernels.Output(ref(m), program.contiguous_strides(shape), None,
                                          dtype if dtype == np.bool_ else None))
            continue
        dims = reduced[m]
        kept = program.contiguous_strides([n_ for d, n_ in enumerate(shape)
                                           if d not in dims])
        it = iter(kept)
        out_strides = tuple(0 if d in dims else next(it) for d in range(len(shape)))
        op = sub.nx.nodes[m]["op"]
        outputs.append(kernels.Output(ref(sub.args_of(m)[0][1]), out_strides,
                                      REDUCTIONS[op]))
        if op is Mean:
            with np.errstate(divide="ignore"):
                scales[k] = float(np.float64(1.0) / np.prod([shape[d] for d in dims]))
    for k in range(len(in_layouts)):  # read only by matmuls: no strides to honour
        if k not in read_in_place:
            strides[k] = (0,) * len(shape)
    floats = {spec.dtype.np for m in sub.nx.nodes for spec in sub.specs_of(m)} - {
        np.dtype(np.bool_)}
    dtype, = floats  # fuse groups ops of one float dtype (and bools)
    kernel = kernels.Kernel(name, dtype, shape, strides, steps, outputs,
                            [layout.dtype for layout in layouts])
    return kernel, scales, layouts


def _operand(layouts, strides, layout, shape, which):
    """Add matmul operand `layout` (which: 0 left, 1 right) as a kernel input read at
    iteration points of `shape` = (..., M, N): ("in", k) and its stride along K."""
    batch = len(shape) - 2
    lead = batch - (len(layout.shape) - 2)
    batch_strides = (0,) * lead + tuple(
        0 if n == 1 and m != 1 else s
        for n, m, s in zip(layout.shape[:-2], shape[lead:batch], layout.strides[:-2]))
    row, col = layout.strides[-2:]
    if which == 0:  # A[..., i, kk]: moves with i (the row), not with j
        point, along_k = (row if layout.shape[-2] != 1 else 0, 0), col
    else:  # B[..., kk, j]: moves with j (the column), not with i
        point, along_k = (0, col if layout.shape[-1] != 1 else 0), row
    layouts.append(layout)
    strides.append(batch_strides + point)
    return ("in", len(layouts) - 1), along_k

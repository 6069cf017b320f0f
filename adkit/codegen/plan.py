"""The run plan of a compiled graph: where each value lives and what runs where.

Owns: `Planner` (value slots, Layouts and Buffers, which nodes run natively, the
schedule of steps, shared memory blocks) and the thread cost model (`estimated_ns`).
Does not: say how a node is lowered (lowering.py), define the steps (steps.py) or the
buffers (buffers.py), emit IR (program.py, kernels.py) or run the plan (jit.py).
"""
from collections import Counter

import numpy as np

from ..ir import passes
from ..ir.passes.cleanup import has_in_place_ops
from ..ir.passes.fuse import unit_view
from ..tensor import _make
from . import buffers, lowering, pool, program
from .steps import BufferValues, NumpyStep, SegmentStep

# Threads: a kernel is split over the cores when one thread would take longer than
# PARALLEL_MIN_NS by this estimate (ns per element: the loop and memory, each plain
# arithmetic step; a math-library call costs its op's `native_cost`). Its parts run on
# the persistent thread pool (pool.py), which costs ~0.5 us per call with its workers
# awake and ~3 us more when they sleep (threads made per call cost 40-140 us: the old
# threshold was 500 us). Measured on the 2-core development machine, quiet: x * 2 + 1
# gains from ~16k elements (4.5 us; 1.9x at 65k), exp(sin(tanh(x)) ...) from 4k
# elements (20 us; 1.7x), so splitting starts at a 15 us estimate.
PARALLEL_MIN_NS = 15_000
NS_PER_ELEMENT, NS_PER_STEP = 0.35, 0.05


def estimated_ns(kernel):
    """A single thread's time for `kernel` by the cost model above."""
    per_element = NS_PER_ELEMENT + sum(step.ns_per_element(NS_PER_STEP)
                                       for step in kernel.steps)
    return kernel.size * per_element


def root(array):
    """The array that owns the memory `array` views."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class Planner:
    """Decides where each value lives and what runs where, once per Compiled.

    Values of float and bool dtypes get a Layout: inputs and constants their own
    buffers; the results of native calls fresh contiguous buffers (reused between
    calls, or handed out for graph outputs); views a Layout of their base's buffer. A
    numpy step's result that native code reads is put in a buffer (contiguous, checked
    against its traced spec) right after the step; so is an integer tensor that a
    gather or scatter reads as indices (`index_layout`). Each op node is tried against the
    lowering rules (lowering.py); native nodes are scheduled into as few segments as
    the dependencies allow. The plan: `steps` (steps.py), `buffers` (buffers.py)."""

    def __init__(self, graph):
        self.graph = graph
        self.slots, self.layouts, self.buffers = {}, {}, []
        self.consts, self.kernels = [], []
        self.published = {}  # node -> [(output index, PublishedBuffer)]
        self.made = {}  # native node -> its NativeCalls (its results are in buffers)
        self.views = set()  # native nodes whose results are views (Layouts, no calls)
        self.status = None  # the StatusBuffer's index, once a call that may fail needs it
        self.returned = [graph.args_of(n)[0][1:] for n in graph.outputs]
        self.returned_bases = _bases_of_views(graph, self.returned)
        # with in-place ops, every node runs with numpy in program order: a write
        # through a view reaches other values only by sharing numpy's memory
        self.in_place = has_in_place_ops(graph)
        # values a fused kernel may write straight into the result that places them
        self.part_of = {} if self.in_place else _parts_in_place(
            graph, set(self.returned) | self.returned_bases)
        self.reserved = set()  # results made before their node is lowered
        # batched gemms done as one (program._fold_batch): their operand's and result's
        # batches laid out side by side
        self.side_by_side = set() if self.in_place else _side_by_side(
            graph, set(self.returned) | self.returned_bases)
        ops = []
        for n in graph.topo_order():
            kind = graph.nx.nodes[n]["kind"]
            if kind == "output":
                continue
            base = len(self.slots)
            for i in range(len(graph.specs_of(n))):
                self.slots[(n, i)] = base + i
            if kind == "input":
                self._input(n)
            elif kind == "const":
                self._const(n, base)
            else:
                ops.append(n)
                if not self.in_place:
                    self._lower(n)
        self.n_slots = len(self.slots)
        self.input_slots = [self.slots[(n, 0)] for n in graph.inputs]
        self._schedule(ops)
        self.output_slots = [self.slots[key] for key in self.returned]
        self.output_buffers = [self.layouts[key].buffer if key[0] in self.made else None
                               for key in self.returned]
        self.output_fetch = self._fetch(self.returned)
        self.block_sizes = self.share_buffers()

    # ------------------------------------------------------------ values and buffers
    def _buffer(self, cls, *args):
        buf = cls(len(self.buffers), *args)
        self.buffers.append(buf)
        return buf

    def _input(self, n):
        spec = self.graph.specs_of(n)[0]
        if _native_dtype(spec) and not self.in_place:
            buf = self._buffer(buffers.InputBuffer, spec.shape, spec.dtype.np,
                               self.graph.inputs.index(n))
            self.layouts[(n, 0)] = buffers.contiguous(buf.index, spec.shape, spec.dtype.np)

    def _const(self, n, slot):
        tensor = _make(self.graph.nx.nodes[n]["value"])
        self.consts.append((slot, tensor))
        spec = self.graph.specs_of(n)[0]
        if _native_dtype(spec):
            buf = self.constant(np.ascontiguousarray(tensor._data))
            self.layouts[(n, 0)] = buffers.contiguous(buf, spec.shape, spec.dtype.np)

    def constant(self, array):
        """A new constant buffer holding `array`; its index."""
        return self._buffer(buffers.ConstantBuffer, array).index

    def layout(self, key):
        """The Layout of value `key`, giving a numpy step's float result a buffer it
        is copied into (and an int64 index given from outside one it is read from);
        None for values native code cannot read."""
        if key in self.layouts:
            return self.layouts[key]
        spec = self.graph.specs_of(key[0])[key[1]]
        if not _native_dtype(spec):
            return self._given_index(key, spec)
        buf = self._buffer(buffers.PublishedBuffer, spec.shape, spec.dtype.np)
        self.published.setdefault(key[0], []).append((key[1], buf))
        self.layouts[key] = buffers.contiguous(buf.index, spec.shape, spec.dtype.np)
        return self.layouts[key]

    def _given_index(self, key, spec):
        """The Layout of an integer (int32, int64) input or constant that a native call
        asks for (a switch's index, a view of an index tensor): a buffer made on demand;
        None for other integers. Native code does no integer arithmetic, so an integer
        numpy computes stays with numpy (unless a gather reads it: `index_layout`); one
        given from outside costs nothing to read."""
        if self.graph.nx.nodes[key[0]]["kind"] not in ("input", "const"):
            return None
        return self.index_layout(key)

    def index_layout(self, key):
        """The Layout of integer tensor `key` (int32, int64) that a native call reads as
        indices: an input's or a constant's buffer, or one a numpy step's result is
        published into (native code makes no integers); None for other dtypes."""
        if key in self.layouts:
            return self.layouts[key]
        spec = self.graph.specs_of(key[0])[key[1]]
        if spec.dtype.np not in INDEX_DTYPES:
            return None
        n, shape, dtype = key[0], spec.shape, spec.dtype.np
        kind = self.graph.nx.nodes[n]["kind"]
        if kind == "input":
            buf = self._buffer(buffers.InputBuffer, shape, dtype, self.graph.inputs.index(n))
        elif kind == "const":
            value = _make(self.graph.nx.nodes[n]["value"])._data
            buf = self.buffers[self.constant(np.ascontiguousarray(value))]
        else:  # (native calls make floats and bools: numpy made this one)
            buf = self._buffer(buffers.PublishedBuffer, shape, dtype)
            self.published.setdefault(n, []).append((key[1], buf))
        self.layouts[key] = buffers.contiguous(buf.index, shape, dtype)
        return self.layouts[key]

    def _status(self):
        """The buffer failed checks report in (one per plan, made when first needed)."""
        if self.status is None:
            self.status = self._buffer(buffers.StatusBuffer).index
        return self.status

    def result(self, n, i):
        """A new contiguous buffer for output i of native node n: a ResultBuffer when the
        graph returns it, else a TempBuffer; its Layout."""
        spec = self.graph.specs_of(n)[i]
        # a value the graph returns, or views of (a vmapped result's final permute),
        # has fresh memory: it is handed out without a copy
        if (n, i) in self.reserved:
            return self.layouts[(n, i)]
        if (n, i) in self.side_by_side:
            return self._side_by_side((n, i))
        returned = (n, i) in self.returned or (n, i) in self.returned_bases
        kind = buffers.ResultBuffer if returned else buffers.TempBuffer
        buf = self._buffer(kind, spec.shape, spec.dtype.np)
        self.layouts[(n, i)] = buffers.contiguous(buf.index, spec.shape, spec.dtype.np)
        return self.layouts[(n, i)]

    def destination(self, n, i):
        """Where the native call making value (n, i) may write it: its Layout inside
        the result of the node that places it whole (`native_parts_in_place`: the
        parts of an Assemble, cat, stack), which then copies nothing for it; None when
        it has no such place."""
        if (n, i) in self.side_by_side:
            return self._side_by_side((n, i))
        part = self.part_of.get((n, i))
        if part is None:
            return None
        node, offset, strides = part
        whole = self.result(node, 0)
        self.reserved.add((node, 0))
        spec = self.graph.specs_of(n)[i]
        return buffers.Layout(whole.buffer, whole.offset + offset, tuple(spec.shape),
                              strides, spec.dtype.np)

    def _side_by_side(self, key):
        """The Layout of batched matrices `key` ([b, rows, cols]) in a buffer of shape
        [rows, b * cols]: the batch's matrices side by side, one BLAS matrix."""
        b, rows, cols = self.graph.specs_of(key[0])[key[1]].shape
        dtype = self.graph.specs_of(key[0])[key[1]].dtype.np
        buf = self._buffer(buffers.TempBuffer, (rows, b * cols), dtype)
        self.layouts[key] = buffers.Layout(buf.index, 0, (b, rows, cols),
                                           (cols, b * cols, 1), np.dtype(dtype))
        return self.layouts[key]

    def place(self, n, i, layout):
        """Value (n, i) lives at `layout` (a destination); its Layout."""
        self.layouts[(n, i)] = layout
        return layout

    def scratch(self, shape, dtype):
        """A new contiguous intermediate buffer that no node owns (a native loop's second
        carry, its body's intermediates); its Layout."""
        buf = self._buffer(buffers.TempBuffer, shape, dtype)
        return buffers.contiguous(buf.index, shape, dtype)

    # ------------------------------------------------------------ what runs where
    def _lower(self, n):
        """Lower node n natively when a rule applies: its results are then views
        (self.views) or made by native calls (self.made); else numpy runs it."""
        layouts = lowering.views(self, n)
        if layouts is not None:
            for i, layout in enumerate(layouts):
                self.layouts[(n, i)] = layout
            self.views.add(n)
            return
        for rule in lowering.RULES:
            calls = rule(self, n)
            if calls is not None:
                self.made[n] = calls
                return

    @property
    def threads(self):
        """What native calls may split their work over: the thread pool's workers and
        the caller (ADKIT_NUM_THREADS caps it). The pool compiles on a thread meanwhile:
        the plan's code needs it only when it is linked."""
        pool.prefetch()
        return pool.planned_threads()

    def kernel_name(self):
        """The name of the next kernel."""
        return f"kernel{len(self.kernels)}"

    def kernel_call(self, kernel, ins, outs, scales=None):
        """A KernelCall of `kernel`, on as many threads as the cost model says."""
        return program.KernelCall(kernel, ins, outs, self.kernel_workers(kernel), scales)

    def kernel_workers(self, kernel, extra_ns=0.0):
        """Threads for a call of `kernel` (and `extra_ns` more work: a row product's)
        by the cost model; `kernel` joins the plan's list."""
        self.kernels.append(kernel)
        return self.threads if estimated_ns(kernel) + extra_ns >= PARALLEL_MIN_NS else 1

    def _native(self, n):
        return n in self.made or n in self.views

    def _schedule(self, ops):
        """Steps in an order the dependencies allow, with as many native nodes as
        possible in each segment: ready native nodes first, then ready numpy nodes."""
        graph = self.graph
        ops_set = set(ops)
        deps = {n: {u for _, u, _ in graph.args_of(n) if u in ops_set} for n in ops}
        pending = ops
        done, self.steps, self.segments = set(), [], []
        while pending:
            before, natives = len(done), []
            for n in pending:
                if self._native(n) and deps[n] <= done:
                    natives.append(n)
                    done.add(n)
            calls = [call for n in natives for call in self.made.get(n, ())]
            if calls:
                status = self._status() if any(c.may_fail for c in calls) else None
                self.segments.append(SegmentStep(f"segment{len(self.segments)}", calls,
                                                 status))
                self.steps.append(self.segments[-1])
            rest = [n for n in pending if n not in done]
            for n in rest:
                if not self._native(n) and deps[n] <= done:
                    done.add(n)
                    self.steps.append(self._numpy_step(n))
            if len(done) == before:
                raise AssertionError("jit: the plan cannot order these nodes")
            pending = [n for n in rest if n not in done]

    def share_buffers(self):
        """Give TempBuffers that only native code reads shared memory blocks: each
        lives from the moment that writes it to the last that reads it, and buffers
        whose lives do not overlap share a block. One that a numpy step or an output
        reads (perhaps through a view numpy keeps) lives to the end and keeps its own
        memory. Returns the block sizes in bytes."""
        first, last, index = {}, {}, 0
        pinned = set().union(*(step.fetched() for step in self.steps + self.output_fetch))
        for step in self.steps:
            for reads, writes in step.uses():
                index += 1
                for buf in writes:
                    first.setdefault(buf, index)
                    last[buf] = max(last.get(buf, index), index)
                for buf in reads:
                    last[buf] = max(last.get(buf, index), index)
        sizes, free, ending = [], [], {}  # free: (size, block) of blocks not in use
        shareable = sorted((first[b.index], b.index) for b in self.buffers
                           if b.reused and b.index not in pinned and b.index in first)
        for start, buf in ((start, self.buffers[i]) for start, i in shareable):
            for b in [b for b, end in ending.items() if end < start]:
                free.append((sizes[b.block], b.block))
                del ending[b]
            fits = sorted(f for f in free if f[0] >= buf.nbytes)
            if fits:
                free.remove(fits[0])
                buf.block = fits[0][1]
            else:
                sizes.append(buf.nbytes)
                buf.block = len(sizes) - 1
            ending[buf] = last[buf.index]
        return sizes

    def _numpy_step(self, n):
        graph = self.graph
        args = {pos: self.slots[(u, out)] for pos, u, out in graph.args_of(n)}
        fetch = self._fetch([(u, out) for _, u, out in graph.args_of(n)])
        publish = [(self.slots[(n, 0)] + i, buf) for i, buf in self.published.get(n, ())]
        return NumpyStep(graph, n, args, self.slots[(n, 0)], fetch, publish)

    def _fetch(self, keys):
        """Steps that give natively made values (among `keys`) numpy values, in
        dependency order: a native call's result is its buffer; a view is its op's
        numpy forward on its base's value (so views of inputs see the caller's real
        strides, exactly as in eager mode)."""
        steps, seen = [], set()

        def visit(key):
            u = key[0]
            if u in seen or not self._native(u):
                return
            seen.add(u)
            if u in self.views:
                (pos, v, v_out), = self.graph.args_of(u)
                visit((v, v_out))
                steps.append(NumpyStep(self.graph, u, {pos: self.slots[(v, v_out)]},
                                       self.slots[(u, 0)], [], []))
            else:
                n_out = len(self.graph.specs_of(u))
                steps.append(BufferValues([(self.slots[(u, i)], self.layouts[(u, i)])
                                           for i in range(n_out)]))
        for key in keys:
            visit(key)
        return steps


INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))  # what index tensors hold


def _native_dtype(spec):
    """Whether native code can hold values of spec's dtype (kernels read and write
    bools; everything else it does is float32/float64)."""
    return spec.dtype.np in lowering.FLOATS or spec.dtype.np == np.bool_


def _parts_in_place(graph, keep):
    """{(u, out): (node, offset, strides)}: value (u, out), made by a fused kernel, read
    by nothing but `node` and not in `keep`, lands whole at element `offset` with
    `strides` of node's result: node's class says its native copy places its inputs
    (`native_parts_in_place`), and that copy will run (one float dtype, one piece per
    input, no fill: the pieces cover the result)."""
    uses = Counter((u, out) for v in graph.nx.nodes for _, u, out in graph.args_of(v))
    found = {}
    for a in graph.op_nodes:
        data = graph.nx.nodes[a]
        if not getattr(data["op"], "native_parts_in_place", False) or len(data["specs"]) != 1:
            continue
        spec, args = data["specs"][0], graph.args_of(a)
        specs = [graph.specs_of(u)[out] for _, u, out in args]
        if spec.dtype.np not in lowering.FLOATS or any(x.dtype != spec.dtype for x in specs):
            continue
        stand_ins = [buffers.contiguous(None, x.shape, x.dtype.np) for x in specs]
        pieces = data["op"].native_copy(data["params"], stand_ins, tuple(spec.shape))
        if not pieces or len(pieces) != len(args) or any(
                read is not x for (read, _, _), x in zip(pieces, stand_ins)):
            continue
        for (_, u, out), (_, offset, strides) in zip(args, pieces):
            strides = tuple(int(x) for x in strides)
            if uses[(u, out)] == 1 and unit_view(graph, u):  # h[:, None]: its input lands
                (_, v, v_out), = graph.args_of(u)
                strides = buffers.unit_strides(strides, graph.specs_of(u)[0].shape,
                                               graph.specs_of(v)[v_out].shape)
                u, out = v, v_out
            if graph.nx.nodes[u].get("op") is passes.FusedKernel and \
                    uses[(u, out)] == 1 and (u, out) not in keep:
                found[(u, out)] = (a, int(offset), strides)
    return found


# Side by side, a batch element's rows are `cols` apart from the next element's:
# readers that go through one element at a time then stride through memory. Worth it
# when rows are long (GMM gradient at d=64: 70 -> 56 ms CPU time, and the objective
# 33 -> 26); at 10 or 20 doubles a row the strided reads and BLAS's packing of the
# wide operand cost more than the batch of small products (GMM d=10: 7.8 -> 11 ms).
SIDE_BY_SIDE_MIN_ROW_BYTES = 256


def _side_by_side(graph, keep):
    """The values to lay out side by side (Planner._side_by_side): for each batched
    gemm C[b] = A @ B[b] (A one matrix shared by the batch), its B when a fused kernel
    makes it, and its C. BLAS then does the batch as one product (program._fold_batch).
    Neither may be in `keep` (returned values), and every reader (through views) must
    read Layouts in place: a fused kernel or a gemm (numpy would get the whole buffer)."""
    found = set()
    for mm in graph.op_nodes:
        data = graph.nx.nodes[mm]
        args = graph.args_of(mm)
        if not getattr(data["op"], "native_gemm", False) or len(args) != 2 or \
                len(data["specs"]) != 1 or data["dtype"].np not in lowering.FLOATS:
            continue
        (_, a, a_out), (_, b, b_out) = sorted(args)
        a_spec, b_spec = graph.specs_of(a)[a_out], graph.specs_of(b)[b_out]
        row_bytes = b_spec.shape[-1] * b_spec.dtype.np.itemsize
        if len(a_spec.shape) != 2 or len(b_spec.shape) != 3 or b_spec.shape[0] < 2 or \
                row_bytes < SIDE_BY_SIDE_MIN_ROW_BYTES or \
                a_spec.dtype != data["dtype"] or b_spec.dtype != data["dtype"] or \
                0 in data["shape"] or not _blas_readable(graph, a) or \
                (mm, 0) in keep or not _read_in_place(graph, mm, gemm_ok=False):
            continue
        found.add((mm, 0))
        if graph.nx.nodes[b].get("op") is passes.FusedKernel and \
                (b, b_out) not in keep and _read_in_place(graph, b, gemm_ok=True):
            found.add((b, b_out))
    return found


def _blas_readable(graph, n):
    """Whether the 2-d value of node n is one BLAS reads in place whatever the plan
    (so the product surely runs natively, never on numpy, which would be handed the
    side by side buffer whole): an input, a constant or a kernel's result (contiguous),
    or a transpose of one."""
    data = graph.nx.nodes[n]
    if data["kind"] in ("input", "const") or data.get("op") is passes.FusedKernel:
        return True
    if data["kind"] != "op" or not getattr(data["op"], "is_view", False) or \
            len(graph.args_of(n)) != 1:
        return False
    (_, u, out), = graph.args_of(n)
    inner, source = graph.specs_of(u)[out].shape, graph.nx.nodes[u]
    plain = source["kind"] in ("input", "const") or source.get("op") is passes.FusedKernel
    return plain and len(inner) == 2 and tuple(data["shape"]) == tuple(inner[::-1])


def _read_in_place(graph, n, gemm_ok):
    """Whether every reader of node n's values (through view ops) is a fused kernel,
    or, with `gemm_ok`, a BLAS product (both read any Layout of positive strides)."""
    for v in graph.nx.successors(n):
        data = graph.nx.nodes[v]
        op = data.get("op")
        if op is passes.FusedKernel or (gemm_ok and getattr(op, "native_gemm", False)):
            continue
        if data["kind"] == "op" and getattr(op, "is_view", False) and \
                op.modifies is None and _read_in_place(graph, v, gemm_ok):
            continue
        return False
    return True


def _bases_of_views(graph, returned):
    """The values that returned values are views of (through chains of view ops)."""
    bases = set()
    for n, out in returned:
        while graph.nx.nodes[n]["kind"] == "op" and graph.nx.nodes[n]["op"].is_view and \
                graph.nx.nodes[n]["op"].modifies is None:
            (_, n, out), = [a for a in graph.args_of(n) if a[0] == 0]
            bases.add((n, out))
    return bases

"""ak.jit: trace per input signature, optimize, fuse, compile fused kernels to native code.

Owns: `jit`, `Jitted` (the signature cache; `.lower()`, `.compile()`) and `Compiled`
(the run plan: native calls for fused kernels, numpy for the other nodes, with the
input checks that guard the native boundary). Does not: emit IR (kernels.py) or talk to
llvmlite.binding (runtime.py).
Calls made under a transform (grad, vmap, tracing), with inputs that require grad or
with forward-AD dual inputs run the function itself, so jit composes with ak.func and
with autograd both ways.
"""
import concurrent.futures
import ctypes
import functools
import os
import sys
import threading

import numpy as np
from llvmlite import ir as llvm_ir

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.forward_ad import STATE as FORWARD_AD, tangent_level
from ..autograd.grad_mode import is_grad_enabled
from ..ir import evaluate, passes, printing, rules
from ..ir.trace import trace
from ..ops.linalg import _MatrixProduct
from ..ops.reduction import Sum
from ..tensor import Tensor, _make
from . import kernels, runtime

_PARALLEL_MIN = 1 << 16  # elements below which one thread is faster
_interpreters = _dispatch._STACK.get
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
OPTIMIZE = passes.pipeline([passes.fold_constants, passes.simplify, passes.cse, passes.dce,
                            passes.fuse, passes.dce])


def jit(fn=None, static_argnums=()):
    """Compile `fn` per input signature (shapes, dtypes, pytree structure, static
    values); usable as `ak.jit(f)`, `@ak.jit` or `@ak.jit(static_argnums=...)`."""
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums)
    return Jitted(fn, static_argnums)


def _is_tensor(x):
    return isinstance(x, (Tensor, np.ndarray))


class Jitted:
    """A compiled function: one Compiled per signature seen."""

    def __init__(self, fn, static_argnums=()):
        self.fn = fn
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) \
            else tuple(static_argnums)
        self.cache = {}
        self._fast = {}  # (shape, dtype) per plain-tensor argument -> Compiled
        functools.update_wrapper(self, fn)

    def _key(self, args, kwargs):
        dynamic = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dynamic, is_leaf=_is_tensor)
        sig = tuple((tuple(np.shape(x)), np.asarray(x).dtype.str) if _is_tensor(x) else
                    ("static", type(x).__name__, x) for x in leaves)  # 2 and 2.0 differ
        statics = tuple((i, type(args[i]).__name__, args[i])
                        for i in self.static_argnums if i < len(args))
        for name, value in kwargs.items():
            if _is_tensor(value):
                raise TypeError(f"jit: keyword arguments are static (compiled in), but "
                                f"{name}= is a tensor: pass tensors positionally")
        return (tree, sig, statics,
                tuple(sorted((k, type(v).__name__, v) for k, v in kwargs.items())))

    def __call__(self, *args, **kwargs):
        if FORWARD_AD.levels and tangent_level(tree_flatten((args, kwargs))[0]) is not None:
            return self.fn(*args, **kwargs)  # dual inputs: the tangents must flow through
        if not kwargs and not self.static_argnums and not _interpreters():
            key = ()  # the fast path: plain tensors, looked up by shape and dtype only
            for a in args:
                if type(a) is not Tensor or a._requires_grad:
                    break
                key += (a._data.shape, a._data.dtype)
            else:
                compiled = self._fast.get(key)
                if compiled is not None:
                    return compiled.run_checked(args)
                compiled = self.compile(*args)
                self._fast[key] = compiled
                return compiled.run_checked(args)
        if _dispatch._STACK.get() or (is_grad_enabled() and any(
                isinstance(x, Tensor) and x.requires_grad
                for x in tree_flatten(args, is_leaf=_is_tensor)[0])):
            return self.fn(*args, **kwargs)  # under a transform: the plain function
        return self.compile(*args, **kwargs)(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """The optimized, fused Graph for these arguments' signature."""
        return self.compile(*args, **kwargs).graph

    def compile(self, *args, **kwargs):
        """The Compiled program for these arguments' signature (cached)."""
        key = self._key(args, kwargs)
        compiled = self.cache.get(key)
        if compiled is None:
            graph = trace(self.fn, *args, **kwargs)
            compiled = self.cache[key] = Compiled(OPTIMIZE(graph))
        return compiled


class Compiled:
    """A graph ready to run: fused kernels compiled to native code, other nodes run by
    numpy. `.llvm_ir`, `.asm`, `.kernels` show what was generated. The run is a plan
    made once: each value has a slot, each step reads and writes slots (no graph
    lookups per call)."""

    def __init__(self, graph):
        self.graph = graph
        self.kernels, native = [], {}
        module = llvm_ir.Module(name="adkit_jit")
        module.triple = runtime.target_machine().triple
        _, vector_bytes = runtime.host_vector_isa()
        for n in graph.topo_order():
            data = graph.nx.nodes[n]
            if data["kind"] == "op" and data["op"] is passes.FusedKernel:
                kernel = _kernel_for(graph, n, f"kernel{len(self.kernels)}")
                kernels.lower_kernel(kernel, module, vector_bytes)
                self.kernels.append(kernel)
                native[n] = kernel
        self.module = runtime.compile_module(module) if self.kernels else None
        self._plan(graph, native)

    def _plan(self, graph, native):
        slots, self.steps, self.consts = {}, [], []
        returned = {graph.args_of(n)[0][1:] for n in graph.outputs}
        # Buffers for intermediates are allocated once per thread and reused by every
        # call: a fresh large array costs page faults on first touch, which were half of
        # an MLP step's time. A returned value's buffer is reused only once the caller
        # has let go of the last one (nothing else refers to it), so results stay fresh.
        self.buffer_specs, self.recycled_specs = {}, {}

        def buffer(n, i, spec):
            if spec.dtype.np.kind not in "fc" or len(spec.shape) == 0:
                return None
            specs = self.recycled_specs if (n, i) in returned else self.buffer_specs
            specs[slots[(n, i)]] = (tuple(spec.shape), spec.dtype.np)
            return slots[(n, i)]
        for n in graph.topo_order():
            data = graph.nx.nodes[n]
            kind = data["kind"]
            if kind == "output":
                continue
            base = len(slots)
            for i in range(len(graph.specs_of(n))):
                slots[(n, i)] = base + i
            if kind == "input":
                continue
            if kind == "const":
                self.consts.append((base, _make(data["value"])))
                continue
            args = {pos: slots[(u, out)] for pos, u, out in graph.args_of(n)}
            specs = data["specs"]
            if n in native:
                kernel = native[n]
                arrays = [ctypes.py_object] * (len(kernel.strides) + len(kernel.outputs))
                fn = self.module.function(kernel.name, None, ctypes.c_int64, ctypes.c_int64,
                                          *arrays)
                reused = [None if i in kernel.reduced else buffer(n, i, spec)
                          for i, spec in enumerate(specs)]
                self.steps.append(_KernelStep(kernel, fn, [args[p] for p in sorted(args)],
                                              base, [tuple(s.shape) for s in specs], reused))
            elif _is_plain_product(graph, n):
                self.steps.append(_ProductStep(args[0], args[1], base,
                                               buffer(n, 0, specs[0])))
            else:
                self.steps.append(_NumpyStep(graph, n, args, base))
        self.n_slots = len(slots)
        self.input_slots = [slots[(n, 0)] for n in graph.inputs]
        self._const_roots = {id(_root(t._data)) for _, t in self.consts}
        self.output_slots = [slots[graph.args_of(n)[0][1:]] for n in graph.outputs]
        self._local = threading.local()
        self.run_checked = self._single_kernel_runner() or self.run_checked

    def _take_buffers(self):
        """This thread's reusable buffers, or None when a call on this thread is already
        running (a re-entrant call gets fresh arrays)."""
        local = self._local
        if getattr(local, "busy", False):
            return None
        if not hasattr(local, "buffers"):
            local.buffers = {slot: np.empty(shape, dtype)
                             for slot, (shape, dtype) in self.buffer_specs.items()}
            local.roots = {id(b) for b in local.buffers.values()}
            local.recycled = {}
        buffers, recycled = dict(local.buffers), local.recycled
        for slot, (shape, dtype) in self.recycled_specs.items():
            if slot not in recycled or sys.getrefcount(recycled[slot]) != _ONLY_OURS:
                recycled[slot] = np.empty(shape, dtype)
            buffers[slot] = recycled[slot]
        local.busy = True
        return buffers

    def _single_kernel_runner(self):
        """For the common tiny case (one small kernel reading the inputs, one output):
        a runner without the general plan's bookkeeping (call overhead matters there)."""
        if len(self.steps) != 1 or self.consts or self.graph.static_outputs:
            return None
        step = self.steps[0]
        if not isinstance(step, _KernelStep) or step.parallel or step.kernel.reduced or \
                len(step.kernel.outputs) != 1 or self.output_slots != [step.base]:
            return None
        order = [self.input_slots.index(s) for s in step.arg_slots]
        fn, shape, dtype, total = step.fn, step.shapes[0], step.kernel.dtype, \
            step.kernel.outer_size
        tree = self.graph.out_tree
        bare = tree is None or tree.kind == "leaf"
        structure = self._structure

        def run(inputs):
            arrays = []
            for i in order:
                a = inputs[i]._data
                arrays.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
            out = np.empty(shape, dtype)
            fn(0, total, *arrays, out)
            return _make(out) if bare else structure([_make(out)])
        return run

    @property
    def llvm_ir(self):
        return self.module.llvm_ir if self.module else ""

    @property
    def asm(self):
        return self.module.asm if self.module else ""

    def __call__(self, *args, **kwargs):
        return self.run_checked(evaluate.flat_inputs(self.graph, args))

    def run_checked(self, inputs):
        """Run on the flat input tensors (already checked against the signature)."""
        values = [None] * self.n_slots
        for slot, t in zip(self.input_slots, inputs):
            values[slot] = t
        for slot, t in self.consts:
            values[slot] = t
        buffers = self._take_buffers() if self.buffer_specs or self.recycled_specs \
            else None
        try:
            for step in self.steps:
                step.run(values, buffers or _NO_BUFFERS)
            # an output that is an input, a constant, a reused buffer or a view of one of
            # them is given out as a copy
            not_ours = {id(_root(t._data)) for t in inputs}
            not_ours.update(self._const_roots)
            if buffers:
                not_ours.update(self._local.roots)
            outs = []
            for s in self.output_slots:
                out = values[s]
                outs.append(_make(np.array(out._data)) if id(_root(out._data)) in not_ours
                            else out)
        finally:
            if buffers is not None:
                self._local.busy = False
        return self._structure(outs)

    def _structure(self, flat):
        graph = self.graph
        if graph.out_tree is None:
            return flat[0] if len(flat) == 1 else tuple(flat)
        if not graph.static_outputs:
            return tree_unflatten(graph.out_tree, flat)
        it = iter(flat)
        leaves = [graph.static_outputs[i] if i in graph.static_outputs else next(it)
                  for i in range(len(graph.static_outputs) + len(flat))]
        return tree_unflatten(graph.out_tree, leaves)


class _NumpyStep:
    """A node without a native lowering: its op through Function.apply, on numpy."""

    def __init__(self, graph, n, args, base):
        self.graph, self.n, self.args, self.base = graph, n, args, base
        data = graph.nx.nodes[n]
        self.op = op = data["op"]
        self.n_out = len(data["specs"])
        # the positional arguments with the static ones in place, tensors filled per call
        self.template = rules.join_args(op, dict.fromkeys(args), data["params"])
        # a built-in op on arrays with one output needs none of apply's autograd
        # bookkeeping here (nothing in a compiled run requires grad): call its forward
        self.direct = (getattr(op, "_arrays_in", False) and op.modifies is None
                       and self.n_out == 1)

    def run(self, values, buffers):
        call = list(self.template)
        for pos, slot in self.args.items():
            call[pos] = values[slot]
        try:
            if self.direct:
                raw = self.op.forward(*[a._data if isinstance(a, Tensor) else a
                                        for a in call])
                if isinstance(raw, (tuple, list)):  # a tuple of one, as apply unpacks it
                    raw = raw[0]
                values[self.base] = _make(raw if type(raw) is np.ndarray
                                          else np.asarray(raw))
                return
            result = self.op.apply(*call)
        except Exception as e:
            e.add_note(f"While executing node {self.n}: "
                       f"{printing.node_line(self.graph, self.n)}")
            raise
        if self.n_out == 1 and not isinstance(result, tuple):
            values[self.base] = result
        else:
            values[self.base:self.base + self.n_out] = result


class _ProductStep:
    """matmul, mm, bmm, mv or dot on floating operands (shapes were checked when the
    graph was traced): np.matmul straight into the output buffer."""

    def __init__(self, x_slot, y_slot, base, buffer_slot):
        self.x_slot, self.y_slot, self.base, self.buffer_slot = x_slot, y_slot, base, \
            buffer_slot

    def run(self, values, buffers):
        out = buffers.get(self.buffer_slot)
        values[self.base] = _make(np.matmul(values[self.x_slot]._data,
                                            values[self.y_slot]._data, out=out))


class _KernelStep:
    """A fused kernel: contiguous inputs in, outputs (fresh, or this thread's reused
    buffers for intermediates) out, one native call (or one per thread for large loops)."""

    def __init__(self, kernel, fn, arg_slots, base, shapes, buffer_slots):
        self.kernel, self.fn, self.arg_slots, self.base = kernel, fn, arg_slots, base
        self.shapes = shapes  # one per output (a sum's is ())
        self.buffer_slots = buffer_slots  # one per output: a reusable buffer's slot or None
        self.n_in = max(1, len(arg_slots))
        self.parallel = kernel.size >= _PARALLEL_MIN and (os.cpu_count() or 1) > 1
        self.workers = (os.cpu_count() or 1) if self.parallel else 1
        # each worker's [start, stop) of the outer loop
        self.bounds = np.linspace(0, kernel.outer_size, self.workers + 1).astype(np.int64) \
            .tolist()

    def run(self, values, buffers):
        kernel = self.kernel
        arrays = []
        for s in self.arg_slots:
            a = values[s]._data
            arrays.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        workers, bounds = self.workers, self.bounds
        outs = []
        for shape, slot in zip(self.shapes, self.buffer_slots):
            out = buffers.get(slot)
            outs.append(np.empty(shape, kernel.dtype) if out is None else out)
        # a sum is added up per thread in float64, then the partial sums are added
        partials = {k: [np.zeros(1) for _ in range(workers)] for k in kernel.reduced}

        def call(w):
            objects = arrays + [partials[k][w] if k in partials else o
                                for k, o in enumerate(outs)]
            self.fn(bounds[w], bounds[w + 1], *objects)
        if workers == 1:
            call(0)
        else:
            list(_POOL.map(call, range(workers)))
        for k, parts in partials.items():
            outs[k] = np.asarray(sum(p[0] for p in parts), dtype=kernel.dtype)
        for i, o in enumerate(outs):
            values[self.base + i] = _make(o)


_NO_BUFFERS = {}


def _refcount_when_only_in_a_dict():
    held = {0: np.empty(0)}
    return sys.getrefcount(held[0])


# sys.getrefcount of an array held only by the dict it is looked up in
_ONLY_OURS = _refcount_when_only_in_a_dict()


def _root(array):
    """The array that owns the memory `array` views."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _is_plain_product(graph, n):
    data = graph.nx.nodes[n]
    op = data["op"]
    if not (isinstance(op, type) and issubclass(op, _MatrixProduct)):
        return False
    arg_specs = [graph.specs_of(u)[out] for _, u, out in graph.args_of(n)]
    out = data["specs"][0]
    return (len(arg_specs) == 2 and len(out.shape) > 0 and out.dtype.np.kind == "f"
            and all(s.dtype == out.dtype for s in arg_specs))


def _kernel_for(graph, n, name):
    """The ElementwiseKernel of FusedKernel node n: the sub-graph's ops as steps, input
    strides from shapes, whole-tensor sums as accumulated outputs."""
    data = graph.nx.nodes[n]
    sub = data["params"]["graph"]
    index = {i: k for k, i in enumerate(sub.inputs)}
    steps, position, sums = [], {}, {}
    for m in sub.op_nodes:
        md = sub.nx.nodes[m]
        if md["op"] is Sum:  # a whole-tensor sum: an accumulator
            sums[m] = sub.args_of(m)[0][1]
            continue
        args = []
        for pos, u, _ in sub.args_of(m):
            while len(args) < pos:
                args.append(None)
            args.append(("in", index[u]) if u in index else ("tmp", position[u]))
        position[m] = len(steps)
        steps.append(kernels.Step(md["op"], args, md["params"]))
    shape = next(tuple(sub.specs_of(m)[0].shape) for m in sub.op_nodes if m not in sums)
    strides = [_broadcast_strides(sub.specs_of(i)[0].shape, shape) for i in sub.inputs]
    produced = [sub.args_of(o)[0][1] for o in sub.outputs]
    outputs = [position[sums.get(m, m)] for m in produced]
    reduced = [k for k, m in enumerate(produced) if m in sums]
    return kernels.ElementwiseKernel(name, data["dtype"].np, shape, strides, steps, outputs,
                                     reduced)


def _broadcast_strides(in_shape, out_shape):
    """Element strides of a C-contiguous array of in_shape read at out_shape indices."""
    strides, acc = [], 1
    for n in reversed(in_shape):
        strides.append(acc if n != 1 else 0)
        acc *= n
    strides = strides[::-1]
    return (0,) * (len(out_shape) - len(in_shape)) + tuple(strides)


__all__ = ["jit", "Jitted", "Compiled"]

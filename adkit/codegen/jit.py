"""ak.jit: trace per input signature, optimize, fuse, compile fused kernels to native code.

Owns: `jit`, `Jitted` (the signature cache; `.lower()`, `.compile()`) and `Compiled`
(the run plan: native calls for fused kernels, numpy for the other nodes, with the
input checks that guard the native boundary). Does not: emit IR (kernels.py) or talk to
llvmlite.binding (runtime.py).
Calls made under a transform (grad, vmap, tracing) or with inputs that require grad
run the function itself, so jit composes with ak.func both ways.
"""
import concurrent.futures
import ctypes
import functools
import itertools
import os

import numpy as np
from llvmlite import ir as llvm_ir

from .. import _dispatch
from .._pytree import tree_flatten, tree_unflatten
from ..autograd.grad_mode import is_grad_enabled
from ..ir import evaluate, passes
from ..ir.trace import trace
from ..tensor import Tensor, _make
from . import kernels, runtime

_PARALLEL_MIN = 1 << 16  # elements below which one thread is faster
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
_KERNEL_IDS = itertools.count()
OPTIMIZE = passes.pipeline([passes.fold_constants, passes.simplify, passes.cse, passes.dce,
                            passes.fuse])


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
        functools.update_wrapper(self, fn)

    def _key(self, args, kwargs):
        dynamic = [a for i, a in enumerate(args) if i not in self.static_argnums]
        leaves, tree = tree_flatten(dynamic, is_leaf=_is_tensor)
        sig = tuple((tuple(np.shape(x)), np.asarray(x).dtype.str) if _is_tensor(x) else
                    ("static", x) for x in leaves)
        statics = tuple((i, args[i]) for i in self.static_argnums if i < len(args))
        return (tree, sig, statics, tuple(sorted(kwargs.items())))

    def __call__(self, *args, **kwargs):
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
    numpy. `.llvm_ir`, `.asm`, `.kernels` show what was generated."""

    def __init__(self, graph):
        self.graph = graph
        self.order = graph.topo_order()
        self.kernels, self._native = [], {}
        module = llvm_ir.Module(name="adkit_jit")
        module.triple = runtime.target_machine().triple
        _, vector_bytes = runtime.host_vector_isa()
        for n in self.order:
            data = graph.nx.nodes[n]
            if data["kind"] == "op" and data["op"] is passes.FusedKernel:
                kernel = _kernel_for(graph, n)
                kernels.lower_kernel(kernel, module, vector_bytes)
                self.kernels.append(kernel)
                self._native[n] = kernel
        self.module = runtime.compile_module(module) if self.kernels else None
        self._calls = {n: self.module.function(k.name, None, ctypes.c_int64, ctypes.c_int64,
                                               ctypes.c_void_p, ctypes.c_void_p)
                       for n, k in self._native.items()}

    @property
    def llvm_ir(self):
        return self.module.llvm_ir if self.module else ""

    @property
    def asm(self):
        return self.module.asm if self.module else ""

    def __call__(self, *args, **kwargs):
        return _run_compiled(self, args)


def _kernel_for(graph, n):
    """The ElementwiseKernel of FusedKernel node n (input strides from shapes)."""
    data = graph.nx.nodes[n]
    sub = data["params"]["graph"]
    shape = tuple(data["shape"])
    strides = [_broadcast_strides(sub.specs_of(i)[0].shape, shape) for i in sub.inputs]
    index = {i: k for k, i in enumerate(sub.inputs)}
    steps, position = [], {}
    for m in sub.op_nodes:
        md = sub.nx.nodes[m]
        args = []
        for pos, u, _ in sub.args_of(m):
            while len(args) < pos:
                args.append(None)
            args.append(("in", index[u]) if u in index else ("tmp", position[u]))
        position[m] = len(steps)
        steps.append(kernels.Step(md["op"], args, md["params"]))
    outputs = [position[sub.args_of(o)[0][1]] for o in sub.outputs]
    return kernels.ElementwiseKernel(f"kernel{next(_KERNEL_IDS)}", data["dtype"].np, shape,
                                     strides, steps, outputs)


def _broadcast_strides(in_shape, out_shape):
    """Element strides of a C-contiguous array of in_shape read at out_shape indices."""
    strides, acc = [], 1
    for n in reversed(in_shape):
        strides.append(acc if n != 1 else 0)
        acc *= n
    strides = strides[::-1]
    return (0,) * (len(out_shape) - len(in_shape)) + tuple(strides)


def _run_compiled(compiled, args):
    graph = compiled.graph
    inputs = evaluate.flat_inputs(graph, args)
    env, outputs = {}, {}
    for n in compiled.order:
        data = graph.nx.nodes[n]
        kind = data["kind"]
        if kind == "input":
            env[n] = (inputs[data["index"]],)
        elif kind == "const":
            env[n] = (_make(data["value"]),)
        elif n in compiled._native:
            env[n] = _call_kernel(compiled, n, env)
        elif kind == "op":
            env[n] = evaluate.run_node(graph, n, data, env)
        else:
            (_, u, out), = graph.args_of(n)
            outputs[data["index"]] = env[u][out]
    flat = [outputs[i] for i in range(len(outputs))]
    if graph.out_tree is None:
        return flat[0] if len(flat) == 1 else tuple(flat)
    it = iter(flat)
    leaves = [graph.static_outputs[i] if i in graph.static_outputs else next(it)
              for i in range(len(graph.static_outputs) + len(flat))]
    return tree_unflatten(graph.out_tree, leaves)


def _call_kernel(compiled, n, env):
    """Check the arguments (the native boundary), allocate outputs, run the kernel."""
    graph, kernel = compiled.graph, compiled._native[n]
    arrays = []
    for pos, u, out in graph.args_of(n):
        arr = np.ascontiguousarray(env[u][out]._data)  # the kernel reads C order
        want = graph.specs_of(u)[out]
        if arr.shape != tuple(want.shape) or arr.dtype != want.dtype.np:
            raise TypeError(f"jit: kernel {kernel.name} expected {want}, got "
                            f"{arr.dtype}{list(arr.shape)}")
        arrays.append(arr)
    outs = [np.empty(graph.nx.nodes[n]["shape"], kernel.dtype) for _ in kernel.outputs]
    ins_ptr = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
    outs_ptr = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
    fn = compiled._calls[n]
    total = kernel.outer_size
    if kernel.size < _PARALLEL_MIN or (os.cpu_count() or 1) == 1:
        fn(0, total, ins_ptr, outs_ptr)
    else:
        workers = os.cpu_count() or 1
        bounds = np.linspace(0, total, workers + 1).astype(np.int64)
        list(_POOL.map(lambda i: fn(int(bounds[i]), int(bounds[i + 1]), ins_ptr, outs_ptr),
                       range(workers)))
    return tuple(_make(o) for o in outs)


__all__ = ["jit", "Jitted", "Compiled"]

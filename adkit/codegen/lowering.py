"""How one graph node becomes native code: the lowering rules the planner tries in turn.

Owns: `RULES`, each `rule(planner, n)` returning the node's NativeCalls, or None when it
does not apply: a fused kernel (`fused_kernel`, with `kernel_for`), BLAS (`gemm`),
strided copy loops (`copy_loops`), copies by index tables (`moves`), gathers and
scatters by index tensors (`indexed`, indexed.py); and `views` (the Layouts of a view's
results, which cost no call). What an op allows is said by its class (`native_gemm`,
`native_view`, `native_copy`, `native_moves`, `native_index`, `native_reduction`: see
adkit/ops/_families.py), so no rule names an op. Does not: place values or order
steps (plan.py), or emit code (program.py, kernels.py).
"""
import numpy as np

from ..ir import passes, printing, rules
from ..ir.passes.fuse import contraction, reduction_dims, unit_view
from ..ops._helpers import Fill
from . import buffers, folded_products, kernels, program, row_products, runtime
from .branches import switch_call
from .buffers import Layout, broadcast_strides, contiguous_strides
from .indexed import indexed
from .kernels import In, Tmp
from .loops import scan_loop
from .revolve_loops import revolve_loop
from .while_loops import while_loop

# ops that only move elements are copied with index tables (two int64 per element
# moved), so only up to this many elements
MOVE_MAX_ELEMENTS = 1 << 20
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def fused_kernel(planner, n):
    """A FusedKernel node: its sub-graph as one kernel (and its row products, if any:
    row_product_kernel)."""
    graph = planner.graph
    if graph.nx.nodes[n]["op"] is not passes.FusedKernel:
        return None
    sub = graph.nx.nodes[n]["params"]["graph"]
    products = [m for m in sub.op_nodes if getattr(sub.nx.nodes[m]["op"], "native_contraction",
                                                    False) and contraction(sub, m) is None]
    if products:
        return row_product_kernel(planner, n, products)
    ins = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    wanted = [planner.destination(n, i) for i in range(len(graph.specs_of(n)))]
    kernel, scales, ins, placed = kernel_for(graph, n, planner.kernel_name(), ins, wanted)
    outs = [planner.place(n, i, wanted[i]) if i in placed else planner.result(n, i)
            for i in range(len(wanted))]
    return [planner.kernel_call(kernel, ins, outs, scales)]


def row_product_kernel(planner, n, products):
    """FusedKernel node n whose sub-graph holds row products (fuse.py: C = A @ B, B a
    member): the kernel of the rest, which writes B's rows into blocks instead of B,
    and a RowProductCall multiplying each block into C (a FoldedProductCall when the
    batch shares A: folded_products.py)."""
    graph = planner.graph
    sub = graph.nx.nodes[n]["params"]["graph"]
    rest, roles = _without_products(sub, products)
    ins = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    kept = [i for i, role in enumerate(roles) if role is None]
    wanted = [planner.destination(n, i) for i in kept]
    vector_bytes = runtime.target_vector_bytes()
    operands = [[u for _, u, _ in sorted(sub.args_of(m))] for m in products]  # A, B
    b_specs = [sub.specs_of(b)[0] for _, b in operands]
    found = [ins[sub.nx.nodes[a]["index"]] for a, _ in operands]
    if None in found:  # an A native code cannot read
        return None
    group = _fold_group(b_specs, found, vector_bytes)
    for spec in b_specs:
        shape, dtype = tuple(spec.shape), spec.dtype.np
        if group > 1:
            strides = folded_products.batch_strides(shape[:-2], shape[-1]) + (
                folded_products.fold_width(group, shape[-1], dtype, vector_bytes), 1)
        else:
            strides = (0,) * (len(shape) - 2) + (
                row_products.padded_width(shape[-1], dtype, vector_bytes), 1)
        wanted.append(Layout(None, 0, shape, strides, dtype))
    kernel, scales, ins, placed = kernel_of(rest, planner.kernel_name(), ins, wanted, rows=True)
    outs = [planner.place(n, i, wanted[j]) if j in placed else planner.result(n, i)
            for j, i in enumerate(kept)]
    calls = [row_products.Product(a, planner.result(n, roles.index(p)), len(kept) + p)
             for p, a in enumerate(found)]
    fmas = sum(int(np.prod(c.c.shape)) * c.a.shape[-1] for c in calls)
    workers = planner.kernel_workers(kernel, fmas * row_products.NS_PER_FMA)
    if not row_products.splits_by_batch(kernel):
        workers = 1
    args = (kernel, ins, outs + [None] * len(products), calls)
    if group == 1:
        blocks = [_blocks(planner, spec, spec.shape[-1], workers, vector_bytes)
                  for spec in b_specs]
        return [row_products.RowProductCall(*args, blocks, workers, scales)]
    blocks = [_blocks(planner, spec, group * spec.shape[-1], workers, vector_bytes,
                      kernel.outputs[c.out].strides[-2]) for spec, c in zip(b_specs, calls)]
    sums = [[planner.scratch((c.c.shape[-2], group * c.c.shape[-1]), c.c.dtype)
             for _ in range(workers)] for c in calls]
    return [folded_products.FoldedProductCall(*args, blocks, sums, workers, group, scales)]


def _fold_group(b_specs, a_layouts, vector_bytes):
    """How many batch elements a row kernel's products fold (folded_products.py; 1:
    none): only when every A is a matrix the batch shares, and every B the same width."""
    batch = {int(np.prod(spec.shape[:-2])) for spec in b_specs}
    widths = {(spec.shape[-1], spec.dtype.np) for spec in b_specs}
    if len(batch) != 1 or len(widths) != 1 or any(len(a.shape) != 2 for a in a_layouts):
        return 1
    (n, dtype), = widths
    return folded_products.group_size(batch.pop(), n, dtype, vector_bytes)


def _blocks(planner, spec, used, workers, vector_bytes, stride=None):
    """One block buffer per worker for B's rows: rows of `used` elements (rounded up
    to whole vectors) `stride` apart (that rounded width by default)."""
    dtype = spec.dtype.np
    padded = row_products.padded_width(used, dtype, vector_bytes)
    rows = row_products.block_rows(spec.shape[-2], padded, dtype)
    return [planner.scratch((rows, stride or padded), dtype) for _ in range(workers)]


def _without_products(sub, products):
    """(a copy of fused sub-graph `sub` without its row products, whose outputs are the
    others of `sub`, then each product's B; for each output of `sub`, None when it is
    still an output, else the index of the product making it)."""
    rest = sub.copy()
    sources = [sub.args_of(o)[0][1:] for o in sub.outputs]
    rest.nx.remove_nodes_from(list(sub.outputs) + list(products))
    roles = [products.index(u) if u in products else None for u, _ in sources]
    for (u, out), role in zip(sources, roles):
        if role is None:
            rest.add_output((u, out))
    for m in products:
        (_, b, b_out), = [arg for arg in sub.args_of(m) if arg[0] == 1]
        rest.add_output((b, b_out))
    return rest, roles


def gemm(planner, n):
    """A matrix product of two float operands of its dtype (its class says
    `native_gemm`) that BLAS can read in place: one MatmulCall."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    if not getattr(data["op"], "native_gemm", False):
        return None
    args = graph.args_of(n)
    arg_specs = [graph.specs_of(u)[out] for _, u, out in args]
    spec = data["specs"][0]
    if len(arg_specs) != 2 or spec.dtype.np.kind != "f" or \
            any(s.dtype != spec.dtype for s in arg_specs):
        return None
    a, b = (planner.layout((u, out)) for _, u, out in args)
    out = buffers.contiguous(None, spec.shape, spec.dtype.np)
    if a is None or b is None or not program.MatmulCall.plan(a, b, out):
        return None
    return [program.MatmulCall(a, b, planner.result(n, 0), planner.threads)]


def views(planner, n):
    """The Layouts of a view op's results in its input's buffer (its class's
    `native_view` run on a probe array laid out like the input, the offsets and strides
    numpy chose read off), or None: the op is no view, numpy copies (reshaping a
    transpose) or the value is empty."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    op = data["op"]
    hook = getattr(op, "native_view", None)
    if hook is None or not op.is_view:
        return None
    args = graph.args_of(n)
    if len(args) != 1:
        return None
    (pos, u, out), = args
    layout = planner.layout((u, out))
    if layout is None or 0 in layout.shape or any(s < 0 for s in layout.strides):
        return None
    dtype = np.dtype(layout.dtype)
    extent = layout.offset + 1 + sum((k - 1) * s for k, s in zip(layout.shape,
                                                                 layout.strides))
    memory = np.empty(extent, dtype)
    probe = np.ndarray(layout.shape, dtype, buffer=memory, offset=layout.offset *
                       dtype.itemsize, strides=tuple(s * dtype.itemsize
                                                     for s in layout.strides))
    try:
        result = hook(*rules.join_args(op, {pos: probe}, data["params"]))
    except Exception:
        return None
    if result is None:
        return None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    found = [_view_of(memory, r, spec, layout.buffer)
             for r, spec in zip(results, data["specs"])]
    if len(found) != len(data["specs"]) or None in found:
        return None
    return found


def _view_of(memory, r, spec, buffer):
    """The Layout of numpy view `r` of `memory` (in `buffer`), or None when it is not one
    of spec's shape."""
    dtype = memory.dtype
    if not isinstance(r, np.ndarray) or _root(r) is not memory or r.dtype != dtype \
            or r.shape != tuple(spec.shape):
        return None
    offset, rest = divmod(r.__array_interface__["data"][0] -
                          memory.__array_interface__["data"][0], dtype.itemsize)
    if rest or any(s % dtype.itemsize or s < 0 for s in r.strides):
        return None
    return Layout(buffer, offset, r.shape, tuple(s // dtype.itemsize for s in r.strides),
                  dtype)


def _root(array):
    """The array that owns the memory `array` views."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def copy_loops(planner, n):
    """Strided copy loops (kernels without steps) for an op whose class's `native_copy`
    says how its result's elements come from its inputs in orders strides describe
    (clone, a reshape that must copy, flip, cat); None for other nodes."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    op, spec = data["op"], data["specs"][0]
    hook = getattr(op, "native_copy", None)
    if hook is None or len(data["specs"]) != 1 or spec.dtype.np not in FLOATS:
        return None
    layouts = [planner.layout((u, out)) for _, u, out in graph.args_of(n)]
    if not layouts or any(x is None or x.dtype != spec.dtype.np for x in layouts):
        return None
    pieces = hook(data["params"], layouts, tuple(spec.shape))
    if pieces is None:
        return None
    out = planner.result(n, 0)
    calls = []
    for read, offset, strides in pieces:
        if read == out._replace(offset=out.offset + offset, shape=tuple(read.shape),
                                strides=tuple(strides)):
            continue  # its maker wrote it in place (Planner.destination)
        if isinstance(read, Fill):  # one value read at every point
            value = planner.constant(np.full(1, read.value, spec.dtype.np))
            read = Layout(value, 0, read.shape, (0,) * len(read.shape), spec.dtype.np)
        kernel = _copy_kernel(planner.kernel_name(), read, strides)
        calls.append(planner.kernel_call(kernel, [read],
                                         [out._replace(offset=offset, shape=read.shape)]))
    return calls


def _copy_kernel(name, layout, out_strides):
    """A kernel with no steps: `layout`'s elements, in its own order, to out_strides."""
    out = kernels.Output(In(0), out_strides, None)
    return kernels.Kernel(name, layout.dtype, layout.shape, [layout.strides], [], [out])


def moves(planner, n):
    """A CopyCall for an op whose class's `native_moves` finds where each result element
    comes from (cat, x[index], the scatter of index's gradient): its inputs' elements
    are numbered, the tables turned into element offsets (constant buffers)."""
    graph = planner.graph
    data = graph.nx.nodes[n]
    op, spec = data["op"], data["specs"][0]
    hook = getattr(op, "native_moves", None)
    if hook is None or len(data["specs"]) != 1 or spec.dtype.np not in FLOATS:
        return None
    args = graph.args_of(n)
    layouts = [planner.layout((u, out)) for _, u, out in args]
    if any(x is None or x.dtype != spec.dtype.np or 0 in x.shape for x in layouts) \
            or 0 in spec.shape:
        return None
    size = int(np.prod(spec.shape))
    counts = [int(np.prod(x.shape)) for x in layouts]
    if size + sum(counts) > MOVE_MAX_ELEMENTS:
        return None  # its index tables would cost more memory than numpy's copy
    probes, start = {}, 1
    for (pos, _, _), layout, count in zip(args, layouts, counts):
        probes[pos] = np.arange(start, start + count, dtype=np.float64).reshape(
            layout.shape)
        start += count
    try:
        moved = hook(tuple(spec.shape), *rules.join_args(op, probes, data["params"]))
    except Exception:
        return None
    if moved is None:
        return None
    numbers, dst, accumulate = moved
    out = planner.result(n, 0)
    sources, start = [], 1
    for layout, count in zip(layouts, counts):  # one table per input
        mine = (numbers >= start) & (numbers < start + count)
        offsets = buffers.element_offsets(layout)[numbers[mine] - start]
        sources.append(program.CopySource(
            layout.buffer, planner.constant(np.ascontiguousarray(offsets)),
            planner.constant(np.ascontiguousarray(dst[mine], dtype=np.int64)),
            int(mine.sum())))
        start += count
    fill = accumulate or len(dst) < size  # zeros first where no input gives an element
    return [program.CopyCall(sources, out, spec.dtype.np, fill, accumulate)]


RULES = (fused_kernel, gemm, copy_loops, moves, scan_loop, while_loop,  # in order, after views
         revolve_loop, switch_call, indexed)


def kernel_for(graph, n, name, in_layouts, out_layouts=()):
    """The Kernel of FusedKernel node n reading `in_layouts`: the sub-graph's
    elementwise ops as steps, its reductions as combining outputs (their class's
    `native_reduction`), its matmuls as Contractions (each operand once more as an
    input, with strides that place a row or a column at each iteration point); and
    {output: scale} for means (`averages`), the layouts of the kernel's inputs
    (in_layouts, then the matmul operands'), and the outputs written where
    `out_layouts` (a Layout or None per output) says instead of contiguously."""
    return kernel_of(graph.nx.nodes[n]["params"]["graph"], name, in_layouts, out_layouts)


def kernel_of(sub, name, in_layouts, out_layouts=(), rows=False):
    """kernel_for's Kernel of fused sub-graph `sub`; with `rows`, each run of its inner
    loop is one row of the iteration space (its last dim stays a dim of its own)."""
    index = {i: k for k, i in enumerate(sub.inputs)}
    steps, position, reduced, alias = [], {}, {}, {}
    names = printing.name_values(sub)  # the body's listing names, for the LLVM values
    views = {m for m in sub.op_nodes if unit_view(sub, m)}
    members = [m for m in sub.op_nodes if reduction_dims(sub, m) is None and m not in views]
    shape, strides = _iteration_space(sub, members, views, in_layouts)
    layouts = list(in_layouts)
    read_in_place = set()  # inputs an elementwise step reads at the iteration point

    def ref(u):
        if u in alias:
            return alias[u]
        if u in index:
            read_in_place.add(index[u])
            return In(index[u])
        return Tmp(position[u])
    for m in sub.op_nodes:
        if m in views:  # the same elements in the same order: its input's value
            alias[m] = ref(sub.args_of(m)[0][1])
            continue
        dims = reduction_dims(sub, m)
        if dims is not None:
            reduced[m] = dims
            continue
        position[m] = len(steps)
        step = _step(sub, m, ref, layouts, strides, in_layouts, index, shape)
        steps.append(step._replace(name=names[(m, 0)]))
    outputs, scales, placed = _outputs(sub, reduced, shape, ref, out_layouts)
    for k in range(len(in_layouts)):  # read only by matmuls: no strides to honour
        if k not in read_in_place:
            strides[k] = (0,) * len(shape)
    floats = {spec.dtype.np for m in sub.nx.nodes for spec in sub.specs_of(m)} - {
        np.dtype(np.bool_)}
    dtype, = floats  # fuse groups ops of one float dtype (and bools)
    kernel = kernels.Kernel(name, dtype, shape, strides, steps, outputs,
                            [layout.dtype for layout in layouts], rows)
    return kernel, scales, layouts, placed


def _iteration_space(sub, members, views, in_layouts):
    """(the kernel's iteration shape, each input's element strides over it): the
    members' shape (the reduced input's for a group of reductions alone), without unit
    dims when members differ in them only."""
    if members:
        shape = tuple(sub.specs_of(members[0])[0].shape)
    else:
        shape = tuple(sub.specs_of(sub.args_of(sub.op_nodes[0])[0][1])[0].shape)
    if views or len({tuple(sub.specs_of(m)[0].shape) for m in members}) > 1:
        return (tuple(d for d in shape if d != 1),
                [_squeezed_strides(sub, i, layout) for i, layout in
                 zip(sub.inputs, in_layouts)])
    return shape, [broadcast_strides(layout, shape) for layout in in_layouts]


def _squeezed_strides(sub, node, layout):
    """Strides of kernel input `node` over the iteration shape of a kernel whose
    members differ in unit dims: broadcast to the shape of a member that reads it, that
    member's unit dims dropped."""
    reader = next(v for v in sub.nx.successors(node) if sub.nx.nodes[v]["kind"] == "op")
    member_shape = tuple(sub.specs_of(reader)[0].shape)
    return tuple(s for s, d in zip(broadcast_strides(layout, member_shape), member_shape)
                 if d != 1)


def _step(sub, m, ref, layouts, strides, in_layouts, index, shape):
    """Kernel step of sub-graph node m: a Contraction for an inline matmul (its operands
    added as inputs), else a Step of its op."""
    k = contraction(sub, m)
    if k is not None:
        (_, a, _), (_, b, _) = sub.args_of(m)
        a, b = in_layouts[index[a]], in_layouts[index[b]]
        a_ref, a_k = _operand(layouts, strides, a, shape, 0, len(b.shape) == 1)
        b_ref, b_k = _operand(layouts, strides, b, shape, 1, len(a.shape) == 1)
        return kernels.Contraction(a_ref, b_ref, k, a_k, b_k)
    args = []
    for pos, u, _ in sub.args_of(m):
        while len(args) < pos:
            args.append(None)
        args.append(ref(u))
    md = sub.nx.nodes[m]
    return kernels.Step(md["op"], args, md["params"])


def _outputs(sub, reduced, shape, ref, out_layouts):
    """The kernel's Outputs for the sub-graph's outputs, {output: scale} for means and
    the outputs written where their `out_layouts` entry says (the others, and means,
    are written contiguously). A reduction node m over dims reduced[m] is an output
    with stride 0 along them, combined by its op's native_reduction; a mean (its op
    `averages`) scales the sums by 1/count afterwards."""
    outputs, scales, placed = [], {}, set()
    for k, o in enumerate(sub.outputs):
        m = sub.args_of(o)[0][1]
        where = out_layouts[k] if k < len(out_layouts) else None
        if m not in reduced:
            dtype = sub.specs_of(m)[0].dtype.np
            strides = _placed_strides(where, shape) or contiguous_strides(shape)
            placed.update([k] if _placed_strides(where, shape) else [])
            outputs.append(kernels.Output(ref(m), strides, None,
                                          dtype if dtype == np.bool_ else None))
            continue
        dims, op = reduced[m], sub.nx.nodes[m]["op"]
        kept_shape = [n for d, n in enumerate(shape) if d not in dims]
        averages = getattr(op, "averages", False)
        kept_strides = None if averages else _placed_strides(where, kept_shape)
        placed.update([k] if kept_strides else [])
        kept = iter(kept_strides or contiguous_strides(kept_shape))
        out_strides = tuple(0 if d in dims else next(kept) for d in range(len(shape)))
        outputs.append(kernels.Output(ref(sub.args_of(m)[0][1]), out_strides,
                                      op.native_reduction))
        if averages:
            with np.errstate(divide="ignore"):
                scales[k] = float(np.float64(1.0) / np.prod([shape[d] for d in dims]))
    return outputs, scales, placed


def _placed_strides(where, shape):
    """Strides over `shape` that write the output at Layout `where` (a destination the
    planner offers), or None (no destination, or one of other dims)."""
    if where is None:
        return None
    return buffers.unit_strides(where.strides, where.shape, shape)


def _operand(layouts, strides, layout, shape, which, other_is_vector):
    """Add matmul operand `layout` (which: 0 left, 1 right) as a kernel input read at
    iteration points of `shape` = (..., M, N): In(k) and its stride along K. A vector
    operand is the matrix matmul makes of it (a row on the left, a column on the
    right); the product then has no M (or N) dim, so `shape` is read with that dim
    put back, and the operands' strides along it dropped."""
    matrix_shape, dropped = shape, None
    if other_is_vector or len(layout.shape) == 1:
        vector_side = which if len(layout.shape) == 1 else 1 - which
        dropped = len(shape) - 1 if vector_side == 0 else len(shape)
        matrix_shape = shape[:dropped] + (1,) + shape[dropped:]
    if len(layout.shape) == 1:
        grow = (lambda t, z: (z,) + t) if which == 0 else (lambda t, z: t + (z,))
        matrix = layout._replace(shape=grow(layout.shape, 1), strides=grow(layout.strides, 0))
    else:
        matrix = layout
    point, along_k = _matrix_strides(matrix, matrix_shape, which)
    if dropped is not None:
        point = point[:dropped] + point[dropped + 1:]
    layouts.append(layout)
    strides.append(point)
    return In(len(layouts) - 1), along_k


def _matrix_strides(layout, shape, which):
    """A matrix operand's element strides at the points of `shape` = (..., M, N), and
    its stride along K."""
    batch = len(shape) - 2
    lead = batch - (len(layout.shape) - 2)
    batch_strides = (0,) * lead + tuple(
        0 if k == 1 and m != 1 else s
        for k, m, s in zip(layout.shape[:-2], shape[lead:batch], layout.strides[:-2]))
    row, col = layout.strides[-2:]
    if which == 0:  # A[..., i, kk]: moves with i (the row), not with j
        point, along_k = (row if layout.shape[-2] != 1 else 0, 0), col
    else:  # B[..., kk, j]: moves with j (the column), not with i
        point, along_k = (0, col if layout.shape[-1] != 1 else 0), row
    return batch_strides + point, along_k

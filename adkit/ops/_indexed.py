"""How a gather or scatter op tells compiled code what it reads and writes by index.

Owns: `Access` (the description an op's `native_index` rule returns), `Indexed` (a dim
addressed by an index tensor) and the shape helpers those rules share. Does not: emit
code (codegen/indexed.py turns an Access into one native loop with bounds checks) or
hold any op's math (each op's class has its own `native_index`).

An op's `native_index(params, args) -> Access | None` receives its static arguments by
name and {argument position: a zero-cost array of that tensor's shape and dtype}, as a
shape rule does; it returns None where numpy must run it (arguments its forward rejects:
numpy then raises PyTorch's error). The Access describes one loop over the points p of
`shape`:

    gather:  out[p] = data[addr(p)]              (out: contiguous, of `shape`)
    put:     out = copy of data;  out[addr(p)] = v(p)
    add:     out = copy of data;  out[addr(p)] += v(p)   (repeated addresses add up)

where addr(p) picks, for dim d of the data (or of its `region`, a view of it), either
coordinate p[j] (`dims[d] == j`) or the value of an index tensor read at p
(`dims[d] == Indexed(pos, at)`), and v(p) is the `values` tensor read at p times `scale`
(or the number `value`), cast to the result's dtype. A tensor read at p (`at`: for each of its dims, the dim of
`shape` it runs along, None for a size-1 dim that runs along none) broadcasts its
size-1 dims. Index values are checked against the dim's size before any access; with
`wraps`, -n <= i < 0 counts from the end as in x[i] (gather, index_select, scatter and
index_add reject negative indices, as PyTorch does).
"""
from collections import namedtuple

import numpy as np

from ._helpers import wrap_dim

Access = namedtuple("Access", ("name", "mode", "shape", "data", "dims", "region", "values",
                               "value", "scale", "wraps"))
Access.__new__.__defaults__ = (None, None, None, 1, False)  # region ... wraps

# dim of the data addressed by the index tensor at argument position `pos`, read at p
Indexed = namedtuple("Indexed", ("pos", "at"))


def identity_dims(ndim, dim, index):
    """dims for data of rank `ndim` addressed at p's coordinates except `dim`, which
    index tensor `index` (an Indexed) gives."""
    return tuple(index if d == dim else d for d in range(ndim))


def right_aligned(shape, target):
    """`at` for a tensor of `shape` broadcast against `target` (numpy's right alignment;
    leading size-1 dims beyond target's rank run along none); None when it does not
    broadcast."""
    shape, target = tuple(shape), tuple(target)
    extra = len(shape) - len(target)
    if extra > 0 and any(n != 1 for n in shape[:extra]):
        return None
    at = [None] * max(extra, 0)
    for k, n in enumerate(shape[max(extra, 0):]):
        j = len(target) - (len(shape) - max(extra, 0)) + k
        if n != 1 and n != target[j]:
            return None
        at.append(j)
    return tuple(at)


def fits_within(shape, target, skip=None):
    """Whether a tensor of `shape` read at the points of `target` stays inside it (same
    rank, no dim smaller than target's except `skip`)."""
    return len(shape) == len(target) and all(
        d == skip or n >= m for d, (n, m) in enumerate(zip(shape, target)))


def advanced_shape(shape, positions, index_shape):
    """(result shape, where its index dims start) of numpy's advanced indexing of a
    value of `shape` at dims `positions` by indices broadcast to `index_shape`: the index
    dims replace the indexed dims where the first one was when they are adjacent, else
    they come first."""
    positions = tuple(positions)
    adjacent = positions == tuple(range(positions[0], positions[0] + len(positions)))
    start = positions[0] if adjacent else 0
    rest = [n for d, n in enumerate(shape) if d not in positions]
    return tuple(rest[:start]) + tuple(index_shape) + tuple(rest[start:]), start


def broadcast_indices(shapes):
    """The broadcast shape of index tensors, with PyTorch's error."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together "
                         f"with shapes {', '.join(str(list(s)) for s in shapes)}") from None


def advanced_dims(shape, positions, index_positions, index_shapes):
    """(iteration shape, dims) of an Access reading a value of `shape` at dims
    `positions` by the index tensors at argument positions `index_positions`."""
    index_shape = broadcast_indices(index_shapes)
    out, start = advanced_shape(shape, positions, index_shape)
    nb = len(index_shape)
    dims, j = [], 0
    for d in range(len(shape)):
        if d in positions:
            k = positions.index(d)
            at = right_aligned(index_shapes[k], index_shape)
            dims.append(Indexed(index_positions[k], tuple(
                None if a is None else start + a for a in at)))
        else:
            dims.append(j if j < start else j + nb)
            j += 1
    return out, tuple(dims)


def select_access(params, args):
    """index_select's native rule: a gather along dim by a vector (or 0-d) index."""
    x, index = args[0], args[2]
    if x.ndim == 0 or index.ndim > 1:
        return None
    d = wrap_dim(params["dim"], x.ndim)
    shape = x.shape[:d] + (index.size,) + x.shape[d + 1:]
    return Access("index_select()", "gather", shape, 0,
                  identity_dims(x.ndim, d, Indexed(2, (d,) * index.ndim)))


def along_access(name, mode, params, args, values=None):
    """The native rule of gather (mode "gather") and scatter/scatter_add ("put", "add"):
    one point per element of index, dim `dim` addressed by it, the others by the point;
    values: the src tensor's position (or None: the number params["src"])."""
    x, index = args[0], args[2]
    if x.ndim == 0:
        return None
    d = wrap_dim(params["dim"], x.ndim)
    if not fits_within(x.shape, index.shape, skip=d):
        return None
    every = tuple(range(x.ndim))
    value = None
    if values is not None:
        src = args[values]
        if src.dtype != x.dtype or not fits_within(src.shape, index.shape):
            return None
        values = (values, every)
    elif mode != "gather":
        value = params["src"]
    return Access(name, mode, index.shape, 0, identity_dims(x.ndim, d, Indexed(2, every)),
                  None, values, value)

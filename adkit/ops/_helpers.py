"""Small helpers shared by op rules, named for what they do.

Owns: unbroadcasting (`sum_to`), dim normalization, dtype helpers for forwards,
saving mixed tensor/number inputs, and the shared parts of native rules (`c_strides`,
`copy_in_order`, `basic_view`, `moves_by_forward`, `NoDecomposition`). Does not: define ops.
"""
from collections import namedtuple

import numpy as np

from .. import dtypes
from ..tensor import Tensor, _wrap_dim


def sum_to(t, shape):
    """Sum `t` down to `shape` (undo numpy broadcasting); `t` itself if already there."""
    if t is None or t.shape == tuple(shape):
        return t
    return t.sum_to_size(tuple(shape))


def shape_of(x):
    """Shape of a tensor or array; () for a Python number."""
    return tuple(x.shape) if isinstance(x, (Tensor, np.ndarray)) else ()


def wrap_dim(dim, ndim):
    return _wrap_dim(dim, ndim)


def normalize_dims(dim, ndim):
    """`dim` (None, int, or sequence) as a sorted tuple of non-negative dims; None -> all."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    dims = tuple(sorted(_wrap_dim(int(d), ndim) for d in dim))
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"dim {dims} appears multiple times in the list of dims")
    return dims


def as_float_array(x):
    """Integer and bool arrays become the default float dtype (exp, sin, ...)."""
    if x.dtype.kind != "f":
        return x.astype(dtypes.get_default_dtype().np)
    return x


def cast_result(result, a, b):
    """Cast a binary numpy result to PyTorch's promoted dtype of the operands."""
    if type(result) is np.ndarray:
        dt = result.dtype
        # NB: the common case first, by identity: every array operand already has the
        # result's dtype (numpy and PyTorch agree then, beside Python numbers too)
        if getattr(a, "dtype", dt) is dt and getattr(b, "dtype", dt) is dt:
            return result
    if type(a) is np.ndarray:
        want = a.dtype
        if type(b) is np.ndarray:
            if b.dtype != want:
                want = dtypes.result_type(a, b).np
        elif type(b) is not float or want.kind != "f":  # (a float keeps a float's dtype)
            want = dtypes.result_type(a, b).np
    elif type(b) is np.ndarray and type(a) is float and b.dtype.kind == "f":
        want = b.dtype
    else:
        want = dtypes.result_type(a, b).np
    if type(result) is not np.ndarray:
        result = np.asarray(result)
    return result if result.dtype == want else result.astype(want)


def float_cast_result(result, *operands):
    """Like cast_result, but integer results become the default float dtype."""
    if type(result) is np.ndarray:
        dt = result.dtype
        if dt.kind == "f" and all(getattr(o, "dtype", dt) is dt for o in operands):
            return result  # NB: the common case, as in cast_result
    want = dtypes.float_result_type(*operands).np
    result = np.asarray(result)
    return result if result.dtype == want else result.astype(want)


def save_mixed(ctx, inputs, output=None):
    """save_for_backward the tensor inputs (and output); keep numbers on ctx."""
    tensors, constants = [], []
    for a in inputs:
        is_tensor = isinstance(a, Tensor)
        tensors.append(a if is_tensor else None)
        constants.append(None if is_tensor else a)
    tensors.append(output)
    ctx.save_for_backward(*tensors)
    ctx.constants = constants


def load_mixed(ctx):
    """The inputs saved by save_mixed (numbers back in place), then the output."""
    saved = ctx.saved_tensors
    args = [c if s is None else s for s, c in zip(saved, ctx.constants)]
    return args, saved[-1]


# ---------------------------------------------------------------- native rules
class NoDecomposition(Exception):
    """Raised by an op's `decomposition` (its forward written with primitive adkit ops,
    which the jit's decompose pass inlines so that fusion can reach them) when it does
    not apply to these arguments: the node then stays as it is."""


def c_strides(shape):
    """Element strides of a C-ordered (row-major, contiguous) array of `shape`."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(strides[::-1])


# a native_copy piece that writes one value (zeros by default) at every point
Fill = namedtuple("Fill", ("shape", "value"), defaults=(0.0,))


def copy_in_order(params, sources, out_shape):
    """The native copy rule of an op that copies its one input in the input's own C
    order, which is also its result's (clone, contiguous, a reshape numpy cannot view):
    one piece, read as the input lies, written contiguously.

    An op's `native_copy(params, sources, out_shape)` says how compiled code copies its
    result with strided loops. params: its static arguments by name; sources: its
    tensor arguments' layouts (namedtuples with offset, shape and strides in elements;
    `_replace` gives a changed one). Returns pieces (read, out_offset, out_strides):
    the elements of `read` in its own C order are written at out_offset + index .
    out_strides of the result; a `Fill(shape, value)` read writes the value there (pieces
    are written in order). None when no strided copy makes the result."""
    if len(sources) != 1:
        return None
    (x,) = sources
    return [(x, 0, c_strides(x.shape))]


def basic_view(out_shape, key):
    """(shape, element offset, element strides) of result[key] for a C-ordered result of
    out_shape and a basic key (ints, slices, None, Ellipsis)."""
    # the key applied to a stand-in laid out like the result, one byte per element: only
    # its view's offset and strides are read, never its memory
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), tuple(out_shape),
                                               c_strides(out_shape))
    view = stand_in[tuple(key) + (Ellipsis,)]
    offset = view.__array_interface__["data"][0] - stand_in.__array_interface__["data"][0]
    return view.shape, offset, view.strides


def broadcast_layout(layout, shape):
    """A native_copy source laid out to be read at the points of `shape` it broadcasts
    to (stride 0 along the dims it repeats)."""
    lead = len(shape) - len(layout.shape)
    strides = (0,) * lead + tuple(0 if n == 1 and m != 1 else st for n, m, st in zip(
        layout.shape, shape[lead:], layout.strides))
    return layout._replace(shape=tuple(shape), strides=strides)


def moves_by_forward(cls, out_shape, *args):
    """The native moves rule of an op whose forward only moves elements (no arithmetic):
    forward run on numbered elements shows where each result element comes from.

    args: forward's arguments, each tensor a float64 array whose elements are numbered
    1, 2, ... (distinct across tensors). Returns (numbers, result flat indices,
    accumulate): result element dst[i] is input element number numbers[i]; result
    elements no input gives are 0; accumulate says whether repeats add up. None when
    the result is not the traced one (its shape differs, or forward computed)."""
    result = np.asarray(cls.forward(*args))
    if result.shape != tuple(out_shape) or result.dtype != np.float64:
        return None
    numbers = result.reshape(-1).astype(np.int64)
    dst = np.flatnonzero(numbers)
    return numbers[dst], dst, False


def unwritable_error(arr):
    """The error for writing in place into the read-only ndarray `arr`: PyTorch's when
    elements share memory (a broadcast: a stride 0 along a dim longer than 1), else a
    read-only source (from_numpy of a read-only array, from_dlpack of a JAX array)."""
    while arr is not None:
        if any(s == 0 and n > 1 for s, n in zip(arr.strides, arr.shape)):
            return RuntimeError("unsupported operation: more than one element of the "
                                "written-to tensor refers to a single memory location. "
                                "Please clone() the tensor before performing the operation.")
        arr = arr.base if isinstance(arr.base, np.ndarray) else None
    return RuntimeError("a tensor whose memory is read-only (made from a read-only array, "
                        "e.g. by from_numpy or from_dlpack) cannot be written in place. "
                        "Please clone() the tensor before performing the operation.")


"""Small helpers shared by op rules, named for what they do.

Owns: unbroadcasting (`sum_to`), dim normalization, dtype helpers for forwards, and
saving mixed tensor/number inputs. Does not: define ops.
"""
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
    if type(a) is np.ndarray:
        if type(b) is np.ndarray:
            want = a.dtype if a.dtype == b.dtype else dtypes.result_type(a, b).np
        elif type(b) is float and a.dtype.kind == "f":
            want = a.dtype  # a float tensor keeps its dtype next to a Python float
        else:
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

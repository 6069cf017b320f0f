"""Tensors leaving and entering: DLPack (zero copy to and from numpy, PyTorch, JAX...)
and pickling and copying of tensors.

Owns: `ak.from_dlpack`, what `Tensor.__dlpack__`/`__dlpack_device__` do, and what
`pickle`, `copy.copy` and `copy.deepcopy` make of a tensor. Does not: pickle graphs
(adkit/ir/graph.py) or jitted functions and compiled programs (adkit/codegen/pickling.py).

DLPack goes through numpy's implementation (an adkit tensor is a numpy array plus
autograd metadata), with PyTorch's rules on top: a tensor that requires grad is not
exported ("use tensor.detach()"), and what `from_dlpack` returns never requires grad.
Where DLPack cannot carry a tensor the error says why: a traced or batched tensor has no
values; negative strides (a flipped view) are refused, since PyTorch aborts the process
on them; a read-only array needs a consumer that speaks DLPack 1.0 (its read-only flag).
Writes through the other library are not seen by autograd's version counter.

Pickling follows PyTorch's: a tensor travels as its values, `requires_grad` and its
public attributes (`t.name = ...`); it arrives as a leaf (a non-leaf that requires grad
becomes a leaf that requires grad), without `.grad`, hooks or view relations (a view
arrives as a tensor of its own elements). `copy.deepcopy` is PyTorch's too (leaves only;
`.grad` copied); `copy.copy` keeps every attribute, history included.
"""
import copy
import pickle

import numpy as np

from . import dtypes
from .tensor import AbstractTensor, Tensor, _make, _new_tensor, device

CPU = 1  # DLPack's kDLCPU
_NO_GRAD_EXPORT = "Can't export tensors that require gradient, use tensor.detach()"
_DEEPCOPY_LEAVES = ("Only Tensors created explicitly by the user (graph leaves) support "
                    "the deepcopy protocol at the moment.")


# ---------------------------------------------------------------- DLPack
def tensor_dlpack(t, **kwargs):
    """`t.__dlpack__(stream=None, max_version=None, dl_device=None, copy=None)`: a
    DLPack capsule viewing t's memory (numpy's, whose keywords these are)."""
    if isinstance(t, AbstractTensor):
        raise BufferError("DLPack export needs the values of this tensor, which it does not "
                          "hold (a traced or batched tensor): export the transform's result")
    if t._requires_grad:
        raise BufferError(_NO_GRAD_EXPORT)
    data = t._data
    if kwargs.get("copy"):
        data = np.array(data, order="C")  # a copy asked for: a fresh, contiguous one
        kwargs["copy"] = False
    elif any(s < 0 for s in data.strides):
        raise BufferError("DLPack export of a tensor with negative strides (a flipped view) "
                          "is refused: consumers such as PyTorch cannot read them; export "
                          "t.contiguous() (a copy), or pass copy=True")
    return data.__dlpack__(**kwargs)


def tensor_dlpack_device(t):
    """`t.__dlpack_device__()`: (kDLCPU, 0); adkit tensors live on the CPU."""
    return (CPU, 0)


class _Capsule:
    """A bare DLPack capsule (torch.utils.dlpack.to_dlpack's) dressed as a producer of
    DLPack before 1.0 (no max_version), so numpy can read it."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (CPU, 0)


def from_dlpack(obj, *, device=None, copy=None):  # noqa: A002 (the Array API's names)
    """A tensor sharing memory with `obj`, an array with `__dlpack__` (numpy, PyTorch,
    JAX...) or a DLPack capsule. `copy=True` copies; `copy=False` never does (it
    raises where a copy would be needed: an integer type adkit widens, e.g. uint8).
    The result never requires grad, as in PyTorch; a read-only source (a JAX array)
    gives a read-only tensor."""
    _check_cpu(device)
    if type(obj).__name__ == "PyCapsule":
        obj = _Capsule(obj)
    elif not hasattr(obj, "__dlpack__"):
        raise TypeError(f"ak.from_dlpack: expected an array with __dlpack__ (numpy, PyTorch, "
                        f"JAX...) or a DLPack capsule, got {type(obj).__name__}")
    if hasattr(obj, "__dlpack_device__"):
        kind, index = obj.__dlpack_device__()
        if int(kind) != CPU:
            raise BufferError(f"ak.from_dlpack: the array is on DLPack device ({int(kind)}, "
                              f"{index}), not the CPU; adkit computes on the CPU only: move "
                              "it there first (e.g. x.cpu())")
    try:
        arr = np.from_dlpack(obj)
    except RuntimeError as e:
        if "dtype" not in str(e):
            raise
        raise TypeError(f"ak.from_dlpack: numpy cannot read this array's dtype "
                        f"({getattr(obj, 'dtype', 'unknown')}); adkit supports bool, int32, "
                        "int64, float16, float32 and float64: convert it first") from None
    return _make(_adkit_array(arr, copy))


def _adkit_array(arr, copy):
    """The imported array as a tensor holds it: itself, or a copy when asked or needed."""
    wanted = dtypes.from_numpy_dtype(arr.dtype).np  # TypeError for complex, uint64...
    if wanted != arr.dtype:
        if copy is False:
            raise BufferError(f"ak.from_dlpack(copy=False): adkit has no {arr.dtype}; it "
                              f"would need a copy as {wanted}")
        return arr.astype(wanted)
    return arr.copy() if copy else arr


def _check_cpu(where):
    if where is not None:
        device(where)  # RuntimeError for anything but the CPU


# ---------------------------------------------------------------- pickle and copy
def reduce_tensor(t):
    """`t.__reduce_ex__`: values, requires_grad and public attributes (PyTorch's rule)."""
    if isinstance(t, AbstractTensor):
        raise pickle.PicklingError(f"cannot pickle a {type(t).__name__}: it stands for "
                                   "values it does not hold (inside a trace or a vmap); "
                                   "pickle the transform's result")
    return (_rebuild_tensor, (t._data, t._requires_grad, _attributes(t)))


def _rebuild_tensor(data, requires_grad, attributes):
    t = _make(data)
    t._requires_grad = requires_grad
    t.__dict__.update(attributes)
    return t


def _attributes(t):
    """The attributes a user set on t (t.name = ...), not adkit's own (underscored)."""
    return {k: v for k, v in t.__dict__.items() if not k.startswith("_")}


def copy_tensor(t):
    """`copy.copy(t)`: a new Tensor object of t's class sharing every attribute (data,
    history, version counter), as copying did before tensors pickled themselves."""
    new = _new_tensor(type(t))
    for cls in type(t).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(t, name):
                setattr(new, name, getattr(t, name))
    new.__dict__.update(t.__dict__)
    return new


def deepcopy_tensor(t, memo):
    """`copy.deepcopy(t)`, PyTorch's: leaves only; values, requires_grad, a copy of
    .grad and of the public attributes."""
    if isinstance(t, AbstractTensor):
        raise RuntimeError(f"copy.deepcopy of a {type(t).__name__}: it holds no values "
                           "(inside a trace or a vmap); use t.clone()")
    if t._grad_fn is not None:
        raise RuntimeError(_DEEPCOPY_LEAVES)
    new = _make(t._data.copy())
    memo[id(t)] = new
    new._requires_grad = t._requires_grad
    if t._grad is not None:
        new._grad = copy.deepcopy(t._grad, memo)
    new.__dict__.update(copy.deepcopy(_attributes(t), memo))
    return new


__all__ = ["from_dlpack"]

"""The Tensor: a numpy array plus autograd metadata; Size; the creation functions.

Owns: `Tensor` storage and metadata (`requires_grad`, `grad`, `grad_fn`, version counter),
`Size`, `ak.tensor/zeros/ones/...`, the PyTorch-like `repr`. Does not: define operations.
Op methods (`x.exp()`, `x + y`, `x[i]`) are bound onto Tensor by `adkit/ops/__init__.py`.
Invariant: `_data` is always an ndarray whose dtype is one of `dtypes.ALL`.
"""
import numbers
import threading
import warnings

import numpy as np

from . import _tensor_html, dtypes
from ._hooks import HookDict, add_hook


# PyTorch's names of dtypes in its messages: C type names and scalar type names
_C_NAMES = {"float16": "c10::Half", "float32": "float", "float64": "double",
            "int32": "int", "int64": "long int", "bool": "bool"}
_TYPE_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double", "int32": "Int",
               "int64": "Long", "bool": "Bool"}
_CREATION_REQUIRES_FLOAT = ("Only Tensors of floating point and complex dtype can require "
                            "gradients")


def _leaf_requires_grad(t):
    """requires_grad=True given to a creation function (PyTorch's wording differs from
    requires_grad_()'s)."""
    if t._data.dtype.kind != "f":
        raise RuntimeError(_CREATION_REQUIRES_FLOAT)
    t._requires_grad = True
    return t


class device:
    """Where a tensor lives: adkit computes on the CPU only, so `ak.device("cpu")` (or
    "cpu:0") is the one device; PyTorch code passing device="cpu" ports unchanged."""

    def __init__(self, type="cpu", index=None):  # noqa: A002  (PyTorch's name)
        if isinstance(type, device):
            type, index = type.type, type.index
        kind, _, number = str(type).partition(":")
        if kind != "cpu":
            raise RuntimeError(f"adkit computes on the CPU only: device '{type}' is not "
                               "available (use 'cpu')")
        self.type = "cpu"
        self.index = int(number) if number else index

    def __repr__(self):
        return "device(type='cpu')" if self.index is None else \
            f"device(type='cpu', index={self.index})"

    def __str__(self):
        return "cpu" if self.index is None else f"cpu:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and other.type == self.type

    def __hash__(self):
        return hash(self.type)


def is_inference(t):
    """`ak.is_inference(t)`: whether t was made inside inference_mode."""
    return t.is_inference()


def _check_device(where):
    """A device= keyword: None or the CPU (anything else raises)."""
    if where is not None:
        device(where)


class _Creation(threading.local):
    """What kind of tensor is made now: inside `inference_mode` (autograd/grad_mode.py
    sets the flag), every new tensor is an inference tensor, as in PyTorch."""
    inference = False


CREATION = _Creation()


class Size(tuple):
    """The shape of a tensor: a tuple of ints that prints as `adkit.Size([2, 3])`."""

    def __repr__(self):
        return f"adkit.Size({list(self)})"

    def numel(self):
        return int(np.prod(self, dtype=np.int64))


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    `_data` is the numpy array; `_grad_fn` the node that made it (None for leaves);
    `_version` is shared, through a one-element list, with every view of the same data.
    """

    __slots__ = ("_data", "_requires_grad", "_grad_fn", "_output_nr", "_version_counter",
                 "_base", "__dict__", "__weakref__")
    # numpy's binary operators defer to ours (ndarray + Tensor -> Tensor.__radd__).
    __array_priority__ = 1000
    # Rarely set (leaves, hooks, retain_grad): class defaults, not slots, so that making
    # a tensor (once per op output) stores less; set per instance when needed.
    _grad = None
    _retains_grad = False
    _hooks = None
    _accumulator = None  # a weak reference to the leaf's AccumulateGrad node
    # Forward-AD tangents by level (autograd/forward_ad.py); set per instance when needed.
    _fw = None
    # For views: how to re-derive this view from its root `_base` (autograd/views.py).
    _view_fn = None
    # Made inside inference_mode (set per instance by _make/_init when so).
    _inference = False

    def __init__(self, data, dtype=None, requires_grad=False):
        arr = _to_array(data, dtype)
        _init(self, arr, None, [0])
        if requires_grad:
            _leaf_requires_grad(self)

    # ----------------------------------------------------------------- attributes
    @property
    def shape(self):
        return Size(self._data.shape)

    @property
    def dtype(self):
        return dtypes.from_numpy_dtype(self._data.dtype)

    @property
    def device(self):
        return device("cpu")

    def is_inference(self):
        """Whether the tensor was made inside inference_mode (PyTorch's inference
        tensors: never saved for backward, not written in place outside the mode)."""
        return self._inference

    @property
    def is_cpu(self):
        return True

    def cpu(self):
        """The tensor itself (adkit tensors always live on the CPU), as PyTorch's .cpu()."""
        return self

    @property
    def output_nr(self):
        """Which output of its grad_fn this tensor is (0 for leaves)."""
        return self._output_nr

    @property
    def ndim(self):
        return self._data.ndim

    def dim(self):
        return self._data.ndim

    def numel(self):
        return self._data.size

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self._data.shape[_wrap_dim(dim, self._data.ndim)]

    def element_size(self):
        return self._data.itemsize

    def is_floating_point(self):
        return self._data.dtype.kind == "f"

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        if self._grad_fn is not None and not value:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to "
                "use a computed variable in a subgraph that doesn't require differentiation "
                "use var_no_grad = var.detach().")
        if value and self._data.dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if value and self._inference and not CREATION.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                               "InferenceMode is not allowed.")
        self._requires_grad = bool(value)

    @property
    def grad_fn(self):
        return self._grad_fn

    @property
    def is_leaf(self):
        return self._grad_fn is None

    @property
    def grad(self):
        if self._grad_fn is not None and not self._retains_grad:
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor.", UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got "
                                f"grad of type {type(value).__name__}")
            if value._data.shape != self._data.shape:
                raise RuntimeError(f"attempting to assign a gradient of size "
                                   f"'{list(value._data.shape)}' to a tensor of size "
                                   f"'{list(self._data.shape)}'. Please ensure that the "
                                   "gradient and the tensor are the same size")
            if value._data.dtype != self._data.dtype:
                raise RuntimeError(f"attempting to assign a gradient with dtype "
                                   f"'{_C_NAMES[value._data.dtype.name]}' to a tensor with "
                                   f"grad_dtype '{_TYPE_NAMES[self._data.dtype.name]}'. The "
                                   "gradient must match the tensor's grad_dtype (defaults "
                                   "to the tensor's dtype).")
        self._grad = value

    @property
    def retains_grad(self):
        return self._retains_grad

    @property
    def _version(self):
        return self._version_counter[0]

    def _bump_version(self):
        self._version_counter[0] += 1

    @property
    def data(self):
        """A tensor sharing this one's array but outside autograd (own version counter)."""
        return _make(self._data, None, 0, False, [0])

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, not {type(value).__name__}")
        self._data = value._data

    # ------------------------------------------------------------ conversions
    def numpy(self, *, force=False):
        """The underlying ndarray, sharing memory with this tensor."""
        if self._requires_grad and not force:
            from .autograd.grad_mode import STATE  # upward call (see tests/test_layering.py)
            if STATE.enabled:
                raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                                   "Use tensor.detach().numpy() instead.")
        return self._data

    def __array__(self, dtype=None, copy=None):
        arr = self._data
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __dlpack__(self, *args, **kwargs):
        """DLPack export, zero copy (adkit/interop.py)."""
        from .interop import tensor_dlpack  # upward call (see tests/test_layering.py)
        return tensor_dlpack(self, *args, **kwargs)

    def __dlpack_device__(self):
        from .interop import tensor_dlpack_device  # upward call (see tests/test_layering.py)
        return tensor_dlpack_device(self)

    # pickling and copying: PyTorch's rules (adkit/interop.py)
    def __reduce_ex__(self, protocol):
        from .interop import reduce_tensor  # upward call (see tests/test_layering.py)
        return reduce_tensor(self)

    def __copy__(self):
        from .interop import copy_tensor  # upward call (see tests/test_layering.py)
        return copy_tensor(self)

    def __deepcopy__(self, memo):
        from .interop import deepcopy_tensor  # upward call (see tests/test_layering.py)
        return deepcopy_tensor(self, memo)

    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be "
                               "converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is "
                               "ambiguous")
        return bool(self._data.reshape(()))

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._data.dtype.kind not in "iu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted "
                            "to an index")
        return int(self.item())

    __hash__ = object.__hash__

    # ------------------------------------------------------------ autograd
    def detach(self):
        """A new leaf sharing data and version counter, cut from the graph."""
        return _make(self._data, None, 0, False, self._version_counter)

    def detach_(self):
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self._grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        return self

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    def retain_grad(self):
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._grad_fn is None or self._retains_grad:
            return
        self._retains_grad = True
        self._grad_fn._add_retain_grad_hook(self)

    def register_hook(self, hook):
        """Register `hook(grad) -> Tensor or None`, run when this tensor's gradient is
        computed; a returned tensor replaces the gradient. Returns a removable handle."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        if self._grad_fn is not None:
            return self._grad_fn._add_tensor_pre_hook(self._output_nr, hook)
        if self._hooks is None:
            self._hooks = HookDict()
        return add_hook(self._hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Register `hook(tensor)`, run after backward accumulated into this leaf's
        `.grad` (PyTorch's, e.g. for optimizer steps in backward). Returns a handle."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        hooks = self.__dict__.get("_post_accumulate_hooks")
        if hooks is None:
            hooks = self._post_accumulate_hooks = HookDict()
        return add_hook(hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        from .autograd import engine  # upward call (see tests/test_layering.py)
        engine.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # ------------------------------------------------------------ printing
    def __repr__(self):
        return _format_tensor(self)

    def _repr_html_(self):  # notebooks
        values = None if isinstance(self, AbstractTensor) else _format_numbers(self._data)
        return _tensor_html.tensor_html(self, values)

    def __format__(self, spec):
        if self._data.ndim == 0 and spec:
            return format(self.item(), spec)
        return object.__format__(self, spec)


class AbstractTensor(Tensor):
    """Base of tensors that stand for values they do not hold (a tracer, a batched
    example): shape and dtype work, every read of the values calls `_value_error`."""

    __slots__ = ()

    def _value_error(self, what):
        raise RuntimeError(f"{what} needs the values of this tensor, which it does not hold")

    def __bool__(self):
        self._value_error("bool(tensor) (e.g. `if`/`while` on a tensor)")

    def item(self):
        self._value_error("tensor.item()")

    def tolist(self):
        self._value_error("tensor.tolist()")

    def numpy(self, *, force=False):
        self._value_error("tensor.numpy()")

    def __array__(self, dtype=None, copy=None):
        self._value_error("converting a tensor to a numpy array")

    def __float__(self):
        self._value_error("float(tensor)")

    def __int__(self):
        self._value_error("int(tensor)")

    def __index__(self):
        self._value_error("using a tensor as an index or size")


def _init(t, arr, grad_fn, version_counter, requires_grad=False, output_nr=0):
    t._data = arr
    t._requires_grad = requires_grad
    t._grad_fn = grad_fn
    t._output_nr = output_nr
    t._version_counter = version_counter
    t._base = None
    if CREATION.inference:
        t._inference = True


def _make(arr, grad_fn=None, output_nr=0, requires_grad=False, version_counter=None):
    """Fast internal constructor: wrap an ndarray (already of a supported dtype).
    NB: _init inlined; this runs once per op output."""
    t = _new_tensor(Tensor)
    t._data = arr
    t._requires_grad = requires_grad
    t._grad_fn = grad_fn
    t._output_nr = output_nr
    t._version_counter = [0] if version_counter is None else version_counter
    t._base = None
    if CREATION.inference:
        t._inference = True
    return t


_new_tensor = object.__new__


def _wrap_dim(dim, ndim):
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {dim})")
    return dim % n


# ---------------------------------------------------------------- data -> array
def _infer_dtype(data):
    """PyTorch's dtype inference for Python data: bool, int64, or the default float."""
    if isinstance(data, np.ndarray):
        return dtypes.from_numpy_dtype(data.dtype)
    if isinstance(data, np.generic):
        return dtypes.from_numpy_dtype(data.dtype)
    if isinstance(data, Tensor):
        return data.dtype
    if isinstance(data, (list, tuple)):
        found = [_infer_dtype(x) for x in data]
        if not found:
            return dtypes.get_default_dtype()
        result = found[0]
        for dt in found[1:]:
            result = dtypes.promote_types(result, dt)
        return result
    if isinstance(data, (bool, np.bool_)):
        return dtypes.bool_
    if isinstance(data, numbers.Integral):
        return dtypes.int64
    if isinstance(data, numbers.Real):
        return dtypes.get_default_dtype()
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def _to_array(data, dtype=None, copy=True):
    dtype = dtypes.to_dtype(dtype)
    if isinstance(data, Tensor):
        arr = np.asarray(data)  # not ._data: a traced or batched tensor has no values
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        if dtype is None:
            dtype = _infer_dtype(data)
        arr = np.array(_unwrap_nested(data), dtype=dtype.np)
        copy = False
    if dtype is None:
        dtype = dtypes.from_numpy_dtype(arr.dtype)
    if arr.dtype != dtype.np:
        return arr.astype(dtype.np)
    return arr.copy() if copy else arr


def _unwrap_nested(data):
    if isinstance(data, Tensor):
        return data._data
    if isinstance(data, (list, tuple)):
        return [_unwrap_nested(x) for x in data]
    return data


# ---------------------------------------------------------------- creation
def tensor(data, dtype=None, requires_grad=False, device=None):
    """A new leaf tensor holding a copy of `data` (PyTorch's `torch.tensor`)."""
    _check_device(device)
    if isinstance(data, Tensor):
        warnings.warn("To copy construct from a tensor, it is recommended to use "
                      "sourceTensor.clone().detach() or "
                      "sourceTensor.clone().detach().requires_grad_(True), rather than "
                      "ak.tensor(sourceTensor).", UserWarning, stacklevel=2)
    t = _make(_to_array(data, dtype))
    if requires_grad:
        _leaf_requires_grad(t)
    return t


def as_tensor(data, dtype=None, device=None):
    """Like `tensor`, but shares memory with `data` when no copy is needed."""
    _check_device(device)
    if isinstance(data, Tensor):
        dtype = dtypes.to_dtype(dtype)
        return data if dtype is None or dtype == data.dtype else data.to(dtype)
    return _make(_to_array(data, dtype, copy=False))


def from_numpy(arr):
    """A tensor sharing memory with the ndarray `arr`."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(arr).__name__})")
    dtypes.from_numpy_dtype(arr.dtype)
    return _make(_to_array(arr, copy=False))


def _shape_arg(size, fn="zeros"):
    """The shape of `fn(*size)` (`fn(2, 3)` or `fn((2, 3))`), or PyTorch's TypeError
    for anything but ints (2.5, "a", True and None are not sizes)."""
    whole = len(size) == 1 and isinstance(size[0], (tuple, list))
    if whole:
        size = size[0]
    shape = []
    for i, s in enumerate(size):
        if isinstance(s, (bool, np.bool_)) or not hasattr(s, "__index__"):
            found = (f"not {type(s).__name__}" if len(size) == 1 and not whole else
                     f"but found element of type {type(s).__name__} at pos {i}")
            raise TypeError(f"{fn}(): argument 'size' (position 1) must be tuple of ints, "
                            f"{found}")
        shape.append(s.__index__())
    shape = tuple(shape)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    return shape


def _new(arr, requires_grad):
    t = _make(arr)
    if requires_grad:
        _leaf_requires_grad(t)
    return t


def _float_or(dtype):
    return dtypes.to_dtype(dtype) or dtypes.get_default_dtype()


def zeros(*size, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.zeros(_shape_arg(size, "zeros"), _float_or(dtype).np), requires_grad)


def ones(*size, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.ones(_shape_arg(size, "ones"), _float_or(dtype).np), requires_grad)


def empty(*size, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.empty(_shape_arg(size, "empty"), _float_or(dtype).np), requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    dtype = dtypes.to_dtype(dtype) or _infer_dtype(fill_value)
    return _new(np.full(_shape_arg((size,), "full"), fill_value, dtype.np),
                requires_grad)


def _like_dtype(t, dtype):
    if dtype is not None:
        return dtypes.to_dtype(dtype).np
    return t._data.dtype if isinstance(t, Tensor) else np.asarray(t).dtype


def zeros_like(t, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.zeros(np.shape(t), _like_dtype(t, dtype)), requires_grad)


def ones_like(t, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.ones(np.shape(t), _like_dtype(t, dtype)), requires_grad)


def empty_like(t, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.empty(np.shape(t), _like_dtype(t, dtype)), requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.full(np.shape(t), fill_value, _like_dtype(t, dtype)), requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = _infer_dtype([start, end, step])
    dtype = dtypes.to_dtype(dtype)
    return _new(np.arange(start, end, step).astype(dtype.np), requires_grad)


def linspace(start, end, steps, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.linspace(start, end, int(steps), dtype=_float_or(dtype).np), requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False, device=None):
    _check_device(device)
    return _new(np.eye(n, m, dtype=_float_or(dtype).np), requires_grad)


# ---------------------------------------------------------------- printing
def _element_formatter(arr):
    """PyTorch's choice: integers as is; floats as `1.` when all are whole, else 4
    decimals, or scientific when the range is very large or small."""
    if arr.dtype.kind in "biu":
        return str
    finite = np.abs(arr[np.isfinite(arr)].astype(np.float64))
    nonzero = finite[finite != 0]
    if finite.size and np.all(finite == np.round(finite)) and finite.max() < 1e8:
        fmt = "{:.0f}."
    elif nonzero.size and (nonzero.max() >= 1e8 or nonzero.min() < 1e-4 or
                           nonzero.max() / nonzero.min() > 1e3 and nonzero.min() < 1e-2):
        fmt = "{:.4e}"
    else:
        fmt = "{:.4f}"
    return lambda v: fmt.format(v) if np.isfinite(v) else str(v)


def _format_numbers(arr):
    one = _element_formatter(arr)
    width = max((len(one(v)) for v in arr.reshape(-1)), default=0)
    return np.array2string(arr, separator=", ", threshold=1000,
                           formatter={"all": lambda v: one(v).rjust(width)})


def _format_tensor(t):
    body = _format_numbers(t._data)
    extras = []
    if t._data.size == 0 and t._data.ndim != 1:
        body = "[]"
        extras.append(f"size={tuple(t._data.shape)}")
    dt = t.dtype
    default_float = dtypes.get_default_dtype()
    if dt not in (default_float, dtypes.int64, dtypes.bool_):
        extras.append(f"dtype={dt!r}")
    if t._grad_fn is not None:
        extras.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._requires_grad:
        extras.append("requires_grad=True")
    body = body.replace("\n", "\n       ")
    return "tensor(" + ", ".join([body] + extras) + ")"

"""What the IR needs from each op's Function class: how a call's arguments map to edges
and params, and the shape/dtype rule.

Owns: `call_positions`, `split_args`/`join_args` (bound arguments <-> tensor positions +
params by name) and `infer` (an op's `infer` hook when it has one, else the op run on
stand-in zeros). Does not: hold per-op knowledge (the hooks live on the op classes).
"""
from collections import namedtuple

import numpy as np

from .. import _dispatch, dtypes
from ..autograd.function import _binding
from ..autograd.grad_mode import no_grad
from ..tensor import Tensor, _make

class TensorSpec(namedtuple("TensorSpec", ("shape", "dtype"))):
    """The shape and dtype of a value, without the value: `ak.ir.TensorSpec((3, 4),
    ak.float32)` (dtype defaults to the default dtype; numpy dtypes and "float64"-style
    strings are accepted). `ak.trace(f, spec, ...)` traces on specs alone."""
    __slots__ = ()

    def __new__(cls, shape, dtype=None):
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (shape,)
        try:
            dims = tuple(shape)
        except TypeError:
            raise TypeError(f"TensorSpec: shape must be a tuple of ints, not "
                            f"{type(shape).__name__}") from None
        for i, d in enumerate(dims):
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
                raise TypeError(f"TensorSpec: shape must be a tuple of non-negative ints, "
                                f"but found {d!r} ({type(d).__name__}) at pos {i}")
        dtype = dtypes.to_dtype(dtype) or dtypes.get_default_dtype()
        return super().__new__(cls, tuple(int(d) for d in dims), dtype)


def spec_of(value):
    """TensorSpec of an ndarray or Tensor."""
    arr = value._data if isinstance(value, Tensor) else value
    # _make skips __new__'s checks: numpy shapes and dtypes are already well formed
    return TensorSpec._make((tuple(arr.shape), dtypes.from_numpy_dtype(arr.dtype)))


_POSITIONS = {}  # op class -> call_positions(op): tracing asks once per op node


def call_positions(op):
    """(names of forward's positional parameters after ctx, name of its *args or None).
    The list is shared: do not change it."""
    found = _POSITIONS.get(op)
    if found is None:
        _, _, _, sig = op._binding or _binding(op)
        names, var = [], None
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
            elif p.kind == p.VAR_POSITIONAL:
                var = p.name
        found = _POSITIONS[op] = (names, var)
    return found


def _param_key(names, var, pos):
    return names[pos] if pos < len(names) else f"{var}[{pos - len(names)}]"


def split_args(op, args, is_tensor):
    """Bound positional args -> ({position: tensor}, {param name: static value})."""
    names, var = call_positions(op)
    tensors, params = {}, {}
    for pos, a in enumerate(args):
        if is_tensor(a):
            tensors[pos] = a
        else:
            params[_param_key(names, var, pos)] = a
    return tensors, params


def place_args(op, values, params, tensor_keywords=None):
    """({position: value}, params) for `op(*values, **params, **tensor_keywords)` where
    `values` and `tensor_keywords` are the tensor arguments: each keyword takes its
    parameter's position, the values fill the other positions in order (then the op's
    *args), and parameters left unset get their defaults. TypeError names the op for
    unknown or missing ones."""
    names, var = call_positions(op)
    sig = (op._binding or _binding(op))[3]
    tensor_keywords = tensor_keywords or {}
    unknown = [k for k in list(params) + list(tensor_keywords) if k not in names]
    if unknown:
        raise TypeError(f"{op.__name__} has no parameter(s) {unknown}; its parameters are "
                        f"{names + ([f'*{var}'] if var else [])}")
    params, edges, it = dict(params), {}, iter(values)
    for pos, name in enumerate(names):
        if name in tensor_keywords:
            edges[pos] = tensor_keywords[name]
            continue
        if name in params:
            continue
        value = next(it, None)
        if value is not None:
            edges[pos] = value
        elif sig.parameters[name].default is not sig.empty:
            params[name] = sig.parameters[name].default
        else:
            raise TypeError(f"{op.__name__}: no value for its argument {pos} ({name})")
    rest = list(it)
    if rest and var is None:
        raise TypeError(f"{op.__name__} takes {len(names)} argument(s) "
                        f"({', '.join(names)}); got {len(values)} graph values and "
                        f"keywords {sorted(params)}")
    edges.update({len(names) + i: v for i, v in enumerate(rest)})
    return edges, params


def join_args(op, tensors, params):
    """The inverse of split_args: positional args for `op.apply`."""
    names, var = call_positions(op)
    positions = dict(tensors)
    for key, value in params.items():
        if key in names:
            positions[names.index(key)] = value
        elif var is not None and key.startswith(var + "["):
            positions[len(names) + int(key[len(var) + 1:-1])] = value
        else:
            raise ValueError(f"{op.__name__} has no parameter {key!r}")
    n = max(positions, default=-1) + 1
    missing = [i for i in range(n) if i not in positions]
    if missing:
        raise ValueError(f"{op.__name__}: no value for argument position(s) {missing}")
    return [positions[i] for i in range(n)]


def stand_in(spec):
    """A read-only array with the spec's shape and dtype that costs no memory (its own:
    tracers hold one each as their data, and views are told apart by memory). Made
    with ndarray's constructor: np.broadcast_to costs three times as much."""
    array = _zero_strided(spec)
    array.flags.writeable = False
    return array


def _zero_strided(spec):
    """A writable array of zeros with the spec's shape and dtype, every element the one
    element of its own buffer (strides 0): it costs no memory at any size."""
    dtype = spec.dtype.np
    return np.ndarray(spec.shape, dtype, np.zeros(1, dtype), 0, (0,) * len(spec.shape))


_SHARED_STAND_INS = {}  # (shape, numpy dtype) -> stand-in: np.broadcast_to costs microseconds


def _shared_stand_in(spec):
    """stand_in(spec), shared between calls: for arguments that live only as long as
    an op's shape rule runs (never a tracer's data)."""
    key = (spec.shape, spec.dtype.np)
    found = _SHARED_STAND_INS.get(key)
    if found is None:
        if len(_SHARED_STAND_INS) > 4096:  # shapes seen once in long sessions: start again
            _SHARED_STAND_INS.clear()
        found = _SHARED_STAND_INS[key] = stand_in(spec)
    return found


Inference = namedtuple("Inference", ("specs", "aliases", "is_tuple"))


def infer(op, specs_in, params):
    """Inference(output specs, aliases, is_tuple): aliases[i] is the input position that
    output i *is* (modified in place), else None; is_tuple says whether the op returns a
    tuple (even of one). Uses `op.infer(*args)` when the op has one (args with stand-in
    arrays for tensors; it returns arrays or specs), else runs the op eagerly on zeros
    (also how user Functions are inferred: one opaque node each)."""
    rule = getattr(op, "infer", None)
    if rule is not None:
        args = join_args(op, {p: _shared_stand_in(s) for p, s in specs_in.items()}, params)
        out = rule(*args)
        is_tuple = isinstance(out, tuple) and not isinstance(out, TensorSpec)
        outs = out if is_tuple else (out,)
        return Inference(tuple(_as_spec(o) for o in outs), (None,) * len(outs), is_tuple)
    if op._arrays_in and op.modifies is None:
        inferred = _infer_by_forward(op, specs_in, params)
        if inferred is not None:
            return inferred
    zeros = {p: _make(np.zeros(s.shape, s.dtype.np)) for p, s in specs_in.items()}
    with _dispatch.no_interpreters(), no_grad(), np.errstate(all="ignore"):
        out = op.apply(*join_args(op, zeros, params))
    is_tuple = isinstance(out, tuple)
    outs = out if is_tuple else (out,)
    specs, aliases = [], []
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"{op.__name__} returned {type(o).__name__}; traced ops must "
                            "return tensors")
        specs.append(spec_of(o))
        aliases.append(next((p for p, z in zeros.items() if z is o), None))
    return Inference(tuple(specs), tuple(aliases), is_tuple)


def _infer_by_forward(op, specs_in, params):
    """An array op's forward run on zeros, without apply's tensors and tape (tracing's
    hot path: apply costs more than a small forward). None when forward hands back one
    of its inputs: the result is then that very tensor (an alias), which only the full
    path (apply) tells. For ops that declare no in-place write (`modifies` None).
    The zeros are zero-strided: a view op (expand, reshape, transpose, indexing) then
    allocates nothing, where C-ordered zeros cost time in proportion to the input's
    size (GMM large's expand of 50 x 10,000: 0.2-2 ms per node); numpy's shapes and
    dtypes do not depend on the layout, and the values are the same zeros."""
    zeros = {p: _zero_strided(s) for p, s in specs_in.items()}
    with np.errstate(all="ignore"):
        out = op.forward(*join_args(op, zeros, params))
    is_tuple = isinstance(out, tuple)
    outs = out if is_tuple else (out,)
    for o in outs:
        if not isinstance(o, (np.ndarray, np.generic)) or \
                any(o is z for z in zeros.values()):
            return None
    return Inference(tuple(spec_of(o) for o in outs), (None,) * len(outs), is_tuple)


def _as_spec(o):
    if isinstance(o, TensorSpec):
        return o
    return spec_of(o)


__all__ = ["TensorSpec", "spec_of", "call_positions", "split_args", "place_args", "join_args",
           "infer",
           "stand_in"]

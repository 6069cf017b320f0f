"""ak.jit over the whole op table: `ak.jit(lambda *tensors: op(...))` equals eager.

Every row, every dtype (float32 and float64 and the integer/bool dtypes a row lists), at
least one sample per (op, dtype) -- a deterministic subset of the rest to keep the file
fast (compiling a signature costs ~10-50 ms). Checked: output structure, shapes, dtypes,
values (float64: 1e-12 relative, float32: 1e-5; exact for integer/bool outputs), for:

- the sample as is (the row's samples include 0-d and empty inputs);
- the same values in non-contiguous layouts (transposed / permuted, and sliced x[::2]),
  where a sample has an input of two or more dimensions;
- extra 0-d and empty inputs for the fused (elementwise, lowered) ops;
- the gradient: `ak.jit(ak.func.grad(lambda *xs: op(*xs).sum(), argnums))` equals the
  eager gradient, for the float elementwise rows.

Non-tensor sample arguments (ints, tuples, slices, kwargs) are closed over by the lambda,
so only tensors are arguments of the jitted function.
"""
import zlib

import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.codegen import runtime

from ._op_cases import flatten_outputs
from .op_db import OP_DB, to_tensor_args
from . import op_db_elementwise  # after .op_db, which imports the family modules

# ----------------------------------------------------------------------------- harness
# BUG WORKAROUND (see test_jit.py::test_freed_compiled_code_does_not_crash_later_compiles):
# freeing a Compiled's native module disposes the cached, shared llvmlite TargetMachine
# (the MCJIT engine takes ownership of it), and the next compile segfaults. Keep every
# compiled module alive for the whole session so the rest of the suite can run.
_KEEP_ALIVE = []


@pytest.fixture(autouse=True)
def _keep_compiled_code_alive(monkeypatch):
    real = runtime.compile_module

    def compile_and_keep(module, *args, **kwargs):
        native = real(module, *args, **kwargs)
        _KEEP_ALIVE.append(native)
        return native

    monkeypatch.setattr(runtime, "compile_module", compile_and_keep)


TOL = {np.dtype(np.float64): dict(rtol=1e-12, atol=1e-13),
       np.dtype(np.float32): dict(rtol=1e-5, atol=1e-6)}
MAX_SAMPLES_PER_DTYPE = 4  # the first sample always, then a deterministic subset

# ops whose node is fused and lowered to native code (they have a `lower` hook)
LOWERED = {"neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "abs",
           "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "sigmoid",
           "relu", "erf", "floor", "ceil", "add", "sub", "mul", "div", "pow",
           "pow_scalar_exponent", "pow_scalar_base", "maximum", "minimum", "atan2",
           # bools inside kernels: comparisons, logic, tests, where, sign
           "sign", "lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or",
           "logical_xor", "logical_not", "isnan", "isfinite", "isinf", "where"}

# Known bug: every float sample of these ops fails at compile time, before any value
# is compared (strict xfails restricted to AttributeError, so another failure shows).
_INTRINSIC_BUG = ("BUG: ScalarBuilder.call_math declares LLVM intrinsics (llvm.sqrt, "
                  "llvm.fabs, llvm.floor, llvm.ceil, llvm.maximum, llvm.minimum) with "
                  "module.declare_intrinsic(name, [VectorType]); llvmlite's VectorType "
                  "has no `intrinsic_name`, so every vectorized kernel using them raises "
                  "AttributeError at compile time: "
                  "ak.jit(lambda x: x.sqrt())(ak.tensor([1.0, 4.0])) -> AttributeError: "
                  "'VectorType' object has no attribute 'intrinsic_name'")
INTRINSIC_OPS = {"sqrt", "rsqrt", "abs", "floor", "ceil", "maximum", "minimum",
                 "max_binary", "min_binary"}  # ak.max(a, b) / ak.min(a, b): maximum/minimum
# ops whose *gradient* graph fuses one of these intrinsics (d/dx sqrt, asin, acos use sqrt)
INTRINSIC_GRAD_OPS = {"sqrt", "rsqrt", "asin", "acos"}


def _pick(samples, key):
    """Sample indices to run: 0 always, then a deterministic subset of the others."""
    n = len(samples)
    if n <= MAX_SAMPLES_PER_DTYPE:
        return list(range(n))
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    rest = sorted(rng.choice(np.arange(1, n), MAX_SAMPLES_PER_DTYPE - 1, replace=False))
    return [0] + [int(i) for i in rest]


def _xfail_marks(info, dtype, ops=INTRINSIC_OPS):
    return []  # the vector-intrinsic bug these marks named is fixed
    if info.name in ops and np.dtype(dtype).kind == "f":
        return [pytest.mark.xfail(reason=_INTRINSIC_BUG, strict=True,
                                  raises=AttributeError)]
    return []


def _cases():
    cases = []
    for info in OP_DB:
        for dtype in info.dtypes:
            dtype = np.dtype(dtype)
            samples = info.samples(dtype)
            for i in _pick(samples, f"{info.name}-{dtype.name}"):
                cases.append(pytest.param(info, dtype, i, samples[i],
                                          id=f"{info.name}-{dtype.name}-sample{i}",
                                          marks=_xfail_marks(info, dtype)))
    return cases


CASES = _cases()


def _tensor_positions(args, info=None):
    """Positions of tensor arguments (and of lists of tensors, e.g. cat's). An indexing
    key stays closed over: a traced index has no values to index with (x[i] with i a
    jit argument raises TracerValueError, tested in test_jit.py)."""
    return [i for i, a in enumerate(args)
            if not (info is not None and info.name in ("getitem", "setitem") and i == 1)
            and (isinstance(a, ak.Tensor) or (
                isinstance(a, list) and a and all(isinstance(t, ak.Tensor) for t in a)))]


def _as_function(info, sample, args):
    """(f, tensor_args): f(*tensor_args) calls the op, other arguments closed over."""
    positions = _tensor_positions(args, info)

    def f(*tensors):
        call = list(args)
        for p, t in zip(positions, tensors):
            call[p] = t
        return info.op(*call, **sample.kwargs)
    return f, [args[p] for p in positions]


def _np(t):
    return t.detach().numpy()


def _assert_same(got, want, dtype, what=""):
    """Same structure, shapes, dtypes; values within TOL (exact when not float)."""
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want), f"{what}: {type(got).__name__} != {type(want).__name__}"
    g_flat, w_flat = flatten_outputs(got), flatten_outputs(want)
    assert len(g_flat) == len(w_flat), f"{what}: {len(g_flat)} outputs, eager {len(w_flat)}"
    for k, (g, w) in enumerate(zip(g_flat, w_flat)):
        if not isinstance(w, ak.Tensor):
            assert g == w, f"{what} output {k}: {g!r} != {w!r}"
            continue
        assert isinstance(g, ak.Tensor), f"{what} output {k} is a {type(g).__name__}"
        assert tuple(g.shape) == tuple(w.shape), f"{what} output {k}: shape"
        assert g.dtype == w.dtype, f"{what} output {k}: dtype {g.dtype} != {w.dtype}"
        gv, wv = _np(g), _np(w)
        if wv.dtype.kind == "f":
            tol = TOL.get(wv.dtype, TOL[np.dtype(dtype)] if np.dtype(dtype).kind == "f"
                          else TOL[np.dtype(np.float32)])
            np.testing.assert_allclose(gv, wv, equal_nan=True, err_msg=f"{what} output {k}",
                                       **tol)
        else:
            np.testing.assert_array_equal(gv, wv, err_msg=f"{what} output {k}")


def _copy_args(args):
    """Fresh tensors with the same values and layouts (an op may write to its inputs)."""
    def copy(a):
        if isinstance(a, ak.Tensor):
            return ak.tensor(_np(a).copy())
        if isinstance(a, list) and a and all(isinstance(t, ak.Tensor) for t in a):
            return [copy(t) for t in a]
        return a
    return [copy(a) for a in args]


def _check(info, dtype, sample, args, what, layout=None):
    """jit(f)(*tensors) equals f(*tensors) run eagerly (each on its own copy)."""
    eager_args = _copy_args(args)
    jit_args = _copy_args(args)
    if layout is not None:
        eager_args, jit_args = layout(eager_args), layout(jit_args)
    f_eager, eager_tensors = _as_function(info, sample, eager_args)
    f_jit, jit_tensors = _as_function(info, sample, jit_args)
    jitted = ak.jit(f_jit)
    try:
        want = f_eager(*eager_tensors)
    except Exception as e:  # e.g. view() of a transposed input: eager refuses the layout
        if layout is None:
            raise
        with pytest.raises(type(e)):  # and so does the jitted function
            jitted(*jit_tensors)
        return
    got = jitted(*jit_tensors)
    _assert_same(got, want, dtype, what)
    if info.name in LOWERED and np.dtype(dtype).kind == "f":  # the native path ran
        assert jitted.compile(*jit_tensors).kernels, f"{what}: no fused kernel"
    # the second call reuses the compiled program and gives the same result
    again = jitted(*jit_tensors)
    assert len(jitted.cache) == 1
    _assert_same(again, want, dtype, what + " (second call)")
    # the jitted call leaves its inputs as eager leaves them
    for a, b in zip(flatten_outputs(jit_tensors), flatten_outputs(eager_tensors)):
        np.testing.assert_array_equal(_np(a), _np(b))


# ----------------------------------------------------------------------------- forward
@pytest.mark.parametrize("info,dtype,index,sample", CASES)
def test_jit_matches_eager(info, dtype, index, sample):
    _check(info, dtype, sample, to_tensor_args(sample.args), f"{info.name}[{index}]")


# ----------------------------------------------------------------------------- layouts
def _transposed(t):
    """The same values and shape, stored transposed (reversed dims): not contiguous."""
    if t.ndim < 2 or t.numel() == 0:
        return t
    perm = tuple(reversed(range(t.ndim)))
    return ak.tensor(np.ascontiguousarray(_np(t).transpose(perm))).permute(*perm)


def _sliced(t):
    """The same values and shape, read with step 2 along dim 0 of a bigger array."""
    if t.ndim < 1 or t.numel() == 0:
        return t
    big = np.repeat(_np(t), 2, axis=0)
    big[1::2] = 7  # garbage between the elements that are read
    return ak.tensor(big)[::2]


def _relayout(fn):
    def apply(args):
        out = []
        for a in args:
            if isinstance(a, ak.Tensor):
                out.append(fn(a))
            elif isinstance(a, list) and a and all(isinstance(t, ak.Tensor) for t in a):
                out.append([fn(t) for t in a])
            else:
                out.append(a)
        return out
    return apply


def _layout_cases():
    cases = []
    for info in OP_DB:
        for dtype in info.dtypes:
            dtype = np.dtype(dtype)
            if dtype.kind != "f":
                continue
            samples = info.samples(dtype)
            for name, fn in LAYOUTS.items():
                # the first sample with a 2-D (or more) input that the layout makes
                # non-contiguous
                usable = [i for i, s in enumerate(samples)
                          if any(isinstance(a, np.ndarray) and a.ndim >= 2
                                 and _makes_noncontiguous(fn, a) for a in s.args)]
                for i in usable[:1]:
                    cases.append(pytest.param(info, dtype, i, samples[i], name,
                                              id=f"{info.name}-{dtype.name}-sample{i}-{name}",
                                              marks=_xfail_marks(info, dtype)))
    return cases


def _makes_noncontiguous(fn, array):
    return not fn(ak.tensor(array))._data.flags.c_contiguous


LAYOUTS = {"transposed": _transposed, "sliced": _sliced}


@pytest.mark.parametrize("info,dtype,index,sample,layout", _layout_cases())
def test_jit_matches_eager_noncontiguous(info, dtype, index, sample, layout):
    fn = LAYOUTS[layout]
    args = to_tensor_args(sample.args)
    relaid = _relayout(fn)(args)
    assert any(isinstance(a, ak.Tensor) and a.ndim >= 2 and not a._data.flags.c_contiguous
               for a in flatten_outputs(relaid))
    _check(info, dtype, sample, args, f"{info.name}[{index}] {layout}",
           layout=_relayout(fn))


# ----------------------------------------------------------------------------- 0-d, empty
LOWERED_ROWS = [r for r in op_db_elementwise.ROWS if r.name in LOWERED]
EDGE_SHAPES = [(), (0,), (2, 0, 3), (1,), (1, 1)]


def _edge_cases():
    cases = []
    for info in LOWERED_ROWS:
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            for shape in EDGE_SHAPES:
                cases.append(pytest.param(info, dtype, shape,
                                          id=f"{info.name}-{dtype.name}-{list(shape)}",
                                          marks=_xfail_marks(info, dtype)))
    return cases


def _edge_args(info, dtype, shape):
    """The row's first sample with every array replaced by one of `shape` (values in
    the sample's range, so within the op's domain)."""
    sample = info.samples(dtype)[0]
    rng = np.random.default_rng(0)
    args = []
    for a in sample.args:
        if isinstance(a, np.ndarray) and a.dtype == np.bool_:  # where's condition
            args.append(rng.uniform(size=shape) > 0.5)
        elif isinstance(a, np.ndarray):
            lo, hi = (float(a.min()), float(a.max())) if a.size else (0.5, 1.0)
            args.append(rng.uniform(lo, hi, size=shape).astype(dtype))
        else:
            args.append(a)
    return sample, args


@pytest.mark.parametrize("info,dtype,shape", _edge_cases())
def test_jit_lowered_ops_0d_and_empty(info, dtype, shape):
    sample, args = _edge_args(info, dtype, shape)
    _check(info, dtype, sample, to_tensor_args(tuple(args)), f"{info.name}{list(shape)}")


# ----------------------------------------------------------------------------- gradients
def _grad_cases():
    cases = []
    for info in op_db_elementwise.ROWS:
        if not info.supports_grad:
            continue
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            if dtype not in [np.dtype(d) for d in info.dtypes]:
                continue
            samples = info.samples(dtype)
            usable = [i for i, s in enumerate(samples)
                      if any(isinstance(a, np.ndarray) and a.size for a in s.args)]
            for i in usable[:2]:
                cases.append(pytest.param(info, dtype, i, samples[i],
                                          id=f"{info.name}-{dtype.name}-sample{i}",
                                          marks=_grad_marks(info, dtype)))
    return cases


def _grad_marks(info, dtype):
    return _xfail_marks(info, dtype, INTRINSIC_GRAD_OPS)


@pytest.mark.parametrize("info,dtype,index,sample", _grad_cases())
def test_jit_of_grad_matches_eager_grad(info, dtype, index, sample):
    args = to_tensor_args(sample.args)
    positions = [p for p in _tensor_positions(args, info)
                 if isinstance(args[p], ak.Tensor) and args[p].is_floating_point()
                 and (info.grad_argnums is None or p in info.grad_argnums)]
    if not positions:
        pytest.skip("no float tensor argument")

    def loss(*xs):
        call = list(args)
        for p, x in zip(positions, xs):
            call[p] = x
        return info.op(*call, **sample.kwargs).sum()

    xs = [args[p] for p in positions]
    argnums = tuple(range(len(xs)))
    want = F.grad(loss, argnums=argnums)(*xs)
    jitted = ak.jit(F.grad(loss, argnums=argnums))
    got = jitted(*xs)
    _assert_same(got, want, dtype, f"grad {info.name}[{index}]")
    if info.name in NONCONSTANT_DERIVATIVE:  # the derivative runs as native code
        assert jitted.compile(*xs).kernels, f"grad {info.name}: no fused kernel"


# lowered ops whose derivative is not a constant (so the gradient graph has arithmetic)
NONCONSTANT_DERIVATIVE = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal",
                          "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos",
                          "atan", "sigmoid", "erf", "div", "pow",
                          "pow_scalar_exponent", "pow_scalar_base", "atan2"}

"""rules.infer runs an array op's forward on zero-strided zeros (no memory at any size):
for every op call the op table makes while tracing, and for calls that do not fit their
op, that must give what forward gives on C-ordered zeros: the same output shapes and
dtypes, the same outputs that are inputs, or the same exception type."""
import importlib

import numpy as np
import pytest

import adkit as ak
from adkit.ir import rules
from adkit.ops import linalg, shape
from adkit.ops.binary import Add

from ._op_cases import op_cases
from .op_db import to_tensor_args

S = rules.TensorSpec
trace_module = importlib.import_module("adkit.ir.trace")  # adkit.ir.trace is the function


def _forward_on(op, arrays, params):
    """('ok', output specs, which outputs are input arrays) or ('error', its type)."""
    try:
        with np.errstate(all="ignore"):
            out = op.forward(*rules.join_args(op, arrays, params))
    except Exception as e:  # noqa: BLE001 -- the type is what is compared
        return "error", type(e)
    outs = out if isinstance(out, tuple) else (out,)
    specs = tuple(rules.spec_of(np.asarray(o)) for o in outs)
    return "ok", specs, tuple(any(o is a for a in arrays.values()) for o in outs)


def _assert_layout_free(op, specs_in, params):
    c_ordered = {p: np.zeros(s.shape, s.dtype.np) for p, s in specs_in.items()}
    strided = {p: rules._zero_strided(s) for p, s in specs_in.items()}
    want = _forward_on(op, c_ordered, params)
    assert _forward_on(op, strided, params) == want, (op, specs_in, params)
    return want


def _calls_while_tracing(monkeypatch, info, sample):
    """(op, input specs, params) of every inference of an array op that tracing the
    sample asks for (with the memo of inferences emptied, so none is hidden)."""
    calls, infer = [], rules.infer

    def recording(op, specs_in, params):
        if op._arrays_in and op.modifies is None:
            calls.append((op, dict(specs_in), dict(params)))
        return infer(op, specs_in, params)
    monkeypatch.setattr(rules, "infer", recording)
    monkeypatch.setattr(trace_module, "_INFERRED", {})
    args = to_tensor_args(sample.args)
    tensors = [i for i, a in enumerate(args) if isinstance(a, ak.Tensor)]

    def f(*ts):
        call = list(args)
        for i, t in zip(tensors, ts):
            call[i] = t
        return info.op(*call, **sample.kwargs)
    try:
        ak.trace(f, *[args[i] for i in tensors])
    except Exception:  # noqa: BLE001 -- ops that cannot be traced: the calls made so far
        pass
    return calls


def _table_cases():
    return [pytest.param(*p.values, id=p.id) for p in op_cases(dtypes=(np.float64,))]


@pytest.mark.parametrize("info,dtype,sample", _table_cases())
def test_infer_op_table_calls_same_on_zero_strided_zeros(monkeypatch, info, dtype, sample):
    calls = _calls_while_tracing(monkeypatch, info, sample)
    if not calls:  # getitem with an array key: tracing it stops before any inference
        pytest.skip("tracing the sample asks for no array op's inference")
    for op, specs_in, params in calls:
        _assert_layout_free(op, specs_in, params)


f64, f32, i64, b8 = ak.float64, ak.float32, ak.int64, ak.bool

_CASES = [  # (op, input specs, params): fitting calls and calls that do not fit
    (shape.Reshape, {0: S((50, 1000), f64)}, {"shape": (50, 1000, 1)}),
    (shape.Reshape, {0: S((50, 1000), f64)}, {"shape": (-1,)}),
    (shape.Reshape, {0: S((2, 0, 3), f32)}, {"shape": (0, 5)}),
    (shape.Reshape, {0: S((), i64)}, {"shape": (1, 1)}),
    (shape.Reshape, {0: S((6,), b8)}, {"shape": (4, -1)}),  # does not fit
    (shape.Reshape, {0: S((6,), f64)}, {"shape": (-1, -1)}),  # does not fit
    (shape.Expand, {0: S((50, 1000, 1), f64)}, {"shape": (50, 1000, 20)}),
    (shape.Expand, {0: S((3, 1), i64)}, {"shape": (2, -1, 4)}),
    (shape.Expand, {0: S((), b8)}, {"shape": (0, 3)}),
    (shape.Expand, {0: S((3, 2), f64)}, {"shape": (3, 4)}),  # does not fit
    (shape.Transpose, {0: S((4, 0, 2), f32)}, {"dim0": 0, "dim1": 2}),
    (shape.Transpose, {0: S((4, 3), f64)}, {"dim0": 0, "dim1": 5}),  # does not fit
    (linalg.Matmul, {0: S((7, 3), f64), 1: S((3, 5), f64)}, {}),
    (linalg.Matmul, {0: S((2, 7, 3), f32), 1: S((3,), f32)}, {}),
    (linalg.Matmul, {0: S((7, 0), f64), 1: S((0, 5), f64)}, {}),
    (linalg.Matmul, {0: S((7, 3), f64), 1: S((4, 5), f64)}, {}),  # does not fit
    (linalg.Matmul, {0: S((), f64), 1: S((3,), f64)}, {}),  # does not fit
    (Add, {0: S((3, 1), f32), 1: S((4,), f64)}, {}),
    (Add, {0: S((3, 2), i64), 1: S((4,), i64)}, {}),  # does not fit
]


@pytest.mark.parametrize("op,specs_in,params", _CASES,
                         ids=[f"{c[0].__name__}{i}" for i, c in enumerate(_CASES)])
def test_infer_same_on_zero_strided_zeros(op, specs_in, params):
    _assert_layout_free(op, specs_in, params)


def test_infer_cases_include_errors_and_results():
    """The hand-made cases are not all of one kind (a test of both outcomes)."""
    kinds = {_assert_layout_free(*case)[0] for case in _CASES}
    assert kinds == {"ok", "error"}


def test_infer_gives_forwards_spec_and_error_type():
    """rules.infer itself: a view op's spec as forward gives it on real data, and the
    same exception type for a call that does not fit."""
    x = np.arange(6.0).reshape(2, 3)
    got = rules.infer(shape.Reshape, {0: rules.spec_of(x)}, {"shape": (3, -1)})
    assert got.specs == (rules.spec_of(shape.Reshape.forward(x, (3, -1))),)
    with pytest.raises(_forward_on(shape.Reshape, {0: x}, {"shape": (4, -1)})[1]):
        rules.infer(shape.Reshape, {0: rules.spec_of(x)}, {"shape": (4, -1)})

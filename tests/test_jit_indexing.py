"""ak.jit with traced indices (issue 13, point 2): x[i], x[i] = v, index_put(_), index_select,
gather, scatter, scatter_add and index_add with index tensors that are graph inputs (or
computed by numpy) run as native gathers and scatter(-add)s with bounds checks. Each test
compares with eager (and gradients with finite differences) and checks where the op ran:
no numpy step, and a native IndexedCall in the plan."""
import os
import re
import sys

import numpy as np
import pytest

import adkit as ak
from adkit.codegen.indexed import IndexedCall
from adkit.codegen.loops import LoopCall
from adkit.ir.trace import TracerValueError

F = ak.func
DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["float32", "float64"]


def rand(*shape, dtype=np.float64, seed=0):
    return ak.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def idx(values, dtype=np.int64):
    return ak.tensor(np.array(values, dtype))


def close(got, want, dtype=np.float64):
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(got.numpy(), want.numpy(), **tol)


def numpy_ops(jitted, *args):
    return [s.op.__name__ for s in jitted.compile(*args).steps if type(s).__name__ == "NumpyStep"]


def native_index_calls(jitted, *args):
    return [c for calls in jitted.compile(*args).segment_calls for c in calls
            if isinstance(c, IndexedCall)]


def assert_native(jitted, *args, count=1):
    assert numpy_ops(jitted, *args) == []
    assert len(native_index_calls(jitted, *args)) >= count


def _setitem(x, i, v):
    y = x * 1.0
    y[i] = v
    return y


def _setitem_rows(x, i, v):
    y = x * 1.0
    y[1:, i] = v
    return y


def _setitem_after_int(x, i, v):
    y = x * 1.0
    y[0, i] = v[0]
    return y


def _index_put_(x, i, v):
    y = x * 1.0
    y.index_put_((i,), v, accumulate=True)
    return y


def _index_add_(x, i, v):
    y = x.clone()
    return y.index_add_(0, i, v)


# name: (function, index tensors, extra float arguments' shapes). x is (5, 4) unless noted
GATHERS = {
    "getitem": (lambda x, i: x[i], [[4, -1, 0, 2, 2]]),
    "getitem_2d_index": (lambda x, i: x[i], [[[0, -5], [3, 3]]]),
    "getitem_columns": (lambda x, i: x[:, i], [[3, -4, 0]]),
    "getitem_two_adjacent": (lambda x, i, j: x[i, j], [[1, -1, 4], [[0], [3]]]),
    "getitem_separated": (lambda x, i, j: x.reshape(5, 2, 2)[i, :, j], [[0, 4], [1, -1]]),
    "getitem_after_int": (lambda x, i: x.reshape(5, 2, 2)[1, :, i], [[1, 0, 1]]),
    "getitem_transposed": (lambda x, i: x.t()[i] * 2.0, [[3, 0, -1]]),
    "getitem_strided": (lambda x, i: x[::2][i], [[2, -3, 1]]),
    "getitem_0d": (lambda x, i: x[i[0]], [[3, 1]]),
    "index_select_0": (lambda x, i: x.index_select(0, i), [[4, 0, 0, 2]]),
    "index_select_last": (lambda x, i: x.index_select(-1, i), [[3, 1]]),
    "index_select_transposed": (lambda x, i: x.t().index_select(1, i), [[4, 2]]),
    "gather_0": (lambda x, i: x.gather(0, i), [[[4, 0, 1, 1], [2, 2, 3, 0]]]),
    "gather_1_smaller": (lambda x, i: x.gather(1, i), [[[3, 3, 0], [1, 0, 2]]]),
}
SCATTERS = {
    "scatter_add_repeats": (lambda x, i, v: x.scatter_add(0, i, v),
                            [[[4, 4, 1, 1], [4, 0, 1, 3]]], [(2, 4)]),
    "scatter_add_src_larger": (lambda x, i, v: x.scatter_add(1, i, v),
                               [[[3, 3], [0, 1], [2, 2]]], [(4, 5)]),
    "scatter": (lambda x, i, v: x.scatter(0, i, v), [[[4, 0, 1, 2], [2, 3, 0, 1]]], [(2, 4)]),
    "scatter_value": (lambda x, i: x.scatter(1, i, 0.5), [[[3, 0], [2, 1]]], []),
    "index_add_repeats": (lambda x, i, v: x.index_add(0, i, v), [[4, 4, 0, 4]], [(4, 4)]),
    "index_add_alpha": (lambda x, i, v: x.index_add(1, i, v, alpha=-2.5), [[3, 0]], [(5, 2)]),
    "index_add_": (_index_add_, [[1, 1, 3]], [(3, 4)]),
    "index_put_accumulate": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                             [[4, -1, 0, 4]], [(4, 4)]),
    "index_put": (lambda x, i, j, v: x.index_put((i, j), v), [[4, -2, 0], [[0], [3]]],
                  [(3,)]),
    "index_put_": (_index_put_, [[-5, 2, 2]], [(4,)]),
    "setitem": (_setitem, [[3, -1]], [(2, 4)]),
    "setitem_rows": (_setitem_rows, [[2, -1]], [(4, 1)]),
    "setitem_after_int": (_setitem_after_int, [[0, 3]], [(2,)]),
}


def _args(case, dtype):
    fn, indices, *rest = case
    floats = [rand(*s, dtype=dtype, seed=k + 1) for k, s in enumerate(rest[0] if rest else [])]
    return fn, [rand(5, 4, dtype=dtype)] + [idx(i) for i in indices] + floats


CASES = {**GATHERS, **SCATTERS}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_indices_match_eager_natively(name, dtype):
    fn, args = _args(CASES[name], dtype)
    jitted = ak.jit(fn)
    close(jitted(*args), fn(*args), dtype)
    assert_native(jitted, *args)


def _float_positions(args):
    return tuple(k for k, a in enumerate(args) if a.is_floating_point())


def _loss(fn, args):
    weights = rand(*fn(*args).shape, seed=9)
    return lambda *a: (fn(*a) * weights).sum()


def _finite_differences(loss, args, k, eps=1e-6):
    x = args[k].numpy()
    grad = np.zeros(x.shape)
    for e in np.ndindex(x.shape):
        for sign in (1, -1):
            moved = x.copy()
            moved[e] += sign * eps
            call = list(args)
            call[k] = ak.tensor(moved)
            grad[e] += sign * loss(*call).item() / (2 * eps)
    return grad


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_are_native_and_match_eager_and_finite_differences(name):
    fn, args = _args(CASES[name], np.float64)
    loss = _loss(fn, args)
    floats = _float_positions(args)
    grad = F.grad(loss, argnums=floats)
    jitted = ak.jit(grad)
    got, want = jitted(*args), grad(*args)
    for g, w, k in zip(got, want, floats):
        close(g, w)
        np.testing.assert_allclose(w.numpy(), _finite_differences(loss, args, k),
                                   rtol=1e-6, atol=1e-6)
    assert_native(jitted, *args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivatives_under_jit(name):
    fn, args = _args(CASES[name], np.float64)
    floats = _float_positions(args)

    def loss(*a):
        return (fn(*a) ** 3).sum()
    hvp = F.grad(lambda *a: (F.grad(loss, argnums=floats)(*a)[0] ** 2).sum())
    close(ak.jit(hvp)(*args), hvp(*args))


# ---------------------------------------------------------------- bounds
# name: (function, a valid index, an index too big, an index below -size, size of the
# indexed dim, the op named in the error, whether negative indices wrap)
BOUNDS = {
    "getitem": (lambda x, i: x[i], [1], [5], [-6], "x[index]", True),
    "getitem_columns": (lambda x, i: x[:, i], [1], [4], [-5], "x[index]", True),
    "setitem": (lambda x, i: _setitem(x, i, 1.0), [1], [5], [-6], "index_put", True),
    "index_put": (lambda x, i: x.index_put((i,), ak.ones(4, dtype=ak.float64),
                                           accumulate=True), [1], [7], [-6], "index_put", True),
    "index_select": (lambda x, i: x.index_select(0, i), [1], [5], [-1], "index_select()",
                     False),
    "gather": (lambda x, i: x.gather(0, i.reshape(1, 1)), [1], [12], [-1], "gather()", False),
    "scatter_add": (lambda x, i: x.scatter_add(1, i.reshape(1, 1), x[:1, :1]), [1], [4], [-1],
                    "scatter_add()", False),
    "scatter": (lambda x, i: x.scatter(0, i.reshape(1, 1), 2.0), [1], [5], [-1], "scatter()",
                False),
    "index_add": (lambda x, i: x.index_add(0, i, x[:1]), [1], [5], [-1], "index_add()", False),
}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_out_of_range_indices_raise_index_error_naming_the_op(name):
    fn, good, above, below, op, wraps = BOUNDS[name]
    x = rand(5, 4)
    jitted = ak.jit(fn)
    close(jitted(x, idx(good)), fn(x, idx(good)))
    assert_native(jitted, x, idx(good))
    for bad in (above, below):
        with pytest.raises(IndexError, match=rf"{re.escape(op)}.*index {bad[0]} is out of "
                                             r"bounds for "
                                             r"dimension \d with size \d"):
            jitted(x, idx(bad))
        with pytest.raises((IndexError, RuntimeError)):  # eager raises as PyTorch does
            fn(x, idx(bad))
    if wraps:  # -size wraps to 0
        close(jitted(x, idx([-len(x) if name != "getitem_columns" else -4])),
              fn(x, idx([-len(x) if name != "getitem_columns" else -4])))
    close(jitted(x, idx(good)), fn(x, idx(good)))  # and it still runs


def test_the_error_names_the_dim_of_the_bad_index_and_the_source_line():
    jitted = ak.jit(lambda x, i, j: x[i, j])
    x = rand(5, 4)
    with pytest.raises(IndexError, match="index -9 is out of bounds for dimension 1 with "
                                         "size 4") as info:
        jitted(x, idx([0, 1]), idx([3, -9]))
    assert "test_jit_indexing.py" in "".join(info.value.__notes__)


def test_a_bad_index_writes_nothing_out_of_the_result():
    """A failed check stops before the write: the result buffers of later calls (and
    the caller's tensors) are untouched, and the next call computes correctly."""
    x, v = rand(5, 4), rand(3, 4, seed=1)
    jitted = ak.jit(lambda x, i, v: x.index_put((i,), v, accumulate=True) * 2.0)
    before = x.numpy().copy()
    for bad in ([0, 1, 1 << 40], [0, -(1 << 40), 2]):
        with pytest.raises(IndexError):
            jitted(x, idx(bad), v)
    np.testing.assert_array_equal(x.numpy(), before)
    close(jitted(x, idx([0, 1, 1]), v), x.index_put((idx([0, 1, 1]),), v, True) * 2.0)


# ---------------------------------------------------------------- index dtypes, sources
def test_int32_indices():
    x = rand(5, 4)
    for f in (lambda x, i: x[i], lambda x, i: x.index_select(1, i),
              lambda x, i: x.index_add(0, i, x[:2])):
        i = idx([1, 3], np.int32)
        jitted = ak.jit(f)
        close(jitted(x, i), f(x, i))
        assert_native(jitted, x, i)


def test_an_index_numpy_computes_is_published_to_the_native_gather():
    def f(x):  # argmax runs on numpy (no native integers); the gathers read its result
        return x.gather(0, x.argmax(0, keepdim=True)) + x.index_select(0, x.argmax(0))
    x = rand(5, 4)
    jitted = ak.jit(f)
    close(jitted(x), f(x))
    assert set(numpy_ops(jitted, x)) == {"Argmax"}
    assert len(native_index_calls(jitted, x)) == 2


def test_a_constant_index_tensor_is_a_native_gather_too():
    i = idx([2, 2, 0])
    jitted = ak.jit(lambda x: x[i] * 2.0)
    x = rand(5, 4)
    close(jitted(x), x[i] * 2.0)
    assert_native(jitted, x)


# ---------------------------------------------------------------- masks
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_mask_assignment_keeps_the_shape_and_is_native(dtype):
    def f(x, v):
        y = x.clone()
        y[x > 0.2] = 0.5
        y[:, x[0] < 0] = v  # a (5, 1) column broadcast along the masked dim
        y[x.amin(1) < -1.0] = -1.0  # (not `*= 2.0`: that reads y[mask] first)
        return y
    x, v = rand(5, 4, dtype=dtype), rand(5, 1, dtype=dtype, seed=1)
    jitted = ak.jit(f)
    close(jitted(x, v), f(x, v), dtype)
    assert numpy_ops(jitted, x, v) == []
    grad = F.grad(lambda x, v: (f(x, v) ** 2).sum(), argnums=(0, 1))
    for g, w in zip(ak.jit(grad)(x, v), grad(x, v)):
        close(g, w, dtype)


def test_mask_assignment_under_vmap_is_a_where():
    def f(x):
        y = x.clone()
        y[x > 0] = 0.0
        return y
    xs = rand(3, 5, 4)
    close(F.vmap(f)(xs), ak.stack([f(x) for x in xs]))
    close(ak.jit(F.vmap(f))(xs), F.vmap(f)(xs))


def test_reading_through_a_traced_mask_names_the_problem():
    jitted = ak.jit(lambda x: x[x > 0])
    with pytest.raises(TracerValueError, match=r"x\[mask\] with a bool mask .* depends on "
                                               r"the mask's values"):
        jitted(rand(5, 4))
    with pytest.raises(RuntimeError, match=r"x\[mask\] with a bool mask"):
        F.vmap(lambda x: x[x > 0])(rand(3, 4))


def test_mask_assignment_of_one_value_per_true_element_names_the_problem():
    def f(x):
        y = x.clone()
        y[x > 0] = x[:2].reshape(-1)  # 8 values: right only if 8 are True
        return y
    with pytest.raises(TracerValueError, match="one value per True element"):
        ak.jit(f)(rand(5, 4))


# ---------------------------------------------------------------- transforms
def test_vmap_with_batched_indices_matches_a_loop_natively():
    def f(x, i, j, v):  # i may be negative (x[i], index_put wrap), j not (gather)
        y = x[i] * v + x.gather(0, j[:, None].expand(3, 4)).sin()
        return x.index_put((i,), y, accumulate=True)
    rng = np.random.default_rng(2)
    xs, vs = rand(6, 5, 4), rand(6, 4, seed=1)
    ins, jns = idx(rng.integers(-5, 5, (6, 3))), idx(rng.integers(0, 5, (6, 3)))
    want = ak.stack([f(*a) for a in zip(xs, ins, jns, vs)])
    batched = F.vmap(f)
    close(batched(xs, ins, jns, vs), want)
    jitted = ak.jit(batched)
    close(jitted(xs, ins, jns, vs), want)
    assert_native(jitted, xs, ins, jns, vs, count=3)


@pytest.mark.parametrize("jac", [F.jacrev, F.jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobians_of_gathers_are_native(jac):
    i, j = idx([4, -1, 0, 0]), idx([[1], [3]])

    def f(x):
        return x[i].sin() * x.index_select(1, j.reshape(-1)).sum() + x[j, i[2:] - 1].sum()
    x = rand(5, 4)
    jitted = ak.jit(jac(f))
    close(jitted(x), jac(f)(x))
    assert_native(jitted, x)


def test_a_gather_in_a_native_loop_and_its_bounds_check():
    def f(x, ins):
        return ak.scan(lambda c, i: (c * 0.5 + x[i], c.sum()), x[0] * 0.0, ins)
    x = rand(5, 4)
    jitted = ak.jit(f)
    for got, want in zip(jitted(x, idx([1, -2, 4])), f(x, idx([1, -2, 4]))):
        close(got, want)
    compiled = jitted.compile(x, idx([1, -2, 4]))
    assert numpy_ops(jitted, x, idx([1, -2, 4])) == []
    assert any(isinstance(c, LoopCall) for calls in compiled.segment_calls for c in calls)
    with pytest.raises(IndexError, match=r"x\[index\].*index 5 is out of bounds"):
        jitted(x, idx([1, 5, 4]))
    grad = F.grad(lambda x, ins: f(x, ins)[1].sum())
    close(ak.jit(grad)(x, idx([1, -2, 4])), grad(x, idx([1, -2, 4])))


def test_tracing_records_a_write_nobody_sees_out_of_place():
    """x[i] = v on a fresh value is an index_put node (no in-place node: the graph is
    pure); on an input, or a value with a live view, the in-place node stays."""
    def fresh(x, i):
        y = x * 2.0
        y[i] = 0.0
        return y

    def viewed(x, i):
        y = x * 2.0
        row = y[0]
        y[i] = 0.0
        return y + row

    x, i = rand(5, 4), idx([0, 3])
    names = [ak.ir.printing.op_name(d["op"]) for _, d in ak.trace(fresh, x, i).nx.nodes(
        data=True) if d["kind"] == "op"]
    assert "index_put" in names and "index_put_" not in names
    names = [ak.ir.printing.op_name(d["op"]) for _, d in ak.trace(viewed, x, i).nx.nodes(
        data=True) if d["kind"] == "op"]
    assert "index_put_" in names
    for f in (fresh, viewed):
        close(ak.jit(f)(x, i), f(x, i))


# ---------------------------------------------------------------- ADBench BA
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import ba_jit as ba


@pytest.mark.parametrize("what", ["residuals", "dense_jacobian", "block_jacobian"])
def test_bundle_adjustment_jacobians_under_jit(what):
    fn = getattr(ba, what)
    data = ba.make_data(3, 5, 8)
    jitted = ak.jit(fn)
    got, want = jitted(*data), fn(*data)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-9)
    assert numpy_ops(jitted, *data) == []
    assert native_index_calls(jitted, *data)


def test_bundle_adjustment_jacobian_matches_finite_differences():
    cams, x, w, obs_cam, obs_pt, feats = ba.make_data(2, 3, 4)
    jac_cams = ak.jit(ba.dense_jacobian)(cams, x, w, obs_cam, obs_pt, feats)[0].numpy()
    eps, c = 1e-6, cams.numpy()
    for e in [(0, 0), (1, 4), (0, 6), (1, 10)]:
        moved = [c.copy(), c.copy()]
        moved[0][e] += eps
        moved[1][e] -= eps
        r = [ba.residuals(ak.tensor(m), x, w, obs_cam, obs_pt, feats).numpy() for m in moved]
        np.testing.assert_allclose(jac_cams[(slice(None),) + e], (r[0] - r[1]) / (2 * eps),
                                   rtol=1e-5, atol=1e-6)

"""Traced view ops alias their input exactly when eager numpy's would, so in-place writes
through views are seen by autograd while tracing: ak.trace and ak.jit of gradients through
in-place ops on views equal eager gradients (the programs of test_forward_ad_views)."""
import numpy as np
import pytest

import adkit as ak

from .test_forward_ad_views import PROGRAMS, _inputs


def _reshape_of_a_transpose_copies(m, x, y):
    v = x.clone()
    flat = v.t().reshape(-1)  # numpy copies here: writing it must not change v
    flat.mul_(3.0)
    return v * flat.sum()


def _reshape_of_contiguous_views(m, x, y):
    v = x.clone()
    v.reshape(-1)[1::3].add_(y.reshape(-1)[:4])
    return v.exp()


# Writing into a tensor made inside the traced function (a constant to the tracer), and
# masks from traced values (traced indices: issue 13), are clear errors under tracing.
CONSTANT_WRITES = ("_zeros_base_copy_from_dual", "_base_copied_then_old_view_read")
TRACED_MASKS = ("_setitem_with_mask",)
ALL = [p for p in PROGRAMS if p.__name__ not in CONSTANT_WRITES + TRACED_MASKS] + \
    [_reshape_of_a_transpose_copies, _reshape_of_contiguous_views]


@pytest.mark.parametrize("name", CONSTANT_WRITES)
def test_writing_into_a_constant_through_a_view_is_a_clear_error(name):
    program = next(p for p in PROGRAMS if p.__name__ == name)
    x, y, _, _ = _inputs()
    grad = _grad_fn(program, ak.tensor(y))
    with pytest.raises(ak.ir.TracerValueError, match="not a traced value"):
        ak.jit(grad)(ak.tensor(x))


def _grad_fn(program, y):
    u = ak.tensor(np.random.default_rng(5).standard_normal(
        np.shape(program(ak, ak.tensor(_inputs()[0]), y).numpy())))
    return ak.func.grad(lambda a: (program(ak, a, y) * u).sum())


@pytest.mark.parametrize("program", ALL, ids=lambda p: p.__name__.strip("_"))
def test_traced_and_jitted_gradients_through_views_match_eager(program):
    x, y, _, _ = _inputs()
    grad = _grad_fn(program, ak.tensor(y))
    want = grad(ak.tensor(x)).numpy()
    np.testing.assert_allclose(ak.trace(grad, ak.tensor(x))(ak.tensor(x)).numpy(), want,
                               rtol=1e-13, atol=1e-14)
    jitted = ak.jit(grad)
    for _ in range(2):  # the compiling call and the cached one
        np.testing.assert_allclose(jitted(ak.tensor(x)).numpy(), want, rtol=1e-13,
                                   atol=1e-14)


@pytest.mark.parametrize("program", ALL, ids=lambda p: p.__name__.strip("_"))
def test_traced_values_through_views_match_eager(program):
    x, y, _, _ = _inputs()
    fn = lambda a, b: program(ak, a, b)  # noqa: E731
    want = fn(ak.tensor(x), ak.tensor(y)).numpy()
    got = ak.jit(fn)(ak.tensor(x), ak.tensor(y)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-14)

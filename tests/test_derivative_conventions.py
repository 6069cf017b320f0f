"""PyTorch's conventions where a derivative formula meets 0/0, ties or NaN: each row is
checked against torch 2.13 when it is installed, and against the value PyTorch gives
(written out) when it is not."""
import numpy as np
import pytest

import adkit as ak

NAN, INF = float("nan"), float("inf")

# name: (function of the module (ak or torch) and x, input, PyTorch's gradient)
CASES = {
    "atan2_at_origin": (lambda m, x: m.atan2(x, x * 0), [0.0, 0.0], [0.0, 0.0]),
    "atan2_on_axes": (lambda m, x: m.atan2(x[:1], x[1:]), [0.0, 2.0], [0.5, -0.0]),
    "pow_zero_exponent": (lambda m, x: x ** 0, [0.0, 3.0], [0.0, 0.0]),
    "pow_half_at_zero": (lambda m, x: x ** 0.5, [0.0, 4.0], [INF, 0.25]),
    "pow_self_at_zero": (lambda m, x: x ** x, [0.0, 2.0], [0.0, 6.772588722239781]),
    "zero_to_the_x": (lambda m, x: 0.0 ** x, [0.0, 2.0], [0.0, 0.0]),
    "divide_by_python_zero": (lambda m, x: x / 0.0, [1.0, 0.0], [INF, INF]),
    "max_of_all_with_nans": (lambda m, x: x.max(), [1.0, NAN, NAN], [0.0, 0.5, 0.5]),
    "min_of_all_with_nans": (lambda m, x: x.min(), [NAN, 1.0, NAN], [0.5, 0.0, 0.5]),
    "amax_with_nan": (lambda m, x: x.amax(), [1.0, NAN, 3.0], [NAN, NAN, NAN]),
    "max_of_all_ties": (lambda m, x: x.max(), [1.0, 3.0, 3.0], [0.0, 0.5, 0.5]),
    "max_dim_ties": (lambda m, x: x.max(dim=0)[0], [1.0, 3.0, 3.0], [0.0, 1.0, 0.0]),
    "norm_at_zero": (lambda m, x: x.norm(), [0.0, 0.0], [0.0, 0.0]),
    "norm_1_at_zero": (lambda m, x: x.norm(p=1), [0.0, 0.0], [0.0, 0.0]),
    "clamp_at_bounds": (lambda m, x: x.clamp(0.0, 1.0), [0.0, 1.0, 0.5], [1.0, 1.0, 1.0]),
    "prod_with_one_zero": (lambda m, x: x.prod(), [0.0, 2.0, 3.0], [6.0, 0.0, 0.0]),
    "abs_at_zero": (lambda m, x: x.abs(), [0.0, -1.0], [0.0, -1.0]),
}


def _ours(case):
    fn, value, _ = CASES[case]
    x = ak.tensor(value, dtype=ak.float64, requires_grad=True)
    fn(ak, x).sum().backward()
    return x.grad.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_follows_pytorchs_convention(case):
    np.testing.assert_allclose(_ours(case), CASES[case][2], rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_matches_torch(case):
    torch = pytest.importorskip("torch")
    fn, value, _ = CASES[case]
    x = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    fn(torch, x).sum().backward()
    np.testing.assert_allclose(_ours(case), x.grad.numpy(), rtol=1e-12, equal_nan=True)


def test_grad_of_pow_zero_is_zeros_not_none():
    x = ak.ones(3, requires_grad=True)
    (grad,) = ak.autograd.grad((x ** 0).sum(), [x], allow_unused=True)
    assert grad is not None and grad.tolist() == [0.0, 0.0, 0.0]


def test_func_grad_of_atan2_at_the_origin_is_zero():
    grad = ak.func.grad(lambda a: ak.atan2(a, a * 0).sum())(ak.zeros(1))
    assert grad.tolist() == [0.0]


def test_jitted_max_of_all_matches_eager():
    x = ak.tensor(np.random.default_rng(0).standard_normal((5, 7)))
    got = ak.jit(lambda v: v.exp().max() + v.min())(x)
    assert got.item() == pytest.approx((x.exp().max() + x.min()).item(), rel=1e-14)


def test_too_few_gradients_for_the_outputs_raise_pytorchs_error():
    a = ak.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="got 2 tensors and 1 gradients"):
        ak.autograd.backward([a * 2, a * 3], [ak.ones(2)])
    with pytest.raises(RuntimeError, match="got 2 tensors and 1 gradients"):
        ak.autograd.grad([a * 2, a * 3], [a], [ak.ones(2)])

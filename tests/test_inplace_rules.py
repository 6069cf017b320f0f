"""In-place ops built on their out-of-place ops' rules (ops/inplace.py `_InplaceOf`):
their gradients and tangents equal the out-of-place op's, in both modes and to second
order, with and without the other operand requiring grad, with broadcasting."""
import numpy as np
import pytest

import adkit as ak

PAIRS = {
    "add_": (lambda x, y: x.clone().add_(y, alpha=2.0), lambda x, y: x + 2.0 * y),
    "sub_": (lambda x, y: x.clone().sub_(y, alpha=0.5), lambda x, y: x - 0.5 * y),
    "mul_": (lambda x, y: x.clone().mul_(y), lambda x, y: x * y),
    "div_": (lambda x, y: x.clone().div_(y), lambda x, y: x / y),
    "exp_": (lambda x, y: x.clone().exp_() * y, lambda x, y: x.exp() * y),
    "clamp_": (lambda x, y: x.clone().clamp_(0.8, y + 0.3), lambda x, y: x.clamp(0.8, y + 0.3)),
}


def _args(y_shape, y_grad):
    rng = np.random.default_rng(0)
    x = ak.tensor(rng.uniform(0.5, 1.5, (3, 4)), requires_grad=True)
    y = ak.tensor(rng.uniform(0.5, 1.5, y_shape), requires_grad=y_grad)
    return x, y


@pytest.mark.parametrize("y_grad", [True, False])
@pytest.mark.parametrize("y_shape", [(3, 4), (4,)])
@pytest.mark.parametrize("name", list(PAIRS))
def test_in_place_rules_equal_the_out_of_place_ones(name, y_shape, y_grad):
    in_place, out_of_place = PAIRS[name]
    x, y = _args(y_shape, y_grad)
    wrt = [x, y] if y_grad else [x]
    got = ak.autograd.grad(in_place(x, y).sum(), wrt, create_graph=True)
    want = ak.autograd.grad(out_of_place(x, y).sum(), wrt, create_graph=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-14)
    if all(w.requires_grad for w in want):  # second order where there is one
        second = ak.autograd.grad(sum((g * g).sum() for g in got), wrt)
        second_want = ak.autograd.grad(sum((w * w).sum() for w in want), wrt)
        for g, w in zip(second, second_want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-13)
    tangents = tuple(ak.ones_like(t) for t in (x, y))
    _, t_got = ak.func.jvp(in_place, (x.detach(), y.detach()), tangents)
    _, t_want = ak.func.jvp(out_of_place, (x.detach(), y.detach()), tangents)
    np.testing.assert_allclose(t_got.numpy(), t_want.numpy(), rtol=1e-14)


def test_alpha_must_not_be_a_float_for_an_integral_result():
    with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must "
                                           "not be a floating point number."):
        ak.tensor([1, 2]).add_(ak.tensor([1, 1]), alpha=0.5)


def test_an_integer_self_refuses_a_float_result():
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        ak.tensor([1, 2]).mul_(ak.tensor([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        ak.tensor([1, 2]).div_(2)

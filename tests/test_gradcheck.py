"""gradcheck / gradgradcheck: they pass on right rules and fail, naming the entry, on
wrong ones."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function, GradcheckError, gradcheck, gradgradcheck


class WrongSquare(Function):
    """y = x**2 with a deliberately wrong backward (3x instead of 2x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x


class RightSquareWrongSecond(Function):
    """First derivative right, but backward is built from a constant copy of x, so the
    second derivative is missing."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x.detach()


def x64(*values):
    return ak.tensor(list(values), dtype=ak.float64, requires_grad=True)


def test_gradcheck_passes_on_correct_rules():
    assert gradcheck(lambda a, b: (a * b + a.exp()).sum(), (x64(1.0, 2.0), x64(0.5, -1.0)))
    assert gradgradcheck(lambda a: (a * a * a).sum(), (x64(1.0, 2.0),))


def test_gradcheck_error_is_pytorchs_word_for_word():
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongSquare.apply, (x64(1.0, 2.0),))
    msg = str(info.value)
    assert msg.startswith("Jacobian mismatch for output 0 with respect to input 0,\n"
                          "numerical:tensor(")
    assert "\nanalytical:tensor(" in msg


class NotReentrant(Function):
    """A backward that differs from run to run (by a counter)."""
    calls = [0]

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        NotReentrant.calls[0] += 1
        return 2 * x * g + NotReentrant.calls[0] * 1e-9


def test_gradcheck_detects_a_backward_that_is_not_reentrant():
    with pytest.raises(GradcheckError, match="Backward is not reentrant, i.e., running "
                                             "backward with same input and grad_output "
                                             "multiple times gives different values"):
        gradcheck(NotReentrant.apply, (x64(1.0, 2.0),))
    assert gradcheck(NotReentrant.apply, (x64(1.0, 2.0),), nondet_tol=1e-6)


class WrongBatchingRule(Function):
    """Right gradients, but a vmap rule for its backward's op that is off by 1."""
    generate_vmap_rule = True  # (its own forward batches right: TimesThree uses it so)

    @staticmethod
    def forward(x):
        return x * 3.0

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return _Scale.apply(g)


class _Scale(Function):
    @staticmethod
    def forward(g):
        return g * 3.0

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 3.0

    @staticmethod
    def vmap(info, in_dims, g):
        return g * 3.0 + 1.0, in_dims[0]


def test_gradcheck_check_batched_grad():
    x = x64(1.0, 2.0)
    assert gradcheck(lambda v: (v * v).sin(), (x,), check_batched_grad=True)
    assert gradcheck(WrongBatchingRule.apply, (x,))
    with pytest.raises(GradcheckError, match="gradcheck or gradgradcheck failed while "
                                             "testing batched gradient computation"):
        gradcheck(WrongBatchingRule.apply, (x,), check_batched_grad=True)


class TimesThree(WrongBatchingRule):
    """x * 3 whose backward applies WrongBatchingRule: its second derivative is wrong
    when batched."""

    @staticmethod
    def backward(ctx, g):
        return WrongBatchingRule.apply(g)


def test_gradgradcheck_check_batched_grad():
    x = x64(1.0, 2.0)
    assert gradgradcheck(lambda v: (v * v).sin(), (x,), check_batched_grad=True)
    assert gradgradcheck(TimesThree.apply, (x,))
    with pytest.raises(GradcheckError, match="batched gradient computation"):
        gradgradcheck(TimesThree.apply, (x,), check_batched_grad=True)


def test_gradcheck_raise_exception_false_returns_false():
    assert gradcheck(WrongSquare.apply, (x64(1.0),), raise_exception=False) is False


def test_gradgradcheck_catches_missing_second_derivative():
    assert gradcheck(RightSquareWrongSecond.apply, (x64(1.0, 2.0),))
    with pytest.raises(GradcheckError):
        gradgradcheck(RightSquareWrongSecond.apply, (x64(1.0, 2.0),))


def test_gradcheck_needs_an_input_requiring_grad():
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda a: a * 2, (ak.tensor([1.0], dtype=ak.float64),))


def test_gradcheck_warns_on_float32_inputs():
    with pytest.warns(UserWarning, match="not a double precision"):
        gradcheck(lambda a: a * 2, (ak.tensor([1.0], requires_grad=True),), eps=1e-2, atol=1e-2)


def test_gradcheck_multiple_outputs_names_output():
    class TwoOut(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 2 + g2 * 4  # second output's derivative is wrong

    with pytest.raises(GradcheckError, match="output 1 with respect to input 0"):
        gradcheck(TwoOut.apply, (x64(1.0),))


def test_gradcheck_leaves_inputs_unchanged():
    x = x64(1.0, 2.0)
    gradcheck(lambda a: (a * a).sum(), (x,))
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0])

"""Forward-AD behaviours of custom Functions, with PyTorch's messages: what a jvp rule may
return (count, non-tensors, tangents of non-differentiable outputs, wrong sizes), saving
non-tensors for forward, and the outputs that carry no tangent."""
import pytest

import adkit as ak
import adkit.autograd.forward_ad as fwAD


def _function(lib, jvp_result, *, int_second=False, non_differentiable=False,
              save_number=False):
    class TwoOutputs(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if save_number:
                ctx.save_for_forward(1)
            second = (x > 0).long() if int_second else x * 3
            if non_differentiable:
                ctx.mark_non_differentiable(second)
            return x * 2, second

        @staticmethod
        def jvp(ctx, x_t):
            return jvp_result(x_t)

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            return grad_a * 2
    return TwoOutputs


CASES = {
    "too few tangents": (dict(jvp_result=lambda t: (t * 2,)),
                         "Function's jvp returned an invalid number of forward gradients "
                         r"\(expected 2 but got 1\)"),
    "tangent for an int output": (dict(jvp_result=lambda t: (t * 2, t), int_second=True),
                                  "Function's jvp returned a gradient at position 1, but  the "
                                  "corresponding forward output is not a differentiable "
                                  "Tensor.You should return None at that position instead."),
    "tangent for a non-differentiable output": (
        dict(jvp_result=lambda t: (t * 2, t * 3), non_differentiable=True),
        "Function's jvp returned a gradient at position 1"),
    "a tangent of the wrong size": (dict(jvp_result=lambda t: (t * 2, t[:2])),
                                    "Trying to set a forward gradient that has a different "
                                    "size than that of the original Tensor"),
    "a number as tangent": (dict(jvp_result=lambda t: (t * 2, 3.0)),
                            r"expected Variable or None \(got float\) for grad output 1."),
}


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: c.replace(" ", "_"))
def test_bad_jvp_results_raise_pytorchs_errors(case):
    kwargs, message = CASES[case]
    fn = _function(ak, **kwargs)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match=message):
            fn.apply(fwAD.make_dual(ak.randn(3), ak.randn(3)))


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: c.replace(" ", "_"))
def test_bad_jvp_results_raise_in_torch_too(case):
    torch = pytest.importorskip("torch")
    kwargs, message = CASES[case]
    fn = _function(torch, **kwargs)
    with torch.autograd.forward_ad.dual_level():
        with pytest.raises(RuntimeError, match=message):
            fn.apply(torch.autograd.forward_ad.make_dual(torch.randn(3), torch.randn(3)))


def test_save_for_forward_of_a_number_is_refused():
    fn = _function(ak, jvp_result=lambda t: (t * 2, t * 3), save_number=True)
    with fwAD.dual_level():
        with pytest.raises(AssertionError, match="save_for_forward expects all arguments "
                                                 "to be tensors"):
            fn.apply(fwAD.make_dual(ak.randn(3), ak.randn(3)))


def test_non_differentiable_outputs_carry_no_tangent():
    with fwAD.dual_level():
        x = fwAD.make_dual(ak.tensor([1.0, -2.0, 3.0]), ak.ones(3))
        assert fwAD.unpack_dual(x.argmax()).tangent is None
        assert fwAD.unpack_dual(x > 0).tangent is None
        values, indices = x.max(dim=0)
        assert fwAD.unpack_dual(values).tangent.item() == 1.0
        assert fwAD.unpack_dual(indices).tangent is None
        none_jvp = _function(ak, jvp_result=lambda t: (t * 2, None)).apply(x)
        assert fwAD.unpack_dual(none_jvp[1]).tangent is None
        assert fwAD.unpack_dual(ak.zeros(3)).tangent is None


def test_a_dual_escapes_its_level_as_a_plain_tensor():
    with fwAD.dual_level():
        dual = fwAD.make_dual(ak.tensor([1.0, 2.0]), ak.ones(2))
    after = dual * 2
    assert after.tolist() == [2.0, 4.0]
    assert fwAD.unpack_dual(after).tangent is None
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(after, ak.ones(2))


def test_make_dual_refuses_integer_primals_and_tangents():
    with fwAD.dual_level():
        with pytest.raises(ValueError, match="Expected primal to be floating point"):
            fwAD.make_dual(ak.tensor([1, 2]), ak.ones(2))
        with pytest.raises(ValueError, match="Expected tangent to be floating point"):
            fwAD.make_dual(ak.ones(2), ak.tensor([1, 2]))


def test_func_jvp_and_grad_refuse_integer_inputs_as_torch_func_does():
    with pytest.raises(ValueError, match="Expected primal to be floating point"):
        ak.func.jvp(lambda v: v * 2, (ak.tensor([1, 2]),), (ak.ones(2),))
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can "
                                           "require gradients"):
        ak.func.grad(lambda v: (v * v).sum())(ak.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match="Expected tangents to only contain Tensors"):
        ak.func.jvp(lambda v: v * 2, (ak.ones(2),), (2.0,))


def test_exiting_levels_out_of_order_raises():
    level = fwAD.enter_dual_level()
    try:
        with pytest.raises(RuntimeError, match="not the last one that was created"):
            fwAD.exit_dual_level(level=level + 1)
    finally:
        fwAD.exit_dual_level(level=level)

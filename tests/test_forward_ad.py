"""ak.autograd.forward_ad: dual levels, make_dual/unpack_dual, custom Function jvp, in-place
ops under forward mode, nesting, and gradcheck(check_forward_ad=True)."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function, GradcheckError, gradcheck
from adkit.autograd import forward_ad as fwAD


def f64(*values):
    return ak.tensor(list(values), dtype=ak.float64)


def test_forward_ad_jvp_of_a_composite():
    x, v = f64(1.0, 2.0), f64(0.5, -1.0)
    with fwAD.dual_level():
        out = (fwAD.make_dual(x, v).sin() * 3).exp()
        primal, tangent = fwAD.unpack_dual(out)
    expected = np.exp(3 * np.sin([1.0, 2.0])) * 3 * np.cos([1.0, 2.0]) * [0.5, -1.0]
    np.testing.assert_allclose(tangent.numpy(), expected)
    np.testing.assert_allclose(primal.numpy(), np.exp(3 * np.sin([1.0, 2.0])))


def test_forward_ad_errors_and_outside_a_level():
    x = f64(1.0, 2.0)
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="different size than that of the original"):
            fwAD.make_dual(x, f64(1.0))
        with pytest.raises(ValueError, match="Expected primal to be floating point"):
            fwAD.make_dual(ak.tensor([1, 2]), x)
        dual = fwAD.make_dual(x, f64(1.0, 1.0))
        assert fwAD.unpack_dual(x).tangent is None
    assert fwAD.unpack_dual(dual).tangent is None  # the level is gone
    assert fwAD.unpack_dual(dual * 2).tangent is None


def test_forward_ad_tangent_dtype_follows_primal():
    with fwAD.dual_level():
        dual = fwAD.make_dual(f64(1.0), ak.tensor([1.0]))
        assert fwAD.unpack_dual(dual).tangent.dtype == ak.float64


def test_forward_ad_public_levels_do_not_nest_as_in_pytorch():
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported"):
            with fwAD.dual_level():
                pass
        with pytest.raises(RuntimeError, match="Invalid level given to _make_dual"):
            fwAD.make_dual(f64(1.0), f64(1.0), level=10 ** 9)
        assert fwAD.unpack_dual(f64(1.0), level=10 ** 9).tangent is None
    with pytest.raises(RuntimeError, match="Dual level must be a positive number"):
        fwAD.exit_dual_level()


def test_func_jvp_nests_to_give_second_derivatives():
    x = ak.tensor(0.7, dtype=ak.float64)
    one = ak.tensor(1.0, dtype=ak.float64)

    def first(x):
        return ak.func.jvp(lambda v: v.sin() * v, (x,), (one,))[1]
    d1, d2 = ak.func.jvp(first, (x,), (one,))
    # d/dx (x sin x) = sin x + x cos x;  d2/dx2 = 2 cos x - x sin x
    assert d1.item() == pytest.approx(np.sin(0.7) + 0.7 * np.cos(0.7))
    assert d2.item() == pytest.approx(2 * np.cos(0.7) - 0.7 * np.sin(0.7))


def test_func_jvp_inside_a_public_dual_level():
    """func.jvp's private levels nest inside a public one: d/dx of (d/dx x^3) = 6x."""
    x = f64(2.0)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, f64(1.0))
        inner = ak.func.jvp(lambda v: v ** 3, (dual,), (f64(1.0),))[1]
        assert fwAD.unpack_dual(inner).tangent.item() == pytest.approx(12.0)
    assert inner.item() == pytest.approx(12.0)


def test_forward_ad_backward_through_tangents():
    x = ak.tensor([0.3, 0.9], dtype=ak.float64, requires_grad=True)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(fwAD.make_dual(x, f64(1.0, 1.0)).exp()).tangent
    tangent.sum().backward()  # reverse over forward: d/dx exp(x) * 1
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.3, 0.9]))


class MulConst(Function):
    """The seed's save_for_forward example: z * x * y."""

    @staticmethod
    def forward(ctx, x, y, z):
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(x, y)
        ctx.z = z
        return x * y * z

    @staticmethod
    def jvp(ctx, x_t, y_t, _):
        x, y = ctx.saved_tensors
        return ctx.z * (y * x_t + x * y_t)

    @staticmethod
    def vjp(ctx, grad_out):
        x, y = ctx.saved_tensors
        return ctx.z * grad_out * y, ctx.z * grad_out * x, None


def test_forward_ad_custom_function_jvp_with_save_for_forward():
    a = ak.tensor(1.0, requires_grad=True, dtype=ak.double)
    b = ak.tensor(2.0, requires_grad=True, dtype=ak.double)
    with fwAD.dual_level():
        d = MulConst.apply(fwAD.make_dual(a, ak.tensor(1.0, dtype=ak.double)), b, 4)
        assert fwAD.unpack_dual(d).tangent.item() == 8.0
    d.backward()
    assert a.grad.item() == 8.0 and b.grad.item() == 4.0
    assert gradcheck(lambda x, y: MulConst.apply(x, y, 4), (a, b), check_forward_ad=True)


class Square(Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_forward(inputs[0])
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 2 * x * x_t


class BadSquare(Square):
    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 3 * x * x_t


def test_forward_ad_setup_context_style_and_nesting():
    x = f64(3.0)

    def first(v):
        return ak.func.jvp(Square.apply, (v,), (f64(1.0),))[1]
    d1, d2 = ak.func.jvp(first, (x,), (f64(1.0),))
    assert d1.item() == 6.0 and d2.item() == 2.0  # d/dx x^2, d2/dx2 x^2


def test_forward_ad_gradcheck_catches_a_wrong_jvp():
    x = ak.tensor([1.0, 2.0], dtype=ak.float64, requires_grad=True)
    assert gradcheck(Square.apply, (x,), check_forward_ad=True)
    with pytest.raises(GradcheckError, match="Jacobian computed with forward mode mismatch "
                                             "for output 0 with respect to input 0"):
        gradcheck(BadSquare.apply, (x,), check_forward_ad=True)


def test_forward_ad_ctx_style_function_under_nested_levels():
    """forward(ctx, ...) Functions work under nested jvp levels too: d2/dx2 of 4*x*x = 8."""
    x = f64(1.5)

    def first(v):
        return ak.func.jvp(lambda u: MulConst.apply(u, u, 4), (v,), (f64(1.0),))[1]
    d1, d2 = ak.func.jvp(first, (x,), (f64(1.0),))
    assert d1.item() == pytest.approx(12.0) and d2.item() == pytest.approx(8.0)


def test_forward_ad_inplace_ops():
    with fwAD.dual_level():
        x = fwAD.make_dual(f64(1.0, 2.0), f64(1.0, 1.0))
        y = fwAD.make_dual(f64(3.0, 4.0), f64(10.0, 20.0))
        version = x._version
        assert x.mul_(y) is x and x._version == version + 1
        np.testing.assert_allclose(fwAD.unpack_dual(x).tangent.numpy(), [13.0, 44.0])
        z = ak.zeros(3, dtype=ak.float64)
        z[1:] = y
        np.testing.assert_allclose(fwAD.unpack_dual(z).tangent.numpy(), [0.0, 10.0, 20.0])


def test_forward_ad_materializes_missing_tangents_as_zeros():
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def jvp(ctx, a_t, b_t):
            seen.append((a_t.tolist(), b_t.tolist()))
            return a_t + b_t

    with fwAD.dual_level():
        Probe.apply(fwAD.make_dual(f64(1.0), f64(5.0)), f64(2.0))
    assert seen == [([5.0], [0.0])]

"""Forward-mode AD through in-place ops on views (PyTorch's semantics): the tangent of a
view is a view of its base's tangent, and a write through a view updates the base's.

Every program runs through `ak.func.jvp` and `ak.autograd.forward_ad`, and is checked
against central finite differences in float64, against reverse mode (jacrev), and against
torch.func.jvp of the same program when torch is installed."""
import numpy as np
import pytest

import adkit as ak
import adkit.autograd.forward_ad as fwAD


def _issue_example(m, x, y):
    v = x.clone()
    v[:, 1:].mul_(2.0)
    return v.sin()


def _transposed_slice(m, x, y):
    v = x.clone()
    v.t()[1:].add_(y.t()[1:])
    return v * v


def _view_of_view(m, x, y):
    v = x.clone()
    w = v[1:]
    w[:, :2].exp_()
    return v


def _base_written_while_view_exists(m, x, y):
    v = x.clone()
    w = v[:, 1]
    v.mul_(y)
    return w * 1.0


def _zeros_base_copy_from_dual(m, x, y):
    z = m.zeros(3, 4, dtype=x.dtype)
    z[1:].copy_(x[:2])
    return z


def _reshape_view_zero(m, x, y):
    v = x.clone()
    v.view(-1)[::2].zero_()
    return v * y


def _two_views_of_one_base(m, x, y):
    v = x.clone()
    a, b = v[0], v[1]
    a.add_(b)
    return v


def _other_operand_is_a_view_of_the_same_base(m, x, y):
    v = x.clone()
    v[0].mul_(v[1])
    return v


def _transpose_clamp(m, x, y):
    v = x.clone()
    v.T.clamp_(-0.5, 0.5)
    return v


def _fill_on_view(m, x, y):
    v = x.clone()
    v[1].fill_(2.0)
    return v * x


def _div_on_view(m, x, y):
    v = y.clone()
    v[:, ::2].div_(x[:, ::2])
    return v


def _base_copied_then_old_view_read(m, x, y):
    v = m.zeros(3, 4, dtype=x.dtype)
    w = v[1:]
    v.copy_(y)
    return w.exp()


def _setitem_with_index_tensor(m, x, y):
    v = x.clone()
    col = v[:, 2]
    col[m.tensor([0, 2])] = y[:2, 0]
    return v


def _setitem_with_mask(m, x, y):
    v = x.clone()
    row = v[1]
    row[x[0] > 0] = 0.0
    return v + row.sum()


PROGRAMS = [_issue_example, _transposed_slice, _view_of_view,
            _base_written_while_view_exists, _zeros_base_copy_from_dual, _reshape_view_zero,
            _two_views_of_one_base, _other_operand_is_a_view_of_the_same_base,
            _transpose_clamp, _fill_on_view, _div_on_view, _base_copied_then_old_view_read,
            _setitem_with_index_tensor, _setitem_with_mask]


def _inputs():
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.5, 1.5, (3, 4))
    x[np.abs(np.abs(x) - 0.5) < 0.05] += 0.2  # away from clamp's kinks
    y = rng.uniform(0.5, 1.5, (3, 4))
    tx, ty = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    return x, y, tx, ty


def _run(program, x, y):
    return program(ak, ak.tensor(x), ak.tensor(y)).numpy()


def _finite_difference(program, x, y, tx, ty, eps=1e-6):
    return (_run(program, x + eps * tx, y + eps * ty) -
            _run(program, x - eps * tx, y - eps * ty)) / (2 * eps)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_func_jvp_through_in_place_ops_on_views(program):
    x, y, tx, ty = _inputs()
    out, tangent = ak.func.jvp(lambda a, b: program(ak, a, b),
                               (ak.tensor(x), ak.tensor(y)), (ak.tensor(tx), ak.tensor(ty)))
    np.testing.assert_allclose(out.numpy(), _run(program, x, y), rtol=1e-14)
    np.testing.assert_allclose(tangent.numpy(), _finite_difference(program, x, y, tx, ty),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_forward_ad_api_through_in_place_ops_on_views(program):
    x, y, tx, ty = _inputs()
    with fwAD.dual_level():
        dx = fwAD.make_dual(ak.tensor(x), ak.tensor(tx))
        dy = fwAD.make_dual(ak.tensor(y), ak.tensor(ty))
        tangent = fwAD.unpack_dual(program(ak, dx, dy)).tangent
    np.testing.assert_allclose(tangent.numpy(), _finite_difference(program, x, y, tx, ty),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_forward_and_reverse_jacobians_agree_through_views(program):
    x, y, _, _ = _inputs()
    fn = lambda a: program(ak, a, ak.tensor(y))  # noqa: E731
    forward = ak.func.jacfwd(fn)(ak.tensor(x)).numpy()
    reverse = ak.func.jacrev(fn)(ak.tensor(x)).numpy()
    np.testing.assert_allclose(forward, reverse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_jvp_through_views_matches_torch(program):
    torch = pytest.importorskip("torch")
    x, y, tx, ty = _inputs()
    _, ours = ak.func.jvp(lambda a, b: program(ak, a, b),
                          (ak.tensor(x), ak.tensor(y)), (ak.tensor(tx), ak.tensor(ty)))
    t = [torch.tensor(a) for a in (x, y, tx, ty)]
    _, theirs = torch.func.jvp(lambda a, b: program(torch, a, b), (t[0], t[1]), (t[2], t[3]))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_a_tangent_of_a_view_is_a_view_of_the_base_tangent():
    with fwAD.dual_level():
        base = fwAD.make_dual(ak.zeros(4, dtype=ak.float64), ak.zeros(4, dtype=ak.float64))
        view = base[1:3]
        view.add_(fwAD.make_dual(ak.ones(2, dtype=ak.float64),
                                 ak.tensor([5.0, 7.0], dtype=ak.float64)))
        assert fwAD.unpack_dual(base).tangent.tolist() == [0.0, 5.0, 7.0, 0.0]
        assert fwAD.unpack_dual(view).tangent.tolist() == [5.0, 7.0]


def test_a_view_taken_before_its_base_got_a_tangent_sees_it():
    with fwAD.dual_level():
        base = ak.zeros(3, dtype=ak.float64)
        early_view = base[1:]
        base.copy_(fwAD.make_dual(ak.ones(3, dtype=ak.float64),
                                  ak.tensor([1.0, 2.0, 3.0], dtype=ak.float64)))
        assert fwAD.unpack_dual(early_view).tangent.tolist() == [2.0, 3.0]


def test_in_place_writes_do_not_leak_into_the_callers_tangent():
    """clone's jvp may hand back its input's tangent: a later in-place op on the clone
    must not write into the tangent the caller passed."""
    x, t = ak.ones(3, dtype=ak.float64), ak.ones(3, dtype=ak.float64)
    ak.func.jvp(lambda a: a.clone().mul_(5.0), (x,), (t,))
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_jvp_of_views_under_vmap_matches_a_loop():
    x, y, tx, ty = _inputs()
    txs = np.stack([tx, 2 * tx, -tx])

    def tangent_for(t):
        return ak.func.jvp(lambda a: _issue_example(ak, a, None), (ak.tensor(x),), (t,))[1]
    batched = ak.func.vmap(tangent_for)(ak.tensor(txs)).numpy()
    looped = np.stack([tangent_for(ak.tensor(t)).numpy() for t in txs])
    np.testing.assert_allclose(batched, looped, rtol=1e-14)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_eager_backward_through_views_matches_finite_differences(program):
    """Reverse mode on the same programs: a view taken before its base was written gets
    its history re-derived from the base (PyTorch regenerates its grad_fn)."""
    x, y, tx, ty = _inputs()
    u = np.random.default_rng(3).standard_normal(_run(program, x, y).shape)
    a, b = ak.tensor(x, requires_grad=True), ak.tensor(y, requires_grad=True)
    (program(ak, a, b) * ak.tensor(u)).sum().backward()
    grads = [np.zeros((3, 4)) if t.grad is None else t.grad.numpy() for t in (a, b)]
    directional = np.sum(grads[0] * tx) + np.sum(grads[1] * ty)
    want = np.sum(u * _finite_difference(program, x, y, tx, ty))
    assert directional == pytest.approx(want, rel=1e-6, abs=1e-8)


def test_a_view_taken_before_a_write_to_its_base_gets_the_new_history():
    x = ak.tensor(np.ones((2, 3)), requires_grad=True)
    v = x.clone()
    w = v[:, 1]
    v.mul_(ak.tensor(np.full((2, 3), 3.0)))
    (w * 1.0).sum().backward()
    assert x.grad.tolist() == [[0.0, 3.0, 0.0], [0.0, 3.0, 0.0]]

"""Reverse mode through loops with checkpoint=s / "sqrt": the same gradients as storing
every step, forward-step counts equal to Revolve's closed form, at most s carries kept."""
import numpy as np
import pytest

import adkit as ak
from adkit.control import checkpoint, revolve

RNG = np.random.default_rng(1)
W = ak.tensor(RNG.standard_normal((3, 3)) * 0.5)


def scan_loss(h0, n, policy, reverse=False):
    xs = ak.tensor(RNG.standard_normal((n, 3)) * 0.1) if n not in _XS else _XS[n]
    _XS[n] = xs
    h, ys = ak.scan(lambda h, x: ((h @ W + x).tanh(), (h * x).sum()), h0, xs,
                    reverse=reverse, checkpoint=policy)
    return h.sum() + ys.sum()


_XS = {}


@pytest.mark.parametrize("n,policy", [(1000, 10), (100, 3), (50, "sqrt"), (7, 1), (1, 2),
                                      (12, 30)])
@pytest.mark.parametrize("path", ["eager", "jit"])
def test_checkpointed_scan_gradients_and_recompute_counts(n, policy, path):
    h0 = ak.tensor(RNG.standard_normal(3))
    want = ak.func.grad(lambda h: scan_loss(h, n, None))(h0)
    grad = ak.func.grad(lambda h: scan_loss(h, n, policy))
    checkpoint.LAST_RUN.update(forward_steps=-1, stored_carries=-1, reversed_steps=-1)
    got = (grad if path == "eager" else ak.jit(grad))(h0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    if path == "jit":  # the native executor walks the same schedule; it keeps no counts
        steps = ak.jit(grad).compile(h0).steps
        assert [type(step).__name__ for step in steps] == ["SegmentStep"]
        return
    s = checkpoint.snapshots(policy, n)
    assert checkpoint.LAST_RUN["forward_steps"] == revolve.binomial_forward_steps(n, s)
    assert checkpoint.LAST_RUN["stored_carries"] <= s
    assert checkpoint.LAST_RUN["reversed_steps"] == n


def test_the_spec_example_n1000_s10_takes_3636_forward_steps():
    ak.func.grad(lambda h: scan_loss(h, 1000, 10))(ak.tensor(RNG.standard_normal(3)))
    assert checkpoint.LAST_RUN["forward_steps"] == 3636


def test_checkpointed_reverse_scan_and_gradients_of_xs_and_closures():
    xs = ak.tensor(RNG.standard_normal((9, 3)))

    def loss(w, xs, policy):
        h, ys = ak.scan(lambda h, x: ((h * w + x).sin(), h * x), ak.ones(3, dtype=ak.float64),
                        xs, reverse=True, checkpoint=policy)
        return h.sum() + (ys ** 2).sum()
    w = ak.tensor(RNG.standard_normal(3))
    want = ak.func.grad(loss, argnums=(0, 1))(w, xs, None)
    got = ak.jit(ak.func.grad(loss, argnums=(0, 1)), static_argnums=2)(w, xs, 2)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_checkpointed_while_loop_and_fori_loop():
    def loss(v, policy):
        def body(c):
            k, v = c
            return k + 1, (v * W[0]).sin() + v * 0.9
        _, v = ak.while_loop(lambda c: c[0] < 20, body, (ak.tensor(0), v), checkpoint=policy)
        return (v * v).sum()
    v = ak.tensor(RNG.standard_normal(3))
    want = ak.func.grad(lambda v: loss(v, None))(v)
    got = ak.jit(ak.func.grad(lambda v: loss(v, 3)))(v)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    assert checkpoint.LAST_RUN["forward_steps"] == revolve.binomial_forward_steps(20, 3)
    f = lambda v, p: ak.fori_loop(0, 30, lambda i, v: (v @ W).tanh() + 0.1, v,  # noqa: E731
                                  checkpoint=p).sum()
    np.testing.assert_allclose(ak.func.grad(lambda v: f(v, "sqrt"))(v).numpy(),
                               ak.func.grad(lambda v: f(v, None))(v).numpy(), rtol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, "log", 2.5, True])
def test_a_bad_checkpoint_policy_is_refused_at_the_call(bad):
    with pytest.raises(ValueError, match="checkpoint"):
        ak.scan(lambda c, x: (c, None), ak.tensor(0.0), None, length=3, checkpoint=bad)

"""ak.func.jacobian: mode "fwd", "rev" or "auto" (the cheaper by the documented cost model
in adkit/func/jacobian.py), values equal jacfwd/jacrev, pytrees and aux kept."""
import numpy as np
import pytest

import adkit as ak
from adkit.func.jacobian import jacobian_cost

RNG = np.random.default_rng(4)


def t(*shape):
    return ak.tensor(RNG.standard_normal(shape))


def wide(x):  # R^2000 -> R^4: reverse mode is cheaper
    return (A_WIDE @ x.tanh()).sin()


def tall(x):  # R^4 -> R^2000: forward mode is
    return (A_TALL @ x).sin() * x.sum()


A_WIDE, A_TALL = t(4, 2000) / 40, t(2000, 4)


def test_auto_takes_reverse_for_many_inputs_and_forward_for_many_outputs():
    assert ak.func.jacobian(wide).mode_for(t(2000)) == "rev"
    assert ak.func.jacobian(tall).mode_for(t(4)) == "fwd"


@pytest.mark.parametrize("mode", ["auto", "fwd", "rev"])
@pytest.mark.parametrize("f,n", [(wide, 2000), (tall, 4)])
def test_every_mode_gives_the_jacobian(mode, f, n):
    x = t(n)
    np.testing.assert_allclose(ak.func.jacobian(f, mode=mode)(x).numpy(),
                               ak.func.jacfwd(f)(x).numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["auto", "fwd", "rev"])
def test_argnums_pytrees_and_aux(mode):
    def f(x, y):
        return {"a": (x * y).sin(), "b": x.sum() * y[:2]}, x.exp()
    x, y = t(3), t(3)
    got, aux = ak.func.jacobian(f, argnums=(0, 1), mode=mode, has_aux=True)(x, y)
    want, want_aux = ak.func.jacrev(f, argnums=(0, 1), has_aux=True)(x, y)
    np.testing.assert_allclose(aux.numpy(), want_aux.numpy())
    for key in ("a", "b"):
        for g, w in zip(got[key], want[key]):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)


def test_the_choice_is_made_once_per_input_signature():
    """The first call with a signature traces f once more (for the cost model); later
    calls with that signature run only the chosen transform."""
    calls = []

    def f(x):
        calls.append(1)
        return x.sin()
    jac = ak.func.jacobian(f)
    jac(t(3))
    first = len(calls)
    jac(t(3))
    per_call = len(calls) - first
    assert first == per_call + 1  # the trace
    jac(t(3))
    assert len(calls) == first + 2 * per_call
    jac(t(5))  # a new signature: traced again
    assert len(calls) == first + 3 * per_call + 1


def test_under_jit():
    x = t(4)
    np.testing.assert_allclose(ak.jit(ak.func.jacobian(tall))(x).numpy(),
                               ak.func.jacfwd(tall)(x).numpy(), rtol=1e-12, atol=1e-12)


def test_cost_model():
    costs = jacobian_cost(2000, 4, ops=5, work=3000)
    assert costs["rev"] < costs["fwd"]
    costs = jacobian_cost(4, 2000, ops=5, work=6000)
    assert costs["fwd"] < costs["rev"]


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="mode must be one of"):
        ak.func.jacobian(wide, mode="forward")
    with pytest.raises(TypeError, match="must return a tensor"):
        ak.func.jacobian(lambda x: "text")(t(2))

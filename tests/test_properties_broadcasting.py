"""Property tests: gradients of broadcasting binary ops come back summed to each input's
shape, equal to a numpy reference, for any mutually broadcastable shapes."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import adkit as ak

SHAPES = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3)


def _sum_to(g, shape):
    """numpy reference for unbroadcasting."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


# partial derivatives in numpy for the reference: (d/dx, d/dy) given x, y
PARTIALS = {
    "add": lambda x, y: (np.ones_like(x * y), np.ones_like(x * y)),
    "sub": lambda x, y: (np.ones_like(x * y), -np.ones_like(x * y)),
    "mul": lambda x, y: (np.broadcast_to(y, np.broadcast(x, y).shape),
                         np.broadcast_to(x, np.broadcast(x, y).shape)),
    "div": lambda x, y: (np.broadcast_to(1 / y, np.broadcast(x, y).shape),
                         -x / y ** 2),
}


@given(shapes=SHAPES, op=st.sampled_from(sorted(PARTIALS)), seed=st.integers(0, 2**16))
def test_property_broadcast_gradients_sum_to_input_shapes(shapes, op, seed):
    (shape_x, shape_y), out_shape = shapes
    rng = np.random.default_rng(seed)
    xa = rng.uniform(0.5, 2.0, shape_x)
    ya = rng.uniform(0.5, 2.0, shape_y)
    grad_out = rng.standard_normal(out_shape)
    x = ak.tensor(xa, requires_grad=True)
    y = ak.tensor(ya, requires_grad=True)
    out = getattr(ak, op)(x, y)
    assert out.shape == out_shape
    gx, gy = ak.autograd.grad(out, (x, y), ak.tensor(grad_out))
    dx, dy = PARTIALS[op](xa, ya)
    assert gx.shape == shape_x and gy.shape == shape_y
    np.testing.assert_allclose(gx.numpy(), _sum_to(grad_out * dx, shape_x), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), _sum_to(grad_out * dy, shape_y), rtol=1e-12,
                               atol=1e-12)


@given(shapes=SHAPES, seed=st.integers(0, 2**16))
def test_property_sum_to_size_is_adjoint_of_expand(shapes, seed):
    """<expand(a), b> == <a, sum_to_size(b)>: the two rules are each other's transpose."""
    (shape_a, _), out_shape = shapes
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape_a)
    b = rng.standard_normal(out_shape)
    lhs = float((ak.tensor(a).expand(out_shape) * ak.tensor(b)).sum())
    rhs = float((ak.tensor(a) * ak.tensor(b).sum_to_size(shape_a)).sum())
    assert np.isclose(lhs, rhs, rtol=1e-10, atol=1e-10)

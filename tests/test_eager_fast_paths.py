"""The eager fast paths (issue 16) keep PyTorch's semantics: what binary ops save, how
the engine checks gradients (validate_outputs), what node hooks see, and the order in
which ready nodes run. PyTorch is the reference where installed."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function


def _libs():
    torch = pytest.importorskip("torch")
    return (torch, ak)


def test_mul_saves_only_the_operand_a_needed_gradient_reads():
    """a * w with w needing no gradient saves w alone (PyTorch's should_compute_output):
    writing a in place afterwards is fine, writing w is the version error."""
    for lib in _libs():
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        a, w = x * 1.0, lib.tensor([3.0, 4.0])
        z = a * w
        a.mul_(2)
        z.sum().backward()
        assert x.grad.tolist() == [3.0, 4.0]
        a, w = x * 1.0, lib.tensor([3.0, 4.0])
        z = a * w
        w.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


def test_div_saves_the_numerator_only_for_the_divisor_gradient():
    """x / y reads x only in dz/dy: with y needing no gradient, x is not saved."""
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    a, y = x * 1.0, ak.tensor([4.0, 8.0])
    z = a / y
    a.mul_(3)
    z.sum().backward()
    assert x.grad.tolist() == [0.25, 0.125]
    y2 = ak.tensor([4.0, 8.0], requires_grad=True)
    (g,) = ak.autograd.grad((x / y2).sum(), y2)
    np.testing.assert_allclose(g.numpy(), [-1 / 16, -2 / 64])


def test_engine_sums_a_broadcast_gradient_back_to_the_input_shape():
    """Binary ops return grad_out * partial at the output's shape; the engine sums it to
    each input's shape and casts it to its dtype (PyTorch's validate_outputs)."""
    x = ak.tensor([1.0, 2.0, 3.0], dtype=ak.float32, requires_grad=True)
    y = ak.tensor([[1.0], [2.0]], dtype=ak.float64, requires_grad=True)
    (x * y).sum().backward()
    assert x.grad.dtype == ak.float32 and x.grad.tolist() == [3.0, 3.0, 3.0]
    assert y.grad.shape == (2, 1) and y.grad.tolist() == [[6.0], [6.0]]


def test_custom_function_broadcast_gradient_is_summed_and_bad_shapes_named():
    class Spread(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.expand((4, 3))  # broadcastable to x: summed back

    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    Spread.apply(x).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]

    class Wrong(Spread):
        @staticmethod
        def backward(ctx, g):
            return ak.ones(2)

    x = ak.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="WrongBackward returned an invalid gradient at "
                                           r"index 0 - got \[2\] but expected shape "
                                           r"compatible with \[3\]"):
        Wrong.apply(x).sum().backward()


def test_node_hooks_see_one_gradient_per_tensor_input():
    """A non-tensor argument has an edge inside adkit (so results line up), but hooks and
    next_functions count tensor inputs only, as PyTorch's do."""
    seen = {}
    for lib in _libs():
        class Scale(lib.autograd.Function):
            @staticmethod
            def forward(ctx, k, x):
                ctx.k = k
                return x * k

            @staticmethod
            def backward(ctx, g):
                return None, g * ctx.k

        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = Scale.apply(3.0, x)
        calls = []
        y.grad_fn.register_hook(lambda gi, go: calls.append((len(gi), gi[0].tolist())))
        y.sum().backward()
        seen[lib.__name__] = (calls, len(y.grad_fn.next_functions), x.grad.tolist())
    assert seen["adkit"] == seen["torch"]


def test_ready_nodes_run_in_pytorchs_order():
    """Where several nodes wait, the one made last runs first; a lone ready node runs
    at once. Tensor hooks record the order, compared with PyTorch's."""
    orders = {}
    for lib in _libs():
        order = []
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        a = x * 2.0
        b = a.sin()
        c = a.exp()
        d = x * 3.0
        for name, t in (("a", a), ("b", b), ("c", c), ("d", d)):
            t.register_hook(lambda g, name=name: order.append(name))
        x.register_hook(lambda g: order.append("x"))
        (b * c + d).sum().backward()
        orders[lib.__name__] = (order, x.grad.tolist())
    assert orders["adkit"][0] == orders["torch"][0]
    np.testing.assert_allclose(orders["adkit"][1], orders["torch"][1])


def test_operators_and_methods_still_dispatch_to_interpreters():
    """Tensor's operators and unary methods skip apply only when no interpreter is
    active: under vmap and tracing they reach the interpreter."""
    xs = ak.tensor(np.arange(6.0).reshape(2, 3))
    out = ak.func.vmap(lambda x: (x * 2.0 + x).exp().sum())(xs)
    np.testing.assert_allclose(out.numpy(), np.exp(3 * xs.numpy()).sum(1))
    graph = ak.trace(lambda x: (x * x).sin(), ak.tensor([1.0, 2.0]))
    assert "sin" in str(graph) and "mul" in str(graph)

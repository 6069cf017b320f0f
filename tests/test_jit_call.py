"""jit as a higher-order op (codegen/call.py): a jitted call under eager autograd or any
transform is one JitCall node whose rules run compiled code. Every transform through a
jit node is checked against the same transform of the plain function (and derivatives
against finite differences), and the PyTorch semantics of the tape node: hooks,
retain_graph, create_graph, saved-tensor version checks, closures over parameters.
"""
import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.autograd import forward_ad as fwAD
from adkit.codegen.call import JitCall, JitCallSavingResiduals


def rand(*shape, seed=0):
    return ak.tensor(np.random.default_rng(seed).uniform(-1, 1, shape))


def close(got, want, tol=1e-10):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(),
                                   rtol=tol, atol=tol)


def mlp(x, w1, w2):
    return ((x @ w1).tanh() @ w2).sin().sum()


def two_outputs(x, w):
    h = x @ w
    return h.exp().sum(), (h * h).mean(0)


def pytree_out(x, w):
    return {"y": (x @ w).tanh(), "s": [x.sum() * w.sum()]}


def with_int_input(x, w, k):
    return (x @ w).sum() * k.to(ak.float64).sum()


def args_mlp():
    return rand(5, 4), rand(4, 6, seed=1), rand(6, 3, seed=2)


def args_two():
    return rand(5, 4), rand(4, 3, seed=1)


CASES = [(mlp, args_mlp), (lambda x, w: two_outputs(x, w)[0] + two_outputs(x, w)[1].sum(),
                           args_two)]


def fresh_leaves(args):
    return [a.detach().requires_grad_() for a in args]


# ----------------------------------------------------------------------------- eager tape
@pytest.mark.parametrize("f,make", CASES)
def test_backward_of_a_jitted_call_equals_the_plain_function(f, make):
    args = make()
    got, want = fresh_leaves(args), fresh_leaves(args)
    loss = ak.jit(f)(*got)
    assert isinstance(loss.grad_fn, JitCallSavingResiduals._backward_cls)
    loss.backward()
    f(*want).backward()
    close([a.grad for a in got], [a.grad for a in want])


def test_the_tape_holds_one_node_for_the_call():
    x, w1, w2 = fresh_leaves(args_mlp())
    loss = ak.jit(mlp)(x, w1, w2)
    nexts = [fn for fn, _ in loss.grad_fn.next_functions if fn is not None]
    assert all(type(fn).__name__ == "AccumulateGrad" for fn in nexts) and len(nexts) == 3


def test_several_outputs_and_a_pytree_result():
    x, w = fresh_leaves(args_two())
    a, b = ak.jit(two_outputs)(x, w)
    (a + (b * b).sum()).backward()
    x2, w2 = fresh_leaves(args_two())
    a2, b2 = two_outputs(x2, w2)
    (a2 + (b2 * b2).sum()).backward()
    close([x.grad, w.grad], [x2.grad, w2.grad])
    x, w = fresh_leaves(args_two())
    out = ak.jit(pytree_out)(x, w)
    assert set(out) == {"y", "s"} and isinstance(out["s"], list)
    (out["y"].sum() + out["s"][0]).backward()
    x2, w2 = fresh_leaves(args_two())
    ref = pytree_out(x2, w2)
    (ref["y"].sum() + ref["s"][0]).backward()
    close([x.grad, w.grad], [x2.grad, w2.grad])


def test_an_unused_output_and_an_integer_input():
    x, w = fresh_leaves(args_two())
    k = ak.tensor(np.array([1, 2, 3]))
    ak.jit(with_int_input)(x, w, k).backward()
    x2, w2 = fresh_leaves(args_two())
    with_int_input(x2, w2, k).backward()
    close([x.grad, w.grad], [x2.grad, w2.grad])
    x, w = fresh_leaves(args_two())
    a, _ = ak.jit(two_outputs)(x, w)  # the second output gets no cotangent
    a.backward()
    x2, w2 = fresh_leaves(args_two())
    two_outputs(x2, w2)[0].backward()
    close([x.grad, w.grad], [x2.grad, w2.grad])


def test_closure_over_a_parameter_gets_its_gradient_and_is_read_live():
    x, w = args_two()
    w = w.detach().requires_grad_()
    jf = ak.jit(lambda x: (x @ w).tanh().sum())
    jf(x).backward()
    w_ref = w.detach().requires_grad_()
    (x @ w_ref).tanh().sum().backward()
    close(w.grad, w_ref.grad)
    with ak.no_grad():
        w.mul_(0.5)  # an optimizer step, in place
    got = jf(x)
    close(got, (x @ w.detach()).tanh().sum())
    with ak.no_grad():  # no tape wanted: the plain compiled program
        close(jf(x), (x @ w.detach()).tanh().sum())


def test_retain_graph_and_the_second_backward_error():
    x, w1, w2 = fresh_leaves(args_mlp())
    loss = ak.jit(mlp)(x, w1, w2)
    loss.backward(retain_graph=True)
    first = w1.grad.clone()
    loss.backward()
    close(w1.grad, first * 2)
    loss = ak.jit(mlp)(x, w1, w2)
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_create_graph_gives_double_backward_through_the_call():
    x, w1, w2 = fresh_leaves(args_mlp())
    g, = ak.autograd.grad(ak.jit(mlp)(x, w1, w2), [w1], create_graph=True)
    (g * g).sum().backward()
    x2, w12, w22 = fresh_leaves(args_mlp())
    g2, = ak.autograd.grad(mlp(x2, w12, w22), [w12], create_graph=True)
    (g2 * g2).sum().backward()
    close(g, g2)
    close([x.grad, w1.grad, w2.grad], [x2.grad, w12.grad, w22.grad])


def test_hooks_on_inputs_and_outputs_run():
    x, w = fresh_leaves(args_two())
    seen = []
    w.register_hook(lambda g: seen.append("w") or g * 2)
    out = ak.jit(lambda x, w: (x @ w).tanh())(x, w)
    out.register_hook(lambda g: seen.append("out"))
    out.sum().backward()
    w2 = w.detach().requires_grad_()
    (x.detach() @ w2).tanh().sum().backward()
    assert seen == ["out", "w"]
    close(w.grad, w2.grad * 2)


def test_modifying_a_saved_input_in_place_is_refused_at_backward():
    x, w = fresh_leaves(args_two())
    h = x * 1.0
    loss = ak.jit(lambda h, w: (h @ w).tanh().sum())(h, w)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_calls_reuse_the_trace_and_the_compiled_programs():
    jf = ak.jit(mlp)
    for seed in range(3):
        args = fresh_leaves([rand(5, 4, seed=seed), rand(4, 6, seed=1), rand(6, 3, seed=2)])
        jf(*args).backward()
    (traced,) = jf.op_cache.values()
    forward, _ = traced.plan.cache["split"]
    assert "compiled" in forward.cache
    # the backward computes only the gradients asked for: here of all three arguments
    derived = {k for k in traced.plan.cache if k not in ("in_specs", "out_specs")}
    assert derived == {"split", ("backward", (True, True, True))}
    assert "compiled" in traced.plan.cache[("backward", (True, True, True))].cache


def test_the_backward_computes_only_the_gradients_asked_for():
    x, w1, w2 = args_mlp()
    w1 = w1.detach().requires_grad_()
    jf = ak.jit(mlp)
    jf(x, w1, w2).backward()
    (traced,) = jf.op_cache.values()
    pruned = traced.plan.cache[("backward", (False, True, False))]
    assert len(pruned.graph.outputs) == 1
    w1_ref = w1.detach().requires_grad_()
    mlp(x, w1_ref, w2).backward()
    close(w1.grad, w1_ref.grad)


# ----------------------------------------------------------------------------- transforms
def grad_of_grad(g):
    inner = F.grad(g, argnums=1)
    return F.grad(lambda *a: inner(*a).sum(), argnums=0)


TRANSFORMS = [lambda g: F.grad(g, argnums=(0, 1)), lambda g: F.jacrev(g, argnums=1),
              lambda g: F.jacfwd(g, argnums=1), lambda g: F.hessian(g, argnums=1),
              grad_of_grad]


@pytest.mark.parametrize("transform", TRANSFORMS,
                         ids=["grad", "jacrev", "jacfwd", "hessian", "grad_of_grad"])
@pytest.mark.parametrize("f,make", CASES)
def test_func_transforms_through_a_jit_node(f, make, transform):
    args = make()
    close(transform(ak.jit(f))(*args), transform(f)(*args))


@pytest.mark.parametrize("f,make", CASES)
def test_jvp_and_forward_ad_duals_through_a_jit_node(f, make):
    args = make()
    tangents = [rand(*a.shape, seed=7 + i) for i, a in enumerate(args)]
    close(F.jvp(ak.jit(f), tuple(args), tuple(tangents)), F.jvp(f, tuple(args), tuple(tangents)))
    with fwAD.dual_level():
        duals = [fwAD.make_dual(a, t) for a, t in zip(args, tangents)]
        got = fwAD.unpack_dual(ak.jit(f)(*duals)).tangent
        want = fwAD.unpack_dual(f(*duals)).tangent
    close(got, want)


def test_vmap_and_vmap_of_grad_through_a_jit_node():
    x, w1, w2 = args_mlp()
    xs = rand(3, 5, 4, seed=5)
    jf = ak.jit(mlp)
    close(F.vmap(jf, in_dims=(0, None, None))(xs, w1, w2),
          F.vmap(mlp, in_dims=(0, None, None))(xs, w1, w2))
    close(F.vmap(F.grad(jf, argnums=1), in_dims=(0, None, None))(xs, w1, w2),
          F.vmap(F.grad(mlp, argnums=1), in_dims=(0, None, None))(xs, w1, w2))


def test_nesting_jit_grad_jit_and_jit_vmap_jit():
    x, w1, w2 = args_mlp()
    jf = ak.jit(mlp)
    close(ak.jit(F.grad(jf, argnums=1))(x, w1, w2), F.grad(mlp, argnums=1)(x, w1, w2))
    xs = rand(3, 5, 4, seed=5)
    batched = ak.jit(F.vmap(jf, in_dims=(0, None, None)))
    close(batched(xs, w1, w2), F.vmap(mlp, in_dims=(0, None, None))(xs, w1, w2))
    inner = ak.jit(F.grad(jf, argnums=1))
    deep = ak.jit(F.grad(lambda x, w1, w2: inner(x, w1, w2).sum(), argnums=0))
    want = F.grad(lambda x, w1, w2: F.grad(mlp, argnums=1)(x, w1, w2).sum(), argnums=0)
    close(deep(x, w1, w2), want(x, w1, w2))


def test_an_outer_jit_inlines_the_call():
    x, w1, w2 = args_mlp()
    jf = ak.jit(mlp)
    traced = ak.trace(F.grad(jf, argnums=1), x, w1, w2)
    ops = [traced.nx.nodes[n]["op"] for n in traced.op_nodes]
    assert ops.count(JitCall) == 2  # the call and its vjp, one node each
    lowered = ak.jit(F.grad(jf, argnums=1)).lower(x, w1, w2)
    assert JitCall not in [lowered.nx.nodes[n]["op"] for n in lowered.op_nodes]


def test_derivatives_through_the_call_match_finite_differences():
    x, w1, w2 = args_mlp()
    jf = ak.jit(mlp)
    g = F.grad(jf, argnums=1)(x, w1, w2).numpy()
    base, eps = w1.numpy(), 1e-6
    fd = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += eps
        minus[idx] -= eps
        fd[idx] = (mlp(x, ak.tensor(plus), w2).item() -
                   mlp(x, ak.tensor(minus), w2).item()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------- fallbacks
def test_a_function_writing_its_argument_in_place_runs_as_python_under_grad():
    def f(x, w):
        x.add_(1.0)
        return (x @ w).sum()
    x, w = args_two()
    w = w.detach().requires_grad_()
    x1 = x.clone()
    ak.jit(f)(x1, w).backward()
    w2 = w.detach().requires_grad_()
    x2 = x.clone()
    f(x2, w2).backward()
    close([x1, w.grad], [x2, w2.grad])


def test_static_arguments_keywords_and_non_float_outputs_under_grad():
    x, w = args_two()
    f = ak.jit(lambda x, w, p: (x @ w).pow(p).sum(), static_argnums=(2,))
    close(F.grad(f, argnums=1)(x, w, 2), F.grad(lambda x, w: (x @ w).pow(2).sum(),
                                                  argnums=1)(x, w))
    g = ak.jit(lambda x, w, scale=1.0: ((x @ w) * scale).sum())
    close(F.grad(g, argnums=1)(x, w, scale=3.0), F.grad(g, argnums=1)(x, w) * 3)
    xs = x.detach().requires_grad_()
    total, where = ak.jit(lambda x: (x.sum(), x.argmax()))(xs)
    total.backward()
    assert where.item() == int(np.argmax(x.numpy())) and not where.requires_grad
    close(xs.grad, ak.ones_like(x))


def test_an_inner_jit_closing_over_an_outer_trace():
    x, w = args_two()
    outer = ak.jit(lambda x, w: ak.jit(lambda y: (y @ w).tanh().sum())(x))
    plain = lambda x, w: (x @ w).tanh().sum()  # noqa: E731
    close(outer(x, w), plain(x, w))
    close(F.grad(outer, argnums=1)(x, w), F.grad(plain, argnums=1)(x, w))

"""The transform passes ak.ir.passes.vjp / jvp / vmap on traced graphs: their values
against ak.func (and eager code), their input/output layout, validate() after each, the
input graph left unchanged, compositions of passes, the vjp graph reusing the forward
values (no recomputation), and a golden snapshot of a cleaned-up vjp graph."""
import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.ir import passes
from adkit.ir.passes import cse, dce, fold_constants, pipeline, simplify
from adkit.ops.unary import Exp, Sigmoid, Sqrt, Tanh

F64 = ak.float64
TOL = dict(rtol=1e-10, atol=1e-12)
B = 3  # batch size of the vmap pass


def n(x):
    return x.detach().numpy()


def rand(shape, seed, low=-1.5, high=1.5):
    return ak.tensor(np.random.default_rng(seed).uniform(low, high, size=shape))


def snapshot(g):
    """Everything a pass could change in place: listing, nodes with attributes, edges."""
    nodes = []
    for node, d in sorted(g.nx.nodes(data=True)):
        params = repr(sorted(d.get("params", {}).items()))
        value = d["value"].tobytes() if d["kind"] == "const" else None
        nodes.append((node, d["kind"], d.get("op"), params, d.get("specs"), value))
    edges = sorted((u, v, k, d["pos"], d["out"]) for u, v, k, d in
                   g.nx.edges(keys=True, data=True))
    return str(g), nodes, edges


def run_pass(p, g, *args, **kwargs):
    """p(g, ...), checking that g is untouched and the result is a new, valid graph."""
    before = snapshot(g)
    h = p(g, *args, **kwargs)
    assert snapshot(g) == before, f"{p.__name__} changed its input graph"
    assert h is not g and h.nx is not g.nx
    h.validate()
    return h


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def assert_all_close(got, want):
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape) and g.dtype == w.dtype, (g, w)
        np.testing.assert_allclose(n(g), n(w), **TOL)


def ops_of(g, op):
    return [node for node in g.op_nodes if g.nx.nodes[node]["op"] is op]


# ================================================================ programs
C = ak.tensor(np.array([0.5, -2.0, 1.5]))


def matmul_tanh(x, w):
    return (x @ w).tanh().sum()


def two_outputs(x, y):
    return x.exp() * y, (x - y).sin().mean()


def with_constant(x):
    return ((x * C).sigmoid() + x * x).sum(-1)


def shapes_and_reductions(x):
    return x.reshape(2, 6).softmax(-1).transpose(0, 1)[1:4].sum(0)


def multi_output_op(x):
    a, b = x.split(2, dim=0)
    return a.exp() * b.cos(), b.sum()


PROGRAMS = {
    "matmul_tanh": (matmul_tanh, [(3, 4), (4, 2)]),
    "two_outputs": (two_outputs, [(3,), (3,)]),
    "with_constant": (with_constant, [(2, 3)]),
    "shapes_and_reductions": (shapes_and_reductions, [(3, 4)]),
    "multi_output_op": (multi_output_op, [(4, 3)]),
}


def _program(name):
    fn, shapes = PROGRAMS[name]
    args = [rand(s, seed) for seed, s in enumerate(shapes)]
    return fn, args, ak.trace(fn, *args)


# ================================================================ vjp
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_vjp_pass_matches_func_vjp(name):
    fn, args, g = _program(name)
    vg = run_pass(passes.vjp, g)
    outs = as_tuple(fn(*args))
    n_in, n_out = len(args), len(outs)
    assert len(vg.inputs) == n_in + n_out and len(vg.outputs) == n_out + n_in
    cts = [rand(tuple(o.shape), 10 + i) for i, o in enumerate(outs)]
    got = vg(*args, *cts)
    single = not isinstance(fn(*args), tuple)
    out, vjp_fn = F.vjp(fn, *args)
    want_grads = vjp_fn(cts[0] if single else tuple(cts))
    assert_all_close(got, tuple(as_tuple(out)) + tuple(want_grads))


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_vjp_pass_matches_eager_autograd(name):
    fn, args, g = _program(name)
    vg = passes.vjp(g)
    leaves = [a.detach().requires_grad_(True) for a in args]
    outs = as_tuple(fn(*leaves))
    cts = [rand(tuple(o.shape), 20 + i) for i, o in enumerate(outs)]
    want = ak.autograd.grad(list(outs), leaves, cts)
    got = vg(*args, *cts)[len(outs):]
    assert_all_close(got, want)


# ================================================================ jvp
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_jvp_pass_matches_func_jvp(name):
    fn, args, g = _program(name)
    jg = run_pass(passes.jvp, g)
    n_out = len(as_tuple(fn(*args)))
    assert len(jg.inputs) == 2 * len(args) and len(jg.outputs) == 2 * n_out
    tangents = [rand(tuple(a.shape), 30 + i) for i, a in enumerate(args)]
    got = jg(*args, *tangents)
    out, jv = F.jvp(fn, tuple(args), tuple(tangents))
    assert_all_close(got, as_tuple(out) + as_tuple(jv))


# ================================================================ vmap
def _in_dims_options(n_args):
    options = [(0,) * n_args, (-1,) * n_args]
    if n_args > 1:
        options.append((None,) + (0,) * (n_args - 1))
        options.append((1,) + (None,) * (n_args - 1))
    return options


def _batched_example(a, d, seed):
    if d is None:
        return a
    shape = list(a.shape)
    shape.insert(d % (len(shape) + 1), B)
    return rand(tuple(shape), seed)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_vmap_pass_matches_func_vmap(name):
    fn, args, g = _program(name)
    for in_dims in _in_dims_options(len(args)):
        bg = run_pass(passes.vmap, g, in_dims, batch_size=B)
        batched = [_batched_example(a, d, 40 + i) for i, (a, d) in enumerate(zip(args, in_dims))]
        got = bg(*batched)
        want = F.vmap(fn, in_dims=in_dims)(*batched)
        assert_all_close(got, want)
        # and a Python loop over the examples
        for b in range(B):
            example = [a if d is None else a.select(d, b) for a, d in zip(batched, in_dims)]
            for o, w in zip(as_tuple(got), as_tuple(fn(*example))):
                np.testing.assert_allclose(n(o)[b], n(w), **TOL)


def test_vmap_pass_out_dims():
    fn, args, g = _program("two_outputs")
    xs, ys = rand((B, 3), 50), rand((B, 3), 51)
    bg = run_pass(passes.vmap, g, 0, out_dims=-1, batch_size=B)
    a, s = bg(xs, ys)
    assert tuple(a.shape) == (3, B) and tuple(s.shape) == (B,)
    assert_all_close((a, s), F.vmap(fn, out_dims=-1)(xs, ys))
    bg = run_pass(passes.vmap, g, (0, None), out_dims=(1, 0), batch_size=B)
    got = bg(xs, args[1])
    assert_all_close(got, F.vmap(fn, in_dims=(0, None), out_dims=(1, 0))(xs, args[1]))


def test_vmap_pass_in_dims_length_must_match():
    _, _, g = _program("two_outputs")
    with pytest.raises(ValueError, match="in_dims has 1 entries for 2 inputs"):
        passes.vmap(g, (0,), batch_size=B)


def test_vmap_pass_shapes_of_inputs_and_outputs():
    _, _, g = _program("matmul_tanh")
    bg = passes.vmap(g, (None, 2), batch_size=5)
    assert [tuple(bg.specs_of(i)[0].shape) for i in bg.inputs] == [(3, 4), (4, 2, 5)]
    assert [tuple(bg.specs_of(o)[0].shape) for o in bg.outputs] == [(5,)]


# ================================================================ compositions of passes
def scalar_fn(x):
    return (x.sin() * x).sum() + (x * x).sum().sqrt()


def scalar_hessian(x):
    """Closed form: diag(2 cos x - x sin x) + (I - x x^T / |x|^2) / |x|."""
    x = n(x)
    r = np.sqrt(x @ x)
    return np.diag(2 * np.cos(x) - x * np.sin(x)) + (np.eye(len(x)) - np.outer(x, x) / r ** 2) / r


def test_scalar_hessian_reference():
    x = rand(3, 59)
    np.testing.assert_allclose(n(F.jacrev(F.jacrev(scalar_fn))(x)), scalar_hessian(x), **TOL)


def test_jvp_of_vjp_is_a_hessian_vector_product():
    x, v = rand(3, 60), rand(3, 61)
    vg = passes.vjp(ak.trace(scalar_fn, x))
    hg = run_pass(passes.jvp, vg)
    one, zero = ak.tensor(1.0, dtype=F64), ak.tensor(0.0, dtype=F64)
    value, grad, _, hvp = hg(x, one, v, zero)
    np.testing.assert_allclose(n(value), n(scalar_fn(x)), **TOL)
    np.testing.assert_allclose(n(grad), n(F.grad(scalar_fn)(x)), **TOL)
    np.testing.assert_allclose(n(hvp), scalar_hessian(x) @ n(v), **TOL)


def test_vjp_of_vjp_is_second_order():
    x, u = rand(3, 62), rand(3, 63)
    vg = passes.vjp(ak.trace(scalar_fn, x))  # (x, ct) -> (f, ct * grad)
    vvg = run_pass(passes.vjp, vg)  # (x, ct, u_f, u_g) -> (f, g, dx, dct)
    one, zero = ak.tensor(1.0, dtype=F64), ak.tensor(0.0, dtype=F64)
    _, _, dx, dct = vvg(x, one, zero, u)
    np.testing.assert_allclose(n(dx), scalar_hessian(x).T @ n(u), **TOL)
    np.testing.assert_allclose(n(dct), n(F.grad(scalar_fn)(x)) @ n(u), **TOL)


def test_vmap_of_vjp_gives_per_example_gradients():
    xs = rand((B, 3), 64)
    vg = passes.vjp(ak.trace(scalar_fn, xs[0]))
    bg = run_pass(passes.vmap, vg, (0, None), batch_size=B)
    values, grads = bg(xs, ak.tensor(1.0, dtype=F64))
    np.testing.assert_allclose(n(values), n(F.vmap(scalar_fn)(xs)), **TOL)
    np.testing.assert_allclose(n(grads), n(F.vmap(F.grad(scalar_fn))(xs)), **TOL)
    for b in range(B):
        np.testing.assert_allclose(n(grads)[b], n(F.grad(scalar_fn)(xs[b])), **TOL)


def test_vjp_of_vmap():
    xs, ct = rand((B, 3), 65), rand(B, 66)
    bg = passes.vmap(ak.trace(scalar_fn, xs[0]), 0, batch_size=B)
    vg = run_pass(passes.vjp, bg)
    _, grads = vg(xs, ct)
    _, vjp_fn = F.vjp(F.vmap(scalar_fn), xs)
    np.testing.assert_allclose(n(grads), n(vjp_fn(ct)[0]), **TOL)


def test_cleanup_pipeline_keeps_transform_values():
    fn, args, g = _program("matmul_tanh")
    vg = passes.vjp(g)
    cleaned = run_pass(pipeline([fold_constants, simplify, cse, dce]), vg)
    assert len(cleaned) <= len(vg)
    ct = ak.tensor(0.7, dtype=F64)
    assert_all_close(cleaned(*args, ct), vg(*args, ct))


# ================================================================ non-float inputs / outputs
def gather_fn(x, idx):
    return x.index_select(0, idx).sin().sum()


def test_vjp_pass_with_an_integer_input():
    x, idx = rand(4, 70), ak.tensor([0, 2, 2])
    vg = run_pass(passes.vjp, ak.trace(gather_fn, x, idx))
    value, gx, gidx = vg(x, idx, ak.tensor(1.0, dtype=F64))
    np.testing.assert_allclose(n(value), n(gather_fn(x, idx)), **TOL)
    np.testing.assert_allclose(n(gx), n(F.grad(gather_fn)(x, idx)), **TOL)
    assert tuple(gidx.shape) == (3,) and not n(gidx).any()


def test_vjp_pass_with_an_integer_output():
    def fn(x):
        return x.sin(), x.argmax()
    x = rand(4, 71)
    vg = run_pass(passes.vjp, ak.trace(fn, x))
    ct = rand(4, 72)
    s, i, gx = vg(x, ct, ak.tensor(0))
    np.testing.assert_allclose(n(s), np.sin(n(x)), **TOL)
    assert int(n(i)) == int(np.argmax(n(x)))
    np.testing.assert_allclose(n(gx), np.cos(n(x)) * n(ct), **TOL)


def test_jvp_pass_with_an_integer_input():
    x, idx, v = rand(4, 73), ak.tensor([0, 2, 2]), rand(4, 74)
    jg = run_pass(passes.jvp, ak.trace(gather_fn, x, idx))
    value, tangent = jg(x, idx, v, ak.zeros(3, dtype=idx.dtype))
    _, want = F.jvp(lambda a: gather_fn(a, idx), (x,), (v,))
    np.testing.assert_allclose(n(value), n(gather_fn(x, idx)), **TOL)
    np.testing.assert_allclose(n(tangent), n(want), **TOL)


# ================================================================ reuse of forward values
def _consumers(g, node):
    return {v for _, v in g.nx.out_edges(node)}


@pytest.mark.parametrize("op,fn", [(Tanh, lambda x: x.tanh().sum()),
                                   (Exp, lambda x: x.exp().sum()),
                                   (Sigmoid, lambda x: x.sigmoid().sum()),
                                   (Sqrt, lambda x: x.sqrt().sum())],
                         ids=["tanh", "exp", "sigmoid", "sqrt"])
def test_vjp_graph_reuses_the_forward_output(op, fn):
    x = rand(3, 80, low=0.5, high=2.0)
    g = ak.trace(fn, x)
    vg = run_pass(passes.vjp, g)
    (fwd,) = ops_of(vg, op)  # computed once, not again for the backward
    consumers = _consumers(vg, fwd)
    assert len(consumers) >= 2, "the backward does not read the forward node"
    assert any(vg.nx.nodes[c]["kind"] == "op" and vg.nx.nodes[c]["op"] is not
               type(g.nx.nodes[g.op_nodes[-1]]["op"]) and c != fwd for c in consumers)
    np.testing.assert_allclose(n(vg(x, ak.tensor(1.0, dtype=F64))[1]), n(F.grad(fn)(x)),
                               **TOL)


def test_vjp_graph_recomputes_nothing_of_a_chain():
    def chain(x):
        return x.exp().tanh().sigmoid().sqrt().sum()
    x = rand(3, 81)
    g = ak.trace(chain, x)
    vg = run_pass(passes.vjp, g)
    for op in (Exp, Tanh, Sigmoid, Sqrt):
        assert len(ops_of(vg, op)) == 1, op.__name__
    # the original forward is a prefix of the vjp graph, output 0 is its output
    fwd_ops = [g.nx.nodes[m]["op"] for m in g.op_nodes]
    assert [vg.nx.nodes[m]["op"] for m in vg.op_nodes[:len(fwd_ops)]] == fwd_ops
    (_, src, _), = vg.args_of(vg.outputs[0])
    assert vg.nx.nodes[src]["op"] is fwd_ops[-1]


def test_vjp_graph_of_matmul_tanh_reads_forward_nodes():
    _, _, g = _program("matmul_tanh")
    vg = passes.vjp(g)
    (tanh,) = ops_of(vg, Tanh)
    a, b = vg.inputs[:2]
    ops = [vg.nx.nodes[m]["op"].__name__ for m in vg.op_nodes]
    assert ops.count("Matmul") == 3  # one forward, two backward
    # the backward reads the forward tanh output and both primal inputs
    assert len(_consumers(vg, tanh)) >= 2
    assert len(_consumers(vg, a)) >= 2 and len(_consumers(vg, b)) >= 2


# ================================================================ golden snapshot
GOLDEN_VJP = """\
{ lambda ; a:f64[3,4] b:f64[4,2] c:f64[]. let
    d:f64[3,2] = matmul a b
    e:f64[3,2] = tanh d
    f:f64[] = sum[dim=None dtype=None keepdim=False] e
    g:f64[1,1] = reshape[shape=(1, 1)] c
    h:f64[3,2] = expand[shape=(3, 2)] g
    i:f64[3,2] = mul e e
    j:f64[3,2] = sub[x=1] i
    k:f64[3,2] = mul h j
    l:f64[2,4] = transpose[dim0=-2 dim1=-1] b
    m:f64[3,4] = matmul k l
    n:f64[4,3] = transpose[dim0=-2 dim1=-1] a
    o:f64[4,2] = matmul n k
  in (f, m, o) }"""


def test_golden_vjp_graph_of_matmul_tanh_sum():
    g = ak.trace(lambda x, w: (x @ w).tanh().sum(), ak.zeros(3, 4, dtype=F64),
                 ak.zeros(4, 2, dtype=F64))
    cleaned = pipeline([fold_constants, simplify, cse, dce])(passes.vjp(g))
    cleaned.validate()
    assert str(cleaned) == GOLDEN_VJP
    x, w = rand((3, 4), 90), rand((4, 2), 91)
    value, gx, gw = cleaned(x, w, ak.tensor(1.0, dtype=F64))
    want_gx, want_gw = F.grad(lambda x, w: (x @ w).tanh().sum(), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(n(value), n((x @ w).tanh().sum()), **TOL)
    np.testing.assert_allclose(n(gx), n(want_gx), **TOL)
    np.testing.assert_allclose(n(gw), n(want_gw), **TOL)

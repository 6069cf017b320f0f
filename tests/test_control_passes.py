"""IR passes around loops and branches: loop-invariant hoisting, validate() of bodies, and
random pass sequences over graphs with loops (values unchanged, input graph untouched)."""
import numpy as np
import pytest

import adkit as ak
from adkit.control import Scan, While, batch_accumulations, hoist_invariants
from adkit.ir.graph import GraphError

RNG = np.random.default_rng(2)
W = ak.tensor(RNG.standard_normal((3, 3)))
XS = ak.tensor(RNG.standard_normal((5, 3)))
H0 = ak.tensor(RNG.standard_normal(3))


def scan_with_invariant_work(h0, w):
    def step(h, x):
        a = (w @ w).tanh() * 2  # the same every step
        return (h @ a + x).sin(), (a * x).sum()
    h, ys = ak.scan(step, h0, XS)
    return h.sum() + ys.sum()


def while_with_invariant_work(v, w):
    def body(c):
        return c[0] + 1, c[1] * w.exp().mean() * 0.5
    return ak.while_loop(lambda c: c[0] < w.sum() * 0 + 4, body,
                         (ak.tensor(0.0, dtype=ak.float64), v))[1].sum()


def _loop_node(graph):
    (n,) = [m for m in graph.op_nodes if graph.nx.nodes[m]["op"] in (Scan, While)]
    return graph.nx.nodes[n]["params"]["plan"]


@pytest.mark.parametrize("f", [scan_with_invariant_work, while_with_invariant_work])
def test_invariant_work_moves_out_of_the_loop(f):
    graph = ak.trace(f, H0, W)
    before = str(graph)
    hoisted = hoist_invariants(graph)
    hoisted.validate()
    assert str(graph) == before  # the input graph is untouched
    body = _loop_node(hoisted).body
    names = [body.nx.nodes[m]["op"].__name__ for m in body.op_nodes]
    assert not set(names) & {"Tanh", "Exp"} and names.count("Matmul") <= 1
    outside = {hoisted.nx.nodes[m]["op"].__name__ for m in hoisted.op_nodes}
    assert outside & {"Tanh", "Exp"}
    np.testing.assert_allclose(hoisted(H0, W).numpy(), graph(H0, W).numpy(), rtol=1e-14)


def test_hoisting_inside_gradient_graphs_and_nested_loops():
    def nested(h0, w):
        def outer(h, x):
            inner = ak.fori_loop(0, 3, lambda i, v: (v @ (w * 2).tanh()).sin(), h)
            return inner + x, None
        return ak.scan(outer, h0, XS)[0].sum()
    for f in (scan_with_invariant_work, nested):
        graph = ak.trace(ak.func.grad(f, argnums=(0, 1)), H0, W)
        hoisted = ak.ir.passes.dce(hoist_invariants(graph))
        hoisted.validate()
        for a, b in zip(hoisted(H0, W), graph(H0, W)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


def test_a_hoisted_transpose_enters_the_loop_as_a_contiguous_copy():
    # a reverse pass reads w transposed at every step: one copy in memory order, made
    # before the loop, instead of strided reads per step
    def loop(h0, w):
        return ak.fori_loop(0, 4, lambda i, h: (h @ w).tanh(), h0).sum()
    graph = ak.trace(ak.func.grad(loop, argnums=1), H0, W)
    hoisted = ak.ir.passes.dce(hoist_invariants(graph))
    hoisted.validate()
    ops = {m: hoisted.nx.nodes[m]["op"].__name__ for m in hoisted.op_nodes}
    (clone,) = [m for m, name in ops.items() if name == "Clone"]
    (_, source, _), = hoisted.args_of(clone)
    assert ops[source] == "Transpose"
    assert any(ops[v] == "Scan" for v in hoisted.nx.successors(clone))
    np.testing.assert_allclose(hoisted(H0, W).numpy(), graph(H0, W).numpy(), rtol=1e-14)


def _scan_plans(graph):
    return [graph.nx.nodes[n]["params"]["plan"] for n in graph.op_nodes
            if graph.nx.nodes[n]["op"] is Scan]


def test_a_carried_sum_of_products_becomes_one_product_after_the_loop():
    def outer_sums(xs, w):
        def step(c, x):
            h, acc = c
            h = (h @ w + x).tanh()
            return (h, acc + h[:, None] @ x[None, :]), None
        return ak.scan(step, (H0, ak.zeros((3, 3), dtype=ak.float64)), xs)[0]
    graph = ak.trace(outer_sums, XS, W)
    batched = ak.ir.passes.dce(batch_accumulations(graph))
    batched.validate()
    assert [p.n_carry for p in _scan_plans(graph)] == [2]
    assert [p.n_carry for p in _scan_plans(batched)] == [1]  # acc left the loop
    for a, b in zip(batched(XS, W), graph(XS, W)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-15)


def test_the_weight_gradient_of_a_recurrence_is_one_product():
    def loop(w, h0):
        return ak.fori_loop(0, 6, lambda i, h: (h @ w).tanh(), h0).sum()
    grad = ak.func.grad(loop)
    lowered = ak.jit(grad).lower(W, H0)
    (reverse,) = [p for p in _scan_plans(lowered) if p.reverse]
    assert reverse.n_carry == 1  # the cotangent of h only: dw is a product after it
    assert reverse.n_ys == 1  # h_t is read from the forward's history, not stacked again
    np.testing.assert_allclose(ak.jit(grad)(W, H0).numpy(), grad(W, H0).numpy(),
                               rtol=1e-12, atol=1e-14)


def test_a_carry_read_by_the_body_stays():
    def read_back(xs, w):
        def step(acc, x):
            new = acc + x[:, None] @ x[None, :]
            return new, acc.sum()  # the body reads the carry: not a pure sum
        return ak.scan(step, ak.zeros((3, 3), dtype=ak.float64), xs)
    graph = ak.trace(read_back, XS, W)
    assert [p.n_carry for p in _scan_plans(batch_accumulations(graph))] == [1]


def test_validate_checks_bodies_and_the_node_against_them():
    graph = ak.trace(scan_with_invariant_work, H0, W)
    graph.validate()
    plan = _loop_node(graph)
    broken = graph.copy()
    (n,) = [m for m in broken.op_nodes if broken.nx.nodes[m]["op"] is Scan]
    bad_body = plan.body.copy()
    bad_body.nx.nodes[bad_body.inputs[0]]["index"] = 7
    broken.nx.nodes[n]["params"]["plan"] = plan.with_bodies({"body": bad_body})
    with pytest.raises(GraphError, match="body"):
        broken.validate()
    short = graph.copy()
    short.nx.nodes[n]["params"]["plan"] = type(plan)(**{**plan.__dict__, "cache": {},
                                                        "length": 4})
    with pytest.raises(GraphError, match="scan"):
        short.validate()


@pytest.mark.parametrize("seed", range(4))
def test_random_pass_sequences_over_loops_keep_values(seed):
    rng = np.random.default_rng(seed)
    passes = [ak.ir.passes.dce, ak.ir.passes.cse, ak.ir.passes.fold_constants,
              ak.ir.passes.simplify, ak.ir.passes.decompose, hoist_invariants]
    for f in (scan_with_invariant_work, while_with_invariant_work):
        for g in (ak.trace(f, H0, W), ak.trace(ak.func.grad(f, argnums=1), H0, W)):
            want = g(H0, W).numpy()
            text = str(g)
            for k in rng.integers(len(passes), size=6):
                g2 = passes[k](g)
                g2.validate()
                assert str(g) == text
                g, text = g2, str(g2)
            g = ak.ir.passes.fuse(g)
            g.validate()
            np.testing.assert_allclose(g(H0, W).numpy(), want, rtol=1e-12, atol=1e-14)


def test_value_and_grad_runs_one_forward_loop_after_merging():
    from adkit.control import merge_residual_scans
    f = lambda h, w: ak.func.grad_and_value(scan_with_invariant_work)(h, w)  # noqa: E731
    graph = ak.trace(f, H0, W)
    scans = lambda g: sum(g.nx.nodes[n]["op"] is Scan and not  # noqa: E731
                          g.nx.nodes[n]["params"]["plan"].reverse for n in g.op_nodes)
    assert scans(graph) == 2
    merged = merge_residual_scans(graph)
    merged.validate()
    assert scans(merged) == 1
    for a, b in zip(merged(H0, W), graph(H0, W)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)


def test_hoisting_keeps_reads_before_later_in_place_writes():
    """Found by the fuzzer (seed 31): hoist_invariants added x0 * 0.1 (a new node, the
    highest id) before the loop; program order sorted by id then ran a clone that the
    program made before an in-place write (through a view) after it, because the loop
    waited for the new node. A new node now runs just before its first user."""
    x0 = ak.tensor(np.random.default_rng(31).standard_normal((3, 4)))

    def program(x0):
        v0 = x0.clone()
        v0[..., 0].fill_(0.5)
        v1 = ak.fori_loop(0, 3, lambda i, v: (v * 0.7).tanh() + x0 * 0.1, x0)
        v4 = v0.clone()
        v4[1:].div_(2.0 + v1[2:] * v1[2:])
        return (v4 * ak.tensor(np.arange(12.0).reshape(3, 4))).sum()
    want = ak.func.grad(program)(x0).numpy()
    np.testing.assert_allclose(ak.jit(ak.func.grad(program), compile="eager")(x0).numpy(),
                               want, rtol=1e-12, atol=1e-14)
    graph = ak.trace(ak.func.grad(program), x0)
    np.testing.assert_allclose(ak.ir.passes.pipeline(list(ak.ir.passes.DEFAULT_PIPELINE))(
        graph)(x0).numpy(), want, rtol=1e-12, atol=1e-14)


def _w_h_scan(w, length=5, checkpoint=None):
    """sum(h_n) of the scan h = tanh(W h) (W a loop-invariant matrix)."""
    def loss(h0):
        h, _ = ak.scan(lambda h, _: (ak.tanh(ak.matmul(w, h)), None), h0, length=length,
                       checkpoint=checkpoint)
        return h.sum()
    return loss


def _checkpointed(w):
    return _w_h_scan(w, length=7, checkpoint=3)


def test_hoisting_puts_the_vector_first_in_a_loop_invariant_matrix_vector_product():
    """W @ h with W loop-invariant becomes h @ W^T with W^T hoisted as a contiguous copy:
    native kernels then read the matrix along its rows (5x faster per step), with the
    same values and gradients."""
    rng = np.random.default_rng(7)
    w = ak.tensor(rng.standard_normal((6, 6)) * 0.3)
    loss = _w_h_scan(w)
    h0 = ak.tensor(rng.standard_normal(6))
    graph = hoist_invariants(ak.trace(loss, h0))
    (scan,) = [n for n in graph.op_nodes() if graph.nx.nodes[n]["op"] is Scan]
    body = graph.nx.nodes[scan]["params"]["plan"].body
    (product,) = [m for m in body.op_nodes() if body.nx.nodes[m]["op"] is ak.ir.ops.Matmul]
    (_, first, _), (_, second, _) = body.args_of(product)
    assert body.specs_of(first)[0].shape == (6,) and body.nx.nodes[second]["kind"] == "input"
    np.testing.assert_allclose(graph(h0).numpy(), loss(h0).numpy(), rtol=1e-13)
    np.testing.assert_allclose(ak.jit(ak.func.grad(loss), compile="eager")(h0).numpy(),
                               ak.func.grad(loss)(h0).numpy(), rtol=1e-12)


def test_the_reverse_pass_reads_a_loop_invariant_matrix_along_its_rows_too():
    """A reverse pass holds the cotangent as a [K, 1] column (W^T @ g[:, None]): it
    becomes (g^T @ W)^T, W hoisted as a contiguous copy, like the forward's W @ h."""
    rng = np.random.default_rng(8)
    w = ak.tensor(rng.standard_normal((6, 6)) * 0.3)
    loss = _w_h_scan(w)
    h0 = ak.tensor(rng.standard_normal(6))
    graph = ak.ir.passes.dce(hoist_invariants(ak.trace(ak.func.grad(loss), h0)))
    graph.validate()
    products = 0  # of the matrix (a hoisted copy, an input of the body) and a vector
    for plan in _scan_plans(graph):
        body = plan.body
        for m in body.op_nodes():
            if body.nx.nodes[m]["op"] is ak.ir.ops.Matmul:
                (_, first, _), (_, second, _) = body.args_of(m)
                assert body.specs_of(first)[0].shape != (6, 6)  # never the matrix first
                if body.specs_of(second)[0].shape == (6, 6):
                    assert body.specs_of(first)[0].shape in ((6,), (1, 6))
                    assert body.nx.nodes[second]["kind"] == "input"
                    products += 1
    assert products == 2  # forward and reverse
    np.testing.assert_allclose(graph(h0).numpy(), ak.func.grad(loss)(h0).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(ak.jit(ak.func.grad(loss), compile="eager")(h0).numpy(),
                               ak.func.grad(loss)(h0).numpy(), rtol=1e-12)


def test_a_checkpointed_reverse_pass_is_hoisted_too():
    """ScanCheckpointGrad's two bodies (the forward step, the recomputing vjp step) read
    one slot of consts: what either hoists enters both once, as consts that get no
    gradient of their own (W's gradient is still W's)."""
    rng = np.random.default_rng(9)
    h0, w = ak.tensor(rng.standard_normal(6)), ak.tensor(rng.standard_normal((6, 6)) * 0.3)

    def loss(h0, w):
        return _checkpointed(w)(h0)
    graph = ak.trace(ak.func.grad(loss, argnums=(0, 1)), h0, w)
    hoisted = ak.ir.passes.dce(hoist_invariants(graph))
    hoisted.validate()
    (node,) = [n for n in hoisted.op_nodes()
               if hoisted.nx.nodes[n]["op"].__name__ == "ScanCheckpointGrad"]
    params = hoisted.nx.nodes[node]["params"]
    assert params["plan"].no_grad
    for body in (params["plan"].body, params["back"].graph):
        for m in body.op_nodes():
            if body.nx.nodes[m]["op"] is ak.ir.ops.Matmul:
                (_, first, _), _ = body.args_of(m)
                assert body.specs_of(first)[0].shape != (6, 6)  # the matrix second
    for a, b in zip(hoisted(h0, w), graph(h0, w), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    jitted = ak.jit(ak.func.grad(loss, argnums=(0, 1)), compile="eager")(h0, w)
    for a, b in zip(jitted, ak.func.grad(loss, argnums=(0, 1))(h0, w), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


def test_a_hoisted_checkpointed_reverse_pass_differentiates():
    """Its hoisted consts are arguments like the others to its own derivative rules."""
    rng = np.random.default_rng(10)
    h0, w = ak.tensor(rng.standard_normal(6)), ak.tensor(rng.standard_normal((6, 6)) * 0.3)
    grad = ak.func.grad(_checkpointed(w))
    hoisted = ak.ir.passes.dce(hoist_invariants(ak.trace(grad, h0)))
    np.testing.assert_allclose(ak.func.jacrev(lambda h: hoisted(h))(h0).detach().numpy(),
                               ak.func.jacrev(grad)(h0).numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(ak.func.jacfwd(lambda h: hoisted(h))(h0).detach().numpy(),
                               ak.func.jacfwd(grad)(h0).numpy(), rtol=1e-11, atol=1e-13)


def test_a_checkpointed_reverse_pass_drops_gradients_nothing_reads():
    """dce asks the op: the gradient of W, which grad with respect to h0 does not
    return, is no longer accumulated at every reverse step (no outer product left)."""
    rng = np.random.default_rng(13)
    h0, w = ak.tensor(rng.standard_normal(6)), ak.tensor(rng.standard_normal((6, 6)) * 0.3)
    grad = ak.func.grad(_checkpointed(w))
    graph = ak.trace(grad, h0)
    pruned = ak.ir.passes.dce(graph)
    pruned.validate()
    (node,) = [n for n in pruned.op_nodes()
               if pruned.nx.nodes[n]["op"].__name__ == "ScanCheckpointGrad"]
    params = pruned.nx.nodes[node]["params"]
    assert len(pruned.specs_of(node)) == 1 and params["plan"].float_positions()[0] == []
    back = params["back"].graph
    assert not [m for m in back.op_nodes() if back.specs_of(m)[0].shape == (6, 6) and
                back.nx.nodes[m]["op"] is ak.ir.ops.Matmul]
    np.testing.assert_allclose(pruned(h0).numpy(), graph(h0).numpy(), rtol=1e-13)
    np.testing.assert_allclose(ak.jit(grad, compile="eager")(h0).numpy(), grad(h0).numpy(),
                               rtol=1e-12)

"""The clean-up passes (dce, cse, fold_constants, simplify, pipeline): exact effects on
small programs, purity (the input graph is unchanged), validate() after every pass, the
same results before and after, a property test over random programs, and user passes
written with plain networkx (the examples/ passes: tests/test_ir_pass_api.py)."""
import networkx as nx
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import adkit as ak
from adkit.autograd import Function
from adkit.ir.passes import cse, dce, fold_constants, pipeline, simplify
from adkit.ir.passes.simplify import RULES, Replace
from adkit.ops.unary import Exp, Log, Tanh

F64 = ak.float64


# ================================================================ helpers
def snapshot(g):
    """Everything a pass could change in place: listing, nodes with attributes, edges."""
    nodes = []
    for n, d in sorted(g.nx.nodes(data=True)):
        params = repr(sorted(d.get("params", {}).items()))
        value = d["value"].tobytes() if d["kind"] == "const" else None
        nodes.append((n, d["kind"], d.get("op"), params, d.get("specs"), value))
    edges = sorted((u, v, k, d["pos"], d["out"]) for u, v, k, d in
                   g.nx.edges(keys=True, data=True))
    return str(g), nodes, edges


def run_pass(p, g):
    """p(g), checking that g is untouched and the result is a valid, new graph."""
    before = snapshot(g)
    h = p(g)
    assert snapshot(g) == before, f"{p.__name__} changed its input graph"
    assert h is not g and h.nx is not g.nx
    h.validate()
    return h


def as_list(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def assert_same_results(g, h, *args):
    want, got = as_list(g(*args)), as_list(h(*args))
    assert len(want) == len(got)
    for w, r in zip(want, got):
        assert w.dtype == r.dtype and tuple(w.shape) == tuple(r.shape)
        np.testing.assert_allclose(r.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


def ops_of(g):
    return [g.nx.nodes[n]["op"].__name__ for n in g.op_nodes]


def count(g, kind):
    return len(g.nodes_of(kind))


def checked(p, f, *args):
    """Trace f, run pass p (checked), compare results; returns (traced, result)."""
    g = ak.trace(f, *args)
    h = run_pass(p, g)
    assert_same_results(g, h, *args)
    return g, h


# ================================================================ dce
def test_dce_removes_unused_branch_and_const():
    c = ak.tensor([1.0, 2.0, 3.0], dtype=F64)

    def f(x):
        (x * c).exp().tanh()  # dead: three ops and a const
        return x.sin()
    g, h = checked(dce, f, ak.randn(3, dtype=F64))
    assert len(g) - len(h) == 4
    assert ops_of(h) == ["Sin"] and count(h, "const") == 0


def test_dce_keeps_unused_inputs_and_ids():
    g, h = checked(dce, lambda x, y: x.exp() + 1.0, ak.randn(2), ak.randn(3))
    assert count(h, "input") == 2
    assert sorted(h.nx.nodes) == sorted(g.nx.nodes)  # nothing dead: same ids


def test_dce_on_a_graph_without_dead_code_is_a_copy():
    g, h = checked(dce, lambda x: (x * x).sum(), ak.randn(3))
    assert str(h) == str(g) and len(h) == len(g)


def test_dce_keeps_in_place_writes_of_inputs():
    def f(x, y):
        x.add_(1.0)  # a side effect on the caller's x: not dead
        y.exp()  # dead
        return y * 2.0
    g = ak.trace(f, ak.randn(3), ak.randn(3))
    h = run_pass(dce, g)
    assert ops_of(h) == ["AddInplace", "Mul"]
    x = ak.zeros(3)
    h(x, ak.randn(3))
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0, 1.0])


# ================================================================ cse
def test_cse_merges_duplicates_keeping_the_first():
    g, h = checked(cse, lambda x: x.exp() + x.exp(), ak.randn(3))
    assert len(g) - len(h) == 1
    (add,) = [n for n in h.op_nodes if h.nx.nodes[n]["op"].__name__ == "Add"]
    (exp,) = [n for n in h.op_nodes if h.nx.nodes[n]["op"] is Exp]
    assert exp == min(n for n in g.op_nodes if g.nx.nodes[n]["op"] is Exp)
    assert [(p, u) for p, u, _ in h.args_of(add)] == [(0, exp), (1, exp)]  # x*x-like edges


def test_cse_collapses_chains_in_one_call():
    def f(x, y):
        a = ((x * y).exp() + 1.0).tanh()
        b = ((x * y).exp() + 1.0).tanh()
        return a - b, a * b
    g, h = checked(cse, f, ak.randn(2, 3), ak.randn(2, 3))
    assert len(g) - len(h) == 4
    assert run_pass(cse, h).nx.number_of_nodes() == len(h)  # a fixpoint already


def test_cse_merges_equal_consts_not_merely_close_ones():
    def f(x):
        a = x + ak.tensor([0.0, 1.0])
        b = x + ak.tensor([0.0, 1.0])  # equal: merged, then the two adds too
        c = x + ak.tensor([-0.0, 1.0])  # other bits (-0.0): kept
        d = x + ak.tensor([0.0, 1.0], dtype=F64)  # other dtype: kept
        return a, b, c, d
    g, h = checked(cse, f, ak.randn(2))
    assert count(g, "const") - count(h, "const") == 1
    assert len(g) - len(h) == 2


def test_cse_params_must_match_by_type_and_value():
    def f(x):
        return x * 2, x * 2.0, x.sum(0), x.sum(1), x.sum(0), x.sum(dim=0, keepdim=True)
    g, h = checked(cse, f, ak.tensor([[1, 2], [3, 4]]))
    assert ops_of(g).count("Sum") - ops_of(h).count("Sum") == 1
    assert ops_of(h).count("Mul") == 2  # 2 and 2.0 promote differently: not merged


def test_cse_merges_multi_output_ops_and_redirects_each_output():
    def f(x):
        v1, i1 = x.max(1)
        v2, i2 = x.max(1)
        return v1 + v2, i2
    g, h = checked(cse, f, ak.randn(2, 3))
    assert ops_of(h) == ["Max", "Add"]


class ApplyFn(Function):
    """A user Function taking a Python callable as a param (which cse cannot compare)."""

    @staticmethod
    def forward(ctx, x, fn):
        return fn(x)


def test_cse_leaves_params_it_cannot_freeze():
    def double(t):
        return t * 2

    g, h = checked(cse, lambda x: ApplyFn.apply(x, double) + ApplyFn.apply(x, double),
                   ak.randn(3))
    assert ops_of(h) == ["ApplyFn", "ApplyFn", "Add"]


# ================================================================ fold_constants
def test_fold_constants_folds_chains_in_one_call():
    c = ak.tensor([0.5, 1.5, 2.5], dtype=F64)
    g, h = checked(fold_constants, lambda x: x * (c.exp() + 1.0).tanh(), ak.randn(3, dtype=F64))
    assert ops_of(h) == ["Mul"]
    assert ops_of(run_pass(dce, h)) == ["Mul"] and count(run_pass(dce, h), "const") == 1
    folded = [n for n in h.nodes_of("const") if n not in g.nx]
    assert len(folded) == 3 and all(n > max(g.nx.nodes) for n in folded)  # fresh ids
    np.testing.assert_allclose(h.nx.nodes[max(folded)]["value"], np.tanh(np.exp(c.numpy()) + 1))


def test_fold_constants_one_const_per_used_output():
    c = ak.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])

    def f(x):
        values, indices = c.max(1)
        return x + values, indices
    g, h = checked(fold_constants, f, ak.randn(2))
    assert ops_of(h) == ["Add"]
    assert count(h, "const") == count(g, "const") + 2


def test_fold_constants_does_not_touch_the_input_graphs_arrays():
    c = ak.tensor([1.0, 2.0])
    g = ak.trace(lambda x: x + c * 2.0, ak.randn(2))
    (const,) = g.nodes_of("const")
    h = run_pass(fold_constants, g)
    assert ops_of(h) == ["Add"]
    np.testing.assert_array_equal(g.nx.nodes[const]["value"], [1.0, 2.0])


class Picky(Function):
    """Fails on positive values (shape inference runs on zeros, so tracing works)."""

    @staticmethod
    def forward(ctx, x):
        if (x.detach().numpy() > 0).any():
            raise ValueError("positive")
        return x * 2


def test_fold_constants_skips_ops_that_raise():
    g = ak.trace(lambda x: x + Picky.apply(ak.ones(3)), ak.randn(3))
    h = run_pass(fold_constants, g)
    assert ops_of(h) == ["Picky", "Add"]
    x = ak.randn(3)
    with pytest.raises(ValueError):
        h(x)


def test_fold_constants_leaves_ops_on_inputs():
    g, h = checked(fold_constants, lambda x: (x.exp() * 2.0).sum(), ak.randn(3))
    assert str(h) == str(g)


# ================================================================ simplify
SIMPLIFIED = [  # (name, function, example args, ops left after simplify then dce)
    ("x*1", lambda x: x * 1.0, [ak.randn(3)], []),
    ("1*x", lambda x: 1 * x, [ak.randn(3)], []),
    ("x+0", lambda x: x + 0.0, [ak.randn(3)], []),
    ("0+x", lambda x: 0 + x, [ak.randn(3)], []),
    ("x-0", lambda x: x - 0, [ak.randn(3)], []),
    ("x/1", lambda x: x / 1.0, [ak.randn(3)], []),
    ("x*ones", lambda x: x * ak.ones(3), [ak.randn(2, 3)], []),
    ("ones*x", lambda x: ak.ones(1) * x, [ak.randn(2, 3)], []),
    ("x+zeros", lambda x: x + ak.zeros(2, 3), [ak.randn(2, 3)], []),
    ("x/ones", lambda x: x / ak.ones(3), [ak.randn(3)], []),
    ("int*1", lambda x: x * 1, [ak.tensor([1, 2])], []),
    ("neg neg", lambda x: -(-x), [ak.randn(3)], []),
    ("neg neg neg", lambda x: -(-(-x)), [ak.randn(3)], ["Neg"]),
    ("transpose twice", lambda x: x.transpose(0, 2).transpose(2, 0), [ak.randn(2, 3, 4)], []),
    ("transpose -1", lambda x: x.transpose(0, -1).transpose(2, 0), [ak.randn(2, 3, 4)], []),
    ("permute identity", lambda x: x.permute(1, 2, 0).permute(2, 0, 1), [ak.randn(2, 3, 4)],
     []),
    ("permute composed", lambda x: x.permute(1, 2, 0).permute(1, 0, 2), [ak.randn(2, 3, 4)],
     ["Permute"]),
    ("reshape twice", lambda x: x.reshape(6, 4).reshape(4, -1), [ak.randn(2, 3, 4)],
     ["Reshape"]),
    ("reshape back", lambda x: x.reshape(6, 4).reshape(24).reshape(2, 3, 4),
     [ak.randn(2, 3, 4)], []),
    ("reshape own", lambda x: x.reshape(2, -1), [ak.randn(2, 3)], []),
    ("expand twice", lambda x: x.expand(2, 3).expand(4, 2, 3), [ak.randn(3)], ["Expand"]),
    ("expand own", lambda x: x.expand(2, 3), [ak.randn(2, 3)], []),
    ("broadcast own", lambda x: ak.broadcast_to(x, (2, 3)), [ak.randn(2, 3)], []),
    ("to own dtype", lambda x: Tanh.apply(x).to(ak.float64), [ak.randn(3, dtype=F64)],
     ["Tanh"]),
    ("mixed", lambda x: ((x * 1.0 + 0.0).exp() - 0) / 1, [ak.randn(3)], ["Exp"]),
]

NOT_SIMPLIFIED = [  # the identity would change the result's dtype or shape, or is no identity
    ("int*1.0 is float", lambda x: x * 1.0, [ak.tensor([1, 2])]),
    ("int/1 is float", lambda x: x / 1, [ak.tensor([1, 2])]),
    ("bool+0 is int", lambda x: x + 0, [ak.tensor([True, False])]),
    ("x+zeros broadcasts", lambda x: x + ak.zeros(2, 3), [ak.randn(3)]),
    ("f32*ones f64 is f64", lambda x: x * ak.ones(3, dtype=F64), [ak.randn(3)]),
    ("x*2", lambda x: x * 2.0, [ak.randn(3)]),
    ("x*ones-ish", lambda x: x * ak.tensor([1.0, 2.0]), [ak.randn(2)]),
    ("0-x", lambda x: 0.0 - x, [ak.randn(3)]),
    ("1/x", lambda x: 1.0 / x, [ak.randn(3)]),
    ("other transposes", lambda x: x.transpose(0, 1).transpose(1, 2), [ak.randn(2, 3, 4)]),
    ("to another dtype", lambda x: x.to(F64), [ak.randn(3)]),
]


@pytest.mark.parametrize("name,f,args,left", SIMPLIFIED, ids=[c[0] for c in SIMPLIFIED])
def test_simplify_rewrites(name, f, args, left):
    g, h = checked(simplify, f, *args)
    assert ops_of(run_pass(dce, h)) == left
    assert len(h) <= len(g)


@pytest.mark.parametrize("name,f,args", NOT_SIMPLIFIED, ids=[c[0] for c in NOT_SIMPLIFIED])
def test_simplify_keeps_what_is_no_identity(name, f, args):
    g, h = checked(simplify, f, *args)
    assert str(h) == str(g)


def test_simplify_exact_node_counts_and_ids():
    def f(x):
        return -(-(x * 1.0)) + 0.0
    g, h = checked(simplify, f, ak.randn(3))
    assert len(g) - len(h) == 3 and ops_of(h) == ["Neg"]  # the inner neg is left for dce
    assert ops_of(run_pass(dce, h)) == []
    assert set(h.nx.nodes) <= set(g.nx.nodes)  # survivors keep their ids


def test_simplify_edits_keep_the_node_id():
    g, h = checked(simplify, lambda x: x.reshape(6).reshape(3, 2), ak.randn(2, 3))
    outer = g.op_nodes[-1]
    assert h.nx.nodes[outer]["params"]["shape"] == (3, 2)
    assert h.args_of(outer) == [(0, g.inputs[0], 0)]


def exp_of_log(graph, n):
    """A user rule: exp(log(x)) -> x (simplify checks that the spec is kept)."""
    (_, inner, _), = graph.args_of(n)
    if graph.nx.nodes[inner].get("op") is not Log:
        return None
    (_, x, out), = graph.args_of(inner)
    return Replace((x, out))


def test_simplify_takes_a_user_rule_table():
    x = ak.rand(3, dtype=F64) + 0.5
    g = ak.trace(lambda x: x.log().exp() * 1.0, x)
    assert ops_of(run_pass(dce, run_pass(simplify, g))) == ["Log", "Exp"]
    table = RULES + ((Exp, exp_of_log),)
    h = run_pass(lambda graph: simplify(graph, rules=table), g)
    assert ops_of(run_pass(dce, h)) == []
    assert_same_results(g, h, x)


# ================================================================ in-place ops
def test_passes_leave_graphs_with_in_place_ops_alone():
    def f(x):
        y = x * 1.0
        y.add_(1.0)  # merging or dropping y's copy would write into x
        return x.exp() + x.exp(), y
    g = ak.trace(f, ak.randn(3))
    for p in (cse, simplify, fold_constants):
        assert str(run_pass(p, g)) == str(g)


# ================================================================ pipeline and user passes
def test_pipeline_applies_in_order():
    p = pipeline([simplify, cse, fold_constants, dce])
    assert p.__name__ == "pipeline(simplify, cse, fold_constants, dce)"
    c = ak.tensor([1.0, 2.0, 3.0], dtype=F64)

    def f(x):
        return (x * 1.0).exp() + (x + 0.0).exp() * c.exp()
    g, h = checked(p, f, ak.randn(3, dtype=F64))
    assert ops_of(h) == ["Exp", "Mul", "Add"] and count(h, "const") == 1


class UserExp(Function):
    """A user Function standing in for exp: one opaque node in the graph."""

    @staticmethod
    def forward(ctx, x):
        return ak.tensor(np.exp(x.detach().numpy()))


def test_user_pass_with_plain_networkx_through_pipeline():
    depths = []

    def exp_to_user_function(graph):
        g = graph.copy()
        for n in g.op_nodes:
            if g.nx.nodes[n]["op"] is Exp:
                g.nx.nodes[n]["op"] = UserExp
        return g

    def record_depth(graph):
        depths.append(nx.dag_longest_path_length(graph.nx))
        return graph.copy()

    p = pipeline([record_depth, exp_to_user_function, cse, dce, record_depth])
    g, h = checked(p, lambda x: x.exp() * x.exp() + x.tanh().exp(), ak.randn(3, dtype=F64))
    assert ops_of(h).count("UserExp") == 2 and "Exp" not in ops_of(h)
    assert depths == [4, 4]


# ================================================================ random programs
KINDS = ("add", "mul", "sub", "exp_small", "tanh", "neg", "sum", "reshape", "transpose",
         "times_one", "plus_zero", "times_ones", "double_neg", "double_transpose", "const",
         "dup", "unused")


def _unary(kind, a, extra):
    if kind == "exp_small":
        return a.tanh().exp()
    if kind == "sum" and a.ndim:
        return a.sum(extra % a.ndim)
    if kind == "reshape":
        return a.reshape(-1) if a.ndim != 1 else a.reshape(1, -1)
    if kind in ("transpose", "double_transpose") and a.ndim:
        t = a.transpose(0, -1)
        return t.transpose(-1, 0) if kind == "double_transpose" else t
    if kind == "times_one":
        return a * 1.0
    if kind == "plus_zero":
        return 0.0 + a
    if kind == "times_ones":
        return a * ak.ones(tuple(a.shape), dtype=F64)
    if kind == "double_neg":
        return -(-a)
    if kind == "const":
        return a + ak.tensor(np.full(tuple(a.shape), 0.5))
    return a.neg() if kind == "neg" else a.tanh()


def _step(kind, a, b, extra):
    binary = {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b}
    return binary[kind]() if kind in binary else _unary(kind, a, extra)


def make_program(steps, info):
    """A straight-line program over the inputs; `info` records whether a duplicated
    subexpression or an unused branch was really made."""
    def program(*xs):
        values, done = list(xs), []
        for kind, i, j, extra in steps:
            a = values[i % len(values)]
            same = [v for v in values if tuple(v.shape) == tuple(a.shape)]
            b = same[j % len(same)]
            if kind == "dup" and done:
                info["dup"] = True
                kind, a, b, extra = done[i % len(done)]
            elif kind == "dup":
                kind = "tanh"
            if kind == "unused":
                info["unused"] = True
                a.tanh().exp()
                continue
            values.append(_step(kind, a, b, extra))
            done.append((kind, a, b, extra))
        return values[-1], values[len(xs) - 1]
    return program


programs = st.tuples(
    st.lists(st.sampled_from([(2, 3), (3,), (2, 3)]), min_size=1, max_size=3),
    st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 30), st.integers(0, 30),
                       st.integers(0, 3)), min_size=3, max_size=15),
    st.lists(st.sampled_from([dce, cse, fold_constants, simplify]), min_size=1, max_size=5),
    st.integers(0, 2 ** 16))


@given(programs)
def test_passes_preserve_random_programs(case):
    shapes, steps, sequence, seed = case
    rng = np.random.default_rng(seed)
    xs = [ak.tensor(rng.standard_normal(s)) for s in shapes]
    info = {}
    program = make_program(steps, info)
    g = ak.trace(program, *xs)
    want = [np.asarray(t.numpy()) for t in as_list(program(*xs))]
    for w, r in zip(want, as_list(g(*xs)), strict=True):
        np.testing.assert_allclose(r.numpy(), w, rtol=1e-12, atol=1e-12)
    if info.get("dup"):
        event("a duplicated subexpression")
        assert len(run_pass(cse, g)) < len(g)
    if info.get("unused"):
        event("an unused branch")
        assert len(run_pass(dce, g)) < len(g)
    h = g
    for p in sequence:
        new = run_pass(p, h)
        if p in (dce, cse, simplify):
            assert len(new) <= len(h)
        h = new
        for w, r in zip(want, as_list(h(*xs)), strict=True):
            np.testing.assert_allclose(r.numpy(), w, rtol=1e-12, atol=1e-12)

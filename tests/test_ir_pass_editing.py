"""Passes' in-place forms (ak.ir.passes.editing), Graph.copy and Graph's builders: what
jit's pipeline runs without a copy per pass must give what the pure passes give, no
graph that someone else holds (the traced graph, a pure pass's result, a loop's body)
may change, and the dicts the builders and copy fill directly are networkx's."""
import dataclasses

import networkx as nx
import numpy as np
import pytest

import adkit as ak
from adkit.codegen.compiled import OPTIMIZE
from adkit.codegen.pipeline import run_pipeline
from adkit.ir import Graph, TensorSpec, passes
from adkit.ir.passes.editing import apply_passes

F64 = ak.float64


def _digest(graph):
    """Everything a graph holds, as a comparable value (insertion orders included, but
    for the order of each node's predecessors in networkx's dicts, which a copy takes
    from the successors' and an edit appends to, and nothing reads)."""
    nodes = tuple((n, _value(d)) for n, d in graph.nx._node.items())
    edges = tuple((u, v, k, _value(d)) for u, nbrs in graph.nx._succ.items()
                  for v, keyed in nbrs.items() for k, d in keyed.items())
    preds = tuple((v, frozenset(us)) for v, us in graph.nx._pred.items())
    return (nodes, edges, preds, repr(graph.in_tree), repr(graph.out_tree),
            _value(graph.static_args), _value(graph.static_outputs))


def _value(v):
    if isinstance(v, Graph):
        return ("graph", _digest(v))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, dict):
        return ("dict",) + tuple((k, _value(x)) for k, x in v.items())
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_value(x) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # loop plans
        return (type(v).__name__,) + tuple((f.name, _value(getattr(v, f.name)))
                                           for f in dataclasses.fields(v))
    return repr(v)


def _mlp_grad():
    w1, w2 = ak.randn(4, 8, dtype=F64), ak.randn(8, 2, dtype=F64)

    def loss(x):
        h = (x @ w1).tanh()
        return ((h @ w2).exp().sum(1).log() * 1.0 + 0.0).sum()
    return ak.trace(ak.func.grad(loss), TensorSpec((5, 4), F64))


def _with_loop():
    def f(h0, w):
        def step(h, x):
            dead = (h * 3.0).exp()  # noqa: F841  (dead code in the body)
            return (h @ w).tanh() + x * 1.0, h.sum()
        h, ys = ak.scan(step, h0, ak.ones((3, 2), dtype=F64))
        return h.sum() + ys.sum()
    return ak.trace(ak.func.grad(f, argnums=(0, 1)), TensorSpec((2,), F64),
                    TensorSpec((2, 2), F64))


def _decomposable():
    return ak.trace(lambda x: x.logsumexp(1) * x.softmax(1).sum(), TensorSpec((3, 4), F64))


GRAPHS = [_mlp_grad, _with_loop, _decomposable]


def test_copy_is_networkx_copy_with_own_params():
    g = _mlp_grad()
    g = passes.simplify(passes.decompose(g))  # pass-made nodes: ids out of order
    g.nx.nodes[g.op_nodes()[0]]["note"] = ["annotation"]
    c, reference = g.copy(), g.nx.copy()
    assert dict(c.nx.nodes(data=True)) == dict(reference.nodes(data=True))
    for mine, theirs in ((c.nx._succ, reference._succ), (c.nx._pred, reference._pred)):
        assert list(mine) == list(theirs)
        for n in mine:  # the same neighbours and keys in the same orders
            assert [(v, list(keyed)) for v, keyed in mine[n].items()] == \
                [(v, list(keyed)) for v, keyed in theirs[n].items()]
    for u, v, k, d in c.nx.edges(keys=True, data=True):
        assert c.nx._succ[u][v] is c.nx._pred[v][u]  # one key dict, as networkx keeps
        assert d == g.nx._succ[u][v][k] and d is not g.nx._succ[u][v][k]
    for n, data in c.nx.nodes(data=True):
        assert data is not g.nx.nodes[n]
        if "params" in data:
            assert data["params"] == g.nx.nodes[n]["params"]
            assert data["params"] is not g.nx.nodes[n]["params"]
    before = _digest(g)
    c.nx.remove_node(c.op_nodes()[0])
    c.nx.nodes[c.op_nodes()[0]]["params"]["added"] = 1
    assert _digest(g) == before


@pytest.mark.parametrize("make", GRAPHS)
def test_in_place_forms_give_what_the_pure_passes_give(make):
    g = make()
    seen = 0
    for p in OPTIMIZE.passes:
        before = _digest(g)
        pure = p(g)
        assert _digest(g) == before
        if getattr(p, "in_place", None) is not None:
            seen += 1
            assert _digest(p.in_place(g.copy())) == _digest(pure), p.__name__
        g = pure
    assert seen >= 6  # inline_calls, simplify, decompose, fold_constants, cse, dce, fuse


@pytest.mark.parametrize("make", GRAPHS)
def test_pipeline_edits_a_copy_and_gives_the_pure_passes_result(make, monkeypatch):
    g = make()
    want = g
    for p in OPTIMIZE.passes:
        want = p(want)
    before = _digest(g)
    assert _digest(run_pipeline(g)) == _digest(want)
    assert _digest(g) == before


def test_apply_passes_copies_once_for_a_run_of_in_place_passes(monkeypatch):
    g = _mlp_grad()
    copies = []
    original = Graph.copy
    monkeypatch.setattr(Graph, "copy", lambda self: copies.append(self) or original(self))
    before = _digest(g)
    out = apply_passes([passes.simplify, passes.cse, passes.dce, passes.fuse], g)
    assert len(copies) == 1 and copies[0] is g
    assert _digest(g) == before
    monkeypatch.undo()
    assert _digest(out) == _digest(passes.fuse(passes.dce(passes.cse(passes.simplify(g)))))


def test_apply_passes_never_edits_what_a_pure_pass_returned():
    g = ak.trace(lambda x: (x.exp(), x.sin())[0], TensorSpec((3,), F64))  # a dead sin
    kept = g.copy()
    before = _digest(kept)
    out = apply_passes([lambda graph: kept, passes.dce], g)  # a pass handing out its own
    assert _digest(kept) == before
    assert len(out) == len(kept) - 1


def test_recursive_in_place_leaves_bodies_to_other_graphs():
    g = _with_loop()
    bodies = {n: {k: _digest(b) for k, b in
                  data["params"]["plan"].bodies().items()}
              for n, data in g.nx.nodes(data=True) if "plan" in data.get("params", {})}
    assert bodies
    before = _digest(g)
    mine = g.copy()
    out = passes.dce.in_place(mine)
    assert out is mine and _digest(out) == _digest(passes.dce(g))
    assert _digest(g) == before
    for n, digests in bodies.items():  # g's loops still hold their bodies, unchanged
        plan = g.nx.nodes[n]["params"]["plan"]
        assert {k: _digest(b) for k, b in plan.bodies().items()} == digests


def test_pipeline_of_user_passes_runs_pure_passes():
    g = _decomposable()
    results = []

    def keep(graph):
        results.append(graph)
        return graph.copy()
    jitted = ak.jit(lambda x: x.logsumexp(1) * x.softmax(1).sum(),
                    passes=[keep, *passes.DEFAULT_PIPELINE, keep])
    x = ak.randn(3, 4, dtype=F64)
    np.testing.assert_allclose(jitted(x).numpy(),
                               (x.logsumexp(1) * x.softmax(1).sum()).numpy())
    assert str(results[0]) == str(g)  # the traced graph, as the user's pass saw it


def _orders(g):
    return ([(n, d) for n, d in g._node.items()],
            [(u, [(v, list(keyed.items())) for v, keyed in nbrs.items()])
             for u, nbrs in g._succ.items()],
            [(v, list(nbrs)) for v, nbrs in g._pred.items()])


def test_builders_make_what_networkx_calls_make():
    """Graph's builders fill networkx's dicts directly: the same dicts, orders and
    shared key dicts as add_node and add_edge (x * x: two edges from one producer)."""
    g = ak.trace(lambda x, w: ((x * x) @ w + 1.0).sum(), TensorSpec((3, 4), F64),
                 TensorSpec((4, 2), F64))
    replay = nx.MultiDiGraph()
    for n, data in g.nx._node.items():  # each builder: the node, then its arguments
        replay.add_node(n, **data)
        for pos, u, out in g.args_of(n):
            replay.add_edge(u, n, key=pos, pos=pos, out=out)
    assert _orders(g.nx) == _orders(replay)
    for u, v, _ in g.nx.edges(keys=True):
        assert g.nx._succ[u][v] is g.nx._pred[v][u]
    square = next(n for n in g.op_nodes() if len(g.args_of(n)) == 2 and
                  g.args_of(n)[0][1] == g.args_of(n)[1][1])
    assert list(g.nx._pred[square][g.args_of(square)[0][1]]) == [0, 1]


def test_builders_clear_networkx_caches_and_keep_its_behaviour_for_strays():
    g = ak.trace(lambda x: x.exp(), TensorSpec((3,), F64))
    cache = getattr(g.nx, "__networkx_cache__", None)
    if cache is not None:
        cache["something"] = 1
        g.add_op(ak.ir.ops.Sin, g.op_nodes()[0])
        assert "something" not in cache
    stray = g.add_op_node(ak.ir.ops.Sin, {0: (99, 0)}, {}, [TensorSpec((3,), F64)])
    assert 99 in g.nx and g.nx.nodes[99] == {}  # as networkx's add_edge makes it
    with pytest.raises(ak.ir.GraphError):
        g.validate()
    assert stray in g.nx


def _fresh_order(g):
    """topo_order computed anew (on a copy of the adjacency that has no cache)."""
    fresh = Graph()
    fresh.nx = nx.MultiDiGraph(g.nx)
    return fresh.topo_order()


def test_topo_order_kept_until_a_node_or_edge_changes():
    g = passes.simplify(passes.decompose(_mlp_grad()))  # out of id order: Kahn's path
    first = g.topo_order()
    first.reverse()  # the caller's own list
    assert g.topo_order() == _fresh_order(g) != first
    assert g.copy().topo_order() == g.topo_order()
    n = g.op_nodes()[-1]
    (_, u, out), = g.args_of(n)[:1]
    edits = [lambda: g.add_op(ak.ir.ops.Neg, (u, out)),  # the builders
             lambda: g.nx.add_edge(g.op_nodes()[-1], n, key=7, pos=7, out=0),
             lambda: g.nx.remove_edge(g.op_nodes()[-2], n, key=7),
             lambda: g.nx.remove_node(g.op_nodes()[-1]),
             lambda: g.nx.add_edges_from([(u, n, 9, {"pos": 9, "out": out})]),
             lambda: g.nx.remove_edges_from([(u, n, 9)])]
    for edit in edits:
        g.topo_order()
        edit()
        assert g.topo_order() == _fresh_order(g)


def test_new_ids_stay_above_every_node_whoever_adds_them():
    g = _mlp_grad()
    top = max(g.nx.nodes)
    assert g.add_op(ak.ir.ops.Neg, g.inputs[0]) == top + 1
    assert g.copy().add_op(ak.ir.ops.Neg, g.inputs[0]) == top + 2
    g.nx.add_node(top + 50)  # a pass's own node, through networkx
    assert g.add_op(ak.ir.ops.Neg, g.inputs[0]) == top + 51
    g.nx.remove_nodes_from([top + 50, top + 51])
    assert g.add_op(ak.ir.ops.Neg, g.inputs[0]) == top + 2


def test_a_user_pass_with_an_in_place_attribute_of_its_own_runs_as_a_pass():
    class Counting:
        in_place = True  # not an in-place form: a flag of the user's

        def __call__(self, graph):
            return graph.copy()
    g = _decomposable()
    out = passes.pipeline([Counting(), passes.dce])(g)
    assert _digest(out) == _digest(passes.dce(g))
    assert _digest(passes.recursive(Counting())(g)) == _digest(g)

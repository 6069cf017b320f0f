"""The Graph schema (node kinds and attributes, edges keyed by argument position), copies,
building graphs by hand (builders and raw networkx edits) and `validate()`."""
import networkx as nx
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function
from adkit.ir import Graph, GraphError, TensorSpec
from adkit.ops.binary import Add, Mul
from adkit.ops.reduction import Sum
from adkit.ops.unary import Exp

F32 = ak.float32


def spec(*shape, dtype=F32):
    return TensorSpec(tuple(shape), dtype)


def traced():
    """a * b summed over dim 1, plus a closed-over constant."""
    c = ak.tensor([1.0, 2.0])
    return ak.trace(lambda a, b: (a * b).sum(dim=1) + c, ak.ones(2, 3), ak.ones(3))


def hand_built():
    """out = (a * b) + c with a, b inputs of shape [3] and c a constant."""
    g = Graph()
    a = g.add_input(spec(3))
    b = g.add_input(spec(3))
    c = g.add_const(np.array([1.0, 2.0, 3.0], np.float32))
    m = g.add_op(Mul, {0: (a, 0), 1: (b, 0)}, {}, [spec(3)])
    s = g.add_op(Add, {0: (m, 0), 1: (c, 0)}, {}, [spec(3)])
    g.add_output((s, 0))
    return g, dict(a=a, b=b, c=c, m=m, s=s)


def validate_error(g):
    with pytest.raises(GraphError) as info:
        g.validate()
    return str(info.value)


# ================================================================ schema
def test_ir_graph_nx_is_multidigraph():
    """Graph.nx is a networkx MultiDiGraph; every node has one of the four kinds."""
    g = traced()
    assert isinstance(g.nx, nx.MultiDiGraph)
    kinds = sorted(k for _, k in g.nx.nodes(data="kind"))
    assert kinds == ["const", "input", "input", "op", "op", "op", "output"]


def test_ir_graph_node_attributes():
    """input: index/shape/dtype; const: value/shape/dtype; op: op/params/specs/shape/
    dtype/source; output: index."""
    g = traced()
    a, b = g.inputs
    assert g.nx.nodes[a] == {"kind": "input", "index": 0, "shape": (2, 3), "dtype": F32}
    assert g.nx.nodes[b] == {"kind": "input", "index": 1, "shape": (3,), "dtype": F32}
    c, = g.nodes_of("const")
    const = g.nx.nodes[c]
    assert isinstance(const["value"], np.ndarray)
    np.testing.assert_array_equal(const["value"], [1.0, 2.0])
    assert const["shape"] == (2,) and const["dtype"] == F32
    mul, total, add = g.op_nodes
    data = g.nx.nodes[total]
    assert data["op"] is Sum and issubclass(data["op"], Function)
    assert data["params"] == {"dim": 1, "keepdim": False, "dtype": None}
    assert data["specs"] == (spec(2),)
    assert data["shape"] == (2,) and data["dtype"] == F32
    assert data["source"].startswith("test_ir_graph.py:")
    assert g.nx.nodes[mul]["op"] is Mul and g.nx.nodes[add]["op"] is Add
    out, = g.outputs
    assert g.nx.nodes[out] == {"kind": "output", "index": 0}


def test_ir_graph_edges_carry_pos_and_out():
    """Every edge has key == pos (argument position at the consumer) and `out`."""
    g = traced()
    a, b = g.inputs
    c, = g.nodes_of("const")
    mul, total, add = g.op_nodes
    out, = g.outputs
    edges = sorted((u, v, k, d["pos"], d["out"]) for u, v, k, d in
                   g.nx.edges(keys=True, data=True))
    assert edges == sorted([(a, mul, 0, 0, 0), (b, mul, 1, 1, 0), (mul, total, 0, 0, 0),
                            (total, add, 0, 0, 0), (c, add, 1, 1, 0), (add, out, 0, 0, 0)])
    assert g.args_of(add) == [(0, total, 0), (1, c, 0)]


def test_ir_graph_multi_output_edges():
    """A multi-output op: `specs` has every output, shape/dtype are output 0's, and each
    consumer edge says which output it reads."""
    g = ak.trace(lambda x: ak.max(x, 1), ak.ones(3, 4))
    n, = g.op_nodes
    data = g.nx.nodes[n]
    assert data["specs"] == (spec(3), spec(3, dtype=ak.int64))
    assert data["shape"] == (3,) and data["dtype"] == F32
    reads = [(g.nx.nodes[v]["index"], d["out"]) for _, v, d in g.nx.out_edges(n, data=True)]
    assert sorted(reads) == [(0, 0), (1, 1)]
    assert g.specs_of(g.outputs[1]) == (spec(3, dtype=ak.int64),)


def test_ir_graph_square_is_two_parallel_edges():
    """x * x: two parallel edges from x to mul, differing only by key/pos."""
    g = ak.trace(lambda x: x * x, ak.ones(2))
    x, = g.inputs
    mul, = g.op_nodes
    assert g.nx.number_of_edges(x, mul) == 2
    edges = sorted((k, d["pos"], d["out"]) for _, _, k, d in
                   g.nx.edges(x, keys=True, data=True))
    assert edges == [(0, 0, 0), (1, 1, 0)]
    assert g.args_of(mul) == [(0, x, 0), (1, x, 0)]
    np.testing.assert_array_equal(g(ak.tensor([3.0, 4.0])).numpy(), [9.0, 16.0])


def test_ir_graph_node_ids_and_topo_order():
    """Node ids are increasing ints in creation order; topo_order is by id."""
    g = traced()
    assert sorted(g.nx.nodes) == list(range(len(g)))
    assert g.topo_order() == sorted(g.nx.nodes)


def test_ir_graph_repr_and_len():
    """repr counts inputs, ops and outputs; len counts nodes."""
    g = traced()
    assert repr(g) == "<adkit.ir.Graph: 2 inputs, 3 ops, 1 outputs>"
    assert len(g) == 7


# ================================================================ copy
def test_ir_graph_copy_is_independent():
    """Edits to a copy (nodes, edges, attributes, params, statics) leave the original."""
    g = ak.trace(lambda x, k: (x * k).sum(), ak.ones(3), 2.0)
    before, listing = sorted(g.nx.edges(keys=True, data=True)), str(g)
    h = g.copy()
    mul, total = h.op_nodes
    h.nx.nodes[mul]["params"]["y"] = 5.0
    h.nx.nodes[total]["shape"] = (9,)
    h.nx.remove_node(total)
    h.nx.add_edge(mul, 99, key=0, pos=0, out=0)
    h.static_args[1] = 7.0
    assert str(g) == listing and sorted(g.nx.edges(keys=True, data=True)) == before
    assert g.nx.nodes[g.op_nodes[0]]["params"] == {"y": 2.0}
    assert g.static_args == {1: 2.0}
    assert g.in_tree == h.in_tree and g.out_tree == h.out_tree
    assert g.validate()
    np.testing.assert_array_equal(g(ak.tensor([1.0, 2.0, 3.0]), 2.0).numpy(), 12.0)


# ================================================================ building by hand
def test_ir_graph_builders():
    """add_input/add_const/add_op/add_output build a valid graph; it evaluates with
    arrays or tensors in and a tensor out."""
    g, ids = hand_built()
    assert g.validate() is True
    assert g.inputs == [ids["a"], ids["b"]] and g.nodes_of("const") == [ids["c"]]
    out = g(np.array([1.0, 2.0, 3.0], np.float32), ak.tensor([2.0, 2.0, 2.0]))
    assert isinstance(out, ak.Tensor)
    np.testing.assert_array_equal(out.numpy(), [3.0, 6.0, 9.0])


def test_ir_graph_builders_explicit_indices():
    """add_input/add_output take an explicit index; inputs/outputs are sorted by it."""
    g = Graph()
    second = g.add_input(spec(2), index=1)
    first = g.add_input(spec(2), index=0)
    d = g.add_op(Mul, {0: (first, 0), 1: (second, 0)}, {}, [spec(2)])
    g.add_output((second, 0), index=1)
    g.add_output((d, 0), index=0)
    assert g.inputs == [first, second]
    assert g.validate()
    r0, r1 = g(ak.tensor([2.0, 3.0]), ak.tensor([4.0, 5.0]))
    np.testing.assert_array_equal(r0.numpy(), [8.0, 15.0])
    np.testing.assert_array_equal(r1.numpy(), [4.0, 5.0])


def test_ir_graph_raw_networkx_build():
    """A graph built with networkx calls alone validates and evaluates."""
    g = Graph()
    g.nx.add_node(0, kind="input", index=0, shape=(2, 2), dtype=F32)
    g.nx.add_node(1, kind="op", op=Exp, params={}, specs=(spec(2, 2),), shape=(2, 2),
                  dtype=F32, source=None)
    g.nx.add_node(2, kind="op", op=Sum, params={"dim": 0, "keepdim": True, "dtype": None},
                  specs=(spec(1, 2),), shape=(1, 2), dtype=F32, source=None)
    g.nx.add_node(3, kind="output", index=0)
    g.nx.add_edge(0, 1, key=0, pos=0, out=0)
    g.nx.add_edge(1, 2, key=0, pos=0, out=0)
    g.nx.add_edge(2, 3, key=0, pos=0, out=0)
    assert g.validate() is True
    out = g(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(out.numpy(), [[2.0, 2.0]])
    assert "sum[dim=0 dtype=None keepdim=True] b" in str(g)


def test_ir_graph_raw_networkx_edit_of_traced_graph():
    """Editing a traced graph through .nx: swap mul for add, then insert an exp."""
    g = ak.trace(lambda x, y: x * y, ak.ones(2), ak.ones(2))
    x, y = g.inputs
    mul, = g.op_nodes
    out, = g.outputs
    g.nx.nodes[mul]["op"] = Add
    e = g._new_id()
    g.nx.add_node(e, kind="op", op=Exp, params={}, specs=(spec(2),), shape=(2,), dtype=F32,
                  source=None)
    g.nx.remove_edge(mul, out, key=0)
    g.nx.add_edge(mul, e, key=0, pos=0, out=0)
    g.nx.add_edge(e, out, key=0, pos=0, out=0)
    assert g.validate()
    a, b = ak.tensor([0.0, 1.0]), ak.tensor([1.0, 1.0])
    np.testing.assert_allclose(g(a, b).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


# ================================================================ validate
def test_ir_graph_validate_cycle():
    """A cycle is reported with the nodes on it."""
    g, ids = hand_built()
    g.nx.add_edge(ids["s"], ids["m"], key=2, pos=2, out=0)
    message = validate_error(g)
    assert "cycle" in message and str(ids["s"]) in message and str(ids["m"]) in message


def test_ir_graph_validate_edge_from_missing_node():
    """An edge from a node that was never added (networkx adds it without a kind)."""
    g, ids = hand_built()
    g.nx.remove_edge(ids["b"], ids["m"], key=1)
    g.nx.add_edge(99, ids["m"], key=1, pos=1, out=0)
    message = validate_error(g)
    assert "99" in message and "kind" in message


def test_ir_graph_validate_edge_to_missing_node():
    """An edge into a node that was never added is reported too."""
    g, ids = hand_built()
    g.nx.add_edge(ids["s"], 77, key=0, pos=0, out=0)
    assert "77" in validate_error(g)


def test_ir_graph_validate_missing_argument():
    """An op with no edge (and no param) at one of its positions."""
    g, ids = hand_built()
    g.nx.remove_edge(ids["b"], ids["m"], key=1)
    message = validate_error(g)
    assert f"node {ids['m']}" in message and "Mul" in message
    assert "argument 1" in message and "missing" in message


def test_ir_graph_validate_duplicate_positions():
    """Two edges into one node at the same position."""
    g, ids = hand_built()
    g.nx.add_edge(ids["b"], ids["m"], key=5, pos=1, out=0)
    message = validate_error(g)
    assert f"node {ids['m']}" in message and "same position" in message


def test_ir_graph_validate_bad_output_number():
    """An edge reading output 1 of a single-output node."""
    g, ids = hand_built()
    out, = g.outputs
    g.nx.remove_edge(ids["s"], out, key=0)
    g.nx.add_edge(ids["s"], out, key=0, pos=0, out=1)
    message = validate_error(g)
    assert f"node {out}" in message and f"output 1 of node {ids['s']}" in message


def test_ir_graph_validate_non_dense_input_indices():
    """Input indices must be 0..n-1."""
    g, ids = hand_built()
    g.nx.nodes[ids["b"]]["index"] = 5
    message = validate_error(g)
    assert "input" in message and "5" in message


def test_ir_graph_validate_non_dense_indices_names_node():
    """The dense-index error names the offending node."""
    g, ids = hand_built()
    g.nx.nodes[ids["b"]]["index"] = 5
    assert f"node {ids['b']}" in validate_error(g)


def test_ir_graph_validate_duplicate_output_indices():
    """Two outputs with index 0."""
    g, ids = hand_built()
    g.add_output((ids["m"], 0), index=0)
    assert "output" in validate_error(g)


def test_ir_graph_validate_shape_mismatch():
    """After replacing an input's shape, the consumer's inputs no longer fit."""
    g, ids = hand_built()
    g.nx.nodes[ids["a"]]["shape"] = (4,)
    message = validate_error(g)
    assert f"node {ids['m']}" in message and "Mul" in message
    assert "(4,)" in message and "(3,)" in message


def test_ir_graph_validate_recorded_spec_mismatch():
    """A dtype change that still fits the op: recorded specs disagree with the rule."""
    g, ids = hand_built()
    g.nx.nodes[ids["a"]]["dtype"] = ak.float64
    message = validate_error(g)
    assert f"node {ids['m']}" in message and "recorded specs" in message
    assert "float64" in message


def test_ir_graph_validate_broadcastable_input_shape_is_fine():
    """A replaced input shape that still broadcasts to the recorded specs is valid."""
    g, ids = hand_built()
    g.nx.nodes[ids["a"]]["shape"] = (1,)
    assert g.validate() is True


def test_ir_graph_validate_input_with_incoming_edge():
    """Inputs and constants take no arguments."""
    g, ids = hand_built()
    g.nx.add_edge(ids["c"], ids["a"], key=0, pos=0, out=0)
    assert f"input node {ids['a']}" in validate_error(g)


def test_ir_graph_validate_output_without_producer():
    """An output node needs exactly one producer."""
    g, _ = hand_built()
    n = g._new_id()
    g.nx.add_node(n, kind="output", index=1)
    assert f"output node {n}" in validate_error(g)


def test_ir_graph_validate_unknown_kind():
    """A node with a kind outside input/const/op/output."""
    g, _ = hand_built()
    g.nx.add_node(40, kind="mystery")
    message = validate_error(g)
    assert "40" in message and "mystery" in message


@pytest.mark.parametrize("what", [("node", "m", "op"), ("node", "m", "specs"),
                                  ("node", "a", "shape"), ("node", "a", "index"),
                                  ("edge", "m", "pos"), ("edge", "m", "out")],
                         ids=["op", "specs", "shape", "index", "edge-pos", "edge-out"])
def test_ir_graph_validate_missing_attribute(what):
    """A node or edge missing a schema attribute (easy with raw networkx calls)."""
    g, ids = hand_built()
    kind, name, attr = what
    if kind == "edge":
        g.nx.remove_edge(ids["b"], ids["m"], key=1)
        g.nx.add_edge(ids["b"], ids["m"], key=1, **({"pos": 1} if attr == "out" else {}))
        node = ids["m"]
    else:
        del g.nx.nodes[ids[name]][attr]
        node = ids[name]
    assert f"node {node}" in validate_error(g)


@pytest.mark.parametrize("edit", ["op-shape", "const-shape", "edge-key"])
def test_ir_graph_validate_attributes_agree(edit):
    """Attributes that say the same thing twice must agree."""
    g, ids = hand_built()
    if edit == "op-shape":
        g.nx.nodes[ids["m"]]["shape"] = (4,)
        node = ids["m"]
    elif edit == "const-shape":
        g.nx.nodes[ids["c"]]["shape"] = (1,)  # still broadcasts: only a check finds it
        node = ids["c"]
    else:
        g.nx.remove_edge(ids["b"], ids["m"], key=1)
        g.nx.add_edge(ids["b"], ids["m"], key=7, pos=1, out=0)
        node = ids["m"]
    assert f"node {node}" in validate_error(g)

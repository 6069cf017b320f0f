"""Loop-invariant code motion: body work that depends only on a loop's consts runs once,
before the loop, instead of once per step.

Owns: `hoist_invariants(graph)` (a pass: a new graph; the input is unchanged). Does not:
know op semantics: a body node is invariant when every value it reads is a constant, a
const input of the body, or another invariant node's value, and it writes nothing in
place. Which body inputs are consts and which node arguments feed them, each plan says
(`const_slots`); `with_more_consts` builds the plan that takes the hoisted values as
extra consts. Only ops that run their plan with the plan's own argument layout
(`runs_its_plan = True`: Scan, While) are touched.

A hoisted view that reorders its input's dims (its op says `reorders`: a transpose of a
weight matrix, which every reverse pass reads) enters the loop as a contiguous copy made
once: read at every step in memory order, it vectorizes (a transposed 32x32 operand
read along its strided dim costs gathers at each step).
"""
from ..ir.passes import recursive
from ..ir.passes.cleanup import copy_op, dce, freeze, redirect, writes_in_place
from ..ops.conversion import Clone
from ..ops.linalg import Matmul
from ..ops.shape import Transpose


def _hoist_node(graph, n):
    """Hoist out of node n's bodies in place (graph is a private copy)."""
    data = graph.nx.nodes[n]
    loop = _bodies_of(data)
    for names in _slot_groups(loop):
        loop = _hoist_slot(graph, n, loop, names)
    for names in _slot_groups(loop):
        if len(names) == 1:  # in a shared slot, one body's unused const is another's
            loop = _drop_unused_consts(graph, n, loop, names[0])
    _set_bodies(data, loop)


def _bodies_of(data):
    """What hoisting edits: the plan of a loop that runs it as laid out (Scan, While),
    else the op's own view of its params (`hoisting`: a checkpointed reverse pass)."""
    if getattr(data["op"], "runs_its_plan", False):
        return data["params"]["plan"]
    return data["op"].hoisting(data["params"])


def _set_bodies(data, loop):
    if getattr(data["op"], "runs_its_plan", False):
        data["params"]["plan"] = loop
    else:
        data["params"].update(loop.params())


def _first_argument(loop):
    """The node's argument position of its first tensor (after its plan, and after
    whatever else comes first: `first_argument`)."""
    return getattr(loop, "first_argument", 1)


def _slot_groups(loop):
    """The bodies' names grouped by the slot of the node's arguments their consts come
    from (a checkpointed reverse pass's forward and reverse steps share one)."""
    groups = {}
    for name, (_, arg_start, count) in loop.const_slots().items():
        groups.setdefault((arg_start, count), []).append(name)
    return list(groups.values())


def _hoist_slot(graph, n, loop, names):
    """Hoist out of the bodies `names`, whose consts are one slot of node n's arguments:
    the values any of them needs become new arguments after the slot, and new const
    inputs of every one of them."""
    slots, found, made = loop.const_slots(), [], {}
    for name in names:
        body_start, arg_start, count = slots[name]
        consts = range(body_start, body_start + count)
        body = _vector_first(loop.bodies()[name], _invariant_nodes(loop.bodies()[name],
                                                                    consts))
        invariant = _invariant_nodes(body, consts)
        needed = _needed_values(body, invariant)
        at = _first_argument(loop) + arg_start  # the slot's first argument position
        outer = _copy_out(graph, n, body, invariant, at, body_start, made) if needed else {}
        found.append((name, body, needed, [_in_memory_order(graph, outer[v], made)
                                           for v in needed]))
    values = list(dict.fromkeys(v for *_, outer in found for v in outer))  # one each
    if not values:
        return loop
    _, arg_start, count = slots[names[0]]
    _insert_arguments(graph, n, values, _first_argument(loop) + arg_start + count)
    specs = [graph.specs_of(u)[out] for u, out in values]
    for name, body, needed, outer in found:
        new_body = _with_inputs_for(body, needed, slots[name][0] + count, specs,
                                    [values.index(v) for v in outer])
        loop = loop.with_more_consts(name, len(values), new_body)
    return loop


def _vector_first(body, invariant):
    """`matrix @ vector` with a loop-invariant matrix becomes `vector @ matrix^T`, and
    `matrix @ column` (a [K, 1] matrix: how reverse passes hold a cotangent) becomes
    `(column^T @ matrix^T)^T`: the transpose is invariant, so it is hoisted and enters
    the loop as a contiguous copy (`_in_memory_order`), and each step's product reads it
    along its rows, the order native kernels vectorize (reading the matrix down its
    columns cost 5x per step). The column's transposes only move a unit dim: free."""
    rewrites = []
    for m in body.op_nodes():
        d = body.nx.nodes[m]
        args = body.args_of(m)
        if d["op"] is not Matmul or len(args) != 2 or m in invariant:
            continue
        (_, a, a_out), (_, v, v_out) = args
        a_spec, v_spec = body.specs_of(a)[a_out], body.specs_of(v)[v_out]
        column = len(v_spec.shape) == 2 and v_spec.shape[1] == 1
        if a in invariant and len(a_spec.shape) == 2 and (len(v_spec.shape) == 1 or column):
            rewrites.append((m, (a, a_out), (v, v_out), column))
    if not rewrites:
        return body
    g = body.copy()
    for m, matrix, vector, column in rewrites:
        source = g.nx.nodes[m].get("source")
        transposed = _transpose(g, matrix, source)
        if column:  # a new product of the transposes; m's readers read it transposed back
            row = _transpose(g, vector, source)
            product = g.add_op_node(Matmul, {0: (row, 0), 1: (transposed, 0)}, {},
                                    source=source)
            redirect(g, (m, 0), (_transpose(g, (product, 0), source), 0))
            g.nx.remove_node(m)
            continue
        for u, _, k in list(g.nx.in_edges(m, keys=True)):
            g.nx.remove_edge(u, m, key=k)
        g.nx.add_edge(vector[0], m, key=0, pos=0, out=vector[1])
        g.nx.add_edge(transposed, m, key=1, pos=1, out=0)
    return g


def _transpose(graph, value, source):
    """A node transposing the last two dims of 2-d `value` ((node, out))."""
    return graph.add_op_node(Transpose, {0: value}, {"dim0": -2, "dim1": -1}, source=source)


def _in_memory_order(graph, value, made):
    """`value` ((node, out) in graph), or a contiguous copy of it when it is a view
    that reorders dims (one copy per value: `made`)."""
    node, out = value
    data = graph.nx.nodes[node]
    if data["kind"] != "op" or not getattr(data["op"], "reorders", False):
        return value
    if ("copy", value) not in made:
        made[("copy", value)] = graph.add_op(Clone, {0: value}, {}, [data["specs"][out]],
                                             data.get("source"))
    return made[("copy", value)], 0


def _drop_unused_consts(graph, n, plan, name):
    """Const inputs no body node reads (often left by hoisting) leave the body, and the
    node's arguments that fed them go too."""
    body_start, arg_start, count = plan.const_slots()[name]
    body = plan.bodies()[name]
    unused = [m for m in body.inputs if body_start <= body.nx.nodes[m]["index"] <
              body_start + count and body.nx.out_degree(m) == 0]
    if not unused:
        return plan
    g = body.copy()
    dropped = sorted(g.nx.nodes[m]["index"] for m in unused)
    g.nx.remove_nodes_from(unused)
    for m in g.inputs:
        g.nx.nodes[m]["index"] -= sum(i < g.nx.nodes[m]["index"] for i in dropped)
    positions = [_first_argument(plan) + arg_start + i - body_start for i in dropped]
    edges = sorted(((u, k, d) for u, _, k, d in graph.nx.in_edges(n, keys=True, data=True)),
                   key=lambda e: e[2]["pos"])
    for u, k, d in edges:
        graph.nx.remove_edge(u, n, key=k)
    for u, k, d in edges:
        if d["pos"] in positions:
            continue
        pos = d["pos"] - sum(p < d["pos"] for p in positions)
        graph.nx.add_edge(u, n, key=pos, pos=pos, out=d["out"])
    return plan.with_more_consts(name, -len(dropped), g)


def _invariant_nodes(body, const_inputs):
    const_inputs = set(const_inputs)
    invariant = set()
    for m in body.topo_order():
        d = body.nx.nodes[m]
        if d["kind"] == "const" or (d["kind"] == "input" and d["index"] in const_inputs):
            invariant.add(m)
        elif d["kind"] == "op" and not writes_in_place(body, m) and \
                all(u in invariant for _, u, _ in body.args_of(m)):
            invariant.add(m)
    return invariant


def _needed_values(body, invariant):
    """(node, out) of invariant op nodes read by the rest of the body (or its outputs)."""
    needed = []
    for u, v, d in body.nx.edges(data=True):
        if u in invariant and v not in invariant and body.nx.nodes[u]["kind"] == "op" \
                and (u, d["out"]) not in needed:
            needed.append((u, d["out"]))
    return sorted(needed)


def _copy_out(graph, n, body, invariant, arg_at, body_start, made):
    """Copies of the invariant op nodes in the outer graph, reading the node's const
    arguments (body input `body_start` is argument position `arg_at`); {(body node,
    out): (outer node, out)}. `made` ({key: outer node}, shared by the bodies of one
    slot) gives a node one copy when two bodies compute it (a checkpointed reverse
    pass's two steps both transpose W)."""
    args = {pos: (u, out) for pos, u, out in graph.args_of(n)}
    where = {}
    for m in body.topo_order():
        d = body.nx.nodes[m]
        if m not in invariant:
            continue
        if d["kind"] == "input":
            where[(m, 0)] = args[arg_at + d["index"] - body_start]
        elif d["kind"] == "const":
            where[(m, 0)] = (graph.add_const(d["value"]), 0)
        else:
            edges = {pos: where[(u, out)] for pos, u, out in body.args_of(m)}
            key = _copy_key(d, edges)
            new = made.get(key) if key is not None else None
            if new is None:
                new = copy_op(graph, d, edges)
                made[key] = new
            for i in range(len(d["specs"])):
                where[(m, i)] = (new, i)
    return where


def _with_inputs_for(body, needed, first_index, specs, positions):
    """A copy of body with new inputs of `specs`, numbered from `first_index` on (later
    inputs move up), needed[k] read from new input positions[k] (the others are other
    bodies' values)."""
    g = body.copy()
    for m in g.inputs:
        if g.nx.nodes[m]["index"] >= first_index:
            g.nx.nodes[m]["index"] += len(specs)
    new = [g.add_input(spec, index=first_index + k) for k, spec in enumerate(specs)]
    for value, k in zip(needed, positions, strict=True):
        redirect(g, value, (new[k], 0))
    return dce(g)


def _copy_key(data, edges):
    """What makes two copied nodes the same (op, params, arguments), or None."""
    try:
        return (data["op"], freeze(data["params"]), tuple(sorted(edges.items())))
    except TypeError:
        return None


def _insert_arguments(graph, n, values, first_pos):
    """New tensor arguments of node n at positions first_pos..; later ones move up."""
    moved = sorted(((u, k, d) for u, _, k, d in graph.nx.in_edges(n, keys=True, data=True)
                    if d["pos"] >= first_pos), key=lambda e: -e[2]["pos"])
    for u, k, d in moved:
        graph.nx.remove_edge(u, n, key=k)
    for u, k, d in moved:
        pos = d["pos"] + len(values)
        graph.nx.add_edge(u, n, key=pos, pos=pos, out=d["out"])
    for i, (u, out) in enumerate(values):
        graph.nx.add_edge(u, n, key=first_pos + i, pos=first_pos + i, out=out)


def _hoist(graph):
    g = graph.copy()
    # only loops laid out as their plan says, or that say how hoisting sees them (not
    # e.g. WhileGrad, whose arguments differ)
    loops = [n for n, op in g.nx.nodes(data="op")
             if getattr(op, "runs_its_plan", False) or hasattr(op, "hoisting")]
    for n in loops:  # order does not matter: each loop's hoisted nodes are its own
        _hoist_node(g, n)
    return g


hoist_invariants = recursive(_hoist)
hoist_invariants.__doc__ = """Move body nodes that depend only on a loop's consts out of
the loop, at every depth (innermost loops first). In: any valid Graph. Out: the same
outputs from the same inputs; loops read the hoisted values as extra consts."""

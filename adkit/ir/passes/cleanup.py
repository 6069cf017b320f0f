"""Clean-up passes: dead code elimination, common subexpressions, constant folding.

Owns: `dce`, `cse`, `fold_constants`, `pipeline`, and the small editing helpers the passes
share (`redirect`, `writes_in_place`, `has_in_place_ops`, `freeze`, and `copy_op` /
`keep_annotations`, through which every pass that copies, merges or replaces a node keeps
the attributes beyond the schema, such as a derived graph's `origin`). Does not:
rewrite algebra (simplify.py), differentiate or batch graphs.
Invariant: a pass copies its input (`graph.copy()`), edits the copy's `.nx`, keeps the ids
of surviving nodes, and returns a graph that passes `validate()` and computes the same
outputs from the same inputs; the input graph is never touched. (Each pass here is
written as its in-place edit, and `editing.edits` makes the copying pass of it.)
NB: ops are taken to be pure functions of their arguments and params. An op that writes
into an argument (its shape rule reports an alias) makes evaluation order and aliasing
part of the meaning, which the IR does not record: `dce` keeps such ops, and `cse`,
`fold_constants` and `simplify` return such a graph unchanged.
"""
import numpy as np

from ... import _dispatch, dtypes
from ...autograd.grad_mode import no_grad
from ...tensor import Tensor, _make
from .. import adjacency, rules
from .editing import apply_passes, edits


# ------------------------------------------------------------------ shared helpers
def redirect(graph, src, dst):
    """Make every edge that reads `src` = (node, out) read `dst` = (node, out) instead,
    keeping each edge's key and `pos` (so consumers see the same argument positions)."""
    node, out = src
    if tuple(src) == tuple(dst):
        return
    moves = sorted((v, k, d) for _, v, k, d in graph.nx.out_edges(node, keys=True, data=True)
                   if d["out"] == out)
    for v, k, d in moves:
        graph.nx.remove_edge(node, v, key=k)
        graph.nx.add_edge(dst[0], v, key=k, **dict(d, out=dst[1]))


# what Graph.add_op/add_const/add_input/add_output set; any other node attribute is an
# annotation (`origin`, `recomputes`, a const's `requires_grad`, a user's own) that a
# pass carries over to the node that copies or replaces its node
SCHEMA = frozenset({"kind", "op", "params", "specs", "shape", "dtype", "source", "aliases",
                    "index", "value"})


def annotations(data):
    """The attributes of a node (its data dict) beyond the schema."""
    return {k: v for k, v in data.items() if k not in SCHEMA}


def keep_annotations(graph, node, *sources):
    """Give `node` the annotations of the nodes (data dicts) it copies or replaces, in
    order: one it lacks is copied; one it has is merged when its value knows how (a
    `merge(other)` method, as Origin has), else kept."""
    data = graph.nx.nodes[node]
    for source in sources:
        for key, value in annotations(source).items():
            if key not in data:
                data[key] = value
            elif data[key] is not value and hasattr(data[key], "merge"):
                data[key] = data[key].merge(value)


def copy_op(graph, data, args, **changes):
    """Add to `graph` an op node like `data` (an op node's data dict, maybe of another
    graph) reading `args` ({pos: (node, out)}): op, params, specs, source and aliases
    (each overridable by `changes`) and its annotations. Returns the new node."""
    fields = {"params": data["params"], "specs": data["specs"], "source": data.get("source"),
              "aliases": data.get("aliases"), **changes}
    node = graph.add_op(changes.get("op", data["op"]), args, fields["params"],
                        fields["specs"], source=fields["source"], aliases=fields["aliases"])
    keep_annotations(graph, node, data)
    return node


def writes_in_place(graph, n):
    """Whether op node n writes into one of its arguments (add_, copy_, a user Function
    calling mark_dirty...): read from the node's `aliases` when the tracer recorded them,
    else from the op's shape rule."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op":
        return False
    aliases = data.get("aliases")
    if aliases is None:
        specs_in = {pos: graph.specs_of(u)[out] for pos, u, out in graph.args_of(n)}
        try:
            aliases = rules.infer(data["op"], specs_in, data["params"]).aliases
        except Exception:
            return True  # NB: "cannot tell" must count as "maybe writes": the safe answer
    return any(a is not None for a in aliases)


def has_in_place_ops(graph):
    # any node will do: no topological sort needed (passes call this on every graph,
    # so recorded aliases are read here, without writes_in_place's lookups)
    for n, data in graph.nx._node.items():
        if data["kind"] != "op":
            continue
        aliases = data.get("aliases")
        if writes_in_place(graph, n) if aliases is None else \
                aliases.count(None) != len(aliases):
            return True
    return False


_PLAIN = frozenset({bool, int, str, type, type(None), type(Ellipsis)})


def freeze(value):
    """A hashable key, equal for two params only when they act the same: the type is part
    of the key (1, 1.0 and True promote differently), floats compare by bits (so -0.0 and
    0.0 differ, NaN equals NaN), arrays by (dtype, shape, bytes). Raises TypeError for
    values it cannot vouch for."""
    t = type(value)
    if t in _PLAIN:  # (the usual params first: cse freezes every node's)
        return (t, value)
    if t is dict and not value:
        return (dict, ())
    if value is None or value is Ellipsis or isinstance(value, (bool, int, str, type)):
        return (type(value), value)
    if isinstance(value, float):
        return (type(value), value.hex())
    if isinstance(value, (np.ndarray, np.generic)):
        return (type(value),) + array_key(np.asarray(value))
    if isinstance(value, np.dtype):
        return (np.dtype, value.str)
    if isinstance(value, dtypes.DType):
        return (dtypes.DType, value.name)
    if isinstance(value, slice):
        return (slice, freeze(value.start), freeze(value.stop), freeze(value.step))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple([freeze(v) for v in value]))
    if isinstance(value, dict):
        return (dict, tuple(sorted((freeze(k), freeze(v)) for k, v in value.items())))
    raise TypeError(f"cannot freeze a {type(value).__name__}")


def array_key(arr):
    """(dtype, shape, bytes) of an array; object arrays hold pointers, not values."""
    if arr.dtype.kind == "O":
        raise TypeError("cannot freeze an object array")
    return (arr.dtype.str, arr.shape, arr.tobytes())


def pipeline(passes):
    """A pass (graph -> new graph) that applies `passes` in order. Each must be a pure
    pass itself, so the pipeline never touches its input either (the in-place forms of
    adkit's passes edit one copy of it: editing.apply_passes)."""
    passes = tuple(passes)

    def run(graph):
        return apply_passes(passes, graph)

    run.__name__ = "pipeline(" + ", ".join(getattr(p, "__name__", repr(p))
                                            for p in passes) + ")"
    run.passes = passes
    return run


# ------------------------------------------------------------------ dce
@edits
def dce(g):
    """Dead code elimination: drop op and const nodes that no output depends on.

    In: any valid Graph. Out: the same inputs and outputs (inputs always stay: they are
    the signature), and only op/const nodes that are ancestors of an output, or ops that
    write into an argument (with what they read). Surviving nodes keep their ids.

        before                                after
        { lambda ; a:f32[3]. let              { lambda ; a:f32[3]. let
            b:f32[3] = exp a                      b:f32[3] = tanh a
            c:f32[3] = tanh a                   in (b) }
          in (c) }
    """
    live = adjacency.reach_up(g.nx, g.outputs)
    order = g.topo_order()
    nodes = g.nx._node  # (networkx's own node dict: its view costs as much as a check)
    candidates = [n for n in order
                  if nodes[n]["kind"] in ("op", "const") and n not in live]
    # NB: an in-place write is a side effect (it may change an input the caller holds)
    live |= adjacency.reach_up(g.nx, [n for n in candidates if writes_in_place(g, n)])
    g.nx.remove_nodes_from([n for n in candidates if n not in live])
    for n in order:  # (each node's own outputs: any order will do)
        if n in live and nodes[n]["kind"] == "op" and \
                hasattr(nodes[n]["op"], "without_outputs"):
            _drop_unread_outputs(g, n)
    return g


def _drop_unread_outputs(g, n):
    """Results of op node n that nothing reads leave it when its class can stop
    computing them: `without_outputs(params, unread)` gives (new params, the outputs
    kept, in order), or None. (A checkpointed reverse pass then stops accumulating a
    const's gradient nobody asked for at every step.)"""
    data = g.nx.nodes[n]
    hook = getattr(data["op"], "without_outputs", None)
    if hook is None or writes_in_place(g, n):
        return
    read = {d["out"] for _, _, d in g.nx.out_edges(n, data=True)}
    unread = [i for i in range(len(data["specs"])) if i not in read]
    changed = hook(data["params"], unread) if unread else None
    if changed is None:
        return
    params, kept = changed
    specs = tuple(data["specs"][i] for i in kept)
    data.update(params=params, specs=specs, aliases=tuple(data["aliases"][i] for i in kept),
                shape=specs[0].shape if specs else (), dtype=specs[0].dtype if specs else None)
    for _, _, d in g.nx.out_edges(n, data=True):
        d["out"] = kept.index(d["out"])


# ------------------------------------------------------------------ cse
@edits
def cse(g):
    """Common subexpression elimination: merge op nodes with the same op class, equal
    params (by `freeze`) and the same arguments (producer and output at each position),
    and const nodes with equal values (dtype, shape, bytes). The node met first in
    topological order is kept; consumers of a duplicate are moved onto it (same `pos`
    and `out`) and the duplicate is dropped. Walking in topological order lets chains
    collapse in one call. Ops whose params cannot be frozen are left alone.

    In: any valid Graph. Out: no two mergeable nodes; inputs and outputs unchanged.

        before                                after
        { lambda ; a:f32[3]. let              { lambda ; a:f32[3]. let
            b:f32[3] = exp a                      b:f32[3] = exp a
            c:f32[3] = exp a                      c:f32[3] = add b b
            d:f32[3] = add b c                  in (c) }
          in (d) }
    """
    if has_in_place_ops(g):
        return g
    seen = {}
    for n in g.topo_order():
        key = _cse_key(g, n)
        if key is None:
            continue
        keep = seen.setdefault(key, n)
        if keep != n:
            for i in range(len(g.specs_of(n))):
                redirect(g, (n, i), (keep, i))
            keep_annotations(g, keep, g.nx.nodes[n])
            g.nx.remove_node(n)
    return g


def _cse_key(graph, n):
    """What makes node n interchangeable with another, or None if nothing may replace it."""
    data = graph.nx.nodes[n]
    try:
        if data["kind"] == "const":
            return ("const",) + array_key(np.asarray(data["value"]))
        if data["kind"] == "op":
            return ("op", data["op"], freeze(data["params"]), tuple(graph.args_of(n)))
    except TypeError:
        return None
    return None


# ------------------------------------------------------------------ fold_constants
@edits
def fold_constants(g):
    """Evaluate op nodes whose tensor arguments are all const nodes (at least one), and
    put one const node per output in their place (consumers of output i read const i;
    outputs nobody reads get none). Walking in topological order folds chains in one
    call. An op that raises, or returns something other than tensors of its recorded
    specs, stays as it is (it will fail or run at evaluation time, as before).

    In: any valid Graph. Out: no op node left with only const arguments, except those
    that could not be evaluated; new consts get fresh ids; the consts that were read may
    now be unused (follow with `dce`).

        before                                after
        { lambda b:f32[3] ; a:f32[3]. let     { lambda b:f32[3] c:f32[3] ; a:f32[3]. let
            c:f32[3] = exp b                      d:f32[3] = mul a c
            d:f32[3] = mul a c                  in (d) }
          in (d) }
    """
    if has_in_place_ops(g):
        return g
    for n in g.topo_order():
        if g.nx.nodes[n]["kind"] != "op":
            continue
        args = g.args_of(n)
        if args and all(g.nx.nodes[u]["kind"] == "const" for _, u, _ in args):
            values = _evaluate(g, n)
            if values is not None:
                _replace_by_consts(g, n, values)
    return g


def _evaluate(graph, n):
    """The output arrays of op node n on its const arguments, or None if it cannot run."""
    data = graph.nx.nodes[n]
    # NB: copies, so that the op cannot reach the arrays the input graph shares with g
    tensors = {pos: _make(np.array(graph.nx.nodes[u]["value"], copy=True))
               for pos, u, _ in graph.args_of(n)}
    try:
        args = rules.join_args(data["op"], tensors, data["params"])
        with _dispatch.no_interpreters(), no_grad(), np.errstate(all="ignore"):
            result = data["op"].apply(*args)
    except Exception:
        return None
    outs = result if isinstance(result, tuple) else (result,)
    if not all(isinstance(o, Tensor) for o in outs):
        return None
    if tuple(rules.spec_of(o) for o in outs) != tuple(data["specs"]):
        return None
    # NB: Graph.add_const copies them (np.array: views such as expand's zero strides
    # become arrays of their own)
    return [o._data for o in outs]


def _replace_by_consts(graph, n, values):
    for i, value in enumerate(values):
        if any(d["out"] == i for _, _, d in graph.nx.out_edges(n, data=True)):
            const = graph.add_const(value)
            keep_annotations(graph, const, graph.nx.nodes[n])
            redirect(graph, (n, i), (const, 0))
    graph.nx.remove_node(n)


__all__ = ["dce", "cse", "fold_constants", "pipeline", "redirect", "writes_in_place",
           "has_in_place_ops", "freeze", "array_key", "annotations", "keep_annotations",
           "copy_op"]

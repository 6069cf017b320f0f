"""The IR: a `Graph` over a `networkx.MultiDiGraph`.

Owns: the node and edge schema, builders, the pass-writer helpers (`nodes`, `op_nodes`,
`args`, `users`, `add_op`, `replace_all_uses`), a stable topological order, `validate()`.
Does not: trace (trace.py), evaluate (evaluate.py) or print (printing.py); its hot
paths read and write networkx's dicts through adjacency.py.

| element | attributes |
|---|---|
| `input` node  | `kind="input"`, `index`, `shape`, `dtype` |
| `const` node  | `kind="const"`, `value` (read-only ndarray), `shape`, `dtype`; `requires_grad=True` when it was a parameter the traced function closed over |
| `op` node     | `kind="op"`, `op` (Function class), `params` (dict of static arguments by parameter name; loops, branches and fused kernels keep their bodies here as Graphs), `specs` (one `TensorSpec` per output), `shape`/`dtype` (of output 0), `source` ("file:line" of the user's call, or None), `aliases` (per output: the argument position it overwrites in place, or None) |
| `output` node | `kind="output"`, `index` |
| any node of a derived graph | `origin` = `Origin(role, source, primal)` (passes/provenance.py), set by vjp/jvp/vmap and kept by every pass: `role` "forward"/"backward"/"tangent"/"batched", `source` the node of the pass's input graph it was made for, `primal` for a gradient or tangent the `(node, out)` it belongs to (pictures color by role and name it `grad_x`) |
| edge u -> v   | key = `pos` = argument position at v; `out` = which output of u |

A value is `Value(node, out)` (a namedtuple, equal to the plain `(node, out)` pair): output
`out` of `node`. A static argument (a Python number, a dim, a shape) is no edge: it sits in
the consumer's `params` under its parameter name, so `x * 2.0` is one `mul` node with one
edge (pos 0) and `params == {"y": 2.0}`.
Node ids are increasing ints; every walk is in `topo_order()` (lexicographic topological
order by id), so printing, passes and codegen are reproducible. `x * x` is two parallel
edges that differ only by key/`pos`. A multi-output op's `shape`/`dtype` are those of
output 0; `specs` has them all.
"""
from collections import namedtuple

import networkx as nx
import numpy as np

from . import adjacency, evaluate, printing, rules, viewer
from .rules import TensorSpec, spec_of

Value = namedtuple("Value", ("node", "out"))
Value.__doc__ = "Output `out` of graph node `node` (equal to the plain tuple (node, out))."


class GraphError(ValueError):
    """A graph that breaks the schema (cycles, dangling edges, missing arguments...)."""


class NodeList(list):
    """A list of node ids that may also be called: `graph.op_nodes()` is the documented
    form; the older attribute form `graph.op_nodes` (no call) still works for the code
    written against it."""

    def __call__(self):
        return self


class Graph:
    """A computation as a networkx MultiDiGraph (see the module docstring for the schema).

    `in_tree`/`out_tree` (set by `ak.trace`) give the pytree structures of the traced
    function's arguments and results; `static_args` holds the non-tensor leaves of the
    arguments and `static_outputs` the non-tensor leaves of the results."""

    def __init__(self):
        self.nx = nx.MultiDiGraph()
        self.in_tree = None
        self.out_tree = None
        self.static_args = {}
        self.static_outputs = {}

    # ------------------------------------------------------------ building
    def _new_id(self):
        return adjacency.new_id(self.nx)

    def add_input(self, spec, index=None):
        n = self._new_id()
        index = len(self.inputs) if index is None else index
        adjacency.add_new_node(self.nx, n, {"kind": "input", "index": index,
                                   "shape": tuple(spec.shape), "dtype": spec.dtype}, {})
        return n

    def add_const(self, value):
        value = np.array(value)  # a private, read-only copy: evaluation hands it out
        value.setflags(write=False)
        n = self._new_id()
        spec = spec_of(value)
        adjacency.add_new_node(self.nx, n, {"kind": "const", "value": value, "shape": spec.shape,
                                   "dtype": spec.dtype}, {})
        return n

    def add_op(self, op, *args, **params):
        """Add a node applying `op` (a Function class, e.g. `ak.ir.ops.Mul`) and return
        its id. Positional `args` are the op's tensor arguments in order, each a Value or
        a node id (its output 0); static arguments go by keyword, by the name of the op's
        parameter: `g.add_op(ops.Mul, x, y=2.0)`, `g.add_op(ops.Sum, x, dim=1)` (a
        keyword whose value is a Value is a tensor argument: `y=Value(n, 0)`). The
        op's own shape rule gives the new node's specs (an error there names the op).

        The builders' form `add_op(op, {pos: (node, out)}, params, specs=None,
        source=None, aliases=None)` (a dict first) is `add_op_node`."""
        if args and type(args[0]) is dict:
            return self.add_op_node(op, *args, **params)
        values = [self._as_value(a, f"argument {i} of add_op({op.__name__}, ...)")
                  for i, a in enumerate(args)]
        tensors = {k: self._as_value(v, f"{k}= of add_op({op.__name__}, ...)")
                   for k, v in params.items() if isinstance(v, Value)}
        params = {k: v for k, v in params.items() if k not in tensors}
        edges, params = rules.place_args(op, values, params, tensors)
        try:
            return self.add_op_node(op, edges, params)
        except (TypeError, ValueError, RuntimeError) as e:  # the op's shape rule refused
            shapes = ", ".join(printing.format_spec(self.specs_of(u)[out])
                               for _, (u, out) in sorted(edges.items()))
            raise type(e)(f"add_op({op.__name__}) on {shapes}: {e}") from None

    def _as_value(self, a, what):
        """Value for a node id or a (node, out) pair of this graph, else TypeError."""
        if isinstance(a, tuple) and len(a) == 2:
            node, out = a
        elif isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            node, out = a, 0
        else:
            raise TypeError(f"{what} is {type(a).__name__} {a!r}; tensor arguments are "
                            "graph values (a node id or ak.ir.Value(node, out)); pass static "
                            "arguments (numbers, dims, shapes) by keyword, e.g. y=2.0")
        if node not in self.nx:
            raise GraphError(f"{what}: node {node} is not in the graph")
        if not 0 <= out < len(self.specs_of(node)):
            raise GraphError(f"{what}: node {node} has no output {out}")
        return Value(int(node), int(out))

    def add_op_node(self, op, args, params=None, specs=None, source=None, aliases=None):
        """Add `op` applied to `args` ({position: (node, out)} for the tensor arguments)
        and `params` (static arguments by name). Without `specs`, the op's own shape rule
        gives them. `aliases[i]`: the argument position output i overwrites in place."""
        params = params or {}
        if specs is None:
            specs_in = {pos: self.specs_of(u)[out] for pos, (u, out) in args.items()}
            inferred = rules.infer(op, specs_in, params)
            specs, aliases = inferred.specs, inferred.aliases
        n = self._new_id()
        specs = tuple(specs)
        adjacency.add_new_node(self.nx, n, {
            "kind": "op", "op": op, "params": dict(params), "specs": specs,
            "shape": specs[0].shape if specs else (),
            "dtype": specs[0].dtype if specs else None, "source": source,
            "aliases": tuple(aliases) if aliases is not None else (None,) * len(specs)},
            args)
        return n

    def add_output(self, src, index=None):
        """`src`: (node, out) whose value is output number `index`."""
        n = self._new_id()
        index = len(self.outputs) if index is None else index
        adjacency.add_new_node(self.nx, n, {"kind": "output", "index": index}, {0: src})
        return n

    # ------------------------------------------------------------ reading
    def nodes_of(self, kind):
        # (networkx's own node dict: its data view runs a generator step per node)
        data = self.nx._node
        nodes = [n for n, attrs in data.items() if attrs.get("kind") == kind]
        if kind in ("input", "output"):
            nodes.sort(key=lambda n: data[n]["index"])
        return nodes

    @property
    def inputs(self):
        return self.nodes_of("input")

    @property
    def outputs(self):
        return self.nodes_of("output")

    def nodes(self, kind=None):
        """Every node id (or those of one `kind`) in topological order."""
        order = self.topo_order()
        if kind is None:
            return order
        data = self.nx._node
        return [n for n in order if data[n]["kind"] == kind]

    @property
    def op_nodes(self):
        """`graph.op_nodes()`: the op nodes in topological order, the order a rewrite
        should visit them in (each node's arguments come before it)."""
        return NodeList(self.nodes("op"))

    def args(self, n):
        """The tensor arguments of node n, by position: a list of Value(node, out). Its
        static arguments are `graph.nx.nodes[n]["params"]`."""
        return [Value(u, out) for _, u, out in self.args_of(n)]

    def users(self, value):
        """The nodes that read `value` (a node id: any of its outputs; a Value: that
        output), in id order, each once; output nodes included."""
        node, out = (value, None) if not isinstance(value, tuple) else value
        return sorted({v for _, v, d in self.nx.out_edges(node, data=True)
                       if out is None or d["out"] == out})

    def topo_order(self):
        """The nodes in program order. Node ids number a traced program in the order it
        ran, and that order is what in-place writes rely on: a read of a value before a
        write into its memory (through a view) need not be an ancestor of the write.
        A node a pass adds later (a higher id) runs just before its first user, where
        the program would have computed it, not after everything else that is ready:
        each node is keyed by its own id or, when smaller, its earliest user's key.
        NB: on networkx's adjacency dicts (adjacency.py), not its sorts, whose views
        cost a third of jit's pipeline, and kept until a node or an edge changes."""
        order = adjacency.topo_order(self.nx)
        if order is None:
            raise GraphError("the graph has a cycle: " + str(nx.find_cycle(self.nx)))
        return order

    def args_of(self, n):
        """[(pos, producer, out)] for node n, by position."""
        # networkx's own adjacency dict (what its views wrap): the views cost more than
        # the sort
        args = [(d["pos"], u, d["out"]) for u, edges in self.nx._pred[n].items()
                for d in edges.values()]
        args.sort()
        return args

    def input_specs(self):
        """The TensorSpec of each input, in order."""
        return [self.specs_of(n)[0] for n in self.inputs]

    def output_specs(self):
        """The TensorSpec of each output, in order."""
        return [self.specs_of(n)[0] for n in self.outputs]

    def specs_of(self, n):
        """One TensorSpec per output of node n."""
        data = self.nx._node[n]  # (networkx's NodeView costs as much as the rest)
        if data["kind"] == "op":
            return data["specs"]
        if data["kind"] == "output":
            (_, u, out), = self.args_of(n)
            return (self.specs_of(u)[out],)
        return (TensorSpec._make((data["shape"], data["dtype"])),)  # no re-check: hot

    def replace_all_uses(self, old, new):
        """Make every reader of `old` read `new` instead, keeping argument positions, and
        return the nodes changed. `old`/`new`: node ids (each output of old is replaced by
        the same output of new) or Values. Readers that `new` itself depends on keep
        reading `old` (so `new = f(old)` can take old's place without a cycle). `old`
        stays, unread: `ak.ir.passes.dce` removes it. GraphError if shapes or dtypes
        differ (a rewrite must compute the same kind of value)."""
        if isinstance(old, tuple) or isinstance(new, tuple):
            old, new = (self._as_value(v, "replace_all_uses") for v in (old, new))
            pairs = {old.out: new}
        else:
            n_out = len(self.specs_of(self._as_value(old, "replace_all_uses").node))
            pairs = {k: self._as_value((new, k), "replace_all_uses") for k in range(n_out)
                     if self.users((old, k))}
            old = Value(old, 0)
        pairs = {k: v for k, v in pairs.items() if v != (old.node, k)}  # not onto itself
        feeding = adjacency.ancestors(self.nx, next(iter(pairs.values())).node) if pairs else set()
        moves = [(v, key, d, pairs[d["out"]])
                 for _, v, key, d in self.nx.out_edges(old.node, keys=True, data=True)
                 if d["out"] in pairs and v not in feeding and v != pairs[d["out"]].node]
        for out, target in pairs.items():  # all checked before anything moves
            was, now = self.specs_of(old.node)[out], self.specs_of(target.node)[target.out]
            if tuple(was) != tuple(now):
                raise GraphError(f"replace_all_uses: node {old.node} output {out} is "
                                 f"{printing.format_spec(was)} but node {target.node} output "
                                 f"{target.out} is {printing.format_spec(now)}")
        for v, key, d, target in moves:
            self.nx.remove_edge(old.node, v, key=key)
            self.nx.add_edge(target.node, v, key=key, pos=d["pos"], out=target.out)
        return sorted({v for v, _, _, _ in moves})

    def copy(self):
        """An independent copy (node attribute dicts and params copied, values shared)."""
        g = Graph()
        g.nx = adjacency.copy(self.nx)
        g.in_tree, g.out_tree = self.in_tree, self.out_tree
        g.static_args = dict(self.static_args)
        g.static_outputs = dict(self.static_outputs)
        return g

    def __len__(self):
        return self.nx.number_of_nodes()

    def __setstate__(self, state):
        """Unpickling (a Graph pickles as its attributes): constant values are read-only
        again, numpy's pickle drops the flag."""
        self.__dict__.update(state)
        for _, value in self.nx.nodes(data="value"):
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    # ------------------------------------------------------------ using
    def __call__(self, *args):
        """Evaluate with numpy (through each op's Function.apply): tensors or arrays in,
        tensors out, structured as the traced function returned them."""
        return evaluate.call_graph(self, args)

    def __str__(self):
        return printing.to_text(self)

    def __repr__(self):
        ops = len(self.op_nodes)
        return (f"<adkit.ir.Graph: {len(self.inputs)} inputs, {ops} ops, "
                f"{len(self.outputs)} outputs>")

    def to_dot(self):
        """Graphviz text of the graph."""
        return printing.to_dot(self)

    def render(self, path):
        """Write a picture (.svg, .png, .pdf, or .dot text) with Graphviz's `dot`."""
        return printing.render(self, path)

    def _repr_svg_(self):
        return printing.to_svg(self)

    def _repr_html_(self):
        return viewer.notebook_html(self)

    def show(self, path=None, open=False):  # noqa: A002
        """Write the interactive HTML viewer page (see ak.ir.view); return its path."""
        return viewer.view(self, path=path, open=open)

    # ------------------------------------------------------------ checking
    def validate(self):
        """Raise GraphError naming the node for: cycles, edges to missing nodes, unknown
        kinds, missing or duplicate argument positions, bad output numbers, dense input
        and output numbering, and specs that the op's rule does not re-derive."""
        order = self.topo_order()
        for n in order:
            _check_schema(self, n)
        for n in order:
            data = self.nx.nodes[n]
            kind = data["kind"]
            args = self.args_of(n)
            positions = [p for p, _, _ in args]
            if len(set(positions)) != len(positions):
                raise GraphError(f"node {n}: two arguments at the same position {positions}")
            for pos, u, out in args:
                if out >= len(self.specs_of(u)):
                    raise GraphError(f"node {n}: argument {pos} reads output {out} of node "
                                     f"{u}, which has {len(self.specs_of(u))}")
            if kind in ("input", "const") and args:
                raise GraphError(f"{kind} node {n} has incoming edges")
            if kind == "output" and positions != [0]:
                raise GraphError(f"output node {n} needs exactly one producer")
            if kind == "op":
                _check_op_node(self, n, data, args)
        for kind in ("input", "output"):
            nodes = self.nodes_of(kind)
            for want, n in enumerate(nodes):
                if self.nx.nodes[n]["index"] != want:
                    got = [self.nx.nodes[m]["index"] for m in nodes]
                    raise GraphError(f"{kind} node {n} has index {self.nx.nodes[n]['index']}, "
                                     f"but {kind} indices must be 0..{len(nodes) - 1} "
                                     f"(got {got})")
        return True


_REQUIRED = {"input": ("index", "shape", "dtype"), "const": ("value", "shape", "dtype"),
             "op": ("op", "params", "specs", "shape", "dtype"), "output": ("index",)}


def _check_schema(graph, n):
    """The node's attributes and its incoming edges' attributes exist and agree."""
    data = graph.nx.nodes[n]
    kind = data.get("kind")
    if kind not in _REQUIRED:
        raise GraphError(f"node {n} has kind {kind!r}; kinds are input, const, op, output "
                         "(a node without one was probably created by adding an edge to "
                         "a node that does not exist)")
    missing = [a for a in _REQUIRED[kind] if a not in data]
    if missing:
        raise GraphError(f"{kind} node {n} lacks the attribute(s) {missing}")
    if kind == "op" and data["specs"] and (tuple(data["shape"]), data["dtype"]) != \
            (tuple(data["specs"][0].shape), data["specs"][0].dtype):
        raise GraphError(f"op node {n}: shape/dtype {data['shape']}/{data['dtype']} disagree "
                         f"with specs[0] {data['specs'][0]}")
    if kind == "const" and (tuple(data["shape"]), data["dtype"]) != tuple(spec_of(data["value"])):
        raise GraphError(f"const node {n}: shape/dtype {data['shape']}/{data['dtype']} "
                         f"disagree with its value {spec_of(data['value'])}")
    positions = [e.get("pos") for _, _, e in graph.nx.in_edges(n, data=True)]
    if len(set(positions)) != len(positions):
        raise GraphError(f"node {n}: two arguments at the same position ({positions})")
    for u, _, key, edge in graph.nx.in_edges(n, keys=True, data=True):
        if "pos" not in edge or "out" not in edge:
            raise GraphError(f"node {n}: its incoming edge from node {u} lacks 'pos' or "
                             "'out' (add edges with key=pos, pos=..., out=...)")
        if key != edge["pos"]:
            raise GraphError(f"node {n}: its incoming edge from node {u} has key {key} but "
                             f"pos {edge['pos']} (the key must be the position)")


def _check_op_node(graph, n, data, args):
    names, _ = rules.call_positions(data["op"])
    taken = {p for p, _, _ in args}
    for i, name in enumerate(names):
        if i not in taken and name not in data["params"]:
            raise GraphError(f"node {n} ({data['op'].__name__}): argument {i} ({name}) is "
                             "missing: no edge at that position and no param")
    # the bodies of loops and branches (a fused kernel's graph reads some inputs
    # un-expanded, by design, so it is not a graph that validates on its own)
    for name, body in printing.node_bodies(data, kernels=False):
        try:
            body.validate()
        except GraphError as e:
            raise GraphError(f"node {n} ({data['op'].__name__}), its {name}: {e}") from None
    specs_in = {p: graph.specs_of(u)[out] for p, u, out in args}
    try:
        derived = rules.infer(data["op"], specs_in, data["params"]).specs
    except Exception as e:
        raise GraphError(f"node {n} ({data['op'].__name__}): its inputs do not fit the op: "
                         f"{e}") from None
    if tuple(derived) != tuple(data["specs"]):
        raise GraphError(f"node {n} ({data['op'].__name__}): recorded specs "
                         f"{list(data['specs'])} but the inputs give {list(derived)}")

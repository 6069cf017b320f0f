"""Pictures of a Graph, as Graphviz text (`to_dot`).

Owns: what a picture shows. Each box is named with the listing's SSA names (names.py)
and shows op, params, shape and dtype; a hover tooltip adds the listing line, the role
and the user's source line. Small constants are written into their users' labels
instead of boxes. A fused kernel is a cluster holding its ops (edges go straight to
them); a loop or branch is a cluster holding its node and its bodies. Nodes that a
vjp/jvp/vmap pass made carry an `origin` (passes/provenance.py): their role picks the
color and gradient values are named after their primals (`grad_a`, `a_t`). Large
graphs are condensed (condense.py) with a caption saying what was left out.
Does not: run Graphviz (rendering.py) or change graphs.
"""
import numpy as np

from .condense import condense
from .names import (format_param, format_spec, is_graph, name_values, node_bodies,
                    node_line, op_name, shown_params)

FOLD_LIMIT = 4       # constants with at most this many elements go into users' labels
PARAM_LIMIT = 24     # longer params (plans, big tuples) are left to the tooltip
MAX_NODES = 200      # boxes per graph (and per body) before the middle is elided

ROLE_COLORS = {"forward": "#dde8f8", "backward": "#fbd3b5", "tangent": "#cdeccd",
               "batched": "#e2d6f5"}
ROLE_MEANING = {"forward": "forward: the primal computation",
                "backward": "backward: the vjp (gradients)",
                "tangent": "tangent: the jvp (directional derivatives)",
                "batched": "batched: the vmap"}
_KIND_STYLE = {
    "input": 'shape=ellipse, style=filled, fillcolor="#d7efd7"',
    "const": 'shape=note, style=filled, fillcolor="#eeeeee"',
    "op": 'shape=box, style="rounded,filled"',
    "output": 'shape=ellipse, style=filled, fillcolor="#f8e0c8"',
    "group": 'shape=box3d, style=filled, fillcolor="#f4f4f4", color="#888888"',
}


def quote(text):
    """A DOT string literal; newlines become Graphviz's centered line breaks."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph, name="adkit", max_nodes=MAX_NODES, collapse=True):
    """Graphviz text of the picture of `graph` (see the module docstring). `max_nodes`
    (None: no limit) and `collapse` (repeated blocks drawn once) keep it legible."""
    drawer = Drawer(max_nodes, collapse)
    body = drawer.draw(graph, "n", "  ")
    return "\n".join(header(name, drawer.notes) + drawer.legend("  ") + body + ["}"]) + "\n"


def header(name, notes):
    lines = [f"digraph {name} {{", '  rankdir=TB; fontname="Helvetica";',
             '  node [fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
    if notes:
        lines.append(f"  labelloc=b; fontsize=10; "
                     f"label={quote('left out: ' + '; '.join(notes))};")
    return lines


class Drawer:
    """Writes the DOT lines of a graph and its bodies; remembers the roles met (for the
    legend) and what was left out (for the caption)."""

    def __init__(self, max_nodes=MAX_NODES, collapse=True):
        self.max_nodes, self.collapse = max_nodes, collapse
        self.roles, self.notes = set(), []

    def legend(self, pad):
        if not self.roles:
            return []
        lines = [f"{pad}subgraph cluster_legend {{",
                 f'{pad}  label="node colors"; style="rounded"; color="#aaaaaa";']
        for i, role in enumerate(r for r in ROLE_COLORS if r in self.roles):
            lines.append(f'{pad}  legend_{i} [label={quote(ROLE_MEANING[role])}, '
                         f'shape=box, style="rounded,filled", fillcolor="{ROLE_COLORS[role]}"];')
        return lines + [f"{pad}}}"]

    def draw(self, graph, prefix, pad, kernel=False):
        """DOT lines of `graph`, node ids starting with `prefix`. Returns the lines; the
        Scene (self.last) tells a caller where each input and output was drawn."""
        scene = Scene(self, graph, prefix, kernel)
        lines = scene.nodes(pad) + scene.edges(pad)
        if scene.condensed.note:
            self.notes.append(scene.condensed.note)
        self.last = scene
        return lines


class Scene:
    """One graph being drawn: its names, folded constants, hidden nodes and the DOT id
    where each edge into (node, pos) ends and each edge out of (node, out) starts."""

    def __init__(self, drawer, graph, prefix, kernel):
        self.drawer, self.graph, self.prefix, self.kernel = drawer, graph, prefix, kernel
        self.names = name_values(graph)
        self.condensed = condense(graph, drawer.max_nodes, drawer.collapse)
        self.folded = {n: _const_text(graph.nx.nodes[n]["value"])
                       for n in graph.nx.nodes if _foldable(graph, n)}
        self.entries, self.exits = {}, {}   # (node, pos) / (node, out) -> DOT id

    # ------------------------------------------------------------ ids
    def dot_id(self, n):
        group = self.condensed.hidden.get(n)
        return f"{self.prefix}{n}" if group is None else f"{self.prefix}g{group}"

    def exit(self, n, out):
        return self.exits.get((n, out), self.dot_id(n))

    def entry(self, n, pos):
        return self.entries.get((n, pos), self.dot_id(n))

    # ------------------------------------------------------------ nodes
    def nodes(self, pad):
        lines = []
        for n in self.graph.topo_order():
            data = self.graph.nx.nodes[n]
            if n in self.condensed.hidden or n in self.folded or \
                    (self.kernel and data["kind"] == "output"):
                continue
            if data["kind"] == "op" and any(is_graph(v) for v in data["params"].values()):
                lines += self.kernel_cluster(n, data, pad)
            elif data["kind"] == "op" and node_bodies(data):
                lines += self.body_clusters(n, data, pad)
            else:
                lines.append(self.box(n, data, pad))
        for i, group in enumerate(self.condensed.groups):
            lines.append(f'{pad}{self.prefix}g{i} [label={quote(group.label)}, '
                         f'tooltip={quote(group.tooltip)}, {_KIND_STYLE["group"]}];')
        return lines

    def box(self, n, data, pad):
        kind = data["kind"]
        style = _KIND_STYLE[kind]
        role = getattr(data.get("origin"), "role", None)
        if kind == "op":
            self.drawer.roles.update([role] if role else [])
            style += f', fillcolor="{ROLE_COLORS.get(role, ROLE_COLORS["forward"])}"'
        if self.primal_name(data):
            style += ', penwidth=2, color="#b4441c"'
        label, tooltip = self.label(n, data), self.tooltip(n, data)
        return f"{pad}{self.dot_id(n)} [label={quote(label)}, tooltip={quote(tooltip)}, " \
               f"{style}];"

    def label(self, n, data):
        kind, names = data["kind"], self.names
        title = self.primal_name(data)
        lines = [title] if title else []
        if kind == "output":
            return "\n".join([f"output {data['index']}"] + lines)
        specs = " ".join(format_spec(s) for s in self.graph.specs_of(n))
        if kind == "input":
            return "\n".join(lines + [f"{names[(n, 0)]} = input {data['index']}", specs])
        if kind == "const":
            return "\n".join(lines + [f"{names[(n, 0)]} = const", specs])
        outs = " ".join(names[(n, i)] for i in range(len(data["specs"])))
        return "\n".join(lines + [f"{outs} = {self.call_text(n, data)}", specs])

    def call_text(self, n, data):
        """`mul` or, when a constant is folded in, `mul(d, 0.5)`; short params after."""
        text = op_name(data["op"])
        args = self.graph.args_of(n)
        if any(u in self.folded for _, u, _ in args):
            text += "(" + ", ".join(self.folded.get(u) or self.names[(u, out)]
                                    for _, u, out in args) + ")"
        params = [f"{k}={format_param(v)}" for k, v in shown_params(data)
                  if v is not None and len(format_param(v)) <= PARAM_LIMIT]
        return text + (f" [{' '.join(params)}]" if params else "")

    def primal_name(self, data):
        """`grad_d` for a gradient value, `d_t` for a tangent (d: the primal's name)."""
        origin = data.get("origin")
        primal = getattr(origin, "primal", None)
        if primal is None or tuple(primal) not in self.names:
            return None
        name = self.names[tuple(primal)]
        return f"{name}_t" if origin.role == "tangent" else f"grad_{name}"

    def tooltip(self, n, data):
        kind = data["kind"]
        if kind == "op":
            lines = [node_line(self.graph, n, self.names)]
        elif kind == "const":
            lines = [f"{self.names[(n, 0)]} = const {format_spec(self.graph.specs_of(n)[0])}",
                     np.array2string(np.asarray(data["value"]), threshold=20, precision=4)]
        else:
            lines = [self.label(n, data).replace("\n", "  ")]
        origin = data.get("origin")
        if origin is not None:
            made = f" (made for node {origin.source} of the graph the pass was given)" \
                if origin.source is not None else ""
            lines.append(f"role: {origin.role}{made}")
        if data.get("source"):
            lines.append(f"source: {data['source']}")
        return "\n".join(lines)

    # ------------------------------------------------------------ clusters
    def kernel_cluster(self, n, data, pad):
        """A fused kernel: a cluster of its ops; edges run to and from them directly."""
        sub = next(v for v in data["params"].values() if is_graph(v))
        inner_prefix = f"{self.prefix}{n}k"
        outs = " ".join(self.names[(n, i)] for i in range(len(data["specs"])))
        title = quote(f"{outs} = {op_name(data['op'])}")
        lines = [f"{pad}subgraph cluster_{inner_prefix} {{",
                 f'{pad}  label={title}; '
                 'style="rounded,filled"; fillcolor="#f3f7fd"; color="#4a6fa5";']
        lines += self.drawer.draw(sub, inner_prefix, pad + "  ", kernel=True)
        inner = self.drawer.last
        for i, (pos, _, _) in enumerate(self.graph.args_of(n)):
            self.entries[(n, pos)] = inner.dot_id(sub.inputs[i])
        for i, o in enumerate(sub.outputs):
            (_, u, out), = sub.args_of(o)
            self.exits[(n, i)] = inner.exit(u, out)
        return lines + [f"{pad}}}"]

    def body_clusters(self, n, data, pad):
        """A loop or branch: its node and, beside it, each body as a cluster."""
        lines = [f"{pad}subgraph cluster_{self.prefix}{n} {{",
                 f'{pad}  label={quote(op_name(data["op"]))}; style="rounded"; '
                 'color="#4a6fa5"; penwidth=1.5;', self.box(n, data, pad + "  ")]
        for k, (body_name, body) in enumerate(node_bodies(data)):
            inner_prefix = f"{self.prefix}{n}b{k}"
            lines += [f"{pad}  subgraph cluster_{inner_prefix} {{",
                      f'{pad}    label={quote(body_name)}; style="dashed,rounded"; '
                      'color="#7a7a7a";']
            lines += self.drawer.draw(body, inner_prefix, pad + "    ")
            lines.append(f"{pad}  }}")
            for m in body.inputs:  # hangs the body under its node
                lines.append(f"{pad}  {self.dot_id(n)} -> {self.drawer.last.dot_id(m)} "
                             '[style=dotted, arrowhead=none, color="#9a9a9a"];')
        return lines + [f"{pad}}}"]

    # ------------------------------------------------------------ edges
    def edges(self, pad):
        lines, seen = [], set()
        graph = self.graph
        for u, v, data in sorted(graph.nx.edges(data=True), key=lambda e: (e[1], e[2]["pos"])):
            if u in self.folded or (self.kernel and graph.nx.nodes[v]["kind"] == "output"):
                continue
            src, dst = self.exit(u, data["out"]), self.entry(v, data["pos"])
            grouped = u in self.condensed.hidden or v in self.condensed.hidden
            if grouped:
                if src == dst or (src, dst) in seen:
                    continue
                seen.add((src, dst))
                lines.append(f"{pad}{src} -> {dst} [style=dashed];")
                continue
            label = self.edge_label(u, v, data)
            lines.append(f"{pad}{src} -> {dst}" + (f" [label={quote(label)}]" if label else "")
                         + ";")
        return lines

    def edge_label(self, u, v, data):
        """The value's name from a multi-output node, and the argument position when
        the consumer takes more than one drawn argument."""
        parts = []
        if len(self.graph.specs_of(u)) > 1:
            parts.append(self.names[(u, data["out"])])
        drawn = [p for p, w, _ in self.graph.args_of(v) if w not in self.folded]
        if len(drawn) > 1 and (v, data["pos"]) not in self.entries:  # kernels: own inputs
            parts.append(str(data["pos"]))
        return "→".join(parts)


def _foldable(graph, n):
    data = graph.nx.nodes[n]
    return data["kind"] == "const" and np.size(data["value"]) <= FOLD_LIMIT and \
        all(graph.nx.nodes[v]["kind"] == "op" for v in graph.nx.successors(n))


def _const_text(value):
    """A small constant on one line: `0.5`, `[0.5, -0.5]`, `[[1, 2], [3, 4]]`."""
    value = np.asarray(value)
    if value.ndim == 0:
        v = value.item()
        return f"{v:.4g}" if isinstance(v, float) else repr(v)
    return "[" + ", ".join(_const_text(v) for v in value) + "]"

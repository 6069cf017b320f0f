"""The viewer's own picture, for machines with no Graphviz renderer at all.

Owns: `layered_svg(graph)` and `structure(graph)` (its ids, shaped as
nodes.dot_structure's): a layered drawing (one row per networkx topological
generation, in node-id order, so it is reproducible), bodies of loops, branches and fused
kernels drawn as boxes to the right of their node. The SVG is shaped like Graphviz's
(`g.node`, `g.edge`, `g.cluster`, each with a `<title>` holding the id, node ids as in
nodes.py) so the page's script treats both pictures alike. Does not: route edges (they
are straight lines) or aim for Graphviz's quality; it only has to always work.
"""
from html import escape

import networkx as nx

from .. import printing

_ROW, _GAP, _PAD, _CHAR, _LINE = 70, 24, 16, 7.2, 16
_FILL = {"input": "#d7efd7", "const": "#eeeeee", "op": "#dde8f8", "output": "#f8e0c8"}


def _label(graph, n, names):
    """Two short lines: what the node is, and its type."""
    data = graph.nx.nodes[n]
    specs = " ".join(printing.format_spec(s) for s in graph.specs_of(n))
    kind = data["kind"]
    if kind == "op":
        return [printing.op_name(data["op"]), specs]
    if kind == "output":
        return [f"output {data['index']}", specs]
    head = f"input {data['index']}" if kind == "input" else "const"
    return [f"{head}: {names[(n, 0)]}", specs]


class _Block:
    """A laid-out graph in its own coordinates: boxes, edges, clusters, its size."""

    def __init__(self):
        self.boxes, self.edges, self.clusters = [], [], []
        self.width = self.height = 0.0

    def shifted(self, dx, dy):
        out = _Block()
        out.boxes = [(i, x + dx, y + dy, w, h, lines, kind)
                     for i, x, y, w, h, lines, kind in self.boxes]
        out.edges = list(self.edges)
        out.clusters = [(c, x + dx, y + dy, w, h, label)
                        for c, x, y, w, h, label in self.clusters]
        return out

    def extend(self, other):
        self.boxes += other.boxes
        self.edges += other.edges
        self.clusters += other.clusters


def _layout(graph, prefix):
    """Lay out `graph` (ids `prefix<node>`) and, recursively, its bodies."""
    names = printing.name_values(graph)
    block, where = _Block(), {}
    rows = [sorted(gen) for gen in nx.topological_generations(graph.nx)]
    for r, row in enumerate(rows):
        x = _PAD
        for n in row:
            lines = _label(graph, n, names)
            w = max(len(s) for s in lines) * _CHAR + 2 * _PAD
            h = len(lines) * _LINE + 12
            y = _PAD + r * _ROW
            block.boxes.append((f"{prefix}{n}", x, y, w, h, lines,
                                graph.nx.nodes[n]["kind"]))
            where[n] = (x, y)
            x += w + _GAP
        block.width = max(block.width, x)
    block.height = _PAD + len(rows) * _ROW
    for u, v in sorted(set(graph.nx.edges())):
        block.edges.append((f"{prefix}{u}", f"{prefix}{v}"))
    _place_bodies(graph, prefix, block, where)
    return block


def _place_bodies(graph, prefix, block, where):
    """Bodies go in a column right of the graph, each level with its node or lower."""
    left, top = block.width + _GAP, 0.0
    right = block.width
    for n in graph.topo_order():
        data = graph.nx.nodes[n]
        if data["kind"] != "op":
            continue
        for k, (body_name, body) in enumerate(printing.node_bodies(data)):
            inner = _layout(body, f"{prefix}{n}_{k}_")
            y = max(where[n][1], top)
            label = f"{printing.op_name(data['op'])} {body_name}"
            block.clusters.append((f"cluster_{prefix}{n}_{k}_", left, y,
                                   inner.width + _PAD, inner.height + 2 * _PAD, label))
            block.extend(inner.shifted(left + _PAD / 2, y + 1.5 * _PAD))
            top = y + inner.height + 3 * _PAD
            right = max(right, left + inner.width + 2 * _PAD)
    block.width, block.height = right, max(block.height, top)


def structure(graph, prefix="n", path=(), chain=(), found=None):
    """The ids of `layered_svg`'s picture, as nodes.dot_structure gives them."""
    found = found or {"nodes": {}, "clusters": {}, "chains": {}, "parents": {}}
    for n in graph.topo_order():
        found["nodes"][f"{prefix}{n}"] = path + (n,)
        found["chains"][f"{prefix}{n}"] = list(chain)
        data = graph.nx.nodes[n]
        for k, (_, body) in enumerate(printing.node_bodies(data) if data["kind"] == "op"
                                      else ()):
            cid = f"cluster_{prefix}{n}_{k}_"
            found["clusters"][cid] = path + (n, k)
            found["parents"][cid] = list(chain)
            structure(body, f"{prefix}{n}_{k}_", path + (n, k), chain + (cid,), found)
    return found


def layered_svg(graph):
    """SVG text of `graph` drawn by the layered layout."""
    block = _layout(graph, "n")
    centre = {i: (x + w / 2, y, y + h) for i, x, y, w, h, _, _ in block.boxes}
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{block.width:.0f}pt" '
            f'height="{block.height:.0f}pt" viewBox="0 0 {block.width:.0f} '
            f'{block.height:.0f}">'),
           ('<defs><marker id="adkit-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z"/>'
            '</marker></defs>'), '<g id="graph0" class="graph">']
    for cid, x, y, w, h, label in block.clusters:
        out.append(f'<g class="cluster"><title>{escape(cid)}</title><rect x="{x:.1f}" '
                   f'y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" fill="none" '
                   f'stroke="#7a7a7a" stroke-dasharray="5,2"/><text x="{x + 6:.1f}" '
                   f'y="{y + 14:.1f}" font-size="12">{escape(label)}</text></g>')
    for a, b in block.edges:
        (x1, _, y1), (x2, y2, _) = centre[a], centre[b]
        out.append(f'<g class="edge"><title>{escape(a)}-&gt;{escape(b)}</title>'
                   f'<path d="M{x1:.1f},{y1:.1f}L{x2:.1f},{y2:.1f}" stroke="#444" '
                   'fill="none" marker-end="url(#adkit-arrow)"/></g>')
    for i, x, y, w, h, lines, kind in block.boxes:
        texts = "".join(
            f'<text x="{x + w / 2:.1f}" y="{y + 18 + k * _LINE:.1f}" text-anchor="middle" '
            f'font-size="12" font-family="Helvetica,sans-serif">{escape(s)}</text>'
            for k, s in enumerate(lines))
        out.append(f'<g class="node"><title>{escape(i)}</title><rect x="{x:.1f}" '
                   f'y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" '
                   f'fill="{_FILL[kind]}" stroke="#333"/>{texts}</g>')
    out.append("</g></svg>")
    return "\n".join(out)

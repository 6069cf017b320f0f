"""The forward graph beside a graph derived from it, in one picture.

Owns: `pair_to_dot(forward, derived)` and `render_pair(forward, derived, path)`: the
two graphs as clusters side by side, with dashed links from each forward node to the
derived nodes that recompute it (grey) and to the gradients or tangents of its values
(orange). The links come from the `origin` the vjp/jvp/vmap passes put on each node
(passes/provenance.py): `derived` must come from `forward` through those passes (and
any clean-up passes, which keep origins). Does not: lay out by itself (Graphviz does).
"""
from . import rendering
from .pictures import MAX_NODES, Drawer, header, quote

_LINK = {"recomputes": 'style=dashed, color="#8a8a8a", arrowhead=none, constraint=false',
         "derivative": 'style=dashed, color="#d0622a", constraint=false'}


def pair_to_dot(forward, derived, name="adkit_pair", titles=("forward", "derived"),
                max_nodes=MAX_NODES):
    """Graphviz text: `forward` on the left, `derived` on the right, linked."""
    drawer = Drawer(max_nodes)
    lines = []
    scenes = []
    for prefix, graph, title in (("f", forward, titles[0]), ("d", derived, titles[1])):
        lines += [f"  subgraph cluster_{prefix} {{",
                  f'    label={quote(title)}; fontsize=14; style="rounded"; color="#bbbbbb";']
        lines += drawer.draw(graph, prefix, "    ")
        lines.append("  }")
        scenes.append(drawer.last)
    lines += links(*scenes)
    return "\n".join(header(name, drawer.notes) + drawer.legend("  ") + lines + ["}"]) + "\n"


def links(fwd, der):
    """DOT edges from forward nodes to what corresponds to them in the derived graph."""
    lines, seen = [], set()
    g = der.graph
    for n in g.topo_order():
        origin = g.nx.nodes[n].get("origin")
        # outputs are left unlinked: what computes them is linked already
        if origin is None or not _drawn(der, n) or g.nx.nodes[n]["kind"] == "output":
            continue
        if origin.role in ("forward", "batched") and origin.source in fwd.graph.nx:
            _link(lines, seen, fwd, origin.source, der, n, "recomputes")
        primal = origin.primal and g.nx.nodes.get(origin.primal[0], {}).get("origin")
        if primal is not None and primal.source in fwd.graph.nx and \
                origin.role in ("backward", "tangent"):
            _link(lines, seen, fwd, primal.source, der, n, "derivative")
    return lines


def _drawn(scene, n):
    return n not in scene.folded


def _link(lines, seen, fwd, u, der, v, kind):
    if not _drawn(fwd, u):
        return
    src, dst = fwd.dot_id(u), der.dot_id(v)
    if (src, dst) not in seen:
        seen.add((src, dst))
        lines.append(f"  {src} -> {dst} [{_LINK[kind]}];")


def render_pair(forward, derived, path, backend="auto", **options):
    """Write the side-by-side picture to `path` (.svg, .png, .pdf or .dot; see
    Graph.render for the backends)."""
    return rendering.write_picture(pair_to_dot(forward, derived, **options), path, backend)

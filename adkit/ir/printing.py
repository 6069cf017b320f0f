"""Printing a Graph, and the picture functions its methods call.

Owns: the SSA listing (`str(graph)`, in the spirit of a jaxpr), with the bodies of loops,
branches and fused kernels listed, indented, under their node. `to_dot`, `render` and
`to_svg` (what `Graph.to_dot`/`render`/`_repr_svg_` call) are here as thin calls into
pictures.py (what is drawn) and rendering.py (which Graphviz draws it). Names of values
and ops come from names.py, shared with the pictures. Does not: change graphs. The
listing is part of the API (a golden test pins it):

    { lambda ; a:f32[3,4] b:f32[4]. let
        c:f32[3,4] = mul a b
        d:f32[] = sum[dim=None keepdim=False] c
      in (d) }
"""
from . import pictures, rendering
from .names import (format_param, format_spec, name_values, node_bodies, node_line,
                    op_name)

__all__ = ["to_text", "to_dot", "render", "to_svg", "format_spec", "format_param",
           "name_values", "node_bodies", "node_line", "op_name"]


def to_text(graph, indent=""):
    """The SSA listing; the bodies of loops, branches and fused kernels are listed,
    indented, under their node."""
    names = name_values(graph)
    order = graph.topo_order()
    consts = [n for n in order if graph.nx.nodes[n]["kind"] == "const"]
    const_part = " ".join(f"{names[(n, 0)]}:{format_spec(graph.specs_of(n)[0])}"
                          for n in consts)
    input_part = " ".join(f"{names[(n, 0)]}:{format_spec(graph.specs_of(n)[0])}"
                          for n in graph.inputs)
    lines = ["{ lambda " + (const_part + " " if const_part else "") + "; " + input_part +
             ". let"]
    for n in order:
        data = graph.nx.nodes[n]
        if data["kind"] != "op":
            continue
        lines.append(indent + "    " + node_line(graph, n, names))
        for name, body in node_bodies(data):
            inner = indent + "      " + " " * (len(name) + 3)
            lines.append(indent + f"      {name} = " + to_text(body, inner))
    results = []
    for n in graph.outputs:
        (_, u, out), = graph.args_of(n)
        results.append(names[(u, out)])
    lines.append(indent + "  in (" + ", ".join(results) + ") }")
    return "\n".join(lines)


def to_dot(graph, name="adkit", max_nodes=pictures.MAX_NODES, collapse=True):
    """Graphviz text of the graph's picture (see adkit/ir/pictures.py)."""
    return pictures.to_dot(graph, name, max_nodes=max_nodes, collapse=collapse)


def render(graph, path, backend="auto", **picture_options):
    """Write the picture to `path`; the extension picks the format (.svg, .png, .pdf,
    or .dot for the Graphviz text itself). `backend`: "auto" (Graphviz's `dot` when on
    PATH, else the WebAssembly Graphviz from PyPI), "dot" or "wasm"."""
    return rendering.write_picture(to_dot(graph, **picture_options), path, backend)


def to_svg(graph):
    """SVG text of the picture, or None when no Graphviz can draw it."""
    return rendering.svg_or_none(to_dot(graph))

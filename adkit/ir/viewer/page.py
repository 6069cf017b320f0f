"""The viewer's HTML: one self-contained page of graphs, and the notebook view of one.

Owns: `picture(graph)` (the SVG to show and which layout made it), `page(graphs)`,
`view(*graphs, path=, titles=, open=)`, `notebook_html(graph)`. The page holds
everything inline (SVG, CSS, script, node data as JSON): no CDN, no network.
Does not: render Graphviz text (printing's renderer does), or know its labels: hover data
is keyed by node id (nodes.py).
"""
import json
import os
import re
import tempfile
import webbrowser
from html import escape

from .. import printing
from . import assets, layout, nodes

_TITLE = re.compile(r"<title>([^<]*)</title>")


def _check_graphs(graphs):
    if not graphs:
        raise TypeError("view() needs at least one Graph (e.g. ak.trace(f, x))")
    for g in graphs:
        if not (hasattr(g, "nx") and hasattr(g, "topo_order")):
            raise TypeError(f"view() takes Graphs (made by ak.trace or a pass), got "
                            f"{type(g).__name__}")


def _strip_prolog(svg):
    """The <svg> element alone (an XML declaration or DOCTYPE cannot sit inside HTML)."""
    return svg[svg.index("<svg"):]


def picture(graph):
    """(SVG text, structure, layout name, note): Graphviz's picture when a renderer is
    there, with its ids tied to the graph's nodes (nodes.dot_structure), else the
    viewer's own layered drawing; `note` says why the own drawing was used."""
    try:
        svg = printing.to_svg(graph)
    except Exception as e:  # noqa: BLE001 (a failing renderer must not cost the viewer)
        svg, note = None, f"the Graphviz renderer failed ({type(e).__name__}: {e})"
    else:
        note = "no Graphviz renderer is installed"
    if svg:
        found = nodes.dot_structure(graph.to_dot(), graph)
        titles = set(_TITLE.findall(svg))
        if found["nodes"] and all(i in titles for i in found["chains"]):
            return _strip_prolog(svg), found, "graphviz", None
        note = "the picture's node ids are not those of its Graphviz text"
    return (layout.layered_svg(graph), layout.structure(graph), "layered",
            f"drawn by adkit's own layout: {note}")


def _panel(graph, title, index):
    """One panel's HTML and its data (for the page's script)."""
    svg, structure, how, note = picture(graph)
    data = {"title": title, "layout": how, **nodes.panel_data(graph, structure)}
    note_html = f'<p class="adkit-note">{escape(note)}</p>' if note else ""
    html = (f'<section class="adkit-panel" data-panel="{index}" data-layout="{how}">'
            f'<header><h2>{escape(title)}</h2><span class="adkit-tools">'
            '<button data-act="fit" title="fit to the panel">fit</button>'
            '<button data-act="expand" title="expand every body">expand all</button>'
            '<button data-act="collapse" title="collapse every body">collapse all'
            f'</button></span></header>{note_html}'
            f'<div class="adkit-viewport"><div class="adkit-stage">{svg}</div></div>'
            f'<details><summary>SSA listing</summary><pre>{escape(str(graph))}</pre>'
            '</details></section>')
    return html, data


def _json_for_script(value):
    """JSON that cannot close the <script> element it sits in."""
    return json.dumps(value).replace("</", "<\\/")


def page(graphs, titles=None):
    """The HTML text of the viewer page showing `graphs` side by side."""
    graphs = list(graphs)
    _check_graphs(graphs)
    titles = list(titles) if titles is not None else \
        ["graph" if len(graphs) == 1 else f"graph {i + 1}" for i in range(len(graphs))]
    if len(titles) != len(graphs):
        raise ValueError(f"view(): {len(titles)} titles for {len(graphs)} graphs")
    panels = [_panel(g, str(t), i) for i, (g, t) in enumerate(zip(graphs, titles))]
    data = {"panels": [d for _, d in panels]}
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>adkit: {escape(', '.join(map(str, titles)))}</title>"
            f"<style>{assets.CSS}</style></head><body>"
            '<p class="adkit-help">Drag to pan, mouse wheel to zoom, hover a node for '
            'its op, type and source line, click a fused kernel or a loop to open its '
            'body.</p>'
            f'<main class="adkit-panels">{"".join(h for h, _ in panels)}</main>'
            '<div id="adkit-tooltip" role="tooltip" hidden></div>'
            f'<script type="application/json" id="adkit-data">{_json_for_script(data)}'
            f"</script><script>{assets.SCRIPT}</script></body></html>\n")


def view(*graphs, path=None, titles=None, open=False):  # noqa: A002 (webbrowser's word)
    """Write one self-contained HTML page showing `graphs` side by side (e.g. a forward
    graph and its `passes.vjp`); return its path. Without `path`, a new file in the
    temporary directory. `open=True` also opens it in the default browser."""
    text = page(graphs, titles)
    if path is None:
        fd, path = tempfile.mkstemp(prefix="adkit-graph-", suffix=".html")
        os.close(fd)
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise FileNotFoundError(f"view: no directory {folder!r} to write {path!r} in")
    _write_text(path, text)
    if open:
        webbrowser.open("file://" + os.path.abspath(path))
    return path


def _write_text(path, text):
    # a function of its own: inside view(), `open` is the keyword argument
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def notebook_html(graph):
    """A Graph in a notebook: its picture (with the SSA listing behind a disclosure
    triangle) when a renderer is installed, else the listing."""
    listing = f'<pre class="adkit-listing">{escape(str(graph))}</pre>'
    try:
        svg = printing.to_svg(graph)
    except Exception:  # noqa: BLE001 (the listing is the view then)
        svg = None
    if not svg:
        return f'<div class="adkit-graph">{listing}</div>'
    return (f'<div class="adkit-graph"><div style="overflow:auto;max-height:40em">'
            f'{_strip_prolog(svg)}</div><details><summary>SSA listing</summary>'
            f'{listing}</details></div>')

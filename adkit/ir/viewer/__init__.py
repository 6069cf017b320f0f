"""Looking at graphs in notebooks and in the browser.

Owns: `view(graph, *more_graphs, path=None, titles=None, open=False)` (one
self-contained HTML page: pan, zoom, hover data, bodies that open on click, graphs side
by side) and `notebook_html(graph)` (a Graph's `_repr_html_`). Does not: make the
Graphviz text or run the renderer (printing.py), or change graphs.
"""
from .nodes import dot_structure, panel_data
from .page import notebook_html, page, picture, view

__all__ = ["dot_structure", "notebook_html", "page", "panel_data", "picture", "view"]

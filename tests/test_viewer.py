"""The viewer page and the notebook views, without a browser (test_viewer_browser.py
drives the page in chromium): what the page holds, how the picture's ids are tied to
graph nodes whatever naming the pictures use, the own layout, errors, and the HTML of
graphs, compiled programs and tensors."""
import json
import re
from pathlib import Path

import pytest

import adkit as ak
from adkit.ir import printing, viewer
from adkit.ir.viewer import layout


def model(x, w):
    y = x @ w
    h = ak.tanh(y)
    return (h * h).mean()


@pytest.fixture(scope="module")
def graphs():
    x, w = ak.randn(3, 4), ak.randn(4, 5)
    forward = ak.trace(model, x, w)
    return forward, ak.ir.passes.fuse(ak.ir.passes.vjp(forward))


def loop(x):
    return ak.while_loop(lambda c: c.sum() < 10, lambda c: c * 2, x)


def _page_data(text):
    found = re.search(r'<script type="application/json" id="adkit-data">(.*?)</script>',
                      text, re.DOTALL)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_viewer_page_is_self_contained(graphs, tmp_path):
    path = ak.ir.view(*graphs, path=tmp_path / "p.html", titles=["forward", "vjp"])
    text = Path(path).read_text()
    assert path == str(tmp_path / "p.html")
    assert "<link" not in text and "<img" not in text
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text)  # nothing fetched
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text
    assert text.count('class="adkit-panel"') == 2 and text.count("<svg") == 2
    data = _page_data(text)
    assert [p["title"] for p in data["panels"]] == ["forward", "vjp"]


def test_viewer_hover_data_names_op_type_and_source(graphs, tmp_path):
    forward, _ = graphs
    data = _page_data(Path(ak.ir.view(forward, path=tmp_path / "p.html")).read_text())
    tanh, = [r for r in data["panels"][0]["nodes"].values() if r["op"] == "tanh"]
    line = model.__code__.co_firstlineno + 2
    assert tanh["source"] == f"test_viewer.py:{line}"
    assert tanh["specs"] == ["f32[3,5]"] and tanh["shape"] == [[3, 5]]
    assert tanh["dtype"] == ["float32"] and "tanh" in tanh["line"]


def _old_style_dot(graph, prefix="n", lines=None):
    """Graphviz text with another naming (bodies `n<id>_<k>_<m>` in `cluster_n<id>_<k>_`,
    the fused node its own box) to show the viewer does not depend on one naming."""
    lines = ["digraph g {"] if lines is None else lines
    for n in graph.topo_order():
        lines.append(f'  {prefix}{n} [label="{{ x }}"];')
        data = graph.nx.nodes[n]
        for k, (_, body) in enumerate(printing.node_bodies(data) if data["kind"] == "op"
                                      else ()):
            lines.append(f'  subgraph cluster_{prefix}{n}_{k}_ {{ label="}}";')
            _old_style_dot(body, f"{prefix}{n}_{k}_", lines)
            lines.append("  }")
    for u, v in graph.nx.edges():
        lines.append(f"  {prefix}{u} -> {prefix}{v};")
    return "\n".join(lines + (["}"] if prefix == "n" else []))


@pytest.mark.parametrize("naming", ["printing", "old", "own layout"])
@pytest.mark.parametrize("which", ["fused vjp", "while_loop"])
def test_viewer_ties_every_id_to_its_node(graphs, naming, which):
    graph = graphs[1] if which == "fused vjp" else ak.trace(loop, ak.ones(3))
    found = (viewer.dot_structure(graph.to_dot(), graph) if naming == "printing" else
             viewer.dot_structure(_old_style_dot(graph), graph) if naming == "old" else
             layout.structure(graph))
    records, bodies = viewer.nodes.catalog(graph)
    assert set(found["clusters"].values()) == set(bodies)  # every body, once
    for i, path in found["nodes"].items():
        # an id's enclosing body clusters are exactly the bodies its path runs through
        around = [found["clusters"][c] for c in found["chains"][i] if c in found["clusters"]]
        assert around == [path[:k] for k in range(2, len(path), 2)], (i, path)
    ops = {records[p]["op"] for p in found["nodes"].values()}
    assert {"tanh", "matmul"} <= ops if which == "fused vjp" else {"lt", "mul", "sum"} <= ops
    data = viewer.panel_data(graph, found)
    assert all(r["record"]["op"] in ("fused_kernel", "while_loop")
               for r in data["clusters"].values())


def test_viewer_falls_back_to_its_own_layout(graphs, tmp_path, monkeypatch):
    def broken(graph):
        raise RuntimeError("dot crashed")
    for replacement, reason in ((lambda g: None, "no Graphviz renderer"),
                                (broken, "RuntimeError: dot crashed")):
        monkeypatch.setattr(printing, "to_svg", replacement)
        text = Path(ak.ir.view(graphs[1], path=tmp_path / "own.html")).read_text()
        assert 'data-layout="layered"' in text and reason in text
        data = _page_data(text)["panels"][0]
        titles = set(re.findall(r"<title>([^<]*)</title>", text))
        assert set(data["nodes"]) <= titles and set(data["clusters"]) <= titles


def test_viewer_show_and_errors(graphs, tmp_path):
    forward, _ = graphs
    path = forward.show()
    assert path.endswith(".html") and "adkit-data" in Path(path).read_text()
    with pytest.raises(TypeError, match="at least one Graph"):
        ak.ir.view()
    with pytest.raises(TypeError, match="takes Graphs"):
        ak.ir.view(model)
    with pytest.raises(ValueError, match="2 titles for 1 graphs"):
        ak.ir.view(forward, titles=["a", "b"])
    with pytest.raises(FileNotFoundError, match="no directory"):
        ak.ir.view(forward, path=tmp_path / "missing" / "p.html")


def test_graph_repr_html_picture_or_listing(graphs, monkeypatch):
    forward, _ = graphs
    if printing.to_svg(forward) is not None:
        html = forward._repr_html_()
        assert "<svg" in html and "<details>" in html and "tanh" in html
    monkeypatch.setattr(printing, "to_svg", lambda graph: None)
    html = forward._repr_html_()
    assert "<svg" not in html and html.count("<pre") == 1
    assert "tanh" in html and "&lt;" not in str(forward)  # the listing, escaped


def test_compiled_and_jitted_views():
    x, w = ak.randn(3, 4), ak.randn(4, 5)
    jitted = ak.jit(model)
    assert repr(jitted) == "<adkit.jit model: 0 signatures compiled>"
    assert "(call it, or .compile(*args), to compile one)" in jitted._repr_html_()
    compiled = jitted.compile(x, w)
    assert re.fullmatch(r"<adkit Compiled \(f32\[3,4\], f32\[4,5\]\) -> f32\[\]: "
                        r"\d+ native segments?, \d+ kernels?, \d+ numpy steps?>",
                        repr(compiled))
    html = compiled._repr_html_()
    for part in ("<details", "LLVM IR", "assembly", "kernel0", "optimized graph",
                 "native segment0"):
        assert part in html, part
    assert f"({compiled.llvm_ir.count(chr(10)) + 1} lines)" in html
    assert repr(jitted) == "<adkit.jit model: 1 signature compiled>"
    assert jitted._repr_html_().count('<div class="adkit-compiled">') == 1


def test_compiled_view_cuts_long_code(monkeypatch):
    from adkit.codegen import compiled_view
    monkeypatch.setattr(compiled_view, "MAX_CHARS", 100)
    compiled = ak.jit(model).compile(ak.randn(3, 4), ak.randn(4, 5))
    html = compiled._repr_html_()
    assert f"{len(compiled.llvm_ir) - 100} more characters: see .llvm_ir" in html


def test_tensor_repr_html():
    t = ak.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    html = t._repr_html_()
    assert "(2, 2)" in html and "float32" in html and "requires_grad=True" in html
    assert "1.," in html.replace(" ", "") and "4." in html
    html = (t * 2)._repr_html_()
    assert "grad_fn=&lt;MulBackward0&gt;" in html
    big = ak.zeros(2000)._repr_html_()
    assert "..." in big and len(big) < 2000  # abbreviated as repr abbreviates
    seen = []
    ak.trace(lambda a: seen.append(a._repr_html_()) or a, ak.ones(3))
    assert "(3,)" in seen[0] and "TracerTensor" in seen[0]

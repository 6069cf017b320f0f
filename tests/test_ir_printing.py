"""Printing a Graph: golden SSA listings (the printed form is API), a golden `to_dot`,
variable names past z, rendering with Graphviz's `dot` and its error messages."""
import shutil

import numpy as np
import pytest

import adkit as ak
from adkit.autograd import Function

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's `dot` program is not on PATH")


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


# ================================================================ Graphviz text
DOT_GOLDEN = """\
digraph adkit {
  rankdir=TB;
  node [fontname="Helvetica"];
  edge [fontname="Helvetica", fontsize=10];
  n0 [label="input 0: a\\nf32[3]", shape=ellipse, style=filled, fillcolor="#d7efd7"];
  n1 [label="mul\\nf32[3]", shape=box, style="rounded,filled", fillcolor="#dde8f8"];
  n2 [label="sort [descending=False dim=-1 stable=False]\\nf32[3] i64[3]", \
shape=box, style="rounded,filled", fillcolor="#dde8f8"];
  n3 [label="output 0", shape=doubleoctagon, style=filled, fillcolor="#f8e0c8"];
  n0 -> n1 [label="0"];
  n0 -> n1 [label="1"];
  n1 -> n2 [label="0"];
  n2 -> n3 [label="1→0"];
}
"""


def test_ir_printing_to_dot_golden():
    """to_dot(): op, shape and dtype on each node; inputs and outputs marked; edges
    labelled by position (out→pos from a multi-output node)."""
    assert small().to_dot() == DOT_GOLDEN


def test_ir_printing_to_dot_marks_constants():
    """A const node is labelled as a constant with its spec."""
    text = with_constants().to_dot()
    assert '[label="const b\\nf32[2,2]", shape=note' in text
    assert text.count("shape=note") == 2


# ================================================================ rendering
@needs_dot
@pytest.mark.parametrize("ext,magic", [("svg", b"<svg"), ("png", b"\x89PNG"),
                                       ("pdf", b"%PDF")])
def test_ir_printing_render_picture(tmp_path, ext, magic):
    """render('g.svg'/'.png'/'.pdf') runs dot and writes that format."""
    path = tmp_path / f"g.{ext}"
    assert small().render(str(path)) == str(path)
    data = path.read_bytes()
    assert magic in data[:400]


def test_ir_printing_render_dot_text(tmp_path, monkeypatch):
    """render('g.dot') writes the Graphviz text itself, without needing dot."""
    monkeypatch.setenv("PATH", str(tmp_path))
    path = tmp_path / "g.dot"
    small().render(str(path))
    assert path.read_text() == DOT_GOLDEN


@pytest.mark.parametrize("path", ["g.jpg", "g", "g.SVGZ"])
def test_ir_printing_render_unknown_extension(tmp_path, path):
    """An unknown extension is a ValueError listing the formats."""
    with pytest.raises(ValueError) as info:
        small().render(str(tmp_path / path))
    message = str(info.value)
    for ext in (".svg", ".png", ".pdf", ".dot"):
        assert ext in message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("ext", ["svg", "dot"])
def test_ir_printing_render_into_a_missing_directory(tmp_path, ext):
    """A path in a directory that does not exist is a FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="no directory .*missing"):
        small().render(str(tmp_path / "missing" / f"g.{ext}"))


@needs_dot
def test_ir_printing_render_reports_dot_failures(tmp_path):
    """When dot itself fails (here: the output path is a directory), its message is in
    the error."""
    (tmp_path / "g.svg").mkdir()
    with pytest.raises(RuntimeError, match="dot could not write"):
        small().render(str(tmp_path / "g.svg"))


@pytest.mark.parametrize("how", ["PATH", "which"])
def test_ir_printing_render_without_dot(tmp_path, monkeypatch, how):
    """Without Graphviz, render names the missing `dot` program and how to get it."""
    if how == "PATH":
        monkeypatch.setenv("PATH", str(tmp_path))
    else:
        monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError) as info:
        small().render(str(tmp_path / "g.svg"))
    message = str(info.value)
    assert "`dot`" in message and "Graphviz" in message and "to_dot()" in message
    assert not (tmp_path / "g.svg").exists()


@needs_dot
def test_ir_printing_repr_svg():
    """_repr_svg_ (for notebooks) returns SVG text of the picture."""
    svg = small()._repr_svg_()
    assert isinstance(svg, str) and "<svg" in svg and "</svg>" in svg
    assert "mul" in svg and "sort" in svg


def test_ir_printing_repr_svg_without_dot(tmp_path, monkeypatch):
    """Without dot, _repr_svg_ returns None so notebooks fall back to the text repr."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert small()._repr_svg_() is None

"""The public API for pass writers (shared/API.md, "Writing passes"): TensorSpec tracing,
the Graph helpers, the `ak.ir.ops` registry, user passes inside `ak.jit`, and the
examples/ passes (a rewrite, an analysis, a fusion) run as scripts and checked."""
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adkit as ak
from adkit.ir import Graph, GraphError, TensorSpec, Value, ops, passes

ROOT = Path(__file__).resolve().parent.parent
F32, F64 = ak.float32, ak.float64


# ================================================================ TensorSpec and trace
def test_ir_tensorspec_normalizes_shape_and_dtype():
    assert TensorSpec(3) == TensorSpec((3,), F32)  # the default dtype
    assert TensorSpec([2, np.int64(3)], "float64") == ((2, 3), F64)
    assert TensorSpec((2,), np.int32).dtype is ak.int32


@pytest.mark.parametrize("shape, found", [((2.5,), "2.5 (float)"), ((2, -1), "-1"),
                                          ((True,), "True (bool)"), ("ab", "'a'")])
def test_ir_tensorspec_rejects_bad_shapes(shape, found):
    with pytest.raises(TypeError, match="tuple of non-negative ints") as info:
        TensorSpec(shape)
    assert found in str(info.value)


def test_ir_trace_on_specs_matches_trace_on_tensors():
    def f(x, w):
        return (x @ w).tanh().sum(1)
    x, w = ak.randn(3, 4), ak.randn(4, 5)
    on_specs = ak.trace(f, TensorSpec((3, 4)), TensorSpec((4, 5)))
    assert str(on_specs) == str(ak.trace(f, x, w))
    np.testing.assert_allclose(on_specs(x, w).numpy(), f(x, w).numpy(), rtol=1e-6)


def test_ir_trace_specs_mixed_with_tensors_in_pytrees():
    def f(p, x):
        return p["w"] @ x + p["b"]
    g = ak.trace(f, {"w": TensorSpec((2, 3), F64), "b": ak.zeros(2, dtype=F64)},
                 TensorSpec((3,), F64))
    assert g.input_specs() == [((2, 3), F64), ((2,), F64), ((3,), F64)]
    p = {"w": ak.randn(2, 3, dtype=F64), "b": ak.randn(2, dtype=F64)}
    x = ak.randn(3, dtype=F64)
    np.testing.assert_allclose(g(p, x).numpy(), f(p, x).numpy())


# ================================================================ Graph helpers
def square_plus_double():
    """out = x * x + x * 2 (x: f64[3])."""
    return ak.trace(lambda x: x * x + x * 2, TensorSpec((3,), F64))


def test_ir_graph_nodes_and_op_nodes_in_topological_order():
    g = square_plus_double()
    assert g.nodes() == g.topo_order()
    assert g.nodes("input") == g.inputs and g.nodes("output") == g.outputs
    assert g.op_nodes() == g.nodes("op") == list(g.op_nodes)  # both forms
    assert [g.nx.nodes[n]["op"] for n in g.op_nodes()] == [ops.Mul, ops.Mul, ops.Add]


def test_ir_graph_args_and_users():
    g = square_plus_double()
    (x,), (square, double, total) = g.inputs, g.op_nodes()
    assert g.args(square) == [Value(x, 0), Value(x, 0)]  # x * x: both positions
    assert g.args(double) == [(x, 0)]  # 2 is a static argument, in params
    assert g.nx.nodes[double]["params"] == {"y": 2}
    assert g.users(x) == [square, double]
    assert g.users(total) == g.outputs
    assert g.users(Value(square, 0)) == [total]


def test_ir_graph_add_op_with_static_keywords_and_defaults():
    g = square_plus_double()
    (x,) = g.inputs
    s = g.add_op(ops.Sum, x, dim=0)
    assert g.nx.nodes[s]["params"] == {"dim": 0, "keepdim": False, "dtype": None}
    assert g.specs_of(s) == (((), F64),)
    w = g.add_op(ops.Where, g.add_op(ops.Gt, x, y=0.0), x=0.5, y=Value(x, 0))
    assert g.args(w)[1] == (x, 0) and g.nx.nodes[w]["params"] == {"x": 0.5}
    assert g.args_of(w)[1][0] == 2  # the tensor took position 2, after the static one
    g.validate()


def test_ir_graph_add_op_errors_name_the_problem():
    g = square_plus_double()
    (x,) = g.inputs
    with pytest.raises(TypeError, match="by keyword, e.g. y=2.0"):
        g.add_op(ops.Mul, x, 2.0)
    with pytest.raises(TypeError, match="Sum has no parameter"):
        g.add_op(ops.Sum, x, dims=0)
    with pytest.raises(GraphError, match="node 99 is not in the graph"):
        g.add_op(ops.Exp, 99)
    with pytest.raises(RuntimeError, match=r"add_op\(Matmul\) on f64\[3\], f64\[1,3\]: "
                                           "mat1 and mat2 shapes cannot be multiplied"):
        g.add_op(ops.Matmul, x, g.add_op(ops.Reshape, x, shape=(1, 3)))


def test_ir_graph_replace_all_uses_keeps_positions_and_avoids_cycles():
    g = square_plus_double()
    (x,), (square, double, total) = g.inputs, g.op_nodes()
    before = g.copy()
    plus = g.add_op(ops.Add, x, x)  # reads x itself: must keep reading it
    assert g.replace_all_uses(double, plus) == [total]
    assert g.args(total) == [(square, 0), (plus, 0)]
    assert g.users(double) == [] and g.args(plus) == [(x, 0), (x, 0)]
    relu = g.add_op(ops.Relu, x)  # new = f(old): every other reader moves
    assert g.replace_all_uses(x, relu) == [square, double, plus]  # dead double too
    assert g.args(relu) == [(x, 0)]
    g.validate()
    assert str(before) != str(g) and before.op_nodes() == [square, double, total]
    t = ak.tensor([-1.0, 2.0, 3.0], dtype=F64)
    r = t.relu()
    np.testing.assert_allclose(passes.dce(g)(t).numpy(), (r * r + r + r).numpy())


def test_ir_graph_replace_all_uses_checks_specs_before_moving_anything():
    g = square_plus_double()
    (x,), (square, double, total) = g.inputs, g.op_nodes()
    s = g.add_op(ops.Sum, x)
    before = sorted(g.nx.edges(keys=True))
    with pytest.raises(GraphError, match=r"f64\[3\] but node .* is f64\[\]"):
        g.replace_all_uses(double, s)
    assert sorted(g.nx.edges(keys=True)) == before


def test_ir_graph_replace_all_uses_multi_output():
    g = ak.trace(lambda x: x.max(1)[0] + 1.0, TensorSpec((2, 3), F64))
    (mx, add) = g.op_nodes()
    (x,) = g.inputs
    other = g.add_op(ops.Max, x, dim=1)
    assert g.replace_all_uses(mx, other) == [add]  # output 0 read, moved to output 0
    assert g.args(add) == [(other, 0)]
    assert g.replace_all_uses(Value(other, 0), Value(other, 0)) == []  # reads itself


# ================================================================ ak.ir.ops
def test_ir_ops_registry_by_class_and_listing_name():
    assert ops.Mul is ops["Mul"] is ops["mul"] is ak.ir.ops.lookup("mul")
    assert ops["sigmoid"] is ops.Sigmoid and ops["sum"] is ops.Sum
    assert ops["scan"].__name__ == "Scan" and ops["fused_kernel"] is passes.FusedKernel
    assert ops["index_put"] is type(ak.trace(
        lambda x, i: ak.index_put(x, (i,), x[i]), ak.randn(3),
        ak.tensor([0])).nx.nodes[2]["op"]) or "index_put" in ops
    listed = list(ops)
    assert len(listed) == len(ops) > 100 and ops.Exp in listed and "exp" in ops
    assert all(not c.__name__.startswith("_") for c in listed)


def test_ir_ops_every_traced_op_is_in_the_registry():
    def f(x):
        y, _ = x.max(0)
        return (x.exp().sum(1) + y).reshape(1, 3).T.softmax(0)
    g = ak.trace(f, TensorSpec((3, 3)))
    for n in g.op_nodes():
        op = g.nx.nodes[n]["op"]
        assert op in ops and ops[op.__name__] is op


def test_ir_ops_unknown_names_say_what_exists():
    with pytest.raises(KeyError, match="close: .*mul"):
        ops["mull"]
    with pytest.raises(AttributeError, match=r"ak.ir.ops\['mul'\]"):
        ops.Mull


def test_ir_ops_families_are_public():
    assert issubclass(ops.Exp, ops.UnaryElementwise) and issubclass(ops.Exp, ops.Elementwise)
    assert issubclass(ops.Mul, ops.BinaryElementwise)
    assert issubclass(ops.Sum, ops.Reduction) and not issubclass(ops.Sum, ops.Elementwise)
    assert issubclass(ops.Reshape, ops.ArrayFunction) and ops.Function is ak.autograd.Function


# ================================================================ user passes in jit
def _recording(calls):
    def record(graph):
        calls.append(str(graph))
        return graph.copy()
    return record


def test_jit_user_passes_replace_the_default_pipeline():
    """API.md: `passes` replaces jit's pipeline; ak.ir.passes.DEFAULT_PIPELINE is it,
    so [my_pass, *DEFAULT_PIPELINE] runs a pass before jit's own clean-up and fusion."""
    x = ak.randn(4)
    want = (x * 2).exp().sum().numpy()
    for extra, fused in (((), False), (ak.ir.passes.DEFAULT_PIPELINE, True)):
        calls = []
        f = ak.jit(lambda x: (x * 2).exp().sum(), passes=[_recording(calls), *extra])
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
        assert len(calls) == 1 and "fused_kernel" not in calls[0] and "mul[y=2]" in calls[0]
        assert ("fused_kernel" in str(f.lower(x))) == fused
        f(x)  # cached (lower shares the compile's graph): no second run
        assert len(calls) == 1


def test_default_pipeline_is_jits():
    passes = ak.ir.passes.DEFAULT_PIPELINE
    assert isinstance(passes, tuple) and ak.ir.passes.fuse in passes
    assert ak.ir.passes.dce in passes


def test_jit_user_pass_sees_the_gradient_graph():
    calls = []
    f = ak.jit(ak.func.grad(lambda x: x.sin().sum()), passes=[_recording(calls)])
    x = ak.randn(3, dtype=F64)
    np.testing.assert_allclose(f(x).numpy(), x.cos().numpy())
    assert "cos" in calls[0]


def test_jit_user_pass_under_grad_runs_on_each_compiled_graph():
    calls = []
    f = ak.jit(lambda x: x.sin().sum(), passes=[_recording(calls)])
    x = ak.randn(3, dtype=F64)
    np.testing.assert_allclose(ak.func.grad(f)(x).numpy(), x.cos().numpy())
    assert calls and any("cos" in c for c in calls)


def test_jit_changing_passes_recompiles():
    def strength(graph):
        g = graph.copy()
        for n in g.op_nodes():
            if g.nx.nodes[n]["op"] is ops.Mul and g.nx.nodes[n]["params"].get("y") == 2:
                (x,) = g.args(n)
                g.replace_all_uses(n, g.add_op(ops.Add, x, x))
        return g
    f = ak.jit(lambda x: x * 2)
    x = ak.randn(3)
    key = f._key((x,), {})
    assert "mul" in str(f.lower(x))
    f.passes = [strength, ak.ir.passes.dce]
    assert f._key((x,), {}) != key
    listing = str(f.lower(x))
    assert "add" in listing and "mul" not in listing
    np.testing.assert_allclose(f(x).numpy(), (x * 2).numpy())


def test_jit_user_pass_errors_name_the_pass():
    def broken(graph):
        raise ValueError("no such rule")
    with pytest.raises(ValueError, match=r"the pass .*broken, given to jit\(.*<lambda>, "
                                         r"passes=\[...\]\) raised ValueError: no such rule"):
        ak.jit(lambda x: x + 1, passes=[broken])(ak.randn(2))

    def forgets_return(graph):
        graph.copy()
    with pytest.raises(TypeError, match="forgets_return.* returned NoneType, not a Graph"):
        ak.jit(lambda x: x + 1, passes=[forgets_return])(ak.randn(2))

    def dangling(graph):
        g = graph.copy()
        g.nx.remove_node(g.inputs[0])
        return g
    with pytest.raises(GraphError, match="dangling.* returned a graph that does not validate"):
        ak.jit(lambda x: x + 1, passes=[dangling])(ak.randn(2))


@pytest.mark.parametrize("bad, message", [(lambda g: g, "not one function"),
                                          ([1], "item 0 is int")])
def test_jit_passes_argument_checked(bad, message):
    with pytest.raises(TypeError, match=message):
        ak.jit(lambda x: x, passes=bad)


def test_jit_passes_decorator_form():
    calls = []

    @ak.jit(passes=[_recording(calls)])
    def f(x):
        return x + 1
    f(ak.randn(2))
    assert len(calls) == 1


# ================================================================ examples
def _run_example(name):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_example_custom_pass_rewrites():
    out = _run_example("custom_pass.py")
    assert "same values" in out
    graph, new = runpy.run_path(str(ROOT / "examples" / "custom_pass.py"))["main"]()
    names = [ak.ir.printing.op_name(new.nx.nodes[n]["op"]) for n in new.op_nodes()]
    # x * 2 became x + x: the new add runs where the mul ran, before its first user
    assert names == ["matmul", "add", "sum", "mean", "add"]
    assert isinstance(graph, Graph) and len(graph.op_nodes()) == 7


def test_example_flop_count_analyses():
    out = _run_example("flop_count.py")
    assert "loss: 697,600 flops" in out
    results = runpy.run_path(str(ROOT / "examples" / "flop_count.py"))["main"]()
    per_node, peak = results["loss"]
    # 2*64*32*128 + 64*128 (tanh) + 2*64*128*10 + 64*10 (pow) + 64*10 (mean)
    assert [f for f, _ in per_node.values()] == [524288, 8192, 163840, 640, 640]
    # the inputs, then x @ w1 and its tanh live together (the product dies after tanh)
    inputs = 4 * (64 * 32 + 32 * 128 + 128 * 10)
    assert peak == inputs + 2 * 4 * 64 * 128
    assert sum(f for f, _ in results["gradient"][0].values()) > 2 * sum(
        f for f, _ in per_node.values())


def test_example_fused_op_fuses():
    out = _run_example("fused_op.py")
    assert "silu" in out and "same values and gradients" in out
    module = runpy.run_path(str(ROOT / "examples" / "fused_op.py"))
    graph, fused = module["main"]()
    assert module["count"](fused, module["Silu"]) == 1
    assert len(fused.op_nodes()) == 3 and len(graph.op_nodes()) == 4


def test_readme_pass_in_20_lines_runs_as_written():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### A pass in 20 lines"):]
    start = section.index("```python") + len("```python")
    code = section[start:section.index("```", start)]
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)
    x, w = ak.rand(4, 3, dtype=F64) + 0.5, ak.rand(3, 5, dtype=F64) + 0.5
    assert [ak.ir.printing.op_name(ns["new"].nx.nodes[n]["op"])
            for n in ns["new"].op_nodes()] == ["matmul", "add", "sum"]
    for fn in (ns["new"], ns["fast"]):
        np.testing.assert_allclose(fn(x, w).numpy(), ns["f"](x, w).numpy(), rtol=1e-12)

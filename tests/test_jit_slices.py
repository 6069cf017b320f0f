"""Gradients of slices under jit: the scatter of a basic key compiles to native strided
copies, a sum of slice scatters becomes one Assemble (simplify), a scatter at ints and
whole slices is an elementwise select (decompose) that fuses with the sum it feeds, two
chains meeting at one node fuse into one kernel, and a returned view (a vmapped result's
final permute) is handed out without a copy. Every case against eager values and
finite differences."""
import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.ir import passes
from adkit.ops.assemble import Assemble, disjoint


def rand(*shape, seed=0):
    return ak.tensor(np.random.default_rng(seed).uniform(-1, 1, shape))


def ops_of(graph):
    return [graph.nx.nodes[n]["op"].__name__ for n in graph.op_nodes]


def numpy_steps(jitted, *args):
    return [type(s).__name__ for s in jitted.compile(*args).steps
            if type(s).__name__ == "NumpyStep"]


def pieces(a):
    """A function reading several slices and elements of a (the gradient sums their
    scatters)."""
    return (a[1:3].sum() * a[0] + a[0] * 2 + (a[3:] ** 2).sum() + a[1:3].prod() +
            a[-1].sin())


def camera_like(cams):
    """ADBench's camera slices, per row."""
    return ((cams[:, 0:3] ** 2).sum() + (cams[:, 3:6] * cams[:, 6:7]).sum() +
            cams[:, 7:9].exp().sum() + (cams[:, 9] * cams[:, 10]).sum())


def finite_differences(f, x, eps=1e-6):
    base = x.numpy()
    grad = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += eps
        minus[idx] -= eps
        grad[idx] = (f(ak.tensor(plus)).item() - f(ak.tensor(minus)).item()) / (2 * eps)
    return grad


@pytest.mark.parametrize("f,shape", [(pieces, (6,)), (camera_like, (4, 11))])
def test_slice_gradients_under_jit_are_native_and_right(f, shape):
    x = rand(*shape)
    g = F.grad(f)
    got = ak.jit(g)(x)
    np.testing.assert_allclose(got.numpy(), g(x).numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.numpy(), finite_differences(f, x), rtol=1e-6, atol=1e-8)
    assert numpy_steps(ak.jit(g), x) == []


def test_a_sum_of_slice_scatters_becomes_one_assemble():
    x = rand(4, 11)
    graph = passes.dce(passes.simplify(ak.trace(F.grad(camera_like), x)))
    assert ops_of(graph).count("Assemble") == 1 and "IndexScatter" not in ops_of(graph)
    np.testing.assert_allclose(graph(x).numpy(), F.grad(camera_like)(x).numpy(), rtol=1e-14)


def test_overlapping_keys_are_not_merged():
    x = rand(6)
    f = lambda a: (a[0:3] ** 2).sum() + (a[2:5] ** 3).sum()
    graph = passes.dce(passes.simplify(ak.trace(F.grad(f), x)))
    assert "Assemble" not in ops_of(graph)
    np.testing.assert_allclose(ak.jit(F.grad(f))(x).numpy(), F.grad(f)(x).numpy(),
                               rtol=1e-14)


def test_disjoint_keys():
    assert disjoint((slice(0, 3),), (slice(3, 6),), (6,))
    assert not disjoint((slice(0, 3),), (slice(2, 6),), (6,))
    assert disjoint((slice(None), 0), (slice(None), -1), (4, 3))
    assert not disjoint((slice(None), 1), (1,), (4, 3))
    assert disjoint((Ellipsis, 0), (Ellipsis, slice(1, None)), (2, 4, 3))
    assert disjoint((None, 0), (1,), (4, 3))


def test_assemble_rules_match_a_sum_of_scatters():
    parts = [rand(2, 3, seed=1), rand(2, seed=2)]
    keys = ((slice(None), slice(0, 3)), (slice(None), 4))
    out = Assemble.apply((2, 6), keys, *parts)
    want = np.zeros((2, 6))
    want[:, 0:3], want[:, 4] = parts[0].numpy(), parts[1].numpy()
    np.testing.assert_array_equal(out.numpy(), want)
    ct = rand(2, 6, seed=3)
    grads = F.vjp(lambda a, b: Assemble.apply((2, 6), keys, a, b), *parts)[1](ct)
    np.testing.assert_array_equal(grads[0].numpy(), ct.numpy()[:, 0:3])
    np.testing.assert_array_equal(grads[1].numpy(), ct.numpy()[:, 4])
    _, tangent = F.jvp(lambda a, b: Assemble.apply((2, 6), keys, a, b), tuple(parts),
                       tuple(parts))
    np.testing.assert_array_equal(tangent.numpy(), want)
    batched = F.vmap(lambda a: Assemble.apply((6,), ((slice(0, 3),), (4,)), a, a[0]))(parts[0])
    want = np.zeros((2, 6))
    want[:, 0:3], want[:, 4] = parts[0].numpy(), parts[0].numpy()[:, 0]
    np.testing.assert_array_equal(batched.numpy(), want)


def test_a_scatter_at_ints_fuses_into_the_sum_it_feeds():
    x = rand(5, 3)
    f = lambda a: (a[:, 1] * a[:, 0]).sum() + (a[:, 1:] ** 2).sum()
    lowered = ak.jit(F.grad(f)).lower(x)
    assert "IndexScatter" not in ops_of(lowered)
    kernels = [lowered.nx.nodes[n]["params"]["graph"] for n in lowered.op_nodes
               if ops_of(lowered)[lowered.op_nodes.index(n)] == "FusedKernel"]
    # the select is computed in the kernel of the sum it feeds
    assert any({"Where", "Add"} <= set(ops_of(k)) for k in kernels)
    np.testing.assert_allclose(ak.jit(F.grad(f))(x).numpy(), F.grad(f)(x).numpy(),
                               rtol=1e-14)


def test_chains_meeting_at_a_node_fuse_into_one_kernel():
    x, y = rand(100), rand(100, seed=1)
    f = lambda x, y: (x.sin() * 2) + (y.cos() * 3)
    lowered = ak.jit(f).lower(x, y)
    assert ops_of(lowered) == ["FusedKernel"]
    np.testing.assert_allclose(ak.jit(f)(x, y).numpy(), f(x, y).numpy(), rtol=1e-14)


def test_a_returned_view_is_fresh_memory_not_a_copy():
    x = rand(5, 4)
    f = ak.jit(lambda x: (x.exp() * 2).t())
    first = f(x)
    assert not first._data.flags.c_contiguous  # the view itself: no copy at the end
    kept = first.numpy().copy()
    second = f(x * 2)  # the next call must not write into the memory `first` views
    np.testing.assert_array_equal(first.numpy(), kept)
    np.testing.assert_allclose(second.numpy(), ((x * 2).exp() * 2).t().numpy(), rtol=1e-14)


def test_values_differing_in_unit_dims_fuse_into_one_kernel():
    x, y = rand(3, 5), rand(5, seed=1)
    f = lambda x, y: ((x * 2).unsqueeze(2) + 1.0).sin().reshape(3, 5) * y  # noqa: E731
    lowered = ak.jit(f).lower(x, y)
    assert ops_of(lowered) == ["FusedKernel"]
    np.testing.assert_allclose(ak.jit(f)(x, y).numpy(), f(x, y).numpy(), rtol=1e-14)


@pytest.mark.parametrize("view", [lambda t: t.permute(2, 1, 0),  # swaps the two 3s
                                  lambda t: t.flip(0)],
                         ids=["permute", "flip"])
def test_views_that_reorder_elements_are_not_read_in_place(view):
    x = rand(3, 1, 3)
    f = lambda x: view((x * 2).exp()) + 1.0  # noqa: E731
    np.testing.assert_allclose(ak.jit(f)(x).numpy(), f(x).numpy(), rtol=1e-14)


def test_writing_slices_of_an_intermediate_is_native():
    x, v = rand(4, 5), rand(5, seed=1)

    def f(x, v):
        y = x * 2
        y[1:3] = v  # broadcast over the rows
        y[0, 1] = 7.0  # a number
        y[-1] = y[0] * 3  # a value read from the same tensor
        return y.sin()
    jitted = ak.jit(f)
    np.testing.assert_allclose(jitted(x, v).numpy(), f(x, v).numpy(), rtol=1e-14)
    assert numpy_steps(jitted, x, v) == []
    assert "index_put" in [ak.ir.printing.op_name(jitted.lower(x, v).nx.nodes[n]["op"])
                           for n in jitted.lower(x, v).op_nodes]
    g = F.grad(lambda x, v: f(x, v).sum(), argnums=(0, 1))
    for a, b in zip(ak.jit(g)(x, v), g(x, v)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-14)
    fd = finite_differences(lambda v: f(x, v).sum(), v)
    np.testing.assert_allclose(g(x, v)[1].numpy(), fd, rtol=1e-6, atol=1e-8)


def test_a_product_with_a_number_saves_no_operand_as_in_pytorch():
    # PyTorch's mul/div by a Python number keep nothing for backward, so writing the
    # tensor in place afterwards is fine (adkit raised a version error here)
    x = rand(4, 5).requires_grad_()
    y = x * 2
    scaled, halved = y[0] * 3, y[1] / 2
    y[0] = 1.0
    y[1] = 2.0
    (scaled.sum() + halved.sum() + y.sum()).backward()
    want = np.full((4, 5), 2.0)
    want[0], want[1] = 6.0, 1.0
    np.testing.assert_allclose(x.grad.numpy(), want)


def copy_kernels(jitted, *args):
    return [k for k in jitted.compile(*args).kernels if "[copy]" in repr(k)]


PARTS_IN_PLACE = {
    # every part a fused kernel's value read only by the cat / stack: written in place
    "cat": (lambda x: ak.cat([x.sin() * 2, x.exp() + 1, (x * x).cos()], 1), 0),
    "stack-rows": (lambda x: ak.stack([x.sin(), x.cos() * x], 0), 0),
    "stack-last-dim": (lambda x: ak.stack([x.sin(), x.cos() * x, x.tanh()], -1), 0),
    "reductions": (lambda x: ak.stack([x.sin().sum(1), (x * 3).amax(1)], 1), 0),
    "keepdim-sum-then-cat": (lambda x: ak.cat([x.exp().sum(1, keepdim=True), x * 2], 1), 0),
    "unit-view-part": (lambda x: ak.cat([(x[:, 0] * 2).unsqueeze(1), x.sin()], 1), 0),
    # parts that must still be copied: a mean (scaled after the sums), a part read twice,
    # an input, a part the graph also returns
    "mean-part": (lambda x: ak.stack([x.sin().mean(1), x.cos().sum(1)], 1), None),
    "part-read-twice": (lambda x: (lambda s: ak.cat([s, x], 1) * s.sum())(x.sin()), 1),
    "input-part": (lambda x: ak.cat([x, x.sin()], 0), 1),
    "returned-part": (lambda x: (lambda s: (ak.cat([s, x.cos()], 1), s))(x.sin() * 2), 1),
}


@pytest.mark.parametrize("name", PARTS_IN_PLACE)
def test_kernels_write_the_parts_of_cat_stack_and_assemble_in_place(name):
    """A fused kernel whose value only a cat, stack or Assemble reads writes it into its
    place in their result (Planner.destination): no copy kernel for it; values and
    gradients equal eager."""
    f, copies = PARTS_IN_PLACE[name]
    x = rand(5, 4)
    jf = ak.jit(f)
    got, want = jf(x), f(x)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-14)
    if copies is not None:
        assert len(copy_kernels(jf, x)) == copies
    loss = lambda x: sum((v ** 2).sum() for v in  # noqa: E731
                         (f(x) if isinstance(f(x), tuple) else (f(x),)))
    g = F.grad(loss)
    np.testing.assert_allclose(ak.jit(g)(x).numpy(), g(x).numpy(), rtol=1e-12, atol=1e-13)


def test_camera_gradient_parts_land_in_the_assembled_gradient():
    """The Assemble of camera-slice gradients (ADBench BA's pattern) is written by the
    kernels that make its parts; only the two parts that are columns of the input
    itself (the gradients of cams[:, 9] * cams[:, 10]) are copied."""
    x = rand(4, 11)
    jg = ak.jit(F.grad(camera_like))
    np.testing.assert_allclose(jg(x).numpy(), F.grad(camera_like)(x).numpy(), rtol=1e-12)
    assert len(jg.compile(x).kernels) == 6 and len(copy_kernels(jg, x)) == 2

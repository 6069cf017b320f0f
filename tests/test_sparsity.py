"""Sparse Jacobians and Hessians: static sparsity detection on the IR
(ak.ir.passes.sparsity / hessian_sparsity), coloring (ak.ir.passes.color) and the
compressed evaluation in ak.func (jacobian_sparsity, sparse_jacobian, sparse_hessian).
Every pattern and value is checked against the dense ak.func.jacfwd / hessian."""
import importlib
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adkit as ak

sparse_module = importlib.import_module("adkit.func.sparse")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "papers", "sparse_jacobians"))
import brusselator  # noqa: E402

RNG = np.random.default_rng(0)
C = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])
IDX = np.array([2, 0, 1, 1])


def _setitem(x):
    y = x * 1
    y[0:2] = x[2:4] * 2
    return y


def _copy_and_zero_through_views(x):
    y = x.exp()
    y[1:3].copy_(x[:2] * 3)
    y[3:].zero_()
    return y


def _squares_written_in(x):
    y = x * 1
    y[1:3].copy_(x[:2] ** 2)
    return y


def _write_after_views_were_taken(x):
    y = x.exp()
    first, column = y[0:2], y.reshape(5, 1)
    y[1:3].mul_(x[3:])  # first and column see the write
    return ak.cat([first, column[:, 0] * 2])


def _write_through_a_chain_of_views(x):
    y = x.reshape(2, 3) * 1
    row = y[1]
    row[0:2].mul_(x[0:2])
    return y.reshape(-1)


# (name, f, input shape, exact): exact means the pattern equals the dense Jacobian's
# nonzeros at a random point; otherwise it may hold entries that are zero there (the
# op's derivative depends on values: where, sort, max) but must never miss one
PATTERN_CASES = [
    ("slice_mul", lambda x: x[1:] * x[:-1], (6,), True),
    ("cat_sum", lambda x: ak.cat([x[1:], x.sum(0, keepdim=True)]), (5,), True),
    ("broadcast", lambda x: x * x[:, :1], (3, 4), True),
    ("unary", lambda x: x.exp().sin().tanh() - x.log1p().abs(), (2, 3), True),
    ("binary_div_pow", lambda x: x / x.flip(0) + x ** 3 + 2 ** x, (4,), True),
    ("sum_dim", lambda x: x.sum(1), (3, 4), True),
    ("mean_keepdim", lambda x: x.mean(0, keepdim=True), (3, 4), True),
    ("prod", lambda x: x.prod(1), (3, 4), True),
    ("var_logsumexp", lambda x: x.var(0) + x.logsumexp(0), (3, 4), True),
    ("amax", lambda x: x.amax(1), (3, 4), False),
    ("matmul", lambda x: x @ x.T, (3, 4), True),
    ("matmul_const_zeros", lambda x: ak.tensor(C) @ x, (3, 2), True),
    ("mv", lambda x: x[:, 0] @ x, (3, 3), True),
    ("mm_bmm", lambda x: ak.bmm(x, x.transpose(1, 2)) + ak.mm(x[0], x[1].T)[None], (2, 2, 2),
     True),
    ("einsum", lambda x: ak.einsum("ij,jk->ik", x, x.T.exp())
     + ak.einsum("ii->i", x[:, :3])[:, None], (3, 4), True),
    ("einsum_three", lambda x: ak.einsum("i,ij,j->i", x[0], x, x[1]), (3, 3), True),
    ("dot", lambda x: ak.dot(x, x.flip(0))[None], (3,), True),
    ("transpose", lambda x: x.transpose(0, 1).exp(), (3, 4), True),
    ("permute", lambda x: x.permute(2, 0, 1).sin(), (2, 3, 2), True),
    ("reshape_view_flatten", lambda x: x.reshape(4, 3)[:, 1:].flatten() * x.view(12)[:8],
     (3, 4), True),
    ("expand", lambda x: x[:, None].expand(4, 3) * x[None, :3].expand(4, 3), (4,), True),
    ("squeeze_unsqueeze", lambda x: x.unsqueeze(0).squeeze(0).exp(), (3,), True),
    ("flip", lambda x: x.flip(0) * x, (5,), True),
    ("stack", lambda x: ak.stack([x, x.flip(0)], 1), (4,), True),
    ("split", lambda x: x.split(2)[1] * 3, (6,), True),
    ("repeat", lambda x: x.repeat(2) * 2, (3,), True),
    ("gather", lambda x: x.gather(0, ak.tensor(IDX)), (3,), True),
    ("index_select", lambda x: x.index_select(0, ak.tensor(IDX)), (3,), True),
    ("index_tensor", lambda x: x[ak.tensor(IDX)], (3,), True),
    ("index_list", lambda x: x[[0, 2, 2]], (3,), True),
    ("setitem", _setitem, (5,), True),
    ("scatter", lambda x: ak.zeros(5, dtype=ak.float64).scatter(0, ak.tensor([0, 3]), x[:2]),
     (3,), True),
    ("inplace_through_views", _copy_and_zero_through_views, (5,), True),
    ("inplace_after_views", _write_after_views_were_taken, (5,), True),
    ("inplace_view_chain", _write_through_a_chain_of_views, (6,), True),
    ("outer", lambda x: ak.outer(x[:2], x[1:].exp()), (4,), True),
    ("sum_to_size", lambda x: x.sum_to_size((1, 4)), (3, 4), True),
    ("softmax", lambda x: ak.softmax(x, 1), (2, 3), True),
    ("log_softmax", lambda x: ak.log_softmax(x, 0), (2, 3), True),
    ("sort", lambda x: x.sort(1)[0], (2, 3), False),
    ("topk", lambda x: x.topk(2, 1)[0], (2, 4), False),
    ("max_dim", lambda x: x.max(1)[0], (2, 4), False),
    ("where", lambda x: ak.where(x > 0, x, x.flip(0)), (5,), False),
    ("comparison_no_derivative", lambda x: (x > 0).to(ak.float64) + x.floor() + x, (3,), True),
    ("to_dtype", lambda x: x.to(ak.float32).to(ak.float64) * 2, (3,), True),
    ("clamp", lambda x: x.clamp(-0.5, 0.5) + x.flip(0).clamp(min=x), (4,), False),
    ("softplus_neg", lambda x: -ak.nn.functional.softplus(x * 2), (4,), True),
    ("scatter_add", lambda x: x[:4].scatter_add(0, ak.tensor([0, 0, 3]), x[3:] * 2), (6,), True),
    ("index_add", lambda x: x[:, :3].index_add(1, ak.tensor([2, 0]), x[:, 3:]), (2, 5), True),
]


class _Opaque(ak.autograd.Function):
    """A user Function: no sparsity rule, so the pass assumes every element is read."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * 2

    @staticmethod
    def jvp(ctx, x_t):
        return x_t * 2


PATTERN_CASES.append(("user_function_fallback", lambda x: _Opaque.apply(x)[1:], (3,), False))


def _dense_nonzeros(f, x, n_rows):
    jac = ak.func.jacfwd(f)(x)
    return np.asarray(jac._data).reshape(n_rows, -1) != 0


@pytest.mark.parametrize("name,f,shape,exact", PATTERN_CASES, ids=[c[0] for c in PATTERN_CASES])
def test_sparsity_pattern_against_dense_jacobian(name, f, shape, exact):
    x = ak.tensor(RNG.standard_normal(shape))
    pattern = ak.ir.passes.sparsity(ak.trace(f, x))
    dense = _dense_nonzeros(f, x, pattern.shape[0])
    assert pattern.shape == dense.shape
    found = pattern.todense()
    assert not (dense & ~found).any(), f"{name}: the pattern misses nonzeros"
    if exact:
        np.testing.assert_array_equal(found, dense)
    else:  # conservative: allowed to hold more
        assert found.sum() >= dense.sum()


def test_sparsity_fallback_reads_everything():
    x = ak.tensor(RNG.standard_normal(3))
    pattern = ak.ir.passes.sparsity(ak.trace(lambda x: _Opaque.apply(x), x))
    assert pattern.todense().all()


W3 = RNG.standard_normal((3, 3))

LOOP_CASES = [  # (name, f, shape, exact)
    ("scan_elementwise", lambda x: ak.scan(lambda c, xi: (c, xi * 2), x[0], x)[1], (4,), True),
    ("scan_cumprod", lambda x: ak.scan(lambda c, xi: (c * xi, c), x[0], x)[1], (4,), True),
    ("scan_reverse", lambda x: ak.scan(lambda c, xi: (c + xi.sin(), c * xi), x[0], x,
                                       reverse=True)[1], (5,), True),
    ("scan_final_carry", lambda x: ak.scan(lambda c, xi: (c * xi, c), x[0], x)[0][None],
     (4,), True),
    ("scan_rows", lambda x: ak.scan(lambda c, xi: (c.flip(0) * xi, c[0] + xi), x[0], x)[1],
     (4, 2), True),
    ("scan_closure", lambda x: ak.scan(lambda c, xi: ((ak.tensor(W3) * x[0]) @ c + xi, c),
                                       x[0], x)[1], (4, 3), True),
    ("fori_loop", lambda x: ak.fori_loop(0, 3, lambda i, c: c[[1, 2, 0]] * c, x), (3,), True),
    ("cond_either_branch", lambda x: ak.cond(x.sum() > 0, lambda a: a * 2,
                                             lambda a: a.flip(0), x), (3,), False),
    ("while_loop_elementwise", lambda x: ak.while_loop(
        lambda state: state[0] < 3, lambda state: (state[0] + 1, state[1] * 2),
        (ak.tensor(0), x))[1], (3,), True),
    ("while_loop_pairs", lambda x: ak.while_loop(
        lambda state: state[0] < 2, lambda state: (state[0] + 1,
                                                   state[1][[0, 0, 2, 2]] * state[1]),
        (ak.tensor(0), x))[1], (4,), True),
    ("while_loop_shift", lambda x: ak.while_loop(  # 4 steps reach all 5 elements
        lambda state: state[0] < 4, lambda state: (state[0] + 1, ak.cat(
            [state[1][1:], state[1][:1]]) * state[1]), (ak.tensor(0), x))[1], (5,), True),
]


@pytest.mark.parametrize("name,f,shape,exact", LOOP_CASES, ids=[c[0] for c in LOOP_CASES])
def test_sparsity_through_loops_and_branches(name, f, shape, exact):
    test_sparsity_pattern_against_dense_jacobian(name, f, shape, exact)


def test_sparsity_of_while_loop_holds_what_any_number_of_steps_reach():
    """The trip count is a value: a final carry may hold what 0, 1, 2... steps put
    there, so a shift reaches every element even if this trace runs one step, while
    pairs stay pairs however many steps run."""
    def shifted(x):
        return ak.while_loop(lambda s: s[0] < 1, lambda s: (
            s[0] + 1, ak.cat([s[1][1:], s[1][:1]]) * s[1]), (ak.tensor(0), x))[1]

    def paired(x, steps):
        return ak.while_loop(lambda s: s[0] < steps, lambda s: (
            s[0] + 1, s[1][[0, 0, 2, 2]] * s[1] + s[1][[1, 1, 3, 3]]), (ak.tensor(0), x))[1]
    x = ak.zeros(5, dtype=ak.float64)
    assert ak.ir.passes.sparsity(ak.trace(shifted, x)).todense().all()
    want = np.kron(np.eye(2, dtype=bool), np.ones((2, 2), bool))
    for steps in (0, 1, 5):
        pattern = ak.ir.passes.sparsity(ak.trace(lambda x: paired(x, steps), x[:4]))
        np.testing.assert_array_equal(pattern.todense(), want)


def test_sparsity_of_a_while_loop_past_the_budget_reads_everything(monkeypatch):
    from adkit.control import sparsity_rules
    monkeypatch.setattr(sparsity_rules, "MAX_STEP_NODES", 1)
    f = LOOP_CASES[-2][1]  # pairs: exact within the budget
    pattern = ak.ir.passes.sparsity(ak.trace(f, ak.zeros(4, dtype=ak.float64)))
    assert pattern.todense().all()


def test_sparsity_pattern_rows_and_cols_are_sorted_int64():
    pattern = ak.ir.passes.sparsity(ak.trace(lambda x: x[1:] * x[:-1], ak.zeros(5)))
    assert pattern.rows.dtype == np.int64 and pattern.cols.dtype == np.int64
    keys = pattern.rows * pattern.shape[1] + pattern.cols
    assert (np.diff(keys) > 0).all()
    assert pattern.nnz == 8


def test_sparsity_with_respect_to_one_input_and_several_outputs():
    def f(x, y):
        return x * y[:3], (y[1:] * 2).exp()

    x, y = ak.tensor(RNG.standard_normal(3)), ak.tensor(RNG.standard_normal(4))
    graph = ak.trace(f, x, y)
    wrt_y = ak.ir.passes.sparsity(graph, wrt=1)
    assert wrt_y.shape == (6, 4)
    want = np.zeros((6, 4), bool)
    want[[0, 1, 2], [0, 1, 2]] = True
    want[[3, 4, 5], [1, 2, 3]] = True
    np.testing.assert_array_equal(wrt_y.todense(), want)
    both = ak.ir.passes.sparsity(graph)
    assert both.shape == (6, 7)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3),
       st.lists(st.booleans(), min_size=3, max_size=3), st.integers(0, 2))
def test_sparsity_of_broadcasting_binary_ops(shape, keep, op_index):
    """x (the full shape) against y (some dims squeezed to 1, some leading dims
    dropped): both patterns exact, for add, mul and atan2."""
    y_shape = tuple(n if k else 1 for n, k in zip(shape, keep))[len(shape) // 2:]
    op = (ak.add, ak.mul, ak.atan2)[op_index]
    x = ak.tensor(RNG.standard_normal(shape))
    y = ak.tensor(RNG.standard_normal(y_shape) + 2.0)
    graph = ak.trace(lambda a, b: op(a, b).exp(), x, y)
    for wrt, arg in ((0, x), (1, y)):
        pattern = ak.ir.passes.sparsity(graph, wrt=wrt)
        jac = ak.func.jacfwd(lambda a, b: op(a, b).exp(), argnums=wrt)(x, y)
        dense = np.asarray(jac._data).reshape(pattern.shape) != 0
        np.testing.assert_array_equal(pattern.todense(), dense)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_sparsity_of_reductions_over_random_dims(shape, data):
    dims = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    keepdim = data.draw(st.booleans())
    reduce = data.draw(st.sampled_from(["sum", "mean", "prod", "amax", "logsumexp"]))

    def f(x):
        return getattr(x, reduce)(dims, keepdim=keepdim).reshape(-1)

    x = ak.tensor(RNG.standard_normal(shape))
    pattern = ak.ir.passes.sparsity(ak.trace(f, x))
    dense = _dense_nonzeros(f, x, pattern.shape[0])
    if reduce == "amax":  # the derivative picks one element: the pattern holds the rest
        assert not (dense & ~pattern.todense()).any()
    else:
        np.testing.assert_array_equal(pattern.todense(), dense)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_sparsity_of_random_slices_and_permutations(shape, data):
    key = tuple(slice(data.draw(st.integers(0, n - 1)), None, data.draw(st.integers(1, 2)))
                for n in shape)
    order = data.draw(st.permutations(range(len(shape))))

    def f(x):
        return (x[key].permute(*order) * 2).flip(0).reshape(-1)

    x = ak.tensor(RNG.standard_normal(shape))
    pattern = ak.ir.passes.sparsity(ak.trace(f, x))
    np.testing.assert_array_equal(pattern.todense(), _dense_nonzeros(f, x, pattern.shape[0]))


HESSIAN_CASES = [
    ("separable", lambda x: (x.exp() * x).sum(), (5,)),
    ("chain", lambda x: (x[1:] * x[:-1]).sum() + (x ** 2).sum(), (6,)),
    ("linear_parts", lambda x: x.sum() * 3 + (x[:2] * x[2:4]).sum(), (5,)),
    ("matmul", lambda x: (x[:2] @ x[2:4].T).sin().sum(), (4, 2)),
    ("dense", lambda x: x.sum() ** 2, (4,)),
    ("einsum_three", lambda x: ak.einsum("i,ij,j->", x[0], x, x[2]), (3, 3)),
    ("inplace_write", lambda x: (_squares_written_in(x) * x.flip(0)).sum(), (5,)),
    ("inplace_mul", lambda x: _write_through_a_chain_of_views(x).sum(), (6,)),
    ("softmax", lambda x: ak.log_softmax(x, 1)[:, 0].sum(), (3, 2)),
]


@pytest.mark.parametrize("name,f,shape", HESSIAN_CASES, ids=[c[0] for c in HESSIAN_CASES])
def test_hessian_sparsity_never_misses(name, f, shape):
    x = ak.tensor(RNG.standard_normal(shape))
    pattern = ak.ir.passes.hessian_sparsity(ak.trace(f, x))
    n = x.numel()
    dense = np.asarray(ak.func.hessian(f)(x)._data).reshape(n, n) != 0
    found = pattern.todense()
    assert not (dense & ~found).any(), f"{name}: the Hessian pattern misses nonzeros"
    np.testing.assert_array_equal(found, found.T)


def test_hessian_sparsity_is_exact_for_products_and_unary():
    f = HESSIAN_CASES[1][1]
    x = ak.tensor(RNG.standard_normal(6))
    pattern = ak.ir.passes.hessian_sparsity(ak.trace(f, x))
    dense = np.asarray(ak.func.hessian(f)(x)._data) != 0
    np.testing.assert_array_equal(pattern.todense(), dense)  # tridiagonal
    linear = ak.ir.passes.hessian_sparsity(ak.trace(lambda x: (x * 3).sum(), x))
    assert linear.nnz == 0


# ---------------------------------------------------------------- coloring
def _random_pattern(n_rows, n_cols, density, seed, symmetric=False):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_rows, n_cols)) < density
    if symmetric:
        mask = mask | mask.T | np.eye(n_rows, dtype=bool)
    return ak.func.SparsityPattern.from_dense(mask)


def _is_star_coloring_brute_force(mask, colors):
    """Neighbors differ, and no path a - b - c - d (distinct) is two-colored."""
    n = mask.shape[0]
    adj = mask & ~np.eye(n, dtype=bool)
    if any(colors[i] == colors[j] for i, j in zip(*np.nonzero(adj))):
        return False
    for b, c in zip(*np.nonzero(adj)):
        for a in np.nonzero(adj[b])[0]:
            for d in np.nonzero(adj[c])[0]:
                if len({a, b, c, d}) == 4 and colors[a] == colors[c] and colors[b] == colors[d]:
                    return False
    return True


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.floats(0.0, 0.8), st.integers(0, 10 ** 6))
def test_column_and_row_colorings_are_valid(n_rows, n_cols, density, seed):
    pattern = _random_pattern(n_rows, n_cols, density, seed)
    dense = pattern.todense()
    for kind in ("column", "row"):
        colors = ak.ir.passes.color(pattern, kind)
        assert colors.dtype == np.int64
        assert ak.ir.passes.check_coloring(pattern, colors, kind)
        lines = dense if kind == "column" else dense.T
        for line in lines:  # independent check: no row holds two columns of one color
            used = colors[np.nonzero(line)[0]]
            assert len(set(used)) == used.size


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10), st.floats(0.0, 0.7), st.integers(0, 10 ** 6))
def test_star_coloring_is_valid(n, density, seed):
    pattern = _random_pattern(n, n, density, seed, symmetric=True)
    colors = ak.ir.passes.color(pattern, "star")
    assert _is_star_coloring_brute_force(pattern.todense(), colors)
    assert ak.ir.passes.check_coloring(pattern, colors, "star")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.floats(0.0, 0.8), st.integers(0, 10 ** 6))
def test_auto_mode_picks_what_coloring_both_ways_would(n_rows, n_cols, density, seed):
    pattern = _random_pattern(n_rows, n_cols, density, seed)
    color = ak.ir.passes.color
    by_column, by_row = color(pattern, "column"), color(pattern, "row")
    want = ("rev", by_row) if by_row.max(initial=-1) < by_column.max(initial=-1) \
        else ("fwd", by_column)
    mode, colors = sparse_module._fewer_colors(pattern, color)
    assert mode == want[0]
    np.testing.assert_array_equal(colors, want[1])


def test_auto_mode_skips_a_coloring_that_cannot_win():
    """Bundle adjustment's shape: a few columns (a camera's) in every row, the rest in
    one or two rows each. Each row coloring needs a color per row (every row shares the
    camera's columns), so only the columns are colored (the row coloring, quadratic
    in the rows sharing a column, took 2 minutes at ba1)."""
    n_obs, n_point_cols = 400, 3
    rows = np.repeat(np.arange(n_obs), 2 + n_point_cols)
    point_cols = 2 + np.arange(n_obs)[:, None] * n_point_cols + np.arange(n_point_cols)
    cols = np.concatenate([np.tile([0, 1], (n_obs, 1)), point_cols], 1).reshape(-1)
    pattern = ak.func.SparsityPattern((n_obs, 2 + n_obs * n_point_cols), rows, cols)
    kinds = []

    def color(p, kind):
        kinds.append(kind)
        return ak.ir.passes.color(p, kind)
    mode, colors = sparse_module._fewer_colors(pattern, color)
    assert (mode, kinds, colors.max() + 1) == ("fwd", ["column"], 5)
    transposed = pattern.transpose()  # the same pattern the other way: rows win
    kinds.clear()
    assert sparse_module._fewer_colors(transposed, color)[0] == "rev"
    assert kinds == ["row"]


def test_check_coloring_rejects_invalid_colorings():
    tridiagonal = ak.func.SparsityPattern.from_dense(
        np.eye(6, dtype=bool) | np.eye(6, k=1, dtype=bool) | np.eye(6, k=-1, dtype=bool))
    assert ak.ir.passes.color(tridiagonal).max() + 1 == 3
    assert not ak.ir.passes.check_coloring(tridiagonal, np.zeros(6, np.int64))
    alternating = np.arange(6) % 2  # distance-1 valid, but 0-1-2-3 has two colors
    assert not ak.ir.passes.check_coloring(tridiagonal, alternating, "star")
    assert not _is_star_coloring_brute_force(tridiagonal.todense(), alternating)
    with pytest.raises(ValueError, match="kind"):
        ak.ir.passes.color(tridiagonal, "diagonal")
    with pytest.raises(TypeError, match="SparsityPattern"):
        ak.ir.passes.color(np.eye(3))


# ---------------------------------------------------------------- sparse derivatives
_brusselator = brusselator.adkit_residual  # the 2-D Brusselator, papers/sparse_jacobians


def _chain(x):
    return ak.cat([x[1:] * x[:-1] + x[1:].sin(), x[:2] ** 2, (x * 2).sum(0, keepdim=True)])


@pytest.mark.parametrize("mode", ["auto", "fwd", "rev"])
@pytest.mark.parametrize("f,shape", [(_chain, (7,)), (_brusselator(4), (32,)),
                                     (lambda x: (ak.tensor(C) @ x).tanh(), (3, 2))],
                         ids=["chain", "brusselator", "const_matmul"])
def test_sparse_jacobian_matches_jacfwd(f, shape, mode):
    x = ak.tensor(RNG.standard_normal(shape))
    jac = ak.func.sparse_jacobian(f, mode=mode)(x)
    assert isinstance(jac, ak.func.SparseMatrix)
    dense = np.asarray(ak.func.jacfwd(f)(x)._data).reshape(jac.shape)
    np.testing.assert_allclose(jac.todense().numpy(), dense, rtol=1e-13, atol=1e-13)
    assert jac.values.shape == (jac.nnz,)


def test_sparse_jacobian_of_several_arguments_and_a_given_pattern():
    def f(a, b):
        return a * b[:3] + b[1:].exp()

    a, b = ak.tensor(RNG.standard_normal(3)), ak.tensor(RNG.standard_normal(4))
    ja, jb = ak.func.jacfwd(f, argnums=(0, 1))(a, b)
    want = np.concatenate([ja.numpy(), jb.numpy()], 1)
    for mode in ("fwd", "rev"):
        jac = ak.func.sparse_jacobian(f, argnums=(0, 1), mode=mode)(a, b)
        np.testing.assert_allclose(jac.todense().numpy(), want, rtol=1e-14)
    pattern = ak.func.jacobian_sparsity(f, a, b, argnums=1)
    assert pattern.shape == (3, 4) and pattern.nnz == 6
    given_pattern = ak.func.SparsityPattern.from_dense(np.ones((3, 4)))  # denser is fine
    jac = ak.func.sparse_jacobian(f, argnums=1, sparsity=given_pattern)(a, b)
    np.testing.assert_allclose(jac.todense().numpy(), jb.numpy(), rtol=1e-14)


def test_brusselator_pattern_colors_and_values():
    n = 8
    f = _brusselator(n)
    x = ak.tensor(RNG.random(2 * n * n))
    pattern = ak.func.jacobian_sparsity(f, x)
    dense = np.asarray(ak.func.jacfwd(f)(x)._data) != 0
    np.testing.assert_array_equal(pattern.todense(), dense)
    colors = ak.ir.passes.color(pattern, "column")
    assert ak.ir.passes.check_coloring(pattern, colors)
    assert colors.max() + 1 <= 12
    jac = ak.func.sparse_jacobian(f)(x)
    np.testing.assert_allclose(jac.todense().numpy(), ak.func.jacfwd(f)(x).numpy(),
                               rtol=1e-13, atol=1e-9)


HESSIAN_FUNCTIONS = [
    ("chain", lambda x: (x[1:] * x[:-1]).exp().sum() + (x ** 3).sum(), (7,)),
    ("arrow", lambda x: (x[0] * x[1:]).sin().sum() + (x ** 2).sum(), (6,)),
    ("rosenbrock", lambda x: (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum(),
     (8,)),
    ("grid", lambda x: (x[1:] * x[:-1]).sum() + (x[:, 1:] * x[:, :-1]).tanh().sum(), (3, 4)),
]


@pytest.mark.parametrize("name,f,shape", HESSIAN_FUNCTIONS,
                         ids=[h[0] for h in HESSIAN_FUNCTIONS])
def test_sparse_hessian_matches_hessian(name, f, shape):
    x = ak.tensor(RNG.standard_normal(shape))
    hess = ak.func.sparse_hessian(f)(x)
    n = x.numel()
    dense = np.asarray(ak.func.hessian(f)(x)._data).reshape(n, n)
    np.testing.assert_allclose(hess.todense().numpy(), dense, rtol=1e-12, atol=1e-12)
    found = ak.ir.passes.hessian_sparsity(ak.trace(f, x)).todense()
    assert not ((dense != 0) & ~found).any()


def test_sparse_hessian_uses_fewer_colors_than_columns_on_an_arrow():
    f = HESSIAN_FUNCTIONS[1][1]
    x = ak.tensor(RNG.standard_normal(12))
    pattern = ak.ir.passes.hessian_sparsity(ak.trace(f, x))
    colors = ak.ir.passes.color(pattern, "star")
    assert ak.ir.passes.check_coloring(pattern, colors, "star")
    assert colors.max() + 1 == 2  # the hub, then every leaf (a column coloring needs 12)
    assert ak.ir.passes.color(pattern, "column").max() + 1 == 12


def test_sparse_jacobian_and_hessian_compose_with_jit():
    f = _brusselator(4)
    x = ak.tensor(RNG.random(32))
    jitted = ak.jit(ak.func.sparse_jacobian(f))
    for _ in range(2):  # compile, then the cached compiled function
        jac = jitted(x)
        assert isinstance(jac, ak.func.SparseMatrix)
        np.testing.assert_allclose(jac.todense().numpy(), ak.func.jacfwd(f)(x).numpy(),
                                   rtol=1e-13, atol=1e-9)
    g = HESSIAN_FUNCTIONS[0][1]
    y = ak.tensor(RNG.standard_normal(7))
    hess = ak.jit(ak.func.sparse_hessian(g))(y)
    np.testing.assert_allclose(hess.todense().numpy(), ak.func.hessian(g)(y).numpy(),
                               rtol=1e-12, atol=1e-12)


def test_sparse_jacobian_traced_needs_no_values():
    graph = ak.trace(ak.func.sparse_jacobian(_chain), ak.zeros(7, dtype=ak.float64))
    assert len(graph.outputs) == 1  # the values; rows, cols and shape are static
    x = ak.tensor(RNG.standard_normal(7))
    (values,) = ak.ir.passes.dce(graph)(x)[:1]
    want = ak.func.sparse_jacobian(_chain)(x)
    np.testing.assert_allclose(values.numpy(), want.values.numpy(), rtol=1e-14)


def test_sparse_matrix_to_scipy():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    x = ak.tensor(RNG.standard_normal(7))
    jac = ak.func.sparse_jacobian(_chain)(x)
    converted = jac.to_scipy()
    assert isinstance(converted, scipy_sparse.csr_matrix)
    np.testing.assert_allclose(converted.toarray(), jac.todense().numpy())


def test_sparse_derivatives_reject_bad_input():
    x = ak.tensor(RNG.standard_normal(4))
    with pytest.raises(TypeError, match="single tensor"):
        ak.func.sparse_jacobian(lambda x: (x, x))(x)
    with pytest.raises(TypeError, match="single tensor"):
        ak.func.sparse_jacobian(lambda x: 3.0)(x)
    with pytest.raises(TypeError, match="must be a tensor"):
        ak.func.sparse_jacobian(lambda x: x)(np.ones(3).tolist())
    with pytest.raises(TypeError, match="scalar"):
        ak.func.sparse_hessian(lambda x: x * x)(x)
    with pytest.raises(ValueError, match="mode"):
        ak.func.sparse_jacobian(lambda x: x, mode="sideways")
    with pytest.raises(ValueError, match="shape"):
        wrong = ak.func.SparsityPattern.from_dense(np.ones((2, 2)))
        ak.func.sparse_jacobian(lambda x: x.exp(), sparsity=wrong)(x)


def test_sparsity_of_simplified_gradient_graphs_with_assemble():
    """simplify joins the gradients of disjoint slices into one Assemble node."""
    def f(x):
        return (x[:2] ** 2).sum() + (x[2:] ** 3).sum()

    x = ak.tensor(RNG.standard_normal(5))
    graph = ak.ir.passes.simplify(ak.trace(ak.func.grad(f), x))
    assert "Assemble" in [graph.nx.nodes[n]["op"].__name__ for n in graph.op_nodes]
    pattern = ak.ir.passes.sparsity(graph)
    dense = np.asarray(ak.func.hessian(f)(x)._data) != 0
    np.testing.assert_array_equal(pattern.todense(), dense)


def test_cat_and_stack_with_a_constant_part_leave_its_rows_empty():
    """The parts of a cat or a stack that carry no derivative (constants) read
    nothing: their rows of the Jacobian are empty, whatever the other parts hold."""
    c = ak.tensor(np.arange(6.0).reshape(2, 3))

    def f(x):
        return ak.cat([c, x * x, c], 0).sum(1) + ak.stack([x, c], 0)[1:].sum()
    x = ak.tensor(np.ones((2, 3)))
    found = ak.ir.passes.sparsity(ak.trace(f, x)).todense()
    dense = ak.func.jacfwd(f)(x).numpy().reshape(6, 6) != 0
    assert found.shape == dense.shape and not (dense & ~found).any()
    assert not found[:2].any() and not found[4:].any()

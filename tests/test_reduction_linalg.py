"""Reductions and linear algebra: what the op table cannot express. PyTorch's semantics
(return types, ties, zeros, error messages, einsum's equation language) checked against
torch itself where it is installed."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import gradcheck, gradgradcheck
from adkit.ops import extrema as ex
from adkit.ops import linalg as la
from adkit.ops import reduction as rd


def _torch():
    return pytest.importorskip("torch")


def _pair(arr, requires_grad=True):
    """The same float64 data as an adkit tensor and a torch tensor."""
    torch = _torch()
    arr = np.asarray(arr, dtype=np.float64)
    return (ak.tensor(arr, requires_grad=requires_grad),
            torch.tensor(arr, requires_grad=requires_grad))


def _grads(out, inputs):
    return ak.autograd.grad(out, inputs)


def _assert_close(a, t, atol=1e-10):
    np.testing.assert_allclose(np.asarray(a.detach().numpy() if isinstance(a, ak.Tensor) else a),
                               t.detach().numpy(), atol=atol, rtol=1e-10)


def _error(fn, *args, **kwargs):
    """The (type, message) fn raises."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - we compare what each library raises
        return type(e).__name__, str(e).split("\n")[0]
    raise AssertionError("no error raised")


# ---------------------------------------------------------------- max / min
def test_max_dim_returns_values_indices_namedtuple():
    x = ak.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    result = ak.max(x, 1)
    values, indices = result
    assert isinstance(result, tuple) and result.values is values and result.indices is indices
    assert indices.dtype == ak.int64 and indices.tolist() == [1, 0]
    assert values.tolist() == [5.0, 7.0]
    kept = x.min(dim=0, keepdim=True)
    assert kept.values.shape == (1, 3) and kept.indices.tolist() == [[0, 1, 0]]
    assert ak.max(x).shape == () and ak.max(x).item() == 7.0


def test_max_with_other_is_elementwise_maximum():
    x, y = ak.tensor([1.0, 5.0]), ak.tensor([3.0, 2.0])
    assert ak.max(x, y).tolist() == [3.0, 5.0]
    assert x.min(y).tolist() == [1.0, 2.0]
    assert ak.max(x, other=y).tolist() == [3.0, 5.0]


def test_max_ties_match_torch():
    """max()/amax split the gradient among ties; max(dim) sends it to the first index."""
    data = [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]
    for fn in (lambda m, x: m.max(x), lambda m, x: m.amax(x, 1),
               lambda m, x: m.max(x, 1).values, lambda m, x: m.min(x, 0)[0],
               lambda m, x: m.amin(x, (0, 1)), lambda m, x: m.min(x)):
        x, tx = _pair(data)
        g, = _grads(fn(ak, x).sum(), [x])
        tg, = _torch().autograd.grad(fn(_torch(), tx).sum(), [tx])
        _assert_close(g, tg)
    x, tx = _pair(data)
    assert ak.max(x, 1).indices.tolist() == _torch().max(tx, 1).indices.tolist()


def test_max_like_errors_on_empty():
    torch = _torch()
    for name in ("max", "amax", "argmax", "min"):
        assert _error(getattr(ak, name), ak.zeros(0)) == _error(getattr(torch, name),
                                                                torch.zeros(0))
    assert _error(ak.max, ak.zeros(0, 3), 0) == _error(torch.max, torch.zeros(0, 3), 0)
    assert _error(ak.amax, ak.zeros(2, 0), 1) == _error(torch.amax, torch.zeros(2, 0), 1)


def test_argmax_flat_keepdim_and_dtype():
    x = ak.tensor([[1.0, 9.0], [4.0, 2.0]])
    assert ak.argmax(x).dtype == ak.int64 and ak.argmax(x).item() == 1
    assert ak.argmax(x, keepdim=True).shape == (1, 1)
    assert x.argmin(1).tolist() == [0, 1]
    assert not ak.argmax(ak.tensor([1.0, 2.0], requires_grad=True)).requires_grad


# ---------------------------------------------------------------- prod, norm
@pytest.mark.parametrize("data", [[2.0, 0.0, 3.0, -1.5], [0.0, 0.0, 3.0, 2.0],
                                  [[0.5, 0.0], [2.0, 3.0]]])
def test_prod_gradient_with_zeros_matches_torch(data):
    torch = _torch()
    x, tx = _pair(data)
    g, = ak.autograd.grad(x.prod(), [x], create_graph=True)
    tg, = torch.autograd.grad(tx.prod(), [tx], create_graph=True)
    _assert_close(g, tg)
    assert np.isfinite(g.detach().numpy()).all()
    if np.count_nonzero(np.asarray(data) == 0) == 1:  # second order exact with one zero
        gg, = _grads((g * g).sum(), [x])
        tgg, = torch.autograd.grad((tg * tg).sum(), [tx])
        _assert_close(gg, tgg)
    xd, txd = _pair(data)
    gd, = _grads(xd.prod(-1).sum(), [xd])
    tgd, = torch.autograd.grad(txd.prod(-1).sum(), [txd])
    _assert_close(gd, tgd)


def test_prod_gradcheck_at_single_zero():
    x = ak.tensor([[0.7, 0.0, -1.2], [1.1, 0.9, 0.0]], dtype=ak.float64, requires_grad=True)
    assert gradcheck(lambda t: t.prod(1), [x])
    assert gradgradcheck(lambda t: t.prod(1), [x])


@pytest.mark.parametrize("p", [2, "fro", 1, 3, 0.5, -1, float("inf"), -float("inf")])
def test_norm_gradient_at_zero_matches_torch(p):
    torch = _torch()
    x, tx = _pair([0.0, 0.0, 0.0])
    g, = _grads(ak.norm(x, p), [x])
    tg, = torch.autograd.grad(torch.norm(tx, p), [tx])
    _assert_close(g, tg)
    y, ty = _pair([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0]])
    g, = _grads(y.norm(p, dim=1).sum(), [y])
    tg, = torch.autograd.grad(ty.norm(p, dim=1).sum(), [ty])
    _assert_close(g, tg)


def test_norm_options():
    torch = _torch()
    data = np.arange(12.0).reshape(3, 4) - 5
    x, tx = ak.tensor(data), torch.tensor(data)
    _assert_close(x.norm(dim=1, keepdim=True), tx.norm(dim=1, keepdim=True))
    _assert_close(ak.norm(x, "fro", (0, 1)), torch.norm(tx, "fro", (0, 1)))
    assert ak.norm(ak.tensor([3.0, 4.0]), dtype=ak.float64).dtype == ak.float64
    assert _error(ak.norm, ak.tensor([1, 2])) == _error(torch.norm, torch.tensor([1, 2]))
    assert _error(ak.norm, x, "abc") == _error(torch.norm, tx, "abc")


# ---------------------------------------------------------------- mean, var, sum
def test_mean_of_int_raises_like_torch():
    torch = _torch()
    assert _error(ak.mean, ak.tensor([1, 2])) == _error(torch.mean, torch.tensor([1, 2]))
    assert ak.mean(ak.tensor([1, 2]), dtype=ak.float64).item() == 1.5
    assert _error(ak.var, ak.tensor([1, 2])) == _error(torch.var, torch.tensor([1, 2]))


def test_var_std_signatures_match_torch():
    torch = _torch()
    data = np.random.default_rng(0).normal(size=(3, 4))
    x, tx = ak.tensor(data), torch.tensor(data)
    for name in ("var", "std"):
        a, t = getattr(ak, name), getattr(torch, name)
        _assert_close(a(x), t(tx))
        _assert_close(a(x, False), t(tx, False))
        _assert_close(a(x, 1, False, True), t(tx, 1, False, True))
        _assert_close(a(x, (0, 1), correction=0), t(tx, (0, 1), correction=0))
        _assert_close(getattr(x, name)(unbiased=False), getattr(tx, name)(unbiased=False))
        _assert_close(a(x, 0, keepdim=True, correction=2), t(tx, 0, keepdim=True,
                                                             correction=2))


def test_reduction_dims_and_dtypes():
    x = ak.ones(2, 3, dtype=ak.int32)
    assert x.sum().dtype == ak.int64 and x.prod().dtype == ak.int64
    assert x.sum(dtype=ak.float64).dtype == ak.float64
    assert ak.tensor([True, False]).sum().item() == 1
    y = ak.ones(2, 3, 4)
    for name in ("sum", "mean", "amax", "var", "std", "norm"):
        assert getattr(y, name)(dim=()).shape == ()  # () means every dim, as in torch
    assert y.sum((-1, 0)).shape == (3,) and y.mean(-2, keepdim=True).shape == (2, 1, 4)
    assert ak.tensor(2.0).sum(0).shape == () and ak.tensor(2.0).amax(-1).shape == ()
    with pytest.raises(IndexError):
        y.sum(3)


def test_sum_dtype_gradient_has_input_dtype():
    x = ak.ones(3, dtype=ak.float32, requires_grad=True)
    x.sum(dtype=ak.float64).backward()
    assert x.grad.dtype == ak.float32 and x.grad.tolist() == [1.0, 1.0, 1.0]


def test_logsumexp_is_stable():
    x = ak.tensor([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, -np.inf]])
    out = ak.logsumexp(x, 1).numpy()
    np.testing.assert_allclose(out[:2], [1000 + np.log(2), -1000 + np.log(2)])
    assert out[2] == -np.inf
    assert ak.logsumexp(ak.tensor([1, 2]), 0).dtype == ak.float32


# ---------------------------------------------------------------- matmul family
def test_matmul_family_errors_match_torch():
    torch = _torch()
    cases = [("mm", (2, 3, 4), (4, 2)), ("mm", (2, 3), (4, 2)), ("mm", (3,), (3, 2)),
             ("mm", (2, 3), (3, 2, 1)), ("matmul", (2, 3), (4, 2)), ("matmul", (3,), (4,)),
             ("matmul", (3,), (4, 2)), ("matmul", (2, 3), (4,)), ("matmul", (2, 3, 4), (5, 3)),
             ("matmul", (2, 3, 4), (2, 5, 6)), ("matmul", (2, 3, 4), (3, 4, 2)),
             ("matmul", (2, 3, 4), (5,)), ("matmul", (), (3,)), ("bmm", (2, 3), (3, 2)),
             ("bmm", (2, 2, 3), (3, 3, 2)), ("bmm", (2, 2, 3), (2, 3)),
             ("dot", (2, 2), (2,)), ("dot", (2,), (3,)), ("mv", (2, 2), (3,)),
             ("mv", (2,), (3,)), ("outer", (2, 2), (3,)), ("outer", (2,), (2, 1))]
    for name, a, b in cases:
        got = _error(getattr(ak, name), ak.zeros(a), ak.zeros(b))
        want = _error(getattr(torch, name), torch.zeros(a), torch.zeros(b))
        assert got == want, (name, a, b)


def test_matmul_dtype_errors_match_torch():
    torch = _torch()
    for name, a, b in [("mm", (2, 2), (2, 2)), ("bmm", (1, 2, 2), (1, 2, 2)),
                       ("dot", (2,), (2,)), ("mv", (2, 2), (2,)), ("matmul", (3, 2, 2), (2, 2))]:
        got = _error(getattr(ak, name), ak.zeros(*a), ak.zeros(*b, dtype=ak.float64))
        want = _error(getattr(torch, name), torch.zeros(*a),
                      torch.zeros(*b, dtype=torch.float64))
        assert got == want, name


@pytest.mark.parametrize("a,b", [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)),
                                 ((2, 1, 2, 3), (3, 3, 2)), ((2, 3), (2, 3, 2)),
                                 ((3,), (2, 3, 2)), ((2, 2, 3), (3,))])
def test_matmul_values_and_grads_match_torch(a, b):
    torch = _torch()
    rng = np.random.default_rng(1)
    x, tx = _pair(rng.normal(size=a))
    y, ty = _pair(rng.normal(size=b))
    out, tout = x @ y, tx @ ty
    assert out.shape == tuple(tout.shape)
    _assert_close(out, tout)
    gx, gy = _grads((out * out).sum(), [x, y])
    tgx, tgy = torch.autograd.grad((tout * tout).sum(), [tx, ty])
    _assert_close(gx, tgx)
    _assert_close(gy, tgy)


def test_matmul_int_and_grad_fn_names():
    assert ak.matmul(ak.tensor([1, 2]), ak.tensor([3, 4])).item() == 11
    x = ak.ones(2, 2, requires_grad=True)
    assert ak.mm(x, x).grad_fn.name() == "MmBackward0"
    assert (x @ x).grad_fn.name() == "MatmulBackward0"


# ---------------------------------------------------------------- einsum
EINSUM_TORCH_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
    ("iij->j", [(2, 2, 3)]), ("ij->", [(2, 3)]), ("ij,k->ik", [(2, 3), (4,)]),
    ("bA", [(2, 3)]), ("...ij,...jk->...ik", [(2, 1, 2, 3), (4, 3, 2)]),
    ("...ii->...i", [(2, 3, 3)]), ("i...->...", [(2, 3, 2)]), ("...i->i", [(2, 3)]),
    ("i,i", [(1,), (3,)]), ("ij,jk", [(2, 1), (3, 2)]), ("...i,...i", [(2, 1, 3), (4, 3)]),
    ("ii,ij->ij", [(3, 3), (3, 2)]), ("ij,jk,kl->li", [(2, 3), (3, 2), (2, 2)]),
    ("i,j,k->ijk", [(2,), (3,), (2,)]), ("ijk->kji", [(2, 3, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 2)]), ("iii->", [(2, 2, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_TORCH_CASES)
def test_einsum_matches_torch(equation, shapes):
    torch = _torch()
    rng = np.random.default_rng(2)
    pairs = [_pair(rng.normal(size=s)) for s in shapes]
    ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
    out, tout = ak.einsum(equation, *ours), torch.einsum(equation, *theirs)
    assert out.shape == tuple(tout.shape)
    _assert_close(out, tout)
    weights = rng.normal(size=tout.shape)
    grads = _grads((out * ak.tensor(weights)).sum(), ours)
    tgrads = torch.autograd.grad((tout * torch.tensor(weights)).sum(), theirs)
    for g, tg in zip(grads, tgrads):
        _assert_close(g, tg)
    assert gradgradcheck(lambda *ops: ak.einsum(equation, *ops), ours)


def test_einsum_list_and_sublist_forms():
    torch = _torch()
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    want = torch.einsum(torch.tensor(a), [0, 1], torch.tensor(b), [1], [0])
    _assert_close(ak.einsum(ak.tensor(a), [0, 1], ak.tensor(b), [1], [0]), want)
    _assert_close(ak.einsum("ij,j->i", [ak.tensor(a), ak.tensor(b)]), want)
    _assert_close(ak.einsum(ak.tensor(a), [Ellipsis, 1], ak.tensor(b), [1]), want)


@pytest.mark.parametrize("equation,shapes", [
    ("ii", [(2, 3)]), ("i,i", [(3,)]), ("i", [(3,), (3,)]), ("ij", [(3,)]),
    ("i->j", [(3,)]), ("i->ii", [(3,)]), ("i,i", [(2,), (3,)]), ("ij,jk", [(2, 3), (4, 2)]),
    ("...i,...i", [(2, 3), (4, 3)]), ("i.j", [(2, 2)]), ("ij...k", [(2,)]),
    ("i1", [(2, 2)]), ("i->i->i", [(2,)]),
])
def test_einsum_errors_match_torch(equation, shapes):
    torch = _torch()
    got = _error(ak.einsum, equation, *[ak.zeros(*s) for s in shapes])
    want = _error(torch.einsum, equation, *[torch.zeros(*s) for s in shapes])
    assert got == want


def test_einsum_dtypes():
    torch = _torch()
    assert ak.einsum("i,i", ak.tensor([1, 2]), ak.tensor([3, 4])).item() == 11
    got = _error(ak.einsum, "i,i", ak.zeros(2), ak.zeros(2, dtype=ak.float64))
    assert got == _error(torch.einsum, "i,i", torch.zeros(2),
                         torch.zeros(2, dtype=torch.float64))


def test_einsum_output_does_not_alias_input():
    x = ak.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = ak.einsum("ij->ji", x)
    y.numpy()[0, 0] = 100.0
    assert x.numpy()[0, 0] == 1.0


# ---------------------------------------------------------------- jvp rules
def _jvp_cases():
    rng = np.random.default_rng(3)

    def arr(*shape, low=0.5, high=1.5):
        signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return rng.uniform(low, high, size=shape) * signs

    x = arr(2, 3, 4)
    zero = x.copy()
    zero[1, 2, 0] = 0.0
    cases = [(rd.Sum, (x, 1, False, None)), (rd.Mean, (x, (0, 2), True, None)),
             (rd.Prod, (x, 2, False, None)), (rd.Prod, (zero, None, False, None)),
             (rd.Var, (x, 1, False, 1)), (rd.Std, (x, (0, 1), True, 0)),
             (rd.Amax, (x, 2, False)), (rd.Amin, (x, None, False)),
             (rd.Logsumexp, (x, 1, True)), (ex.Max, (x, 1, False)), (ex.Min, (x, 0, True)),
             (la.Matmul, (arr(2, 1, 2, 3), arr(3, 3, 2))), (la.Matmul, (arr(3), arr(3, 2))),
             (la.Mm, (arr(2, 3), arr(3, 2))), (la.Bmm, (arr(2, 2, 3), arr(2, 3, 2))),
             (la.Dot, (arr(3), arr(3))), (la.Mv, (arr(2, 3), arr(3))),
             (la.Outer, (arr(2), arr(3))), (la.Einsum, ("ii,ij->j", arr(3, 3), arr(3, 2))),
             (la.Einsum, ("ijk->ki", arr(2, 3, 2)))]
    cases += [(rd.Norm, (x, 1, False, p)) for p in (2.0, 1.0, 3.0, 0.5, np.inf, -np.inf)]
    return [pytest.param(cls, args, id=f"{cls.__name__}-{i}")
            for i, (cls, args) in enumerate(cases)]


@pytest.mark.parametrize("cls,args", _jvp_cases())
def test_jvp_rule_matches_finite_differences(cls, args):
    """Each rule's jvp, called on the node, against central differences of forward."""
    rng = np.random.default_rng(4)
    tangents = [rng.normal(size=a.shape) if isinstance(a, np.ndarray) else None for a in args]
    out = cls.apply(*[ak.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a
                      for a in args])
    first = out[0] if isinstance(out, tuple) else out
    got = first.grad_fn.apply_jvp(*[None if t is None else ak.tensor(t) for t in tangents])
    got = got[0] if isinstance(got, tuple) else got
    eps = 1e-6

    def shifted(sign):
        moved = [a + sign * eps * t if t is not None else a for a, t in zip(args, tangents)]
        res = cls.forward(*moved)
        return res[0] if isinstance(res, tuple) else res
    np.testing.assert_allclose(got.detach().numpy(), (shifted(1) - shifted(-1)) / (2 * eps),
                               atol=1e-6, rtol=1e-5)

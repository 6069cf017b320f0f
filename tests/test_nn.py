"""adkit.nn.functional against torch.nn.functional: values, gradients, warnings, errors."""
import warnings

import numpy as np
import pytest

import adkit as ak
import adkit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _compare(call, arrays, kwargs=None, rtol=1e-10, atol=1e-12):
    """Run call(lib_functional, *tensors, **kwargs) in both libraries on float64 copies of
    `arrays` (float ones require grad); compare outputs and gradients."""
    kwargs = kwargs or {}
    ours = [ak.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out, out_t = call(F, *ours, **kwargs), call(TF, *theirs, **kwargs)
    np.testing.assert_allclose(out.detach().numpy(), out_t.detach().numpy(), rtol=rtol,
                               atol=atol)
    assert tuple(out.shape) == tuple(out_t.shape)
    seed = np.random.default_rng(0).uniform(0.5, 1.5, size=tuple(out.shape))
    (out * ak.tensor(seed)).sum().backward()
    (out_t * torch.tensor(seed)).sum().backward()
    for a, t in zip(ours, theirs):
        if t.requires_grad:
            want = np.zeros(t.shape) if t.grad is None else t.grad.numpy()
            np.testing.assert_allclose(a.grad.numpy(), want, rtol=rtol, atol=atol)


def _rand(*shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


# ---------------------------------------------------------------- activations
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((5,), 0)])
def test_softmax_family(name, shape, dim):
    _compare(lambda f, x: getattr(f, name)(x, dim), [_rand(*shape)])


def test_softmax_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0]])
    _compare(lambda f, x: f.softmax(x, 1), [x])
    _compare(lambda f, x: f.log_softmax(x, 1), [x])


def test_softmax_dtype_and_implicit_dim():
    x = ak.tensor([[1.0, 2.0], [3.0, 5.0]])
    assert F.softmax(x, 1, dtype=ak.float64).dtype == ak.float64
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        implicit = F.log_softmax(x)
    np.testing.assert_allclose(implicit.numpy(), F.log_softmax(x, 1).numpy())


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "softplus"])
def test_pointwise_activations(name):
    _compare(lambda f, x: getattr(f, name)(x), [_rand(3, 4, low=-3, high=3)])


def test_softplus_beta_threshold():
    x = np.array([-3.0, -0.5, 0.2, 0.6, 1.5, 4.0])
    _compare(lambda f, x: f.softplus(x, beta=2.0, threshold=1.0), [x])


def test_relu_inplace_on_non_leaf():
    def call(f, x):
        a = x * 1.0 if f is TF else x.clone()
        out = f.relu(a, inplace=True)
        assert out is a
        return out
    _compare(call, [np.array([-1.0, 0.5, 2.0, -0.25])])


# ---------------------------------------------------------------- linear
@pytest.mark.parametrize("shapes", [((3, 4), (2, 4), (2,)), ((4,), (3, 4), None),
                                    ((2, 3, 4), (5, 4), (5,))])
def test_linear(shapes):
    arrays = [_rand(*s, seed=i) for i, s in enumerate(shapes) if s is not None]
    _compare(lambda f, *a: f.linear(*a), arrays)


# ---------------------------------------------------------------- mse_loss
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    _compare(lambda f, x, t: f.mse_loss(x, t, reduction=reduction),
             [_rand(3, 4), _rand(3, 4, seed=1)])


def test_mse_loss_weighted_and_broadcast_warning():
    _compare(lambda f, x, t, w: f.mse_loss(x, t, weight=w),
             [_rand(3, 4), _rand(3, 4, seed=1), _rand(3, 4, seed=2, low=0.1, high=1)])
    with pytest.warns(UserWarning, match="Using a target size"):
        _compare(lambda f, x, t: f.mse_loss(x, t), [_rand(3, 4), _rand(4, seed=1)])


def test_loss_reduction_arguments():
    x, t = ak.ones(3), ak.zeros(3)
    with pytest.raises(ValueError, match="foo is not a valid value for reduction"):
        F.mse_loss(x, t, reduction="foo")
    with pytest.warns(UserWarning, match="reduction='sum' instead"):
        assert F.mse_loss(x, t, size_average=False).item() == 3.0


# ---------------------------------------------------------------- cross_entropy
IDX = np.array([0, 3, 4, 1, 2, 4])
IGNORED = np.array([0, -100, 4, 1, -100, 2])
CE_CASES = [
    ({}, IDX), ({"reduction": "sum"}, IDX), ({"reduction": "none"}, IDX),
    ({"weight": "w"}, IDX), ({"weight": "w", "reduction": "none"}, IGNORED),
    ({"weight": "w"}, IGNORED), ({}, IGNORED), ({"ignore_index": 2}, IDX),
    ({"label_smoothing": 0.15}, IGNORED), ({"label_smoothing": 0.3, "weight": "w"}, IGNORED),
    ({"label_smoothing": 0.3, "weight": "w", "reduction": "sum"}, IGNORED),
    ({"label_smoothing": 0.3, "reduction": "none", "ignore_index": 4}, IDX),
]


@pytest.mark.parametrize("kwargs,target", CE_CASES)
def test_cross_entropy_class_indices(kwargs, target):
    kwargs = dict(kwargs)
    weights = np.linspace(0.5, 2.0, 5)
    if kwargs.get("weight") == "w":  # a constant: not differentiated, as in PyTorch
        kwargs.pop("weight")
        _compare(lambda f, x, t: f.cross_entropy(
            x, t, weight=(ak.tensor(weights) if f is F else torch.tensor(weights)), **kwargs),
            [_rand(6, 5), target])
    else:
        _compare(lambda f, x, t: f.cross_entropy(x, t, **kwargs), [_rand(6, 5), target])


@pytest.mark.parametrize("kwargs", [{}, {"label_smoothing": 0.2, "reduction": "none"},
                                    {"reduction": "sum"}])
def test_cross_entropy_spatial_and_1d(kwargs):
    target = np.array([[0, 2, 1, 1], [2, 0, 0, 1]])
    _compare(lambda f, x, t: f.cross_entropy(x, t, **kwargs), [_rand(2, 3, 4), target])
    _compare(lambda f, x, t: f.cross_entropy(x, t, **kwargs), [_rand(5), np.array(3)])


@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"reduction": "none"},
                                    {"label_smoothing": 0.25}])
def test_cross_entropy_probabilities(kwargs):
    p = np.random.default_rng(3).uniform(0.1, 1, size=(4, 5))
    p /= p.sum(1, keepdims=True)
    _compare(lambda f, x, t: f.cross_entropy(x, t, **kwargs), [_rand(4, 5), p])
    q = np.random.default_rng(4).uniform(0.1, 1, size=(2, 3, 2))
    q /= q.sum(1, keepdims=True)
    _compare(lambda f, x, t: f.cross_entropy(x, t, **kwargs), [_rand(2, 3, 2), q])


def test_cross_entropy_with_minus_inf_logits_stays_finite():
    x = _rand(3, 4)
    x[0, 2] = x[1, 0] = -np.inf  # masked-out classes that are not targets
    _compare(lambda f, x, t: f.cross_entropy(x, t), [x, np.array([1, 3, 0])])


def test_cross_entropy_all_ignored_mean_is_nan():
    loss = F.cross_entropy(ak.ones(2, 3), ak.tensor([-100, -100]))
    assert np.isnan(loss.item())


@pytest.mark.parametrize("call,error,message", [
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, 5])), IndexError,
     "Target 5 is out of bounds."),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, -1])), IndexError,
     "Target -1 is out of bounds."),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, 2], dtype=ak.int32)),
     RuntimeError, "expected target dtype to be Long or Byte, but got Int"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1])), ValueError,
     r"Expected input batch_size \(3\) to match target batch_size \(2\)."),
    (lambda: F.cross_entropy(ak.ones(2, 4, 3), ak.zeros(2, 4, dtype=ak.int64)), RuntimeError,
     r"Expected target size \[2, 3\], got \[2, 4\]"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, 2]), label_smoothing=1.5),
     RuntimeError, "label_smoothing must be between 0.0 and 1.0. Got: 1.5"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, 2]), weight=ak.ones(3)),
     RuntimeError, "weight tensor should be defined either for all 4 classes"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.zeros(3, 4, dtype=ak.int64)), RuntimeError,
     "Expected floating point type for target with class probabilities, got Long"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.zeros(3, 4), ignore_index=1), RuntimeError,
     "ignore_index is not supported for floating point target"),
    (lambda: F.cross_entropy(ak.ones(3, 4), ak.tensor([0, 1, 2]), reduction="avg"),
     ValueError, "avg is not a valid value for reduction"),
])
def test_cross_entropy_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_float32_values_close_to_torch():
    x = _rand(6, 5).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = F.cross_entropy(ak.tensor(x), ak.tensor(IDX), label_smoothing=0.1)
    theirs = TF.cross_entropy(torch.tensor(x), torch.tensor(IDX), label_smoothing=0.1)
    assert ours.dtype == ak.float32
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-6)

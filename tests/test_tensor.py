"""Tensor basics: creation, dtypes, conversions, repr."""
import numpy as np
import pytest

import adkit as ak


def test_tensor_python_floats_default_to_float32():
    assert ak.tensor(1.5).dtype == ak.float32
    assert ak.tensor([1.0, 2.0]).dtype == ak.float32
    assert ak.tensor([1, 2]).dtype == ak.int64
    assert ak.tensor([True, False]).dtype == ak.bool
    assert ak.tensor([1, 2.5]).dtype == ak.float32


def test_tensor_numpy_arrays_keep_their_dtype():
    for dt in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_):
        assert ak.tensor(np.zeros(2, dt)).dtype == dt


def test_tensor_default_dtype_can_change():
    try:
        ak.set_default_dtype(ak.float64)
        assert ak.tensor(1.0).dtype == ak.float64 and ak.zeros(2).dtype == ak.float64
        assert ak.get_default_dtype() == ak.float64
    finally:
        ak.set_default_dtype(ak.float32)
    with pytest.raises(TypeError):
        ak.set_default_dtype(ak.int64)


def test_tensor_dtype_objects():
    assert repr(ak.float32) == "adkit.float32"
    assert ak.double is ak.float64 and ak.long is ak.int64
    assert ak.float32 == np.float32 and ak.float32 != ak.float64
    assert ak.float64.is_floating_point and not ak.int64.is_floating_point


def test_tensor_only_float_tensors_require_grad():
    """PyTorch's two wordings: creation functions, and requires_grad_()."""
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype "
                                           "can require gradients"):
        ak.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex"):
        ak.zeros(2, dtype=ak.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require "
                                           "gradients"):
        ak.tensor([1, 2]).requires_grad_()


def test_assigned_grad_is_checked_with_pytorchs_messages():
    x = ak.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size '\[3\]' "
                                           r"to a tensor of size '\[2\]'"):
        x.grad = ak.ones(3)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype "
                                           "'double' to a tensor with grad_dtype 'Float'"):
        x.grad = ak.ones(2, dtype=ak.float64)
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None"):
        x.grad = 3.0


def test_tensor_creation_functions():
    assert ak.zeros(2, 3).shape == (2, 3) and ak.zeros((2, 3)).dtype == ak.float32
    assert ak.ones([2]).numpy().tolist() == [1.0, 1.0]
    assert ak.full((2,), 7).dtype == ak.int64
    assert ak.full((2,), 7.0).dtype == ak.float32
    assert ak.arange(5).dtype == ak.int64 and ak.arange(0.0, 1.0, 0.5).tolist() == [0.0, 0.5]
    assert ak.linspace(0, 1, 5).shape == (5,)
    assert ak.eye(3).numpy().trace() == 3
    assert ak.empty(2, 2).shape == (2, 2)
    x = ak.tensor([[1.0, 2.0]])
    assert ak.zeros_like(x).shape == (1, 2) and ak.ones_like(x).dtype == ak.float32
    assert ak.full_like(x, 3.0).tolist() == [[3.0, 3.0]]
    assert ak.empty_like(x).shape == (1, 2)
    with pytest.raises(RuntimeError, match="negative dimension"):
        ak.zeros(-1)


def test_tensor_random_is_seeded():
    ak.manual_seed(0)
    a = ak.randn(3)
    ak.manual_seed(0)
    b = ak.randn(3)
    assert a.tolist() == b.tolist() and a.dtype == ak.float32
    r = ak.rand(2, 2, dtype=ak.float64, requires_grad=True)
    assert r.requires_grad and r.dtype == ak.float64 and ((r.numpy(force=True) >= 0).all())


def test_tensor_numpy_and_from_numpy_share_memory():
    arr = np.zeros(3)
    t = ak.from_numpy(arr)
    arr[0] = 5
    assert t[0].item() == 5 if hasattr(t, "__getitem__") else t.numpy()[0] == 5
    t.numpy()[1] = 7
    assert arr[1] == 7
    with pytest.raises(RuntimeError, match=r"Use tensor.detach\(\).numpy\(\)"):
        ak.tensor([1.0], requires_grad=True).numpy()


def test_tensor_array_protocol_and_conversions():
    t = ak.tensor([[1.0, 2.0]])
    assert np.asarray(t).shape == (1, 2)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert ak.tensor(3.5).item() == 3.5 and float(ak.tensor([2.0])) == 2.0
    assert t.tolist() == [[1.0, 2.0]]
    assert len(ak.zeros(4, 2)) == 4
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(ak.zeros(2))
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        ak.zeros(2).item()


def test_tensor_attributes():
    t = ak.zeros(2, 3)
    assert t.ndim == 2 and t.dim() == 2 and t.numel() == 6 and t.size(1) == 3
    assert t.size() == (2, 3) and repr(t.shape) == "adkit.Size([2, 3])"
    assert t.is_leaf and t.grad_fn is None and t._version == 0
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.size(2)


def test_tensor_detach_shares_data_and_version():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    assert d.numpy() is y.detach().numpy() or np.shares_memory(d.numpy(), y.detach().numpy())
    assert d._version_counter is y._version_counter


def test_tensor_requires_grad_only_settable_on_leaves():
    y = ak.tensor([1.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad = False


def test_tensor_repr_like_pytorch():
    assert repr(ak.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(ak.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000])"
    assert repr(ak.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(ak.tensor([1.0], dtype=ak.float64)) == "tensor([1.], dtype=adkit.float64)"
    assert repr(ak.tensor([1.0], requires_grad=True)) == "tensor([1.], requires_grad=True)"
    y = ak.tensor([1.0], requires_grad=True) * 2
    assert repr(y) == "tensor([2.], grad_fn=<MulBackward0>)"
    assert repr(ak.tensor([True])) == "tensor([True])"
    assert repr(ak.zeros(0, 3)) == "tensor([], size=(0, 3))"


def test_tensor_repr_matches_torch_for_common_cases():
    torch = pytest.importorskip("torch")
    for values in ([1.0, 2.0], [1.5, -2.25], [[1.0, 2.0], [3.0, 4.0]], 3.0, [0.001, 1.0]):
        got = repr(ak.tensor(values))
        want = repr(torch.tensor(values))
        assert got == want, (got, want)

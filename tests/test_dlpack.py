"""DLPack (issue 18, item 4): ak.from_dlpack and Tensor.__dlpack__, zero copy both ways
with numpy, PyTorch and JAX (each where installed), PyTorch's rules for tensors that
require grad, clear errors where DLPack cannot carry a tensor."""
import numpy as np
import pytest

import adkit as ak

DTYPES = [ak.float16, ak.float32, ak.float64, ak.int32, ak.int64, ak.bool]


def _ptr(a):
    return np.asarray(a).__array_interface__["data"][0]


def _aligned(n, dtype, align=64):
    """A zeroed numpy array whose data is `align`-byte aligned (JAX's CPU runtime copies
    buffers that are not 64-byte aligned rather than view them)."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(n * itemsize + align, np.uint8)
    start = -_ptr(raw) % align
    return raw[start:start + n * itemsize].view(dtype)


# ---------------------------------------------------------------- numpy
def test_dlpack_numpy_both_ways_share_memory():
    t = ak.arange(6.0)
    a = np.from_dlpack(t)
    a[1] = 100.0  # written through numpy, read through adkit
    assert t[1].item() == 100.0 and _ptr(a) == _ptr(t)
    b = np.arange(4.0)
    u = ak.from_dlpack(b)
    u[2] = -1.0  # written through adkit, read through numpy
    assert b[2] == -1.0 and _ptr(u) == _ptr(b)
    assert not u.requires_grad and u.is_leaf


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dlpack_dtypes_and_0d(dtype):
    for shape in [(2, 3), ()]:
        t = ak.ones(shape, dtype=dtype) if shape else ak.tensor(1, dtype=dtype)
        back = ak.from_dlpack(np.from_dlpack(t))
        assert back.dtype == dtype and back.shape == t.shape and _ptr(back) == _ptr(t)


def test_dlpack_device():
    t = ak.ones(2)
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU
    assert _ptr(ak.from_dlpack(t, device="cpu")) == _ptr(t)
    with pytest.raises(RuntimeError, match="CPU only"):
        ak.from_dlpack(t, device="cuda")

    class OnGpu:
        def __dlpack__(self, **kwargs):
            raise AssertionError("not read")

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(BufferError, match=r"device \(2, 0\).*CPU only"):
        ak.from_dlpack(OnGpu())


def test_dlpack_non_contiguous_views_keep_their_strides():
    base = ak.arange(12.0).reshape(3, 4)
    for view in (base.t(), base[:, ::2]):
        a = np.from_dlpack(view)
        assert a.strides == view.numpy().strides and _ptr(a) == _ptr(view)
        np.testing.assert_array_equal(a, view.numpy())
    a = np.arange(12.0).reshape(3, 4)[:, 1::2]
    assert ak.from_dlpack(a).numpy().strides == a.strides


def test_dlpack_negative_strides_are_refused_unless_copied():
    flipped = ak.from_numpy(np.arange(5.0)[::-1])
    with pytest.raises(BufferError, match="negative strides.*contiguous"):
        np.from_dlpack(flipped)
    copied = np.from_dlpack(flipped, copy=True)
    np.testing.assert_array_equal(copied, [4.0, 3.0, 2.0, 1.0, 0.0])
    assert _ptr(copied) != _ptr(flipped)


def test_dlpack_read_only_arrays():
    a = np.arange(3.0)
    a.setflags(write=False)
    t = ak.from_dlpack(a)  # DLPack 1.0 carries the read-only flag: no copy
    assert _ptr(t) == _ptr(a) and not t.numpy().flags.writeable
    with pytest.raises(RuntimeError, match="memory is read-only"):
        t[0] = 1.0
    assert not np.from_dlpack(t).flags.writeable
    with pytest.raises(BufferError, match="readonly"):  # a consumer of DLPack < 1.0
        t.__dlpack__()


def test_dlpack_copy_keyword():
    a = np.arange(3.0)
    assert _ptr(ak.from_dlpack(a, copy=True)) != _ptr(a)
    assert _ptr(ak.from_dlpack(a, copy=False)) == _ptr(a)
    small = np.arange(3, dtype=np.uint8)  # adkit has no uint8: int32, a copy
    assert ak.from_dlpack(small).dtype == ak.int32
    with pytest.raises(BufferError, match="copy=False.*uint8"):
        ak.from_dlpack(small, copy=False)
    with pytest.raises(TypeError, match="adkit does not support numpy dtype complex128"):
        ak.from_dlpack(np.ones(2, complex))


def test_dlpack_requires_grad_follows_pytorch():
    x = ak.ones(3, requires_grad=True)
    message = r"Can't export tensors that require gradient, use tensor.detach\(\)"
    with pytest.raises(BufferError, match=message):
        x.__dlpack__()
    with pytest.raises(BufferError, match=message):
        ak.from_dlpack(x)
    d = ak.from_dlpack(x.detach())
    assert _ptr(d) == _ptr(x) and not d.requires_grad


def test_dlpack_errors_for_tensors_without_values_and_non_arrays():
    def f(x):
        np.from_dlpack(x)
        return x

    with pytest.raises(BufferError, match="traced or batched"):
        ak.trace(f, ak.ones(2))
    with pytest.raises(TypeError, match="expected an array with __dlpack__"):
        ak.from_dlpack([1.0, 2.0])


# ---------------------------------------------------------------- PyTorch
def test_dlpack_torch_both_ways_share_memory():
    torch = pytest.importorskip("torch")
    t = ak.arange(4.0)
    p = torch.from_dlpack(t)
    p[0] = 7.0
    assert t[0].item() == 7.0 and p.data_ptr() == _ptr(t) and not p.requires_grad
    q = torch.arange(6.0).reshape(2, 3).t()  # non-contiguous
    u = ak.from_dlpack(q)
    u[1, 1] = -5.0
    assert q[1, 1].item() == -5.0 and _ptr(u) == q.data_ptr()
    assert u.numpy().strides == tuple(s * q.element_size() for s in q.stride())
    capsule = torch.utils.dlpack.to_dlpack(q)  # the older, bare-capsule form
    assert _ptr(ak.from_dlpack(capsule)) == q.data_ptr()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dlpack_torch_dtypes_and_0d(dtype):
    torch = pytest.importorskip("torch")
    for t in (ak.ones((2, 2), dtype=dtype), ak.tensor(1, dtype=dtype)):
        p = torch.from_dlpack(t)
        assert str(p.dtype) == f"torch.{dtype.name}" and tuple(p.shape) == tuple(t.shape)
        back = ak.from_dlpack(p)
        assert back.dtype == dtype and _ptr(back) == _ptr(t)


def test_dlpack_torch_requires_grad_and_strides():
    torch = pytest.importorskip("torch")
    with pytest.raises(BufferError, match="require gradient"):
        ak.from_dlpack(torch.ones(2, requires_grad=True))
    with pytest.raises(BufferError, match="require gradient"):
        torch.from_dlpack(ak.ones(2, requires_grad=True))
    view = ak.arange(12.0).reshape(3, 4)[:, ::2]
    assert torch.from_dlpack(view).stride() == (4, 2)
    with pytest.raises(BufferError, match="negative strides"):  # torch would abort
        torch.from_dlpack(ak.from_numpy(np.arange(3.0)[::-1]))


# ---------------------------------------------------------------- JAX
def test_dlpack_jax_both_ways_share_memory():
    pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    j = jnp.arange(8.0, dtype=jnp.float32)
    t = ak.from_dlpack(j)  # a JAX array is immutable: a read-only view of it
    assert _ptr(t) == j.unsafe_buffer_pointer() and not t.numpy().flags.writeable
    np.testing.assert_array_equal(t.numpy(), np.arange(8.0))
    a = _aligned(16, np.float32)
    t = ak.from_numpy(a)
    k = jnp.from_dlpack(t)
    assert k.unsafe_buffer_pointer() == _ptr(t)
    t[3] = 2.5  # written through adkit, read through JAX
    assert float(k[3]) == 2.5


def test_dlpack_jax_dtypes():
    pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    for dtype in (np.float16, np.float32, np.int32, np.bool_):
        a = _aligned(4, dtype)
        k = jnp.from_dlpack(ak.from_numpy(a))
        assert k.dtype == dtype and k.unsafe_buffer_pointer() == _ptr(a)
        assert ak.from_dlpack(k).dtype == ak.tensor(a).dtype

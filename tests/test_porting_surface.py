"""PyTorch code ports by changing the import: device= keywords, Tensor.device, .cpu(),
.to() in all its forms, ak.device, ak.vmap, isclose/allclose, Tensor.output_nr."""
import numpy as np
import pytest

import adkit as ak

CREATORS = [lambda d: ak.tensor([1.0], device=d), lambda d: ak.as_tensor([1.0], device=d),
            lambda d: ak.zeros(2, device=d), lambda d: ak.ones(2, device=d),
            lambda d: ak.empty(2, device=d), lambda d: ak.full((2,), 3.0, device=d),
            lambda d: ak.zeros_like(ak.ones(2), device=d),
            lambda d: ak.ones_like(ak.ones(2), device=d),
            lambda d: ak.full_like(ak.ones(2), 2.0, device=d),
            lambda d: ak.arange(3, device=d), lambda d: ak.linspace(0, 1, 3, device=d),
            lambda d: ak.eye(2, device=d), lambda d: ak.rand(2, device=d),
            lambda d: ak.randn(2, device=d), lambda d: ak.randint(3, size=(2,), device=d)]


@pytest.mark.parametrize("make", CREATORS)
def test_creation_functions_take_the_cpu_device_and_refuse_others(make):
    for where in ("cpu", "cpu:0", ak.device("cpu"), None):
        assert make(where).device == ak.device("cpu")
    with pytest.raises(RuntimeError, match="CPU only"):
        make("cuda")


def test_device_objects_print_and_compare_like_pytorchs():
    x = ak.ones(2)
    assert repr(x.device) == "device(type='cpu')" and str(x.device) == "cpu"
    assert x.device == "cpu" and x.device.type == "cpu" and x.is_cpu
    assert x.cpu() is x


def test_to_accepts_pytorchs_forms():
    x = ak.ones(2)
    assert x.to("cpu") is x and x.to(ak.device("cpu")) is x
    assert x.to("cpu", ak.float64).dtype == ak.float64
    assert x.to(ak.ones(1, dtype=ak.float64)).dtype == ak.float64
    assert x.to(device="cpu", dtype=ak.float64).dtype == ak.float64
    copied = x.to(ak.float32, copy=True)
    assert copied is not x and copied.tolist() == x.tolist()
    with pytest.raises(RuntimeError, match="CPU only"):
        x.to("cuda")


def test_isclose_and_allclose_follow_torch():
    nan, inf = float("nan"), float("inf")
    a, b = ak.tensor([1.0, nan, inf, 2.0]), ak.tensor([1.0 + 1e-9, nan, inf, 2.1])
    assert ak.isclose(a, b).tolist() == [True, False, True, False]
    assert a.isclose(b, equal_nan=True).tolist() == [True, True, True, False]
    assert not ak.allclose(a, b) and a[:3].allclose(b[:3], equal_nan=True)
    torch = pytest.importorskip("torch")
    ta, tb = torch.tensor(a.numpy()), torch.tensor(b.numpy())
    assert torch.isclose(ta, tb).tolist() == ak.isclose(a, b).tolist()


def test_output_nr_and_vmap_alias():
    x = ak.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, indices = x.sort()
    assert values.output_nr == 0 and x.output_nr == 0
    assert ak.vmap is ak.func.vmap
    np.testing.assert_allclose(ak.vmap(lambda v: v * 2)(ak.ones(3, 2)).numpy(), 2.0)


def test_post_accumulate_grad_hooks_run_after_accumulation_on_leaves():
    x = ak.ones(2, requires_grad=True)
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0], [6.0, 6.0]]
    ak.autograd.grad((x * 3).sum(), x)  # grad() accumulates nothing: no call
    handle.remove()
    (x * 3).sum().backward()
    assert len(seen) == 2
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ak.ones(2).register_post_accumulate_grad_hook(lambda t: None)

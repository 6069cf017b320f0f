"""Pickling tensors, graphs, jitted functions and compiled programs (issue 18, item 2):
functions by reference or by value through cloudpickle, compiled code rebuilt on arrival
(or read from the on-disk cache), never unpickled; PyTorch's rules for tensors."""
import copy
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import adkit as ak
import adkit.func as F
from adkit.codegen import pickling

ROOT = Path(__file__).resolve().parent.parent


def loss(w, x):
    return ((x @ w).tanh() ** 2).sum()


def scale(x, k):
    return x * k


def drop_nothing(graph):  # a user pass
    return graph.copy()


@ak.jit
def decorated(x):
    return (x * 2.0).exp()


grad_loss = ak.jit(F.grad(loss))  # named grad_loss, though its qualname is loss's


def _cache_enabled():
    return os.environ.get("ADKIT_DISABLE_CACHE", "") in ("", "0")


def _roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


def _globals(data):
    """The module.name references a pickle holds (what pickle imports on arrival); the
    data is loaded to find them."""
    names = []

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            names.append(f"{module}.{name}")
            return super().find_class(module, name)

    Recorder(io.BytesIO(data)).load()
    return names


# ---------------------------------------------------------------- tensors
@pytest.mark.parametrize("dtype", [ak.float16, ak.float32, ak.float64, ak.int32, ak.int64,
                                   ak.bool])
def test_pickling_tensor_values_and_dtype(dtype):
    x = ak.tensor([[1, 0, 3], [4, 5, 0]], dtype=dtype)
    y = _roundtrip(x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_pickling_tensor_0d_and_views():
    assert _roundtrip(ak.tensor(2.5)).item() == 2.5
    base = ak.arange(12.0).reshape(3, 4)
    view = base.t()[1:]
    y = _roundtrip(view)
    np.testing.assert_array_equal(y.numpy(), view.numpy())
    y[0, 0] = 100.0  # a view arrives as a tensor of its own elements (as in PyTorch)
    assert base[0, 1].item() == 1.0


def test_pickling_tensor_follows_pytorch_autograd_rules():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    y = _roundtrip(x)
    assert y.requires_grad and y.is_leaf and y.grad is None  # .grad is not pickled
    z = _roundtrip(x * 3)  # a non-leaf arrives as a leaf that requires grad
    assert z.is_leaf and z.requires_grad and z.grad_fn is None
    np.testing.assert_array_equal(z.detach().numpy(), [3.0, 6.0])
    (z * z).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [6.0, 12.0])


def test_pickling_tensor_matches_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (torch, ak):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        leaf, nonleaf = _roundtrip(x), _roundtrip(x * 3)
        assert (leaf.grad, leaf.requires_grad, nonleaf.is_leaf, nonleaf.requires_grad) == \
            (None, True, True, True), lib.__name__


def test_pickling_tensor_keeps_public_attributes_not_hooks():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    x.name = "weights"
    x.register_hook(lambda g: g * 2)  # a lambda: would not pickle if it were sent
    y = _roundtrip(x)
    assert y.name == "weights"
    (y * 1).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])


def test_pickling_traced_tensor_is_a_clear_error():
    def f(x):
        pickle.dumps(x)
        return x

    with pytest.raises(pickle.PicklingError, match="TracerTensor.*does not hold"):
        ak.trace(f, ak.ones(2))


def test_deepcopy_follows_pytorch_and_copy_keeps_history():
    x = ak.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    x.tag = [1]
    d = copy.deepcopy(x)
    assert d.requires_grad and d.is_leaf and d.tag == [1] and d.tag is not x.tag
    np.testing.assert_array_equal(d.grad.numpy(), [2.0, 4.0])
    d.numpy(force=True)[0] = 9.0
    assert x[0].item() == 1.0
    y = x * 2
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(y)
    c = copy.copy(y)  # shallow: the same data and history
    assert c.grad_fn is y.grad_fn and c._data is y._data


# ---------------------------------------------------------------- graphs
def test_pickling_graph_roundtrip():
    w, x = ak.ones(4, 3) * 0.1, ak.ones(5, 4)
    for g in (ak.trace(loss, w, x), ak.trace(F.grad(loss), w, x),
              ak.jit(F.grad(loss)).lower(w, x)):
        h = _roundtrip(g)
        h.validate()
        assert str(h) == str(g)
        np.testing.assert_allclose(h(w, x).numpy(), g(w, x).numpy(), rtol=1e-6)


def test_pickling_graph_with_loop_and_constants():
    c = ak.tensor([1.0, -1.0, 2.0])

    def f(h):
        return ak.fori_loop(0, 5, lambda i, h: (h * c).tanh(), h).sum()

    g = ak.trace(F.grad(f), ak.ones(3))
    h = _roundtrip(g)
    np.testing.assert_allclose(h(ak.ones(3)).numpy(), g(ak.ones(3)).numpy())
    consts = [v for _, v in h.nx.nodes(data="value") if v is not None]
    assert consts and not any(v.flags.writeable for v in consts)  # read-only again


# ---------------------------------------------------------------- jitted functions
def test_pickling_jit_by_reference_carries_no_code():
    j = ak.jit(scale, static_argnums=(1,), passes=[drop_nothing], compile="eager")
    x = ak.arange(4.0)
    j(x, 3.0)
    data = pickle.dumps(j)
    names = _globals(data)
    assert f"{__name__}.scale" in names and f"{__name__}.drop_nothing" in names
    assert len(data) < 1000  # the function by name; no graph, no machine code
    k = pickle.loads(data)
    assert k is not j and k.fn is scale and k.static_argnums == (1,)
    assert k.passes == (drop_nothing,) and k.compile_mode == "eager" and not k.cache
    np.testing.assert_array_equal(k(x, 3.0).numpy(), [0.0, 3.0, 6.0, 9.0])


def test_pickling_module_level_jit_is_itself():
    for j, name in ((decorated, "decorated"), (grad_loss, "grad_loss")):
        assert _roundtrip(j) is j
        assert _globals(pickle.dumps(j)) == [f"{__name__}.{name}"]


def test_pickling_jit_copies_in_one_process_are_one_function():
    j = ak.jit(scale, static_argnums=1)
    data = pickle.dumps(j)
    a, b = pickle.loads(data), pickle.loads(pickle.dumps(j))
    assert a is b and a in pickling.received()  # so a worker compiles once
    assert _roundtrip(a) is a  # sent on, it stays the same function
    j.passes = [drop_nothing]  # new passes: a new function for the receivers
    assert _roundtrip(j) is not a


def test_pickling_lambda_without_cloudpickle_says_to_install_it(monkeypatch):
    monkeypatch.setattr(pickling, "_cloudpickle", lambda: None)
    with pytest.raises(pickle.PicklingError, match="Install cloudpickle.*pip install"):
        pickle.dumps(ak.jit(lambda x: x + 1))
    with pytest.raises(pickle.PicklingError, match="closures"):
        pickle.dumps(ak.jit(F.grad(loss)))
    with pytest.raises(pickle.PicklingError, match="a pass of"):
        pickle.dumps(ak.jit(scale, passes=[lambda g: g]))


def test_pickling_lambda_and_transform_by_value_with_cloudpickle():
    pytest.importorskip("cloudpickle")
    w, x = ak.ones(4, 3) * 0.1, ak.ones(5, 4)
    for j in (ak.jit(lambda t: (t * 2.0).sin()), ak.jit(F.grad(loss)),
              ak.jit(scale, static_argnums=1, passes=[lambda g: g])):
        k = _roundtrip(j)
        args = (x, 2.0) if j.static_argnums else (w, x) if "loss" in j.name else (x,)
        np.testing.assert_allclose(k(*args).numpy(), j(*args).numpy(), rtol=1e-12)


# ---------------------------------------------------------------- compiled programs
def test_pickling_compiled_is_rebuilt_from_its_graph(monkeypatch):
    w, x = ak.ones(4, 3) * 0.1, ak.ones(5, 4)
    j = ak.jit(F.grad(loss), compile="eager")
    c = j.compile(w, x)
    data = pickle.dumps(c)
    assert not any("runtime" in n or "ctypes" in n for n in _globals(data))
    d = pickle.loads(data)
    assert d is not c and d.module is not c.module
    assert d.module.from_cache == _cache_enabled()
    np.testing.assert_array_equal(d(w, x).numpy(), c(w, x).numpy())
    monkeypatch.setenv("ADKIT_DISABLE_CACHE", "1")  # no cache: compiled again on arrival
    e = pickle.loads(data)
    assert not e.module.from_cache
    np.testing.assert_array_equal(e(w, x).numpy(), c(w, x).numpy())


ARRIVAL = """
import pickle, sys
import adkit as ak
from adkit.codegen import pickling
jitted, compiled, args = pickle.loads(sys.stdin.buffer.read())
print(repr(float(jitted(*args).sum())), repr(float(compiled(*args).sum())),
      compiled.module.from_cache, len(pickling.received()))
"""


def test_pickling_travels_to_a_fresh_process():
    pytest.importorskip("cloudpickle")
    w, x = ak.ones(4, 3) * 0.1, ak.linspace(-1, 1, 20).reshape(5, 4)
    j = ak.jit(F.grad(loss), compile="eager")  # a closure: by value
    c = j.compile(w, x)
    data = pickle.dumps((j, c, (w, x)))
    run = subprocess.run([sys.executable, "-c", ARRIVAL], input=data, cwd=ROOT,
                         capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    jitted_sum, compiled_sum, from_cache, received = run.stdout.decode().split()
    expected = repr(float(j(w, x).sum()))
    assert jitted_sum == expected and compiled_sum == expected
    # the session's cache dir (conftest) is shared: the code was read from there
    assert from_cache == str(_cache_enabled()) and received == "1"

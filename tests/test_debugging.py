"""Debugging (issue 15, part 5): ADKIT_DUMP_IR / ADKIT_DUMP_LLVM / ADKIT_DUMP_DIR, LLVM
values named after SSA names, and errors a user can cause: they name the op, the
transform and the user's line in plain words (PyTorch's wording where PyTorch has one)."""
import os
import re

import numpy as np
import pytest

import adkit as ak
from adkit._pytree import freeze, tree_flatten

THIS_FILE = os.path.basename(__file__)


# ================================================================ dumps
def test_dump_ir_to_stderr_after_each_stage_that_changed_the_graph(monkeypatch, capfd):
    monkeypatch.setenv("ADKIT_DUMP_IR", "1")
    monkeypatch.delenv("ADKIT_DUMP_DIR", raising=False)

    def dumped(x):
        return (x * 1.0).exp().sum()
    ak.jit(dumped)(ak.randn(3))
    err = capfd.readouterr().err
    titles = re.findall(r"===== adkit: (.*) =====", err)
    assert titles[0].startswith("jit(test_dump_ir") and titles[0].endswith(
        "<locals>.dumped) traced")
    assert any("after" in t and "simplify" in t for t in titles)  # x * 1.0 went away
    assert "fuse" in titles[-1] and "fused_kernel" in err.split(titles[-1])[1]
    assert "mul[y=1.0]" in err


def test_dump_off_by_default_and_for_zero(monkeypatch, capfd):
    monkeypatch.setenv("ADKIT_DUMP_IR", "0")
    monkeypatch.delenv("ADKIT_DUMP_LLVM", raising=False)
    ak.jit(lambda x: x.exp() + 2.0)(ak.randn(3))
    assert "adkit:" not in capfd.readouterr().err


def test_dump_llvm_to_a_folder_names_values(monkeypatch, tmp_path):
    monkeypatch.setenv("ADKIT_DUMP_LLVM", "1")
    monkeypatch.setenv("ADKIT_DUMP_IR", "1")
    monkeypatch.setenv("ADKIT_DUMP_DIR", str(tmp_path / "dumps"))
    f = ak.jit(lambda x, w: ((x @ w).tanh() * 3.0).sum(1))
    x, w = ak.randn(3, 4), ak.randn(4, 5)
    f(x, w)
    files = sorted(os.listdir(tmp_path / "dumps"))
    assert files[0].endswith("traced.txt") and files[-1].endswith("LLVM_IR.ll")
    assert [int(name[:4]) for name in files] == sorted(int(name[:4]) for name in files)
    llvm = (tmp_path / "dumps" / files[-1]).read_text()
    assert llvm == f.compile(x, w).llvm_ir + "\n" or llvm.rstrip() == f.compile(
        x, w).llvm_ir.rstrip()
    # the kernel's arguments and its steps' values carry readable names
    assert '%"start"' in llvm and '%"in0"' in llvm and '%"out0"' in llvm
    kernel = next(f.lower(x, w).nx.nodes[n]["params"]["graph"]
                  for n in f.lower(x, w).op_nodes() if "graph" in f.lower(x, w).nx.nodes[n][
                      "params"])
    names = ak.ir.printing.name_values(kernel)
    tanh = next(n for n in kernel.op_nodes() if kernel.nx.nodes[n]["op"] is ak.ir.ops.Tanh)
    assert re.search(rf'%"{names[(tanh, 0)]}(\.\d+)?" = ', llvm)


def test_named_values_do_not_change_the_code():
    """Names are for reading: the optimized machine code is what it was (same asm)."""
    from adkit.codegen import kernels
    assert kernels.name_value(None, "a") is None
    f = ak.jit(lambda x: (x.exp() * 2.0).sum())
    x = ak.randn(100)
    np.testing.assert_allclose(f(x).numpy(), (x.exp() * 2.0).sum().numpy(), rtol=1e-5)


# ================================================================ creation errors
@pytest.mark.parametrize("call, message", [
    (lambda: ak.zeros(2.5), "zeros(): argument 'size' (position 1) must be tuple of ints, "
                            "not float"),
    (lambda: ak.zeros((2.5,)), "zeros(): argument 'size' (position 1) must be tuple of "
                               "ints, but found element of type float at pos 0"),
    (lambda: ak.ones("a"), "ones(): argument 'size' (position 1) must be tuple of ints, "
                           "not str"),
    (lambda: ak.empty(2, None), "empty(): argument 'size' (position 1) must be tuple of "
                                "ints, but found element of type NoneType at pos 1"),
    (lambda: ak.full((2.5,), 1.0), "full(): argument 'size' (position 1) must be tuple of "
                                   "ints, but found element of type float at pos 0"),
    (lambda: ak.randn(2.5), "randn(): argument 'size' (position 1) must be tuple of ints, "
                            "not float"),
    (lambda: ak.zeros(True), "zeros(): argument 'size' (position 1) must be tuple of ints, "
                             "not bool"),
])
def test_error_creation_sizes_as_pytorch_words_them(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message


def test_error_creation_sizes_match_pytorch():
    torch = pytest.importorskip("torch")
    for name, arg in (("zeros", 2.5), ("ones", "a"), ("randn", 2.5)):
        with pytest.raises(TypeError) as theirs:
            getattr(torch, name)(arg)
        with pytest.raises(TypeError) as ours:
            getattr(ak, name)(arg)
        assert str(ours.value) == str(theirs.value)


def test_creation_sizes_still_take_ints_sizes_and_numpy_ints():
    assert ak.zeros(2, np.int64(3)).shape == (2, 3)
    assert ak.ones(ak.Size([2, 3])).shape == (2, 3) and ak.empty([4]).shape == (4,)


# ================================================================ op argument errors
@pytest.mark.parametrize("call, name", [(lambda: ak.exp([1.0, 2.0]), "exp"),
                                        (lambda: ak.sum([1.0, 2.0]), "sum"),
                                        (lambda: ak.matmul([1.0], ak.ones(1)), "matmul")])
def test_error_list_where_a_tensor_belongs(call, name):
    with pytest.raises(TypeError, match=rf"^{name}\(\): argument 'x' \(position 1\) must be "
                                        r"Tensor, not list"):
        call()


# ================================================================ jit errors
def test_jit_static_list_and_dict_arguments_work():
    x = ak.randn(3)
    f = ak.jit(lambda a, n: a * n[0] + n[1], static_argnums=1)
    np.testing.assert_allclose(f(x, [2.0, 1.0]).numpy(), (x * 2.0 + 1.0).numpy())
    np.testing.assert_allclose(f(x, [3.0, 1.0]).numpy(), (x * 3.0 + 1.0).numpy())
    g = ak.jit(lambda a, opts: a * opts["k"])
    np.testing.assert_allclose(g(x, opts={"k": [2]}["k"] and {"k": 2.0}).numpy(),
                               (x * 2.0).numpy())
    h = ak.jit(lambda a, n: (a * n[0]).sum())
    w = ak.randn(3, requires_grad=True)
    h(w, n=[2.0]).backward()  # the JitCall path keys the same way
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2.0))


def test_jit_unhashable_static_argument_is_a_clear_type_error():
    class Unhashable:
        __hash__ = None
    f = ak.jit(lambda a, n: a, static_argnums=1)
    with pytest.raises(TypeError, match=r"static argument 1 \(static_argnums\) is a "
                                        r"Unhashable .* must be hashable"):
        f(ak.randn(2), Unhashable())


def test_freeze_keys_lists_dicts_and_sets_by_value_and_type():
    assert freeze([1, [2]]) == freeze([1, [2]]) and freeze([1]) != freeze((1,))
    assert hash(freeze({"a": {1, 2}})) == hash(freeze({"a": {2, 1}}))
    with pytest.raises(TypeError):
        freeze([{}.keys()])


def test_error_shape_mismatch_names_op_user_line_and_transform():
    def f(a, b):
        return a @ b  # the line the error must name
    line = f.__code__.co_firstlineno + 1
    with pytest.raises(RuntimeError) as info:
        ak.jit(f)(ak.randn(3, 4), ak.randn(5, 6))
    message = str(info.value)
    assert message.startswith("matmul on inputs of shape float32[3, 4], float32[5, 6] ")
    assert f"at {THIS_FILE}:{line}" in message and "while tracing ak.jit(" in message
    assert "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(ValueError, match=rf"add on .*at {THIS_FILE}:\d+, while tracing "
                                         r"ak.trace\("):
        ak.trace(lambda a: a + ak.ones(4), ak.ir.TensorSpec((3,)))


def test_error_shape_mismatch_under_grad_of_jit_names_the_function():
    f = ak.jit(lambda a: a.reshape(4, 4).sum())
    with pytest.raises(RuntimeError, match=rf"reshape on .*at {THIS_FILE}:\d+, while "
                                           r"tracing jitted function <lambda>"):
        ak.func.grad(f)(ak.randn(3))


def test_error_structures_print_as_written_not_as_treespec_dumps():
    x = ak.randn(3)
    g = ak.trace(lambda a, b: a + b, x, x)
    with pytest.raises(TypeError) as info:
        g((x, x))
    assert "TreeSpec" not in str(info.value) and "(*, *)" in str(info.value)
    with pytest.raises(RuntimeError) as info:
        ak.func.vjp(lambda a: (a, a), x)[1](x)
    assert "TreeSpec" not in str(info.value) and "primal output: (*, *)" in str(info.value)
    assert str(tree_flatten([{"w": 1}, (2,)])[1]) == "[{'w': *}, (*,)]"

"""PyTorch parity of saved-tensor hooks, tensor hooks, retain_grad after in-place ops and
allow_mutation_on_saved_tensors (messages as PyTorch 2.13's)."""
import pytest

import adkit as ak
from adkit.autograd.graph import allow_mutation_on_saved_tensors, saved_tensors_hooks


def test_unpack_hook_must_return_a_tensor():
    x = ak.ones(2, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda t: 3):
        y = (x * x).sum()
    with pytest.raises(TypeError, match="Output of saved tensor unpack_hook expected to be "
                                        "a Tensor but got result of type int"):
        y.backward()


def test_pack_hook_must_not_modify_its_input():
    x = ak.ones(2, requires_grad=True)
    with saved_tensors_hooks(lambda t: t.mul_(2), lambda t: t):
        with pytest.raises(RuntimeError) as info:
            x.clone() * x.clone()
    assert str(info.value) == (  # PyTorch 2.13's message, word for word
        "A saved tensor pack hook is modifying its input in place. Tensors provided as input "
        "to pack hook cannot be modified by in-place operations as this can lead to "
        "unexpected side-effects. Please open an issue if you need to perform in-place "
        "operations on the input to a pack hook.")


def test_saved_tensor_hooks_do_not_outlive_their_block():
    x = ak.ones(2, requires_grad=True)
    with saved_tensors_hooks(lambda t: t * 0, lambda t: t):
        pass
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_tensor_hook_results_are_checked():
    x = ak.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: ak.ones(3))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        y.sum().backward()
    z = x * 2
    z.register_hook(lambda g: 3.0)
    with pytest.raises(TypeError, match="expected Variable, but hook returned 'float'"):
        z.sum().backward()


def test_retain_grad_follows_an_in_place_write():
    x = ak.ones(2, requires_grad=True)
    a = x * 1
    a.retain_grad()
    a.mul_(3)
    (a * 2).sum().backward()
    assert a.grad.tolist() == [2.0, 2.0]  # the gradient of the new value, as in PyTorch
    assert x.grad.tolist() == [6.0, 6.0]


def test_allow_mutation_on_saved_tensors():
    x = ak.ones(2, requires_grad=True)
    with allow_mutation_on_saved_tensors():
        a = x.clone()
        y = a * a
        a[0:1].mul_(5)  # through a view, too
        y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]  # backward saw a's values from before the write
    with pytest.raises(RuntimeError, match="cannot be nested"):
        with allow_mutation_on_saved_tensors():
            with allow_mutation_on_saved_tensors():
                pass
    a = x.clone()
    y = a * a
    a.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()

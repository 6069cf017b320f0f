"""inference_mode's semantics, as PyTorch's: tensors made inside are inference tensors;
outside the mode they cannot be saved for backward, written in place or made to require
grad (PyTorch's messages); inside, anything goes; inference_mode(False) makes normal ones."""
import pytest

import adkit as ak


def _inference_pair():
    with ak.inference_mode():
        made = ak.ones(2)
        computed = made * 2
    return made, computed


def test_tensors_made_inside_are_inference_tensors():
    made, computed = _inference_pair()
    assert made.is_inference() and computed.is_inference() and ak.is_inference(made)
    assert not ak.ones(2).is_inference()
    with ak.inference_mode():
        with ak.inference_mode(False):
            assert not ak.ones(1).is_inference()


def test_inference_tensors_are_refused_where_pytorch_refuses_them():
    made, _ = _inference_pair()
    w = ak.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (w * made).sum()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside "
                                           "InferenceMode is not allowed"):
        made.add_(1)
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        made.requires_grad_()
    assert (w + made).requires_grad  # nothing saved: allowed, as in PyTorch
    assert not made.exp().is_inference()


def test_inside_inference_mode_anything_goes():
    made, _ = _inference_pair()
    with ak.inference_mode():
        made.add_(1)
        assert made.tolist() == [2.0, 2.0] and not ak.is_grad_enabled()


def test_decorator_form():
    @ak.inference_mode()
    def make():
        return ak.zeros(1)
    assert make().is_inference()

"""Every differentiable op in the table: gradcheck and gradgradcheck in float64 against
central finite differences."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import gradcheck, gradgradcheck

from ._op_cases import op_cases
from .op_db import to_tensor_args


def _differentiable_call(info, sample):
    args = to_tensor_args(sample.args, requires_grad=True, grad_argnums=info.grad_argnums)
    if not any(isinstance(a, ak.Tensor) and a.requires_grad for a in args):
        pytest.skip("no float tensor input to differentiate")
    if all(a.numel() == 0 for a in args if isinstance(a, ak.Tensor) and a.requires_grad):
        pytest.skip("empty inputs: nothing to perturb")
    return (lambda *a: info.op(*a, **sample.kwargs)), args


@pytest.mark.parametrize("info,dtype,sample",
                         op_cases(dtypes=[np.float64], only=lambda i: i.supports_grad))
def test_gradcheck(info, dtype, sample):
    fn, args = _differentiable_call(info, sample)
    assert gradcheck(fn, args, atol=info.gradcheck_atol, rtol=info.gradcheck_rtol)


@pytest.mark.parametrize("info,dtype,sample",
                         op_cases(dtypes=[np.float64], only=lambda i: i.supports_gradgrad))
def test_gradgradcheck(info, dtype, sample):
    fn, args = _differentiable_call(info, sample)
    assert gradgradcheck(fn, args, atol=info.gradcheck_atol, rtol=info.gradcheck_rtol)


@pytest.mark.parametrize("info,dtype,sample",
                         op_cases(dtypes=[np.float32], only=lambda i: i.supports_grad))
def test_float32_grad_has_input_dtype(info, dtype, sample):
    """Gradients come back in each input's dtype and shape (float32 here)."""
    fn, args = _differentiable_call(info, sample)
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    outs = [o for o in outs if isinstance(o, ak.Tensor) and o.requires_grad]
    diff = [a for a in args if isinstance(a, ak.Tensor) and a.requires_grad]
    grads = ak.autograd.grad(outs, diff, [ak.ones_like(o) for o in outs], allow_unused=True)
    for a, g in zip(diff, grads):
        if g is not None:
            assert g.dtype == a.dtype and g.shape == a.shape

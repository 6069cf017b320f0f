"""Every op in the table against its numpy reference: values, shapes and dtypes, for the
function and the method variant."""
import numpy as np

import adkit as ak

from ._op_cases import flatten_outputs, op_cases
from .op_db import to_tensor_args

import pytest


def _check_against_ref(info, dtype, sample, out):
    expected = flatten_outputs(info.ref(*sample.args, **sample.kwargs))
    got = flatten_outputs(out)
    assert len(got) == len(expected), f"{info.name}: {len(got)} outputs, expected {len(expected)}"
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert isinstance(g, ak.Tensor), f"{info.name} returned {type(g).__name__}"
        assert g.shape == e.shape, f"{info.name}: shape {tuple(g.shape)} != {e.shape}"
        want_dtype = e.dtype if e.dtype.kind != "f" else dtype
        assert g.dtype == want_dtype, f"{info.name}: dtype {g.dtype} != {want_dtype}"
        np.testing.assert_allclose(g.numpy().astype(np.float64) if g.dtype.is_floating_point
                                   else g.numpy(), e, atol=info.atol.get(dtype.type, 1e-5),
                                   rtol=info.rtol.get(dtype.type, 1e-5), equal_nan=True)


@pytest.mark.parametrize("info,dtype,sample", op_cases())
def test_forward_matches_numpy(info, dtype, sample):
    out = info.op(*to_tensor_args(sample.args), **sample.kwargs)
    _check_against_ref(info, dtype, sample, out)


@pytest.mark.parametrize("info,dtype,sample", op_cases(only=lambda i: i.method is not None))
def test_method_variant_matches_function(info, dtype, sample):
    args = to_tensor_args(sample.args)
    out = getattr(args[0], info.method)(*args[1:], **sample.kwargs)
    _check_against_ref(info, dtype, sample, out)


@pytest.mark.parametrize("info,dtype,sample", op_cases(only=lambda i: i.supports_grad))
def test_forward_records_grad_fn(info, dtype, sample):
    """With a float input requiring grad, float outputs get a grad_fn named after the op;
    integer and bool outputs never require grad."""
    args = to_tensor_args(sample.args, requires_grad=True, grad_argnums=info.grad_argnums)
    if not any(isinstance(a, ak.Tensor) and a.requires_grad for a in args):
        pytest.skip("no float tensor input")
    for out in flatten_outputs(info.op(*args, **sample.kwargs)):
        if out.dtype.is_floating_point:
            assert out.requires_grad and out.grad_fn is not None
            # CopySlices: a base written through a view (PyTorch names it so too)
            assert out.grad_fn.name().endswith("Backward0") or \
                out.grad_fn.name() == "CopySlices"
        else:
            assert not out.requires_grad and out.grad_fn is None

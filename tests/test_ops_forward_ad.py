"""Forward mode over the whole op table: each op's jvp rule against finite differences
(gradcheck with check_forward_ad), and forward against reverse mode: <u, J v> from the
jvp equals <J^T u, v> from the vjp, for random u and v."""
import numpy as np
import pytest

import adkit as ak
from adkit.autograd import forward_ad as fwAD
from adkit.autograd import gradcheck

from ._op_cases import flatten_outputs, op_cases
from .op_db import to_tensor_args

CASES = op_cases(dtypes=[np.float64], only=lambda i: i.supports_grad)


def _call(info, sample):
    args = to_tensor_args(sample.args, requires_grad=True, grad_argnums=info.grad_argnums)
    diff = [i for i, a in enumerate(args) if isinstance(a, ak.Tensor) and a.requires_grad]
    if not diff or all(args[i].numel() == 0 for i in diff):
        pytest.skip("no non-empty float tensor input")
    return (lambda *a: info.op(*a, **sample.kwargs)), args, diff


@pytest.mark.parametrize("info,dtype,sample", CASES)
def test_forward_ad_gradcheck(info, dtype, sample):
    fn, args, _ = _call(info, sample)
    assert gradcheck(fn, args, check_forward_ad=True, check_backward_ad=False,
                     atol=info.gradcheck_atol, rtol=info.gradcheck_rtol)


@pytest.mark.parametrize("info,dtype,sample", CASES)
def test_forward_and_reverse_mode_agree(info, dtype, sample):
    fn, args, diff = _call(info, sample)
    rng = np.random.default_rng(0)
    vs = {i: rng.standard_normal(args[i].shape) for i in diff}
    with fwAD.dual_level():
        duals = list(args)
        for i in diff:
            duals[i] = fwAD.make_dual(args[i], ak.tensor(vs[i]))
        outs = [o for o in flatten_outputs(fn(*duals)) if o.is_floating_point()]
        primals = [fwAD.unpack_dual(o).primal for o in outs]
        tangents = [fwAD.unpack_dual(o).tangent for o in outs]
    us = [rng.standard_normal(o.shape) for o in outs]
    u_jv = sum(float((u * t.detach().numpy()).sum()) for u, t in zip(us, tangents) if t is not None)
    wanted = [(p, ak.tensor(u)) for p, u in zip(primals, us) if p.requires_grad]
    grads = ak.autograd.grad([p for p, _ in wanted], [args[i] for i in diff],
                             [u for _, u in wanted], allow_unused=True)
    jtu_v = sum(float((g.numpy() * vs[i]).sum()) for g, i in zip(grads, diff)
                if g is not None)
    assert np.isclose(u_jv, jtu_v, rtol=1e-7, atol=1e-9), (u_jv, jtu_v)

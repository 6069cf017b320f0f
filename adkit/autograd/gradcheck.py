"""gradcheck and gradgradcheck: analytical Jacobians against float64 central differences.

Owns: `gradcheck`, `gradgradcheck`, `GradcheckError`. Does not: know any op. The
numerical Jacobian perturbs each input element in place (through `.data`), like
PyTorch's slow-mode gradcheck; the analytical one is built row by row with `grad`.
"""
import warnings

import numpy as np

from ..tensor import Tensor, _make
from . import engine, forward_ad
from .grad_mode import enable_grad


class GradcheckError(RuntimeError):
    """Raised when an analytical and a numerical Jacobian disagree."""


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _differentiable_outputs(fn, inputs):
    with enable_grad():
        outputs = _as_tuple(fn(*inputs))
    return [o for o in outputs if isinstance(o, Tensor) and o.is_floating_point()], outputs


def _numerical_jacobian(fn, inputs, input_idx, outputs, eps):
    """J[j][k, i]: d output j element k / d input element i, by central differences."""
    x = inputs[input_idx]
    flat = x._data.reshape(-1) if x._data.flags.c_contiguous else None
    if flat is None:
        raise GradcheckError(f"gradcheck needs contiguous inputs (input {input_idx} is not)")
    jac = [np.zeros((o.numel(), x.numel())) for o in outputs]
    for i in range(x.numel()):  # grad mode stays on: fn may itself call grad()
        orig = flat[i].item()
        flat[i] = orig - eps
        minus = [np.array(o._data, dtype=np.float64) for o in _float_outs(fn, inputs)]
        flat[i] = orig + eps
        plus = [np.array(o._data, dtype=np.float64) for o in _float_outs(fn, inputs)]
        flat[i] = orig
        for j, (p, m) in enumerate(zip(plus, minus)):
            jac[j][:, i] = ((p - m) / (2 * eps)).reshape(-1)
    return jac


def _float_outs(fn, inputs):
    return [o for o in _as_tuple(fn(*inputs)) if isinstance(o, Tensor) and o.is_floating_point()]


def _analytical_jacobian(inputs, input_idx, outputs):
    x = inputs[input_idx]
    jac = [np.zeros((o.numel(), x.numel())) for o in outputs]
    for j, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        for k in range(out.numel()):
            seed = np.zeros(out.numel(), dtype=out._data.dtype)
            seed[k] = 1
            (g,) = engine.grad(out, x, _make(seed.reshape(out._data.shape)),
                               retain_graph=True, allow_unused=True)
            if g is not None:
                if g.shape != x.shape:
                    raise GradcheckError(f"Gradient for input {input_idx} has shape "
                                         f"{list(g.shape)}, expected {list(x.shape)}")
                jac[j][k, :] = g._data.reshape(-1)
    return jac


def _forward_jacobian(func, inputs, input_idx, outputs):
    """J[j][:, i] from forward mode: the tangents of the outputs for a one-hot tangent on
    input element i."""
    x = inputs[input_idx]
    jac = [np.zeros((o.numel(), x.numel())) for o in outputs]
    for i in range(x.numel()):
        seed = np.zeros(x.numel(), dtype=x._data.dtype)
        seed[i] = 1
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(x, _make(seed.reshape(x._data.shape)))
            args = inputs[:input_idx] + (dual,) + inputs[input_idx + 1:]
            outs = _float_outs(func, args)
            for j, out in enumerate(outs):
                tangent = forward_ad.unpack_dual(out).tangent
                if tangent is not None:
                    jac[j][:, i] = tangent._data.reshape(-1)
    return jac


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              check_forward_ad=False, check_backward_ad=True, nondet_tol=0.0,
              check_undefined_grad=True, check_batched_grad=False, fast_mode=False,
              masked=None):
    """Check the gradients of `func` at `inputs` against finite differences, with
    PyTorch's messages: the Jacobians (reverse, and forward mode with check_forward_ad),
    that backward is reentrant (two runs agree within nondet_tol), and with
    check_batched_grad that gradients computed under vmap equal a loop.

    Inputs that require grad should be float64. Returns True, or raises GradcheckError
    naming the output and the input that disagree (or returns False with
    raise_exception=False)."""
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of the them have requires_grad=True.")
    for i in diff_idx:
        if inputs[i].dtype.np != np.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision "
                          "floating point. This check will likely fail if all the inputs "
                          "are not of double precision floating point. ", stacklevel=2)
    try:
        outputs, _ = _differentiable_outputs(func, inputs)
        for i in diff_idx:
            numerical = _numerical_jacobian(func, inputs, i, outputs, eps)
            if check_backward_ad:
                analytical = _analytical_jacobian(inputs, i, outputs)
                for j, (a, n) in enumerate(zip(analytical, numerical)):
                    _compare(a, n, j, i, atol, rtol, "Jacobian mismatch")
                _check_reentrant(analytical, _analytical_jacobian(inputs, i, outputs),
                                 nondet_tol)
                if check_batched_grad:
                    _check_batched_grad(inputs, i, outputs, atol, rtol)
            if check_forward_ad:
                forward = _forward_jacobian(func, inputs, i, outputs)
                for j, (a, n) in enumerate(zip(forward, numerical)):
                    _compare(a, n, j, i, atol, rtol,
                             "Jacobian computed with forward mode mismatch")
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def _compare(analytical, numerical, out_idx, in_idx, atol, rtol, what):
    """PyTorch's message, word for word (the Jacobians printed as adkit tensors)."""
    bad = ~np.isclose(analytical, numerical, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        raise GradcheckError(f"{what} for output {out_idx} with respect to input {in_idx},\n"
                             f"numerical:{_make(numerical)!r}\nanalytical:"
                             f"{_make(analytical)!r}\n")


_NONDETERMINISM = (
    "Backward is not reentrant, i.e., running backward with same input and grad_output "
    "multiple times gives different values, although analytical gradient matches "
    "numerical gradient.The tolerance for nondeterminism was {tol}.\n\nNOTE: If your op "
    "relies on non-deterministic operations, this failure might be expected: call "
    "gradcheck/gradgradcheck with `nondet_tol=<tol>` as a keyword argument.\n")


def _check_reentrant(first, second, nondet_tol):
    """The analytical Jacobian computed twice must agree within nondet_tol."""
    for a, b in zip(first, second):
        if a.size and np.max(np.abs(a - b)) > nondet_tol:
            raise GradcheckError(_NONDETERMINISM.format(tol=nondet_tol))


_BATCHED = ("For output {out} and input {inp}:\n\ngradcheck or gradgradcheck failed while "
            "testing batched gradient computation.\nThis could have been invoked in a number "
            "of ways (via a test that calls\ngradcheck/gradgradcheck directly or via an "
            "autogenerated test).\n\nGot:\n{got}\n\nExpected:\n{want}")


def _check_batched_grad(inputs, input_idx, outputs, atol, rtol):
    """Gradients for a batch of random grad_outputs under ak.func.vmap equal a loop."""
    from .. import func  # upward call (see tests/test_layering.py)
    x = inputs[input_idx]
    rng = np.random.default_rng(0)
    for j, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        batch = _make(rng.standard_normal((3,) + out._data.shape).astype(out._data.dtype))

        def one(grad_output, out=out):
            (g,) = engine.grad(out, x, grad_output, retain_graph=True, allow_unused=True,
                               materialize_grads=True)
            return g
        got = func.vmap(one)(batch)
        want = np.stack([one(batch[b])._data for b in range(3)])
        if not np.allclose(got._data, want, rtol=rtol, atol=atol, equal_nan=True):
            raise GradcheckError(_BATCHED.format(out=j, inp=input_idx, got=got,
                                                 want=_make(want)))


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True,
                  nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False, check_batched_grad=False):
    """Check second derivatives: gradcheck of the function
    (inputs, grad_outputs) -> grad(func(inputs), inputs, grad_outputs, create_graph);
    check_batched_grad: second derivatives under vmap equal a loop, as gradcheck's."""
    inputs = _as_tuple(inputs)
    outputs, _ = _differentiable_outputs(func, inputs)
    outputs = [o for o in outputs if o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(_make(rng.standard_normal(o._data.shape)
                                   .astype(o._data.dtype)).requires_grad_()
                             for o in outputs)
    grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]

    def first_derivatives(*args):
        ins, gos = args[:n_in], args[n_in:]
        outs = [o for o in _float_outs(func, ins) if o.requires_grad]
        diff = [ins[i] for i in diff_idx]
        grads = engine.grad(outs, diff, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivatives, inputs + grad_outputs, eps=eps, atol=atol,
                     rtol=rtol, raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_batched_grad=check_batched_grad)

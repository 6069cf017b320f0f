"""adkit.autograd.functional mirrors torch.autograd.functional: jacobian, hessian, vjp,
jvp, hvp, vhp, built on `grad` (reverse mode).

Owns: the input/output conventions (a bare tensor in gives bare results; tuples give
tuples) and the double-vjp trick for jvp. Does not: add derivative rules.
"""
import numpy as np

from ..tensor import Tensor, _make
from .engine import grad
from .grad_mode import enable_grad


def _as_tuple(x, what, fn_name):
    if isinstance(x, Tensor):
        return (x,), False
    if not isinstance(x, (tuple, list)) or not all(isinstance(t, Tensor) for t in x):
        raise TypeError(f"The {what} given to {fn_name} must be either a Tensor or a tuple "
                        f"of Tensors but the given {what} is {type(x).__name__}.")
    return tuple(x), True


def _prepare(inputs, create_graph):
    """Inputs that require grad and are cut from (or, with create_graph, kept in) the
    caller's graph."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad
                 else t.detach().requires_grad_(t.is_floating_point()) for t in inputs)


def _finish(results, create_graph):
    return tuple(r if r is None or create_graph else r.detach() for r in results)


def _zeros_for(grads, like):
    return tuple(_make(np.zeros(t._data.shape, t._data.dtype)) if g is None else g
                 for g, t in zip(grads, like))


def _grad(outputs, inputs, grad_outputs, create_graph):
    return _zeros_for(grad(outputs, inputs, grad_outputs, create_graph=create_graph,
                           retain_graph=True, allow_unused=True), inputs)


def _check_v(v, like, name):
    v, _ = _as_tuple(v, "v", name)
    if len(v) != len(like):
        raise RuntimeError(f"v has invalid size: should be {len(like)} but got {len(v)}.")
    for vi, t in zip(v, like):
        if vi.shape != t.shape:
            raise RuntimeError(f"Entry in v has invalid size: should be {t.shape} but got "
                               f"{vi.shape}.")
    return v


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the vector-Jacobian product at `inputs`."""
    with enable_grad():
        inputs, in_tuple = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph)
        outputs, out_tuple = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "vjp")
        if v is None:
            if len(outputs) != 1 or outputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the user-provided "
                                   "function returns a single Tensor with a single element.")
            v = tuple(_make(np.ones(o._data.shape, o._data.dtype)) for o in outputs)
        v = _check_v(v, outputs, "vjp")
        result = _grad(outputs, inputs, v, create_graph)
    outputs = _finish(outputs, create_graph)
    result = _finish(result, create_graph)
    return (outputs if out_tuple else outputs[0]), (result if in_tuple else result[0])


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), by the double-vjp trick: J v = d/du (u^T J) v."""
    with enable_grad():
        inputs, in_tuple = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph)
        if v is None:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the input to the "
                                   "user-provided function is a single Tensor with a single "
                                   "element.")
            v = tuple(_make(np.ones(t._data.shape, t._data.dtype)) for t in inputs)
        v = _check_v(v, inputs, "jvp")
        outputs, out_tuple = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "jvp")
        dummies = tuple(_make(np.zeros(o._data.shape, o._data.dtype)).requires_grad_()
                        for o in outputs)
        vjps = _grad(outputs, inputs, dummies, create_graph=True)
        result = _grad([g for g in vjps], dummies, v, create_graph)
    outputs = _finish(outputs, create_graph)
    result = _finish(result, create_graph)
    return (outputs if out_tuple else outputs[0]), (result if out_tuple else result[0])


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of func at inputs: for output i and input j, a tensor of shape
    output_i.shape + input_j.shape (nested tuples as in PyTorch)."""
    with enable_grad():
        inputs, in_tuple = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph)
        outputs, out_tuple = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "jacobian")
        jac = []
        for out in outputs:
            rows = [[] for _ in inputs]
            for k in range(out.numel()):
                seed = np.zeros(out.numel(), out._data.dtype)
                seed[k] = 1
                grads = _grad((out,), inputs, (_make(seed.reshape(out._data.shape)),),
                              create_graph)
                for j, g in enumerate(grads):
                    rows[j].append(g)
            jac.append(tuple(_stack_rows(r, out, t) for r, t in zip(rows, inputs)))
    jac = [tuple(_finish(row, create_graph)) for row in jac]
    if not in_tuple:
        jac = [row[0] for row in jac]
    return tuple(jac) if out_tuple else jac[0]


def _stack_rows(rows, out, inp):
    """Stack the gradient rows into output.shape + input.shape. NB: through __setitem__
    (an op, so differentiable with create_graph) since autograd may not import ops."""
    jac = _make(np.zeros((len(rows),) + tuple(inp.shape), inp._data.dtype))
    for k, g in enumerate(rows):
        jac[k] = g
    return jac.reshape(tuple(out.shape) + tuple(inp.shape))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar func at inputs (nested tuples for tuple inputs)."""
    inputs_t, in_tuple = _as_tuple(inputs, "inputs", "hessian")

    def jac_func(*inp):
        with enable_grad():
            out = func(*inp)
            if not isinstance(out, Tensor) or out.numel() != 1:
                raise RuntimeError("The Tensor returned by the function given to hessian "
                                   "should contain a single element")
            return _grad((out.reshape(()),), inp, None, create_graph=True)

    result = jacobian(jac_func, inputs_t, create_graph=create_graph)
    if not in_tuple:
        return result[0][0]
    return result


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a scalar func."""
    return _hessian_product(func, inputs, v, create_graph, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a scalar func (H is symmetric, so this equals v^T H)."""
    return _hessian_product(func, inputs, v, create_graph, "hvp")


def _hessian_product(func, inputs, v, create_graph, name):
    with enable_grad():
        inputs, in_tuple = _as_tuple(inputs, "inputs", name)
        inputs = _prepare(inputs, create_graph)
        out = func(*inputs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {name} should "
                               "contain a single element")
        if v is None:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the input to the "
                                   "user-provided function is a single Tensor with a single "
                                   "element.")
            v = tuple(_make(np.ones(t._data.shape, t._data.dtype)) for t in inputs)
        v = _check_v(v, inputs, name)
        first = _grad((out,), inputs, None, create_graph=True)
        result = _grad(first, inputs, v, create_graph)
    out = out if create_graph else out.detach()
    result = _finish(result, create_graph)
    return out, (result if in_tuple else result[0])

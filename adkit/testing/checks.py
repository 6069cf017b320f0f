"""The differential checks: every path that computes a value or a derivative of a
function, compared with an independent one. Public, so a researcher can check their own
function, Function or pass: each check takes `fn` (tensors -> one float tensor), the
input arrays and a `Context`, and raises `Mismatch` naming what disagreed.

Owns: the checks and the table `CHECKS`. Does not: generate or shrink programs (fuzz.py).
Derivatives are compared as scalars ⟨u, J v⟩ against central differences in float64
(step 1e-6), so one check costs a few evaluations whatever the sizes.
"""
import dataclasses

import numpy as np

from .. import func
from ..autograd import forward_ad, grad as autograd_grad
from ..codegen import compiled, jit, plan_cache
from ..codegen.jit import OPTIMIZE
from ..ir import passes, trace
from ..tensor import tensor
from .asserts import assert_close


class Mismatch(AssertionError):
    """Two paths disagreed (the message says which and by how much)."""


@dataclasses.dataclass
class Context:
    """What every check shares: random directions and the user's passes to try."""
    rng: np.random.Generator
    user_passes: tuple = ()
    eps: float = 1e-6
    builtin_passes: bool = True  # False: check_passes tries only the user's passes


def _tensors(arrays):
    return [tensor(a) for a in arrays]


def _np(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _close(actual, expected, what, rtol=1e-7, atol=1e-9):
    """Compare at float64 tolerances, or at float32's when either side is float32
    (fused and reordered float32 arithmetic differs from eager by a few ulps)."""
    if np.asarray(actual).dtype == np.float32 or np.asarray(expected).dtype == np.float32:
        rtol, atol = max(rtol, 2e-4), max(atol, 2e-5)
    try:
        assert_close(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float),
                     rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)
    except AssertionError as e:
        raise Mismatch(f"{what}: {e}") from None


def _directions(ctx, arrays, out):
    v = [ctx.rng.standard_normal(a.shape) for a in arrays]
    u = ctx.rng.standard_normal(np.shape(out))
    return u, v


def _fd(fn, arrays, v, eps):
    """Central difference of fn along v: (f(x + eps v) - f(x - eps v)) / 2 eps."""
    plus = _np(fn(*_tensors([a + eps * d for a, d in zip(arrays, v)])))
    minus = _np(fn(*_tensors([a - eps * d for a, d in zip(arrays, v)])))
    return (plus - minus) / (2 * eps)


def _grad_fn(fn, u, n):
    """x -> gradients of <u, fn(x)> with respect to every input."""
    weights = tensor(u)
    return func.grad(lambda *xs: (fn(*xs) * weights).sum(), argnums=tuple(range(n)))


def _fd_tolerance(arrays):
    return dict(rtol=1e-5, atol=1e-6) if arrays[0].dtype == np.float64 else \
        dict(rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- the checks
def check_forward(fn, arrays, ctx, reference=None):
    """Eager values against a reference (numpy's, when given)."""
    out = fn(*_tensors(arrays))
    if reference is not None:
        _close(_np(out), reference, "eager forward vs numpy", rtol=1e-10, atol=1e-12)


def check_reverse(fn, arrays, ctx, reference=None):
    """<u, J v> from ak.autograd.grad against central differences."""
    xs = [tensor(a, requires_grad=True) for a in arrays]
    out = fn(*xs)
    u, v = _directions(ctx, arrays, _np(out))
    grads = autograd_grad((out * tensor(u)).sum(), xs, allow_unused=True,
                          materialize_grads=True)
    got = sum(np.sum(_np(g) * d) for g, d in zip(grads, v))
    _close(got, np.sum(u * _fd(fn, arrays, v, ctx.eps)), "reverse mode vs finite "
           "differences", **_fd_tolerance(arrays))


def check_jvp(fn, arrays, ctx, reference=None):
    """J v from ak.func.jvp against central differences."""
    v = [ctx.rng.standard_normal(a.shape) for a in arrays]
    _, tangent = func.jvp(fn, tuple(_tensors(arrays)), tuple(_tensors(v)))
    _close(_np(tangent), _fd(fn, arrays, v, ctx.eps), "func.jvp vs finite differences",
           **_fd_tolerance(arrays))


def check_forward_ad(fn, arrays, ctx, reference=None):
    """J v from ak.autograd.forward_ad dual tensors against central differences."""
    v = [ctx.rng.standard_normal(a.shape) for a in arrays]
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(x, t) for x, t in zip(_tensors(arrays), _tensors(v))]
        tangent = forward_ad.unpack_dual(fn(*duals)).tangent
    got = np.zeros(np.shape(_np(fn(*_tensors(arrays))))) if tangent is None else _np(tangent)
    _close(got, _fd(fn, arrays, v, ctx.eps), "forward_ad vs finite differences",
           **_fd_tolerance(arrays))


def check_double_backward(fn, arrays, ctx, reference=None):
    """Second order: the gradient of h(x) = <grad <u, f>(x), w> along v, against central
    differences of h."""
    u, v = _directions(ctx, arrays, _np(fn(*_tensors(arrays))))
    w = [ctx.rng.standard_normal(a.shape) for a in arrays]
    grad_fn = _grad_fn(fn, u, len(arrays))

    def h(*xs):
        return sum((g * tensor(d)).sum() for g, d in zip(grad_fn(*xs), w))
    xs = [tensor(a, requires_grad=True) for a in arrays]
    value = h(*xs)
    if not value.requires_grad:  # the gradient does not depend on x: f is linear
        got = 0.0
    else:
        second = autograd_grad(value, xs, allow_unused=True, materialize_grads=True)
        got = sum(np.sum(_np(g) * d) for g, d in zip(second, v))
    _close(got, _fd(h, arrays, v, ctx.eps), "double backward vs finite differences",
           **_fd_tolerance(arrays))


def _batch(arrays, ctx):
    return [np.stack([a, a * 0.5 + 0.1, -a]) for a in arrays]


def check_vmap(fn, arrays, ctx, reference=None):
    """ak.func.vmap over a batch of three inputs against a Python loop."""
    batch = _batch(arrays, ctx)
    got = _np(func.vmap(fn)(*_tensors(batch)))
    want = np.stack([_np(fn(*_tensors([b[i] for b in batch]))) for i in range(3)])
    _close(got, want, "vmap vs a loop", rtol=1e-10, atol=1e-12)


def check_trace(fn, arrays, ctx, reference=None):
    """ak.trace's graph, evaluated, against eager."""
    graph = trace(fn, *_tensors(arrays))
    graph.validate()
    _close(_np(graph(*_tensors(arrays))), _np(fn(*_tensors(arrays))), "trace vs eager",
           rtol=1e-10, atol=1e-12)


def _pass_list(ctx):
    named = []
    if ctx.builtin_passes:
        named = [(name, getattr(passes, name)) for name in
                 ("dce", "cse", "fold_constants", "simplify", "decompose", "fuse")]
        named.append(("jit's pipeline", OPTIMIZE))
    return named + [(getattr(p, "__name__", repr(p)), p) for p in ctx.user_passes]


def _check_passes_on(graph, args, want, what, ctx):
    for name, pass_ in _pass_list(ctx):
        try:
            out = pass_(graph)
            out.validate()
            got = out(*args)
        except Exception as e:
            raise Mismatch(f"{name} on the {what} graph raised {type(e).__name__}: "
                           f"{e}") from None
        got = got if isinstance(got, (tuple, list)) else (got,)
        for g, w in zip(got, want):
            _close(_np(g), _np(w), f"{name} on the {what} graph vs eager", rtol=1e-9,
                   atol=1e-11)


def check_passes(fn, arrays, ctx, reference=None):
    """Every pass alone and the default pipeline, on the traced function and on its
    traced gradient: validate() holds and values equal eager's."""
    xs = _tensors(arrays)
    _check_passes_on(trace(fn, *xs), xs, (fn(*xs),), "forward", ctx)
    u, _ = _directions(ctx, arrays, _np(fn(*xs)))
    grad_fn = _grad_fn(fn, u, len(arrays))
    _check_passes_on(trace(grad_fn, *xs), xs, grad_fn(*xs), "gradient", ctx)


def check_jit(fn, arrays, ctx, reference=None):
    """ak.jit against eager: native code from the first call (compile="eager"), its
    cached call, and the tiered default's first call (the traced graph run by numpy
    while native code compiles in the background)."""
    want = _np(fn(*_tensors(arrays)))
    native = jit(fn, compile="eager")
    _close(_np(native(*_tensors(arrays))), want, "jit (first call) vs eager", rtol=1e-9,
           atol=1e-11)
    _close(_np(native(*_tensors(arrays))), want, "jit (cached call) vs eager", rtol=1e-9,
           atol=1e-11)
    _close(_np(jit(fn)(*_tensors(arrays))), want, "jit's numpy tier (first call of "
           'compile="background") vs eager', rtol=1e-9, atol=1e-11)
    quick = _quick_code(native.lower(*_tensors(arrays)), ctx.rng)
    _close(_np(quick(*_tensors(arrays))), want, "jit's quick code (first calls of a big "
           "graph) vs eager", rtol=1e-9, atol=1e-11)
    restored = _restored(native.compile(*_tensors(arrays)))
    if restored is not None:
        _close(_np(restored(*_tensors(arrays))), want, "jit's plan from the disk cache "
               "(another process's first call) vs eager", rtol=1e-9, atol=1e-11)


def _restored(program):
    """The Compiled `program` as another process's first call gets it from the disk
    cache of plans (its entry made, read back and its object code linked again, in
    memory), or None when it is not cached (its plan is not data). Its kernels, read
    when first used, must be the original's."""
    chunks = plan_cache.entry(program)
    if chunks is None:
        return None
    restored = plan_cache.restored(b"".join(chunks))
    if restored is None:
        raise Mismatch("the disk cache of plans could not read back an entry it made")
    if [k.name for k in restored.kernels] != [k.name for k in program.kernels]:
        raise Mismatch("the plan from the disk cache has other kernels than its original")
    return restored


def _quick_code(graph, rng):
    """The quick code of an optimized graph, as a big graph's first calls run it, with
    thresholds drawn so that a small program's kernels are also slow ones (lowered
    first, in a module of their own), cold ones (a module at code generation level 0)
    or scalar loops (compiled.quick_cold, SCALAR_NS)."""
    saved = compiled.QUICK_COLD_NS, compiled.SCALAR_NS
    compiled.QUICK_COLD_NS, compiled.SCALAR_NS = rng.choice([0, 40, 1e5]), \
        rng.choice([0, 40, 2e4])
    try:
        return compiled.Compiled(graph, "fuzzed program", quick=True)
    finally:
        compiled.QUICK_COLD_NS, compiled.SCALAR_NS = saved


def check_jit_grad(fn, arrays, ctx, reference=None):
    """ak.jit(ak.func.grad(...)), natively compiled, against the eager gradient."""
    u, _ = _directions(ctx, arrays, _np(fn(*_tensors(arrays))))
    grad_fn = _grad_fn(fn, u, len(arrays))
    native = jit(grad_fn, compile="eager")
    got = native(*_tensors(arrays))
    quick = _quick_code(native.lower(*_tensors(arrays)), ctx.rng)(*_tensors(arrays))
    restored = _restored(native.compile(*_tensors(arrays)))
    cached = restored(*_tensors(arrays)) if restored is not None else got
    for g, q, c, want in zip(got, quick, cached, grad_fn(*_tensors(arrays)), strict=True):
        _close(_np(g), _np(want), "jit(grad) vs eager grad", rtol=1e-9, atol=1e-11)
        _close(_np(q), _np(want), "jit(grad)'s quick code vs eager grad", rtol=1e-9,
               atol=1e-11)
        _close(_np(c), _np(want), "jit(grad)'s plan from the disk cache vs eager grad",
               rtol=1e-9, atol=1e-11)


def check_vmap_grad(fn, arrays, ctx, reference=None):
    """ak.func.vmap(ak.func.grad(...)) against a loop of gradients."""
    u, _ = _directions(ctx, arrays, _np(fn(*_tensors(arrays))))
    grad_fn = _grad_fn(fn, u, len(arrays))
    batch = _batch(arrays, ctx)
    got = func.vmap(grad_fn)(*_tensors(batch))
    for k, g in enumerate(got):
        want = np.stack([_np(grad_fn(*_tensors([b[i] for b in batch]))[k])
                         for i in range(3)])
        _close(_np(g), want, "vmap(grad) vs a loop of grads", rtol=1e-10, atol=1e-12)


def check_sparsity(fn, arrays, ctx, reference=None):
    """ak.ir.passes.sparsity's pattern holds every nonzero of the dense Jacobian
    (ak.func.jacfwd, each input's columns in turn) at this point."""
    xs = _tensors(arrays)
    pattern = passes.sparsity(trace(fn, *xs)).todense()
    jacobians = func.jacfwd(fn, argnums=tuple(range(len(xs))))(*xs)
    n_out = _np(fn(*xs)).size
    dense = np.concatenate([_np(j).reshape(n_out, a.size) for j, a in zip(jacobians, arrays)],
                           axis=1) != 0
    if pattern.shape != dense.shape:
        raise Mismatch(f"sparsity pattern of shape {pattern.shape}, Jacobian {dense.shape}")
    missed = np.argwhere(dense & ~pattern)
    if missed.size:
        raise Mismatch(f"the sparsity pattern misses {len(missed)} nonzeros of the "
                       f"Jacobian, first (row, column) {tuple(missed[0])}")


CHECKS = {
    "forward": check_forward, "reverse": check_reverse, "jvp": check_jvp,
    "forward_ad": check_forward_ad, "double_backward": check_double_backward,
    "vmap": check_vmap, "trace": check_trace, "passes": check_passes, "jit": check_jit,
    "jit_grad": check_jit_grad, "vmap_grad": check_vmap_grad, "sparsity": check_sparsity,
}


def run_checks(fn, arrays, ctx, names=None, reference=None):
    """Run the named checks (default: all); {check name: error message} of those that
    failed. An exception other than Mismatch counts as a failure too (a crash on a valid
    program is a bug: traced and batched indices included, since issue 13)."""
    failures = {}
    for name in names or CHECKS:
        try:
            CHECKS[name](fn, arrays, ctx, reference=reference)
        except Mismatch as e:
            failures[name] = str(e)
        except Exception as e:  # noqa: BLE001  (a crash on a valid program is a bug)
            failures[name] = f"raised {type(e).__name__}: {e}"
    return failures

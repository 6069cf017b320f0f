"""The three steps of dpsgd.py (`sgd`, `dp`, `loop`) in each framework, over the same
`loss` and `clipped` (written once against a small numpy-like namespace per framework).
A child process imports only the framework it runs: `STEPS[name](params, x, target,
noise, batch)` -> {variant: zero-argument function running one step}.
"""
from dpsgd import LEARNING_RATE, clipped, dp_update, loss


def _sgd_update(params, grads):
    return tuple(p - LEARNING_RATE * g for p, g in zip(params, grads))


def _summed(per_example):
    return tuple(g.sum(0) for g in per_example)


def _loop_step(clip_one, params, rows, noise, batch):
    """DP-SGD with one (compiled) per-example gradient call per example."""
    def step():
        total = None
        for x, t in rows:
            g = clip_one(params, x, t)
            total = g if total is None else tuple(a + b for a, b in zip(total, g))
        return dp_update(params, total, noise, batch)
    return step


def adkit_lib():
    """adkit's namespace for `loss` and `clipped`."""
    import adkit as ak

    class Lib:
        relu, matmul, log, exp, sqrt = ak.relu, ak.matmul, ak.log, ak.exp, ak.sqrt
        maximum = staticmethod(lambda a, c: ak.clamp(a, min=c))
        max = staticmethod(lambda a, axis, keepdims: ak.amax(a, dim=axis, keepdim=keepdims))
        sum = staticmethod(lambda a, axis=None, keepdims=False:
                           a.sum() if axis is None else a.sum(axis, keepdim=keepdims))
        mean = staticmethod(lambda a: a.mean())
    return Lib


def adkit_steps(params, x, target, noise, batch):
    import adkit as ak
    F, Lib = ak.func, adkit_lib()
    grad_one = F.grad(lambda p, xb, t: loss(Lib, p, xb, t))
    clip_one = ak.jit(lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti)))
    per_example = F.vmap(lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti)),
                         in_dims=(None, 0, 0))
    dp = ak.jit(lambda p, xb, t, n: dp_update(p, _summed(per_example(p, xb, t)), n, batch))
    sgd = ak.jit(lambda p, xb, t: _sgd_update(p, grad_one(p, xb, t)))
    P, X, T = tuple(ak.tensor(a) for a in params), ak.tensor(x), ak.tensor(target)
    N = tuple(ak.tensor(a) for a in noise)
    rows = [(ak.tensor(x[i]), ak.tensor(target[i])) for i in range(batch)]
    return {"sgd": lambda: sgd(P, X, T), "dp": lambda: dp(P, X, T, N),
            "loop": _loop_step(clip_one, P, rows, N, batch)}


def jax_steps(params, x, target, noise, batch):
    import jax
    import jax.numpy as jnp

    class Lib:
        relu, matmul, log, exp, sqrt = jax.nn.relu, jnp.matmul, jnp.log, jnp.exp, jnp.sqrt
        maximum = staticmethod(jnp.maximum)
        max = staticmethod(lambda a, axis, keepdims: jnp.max(a, axis=axis, keepdims=keepdims))
        sum = staticmethod(lambda a, axis=None, keepdims=False:
                           jnp.sum(a, axis=axis, keepdims=keepdims))
        mean = staticmethod(jnp.mean)

    grad_one = jax.grad(lambda p, xb, t: loss(Lib, p, xb, t))
    clip_one = jax.jit(lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti)))
    per_example = jax.vmap(lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti)),
                           in_axes=(None, 0, 0))
    dp = jax.jit(lambda p, xb, t, n: dp_update(p, _summed(per_example(p, xb, t)), n, batch))
    sgd = jax.jit(lambda p, xb, t: _sgd_update(p, grad_one(p, xb, t)))
    P, X, T = tuple(jnp.asarray(a) for a in params), jnp.asarray(x), jnp.asarray(target)
    N = tuple(jnp.asarray(a) for a in noise)
    rows = [(X[i], T[i]) for i in range(batch)]
    loop = _loop_step(clip_one, P, rows, N, batch)
    return {"sgd": lambda: jax.block_until_ready(sgd(P, X, T)),
            "dp": lambda: jax.block_until_ready(dp(P, X, T, N)),
            "loop": lambda: jax.block_until_ready(loop())}


def torch_steps(params, x, target, noise, batch):
    import torch
    from torch.func import grad, vmap
    torch.set_num_threads(1)

    class Lib:
        relu, matmul, log, exp, sqrt = torch.relu, torch.matmul, torch.log, torch.exp, torch.sqrt
        maximum = staticmethod(lambda a, c: torch.clamp(a, min=c))
        max = staticmethod(lambda a, axis, keepdims: torch.amax(a, dim=axis, keepdim=keepdims))
        sum = staticmethod(lambda a, axis=None, keepdims=False:
                           a.sum() if axis is None else a.sum(axis, keepdim=keepdims))
        mean = staticmethod(lambda a: a.mean())

    grad_one = grad(lambda p, xb, t: loss(Lib, p, xb, t))
    clip_one = lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti))  # noqa: E731
    per_example = vmap(clip_one, in_dims=(None, 0, 0))
    P = tuple(torch.from_numpy(a) for a in params)
    X, T = torch.from_numpy(x), torch.from_numpy(target)
    N = tuple(torch.from_numpy(a) for a in noise)
    rows = [(X[i], T[i]) for i in range(batch)]
    return {"sgd": lambda: _sgd_update(P, grad_one(P, X, T)),
            "dp": lambda: dp_update(P, _summed(per_example(P, X, T)), N, batch),
            "loop": _loop_step(clip_one, P, rows, N, batch)}


def autograd_steps(params, x, target, noise, batch):
    import autograd.numpy as anp
    from autograd import grad

    class Lib:
        matmul, log, exp, sqrt, maximum = anp.matmul, anp.log, anp.exp, anp.sqrt, anp.maximum
        relu = staticmethod(lambda a: anp.maximum(a, 0.0))
        max = staticmethod(lambda a, axis, keepdims: anp.max(a, axis=axis, keepdims=keepdims))
        sum = staticmethod(lambda a, axis=None, keepdims=False:
                           anp.sum(a, axis=axis, keepdims=keepdims))
        mean = staticmethod(anp.mean)

    grad_one = grad(lambda p, xb, t: loss(Lib, p, xb, t))
    clip_one = lambda p, xi, ti: clipped(Lib, grad_one(p, xi, ti))  # noqa: E731
    rows = [(x[i], target[i]) for i in range(batch)]
    loop = _loop_step(clip_one, params, rows, noise, batch)
    # no vmap in HIPS autograd: its DP-SGD step is the loop
    return {"sgd": lambda: _sgd_update(params, grad_one(params, x, target)), "dp": loop,
            "loop": loop}


STEPS = {"adkit": adkit_steps, "jax": jax_steps, "torch": torch_steps,
         "autograd": autograd_steps}

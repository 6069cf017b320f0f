"""A jitted model under eager autograd, beside PyTorch (eager, torch.compile) and jax.jit.

    python benchmarks/jit_training.py [--repeats N] [--frameworks adkit,torch,jax]

Issue 13's case: a 4-layer tanh MLP (64 wide) on 1000x64 inputs, float64. Rows:
  fwd+bwd   loss = f(x, w); loss.backward()   (jitted, eager, torch.compile...)
  grad      func.grad of the jitted function / jax.grad
  jit(grad) the whole gradient traced and compiled as one program
  train     one SGD step written the PyTorch way: the model closes over its parameters,
            loss = model(x); loss.backward(); p -= lr * p.grad under no_grad
Times are medians in ms; the last column is the ratio to adkit's jit(grad). Each
framework runs in its own subprocess (jax's and llvmlite's LLVMs must not share one),
pinned to one core by the caller if wanted (taskset -c 0).
"""
import argparse
import json
import numpy as np
from _timing import median_seconds, run_child

LAYERS, WIDTH, BATCH, LR = 4, 64, 1000, 1e-3


def _time(fn, repeats):
    return median_seconds(fn, repeats, warmup=3) * 1e3


def _pytorch_style(params, x, no_grad):
    """(fwd_bwd(fn): loss = fn(x, params); loss.backward(), train(model): one SGD step
    of a model closing over params), written as a PyTorch user writes them."""
    def fwd_bwd(fn):
        def run():
            for p in params:
                p.grad = None
            fn(x, params).backward()
        return run

    def train(model):
        def run():
            for p in params:
                p.grad = None
            model(x).backward()
            with no_grad():
                for p in params:
                    p -= LR * p.grad
        return run
    return fwd_bwd, train


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH))
    ws = [rng.standard_normal((WIDTH, WIDTH)) / WIDTH ** 0.5 for _ in range(LAYERS)]
    return x, ws


def mlp(x, ws, tanh):
    h = x
    for w in ws:
        h = tanh(h @ w)
    return h.sum()


def run_adkit(repeats):
    import adkit as ak
    x, ws = _data()
    x = ak.tensor(x)
    params = [ak.tensor(w, requires_grad=True) for w in ws]
    f = lambda x, ws: mlp(x, ws, ak.tanh)  # noqa: E731
    jf = ak.jit(f)
    fwd_bwd, train = _pytorch_style(params, x, ak.no_grad)
    plain = [p.detach() for p in params]
    grad_jit = ak.func.grad(jf, argnums=1)
    jit_grad = ak.jit(ak.func.grad(f, argnums=1))
    return {"eager fwd+bwd": _time(fwd_bwd(f), repeats),
            "jit fwd+bwd": _time(fwd_bwd(jf), repeats),
            "grad(jit)": _time(lambda: grad_jit(x, plain), repeats),
            "jit(grad)": _time(lambda: jit_grad(x, plain), repeats),
            "jit train": _time(train(ak.jit(lambda x: f(x, params))), repeats)}


def run_torch(repeats):
    import torch
    torch.set_num_threads(1)
    x, ws = _data()
    x = torch.tensor(x)
    params = [torch.tensor(w, requires_grad=True) for w in ws]
    f = lambda x, ws: mlp(x, ws, torch.tanh)  # noqa: E731
    fwd_bwd, train = _pytorch_style(params, x, torch.no_grad)
    return {"eager fwd+bwd": _time(fwd_bwd(f), repeats),
            "jit fwd+bwd": _time(fwd_bwd(torch.compile(f)), repeats),
            "jit train": _time(train(torch.compile(lambda x: f(x, params))), repeats)}


def run_jax(repeats):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    x, ws = _data()
    x, ws = jnp.asarray(x), [jnp.asarray(w) for w in ws]
    f = lambda x, ws: mlp(x, ws, jnp.tanh)  # noqa: E731
    grad_jit = jax.grad(jax.jit(f), argnums=1)
    jit_grad = jax.jit(jax.grad(f, argnums=1))
    step = jax.jit(lambda x, ws: [w - LR * g for w, g in zip(ws, jax.grad(f, argnums=1)(x, ws))])
    state = {"ws": ws}

    def train():
        state["ws"] = step(x, state["ws"])
        jax.block_until_ready(state["ws"])
    return {"grad(jit)": _time(lambda: jax.block_until_ready(grad_jit(x, ws)), repeats),
            "jit(grad)": _time(lambda: jax.block_until_ready(jit_grad(x, ws)), repeats),
            "jit train": _time(train, repeats)}


def _child(framework, repeats):
    return run_child(__file__, ["--child", framework, "--repeats", repeats])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--frameworks", default="adkit,torch,jax")
    parser.add_argument("--child")
    args = parser.parse_args()
    runners = {"adkit": run_adkit, "torch": run_torch, "jax": run_jax}
    if args.child:
        print(json.dumps(runners[args.child](args.repeats)))
        return
    results = {f: _child(f, args.repeats) for f in args.frameworks.split(",")}
    base = results.get("adkit", {}).get("jit(grad)")
    print("| framework | case | ms | / adkit jit(grad) |")
    print("|---|---|---|---|")
    for framework, res in results.items():
        if "error" in res:
            print(f"| {framework} | error: {res['error'][:70]} | | |")
            continue
        for case, ms in res.items():
            ratio = f"{ms / base:.2f}" if base else ""
            print(f"| {framework} | {case} | {ms:.2f} | {ratio} |")


if __name__ == "__main__":
    main()

"""ADBench's D-LSTM: objective and gradient at the published sizes, adkit beside jax,
PyTorch and HIPS autograd, with the gradient / objective ratio the paper plots.

    python papers/adbench_lstm/lstm.py [--sizes 2x1024,2x4096,4x1024,4x4096]
        [--frameworks adkit,jax,torch,autograd] [--rounds 3] [--svg PATH] [--quick]

The objective is ADBench's `lstm_objective` (benchmarks/loops.py writes it once over a
small namespace: l layers of an LSTM cell over c characters of a 14-letter alphabet,
the log-softmax prediction of the next character), its gradient taken with respect to
the main and extra parameters. adkit runs it as one `ak.scan` under `ak.jit`, jax as
`jax.lax.scan` under `jax.jit`; PyTorch (eager) and HIPS autograd have no compiled scan
and run a Python loop over the characters, as ADBench's own Python tools do. Each
framework runs in its own subprocess (jax's and llvmlite's LLVMs must not share one),
the frameworks taking turns over --rounds rounds; medians in milliseconds.
Writes lstm.svg: gradient / objective per size and framework.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "papers")]

from _timing import best_seconds, in_turns, run_child  # noqa: E402  (benchmarks/_timing.py)
from loops import lstm_data, lstm_objective  # noqa: E402  (the objective, written once)

LOOP_LIMIT = 1024  # characters beyond which the Python-loop frameworks are not run


def python_scan(step, init, xs):
    """scan for frameworks without one: a Python loop over the leading dim."""
    carry = init
    for i in range(xs[0].shape[0]):
        carry, _ = step(carry, tuple(x[i] for x in xs))
    return carry, None


class Lib:
    """The five functions lstm_objective calls, from a numpy-like module."""

    def __init__(self, exp, log, tanh, stack, concatenate):
        self.exp, self.log, self.tanh, self.stack = exp, log, tanh, stack
        self.concatenate = concatenate

    @staticmethod
    def sum(x):
        return x.sum()



def adkit_pair(data):
    import adkit as ak
    main, extra, state, seq = (ak.tensor(a) for a in data)
    lib = Lib(ak.exp, ak.log, ak.tanh, ak.stack, ak.cat)

    def f(m, e):
        return lstm_objective(lib, ak.scan, m, e, state, seq)
    objective = ak.jit(f, compile="eager")
    gradient = ak.jit(ak.func.grad(f, (0, 1)), compile="eager")
    return (lambda: objective(main, extra)), (lambda: gradient(main, extra))


def jax_pair(data):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    main, extra, state, seq = (jnp.asarray(a) for a in data)
    lib = Lib(jnp.exp, jnp.log, jnp.tanh, jnp.stack, jnp.concatenate)

    def f(m, e):
        return lstm_objective(lib, jax.lax.scan, m, e, state, seq)
    objective, gradient = jax.jit(f), jax.jit(jax.grad(f, (0, 1)))
    return (lambda: objective(main, extra).block_until_ready()), \
        (lambda: jax.block_until_ready(gradient(main, extra)))


def torch_pair(data):
    import torch
    torch.set_num_threads(1)
    main, extra, state, seq = (torch.from_numpy(a) for a in data)
    lib = Lib(torch.exp, torch.log, torch.tanh, torch.stack, torch.cat)
    m, e = main.clone().requires_grad_(), extra.clone().requires_grad_()

    def objective():
        with torch.no_grad():
            return lstm_objective(lib, python_scan, main, extra, state, seq)

    def gradient():
        return torch.autograd.grad(lstm_objective(lib, python_scan, m, e, state, seq), (m, e))
    return objective, gradient


def autograd_pair(data):
    import autograd.numpy as anp
    from autograd import grad
    main, extra, state, seq = data
    lib = Lib(anp.exp, anp.log, anp.tanh, anp.stack, anp.concatenate)

    def f(m, e):
        return lstm_objective(lib, python_scan, m, e, state, seq)
    g = grad(lambda me: f(*me))
    return (lambda: f(main, extra)), (lambda: g((main, extra)))


PAIRS = {"adkit": adkit_pair, "jax": jax_pair, "torch": torch_pair, "autograd": autograd_pair}


def child(framework, layers, chars):
    data = lstm_data(np.random.default_rng(0), layers, chars)
    objective, gradient = PAIRS[framework](data)
    objective_s, gradient_s = best_seconds(objective), best_seconds(gradient)
    return {"objective_ms": objective_s * 1e3, "gradient_ms": gradient_s * 1e3,
            "ratio": gradient_s / objective_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2x1024,2x4096,4x1024,4x4096")
    parser.add_argument("--frameworks", default="adkit,jax,torch,autograd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--svg", default=os.path.join(HERE, "lstm.svg"))
    parser.add_argument("--quick", action="store_true", help="2 layers, 64 characters")
    parser.add_argument("--child", nargs=3)
    args = parser.parse_args()
    if args.child:
        import json
        framework, layers, chars = args.child
        print(json.dumps(child(framework, int(layers), int(chars))))
        return
    if args.quick:
        args.sizes, args.rounds = "2x64", 1
    print("| layers | characters | framework | objective ms | gradient ms | gradient / "
          "objective |")
    print("|---|---|---|---|---|---|")
    rows = []
    for size in args.sizes.split(","):
        layers, chars = map(int, size.split("x"))
        frameworks = [f for f in args.frameworks.split(",")
                      if f in ("adkit", "jax") or chars <= LOOP_LIMIT]
        merged, _ = in_turns(lambda f: run_child(__file__, ["--child", f, layers, chars]),
                             frameworks, args.rounds, "gradient_ms")
        for f in frameworks:
            r = merged[f]
            if "error" in r:
                print(f"| {layers} | {chars} | {f} | error: {r['error']} | | |")
                continue
            rows.append({"layers": layers, "chars": chars, "framework": f, **r})
            print(f"| {layers} | {chars} | {f} | {r['objective_ms']:.3g} | "
                  f"{r['gradient_ms']:.3g} | {r['ratio']:.2f} |", flush=True)
    from ratio_bars import write_svg  # noqa: PLC0415  (papers/ratio_bars.py)
    write_svg(rows, args.svg, "ADBench D-LSTM: gradient / objective (published: about 3)",
              published=3.0)
    print(f"wrote {args.svg}")


if __name__ == "__main__":
    main()

"""Loops as one IR node: a 1,000-step recurrence, its gradient, checkpointing, and the
graph a researcher can read.

    python examples/loops.py
"""
import numpy as np

import adkit as ak
from adkit.control import checkpoint

rng = np.random.default_rng(0)
w = ak.tensor(rng.standard_normal((16, 16)) / 4.0)
h0 = ak.tensor(rng.standard_normal(16))


def loss(w, h, policy=None):
    h = ak.fori_loop(0, 1000, lambda i, h: (h @ w).tanh(), h, checkpoint=policy)
    return (h * h).sum()


grad = ak.jit(ak.func.grad(loss))
print("gradient (native loop), first row:", grad(w, h0)[0, :4])
print(ak.trace(ak.func.grad(loss), w, h0))  # two scans, bodies listed under them

g10 = ak.func.grad(lambda w, h: loss(w, h, 10))(w, h0)
print("checkpoint=10: same gradient:", bool(ak.allclose(g10, grad(w, h0))),
      "| forward steps:", checkpoint.LAST_RUN["forward_steps"],
      "| carries stored:", checkpoint.LAST_RUN["stored_carries"])

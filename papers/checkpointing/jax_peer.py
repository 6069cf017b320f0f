"""The same scan's gradient in jax.jit, for papers/checkpointing: every step's residuals
kept (`none`), or the sqrt scheme JAX users write by hand (Chen et al.'s): an outer scan
over ceil(sqrt n)-step segments, each a `jax.checkpoint`-ed inner scan, so only the
segments' first carries are kept and each segment is recomputed once. Memory is XLA's
own account of the compiled gradient's temporaries (`memory_analysis()`), minus the
forward's. Run as a child process (jax's LLVM must not share a process with llvmlite's):

    python papers/checkpointing/jax_peer.py N WIDTH
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks"))
from _timing import best_seconds  # noqa: E402  (benchmarks/_timing.py)



def losses(jax, jnp, n, width, seed=0):
    rng = np.random.default_rng(seed)  # the same W and b as scan_checkpointing.make_loss
    w = jnp.asarray(rng.standard_normal((width, width)) * (0.9 / math.sqrt(width)))
    b = jnp.asarray(rng.standard_normal(width) * 0.1)

    def step(h, _):
        return jnp.tanh(w @ h + b), None

    def plain(h0):
        return jax.lax.scan(step, h0, None, length=n)[0].sum()

    def sqrt(h0):
        k = math.isqrt(n - 1) + 1
        outer, rest = n // k, n % k

        @jax.checkpoint
        def segment(h, _):
            return jax.lax.scan(step, h, None, length=k)[0], None
        h = jax.lax.scan(segment, h0, None, length=outer)[0]
        return jax.lax.scan(step, h, None, length=rest)[0].sum()
    return {"none": plain, "sqrt": sqrt}


def _temp_bytes(compiled):
    analysis = compiled.memory_analysis()
    return analysis.temp_size_in_bytes if analysis is not None else 0


def main(n, width):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    h0 = jnp.full(width, 0.1)
    rows = {}
    for name, loss in losses(jax, jnp, n, width).items():
        forward, gradient = jax.jit(loss), jax.jit(jax.grad(loss))
        memory = _temp_bytes(gradient.lower(h0).compile()) - \
            _temp_bytes(forward.lower(h0).compile())
        rows[name] = {"memory": max(memory, 0),
                      "forward_s": best_seconds(lambda: forward(h0).block_until_ready()),
                      "grad_s": best_seconds(lambda: gradient(h0).block_until_ready())}
    print(json.dumps(rows))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

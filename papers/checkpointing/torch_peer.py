"""The same scan's gradient in PyTorch (eager, one thread), for papers/checkpointing:
every step's autograd record kept (`none`), or the sqrt scheme with
`torch.utils.checkpoint` (ceil(sqrt n)-step segments, each recomputed once in the
backward). Times only: tracemalloc does not see torch's allocations, and the peak
resident set (tried: its growth over a gradient, one configuration per process) did
not reproduce from run to run (51 to 299 MiB for the same n = 100,000). Run as a child:

    python papers/checkpointing/torch_peer.py N WIDTH POLICY
"""
import json
import math
import sys
import time

import numpy as np


def losses(torch, n, width, seed=0):
    rng = np.random.default_rng(seed)  # the same W and b as scan_checkpointing.make_loss
    w = torch.from_numpy(rng.standard_normal((width, width)) * (0.9 / math.sqrt(width)))
    b = torch.from_numpy(rng.standard_normal(width) * 0.1)

    def steps(h, count):
        for _ in range(count):
            h = torch.tanh(w @ h + b)
        return h

    def plain(h0):
        return steps(h0, n).sum()

    def sqrt(h0):
        from torch.utils.checkpoint import checkpoint
        k = math.isqrt(n - 1) + 1
        h = h0
        for start in range(0, n, k):
            # reentrant: the segment runs under no_grad forward, so it records nothing
            h = checkpoint(steps, h, min(k, n - start), use_reentrant=True)
        return h.sum()
    return {"none": plain, "sqrt": sqrt}


def main(n, width, policy):
    import torch
    torch.set_num_threads(1)
    loss = losses(torch, n, width)[policy]
    h0 = torch.full((width,), 0.1, dtype=torch.float64, requires_grad=True)
    # a small gradient first: torch's autograd engine and the checkpoint module set
    # themselves up on first use, which would count as this gradient's memory and time
    losses(torch, 4, width)[policy](h0).backward()

    def forward():
        with torch.no_grad():
            return loss(h0)

    def gradient():  # .backward(): reentrant checkpoints refuse autograd.grad
        h0.grad = None
        loss(h0).backward()
        return h0.grad
    t0 = time.perf_counter()
    forward()
    forward_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gradient()
    grad_s = time.perf_counter() - t0
    print(json.dumps({"memory": None, "forward_s": forward_s, "grad_s": grad_s}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])

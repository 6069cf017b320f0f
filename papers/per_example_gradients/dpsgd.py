"""Per-example gradients and DP-SGD: one step of differentially private SGD (per-example
gradients, each clipped to norm C, summed, Gaussian noise added) against one step of
plain SGD (the batch gradient), in adkit, JAX, PyTorch and HIPS autograd.

    python papers/per_example_gradients/dpsgd.py [--batch-sizes 16,32,64,128,256]
        [--models logreg,ffnn,mnist_mlp] [--frameworks adkit,jax,torch,autograd]
        [--svg PATH] [--quick]

After Subramani, Vadivelu, Kamath, "Enabling fast differentially private SGD via
just-in-time compilation and vectorization" (NeurIPS 2021): the models are theirs where
adkit has the layers (logistic regression and the 2-layer FFNN on Adult's 104
features); their MNIST CNN becomes an MLP of the same input and output (adkit has no
convolution yet). Data are random, as their dummy loaders make it. Per framework:
`dp` is jit(vmap(clipped per-example grad)) (torch: torch.func.vmap, eager; HIPS
autograd has no vmap: a loop), `loop` a Python loop of jitted per-example gradients,
`sgd` the jitted batch gradient; each step also updates the parameters. The Gaussian
noise is drawn outside the step and passed in (the same cost for every framework).
Each framework runs in its own subprocess (jax's and llvmlite's LLVMs must not share a
process). Prints milliseconds per step and dp / sgd, and writes dpsgd.svg (dp / sgd
against batch size).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "benchmarks"))
from _timing import best_seconds  # noqa: E402  (benchmarks/_timing.py)
MODELS = {  # name: layer sizes (input, hidden..., output); output 1 = logistic loss
    "logreg": (104, 1),
    "ffnn": (104, 50, 2),
    "mnist_mlp": (784, 128, 10),
}
CLIP, NOISE_MULTIPLIER, LEARNING_RATE = 1.0, 1.1, 0.1


def init_params(sizes, seed=0):
    """(W0, b0, W1, b1, ...) as float32 numpy arrays, scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32),
                   np.zeros(n_out, np.float32)]
    return tuple(params)


def batch_data(sizes, batch, seed=1):
    """Random features and labels (integer classes; 0/1 for the logistic model)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    classes = 2 if sizes[-1] == 1 else sizes[-1]
    return x, rng.integers(0, classes, batch)


def one_hot(y, n):
    return np.eye(n, dtype=np.float32)[y]


def loss(lib, params, x, target):
    """Mean loss of a batch (x: (B, in)) or one example (x: (in,)): the logistic loss
    for one output (target 0/1), else cross-entropy (target one-hot)."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = lib.relu(lib.matmul(h, params[k]) + params[k + 1])
    logits = lib.matmul(h, params[-2]) + params[-1]
    if params[-1].shape[0] == 1:  # the paper's stable logistic loss
        z = logits[..., 0]
        top = lib.maximum(z, 0.0)
        per = z - z * target + top + lib.log(lib.exp(-top) + lib.exp(-z - top))
    else:
        shifted = logits - lib.max(logits, -1, keepdims=True)
        logp = shifted - lib.log(lib.sum(lib.exp(shifted), -1, keepdims=True))
        per = -lib.sum(logp * target, -1)
    return lib.mean(per)


def clipped(lib, grads):
    """The gradients scaled so that their joint L2 norm is at most CLIP."""
    norm = lib.sqrt(sum(lib.sum(g * g) for g in grads))
    divisor = lib.maximum(norm / CLIP, 1.0)
    return tuple(g / divisor for g in grads)


def dp_update(params, summed, noise, batch):
    """SGD on the noisy mean of the clipped per-example gradients."""
    return tuple(p - LEARNING_RATE * (s + NOISE_MULTIPLIER * CLIP * n) / batch
                 for p, s, n in zip(params, summed, noise))


def _targets(sizes, y):
    return y.astype(np.float32) if sizes[-1] == 1 else one_hot(y, sizes[-1])



def _measure(steps, repeats):
    """{variant: best ms per step} for {variant: zero-argument step}."""
    return {name: best_seconds(step, repeats, budget=2.0, warmup=2) * 1e3
            for name, step in steps.items()}


def run(framework, model, batch, repeats):
    sizes = MODELS[model]
    params, (x, y) = init_params(sizes), batch_data(sizes, batch)
    target = _targets(sizes, y)
    noise = tuple(np.random.default_rng(2).standard_normal(p.shape).astype(np.float32)
                  for p in params)
    from frameworks import STEPS  # noqa: PLC0415 (each child imports one framework)
    steps = STEPS[framework](params, x, target, noise, batch)
    return _measure(steps, repeats)


def _child(framework, models, batches, repeats):
    results = []
    for model in models:
        for batch in batches:
            row = {"framework": framework, "model": model, "batch": batch}
            row.update(run(framework, model, batch, repeats))
            results.append(row)
    print(json.dumps(results))


def _spawn(framework, args):
    command = [sys.executable, __file__, "--child", framework, "--models", args.models,
               "--batch-sizes", args.batch_sizes, "--repeats", str(args.repeats)]
    out = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
    if out.returncode != 0:
        print(f"{framework}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
        return []
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(rows, frameworks):
    print("| model | batch | " + " | ".join(
        f"{f} sgd ms | {f} dp ms | {f} loop ms | {f} dp/sgd" for f in frameworks) + " |")
    print("|---|---|" + "---|---|---|---|" * len(frameworks))
    keyed = {(r["framework"], r["model"], r["batch"]): r for r in rows}
    for model, batch in sorted({(r["model"], r["batch"]) for r in rows},
                               key=lambda mb: (list(MODELS).index(mb[0]), mb[1])):
        cells = []
        for f in frameworks:
            r = keyed.get((f, model, batch), {})
            ratio = r["dp"] / r["sgd"] if r.get("dp") and r.get("sgd") else None
            cells += [_fmt(r.get("sgd")), _fmt(r.get("dp")), _fmt(r.get("loop")),
                      "-" if ratio is None else f"{ratio:.1f}"]
        print(f"| {model} | {batch} | " + " | ".join(cells) + " |")


def _fmt(ms):
    return "-" if ms is None else f"{ms:.3g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="16,32,64,128,256")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--frameworks", default="adkit,jax,torch,autograd")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--svg", default=os.path.join(HERE, "dpsgd.svg"))
    parser.add_argument("--quick", action="store_true", help="batch 16 and 64, logreg and ffnn")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.models, args.repeats = "16,64", "logreg,ffnn", 5
    models, batches = args.models.split(","), [int(b) for b in args.batch_sizes.split(",")]
    if args.child:
        _child(args.child, models, batches, args.repeats)
        return
    frameworks = args.frameworks.split(",")
    rows = [row for f in frameworks for row in _spawn(f, args)]
    _table(rows, frameworks)
    from plot import write_svg  # noqa: PLC0415
    write_svg(rows, frameworks, args.svg)
    print(f"wrote {args.svg}")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()

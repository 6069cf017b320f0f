"""Op rows: nn (softmax, log_softmax) and adkit.nn.functional losses and linear."""
import numpy as np

import adkit as ak
import adkit.nn.functional as F

from .op_db import OpInfo, SampleInput, make_array


# ---------------------------------------------------------------- softmax
def _softmax_samples(dtype, rng):
    cases = [((3, 4), 1), ((3, 4), 0), ((3, 4), -1), ((2, 3, 2), 1), ((5,), 0), ((), 0),
             ((2, 0, 3), 2), ((1, 4), -2)]
    return [SampleInput((make_array(s, dtype, rng, -3, 3), d), name=f"{s}-dim{d}")
            for s, d in cases]


def _log_softmax_ref(x, dim):
    if x.size == 0:
        return x.copy()
    x = x.astype(np.float64)
    z = x - x.max(axis=dim, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=dim, keepdims=True))


def _softmax_ref(x, dim):
    return np.exp(_log_softmax_ref(x, dim))


# ---------------------------------------------------------------- mse_loss
def _mse_samples(dtype, rng):
    out = [SampleInput((make_array((3, 4), dtype, rng), make_array((3, 4), dtype, rng)),
                       {"reduction": r}, name=r) for r in ("mean", "sum", "none")]
    out.append(SampleInput((make_array((), dtype, rng), make_array((), dtype, rng)),
                           name="0-d"))
    out.append(SampleInput((make_array((0, 3), dtype, rng), make_array((0, 3), dtype, rng)),
                           {"reduction": "sum"}, name="empty"))
    out.append(SampleInput((make_array((2, 3), dtype, rng), make_array((2, 3), dtype, rng),
                            make_array((2, 3), dtype, rng, 0.5, 2.0)), name="weighted"))
    return out


def _mse_op(x, t, weight=None, reduction="mean"):
    return F.mse_loss(x, t, reduction=reduction, weight=weight)


def _mse_ref(x, t, weight=None, reduction="mean"):
    loss = (x.astype(np.float64) - t) ** 2
    if weight is not None:
        loss = loss * weight
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.size if weight is None else weight.sum())


# ---------------------------------------------------------------- cross_entropy
def _ce_samples(dtype, rng):
    def logits(*shape):
        return make_array(shape, dtype, rng, -2, 2)

    def probs(*shape):
        p = rng.uniform(0.1, 1.0, size=shape)
        return (p / p.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)).astype(dtype)

    w = rng.uniform(0.5, 2.0, size=5).astype(dtype)
    idx = np.array([0, 3, 4, 1], dtype=np.int64)
    ign = np.array([0, -100, 4, 2], dtype=np.int64)
    return [
        SampleInput((logits(4, 5), idx), name="mean"),
        SampleInput((logits(4, 5), idx), {"reduction": "sum"}, name="sum"),
        SampleInput((logits(4, 5), idx), {"reduction": "none"}, name="none"),
        SampleInput((logits(4, 5), idx), {"weight": w}, name="weight"),
        SampleInput((logits(4, 5), ign), {"weight": w}, name="ignore-100"),
        SampleInput((logits(4, 5), idx), {"ignore_index": 3, "reduction": "none"},
                    name="ignore2"),
        SampleInput((logits(4, 5), ign), {"weight": w, "label_smoothing": 0.2},
                    name="smoothing"),
        SampleInput((logits(4, 5), ign), {"label_smoothing": 0.1, "reduction": "none"},
                    name="smoothing-none"),
        SampleInput((logits(5), np.array(3, dtype=np.int64)), name="1-d"),
        SampleInput((logits(2, 3, 4), np.array([[0, 1, 2, 1], [2, 2, 0, 1]])),
                    {"reduction": "sum"}, name="spatial"),
        SampleInput((logits(3, 5), probs(3, 5)), name="probs"),
        SampleInput((logits(3, 5), probs(3, 5)), {"weight": w, "label_smoothing": 0.3,
                                                  "reduction": "none"}, name="probs-w"),
        SampleInput((logits(2, 3, 2), probs(2, 3, 2)), {"reduction": "sum"},
                    name="probs-spatial"),
        SampleInput((logits(0, 3), np.zeros(0, dtype=np.int64)), {"reduction": "sum"},
                    name="empty"),
    ]


def _ce_op(x, t, weight=None, **kwargs):
    return F.cross_entropy(x, t, weight=None if weight is None else ak.tensor(weight),
                           **kwargs)


def _ce_ref(x, t, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    cdim = 0 if x.ndim == 1 else 1
    logp = np.moveaxis(_log_softmax_ref(x, cdim), cdim, -1)  # classes last
    n = logp.shape[-1]
    w = np.ones(n) if weight is None else weight.astype(np.float64)
    if t.dtype.kind == "f":
        t = np.moveaxis(t, cdim, -1) * (1 - label_smoothing) + label_smoothing / n
        loss = -(logp * t * w).sum(-1)
        return loss if reduction == "none" else loss.sum() / (
            loss.size if reduction == "mean" else 1)
    keep = t != ignore_index
    safe = np.where(keep, t, 0)
    wt = np.where(keep, w[safe], 0.0)
    nll = -np.take_along_axis(logp, safe[..., None], -1)[..., 0] * wt
    smooth = np.where(keep, -(logp * w).sum(-1), 0.0)
    if reduction == "none":
        return (1 - label_smoothing) * nll + label_smoothing / n * smooth
    denom = wt.sum() if reduction == "mean" else 1.0
    return ((1 - label_smoothing) * nll.sum() + label_smoothing / n * smooth.sum()) / denom


# ---------------------------------------------------------------- linear
def _linear_samples(dtype, rng):
    return [SampleInput((make_array((3, 4), dtype, rng), make_array((2, 4), dtype, rng),
                         make_array((2,), dtype, rng)), name="bias"),
            SampleInput((make_array((4,), dtype, rng), make_array((3, 4), dtype, rng)),
                        name="1-d-no-bias"),
            SampleInput((make_array((2, 3, 2), dtype, rng), make_array((3, 2), dtype, rng),
                         make_array((3,), dtype, rng)), name="batched")]


def _linear_ref(x, w, b=None):
    out = x.astype(np.float64) @ w.T
    return out if b is None else out + b


ROWS = [
    OpInfo("softmax", _softmax_ref, _softmax_samples, method="softmax"),
    OpInfo("log_softmax", _log_softmax_ref, _softmax_samples, method="log_softmax"),
    OpInfo("mse_loss", _mse_ref, _mse_samples, op=_mse_op),
    OpInfo("cross_entropy", _ce_ref, _ce_samples, op=_ce_op),
    OpInfo("linear", _linear_ref, _linear_samples, op=F.linear),
]

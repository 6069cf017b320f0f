"""adkit.nn.functional, mirroring torch.nn.functional: activations, losses, linear.

Owns: the public functional API. Every function is a composite of built-in ops (looked up
in `adkit.ops.FUNCTIONS` or as tensor methods at call time), so it brings no derivative
rules of its own: gradients, higher derivatives and transforms come from the ops.
Does not: define primitives (adkit/ops does) or hold parameters (no modules yet).
"""
import warnings

from .. import ops
from ..tensor import Tensor, arange

_REDUCTIONS = ("none", "mean", "sum")


def _op(name):
    return ops.FUNCTIONS[name]


# ---------------------------------------------------------------- activations
def _softmax_dim(ndim, stacklevel):
    """PyTorch's legacy implicit dim (with its deprecation warning)."""
    warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the "
                  "call to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x), dim), computed stably (adkit.softmax)."""
    if dim is None:
        dim = _softmax_dim(input.ndim, _stacklevel)
    return _op("softmax")(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """x - log(sum(exp(x), dim)), computed stably (adkit.log_softmax)."""
    if dim is None:
        dim = _softmax_dim(input.ndim, _stacklevel)
    return _op("log_softmax")(input, dim, dtype=dtype)


def relu(input, inplace=False):
    """max(x, 0). With inplace=True, the result is written back into input."""
    if inplace:
        return input.copy_(_op("relu")(input.clone()))
    return _op("relu")(input)


def sigmoid(input):
    """1 / (1 + exp(-x))."""
    return _op("sigmoid")(input)


def tanh(input):
    """tanh(x)."""
    return _op("tanh")(input)


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    if beta == 1 and threshold == 20:
        return _op("softplus")(input)
    scaled = input * beta
    smooth = _op("softplus")(scaled) / beta
    return _op("where")(scaled > threshold, input, smooth)


def linear(input, weight, bias=None):
    """input @ weight.T + bias."""
    out = _op("matmul")(input, weight.t())
    return out if bias is None else out + bias


# ---------------------------------------------------------------- losses
def _reduction_arg(size_average, reduce, reduction):
    """The reduction string, from the deprecated flags if given (PyTorch's _Reduction)."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "mean" if size_average and reduce else ("sum" if reduce else "none")
        warnings.warn("size_average and reduce args will be deprecated, please use "
                      f"reduction='{reduction}' instead.", UserWarning, stacklevel=3)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use "
                      "reduction='mean' instead.", UserWarning, stacklevel=3)
        reduction = "mean"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction, denominator=None):
    """Apply a reduction; 'mean' divides the sum by `denominator` (default: numel)."""
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (loss.numel() if denominator is None else denominator)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """(input - target)^2, reduced; with `weight`, weighted and the mean divides by
    sum(weight)."""
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", stacklevel=2)
    reduction = _reduction_arg(size_average, reduce, reduction)
    diff = input - target
    loss = diff * diff
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    return _reduce(loss, reduction, weight.sum())


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """-sum_c t_c * log_softmax(input)_c over the class dim (dim 1, or 0 for 1-D input).
    `target` holds class indices (input's shape without the class dim) or class
    probabilities (input's shape). PyTorch's weighting, ignore_index, label smoothing and
    reductions ('mean' of class indices divides by the summed weights of the targets)."""
    reduction = _reduction_arg(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")
    cdim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[cdim] if input.ndim > cdim else 1
    class_shape = tuple(n_classes if d == cdim else 1 for d in range(input.ndim))
    if weight is not None:
        _check_weight(input, weight, n_classes)
        weight = weight.reshape(class_shape)
    logp = log_softmax(input, cdim)
    if tuple(target.shape) == tuple(input.shape):
        return _cross_entropy_probs(logp, input, target, weight, ignore_index, reduction,
                                    label_smoothing)
    hit = _target_mask(input, target, cdim, class_shape, ignore_index)
    w = hit.to(input.dtype) if weight is None else hit.to(input.dtype) * weight
    # where, not logp * hit: a -inf logit of a non-target class must not give -inf * 0
    nll = -(_op("where")(hit, logp, 0.0) * w).sum(cdim)
    w_total = w.sum()
    loss = _reduce(nll, reduction, w_total)
    if label_smoothing == 0.0:
        return loss
    smooth = -(logp if weight is None else logp * weight).sum(cdim)
    smooth = _op("where")(target != ignore_index, smooth, 0.0)
    return (1 - label_smoothing) * loss + \
        _reduce(smooth, reduction, w_total) * (label_smoothing / n_classes)


def _check_weight(input, weight, n_classes):
    if weight.numel() != n_classes or weight.ndim != 1:
        raise RuntimeError(f"weight tensor should be defined either for all {n_classes} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")
    if weight.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {_torch_name(input.dtype)} but found "
                           f"{_torch_name(weight.dtype)}")


def _torch_name(dtype):
    return {"float16": "Half", "float32": "Float", "float64": "Double", "int32": "Int",
            "int64": "Long", "bool": "Bool"}[dtype.name]


def _cross_entropy_probs(logp, input, target, weight, ignore_index, reduction, smoothing):
    """Class-probability targets: -sum(logp * t * w, class dim); 'mean' divides by the
    number of class distributions (numel / C), not by the weights."""
    if not target.is_floating_point():
        raise RuntimeError(f"Expected floating point type for target with class "
                           f"probabilities, got {_torch_name(target.dtype)}")
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    cdim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[cdim]
    if smoothing > 0.0:
        target = target * (1 - smoothing) + smoothing / n_classes
    prod = logp * target if weight is None else logp * target * weight
    if reduction == "none":
        return -prod.sum(cdim)
    total = -prod.sum()
    if reduction == "sum":
        return total
    return total / (input.numel() // n_classes if n_classes else 0)


def _target_mask(input, target, cdim, class_shape, ignore_index):
    """Bool tensor of input's shape: True at each (sample, target class), none where the
    target is ignore_index. Checks the target's dtype, shape and (eagerly) its values."""
    if target.dtype.name != "int64":
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{_torch_name(target.dtype)}")
    want = tuple(s for d, s in enumerate(input.shape) if d != cdim)
    got = tuple(target.shape)
    if got != want:
        if input.ndim <= 2 and target.ndim > 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if input.ndim >= 2 and target.ndim >= 1 and got[0] != want[0]:
            raise ValueError(f"Expected input batch_size ({want[0]}) to match target "
                             f"batch_size ({got[0]}).")
        raise RuntimeError(f"Expected target size {list(want)}, got {list(got)}")
    if isinstance(target, Tensor):  # concrete values: check them as PyTorch does
        values = target._data
        bad = (values != ignore_index) & ((values < 0) | (values >= class_shape[cdim]))
        if bad.any():
            raise IndexError(f"Target {values[bad][0]} is out of bounds.")
    expanded = target.reshape(tuple(1 if d == cdim else s for d, s in
                                    enumerate(input.shape)))
    classes = arange(class_shape[cdim]).reshape(class_shape)
    hit = expanded == classes
    if 0 <= ignore_index < class_shape[cdim]:
        hit = _op("logical_and")(hit, expanded != ignore_index)
    return hit

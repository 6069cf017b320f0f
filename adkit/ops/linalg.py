"""Linear algebra: matmul (numpy's rules: 1-D operands, broadcast batch dims), mm, bmm,
dot, mv, outer and einsum.

Owns: each op's forward (numpy's BLAS-backed matmul; np.einsum) with PyTorch's checks and
error messages, and the rules. Every product's gradient is again a matmul (or an einsum),
so rules are differentiable to any order. `einsum` canonicalizes its equation (ellipses
become letters, size-1 dims are expanded) before the one `Einsum` Function sees it.
"""
import functools
import string

import numpy as np

from ..tensor import Tensor, _make
from . import _sparsity
from ._families import ArrayFunction, _logical
from ._helpers import NoDecomposition, cast_result, sum_to

_TORCH_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double", "int32": "Int",
                "int64": "Long", "bool": "Bool"}


def _tname(a):
    return _TORCH_NAMES[a.dtype.name]


def _mT(t):
    """Swap the last two dims (a view)."""
    return t.transpose(-2, -1)


def _matmul_grads(grad, x, y, need_x, need_y):
    """Gradients of x @ y for any matmul-compatible shapes: 1-D operands are treated as
    a row (x) or column (y) matrix, batch dims are summed back with sum_to."""
    xs, ys = tuple(x.shape), tuple(y.shape)
    x2 = x.reshape((1,) + xs) if len(xs) == 1 else x
    y2 = y.reshape(ys + (1,)) if len(ys) == 1 else y
    if len(xs) == 1 or len(ys) == 1:
        batch = np.broadcast_shapes(tuple(x2.shape[:-2]), tuple(y2.shape[:-2]))
        grad = grad.reshape(batch + (x2.shape[-2], y2.shape[-1]))
    grad_x = grad_y = None
    if need_x:
        grad_x = sum_to(grad.matmul(_mT(y2)), tuple(x2.shape)).reshape(xs)
    if need_y:
        grad_y = sum_to(_mT(x2).matmul(grad), tuple(y2.shape)).reshape(ys)
    return grad_x, grad_y


def _product(a, b):
    """np.matmul, with 0-d results as arrays."""
    out = np.matmul(a, b)
    return out if type(out) is np.ndarray else np.asarray(out)


class _MatrixProduct(ArrayFunction):
    """Shared rules of matmul-like products z = x @ y:
    grad_x = grad_out @ y^T, grad_y = x^T @ grad_out (batch dims summed back);
    jvp: z_t = x_t @ y + x @ y_t."""
    sparsity = classmethod(lambda cls, x, y: _sparsity.contraction(x, y))  # sparsity rule
    curvature = "bilinear"
    # native code: forward is numpy's matmul, so compiled code may call BLAS's gemm
    native_gemm = True

    @classmethod
    def infer(cls, x, y):
        """Shape rule for tracing (no arithmetic on big stand-ins): the op's own checks,
        then numpy's matmul shape, as a zero-cost stand-in array."""
        cls.check(x, y)
        xs = x.shape if x.ndim > 1 else (1,) + x.shape
        ys = y.shape if y.ndim > 1 else y.shape + (1,)
        shape = np.broadcast_shapes(xs[:-2], ys[:-2]) + xs[-2:-1] * (x.ndim > 1) + \
            ys[-1:] * (y.ndim > 1)
        return np.broadcast_to(np.zeros((), np.result_type(x, y)), shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        return _matmul_grads(grad_out, x, y, *ctx.needs_input_grad[:2])

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        terms = [t for t in (None if x_t is None else x_t.matmul(y),
                             None if y_t is None else x.matmul(y_t)) if t is not None]
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    @classmethod
    def vmap(cls, info, in_dims, x, y):
        """Batching rule: the op's checks on one example, then one broadcasting matmul
        with the batch dim in front (see _batched_matmul)."""
        cls.check(_logical(x, in_dims[0]), _logical(y, in_dims[1]))
        return _batched_matmul(x, y, in_dims), 0


def _batched_matmul(x, y, in_dims):
    """x @ y per example, for physical x, y batched along in_dims (None: shared). Batch
    dims go to the front, 1-D examples become a row (x) or column (y) matrix, batched
    operands get 1s after the batch dim so that it lines up left of every per-example
    batch dim; one broadcasting matmul, then the row/column dims are dropped again."""
    xd, yd = in_dims
    x = x if xd is None else x.movedim(xd, 0)
    y = y if yd is None else y.movedim(yd, 0)
    if (yd is None and y.ndim <= 2) or (xd is None and x.ndim <= 2 and y.ndim >= 3):
        return Matmul.apply(x, y)  # a shared vector or matrix needs no alignment
    x_vec, y_vec = x.ndim - (xd is not None) == 1, y.ndim - (yd is not None) == 1
    x = x.unsqueeze(-2) if x_vec else x
    y = y.unsqueeze(-1) if y_vec else y
    rank = max(x.ndim - (xd is not None), y.ndim - (yd is not None))
    x, y = (_pad_after_batch(t, d, rank) for t, d in ((x, xd), (y, yd)))
    out = Matmul.apply(x, y)
    shape = tuple(out.shape)
    keep = shape[:-2] + shape[-2:-1] * (not x_vec) + shape[-1:] * (not y_vec)
    return out if keep == shape else out.reshape(keep)


def _pad_after_batch(t, bdim, rank):
    """A batched t (batch dim first) with 1s after the batch dim up to per-example rank."""
    extra = rank - (t.ndim - 1)
    if bdim is None or not extra:
        return t
    return t.reshape(tuple(t.shape[:1]) + (1,) * extra + tuple(t.shape[1:]))


def _check_matmul_shapes(xs, ys):
    """numpy's matmul shape rule (1-D operands as row/column), with PyTorch's message."""
    x2 = (1,) + tuple(xs) if len(xs) == 1 else tuple(xs)
    y2 = tuple(ys) + (1,) if len(ys) == 1 else tuple(ys)
    try:
        if x2[-1] != y2[-2]:
            raise ValueError
        np.broadcast_shapes(x2[:-2], y2[:-2])
    except ValueError:
        raise RuntimeError(_matmul_error(xs, ys)) from None


def _matmul_error(xs, ys):
    """PyTorch's message for shapes matmul cannot multiply."""
    if len(xs) == 1 and len(ys) == 1:
        return (f"inconsistent tensor size, expected tensor [{xs[0]}] and src [{ys[0]}] to "
                f"have the same number of elements, but got {xs[0]} and {ys[0]} elements "
                "respectively")
    if len(ys) == 1:  # x is a (folded) matrix
        m = int(np.prod(xs[:-1]))
        return f"size mismatch, got input ({m}), mat ({m}x{xs[-1]}), vec ({ys[0]})"
    if len(ys) == 2:
        m = int(np.prod(xs[:-1]))
        return f"mat1 and mat2 shapes cannot be multiplied ({m}x{xs[-1]} and {ys[0]}x{ys[1]})"
    bx, by = xs[:-2], ys[:-2]
    n = max(len(bx), len(by))
    for i in range(n):
        a = bx[i - n + len(bx)] if i >= n - len(bx) else 1
        b = by[i - n + len(by)] if i >= n - len(by) else 1
        if a != b and a != 1 and b != 1:
            return (f"The size of tensor a ({a}) must match the size of tensor b ({b}) at "
                    f"non-singleton dimension {i}")
    batch = int(np.prod(np.broadcast_shapes(bx, by)))
    return (f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{batch}, {xs[-1]}] but got: [{batch}, {ys[-2]}].")


def _dtype_error(xs_ndim, ys_ndim, x, y):
    if xs_ndim == 1 and ys_ndim == 1:
        return (f"dot : expected both vectors to have same dtype, but found {_tname(x)} and "
                f"{_tname(y)}")
    if ys_ndim == 1:
        return (f"addmv input tensors must have the same dtype, but got {_tname(y)}, "
                f"{_tname(x)}, and {_tname(y)}")
    if ys_ndim == 2:
        return (f"expected m1 and m2 to have the same dtype, but got: "
                f"{_tname(x).lower()} != {_tname(y).lower()}")
    return f"expected scalar type {_tname(x)} but found {_tname(y)}"


class Matmul(_MatrixProduct):
    """z = x @ y with numpy's rules (1-D x is a row, 1-D y a column, removed afterwards;
    batch dims broadcast);  grad_x = grad_out @ y^T, grad_y = x^T @ grad_out."""
    public_name = "matmul"
    native_contraction = True  # a short contracted dim: computed inside kernels

    @staticmethod
    def check(x, y):
        """PyTorch's errors for operands (arrays or stand-ins) matmul cannot multiply."""
        if x.ndim == 0 or y.ndim == 0:
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they "
                               f"are {x.ndim}D and {y.ndim}D")
        if x.dtype != y.dtype:
            raise RuntimeError(_dtype_error(x.ndim, y.ndim, x, y))
        _check_matmul_shapes(x.shape, y.shape)

    @staticmethod
    def forward(x, y):
        Matmul.check(x, y)
        return _product(x, y)


class Mm(_MatrixProduct):
    """z = x @ y for matrices;  grad_x = grad_out @ y^T, grad_y = x^T @ grad_out."""
    public_name = "mm"
    native_contraction = True  # a short contracted dim: computed inside kernels

    @staticmethod
    def check(x, y):
        if x.ndim != 2:
            raise RuntimeError("self must be a matrix")
        if y.ndim != 2:
            raise RuntimeError("mat2 must be a matrix")
        Matmul.check(x, y)

    @staticmethod
    def forward(x, y):
        Mm.check(x, y)
        return _product(x, y)


class Bmm(_MatrixProduct):
    """z[b] = x[b] @ y[b] for 3-D x, y;  grad_x = grad_out @ y^T, grad_y = x^T @ grad_out."""
    public_name = "bmm"
    native_contraction = True  # a short contracted dim: computed inside kernels

    @staticmethod
    def check(x, y):
        if x.ndim != 3:
            raise RuntimeError("batch1 must be a 3D tensor")
        if y.ndim != 3:
            raise RuntimeError("batch2 must be a 3D tensor")
        if y.shape[:2] != (x.shape[0], x.shape[2]):
            raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to "
                               f"be: [{x.shape[0]}, {x.shape[2]}] but got: "
                               f"[{y.shape[0]}, {y.shape[1]}].")
        Matmul.check(x, y)

    @staticmethod
    def forward(x, y):
        Bmm.check(x, y)
        return _product(x, y)


class Dot(_MatrixProduct):
    """z = sum_i x_i y_i for 1-D x, y;  grad_x = grad_out * y, grad_y = grad_out * x."""
    public_name = "dot"

    @staticmethod
    def check(x, y):
        if x.ndim != 1 or y.ndim != 1:
            raise RuntimeError(f"1D tensors expected, but got {x.ndim}D and {y.ndim}D "
                               "tensors")
        Matmul.check(x, y)

    @staticmethod
    def forward(x, y):
        Dot.check(x, y)
        return _product(x, y)


class Mv(_MatrixProduct):
    """z = x @ y for a matrix x and vector y;  grad_x = outer(grad_out, y),
    grad_y = x^T @ grad_out."""
    public_name = "mv"

    @staticmethod
    def check(x, y):
        if x.ndim != 2 or y.ndim != 1:
            raise RuntimeError(f"vector + matrix @ vector expected, got 1, {x.ndim}, "
                               f"{y.ndim}")
        Matmul.check(x, y)

    @staticmethod
    def forward(x, y):
        Mv.check(x, y)
        return _product(x, y)


class Outer(ArrayFunction):
    """z_ij = x_i y_j for 1-D x, y (dtypes promoted);  grad_x = sum_j grad_out_ij y_j,
    grad_y = sum_i grad_out_ij x_i."""
    sparsity = classmethod(lambda cls, x, y: _sparsity.outer(x, y))  # sparsity rule
    curvature = "bilinear"
    public_name = "outer"
    aliases = ("ger",)

    @staticmethod
    def forward(x, y):
        for a, name in ((x, "self"), (y, "vec2")):
            if a.ndim != 1:
                raise RuntimeError(f"outer: Expected 1-D argument {name}, but got "
                                   f"{a.ndim}-D")
        return cast_result(np.multiply.outer(x, y), x, y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        need_x, need_y = ctx.needs_input_grad[:2]
        grad_x = (grad_out * y).sum(1) if need_x else None
        grad_y = (grad_out * x.reshape((-1, 1))).sum(0) if need_y else None
        return grad_x, grad_y

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        terms = [t for t in (None if x_t is None else x_t.outer(y),
                             None if y_t is None else x.outer(y_t)) if t is not None]
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    @classmethod
    def vmap(cls, info, in_dims, x, y):
        """Batching rule: batch dims to the front, then x[..., :, None] * y[..., None, :]
        (broadcasting), in the dtype outer gives."""
        tiny = [np.zeros((1,) * (a.ndim - (d is not None)), a.dtype.np)
                for a, d in zip((x, y), in_dims)]
        want = cls.forward(*tiny).dtype  # also PyTorch's errors for non-1-D examples
        x, y = (a if d is None else a.movedim(d, 0) for a, d in zip((x, y), in_dims))
        out = x.unsqueeze(-1) * y.unsqueeze(-2)
        return (out if out.dtype == want else out.to(want)), 0


# ---------------------------------------------------------------- einsum
# PyTorch orders labels A-Z before a-z (implicit output order).
_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def _split_equation(equation, n_operands):
    """'ij,jk->ik' -> (['ij', 'jk'], 'ik'), output None when implicit; torch's checks."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    for i, c in enumerate(eq):
        inside_rhs = bool(arrow) and i >= len(lhs) + 2
        if arrow and len(lhs) <= i < len(lhs) + 2:
            continue  # the arrow itself
        if c not in _LETTERS and c != "." and (inside_rhs or c != ","):
            raise RuntimeError(f"einsum(): invalid subscript given at index {i} in the "
                               "equation string, subscripts must be in [a-zA-Z]")
    terms = lhs.split(",")
    if len(terms) > n_operands:
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    if len(terms) < n_operands:
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    for k, term in enumerate(terms + ([rhs] if arrow else [])):
        if term.replace("...", "", 1).count("."):
            raise RuntimeError(f"einsum(): found '.' for operand {k} that is not part of "
                               "any ellipsis")
    return terms, (rhs if arrow else None)


def _ellipsis_dims(terms, shapes):
    """How many dims each operand's '...' covers (0 without one)."""
    dims = []
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        n, ndim = len(term.replace("...", "")), len(shape)
        if "..." in term:
            if n > ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n})"
                                   f" is more than the number of dimensions ({ndim}) for "
                                   f"operand {k}")
            dims.append(ndim - n)
        elif n != ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n}) "
                               f"does not match the number of dimensions ({ndim}) for "
                               f"operand {k} and no ellipsis was given")
        else:
            dims.append(0)
    return dims


def _output_term(terms, rhs, ellipsis):
    """The explicit output: given, or (implicit) the ellipsis then the labels used once."""
    labels = "".join(t.replace("...", "") for t in terms)
    if rhs is None:
        return ellipsis + "".join(c for c in _LETTERS if labels.count(c) == 1)
    out = rhs.replace("...", ellipsis)
    for c in rhs.replace("...", ""):
        if c not in labels:
            raise RuntimeError(f"einsum(): output subscript {c} does not appear in the "
                               "equation for any input operand")
        if rhs.count(c) > 1:
            raise RuntimeError(f"einsum(): output subscript {c} appears more than once in "
                               "the output")
    return out


def _label_sizes(terms, shapes, n_ellipsis):
    """Each label's size, broadcasting 1s; torch's messages for mismatches."""
    sizes = {}
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        seen = {}
        for axis, c in enumerate(term):
            n = shape[axis]
            if c in seen and seen[c] != n:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {k} but "
                                   f"the sizes don't match, {n} != {seen[c]}")
            seen[c] = n
            if sizes.get(c, 1) not in (1, n) and n != 1:  # sizes 1 broadcast
                if c in n_ellipsis:
                    raise RuntimeError(
                        f"einsum(): dimension {n_ellipsis[c]} covered by ellipsis in operand "
                        f"{k}has size {n} which does not broadcast with previously seen "
                        f"ellipsis with size {sizes[c]} for the respective dimension")
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {k} "
                                   f"which does not broadcast with previously seen size "
                                   f"{sizes[c]}")
            if sizes.get(c, 1) == 1:
                sizes[c] = n
    return sizes


@functools.lru_cache(maxsize=512)
def _plan(equation, shapes):
    """The canonical equation (explicit output, letters for ellipses) and the shape each
    operand must be expanded to (size-1 dims broadcast), for these operand shapes."""
    terms, rhs = _split_equation(equation, len(shapes))
    counts = _ellipsis_dims(terms, shapes)
    width = max(counts, default=0)
    fresh = [c for c in _LETTERS if c not in equation][:width]
    if len(fresh) < width:
        raise RuntimeError("einsum(): too many dimensions for the available subscripts")
    out = _output_term(terms, rhs, "".join(fresh))
    terms = [t.replace("...", "".join(fresh[width - n:])) for t, n in zip(terms, counts)]
    sizes = _label_sizes(terms, shapes, {c: i for i, c in enumerate(fresh)})
    targets = tuple(tuple(sizes[c] for c in term) for term in terms)
    return ",".join(terms) + "->" + out, targets


def _sublist_equation(args):
    """torch's sublist form einsum(op1, [0, 1], op2, [1, 2], [0, 2]) -> (equation, ops)."""
    out = list(args[-1]) if len(args) % 2 else None
    pairs = args[:-1] if len(args) % 2 else args
    operands, terms = list(pairs[0::2]), [list(s) for s in pairs[1::2]]
    def term(sub):
        return "".join("..." if s is Ellipsis else _LETTERS[s] for s in sub)
    equation = ",".join(term(t) for t in terms) + ("" if out is None else "->" + term(out))
    return equation, operands


def _einsum_grad(terms, out_term, k, grad, operands):
    """grad of operand k: einsum of grad_out and the other operands into operand k's
    labels. Labels only operand k has were summed away: a ones vector broadcasts them
    back. A label repeated in operand k (a diagonal) gets a fresh label per repeat plus
    an identity matrix tying it to the first, so off-diagonal entries get 0."""
    target = terms[k]
    in_terms = [out_term] + [t for j, t in enumerate(terms) if j != k]
    in_ops = [grad] + [o for j, o in enumerate(operands) if j != k]
    available = set("".join(in_terms))
    fresh = (c for c in _LETTERS if c not in set("".join(terms) + out_term))
    dtype = operands[k]._data.dtype
    result, seen = [], set()
    for axis, c in enumerate(target):
        n = operands[k].shape[axis]
        if c in seen:
            f = next(fresh)
            result.append(f)
            in_terms.append(c + f)
            in_ops.append(_make(np.eye(n, dtype=dtype)))
        else:
            seen.add(c)
            result.append(c)
            if c not in available:
                in_terms.append(c)
                in_ops.append(_make(np.ones(n, dtype=dtype)))
    return Einsum.apply(",".join(in_terms) + "->" + "".join(result), *in_ops)


def _einsum_as_matmuls(equation, *operands):
    """einsum's decomposition (for fusion): operands with distinct labels each, taken two
    at a time from the left: labels no later operand and not the output has are summed
    first; batch, free and contracted labels are moved into place (views) for one
    batched matmul, whose result carries the labels still needed. Other equations (a
    repeated label) stay one node."""
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    if any(len(set(t)) != len(t) for t in terms) or \
            len({o.dtype for o in operands}) != 1:
        raise NoDecomposition
    ops = list(zip(terms, operands))
    while len(ops) > 1:
        (ta, a), (tb, b) = ops[:2]
        later = "".join(t for t, _ in ops[2:]) + out
        keep = "".join(c for c in dict.fromkeys(ta + tb) if c in later)
        ops[:2] = [(keep, _einsum_pair(ta, a, tb, b, keep))]
    (t, x), = ops
    x = _sum_labels(t, x, out)
    t = "".join(c for c in t if c in out)
    return _permute(x, [t.index(c) for c in out])


def _sum_labels(t, x, keep):
    """x (labels t) summed over its labels not in `keep`."""
    drop = tuple(i for i, c in enumerate(t) if c not in keep)
    return x.sum(drop) if drop else x


def _einsum_pair(ta, a, tb, b, out):
    """einsum(f"{ta},{tb}->{out}", a, b) as one batched matmul."""
    a, ta = _sum_labels(ta, a, tb + out), "".join(c for c in ta if c in tb + out)
    b, tb = _sum_labels(tb, b, ta + out), "".join(c for c in tb if c in ta + out)
    size = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape)}
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    a_free = [c for c in ta if c not in tb]
    b_free = [c for c in tb if c not in ta]

    def count(labels):
        return int(np.prod([size[c] for c in labels], dtype=np.int64))
    a = _permute(a, [ta.index(c) for c in batch + a_free + contract]).reshape(
        (count(batch), count(a_free), count(contract)))
    b = _permute(b, [tb.index(c) for c in batch + contract + b_free]).reshape(
        (count(batch), count(contract), count(b_free)))
    order = batch + a_free + b_free
    product = (a @ b).reshape(tuple(size[c] for c in order))
    return _permute(product, [order.index(c) for c in out])


def _permute(x, order):
    return x if order == sorted(order) else x.permute(tuple(order))


class Einsum(ArrayFunction):
    """out = einsum(equation, *operands) (equation canonical: explicit output, no '...');
    grad_k = einsum(grad_out, the other operands -> operand k's labels), with diagonals
    and labels summed inside operand k only restored (see _einsum_grad);
    jvp: out_t = sum_k einsum(operands with operand k replaced by its tangent)."""
    sparsity = classmethod(lambda cls, equation, *operands:  # sparsity rule
                           _sparsity.labeled_contraction(equation, operands))
    public_name = "einsum"
    variants = ("function",)
    decomposition = staticmethod(_einsum_as_matmuls)  # batched matmuls, for fusion

    @staticmethod
    def forward(equation, *operands):
        first = operands[0]
        for op in operands[1:]:
            if op.dtype != first.dtype:
                raise RuntimeError(f"expected scalar type {_tname(first)} but found "
                                   f"{_tname(op)}")
        # The contraction-order search costs more than it saves on small operands.
        big = len(operands) > 2 or sum(op.size for op in operands) > 4096
        out = np.einsum(equation, *operands, optimize=big)
        if type(out) is not np.ndarray:
            return np.asarray(out)
        if any(np.may_share_memory(out, op) for op in operands):
            out = out.copy()  # a pure transpose or diagonal comes back as a view
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        lhs, out_term = inputs[0].split("->")
        ctx.terms, ctx.out_term = lhs.split(","), out_term
        ctx.save_for_backward(*inputs[1:])

    @staticmethod
    def backward(ctx, grad_out):
        operands = ctx.saved_tensors
        grads = [_einsum_grad(ctx.terms, ctx.out_term, k, grad_out, operands) if need
                 else None for k, need in enumerate(ctx.needs_input_grad[1:])]
        return (None, *grads)

    @staticmethod
    def jvp(ctx, _equation, *tangents):
        operands = ctx.saved_tensors
        equation = ",".join(ctx.terms) + "->" + ctx.out_term
        out_t = None
        for k, t in enumerate(tangents):
            if t is not None:
                ops = operands[:k] + (t,) + operands[k + 1:]
                term = Einsum.apply(equation, *ops)
                out_t = term if out_t is None else out_t + term
        return out_t

    @classmethod
    def vmap(cls, info, in_dims, equation, *operands):
        """Batching rule: a fresh label for the batch dim, put first in every batched
        operand (batch dim moved to the front) and in the output."""
        lhs, out_term = equation.split("->")
        label = next((c for c in _LETTERS if c not in equation), None)
        if label is None:
            raise RuntimeError("einsum(): too many dimensions for the available subscripts")
        terms, ops = [], []
        for term, op, d in zip(lhs.split(","), operands, in_dims[1:]):
            terms.append(term if d is None else label + term)
            ops.append(op if d is None else op.movedim(d, 0))
        return cls.apply(",".join(terms) + "->" + label + out_term, *ops), 0

    @classmethod
    def interface(cls, *args):
        if args and isinstance(args[0], Tensor):
            equation, operands = _sublist_equation(args)
        else:
            equation, operands = args[0], args[1:]
            if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
                operands = tuple(operands[0])
        equation, targets = _plan(equation, tuple(tuple(op.shape) for op in operands))
        return cls.apply(equation, *[op if tuple(op.shape) == shape else op.expand(shape)
                                     for op, shape in zip(operands, targets)])

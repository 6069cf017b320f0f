"""What fusion asks of one node: its dtype (`compute_dtype`), the dims a fused
reduction combines over (`reduction_dims`), the contracted length of an inline matmul
(`contraction`), whether a matmul is a row product (`row_product`), whether a view
only adds or drops unit dims (`unit_view`); and `Facts`, the answers for one graph,
each asked once.

Owns: those questions and their thresholds. Does not: group nodes or build kernels
(fuse.py), or know ops by name: what may fuse is said by each op's class (`lower`,
`native_reduction` with `reduced_dims`, `native_contraction`).
"""
import math

import numpy as np

from ... import ops
from ...ops._helpers import c_strides
from .. import rules

_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what kernels compute in

# {op class: how a kernel combines its values ("sum", "prod", "max", "min")}: the ops
# whose class says `native_reduction`
REDUCTIONS = ops.with_rule("native_reduction")

_BOOL = np.dtype(np.bool_)
_BOOLS = frozenset({_BOOL})
_FLOATS_OR_BOOL = frozenset(_NATIVE_FLOATS) | _BOOLS


def compute_dtype(graph, n):
    """The float dtype fusible node n computes in; None for an op on bools alone (it
    joins a group of its shape but starts none); False when n is not fusible. Its
    tensors must be bools or floats of that one dtype (comparisons make bools from
    floats, where and to() make floats from bools)."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or getattr(data["op"], "lower", None) is None:
        return False
    if len(data["specs"]) != 1 or any(a is not None for a in data.get("aliases", ())):
        return False
    dtypes = {data["dtype"].np} | {graph.specs_of(u)[out].dtype.np
                                   for _, u, out in graph.args_of(n)}
    if not dtypes <= _FLOATS_OR_BOOL:
        return False
    floats = dtypes - _BOOLS
    if len(floats) > 1:
        return False
    return floats.pop() if floats else None


def reduction_dims(graph, n):
    """The dims fused reduction node n combines over (of its input's shape), or None
    when n is not one: an op in REDUCTIONS (sum, mean, sum_to_size, prod, amax, amin)
    of a float tensor into the same dtype, over its class's `reduced_dims`. A kernel
    combines such a node's values as it makes them."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or data["op"] not in REDUCTIONS:
        return None
    params = data["params"]
    if params.get("dtype") is not None or data["dtype"].np not in _NATIVE_FLOATS:
        return None
    args = graph.args_of(n)
    if len(args) != 1 or graph.specs_of(args[0][1])[args[0][2]].dtype != data["dtype"]:
        return None
    shape = tuple(graph.specs_of(args[0][1])[args[0][2]].shape)
    return data["op"].reduced_dims(shape, params)


CONTRACT_MAX_K = 16  # matmuls contracting at most this many terms run inside kernels,
# and so do longer ones (up to SMALL_MAX_K terms) whose whole product is at most
# SMALL_PRODUCT multiply-adds: a BLAS call costs more than such a product (a loop
# step's 32x32 matrix-vector product: 1,024 multiply-adds, ~0.1 us of call overhead)
CONTRACT_SMALL_MAX_K = 64
CONTRACT_SMALL_PRODUCT = 4096
# and so do products by a narrow right operand (up to NARROW_MAX_K terms, one matrix of
# B at most NARROW_B elements: it stays in L1, and each output row is a few vectors):
# ADBench GMM large's x @ Q_k^T, 50 products [10000, 20] @ [20, 20], whose 80 MB result
# BLAS wrote and the next kernel read back (gradient 28.8 -> 21.7 ms, objective too, and
# its first call 40 ms quicker: 80 MB fewer fresh pages). A wide B stays BLAS's:
# [1000, 20] @ [20, 1000] took 1.0 ms there, 1.7 inline.
CONTRACT_NARROW_MAX_K = 32
CONTRACT_NARROW_B = 1024
# (only products this big: the K unrolled multiply-adds per element are ~2 kB of IR
# per kernel, which smaller products, BLAS's before, need not pay in first calls)
CONTRACT_NARROW_MIN_OUTPUT = 1 << 20


def contraction(graph, n):
    """The contracted length K when node n is a matmul (its class says
    `native_contraction`: matmul, mm, bmm) a kernel computes inline, as K multiply-adds
    per element: float operands of the output's dtype, at least one a matrix (the other
    may be a vector), 1 <= K <= CONTRACT_MAX_K, or a small product, or a product by a
    narrow right operand (BLAS is better at long sums of big products). Else None."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "native_contraction", False):
        return None
    args = graph.args_of(n)
    specs = [graph.specs_of(u)[out] for _, u, out in args]
    if len(specs) != 2 or data["dtype"].np not in _NATIVE_FLOATS or \
            any(s.dtype != data["dtype"] or not s.shape for s in specs) or \
            max(len(s.shape) for s in specs) < 2:
        return None
    k = specs[0].shape[-1]
    work = k * math.prod(data["shape"])
    small = k <= CONTRACT_SMALL_MAX_K and work <= CONTRACT_SMALL_PRODUCT
    width = specs[1].shape[-1] if len(specs[1].shape) >= 2 else 1
    narrow = k <= CONTRACT_NARROW_MAX_K and k * width <= CONTRACT_NARROW_B and \
        math.prod(data["shape"]) >= CONTRACT_NARROW_MIN_OUTPUT
    return k if 1 <= k and (k <= CONTRACT_MAX_K or small or narrow) else None


# A product C = A @ B whose right operand a kernel makes, with a long contracted dim
# and a small result, is computed by that kernel's call (a "row product", lowered by
# codegen/row_products.py): the kernel makes B a block of rows at a time into a buffer
# that stays in cache, and each block is multiplied into C, whose sums stay in
# registers, so B is never stored whole. (A GMM gradient's x^T @ w_k: 25 products of
# [10, 10000] @ [10000, 10], whose w had been written, 20 MB, and read back by BLAS.)
ROW_PRODUCT_MIN_K = 64  # shorter products: inline (contraction) or BLAS
# elements of one C matrix (M * N): its sums stay in registers a tile at a time, and
# each tile reads the block again from L1 (64 x 64: a d=64 GMM gradient's x^T (c x_k)
# 29 -> 18 ms on one core, where B was stored and BLAS packed it; 64-wide layers'
# weight gradients as quick as BLAS's or quicker)
ROW_PRODUCT_MAX_OUTPUT = 4096


def row_product(graph, n):
    """Whether node n is a matmul (its class says `native_contraction`) C = A @ B that
    the kernel making B may compute as it goes: float operands of C's dtype, not
    inline (`contraction`), A a matrix whose batch dims are none or B's, B [..., K, N]
    with K >= ROW_PRODUCT_MIN_K and N > 1, M * N <= ROW_PRODUCT_MAX_OUTPUT, and B
    made by a fusible op. (Whether it joins B's group is _place_row_product's call, and
    it leaves again when something outside that group reads B: _unread_rows.)"""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "native_contraction", False) or \
            contraction(graph, n) is not None:
        return False
    args = sorted(graph.args_of(n))
    if len(args) != 2 or data["dtype"].np not in _NATIVE_FLOATS:
        return False
    (_, a, a_out), (_, b, b_out) = args
    a_spec, b_spec = graph.specs_of(a)[a_out], graph.specs_of(b)[b_out]
    if a_spec.dtype != data["dtype"] or b_spec.dtype != data["dtype"] or \
            len(a_spec.shape) < 2 or len(b_spec.shape) < 2 or \
            tuple(a_spec.shape[:-2]) not in ((), tuple(b_spec.shape[:-2])):
        return False
    (m, k), width = a_spec.shape[-2:], b_spec.shape[-1]
    if k < ROW_PRODUCT_MIN_K or width < 2 or m * width > ROW_PRODUCT_MAX_OUTPUT:
        return False
    dtype = compute_dtype(graph, b)
    return dtype is not False and dtype is not None and graph.nx.number_of_edges(b, n) == 1


def squeezed(shape):
    """A shape without its unit dims (a 0-d or all-unit shape stays itself)."""
    inner = tuple(d for d in shape if d != 1)
    return inner if inner else tuple(shape)


def unit_view(graph, n):
    """Whether node n is a view of a float value that only adds or drops unit dims,
    its elements in their order (a reshape to (k, 1), unsqueeze, x[..., 0] of a unit
    dim): inside a kernel it is its input's value."""
    data = graph.nx.nodes[n]
    if data["kind"] != "op" or not getattr(data["op"], "is_view", False) or \
            data["op"].modifies is not None or len(data["specs"]) != 1:
        return False
    args = graph.args_of(n)
    if len(args) != 1:
        return False
    (pos, u, out), = args
    spec, result = graph.specs_of(u)[out], data["specs"][0]
    if spec.dtype != result.dtype or spec.dtype.np not in _NATIVE_FLOATS or \
            spec.shape == result.shape or squeezed(spec.shape) != squeezed(result.shape):
        return False
    # the view of a one-byte-per-element stand-in (calloc'd: no page is touched) keeps
    # the order when it starts at the first byte and steps through it in C order
    probe = np.zeros(math.prod(spec.shape), np.uint8).reshape(spec.shape)
    moved = data["op"].forward(*rules.join_args(data["op"], {pos: probe}, data["params"]))
    if not isinstance(moved, np.ndarray) or not np.may_share_memory(moved, probe) or \
            moved.shape != tuple(result.shape) or \
            moved.__array_interface__["data"][0] != probe.__array_interface__["data"][0]:
        return False
    steps = c_strides(moved.shape)
    return all(s == c for s, c, d in zip(moved.strides, steps, moved.shape) if d != 1)


class Facts:
    """compute_dtype, reduction_dims, contraction and unit_view of one graph's nodes,
    each asked once: fusion asks them several times a node. An answer holds while the
    node keeps its op, params and arguments' specs: fusion only moves edges between
    equal values and adds nodes once it asks (each new node is asked anew)."""

    def __init__(self, graph):
        self.graph, self._known = graph, {}

    def __call__(self, question, n):
        key = (question, n)
        if key not in self._known:
            self._known[key] = question(self.graph, n)
        return self._known[key]


__all__ = ["REDUCTIONS", "compute_dtype", "reduction_dims", "contraction", "row_product",
           "unit_view", "squeezed", "Facts"]

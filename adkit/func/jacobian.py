"""ak.func.jacobian: jacfwd or jacrev, chosen from the traced shapes (`mode="auto"`).

Owns: `jacobian` and its cost model (`jacobian_cost`). Does not: compute Jacobians
itself (jacfwd, jacrev in _autodiff.py).

The cost model. f is traced once per input signature (shapes only, as jit does); from
its graph: `ops`, the number of op nodes, and `work`, its element operations (an
elementwise op: its output's size; a matrix product: its multiply-adds, at a quarter
each: BLAS is faster per element). One pass of f then costs
    pass = ops * OP_SECONDS + work * ELEMENT_SECONDS
(OP_SECONDS: eager dispatch and bookkeeping per op; ELEMENT_SECONDS: numpy's time per
element). For f: R^n -> R^m (n: elements of the differentiated arguments, m: of the
outputs):
    forward = n * 2 * pass            (one jvp per input element, primal and tangent:
                                       jacfwd runs them one by one, so that value-
                                       dependent Python control flow works)
    reverse = pass + 2 * ops * OP_SECONDS + 2 * m * work * ELEMENT_SECONDS
                                      (the forward saving residuals, then one vjp
                                       batched over the m output directions by vmap)
and "auto" takes the cheaper. The constants were fitted on adkit's eager transforms
(`python benchmarks/jacobian_mode.py`, a 2-core x86-64, float64): within 1.3x of the
measured times on R^2000 -> R^4, R^4 -> R^2000, square and skewed cases.
"""
import functools
import math

from .._pytree import tree_flatten, tree_unflatten
from ._autodiff import _argnums_tuple, _is_tensor, input_signature, jacfwd, jacrev

OP_SECONDS = 10e-6  # eager cost of one op node in one pass (dispatch, tape, checks)
ELEMENT_SECONDS = 1e-9  # one element operation (numpy)
MATMUL_ELEMENT = 0.25  # a multiply-add of a matrix product, in element operations
MODES = ("auto", "fwd", "rev")


def jacobian_cost(n_inputs, n_outputs, ops, work):
    """{"fwd": seconds, "rev": seconds}: the model above for f: R^n -> R^m with `ops`
    op nodes and `work` element operations per pass."""
    one_pass = ops * OP_SECONDS + work * ELEMENT_SECONDS
    return {"fwd": n_inputs * 2 * one_pass,
            "rev": one_pass + 2 * ops * OP_SECONDS + 2 * n_outputs * work * ELEMENT_SECONDS}


def jacobian(func, argnums=0, *, mode="auto", has_aux=False, chunk_size=None):
    """The Jacobian of `func` with respect to `argnums`, by forward mode ("fwd": jacfwd),
    reverse mode ("rev": jacrev) or whichever the cost model above says is cheaper
    ("auto"). The result is laid out as jacfwd's and jacrev's (output shape + input
    shape). `wrapper.mode_for(*args)` says which mode "auto" takes for those args."""
    if mode not in MODES:
        raise ValueError(f"jacobian: mode must be one of {', '.join(map(repr, MODES))}, "
                         f"got {mode!r}")
    chosen = {}  # input signature -> mode

    def mode_for(*args):
        if mode != "auto":
            return mode
        key = input_signature(args)
        if key not in chosen:
            from ..ir.trace import trace  # upward call (see tests/test_layering.py)
            graph = trace(func, *args)
            costs = jacobian_cost(_n_inputs(args, argnums), _n_outputs(graph, has_aux),
                                  *_graph_work(graph))
            chosen[key] = min(costs, key=lambda m: (costs[m], m != "fwd"))
        return chosen[key]

    @functools.wraps(func)
    def wrapper(*args):
        if mode_for(*args) == "fwd":
            return jacfwd(func, argnums, has_aux=has_aux)(*args)
        return jacrev(func, argnums, has_aux=has_aux, chunk_size=chunk_size)(*args)
    wrapper.mode_for = mode_for
    return wrapper


def _n_inputs(args, argnums):
    nums, _ = _argnums_tuple(argnums, len(args), "jacobian")
    leaves, _ = tree_flatten(tuple(args[i] for i in nums), is_leaf=_is_tensor)
    return sum(x.numel() for x in leaves if _is_tensor(x))


def _n_outputs(graph, has_aux):
    """The number of output elements (of the first result when f has aux)."""
    from ..ir.rules import TensorSpec  # upward call (see tests/test_layering.py)
    leaves = [None] * (len(graph.outputs) + len(graph.static_outputs))
    specs = iter(graph.output_specs())
    leaves = [graph.static_outputs[i] if i in graph.static_outputs else next(specs)
              for i in range(len(leaves))]
    out = tree_unflatten(graph.out_tree, leaves)
    out = out[0] if has_aux else out
    found, _ = tree_flatten(out, is_leaf=lambda x: isinstance(x, TensorSpec))
    if not found or not all(isinstance(x, TensorSpec) for x in found):
        raise TypeError("jacobian: the function must return a tensor or a pytree of "
                        "tensors")
    return sum(int(math.prod(x.shape)) for x in found)


def _graph_work(graph):
    """(op nodes, element operations) of one pass of the traced graph."""
    work = 0.0
    for n in graph.op_nodes:
        data = graph.nx.nodes[n]
        size = sum(math.prod(spec.shape) for spec in data["specs"])
        if getattr(data["op"], "native_contraction", False):
            args = graph.args_of(n)
            k = graph.specs_of(args[0][1])[args[0][2]].shape[-1] if args and \
                graph.specs_of(args[0][1])[args[0][2]].shape else 1
            work += size * k * MATMUL_ELEMENT
        else:
            work += size
    return len(graph.op_nodes), work

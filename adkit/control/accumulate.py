"""Sums of products over a loop become one product after it: the weight gradient of a
recurrent step (acc + h_t^T g_t at every step of the reverse scan) is H^T G, one matrix
product of the stacked h_t and g_t (what cuDNN's RNN backward does).

Owns: `batch_accumulations(graph)` (a pass: a new graph; the input is unchanged). A
Scan carry c qualifies when the body reads it only as `c + A @ B` (2-D A and B) and
returns that sum as the new c, nothing else reading it: the carry leaves the loop, A and
B become ys (stacked by the scan), and after the loop c = c0 + A_all @ B_all, where
A_all lays the stacked A_t side by side along K and B_all stacks the B_t along K. A
step then writes M*K + K*N values instead of reading and writing the M*N accumulator,
and BLAS does the sum. Does not: touch loops with history or checkpointing (their
reverse passes read the carries step by step).
"""
import dataclasses

from ..ir.passes import recursive
from ..ir.passes.cleanup import redirect
from ..ir.passes.fuse import unit_view
from ..ops.binary import Add
from ..ops.shape import Permute, Reshape
from .scan import Scan


def _accumulated_product(body, n_consts, k):
    """(the Add node, the product node) when body carry k is only ever `c + A @ B`
    returned as the new carry, else None."""
    carry = [m for m in body.inputs if body.nx.nodes[m]["index"] == n_consts + k][0]
    if body.nx.out_degree(carry) != 1:
        return None
    (add,) = body.nx.successors(carry)
    if body.nx.nodes[add]["op"] is not Add or body.nx.out_degree(add) != 1:
        return None
    (out,) = body.nx.successors(add)
    if body.nx.nodes[out]["kind"] != "output" or body.nx.nodes[out]["index"] != k:
        return None
    others = [(u, o) for _, u, o in body.args_of(add) if u != carry]
    if len(others) != 1 or body.nx.out_degree(others[0][0]) != 1:
        return None
    product = others[0][0]
    data = body.nx.nodes[product]
    if data["kind"] != "op" or not getattr(data["op"], "native_contraction", False):
        return None
    specs = [body.specs_of(u)[o] for _, u, o in body.args_of(product)]
    if len(specs) != 2 or any(len(s.shape) != 2 for s in specs) or \
            body.specs_of(add)[0] != body.specs_of(carry)[0]:
        return None
    return add, product


def _x_source(body, value, first_x):
    """The body input index of the x that `value` is, through views that keep its
    elements in order and change only unit dims (h_t as a column), else None: such an
    operand's stack is the scan's own xs argument, not a copy stacked as a y."""
    node, _ = value
    while body.nx.nodes[node]["kind"] == "op" and unit_view(body, node):
        node = body.args_of(node)[0][1]
    data = body.nx.nodes[node]
    return data["index"] if data["kind"] == "input" and data["index"] >= first_x else None


def _without_carry(body, n_consts, k, add, product, stacked):
    """The body with carry k gone and the product's operands that are not xs
    (`stacked`: their positions) as more ys."""
    g = body.copy()
    carry_index = n_consts + k
    carry = [m for m in g.inputs if g.nx.nodes[m]["index"] == carry_index][0]
    (out,) = g.nx.successors(add)
    operands = [(u, o) for _, u, o in sorted(g.args_of(product))]
    g.nx.remove_nodes_from([carry, add, out, product])
    for m in g.inputs:
        if g.nx.nodes[m]["index"] > carry_index:
            g.nx.nodes[m]["index"] -= 1
    for m in g.outputs:
        if g.nx.nodes[m]["index"] > k:
            g.nx.nodes[m]["index"] -= 1
    for i in stacked:
        g.add_output(operands[i])
    return g


def _sum_of_products(graph, a_stack, b_stack, product_op, init):
    """init + sum_t A_t @ B_t from the stacks A (n, M, K) and B (n, K, N)."""
    n, m, k = graph.specs_of(a_stack[0])[a_stack[1]].shape
    width = graph.specs_of(b_stack[0])[b_stack[1]].shape[2]
    side = graph.add_op(Permute, {0: a_stack}, {"dims": (1, 0, 2)})
    wide = graph.add_op(Reshape, {0: (side, 0)}, {"shape": (m, n * k)})
    tall = graph.add_op(Reshape, {0: b_stack}, {"shape": (n * k, width)})
    total = graph.add_op(product_op, {0: (wide, 0), 1: (tall, 0)}, {})
    return graph.add_op(Add, {0: init, 1: (total, 0)}, {}), 0


def _batch_one(graph, n, k):
    """Rewrite Scan node n without carry k when it qualifies; True if it did."""
    data = graph.nx.nodes[n]
    plan = data["params"]["plan"]
    found = _accumulated_product(plan.body, plan.n_consts, k)
    if found is None:
        return False
    add, product = found
    product_op = plan.body.nx.nodes[product]["op"]
    operands = [(u, o) for _, u, o in sorted(plan.body.args_of(product))]
    sources = [_x_source(plan.body, v, plan.n_consts + plan.n_carry) for v in operands]
    stacked = [i for i, src in enumerate(sources) if src is None]
    new_plan = dataclasses.replace(plan, body=_without_carry(plan.body, plan.n_consts, k,
                                                               add, product, stacked),
                                   n_carry=plan.n_carry - 1, cache={})
    args = {pos: (u, out) for pos, u, out in graph.args_of(n)}
    xs_args = {src: args[1 + src] for src in sources if src is not None}
    init = args.pop(1 + plan.n_consts + k)
    args = {pos - (pos > 1 + plan.n_consts + k): value for pos, value in args.items()}
    new = graph.add_op(Scan, args, {**data["params"], "plan": new_plan},
                       new_plan.output_specs(), data.get("source"))
    for i in range(plan.n_carry + plan.n_ys):
        if i != k:
            redirect(graph, (n, i), (new, i - (i > k)))
    ys = iter(range(len(new_plan.output_specs()) - len(stacked),
                    len(new_plan.output_specs())))
    stacks = []
    for value, src in zip(operands, sources):
        if src is None:
            stacks.append((new, next(ys)))
        else:  # the xs argument itself, viewed with the operand's shape per step
            shape = (plan.length,) + tuple(plan.body.specs_of(value[0])[value[1]].shape)
            stacks.append((graph.add_op(Reshape, {0: xs_args[src]}, {"shape": shape}), 0))
    redirect(graph, (n, k), _sum_of_products(graph, *stacks, product_op, init))
    graph.nx.remove_node(n)
    return True


def _batch(graph):
    g = graph.copy()
    changed = True
    while changed:  # each rewrite replaces its Scan node: look again
        changed = False
        for n in [n for n, op in g.nx.nodes(data="op") if op is Scan]:
            plan = g.nx.nodes[n]["params"]["plan"]
            if plan.history or plan.checkpoint is not None:
                continue
            if any(_batch_one(g, n, k) for k in range(plan.n_carry)):
                changed = True
                break
    return g


batch_accumulations = recursive(_batch)
batch_accumulations.__doc__ = """Loop carries that only sum matrix products become one
product after the loop, at every depth. In: any valid Graph. Out: the same outputs;
such carries leave their Scan, whose ys gain the products' operands."""

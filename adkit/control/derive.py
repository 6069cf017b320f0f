"""Bodies derived from bodies: the graph plumbing the rules of scan, while_loop and switch
share. Each derived body is the body's own transform (ir.passes.vjp / jvp / vmap) with
its inputs and outputs rearranged into the layout the derived loop or branch needs, so
the rules hold no per-op knowledge.

Owns: `graph_of` (trace a wrapper over tensors into a clean Graph), the three
rearrangements `vjp_parts`, `jvp_parts`, `vmap_graph`, and `split_vjp` (the vjp cut into
a forward that emits residuals and a backward that reads them) with `subgraph`. Does
not: build nodes.
"""
from ..ir import passes
from ..ir.evaluate import run
from ..ir.graph import Graph
from ..ir.passes.cleanup import copy_op
from ..ir.trace import trace
from ._common import example

_TIDY = passes.pipeline([passes.dce, passes.cse, passes.dce])


def graph_of(fn, specs):
    """fn(*tensors) -> list of tensors, traced on `specs` into a tidy Graph."""
    return _TIDY(trace(lambda *xs: tuple(fn(*xs)), *map(example, specs)))


def split(values, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(list(values[start:start + size]))
        start += size
    return out


def vjp_parts(body):
    """(vjp graph, n_out): calling `run(vjp, primals + cotangents)` gives the body's
    outputs (n_out of them) followed by one gradient per body input."""
    return passes.vjp(body), len(body.outputs)


def jvp_parts(body):
    """jvp graph: `run(jvp, primals + tangents)` gives outputs then their tangents."""
    return passes.jvp(body)


def call(graph, values):
    """Evaluate `graph` on tensors at the current interpreter level (inside a wrapper
    being traced, this records the graph's ops into the new graph)."""
    return run(graph, list(values))


def vmap_graph(body, in_dims, batch_size):
    """The body batched: inputs batched at their in_dims (None: shared), every output
    batched at dim 0."""
    return passes.vmap(body, list(in_dims), 0, batch_size=batch_size)


def split_vjp(body, n_consts, n_carry, store_const_values=False):
    """JAX's partial evaluation of the body's vjp, for a scan that stores residuals:
    (forward, n_residuals, backward). `forward` takes the body's inputs and returns its
    outputs plus the residuals (values the backward reads that do not depend on
    cotangents: op results, and the carry entering the step); `backward` takes
    (consts..., residuals..., x..., cotangents of the body's outputs...) and returns one
    gradient per body input. Consts and xs are not stored: the backward scan reads them.
    Values of the consts alone are recomputed by the backward (hoisting then moves them
    out of its loop), unless `store_const_values` (there is no loop: a jitted call, all
    of whose inputs are consts, stores every value its backward reads).
    """
    vjp = passes.vjp(body)
    n_in, n_out = len(body.inputs), len(body.outputs)
    inputs = vjp.inputs
    primals, cotangents = inputs[:n_in], inputs[n_in:]
    tainted = set(cotangents)
    for n in vjp.topo_order():
        if any(u in tainted for u in vjp.nx.predecessors(n)):
            tainted.add(n)
    grad_sources = [_source(vjp, o) for o in vjp.outputs[n_out:]]
    wanted = _residuals(vjp, tainted, grad_sources, n_consts, n_carry, store_const_values)
    forward = subgraph(vjp, [(p, 0) for p in primals],
                       [_source(vjp, o) for o in vjp.outputs[:n_out]] + wanted)
    backward_inputs = ([(p, 0) for p in primals[:n_consts]] + wanted +
                       [(p, 0) for p in primals[n_consts + n_carry:]] +
                       [(c, 0) for c in cotangents])
    backward = subgraph(vjp, backward_inputs, grad_sources)
    return forward, len(wanted), backward


def _residuals(vjp, tainted, grad_sources, n_consts, n_carry, store_const_values):
    """The values the backward reads that it cannot compute: untainted op results and
    carry inputs. Not stored (the backward recomputes them): constants, values of the
    consts alone (hoisting then moves them out of the backward loop), and views (a
    reshape or transpose of a stored value costs nothing to redo)."""
    primal_inputs = {n: vjp.nx.nodes[n]["index"] for n in vjp.inputs
                     if n not in tainted}
    const_only = {n for n, i in primal_inputs.items() if i < n_consts}
    for n in vjp.topo_order():
        data = vjp.nx.nodes[n]
        if data["kind"] == "const" or (data["kind"] == "op" and not store_const_values and
                                       n not in tainted and all(
                u in const_only for u in vjp.nx.predecessors(n))):
            const_only.add(n)
    todo = [(u, out) for n in vjp.topo_order() if n in tainted
            for _, u, out in vjp.args_of(n)] + list(grad_sources)
    wanted, seen = [], set()
    while todo:
        u, out = todo.pop(0)
        if u in tainted or u in const_only or (u, out) in seen:
            continue
        seen.add((u, out))
        data = vjp.nx.nodes[u]
        if data["kind"] == "input":
            if n_consts <= data["index"] < n_consts + n_carry:
                wanted.append((u, out))  # xs are read again by the backward scan
        elif getattr(data["op"], "is_view", False):
            todo.extend((v, o) for _, v, o in vjp.args_of(u))  # recompute the view
        else:
            wanted.append((u, out))
    return wanted


def _source(graph, output_node):
    (_, u, out), = graph.args_of(output_node)
    return (u, out)


def subgraph(graph, inputs, outputs):
    """A new Graph computing the values `outputs` ((node, out) of `graph`) from the
    values `inputs` (which become its inputs, in order): the nodes in between are
    copied; constants come along."""
    g = Graph()
    where = {key: (g.add_input(graph.specs_of(key[0])[key[1]], i), 0)
             for i, key in enumerate(inputs)}
    needed, todo = set(), [key for key in outputs if key not in where]
    while todo:  # walk back from the outputs, stopping at the given inputs
        u, _ = todo.pop()
        if u in needed:
            continue
        needed.add(u)
        todo.extend((v, out) for _, v, out in graph.args_of(u) if (v, out) not in where)
    for n in graph.topo_order():
        if n not in needed:
            continue
        data = graph.nx.nodes[n]
        if data["kind"] == "const":
            where[(n, 0)] = (g.add_const(data["value"]), 0)
        elif data["kind"] == "op":
            args = {pos: where[(u, out)] for pos, u, out in graph.args_of(n)}
            new = copy_op(g, data, args)
            for i in range(len(data["specs"])):
                where[(n, i)] = (new, i)
    for key in outputs:
        g.add_output(where[key])
    return g

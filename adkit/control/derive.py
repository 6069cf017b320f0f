"""Bodies derived from bodies: the graph plumbing the rules of scan, while_loop and switch
share. Each derived body is the body's own transform (ir.passes.vjp / jvp / vmap) with
its inputs and outputs rearranged into the layout the derived loop or branch needs, so
the rules hold no per-op knowledge.

Owns: `graph_of` (trace a wrapper over tensors into a clean Graph) and the three
rearrangements: `vjp_parts`, `jvp_parts`, `vmap_graph`. Does not: build nodes.
"""
from ..ir import passes
from ..ir.evaluate import run
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

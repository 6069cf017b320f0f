"""Passes that see inside loops and branches.

Owns: `map_bodies(graph, pass_)` (a copy of `graph` whose nodes' bodies are `pass_`
applied to each) and `recursive(pass_)` (the pass, applied to every body at every depth
and then to the graph itself), which is how dce, cse, fold_constants, simplify,
decompose and fuse reach into bodies with no loop-specific code, and how a user pass
can too. Does not: know any op: a node holds bodies when a params value has `bodies()`
({name: Graph}) and `with_bodies({name: Graph})` (adkit.control's plans do).
A body keeps its inputs and outputs under every pass (passes keep a graph's interface),
so the node around it stays valid.
"""
import functools

from .editing import in_place_form


def has_bodies(value):
    return hasattr(value, "bodies") and hasattr(value, "with_bodies")


def map_bodies(graph, pass_, in_place=False):
    """`graph` with each op node's bodies replaced by pass_(body) (one level deep;
    `recursive` goes all the way down): a copy, or the input itself when no node holds
    a body (most graphs: the pass around it copies anyway). The input is not changed,
    unless `in_place` (a caller that owns it: the result is then the input)."""
    holders = [n for n, data in graph.nx.nodes(data=True)
               if data["kind"] == "op" and any(map(has_bodies, data["params"].values()))]
    if not holders:
        return graph
    g = graph if in_place else graph.copy()
    for n in holders:
        params = g.nx.nodes[n]["params"]
        for key, value in list(params.items()):
            if has_bodies(value):
                params[key] = value.with_bodies({name: pass_(body)
                                                 for name, body in value.bodies().items()})
    return g


def recursive(pass_):
    """`pass_` applied to every body (innermost first) and then to the graph. A pass
    with an in-place form (editing.edits) keeps one: `recursive(p).in_place`, which
    edits the graph it is given (bodies are never edited in place: other graphs hold
    them too)."""
    in_place = in_place_form(pass_)

    @functools.wraps(pass_)
    def run(graph, *args, **kwargs):
        inner = functools.partial(run, *args, **kwargs) if args or kwargs else run
        mapped = map_bodies(graph, lambda body: inner(body))
        if in_place is not None and mapped is not graph:  # already a copy of its own
            return in_place(mapped, *args, **kwargs)
        return pass_(mapped, *args, **kwargs)

    if in_place is not None:
        def run_in_place(graph, *args, **kwargs):
            inner = functools.partial(run, *args, **kwargs) if args or kwargs else run
            return in_place(map_bodies(graph, lambda body: inner(body), in_place=True),
                            *args, **kwargs)
        run.in_place = functools.wraps(in_place)(run_in_place)
    return run

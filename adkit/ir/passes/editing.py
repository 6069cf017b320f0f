"""Passes that edit a graph in place when their caller owns it.

Owns: `edits(edit)` (the pure pass `edit(graph.copy())`, with the editing form kept as
the pass's `in_place` attribute, which `in_place_form` reads) and `apply_passes` (a
list of passes applied to a graph that stays as it was, copied once for a run of
in-place forms rather than once per pass). Does not: hold pass logic.
Why: every pass copies its input (passes are pure: a caller's graph never changes),
and jit's pipeline ran ~15 copies per call of graphs that nothing but the next pass
would read.
Invariant: `p.in_place(g)` may change g and everything g's copy owns (its node and edge
attribute dicts and params dicts, as `Graph.copy` makes them), never the values those
hold (arrays, body graphs: shared with other graphs); it returns the result, g itself
or a new graph that no one else holds.
"""
import functools


def edits(edit):
    """The pure pass `edit(graph.copy(), ...)` for `edit(g, ...)`, which changes g in
    place and returns the result; `pass.in_place` is `edit`, for callers that own g."""
    @functools.wraps(edit)
    def run(graph, *args, **kwargs):
        return edit(graph.copy(), *args, **kwargs)
    run.in_place = edit
    return run


def in_place_form(p):
    """p's in-place form (`edits`), or None."""
    in_place = getattr(p, "in_place", None)
    return in_place if callable(in_place) else None  # (a user's attribute of that name)


def apply_passes(passes, graph, after=None):
    """`graph` after each of `passes` in order; `graph` itself is left as it was. A
    pass with an `in_place` form edits a copy this call made (one copy serves a run of
    them); any other pass is called as it is, and its result, which the pass may keep
    or share, is copied before an in-place form edits it. `after(p, result)`, if
    given, is called after each pass."""
    owned = False  # whether `graph` is a copy made here, which no one else holds
    for p in passes:
        in_place = in_place_form(p)
        if in_place is None:
            graph, owned = p(graph), False
        else:
            graph, owned = in_place(graph if owned else graph.copy()), True
        if after is not None:
            after(p, graph)
    return graph


__all__ = ["edits", "in_place_form", "apply_passes"]

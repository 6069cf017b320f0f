"""What a picture leaves out, so large graphs stay legible.

Owns: `condense(graph, max_nodes)`: which op nodes a picture hides, grouped, each group
drawn as one summary box. Two rules, in order: (1) repeated structure: a run of at
least three consecutive identical blocks of ops in topological order (an unrolled
loop, and its backward) keeps its first and last blocks and hides the ones between;
(2) a size budget: when more than `max_nodes` boxes would remain, the middle of the
topological order is hidden, keeping the beginning and the end. Does not: draw.
"""
from typing import NamedTuple

from .names import format_param, op_name

MAX_PERIOD = 60    # the longest block (in ops) looked for when finding repeats
MIN_REPEATS = 3    # first + hidden + last
MIN_HIDDEN = 4     # hiding fewer ops than this saves nothing


class Group(NamedTuple):
    """Hidden op nodes shown as one box: `kind` is "repeat" or "elided"."""
    kind: str
    nodes: tuple
    label: str
    tooltip: str


class Condensed(NamedTuple):
    groups: list     # [Group]
    hidden: dict     # {node: index into groups}
    note: str        # what was left out, for the picture's caption ("" if nothing)


def condense(graph, max_nodes=200, collapse=True):
    order = [n for n in graph.topo_order() if graph.nx.nodes[n]["kind"] == "op"]
    groups = find_repeats(graph, order) if collapse else []
    hidden = {n: i for i, g in enumerate(groups) for n in g.nodes}
    notes = [f"{len(g.nodes)} ops in repeated blocks drawn once" for g in groups]
    visible = [n for n in order if n not in hidden]
    others = len(graph) - len(order)
    if max_nodes is not None and len(visible) + len(groups) + others > max_nodes:
        keep = max(max_nodes - others - len(groups) - 1, 2)
        middle = visible[keep // 2: len(visible) - (keep - keep // 2)]
        if middle:
            groups.append(_elided(graph, middle, max_nodes))
            hidden.update((n, len(groups) - 1) for n in middle)
            notes.append(f"{len(middle)} of {len(order)} ops elided to stay under "
                         f"max_nodes={max_nodes}")
    return Condensed(groups, hidden, "; ".join(notes))


def _elided(graph, nodes, max_nodes):
    counts = {}
    for n in nodes:
        name = op_name(graph.nx.nodes[n]["op"])
        counts[name] = counts.get(name, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    summary = ", ".join(f"{k} x{v}" for k, v in top[:4]) + (", ..." if len(top) > 4 else "")
    return Group("elided", tuple(nodes), f"... {len(nodes)} more ops\n({summary})",
                 f"{len(nodes)} ops elided (the picture's size budget is max_nodes="
                 f"{max_nodes} boxes): " + ", ".join(f"{k} x{v}" for k, v in top))


def find_repeats(graph, order):
    """[Group] of the hidden middle blocks of each run of identical blocks, found by a
    greedy left-to-right scan: at each position the period covering the most ops."""
    position = {n: i for i, n in enumerate(order)}
    groups, s = [], 0
    while s < len(order):
        best = None
        for p in range(1, min(MAX_PERIOD, (len(order) - s) // MIN_REPEATS) + 1):
            r = _repeats(graph, order, position, s, p)
            if r >= MIN_REPEATS and (r - 2) * p >= MIN_HIDDEN and \
                    (best is None or r * p > best[0] * best[1]):
                best = (r, p)
        if best is None:
            s += 1
            continue
        r, p = best
        groups.append(_repeat_group(graph, order[s + p: s + (r - 1) * p], p, r))
        s += r * p
    return groups


def _repeats(graph, order, position, s, p):
    """How many consecutive identical blocks of `p` ops start at position s."""
    first = _block_key(graph, order, position, s, p)
    r = 1
    while s + (r + 1) * p <= len(order) and \
            graph.nx.nodes[order[s + r * p]]["op"] is graph.nx.nodes[order[s]]["op"] and \
            _block_key(graph, order, position, s + r * p, p) == first:
        r += 1
    return r


def _block_key(graph, order, position, start, p):
    """What makes two blocks alike: per op its class, params and, per argument, where it
    comes from: a node of the block (by offset), or outside it (by its op or, for inputs
    and constants, the very node)."""
    key = []
    for i in range(start, start + p):
        n = order[i]
        data = graph.nx.nodes[n]
        args = []
        for pos, u, out in graph.args_of(n):
            j = position.get(u)
            if j is not None and start <= j < i:
                args.append((pos, "in", i - j, out))
            elif j is not None:
                args.append((pos, "op", graph.nx.nodes[u]["op"], out))
            else:
                args.append((pos, "node", u, out))
        params = tuple((k, format_param(v)) for k, v in sorted(data["params"].items()))
        key.append((data["op"], params, tuple(args)))
    return tuple(key)


def _repeat_group(graph, nodes, p, r):
    block = [op_name(graph.nx.nodes[n]["op"]) for n in nodes[:p]]
    shown = ", ".join(block[:6]) + (", ..." if len(block) > 6 else "")
    return Group("repeat", tuple(nodes),
                 f"x{r - 2} more of the block\n[{shown}]",
                 f"a block of {p} ops repeated {r} times: the first and last are drawn, "
                 f"the {r - 2} between are this box ({len(nodes)} ops: "
                 f"{', '.join(block)} each)")

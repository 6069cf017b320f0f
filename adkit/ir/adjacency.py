"""networkx's dicts, read and written directly: Graph's hot paths (its builders, copy,
topological order and ancestors), where networkx's calls and views cost more than
the work (a jitted function's first call orders graphs ~150 times and builds and
copies hundreds of nodes).

Owns: `add_new_node`, `new_id`, `copy`, `topo_order` (Graph.topo_order's order),
`ancestors`; the order and the largest id are kept in networkx's per-graph cache. Does not: know the node schema beyond
edges' `pos`/`out` and nodes' `params` dicts, which a copy has of its own (graph.py).
Invariant: what these make is what networkx's own calls make: the same dicts, in the
same insertion orders, one key dict per (producer, user) shared by `_succ` and
`_pred`; a networkx subclass goes through networkx's calls.
"""
import heapq

import networkx as nx

# topo_order's key in networkx's per-graph cache (G.__networkx_cache__), which every
# networkx call that adds or removes a node or an edge empties from networkx 3.3 on
# (nx._clear_cache); add_new_node empties it too
_TOPO_KEY = "adkit.ir.Graph.topo_order"
_TOP_KEY = "adkit.ir.Graph largest id"  # (add_new_node keeps it up to date)
_NX_CLEARS_CACHE = hasattr(nx, "_clear_cache")


def topo_order(g):
    """Graph.topo_order's order of networkx graph g (a list of its own for the caller),
    or None when g has a cycle: program order (ids) when every edge goes up in id, else
    Kahn's algorithm keyed by each node's own id or its earliest user's key (graph.py
    says why)."""
    cache = getattr(g, "__networkx_cache__", None) if _NX_CLEARS_CACHE else None
    order = None if cache is None else cache.get(_TOPO_KEY)
    if order is None:
        succ = g._succ
        if all(u < v for u, users in succ.items() for v in users):  # program order
            order = sorted(succ)
        else:
            key = _keys(g)
            order = None if key is None else _kahn(g, key)
            if order is None:
                return None
        if cache is not None:
            cache[_TOPO_KEY] = order
    return list(order)


def _keys(g):
    """{node: the smallest of its id and its users' keys}, users before producers
    (Kahn's algorithm on the reversed edges: any order of the sinks will do); None
    when g has a cycle."""
    succ, pred = g._succ, g._pred
    waiting = {n: len(users) for n, users in succ.items()}
    ready = [n for n, count in waiting.items() if count == 0]
    key = {}
    for n in ready:  # (ready grows as the loop goes)
        users = succ[n]
        smallest = min([key[v] for v in users]) if users else n
        key[n] = n if n < smallest else smallest
        for u in pred[n]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return key if len(key) == len(waiting) else None


def _kahn(g, key):
    """The nodes in topological order, the ready node of smallest (key[n], n) first;
    None when g has a cycle. NB: a node waits for its producers (parallel edges from
    one count once)."""
    succ, pred = g._succ, g._pred
    waiting = {n: len(producers) for n, producers in pred.items()}
    ready = [(key[n], n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)[1]
        order.append(n)
        for v in succ[n]:
            waiting[v] -= 1
            if waiting[v] == 0:
                heapq.heappush(ready, (key[v], v))
    return order if len(order) == len(waiting) else None


def new_id(g):
    """An id above every node's of g (a traced program's nodes are numbered in order):
    max() over all ids made building a graph quadratic in its size."""
    cache = getattr(g, "__networkx_cache__", None) if _NX_CLEARS_CACHE else None
    top = None if cache is None else cache.get(_TOP_KEY)
    if top is None:
        top = max(g._node, default=-1)
        if cache is not None:
            cache[_TOP_KEY] = top
    return top + 1


def ancestors(g, node):
    """networkx's `ancestors(g, node)` (of a graph without cycles), walked on its
    producer dicts: networkx's call goes through its dispatch, which compiles a wrapper
    on a process's first call."""
    return reach_up(g, [node]) - {node}


def reach_up(g, roots):
    """The roots and every node they depend on: one walk up networkx's producer dicts
    (a walk per root would go over the nodes they share again)."""
    pred = g._pred
    found, stack = set(roots), list(roots)
    while stack:
        for u in pred[stack.pop()]:
            if u not in found:
                found.add(u)
                stack.append(u)
    return found


def add_new_node(g, n, data, args):
    """networkx's `g.add_node(n, **data)`, then `g.add_edge(u, n, key=pos, pos=pos,
    out=out)` for each (pos, (u, out)) of `args` by position, for a node n new to g:
    the same dicts, built directly (networkx's calls were a tenth of tracing's time)."""
    succ, pred = g._succ, g._pred
    stray = type(g) is not nx.MultiDiGraph or n in succ
    for u, _ in args.values():  # (a loop: a generator costs more than the check)
        stray = stray or u not in succ
    if stray:  # networkx's own behaviour
        g.add_node(n, **data)
        for pos, (u, out) in sorted(args.items()):
            g.add_edge(u, n, key=pos, pos=pos, out=out)
        return
    producers = pred[n] = {}
    succ[n], g._node[n] = {}, data
    for pos, (u, out) in sorted(args.items()):
        keyed = producers.get(u)
        if keyed is None:  # one key dict per (u, n), shared as networkx shares it
            keyed = producers[u] = succ[u][n] = {}
        keyed[pos] = {"pos": pos, "out": out}
    cache = getattr(g, "__networkx_cache__", None)  # what networkx's calls empty
    if cache:
        top = cache.get(_TOP_KEY)
        cache.clear()
        if top is not None and _NX_CLEARS_CACHE:  # (n joins the ids it was above)
            cache[_TOP_KEY] = max(top, n)


def copy(src):
    """networkx's `src.copy()` (the same dicts, in the same insertion orders, the edge
    key dicts shared between successors and predecessors as networkx keeps them), with
    each node's `params` dict copied too. Built on the adjacency dicts directly: the
    generic copy (add_nodes_from/add_edges_from) was a third of jit's pipeline, which
    copies ~15 graphs per call."""
    if type(src) is not nx.MultiDiGraph:  # a subclass may keep more state: its own copy
        g = src.copy()
        for _, data in g.nodes(data=True):
            if "params" in data:
                data["params"] = dict(data["params"])
        return g
    g = nx.MultiDiGraph()
    g.graph.update(src.graph)
    nodes, succ, pred = g._node, g._succ, g._pred
    for n, data in src._node.items():
        data = nodes[n] = data.copy()
        if "params" in data:
            data["params"] = dict(data["params"])
        succ[n], pred[n] = {}, {}
    for u, nbrs in src._succ.items():
        out = succ[u]
        for v, keyed in nbrs.items():
            keyed = out[v] = {k: d.copy() for k, d in keyed.items()}
            pred[v][u] = keyed
    if _NX_CLEARS_CACHE:  # the same nodes and edges: the same order and largest id
        kept = getattr(src, "__networkx_cache__", {})
        g.__networkx_cache__.update({k: kept[k] for k in (_TOPO_KEY, _TOP_KEY) if k in kept})
    return g

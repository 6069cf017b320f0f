"""What the viewer knows about each node: hover data and the nesting of bodies.

Owns: `panel_data(graph, structure)`, the JSON-ready records of the picture's nodes and
clusters (op, shapes, dtypes, SSA line, the user's source line; which bodies enclose
what), and `dot_structure(dot_text, graph)`, which ties the picture's Graphviz ids to the
graph's nodes. Does not: draw, or read labels: a picture may label boxes as it likes.

A node is named by its path: `(n,)` at the top, `(n, k, m)` for node m of body k of node n.
The Graphviz text is read for its structure only (which ids sit in which
`subgraph cluster_*`); an id's trailing number is its node, a cluster's owner is the
number its members' common prefix adds to the enclosing scope's prefix (`n23_0_`,
`n23k` are both node 23's), and its body is the number after that, else the order.
"""
import linecache
import os
import re

from .. import printing

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NODE = re.compile(r'^\s*"?([A-Za-z_]\w*)"?\s*(\[|;|$)')
_CLUSTER = re.compile(r'^\s*subgraph\s+"?(cluster[^"\s{]*)"?\s*\{')
_TRAILING = re.compile(r"(\d+)$")


def catalog(graph, path=(), records=None, bodies=None):
    """({node path: record}, {body path: record}) for `graph` and all its bodies."""
    records = {} if records is None else records
    bodies = {} if bodies is None else bodies
    names = printing.name_values(graph)
    for n in graph.topo_order():
        data = graph.nx.nodes[n]
        records[path + (n,)] = _record(graph, n, names)
        if data["kind"] != "op":
            continue
        for k, (body_name, body) in enumerate(printing.node_bodies(data)):
            bodies[path + (n, k)] = {"label": f"{printing.op_name(data['op'])} {body_name}",
                                     "size": len(body.op_nodes), "graph": body}
            catalog(body, path + (n, k), records, bodies)
    return records, bodies


class _Scope:
    """The ids declared directly in one cluster (or at the top) and its sub-clusters."""

    def __init__(self, name=None):
        self.name, self.ids, self.children = name, [], []


def _parse(dot_text):
    """The tree of scopes of Graphviz text (quoted strings cannot open or close one)."""
    top = _Scope()
    stack = [top]
    for raw in dot_text.splitlines():
        line = _QUOTED.sub('""', raw).strip()
        cluster = _CLUSTER.match(raw)
        if cluster:
            scope = _Scope(cluster.group(1))
            stack[-1].children.append(scope)
            stack.append(scope)
        elif line.endswith("{"):  # the digraph itself, a rank group: not a body
            stack.append(stack[-1])
        elif line.startswith("}"):
            if len(stack) > 1:
                stack.pop()
        elif "->" not in line and "--" not in line:
            node = _NODE.match(raw)
            if node and node.group(1) not in ("node", "edge", "graph", "subgraph"):
                stack[-1].ids.append(node.group(1))
    return top


def _trailing(i):
    number = _TRAILING.search(i)
    return int(number.group(1)) if number else None


def _prefix(ids):
    stems = [_TRAILING.sub("", i) for i in ids]
    return os.path.commonprefix(stems) if stems else ""


def _all_ids(scope):
    return scope.ids + [i for c in scope.children for i in _all_ids(c)]


def dot_structure(dot_text, graph):
    """{"nodes": {id: path}, "clusters": {id: body path}, "chains": {id: [cluster ids
    around it]}, "parents": {cluster id: [cluster ids around it]}, "groups": {id: node
    path}} of Graphviz text. A group is a cluster standing for a node with several
    bodies (a loop's cond and body): it holds only the bodies' clusters."""
    found = {"nodes": {}, "clusters": {}, "chains": {}, "parents": {}, "groups": {}}
    top = _parse(dot_text)
    _match(top, graph, (), _prefix(top.ids), [], found)
    return found


def _match(scope, graph, path, prefix, chain, found, own=None):
    """Tie `scope`'s ids to `graph`'s nodes (ids `prefix<n>`), recursively; `own`, for a
    group, is the chain its owner's own box keeps (the box stays when the group closes)."""
    for i in scope.ids:
        found["chains"][i] = list(chain if own is None else own)
        rest = i[len(prefix):] if i.startswith(prefix) else ""
        number = int(rest) if rest.isdigit() else _trailing(i)
        if graph is not None and number in graph.nx:
            found["nodes"][i] = path + (number,)
    seen = {}  # owner -> how many of its clusters came before
    for child in scope.children:
        found["parents"][child.name] = list(chain)
        inner = _member_prefix(child)
        if child.children and all(i.startswith(prefix) and i[len(prefix):].isdigit()
                                  for i in child.ids):
            # a group: the box of a node with several bodies (and maybe the node itself)
            owner = _owner(graph, prefix, _member_prefix(child.children[0]))
            if owner is not None:
                found["groups"][child.name] = path + (owner,)
            _match(child, graph, path, prefix, chain + [child.name], found, own=chain)
            continue
        body_path, body = _body_of(graph, path, prefix, inner, seen)
        if body_path is not None:
            found["clusters"][child.name] = body_path
        _match(child, body, body_path or path, inner, chain + [child.name], found)


def _member_prefix(cluster):
    """What a cluster's ids start with: the cluster's name after `cluster_` when every
    id is that and a number, else the ids' common prefix when that holds, else their
    common prefix without trailing numbers."""
    ids = cluster.ids or _all_ids(cluster)
    named = cluster.name[len("cluster_"):] if cluster.name.startswith("cluster_") else ""
    if named and ids and all(i.startswith(named) and i[len(named):].isdigit() for i in ids):
        return named
    full = os.path.commonprefix(ids)
    if len(ids) > 1 and all(i[len(full):].isdigit() for i in ids):
        return full
    return _prefix(ids)


def _numbers(prefix, inner):
    return [int(x) for x in re.findall(r"\d+", inner.removeprefix(prefix))]


def _owner(graph, prefix, inner):
    """The op node of `graph` whose number `inner` adds to `prefix` (None if none)."""
    numbers = _numbers(prefix, inner)
    if graph is None or not numbers or numbers[0] not in graph.nx or \
            graph.nx.nodes[numbers[0]]["kind"] != "op":
        return None
    return numbers[0]


def _body_of(graph, path, prefix, inner, seen):
    """(body path, body graph) of the cluster whose members' prefix is `inner`."""
    owner = _owner(graph, prefix, inner)
    if owner is None:
        return None, None
    numbers = _numbers(prefix, inner)
    bodies = printing.node_bodies(graph.nx.nodes[owner])
    k = numbers[1] if len(numbers) > 1 else seen.get(owner, 0)
    seen[owner] = seen.get(owner, 0) + 1
    if k >= len(bodies):
        return None, None
    return path + (owner, k), bodies[k][1]


def panel_data(graph, structure):
    """The JSON the page's script reads for one picture. Only clusters that are bodies
    open and close; others (a legend) are left as drawn."""
    records, bodies = catalog(graph)
    ids = {path: i for i, path in structure["nodes"].items()}
    owned, groups = structure["clusters"], structure.get("groups", {})

    def chain(cids):
        return [c for c in cids if c in owned or c in groups]
    nodes, clusters = {}, {}
    for cid, owner in groups.items():
        sizes = [b["size"] for bp, b in bodies.items() if bp[:-1] == owner]
        clusters[cid] = {"owner": ids.get(owner), "parents": chain(structure["parents"][cid]),
                         "label": records[owner]["op"], "size": sum(sizes),
                         "record": records[owner], "group": None}
    for cid, body_path in owned.items():
        body = bodies[body_path]
        clusters[cid] = {"owner": ids.get(body_path[:-1]),
                         "parents": chain(structure["parents"][cid]),
                         "label": body["label"], "size": body["size"],
                         "record": records[body_path[:-1]],
                         # a body inside its node's group opens with the group
                         "group": next((g for g, o in groups.items()
                                        if o == body_path[:-1]), None)}
    for i, around in structure["chains"].items():
        path = structure["nodes"].get(i)
        record = dict(records[path]) if path is not None else {"op": None}
        record["clusters"] = chain(around)
        record["bodies"] = [c for c, bp in owned.items()
                            if path is not None and bp[:-1] == path] + \
            [g for g, o in groups.items() if path is not None and o == path]
        nodes[i] = record
    return {"nodes": nodes, "clusters": clusters}


def _record(graph, n, names):
    """The hover data of one node: plain strings and lists only (it becomes JSON)."""
    data = graph.nx.nodes[n]
    kind = data["kind"]
    specs = graph.specs_of(n)
    record = {"kind": kind, "specs": [printing.format_spec(s) for s in specs],
              "shape": [list(s.shape) for s in specs],
              "dtype": [str(getattr(s.dtype, "name", s.dtype)) for s in specs],
              "source": None, "code": None, "line": None}
    if kind == "op":
        record["op"] = printing.op_name(data["op"])
        record["name"] = " ".join(names[(n, i)] for i in range(len(data["specs"])))
        record["line"] = printing.node_line(graph, n, names)
        record["source"] = data.get("source")
        record["code"] = source_text(data.get("source"))
    elif kind == "output":
        (_, u, out), = graph.args_of(n)
        record["op"] = f"output {data['index']}"
        record["name"] = names[(u, out)]
    else:
        record["op"] = f"{kind} {data['index']}" if kind == "input" else kind
        record["name"] = names[(n, 0)]
    return record


def source_text(source):
    """The text of the user's line that `source` ("file:line") names, when the file can
    be found (tracing records a base name; linecache also looks along sys.path)."""
    if not source or ":" not in source:
        return None
    filename, _, line = source.rpartition(":")
    if not line.isdigit():
        return None
    text = linecache.getline(filename, int(line))
    if not text and not os.path.isabs(filename):
        text = linecache.getline(os.path.join(os.getcwd(), filename), int(line))
    return text.strip() or None

"""What the viewer knows about each node: hover data and the nesting of bodies.

Owns: `describe(graph)`, the JSON-ready record of every node (op, shapes, dtypes, SSA
line, the user's source line) and of every body cluster, keyed by the node ids that
`printing.to_dot` gives (`n<id>`; a body's nodes `n<id>_<k>_<inner id>` inside
`cluster_n<id>_<k>_`). Does not: draw anything or read the picture's labels, so the
pictures may label their boxes however they like.
"""
import linecache
import os

from .. import printing


def describe(graph, prefix="n"):
    """{"nodes": {dot id: record}, "clusters": {cluster id: record}} for `graph` and,
    recursively, the bodies of its loops, branches and fused kernels."""
    found = {"nodes": {}, "clusters": {}}
    _walk(graph, prefix, (), found)
    return found


def _walk(graph, prefix, chain, found):
    """Add `graph`'s nodes (ids `prefix<node>`) nested in the clusters of `chain`."""
    names = printing.name_values(graph)
    for n in graph.topo_order():
        data = graph.nx.nodes[n]
        dot_id = f"{prefix}{n}"
        record = _record(graph, n, names)
        record["clusters"] = list(chain)
        record["bodies"] = []
        found["nodes"][dot_id] = record
        if data["kind"] != "op":
            continue
        for k, (body_name, body) in enumerate(printing.node_bodies(data)):
            inner = f"{prefix}{n}_{k}_"
            cluster = f"cluster_{inner}"
            record["bodies"].append(cluster)
            found["clusters"][cluster] = {
                "owner": dot_id, "parents": list(chain),
                "label": f"{record['op']} {body_name}",
                "size": len(body.op_nodes)}
            _walk(body, inner, chain + (cluster,), found)


def _record(graph, n, names):
    """The hover data of one node: plain strings and lists only (it becomes JSON)."""
    data = graph.nx.nodes[n]
    kind = data["kind"]
    specs = [printing.format_spec(s) for s in graph.specs_of(n)]
    record = {"kind": kind, "specs": specs,
              "shape": [list(s.shape) for s in graph.specs_of(n)],
              "dtype": [str(getattr(s.dtype, "name", s.dtype)) for s in graph.specs_of(n)],
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

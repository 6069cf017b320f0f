"""Names of values and ops, shared by the listing (printing.py) and the pictures
(pictures.py), so a box in a picture and a line in the listing say the same name.

Owns: `name_values` (jaxpr-style variable names a, b, ..., z, ba, ...), `format_spec`
(`f32[3,4]`), `op_name`, `format_param`, `node_line` (one op node as a listing line) and
`node_bodies` (the sub-graphs an op node holds). Does not: print whole graphs or draw.
"""
import itertools
import re
import string

_SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16",
          "float32": "f32", "float64": "f64"}


def format_spec(spec):
    return f"{_SHORT.get(spec.dtype.name, spec.dtype.name)}[{','.join(map(str, spec.shape))}]"


def _var_names():
    """a, b, ..., z, ba, bb, ... (as jaxprs name variables)."""
    for size in itertools.count(1):
        for letters in itertools.product(string.ascii_lowercase, repeat=size):
            if size > 1 and letters[0] == "a":
                continue
            yield "".join(letters)


def name_values(graph):
    """{(node, out): variable name}: inputs first, then constants, then op outputs."""
    names, gen = {}, _var_names()
    order = graph.topo_order()
    for n in graph.nodes_of("input"):
        names[(n, 0)] = next(gen)
    for n in order:
        if graph.nx.nodes[n]["kind"] == "const":
            names[(n, 0)] = next(gen)
    for n in order:
        if graph.nx.nodes[n]["kind"] == "op":
            for i in range(len(graph.nx.nodes[n]["specs"])):
                names[(n, i)] = next(gen)
    return names


def op_name(op):
    """The op's public name; built-ins behind another public call (e.g. Max behind
    ak.max) print their class name in snake_case; user Functions their class name."""
    name = getattr(op, "public_name", None)
    if name:
        return name
    if getattr(op, "_arrays_in", False):
        return re.sub(r"(?<!^)(?=[A-Z])", "_", op.__name__).lower()
    return op.__name__


def format_param(value):
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"<array {value.dtype}{list(value.shape)}>"
    return repr(value)


def is_graph(value):
    return hasattr(value, "nx") and hasattr(value, "topo_order")


def shown_params(data):
    """The params worth printing in brackets, sorted by name: a sub-graph param (a fused
    kernel's `graph`) is left out, since its body is listed or drawn under the node."""
    return [(k, data["params"][k]) for k in sorted(data["params"])
            if not is_graph(data["params"][k])]


def node_line(graph, n, names=None):
    """One op node as `c:f32[3,4] = mul[param=...] a b`."""
    names = names or name_values(graph)
    data = graph.nx.nodes[n]
    outs = " ".join(f"{names[(n, i)]}:{format_spec(s)}" for i, s in enumerate(data["specs"]))
    params = shown_params(data)
    bracket = ("[" + " ".join(f"{k}={format_param(v)}" for k, v in params) + "]") \
        if params else ""
    args = " ".join(names[(u, out)] for _, u, out in graph.args_of(n))
    return f"{outs} = {op_name(data['op'])}{bracket} {args}".rstrip()


def node_bodies(data, kernels=True):
    """[(name, Graph)] of the sub-graphs an op node holds in its params: a loop's or a
    branch's bodies (a params value with `bodies()`) and (with `kernels`) a Graph
    param, as a FusedKernel's `graph`."""
    found = []
    for key in sorted(data.get("params", {})):
        value = data["params"][key]
        if hasattr(value, "bodies"):
            found.extend(value.bodies().items())
        elif kernels and is_graph(value):
            found.append((key, value))
    return found

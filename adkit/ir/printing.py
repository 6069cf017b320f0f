"""Printing and pictures of a Graph.

Owns: the SSA listing (`str(graph)`, in the spirit of a jaxpr), Graphviz text
(`to_dot`), rendering with Graphviz's `dot` (`render`, `_repr_svg_`).
Does not: change graphs. The listing is part of the API (a golden test pins it):

    { lambda ; a:f32[3,4] b:f32[4]. let
        c:f32[3,4] = mul a b
        d:f32[] = sum[dim=None keepdim=False] c
      in (d) }
"""
import itertools
import os
import re
import shutil
import string
import subprocess

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
    for kind in ("input", "const"):
        for n in graph.nodes_of(kind) if kind == "input" else \
                [m for m in order if graph.nx.nodes[m]["kind"] == kind]:
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


def _format_param(value):
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"<array {value.dtype}{list(value.shape)}>"
    return repr(value)


def node_line(graph, n, names=None):
    """One op node as `c:f32[3,4] = mul[param=...] a b`."""
    names = names or name_values(graph)
    data = graph.nx.nodes[n]
    outs = " ".join(f"{names[(n, i)]}:{format_spec(s)}" for i, s in enumerate(data["specs"]))
    params = data["params"]
    bracket = ("[" + " ".join(f"{k}={_format_param(params[k])}" for k in sorted(params)) +
               "]") if params else ""
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
        elif kernels and hasattr(value, "nx") and hasattr(value, "topo_order"):
            found.append((key, value))
    return found


def to_text(graph, indent=""):
    """The SSA listing; the bodies of loops, branches and fused kernels are listed,
    indented, under their node."""
    names = name_values(graph)
    order = graph.topo_order()
    consts = [n for n in order if graph.nx.nodes[n]["kind"] == "const"]
    const_part = " ".join(f"{names[(n, 0)]}:{format_spec(graph.specs_of(n)[0])}"
                          for n in consts)
    input_part = " ".join(f"{names[(n, 0)]}:{format_spec(graph.specs_of(n)[0])}"
                          for n in graph.inputs)
    lines = ["{ lambda " + (const_part + " " if const_part else "") + "; " + input_part +
             ". let"]
    for n in order:
        data = graph.nx.nodes[n]
        if data["kind"] != "op":
            continue
        lines.append(indent + "    " + node_line(graph, n, names))
        for name, body in node_bodies(data):
            inner = indent + "      " + " " * (len(name) + 3)
            lines.append(indent + f"      {name} = " + to_text(body, inner))
    results = []
    for n in graph.outputs:
        (_, u, out), = graph.args_of(n)
        results.append(names[(u, out)])
    lines.append(indent + "  in (" + ", ".join(results) + ") }")
    return "\n".join(lines)


# ---------------------------------------------------------------- Graphviz
_STYLE = {
    "input": 'shape=ellipse, style=filled, fillcolor="#d7efd7"',
    "const": 'shape=note, style=filled, fillcolor="#eeeeee"',
    "op": 'shape=box, style="rounded,filled", fillcolor="#dde8f8"',
    "output": 'shape=doubleoctagon, style=filled, fillcolor="#f8e0c8"',
}


def _dot_label(graph, n, names):
    data = graph.nx.nodes[n]
    kind = data["kind"]
    if kind == "output":
        return f"output {data['index']}"
    specs = " ".join(format_spec(s) for s in graph.specs_of(n))
    if kind == "input":
        return f"input {data['index']}: {names[(n, 0)]}\\n{specs}"
    if kind == "const":
        return f"const {names[(n, 0)]}\\n{specs}"
    params = " ".join(f"{k}={_format_param(v)}" for k, v in sorted(data["params"].items())
                      if v is not None and len(_format_param(v)) <= 16)
    return f"{op_name(data['op'])}" + (f" [{params}]" if params else "") + f"\\n{specs}"


def to_dot(graph, name="adkit"):
    """Graphviz text: op, shape and dtype on each node; inputs, constants and outputs
    drawn differently; each edge labelled with its argument position; the bodies of
    loops, branches and fused kernels drawn as clusters beside their node."""
    lines = [f"digraph {name} {{", '  rankdir=TB;', '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    _dot_body(graph, "n", lines, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_body(graph, prefix, lines, pad):
    """The nodes and edges of `graph` with ids `prefix<node>`; each sub-graph a cluster
    whose outputs point (dashed) at the node that holds it."""
    names = name_values(graph)
    for n in graph.topo_order():
        label = _dot_label(graph, n, names).replace('"', '\\"')
        data = graph.nx.nodes[n]
        lines.append(f'{pad}{prefix}{n} [label="{label}", {_STYLE[data["kind"]]}];')
        for k, (body_name, body) in enumerate(node_bodies(data) if data["kind"] == "op"
                                              else ()):
            inner = f"{prefix}{n}_{k}_"
            lines.append(f'{pad}subgraph cluster_{inner} {{')
            lines.append(f'{pad}  label="{op_name(data["op"])} {body_name}"; '
                         'style="dashed,rounded"; color="#7a7a7a";')
            _dot_body(body, inner, lines, pad + "  ")
            lines.append(f"{pad}}}")
            for out in body.outputs:
                lines.append(f'{pad}{inner}{out} -> {prefix}{n} [style=dashed, '
                             'arrowhead=none, color="#9a9a9a"];')
    for u, v, data in sorted(graph.nx.edges(data=True), key=lambda e: (e[1], e[2]["pos"])):
        multi = len(graph.specs_of(u)) > 1
        label = f"{data['out']}→{data['pos']}" if multi else str(data["pos"])
        lines.append(f'{pad}{prefix}{u} -> {prefix}{v} [label="{label}"];')


def _dot_program():
    path = shutil.which("dot")
    if path is None:
        raise RuntimeError("rendering needs Graphviz's `dot` program, which is not on PATH: "
                           "install Graphviz (Debian/Ubuntu: apt-get install graphviz; "
                           "macOS: brew install graphviz), or use graph.to_dot() for the text")
    return path


def render(graph, path):
    """Write the picture to `path`; the extension picks the format (.svg, .png, .pdf,
    or .dot for the Graphviz text itself)."""
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise FileNotFoundError(f"render: no directory {folder!r} to write {path!r} in")
    text = to_dot(graph)
    if fmt == "dot":
        with open(path, "w") as f:
            f.write(text)
        return path
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"render: unknown picture format {fmt!r}; use .svg, .png, .pdf "
                         "or .dot")
    done = subprocess.run([_dot_program(), f"-T{fmt}", "-o", path], input=text.encode(),
                          capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"render: Graphviz's dot could not write {path!r}: "
                           f"{done.stderr.decode(errors='replace').strip()}")
    return path


def to_svg(graph):
    """SVG text of the picture, or None when Graphviz is missing (so notebooks fall back
    to the text form instead of printing a traceback)."""
    if shutil.which("dot") is None:
        return None
    result = subprocess.run([_dot_program(), "-Tsvg"], input=to_dot(graph).encode(),
                            check=True, capture_output=True)
    return result.stdout.decode()

"""The C header of an exported library: every function, its buffers' shapes and dtypes,
and what the library was built with.

Owns: `header(library, programs, notes)`, the text of `path.h`. Does not: decide
anything it reports (export.py, export_entry.py, export_blas.py, export_link.py).
"""
import re
import textwrap

import numpy as np

from ..ir import printing
from .export_entry import C_TYPES


def macro_prefix(library):
    return re.sub(r"\W", "_", library).upper()


def guard(library):
    return macro_prefix(library) + "_H"


def header(library, programs, notes, cpu):
    """The header text: `notes` (lines: how it was built) at the top, the CPU it was
    built for (LLVM's name) as a macro, then for each Program its function, documented,
    and the library's thread control."""
    lines = [f"/* {library}.h: C interface of {library}.so, written by adkit's "
             "ak.jit(f).export.", " *"]
    for note in notes + _conventions():
        lines += [f" * {line}" for line in textwrap.wrap(note, 84)] or [" *"]
    lines += [" */", f"#ifndef {guard(library)}", f"#define {guard(library)}", "",
              "#include <stddef.h>", "#include <stdint.h>", "", "#ifdef __cplusplus",
              'extern "C" {', "#endif", ""]
    lines += _comment("The CPU the library was built for (LLVM's name; see the top).")
    lines += [f'#define {macro_prefix(library)}_TARGET_CPU "{cpu}"', ""]
    for prog in programs:
        lines += _function(prog) + [""]
    lines += _comment("Threads the library's parallel loops and products run on, the "
                      "caller's included (1, the default, runs everything on the calling "
                      "thread). Call it before other threads use the library; returns the "
                      "number now in use.")
    lines += [f"int64_t {library}_set_threads(int64_t n);", "", "#ifdef __cplusplus", "}",
              "#endif", f"#endif /* {guard(library)} */", ""]
    return "\n".join(lines)


def _conventions():
    return ["", "Arrays are C-contiguous (row-major) buffers of the shapes below, fixed when "
            "the function was exported; bool elements are one byte, 0 or 1. Outputs must "
            "not overlap inputs or each other. Calls on different threads need separate "
            "`work` buffers (or NULL)."]


def _function(prog):
    graph = prog.graph
    lines = [f"/* {prog.name}: {prog.description}", " *",
             f" * Element counts: {prog.name.upper()}_X<k>_SIZE, {prog.name.upper()}_Y<k>_SIZE."]
    for k, (spec, path) in enumerate(zip(prog.inputs, _input_paths(graph))):
        lines.append(f" *   x{k}: {_c_type(spec)}[{_count(spec)}]  "
                     f"{printing.format_spec(spec)}{path}")
    for k, (spec, path) in enumerate(zip(prog.outputs, _output_paths(graph))):
        lines.append(f" *   y{k}: {_c_type(spec)}[{_count(spec)}]  "
                     f"{printing.format_spec(spec)}{path}")
    lines += [" *   work: NULL, or scratch memory of "
              f"{prog.name}_work_bytes() bytes (any alignment; a",
              " *         buffer kept between calls saves an allocation per call)",
              " * Returns 0; -1 when work is NULL and memory could not be allocated"
              + (";" if prog.checks else ".")]
    if prog.checks:
        lines.append(" * k >= 1 when bounds check k found an index out of range (outputs "
                     "incomplete):")
        for code, check in enumerate(prog.checks, 1):
            where = f", traced at {check.source}" if check.source else ""
            lines.append(f" *   {code}: {check.name} (node {check.line}{where})")
    lines.append(" */")
    args = [f"const {_c_type(s)} *x{k}" for k, s in enumerate(prog.inputs)]
    args += [f"{_c_type(s)} *y{k}" for k, s in enumerate(prog.outputs)]
    lines.append(f"int64_t {prog.name}({', '.join(args + ['void *work'])});")
    lines += [f"#define {prog.name.upper()}_X{k}_SIZE {_count(s)}"
              for k, s in enumerate(prog.inputs)]
    lines += [f"#define {prog.name.upper()}_Y{k}_SIZE {_count(s)}"
              for k, s in enumerate(prog.outputs)]
    lines += _comment(f"Bytes of scratch memory {prog.name} uses.") + [
              f"int64_t {prog.name}_work_bytes(void);"]
    return lines


def _comment(text, width=84):
    """`text` as a C comment, wrapped."""
    lines = textwrap.wrap(text, width)
    lines = ["/* " + lines[0]] + [" * " + line for line in lines[1:]]
    lines[-1] += " */"
    return lines


def _c_type(spec):
    return C_TYPES[np.dtype(spec.dtype.np)]


def _count(spec):
    return int(np.prod(spec.shape, dtype=np.int64))


def leaf_paths(spec, prefix):
    """Where each leaf of pytree `spec` sits, as Python would index it (prefix[0]['w'])."""
    if spec is None or spec.kind == "leaf":
        return [prefix]
    paths = []
    for k, child in enumerate(spec.children):
        if spec.kind == "dict":
            step = f"[{spec.meta[k]!r}]"
        elif spec.kind == "namedtuple":
            step = f".{spec.meta._fields[k]}"
        else:
            step = f"[{k}]"
        paths += leaf_paths(child, prefix + step)
    return paths


def _input_paths(graph):
    """The tensor inputs' places in the call's arguments (static leaves skipped)."""
    if graph.in_tree is None:
        return [""] * len(graph.inputs)
    paths = leaf_paths(graph.in_tree, "args")
    return ["  " + p for i, p in enumerate(paths) if i not in graph.static_args]


def _output_paths(graph):
    if graph.out_tree is None:
        return [""] * len(graph.outputs)
    return ["  " + p for p in leaf_paths(graph.out_tree, "result")]

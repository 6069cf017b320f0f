"""Quick code's module split in two: the functions compiled without optimization, and
the rest (runtime.quick_object compiles the first at LLVM's code generation level 0,
on a thread, beside the second at level 1).

Owns: `split_cold(text, cold)`, `defined_functions(text)`. Does not: decide what is cold (compiled.quick_cold) or
compile (runtime.py).

Why: LLVM's code generation at opt level 1 costs ~0.5-1 ms per function before its
first instruction (~150 passes set up per function, also for an `optnone` one), at
level 0 ~0.2 ms. A GMM gradient's plan has ~40 functions, of which ~30 are entries,
trampolines and small kernels: at level 1 they took half of its module's compile.
The two halves are two modules of one engine: each declares what it calls in the
other (symbols resolve across the objects linked into an engine, as kernel_modules'
do). Functions and globals that are local to the module (internal or private
linkage) are copied into both; a module defining a global of external linkage is not
split (two modules defining it would not link).
"""
import re

# a function definition's first line: define [linkage...] <type> @"name"(...
_DEFINE = re.compile(r'define\s+(.*?)@"?([^"(\s]+)"?\(')
_LOCAL_LINKAGES = ("internal ", "private ")
# a global variable definition: @name = [linkage] [...] global|constant
_GLOBAL = re.compile(r'@"?[^"=\s]+"?\s*=\s*(.*)')


def _items(text):
    """The module's top-level items, in order: (kind, name, text) with kind "define"
    (a function definition, to its closing brace), "global" (a global variable) or
    "other" (header lines, declarations, attributes, metadata, comments)."""
    items, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define"):
            end = lines.index("}", i)
            items.append(("define", _DEFINE.match(line).group(2), lines[i:end + 1]))
            i = end + 1
            continue
        kind = "global" if line.startswith("@") else "other"
        items.append((kind, None, [line]))
        i += 1
    return items


def _is_local(first_line):
    """Whether a function definition or global variable is local to its module."""
    match = _DEFINE.match(first_line) or _GLOBAL.match(first_line)
    return match is not None and match.group(1).startswith(_LOCAL_LINKAGES)


def _declaration(lines):
    """A definition's declaration: its first line (the signature and its function
    attributes; llvmlite writes the body's brace on a line of its own)."""
    return ["declare" + lines[0][len("define"):].rstrip(" {")]


def defined_functions(text):
    """The names of the functions the module's text defines."""
    return [name for kind, name, _ in _items(text) if kind == "define"]


def split_cold(text, cold):
    """(cold module's text, the other's) for the functions `cold(name)` says, or None
    when one of the two would define no function or the module cannot be split."""
    items = _items(text)
    defines = [(name, lines) for kind, name, lines in items if kind == "define"]
    if any(kind == "global" and not _is_local(lines[0]) for kind, _, lines in items):
        return None
    is_cold = {name: not _is_local(lines[0]) and bool(cold(name)) for name, lines in defines}
    n_cold = sum(is_cold.values())
    if n_cold == 0 or n_cold == sum(not _is_local(lines[0]) for _, lines in defines):
        return None

    def module(keep_cold):
        out = []
        for kind, name, lines in items:
            if kind != "define" or _is_local(lines[0]) or is_cold[name] == keep_cold:
                out.extend(lines)
            else:
                out.extend(_declaration(lines))
        return "\n".join(out)
    return module(True), module(False)


__all__ = ["defined_functions", "split_cold"]

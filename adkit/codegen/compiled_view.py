"""Compiled programs and jitted functions as text and in notebooks.

Owns: `compiled_repr`/`compiled_html` (one Compiled: its signature, its plan's steps, its
fused kernels, the optimized graph, its LLVM IR and assembly behind disclosure triangles)
and `jitted_repr`/`jitted_html` (an `ak.jit` function: every signature compiled so far).
Does not: compile or run anything; it only reads what Compiled keeps.
"""
from html import escape

from ..ir import printing, viewer
from . import program, steps

# LLVM IR and assembly of a large program run to megabytes; a notebook shows this much
# of each and says where the rest is
MAX_CHARS = 200_000


def signature(compiled):
    """`(f32[3,4], f32[4,5]) -> f32[]`: the input and output types of the program."""
    graph = compiled.graph
    ins = ", ".join(printing.format_spec(s) for s in graph.input_specs())
    outs = [printing.format_spec(s) for s in graph.output_specs()]
    return f"({ins}) -> " + (outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")")


def _call_text(call):
    if isinstance(call, program.KernelCall):
        threads = f" on {call.workers} threads" if call.workers > 1 else ""
        return call.kernel.name + threads
    return type(call).__name__.removesuffix("Call").lower() or type(call).__name__


def step_lines(compiled):
    """One line per step of the plan, in the order they run."""
    lines = []
    for step in compiled.steps:
        if isinstance(step, steps.SegmentStep):
            calls = ", ".join(_call_text(c) for c in step.calls)
            lines.append(f"native {step.name}: {calls}")
        elif isinstance(step, steps.NumpyStep):
            lines.append("numpy: " + printing.node_line(step.graph, step.n))
        elif not isinstance(step, steps.BufferValues):  # bookkeeping, nothing to see
            lines.append(type(step).__name__)
    return lines


def _counts(compiled):
    native = sum(isinstance(s, steps.SegmentStep) for s in compiled.steps)
    numpy = sum(isinstance(s, steps.NumpyStep) for s in compiled.steps)
    return (f"{native} native segment{'s' * (native != 1)}, "
            f"{len(compiled.kernels)} kernel{'s' * (len(compiled.kernels) != 1)}, "
            f"{numpy} numpy step{'s' * (numpy != 1)}")


def compiled_repr(compiled):
    return f"<adkit Compiled {signature(compiled)}: {_counts(compiled)}>"


def _kernel_table(compiled):
    if not compiled.kernels:
        return "<p>No fused kernels.</p>"
    rows = "".join(
        f"<tr><td><code>{escape(k.name)}</code></td><td>{escape(str(list(k.shape)))}</td>"
        f"<td>{k.size}</td><td>{escape(k.dtype.name)}</td><td>{len(k.strides)}</td>"
        f"<td>{len(k.outputs)}</td></tr>" for k in compiled.kernels)
    return ('<table class="adkit-kernels"><thead><tr><th>kernel</th><th>loop shape</th>'
            '<th>elements</th><th>dtype</th><th>inputs</th><th>outputs</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _text_block(title, text, where):
    """`text` in a <pre> behind a disclosure triangle, cut at MAX_CHARS."""
    if not text:
        return (f"<details><summary>{escape(title)}</summary><p>None: no step of this "
                "program runs native code.</p></details>")
    n_lines = text.count("\n") + 1
    shown = text[:MAX_CHARS]
    cut = (f"\n… {len(text) - MAX_CHARS} more characters: see {where}"
           if len(text) > MAX_CHARS else "")
    return (f"<details><summary>{escape(title)} ({n_lines} lines)</summary>"
            f"<pre>{escape(shown + cut)}</pre></details>")


def compiled_html(compiled):
    """The notebook view of a Compiled."""
    plan = "".join(f"<li><code>{escape(s)}</code></li>" for s in step_lines(compiled))
    return ('<div class="adkit-compiled">'
            f"<p><b>Compiled</b> <code>{escape(signature(compiled))}</code>: "
            f"{escape(_counts(compiled))}</p>"
            f"<details open><summary>plan ({len(compiled.steps)} steps)</summary>"
            f"<ol>{plan}</ol></details>"
            f"<details><summary>kernels ({len(compiled.kernels)})</summary>"
            f"{_kernel_table(compiled)}</details>"
            "<details><summary>optimized graph</summary>"
            f"{viewer.notebook_html(compiled.graph)}</details>"
            f"{_text_block('LLVM IR', compiled.llvm_ir, '.llvm_ir')}"
            f"{_text_block('assembly', compiled.asm, '.asm')}</div>")


def _name(jitted):
    fn = jitted.fn
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def jitted_repr(jitted):
    n = len(jitted.cache)
    return f"<adkit.jit {_name(jitted)}: {n} signature{'s' * (n != 1)} compiled>"


def jitted_html(jitted):
    """The notebook view of an ak.jit function: each compiled signature, closed."""
    parts = [f"<p><b>ak.jit</b> <code>{escape(_name(jitted))}</code>: "
             f"{len(jitted.cache)} signature{'s' * (len(jitted.cache) != 1)} compiled"
             + ("" if jitted.cache else " (call it, or .compile(*args), to compile one)")
             + "</p>"]
    for compiled in jitted.cache.values():
        parts.append(f"<details><summary><code>{escape(signature(compiled))}</code>"
                     f"</summary>{compiled_html(compiled)}</details>")
    return '<div class="adkit-jitted">' + "".join(parts) + "</div>"

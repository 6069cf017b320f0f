"""A Tensor in a notebook: a small HTML view (Tensor._repr_html_).

Owns: `tensor_html(t, values)`: a header row (shape, dtype, requires_grad or grad_fn,
whether .grad is set) above the values, abbreviated exactly as repr abbreviates them
(tensor.py formats them and passes the text in, so both views agree).
Does not: format numbers itself or import tensor.py (it sits beside it, below it in use).
"""
from html import escape

_STYLE = ("font-family:ui-monospace,Menlo,Consolas,monospace;margin:0;"
          "padding:2px 0;white-space:pre")


def _autograd_cell(t):
    if t._grad_fn is not None:
        return f"grad_fn=&lt;{escape(t._grad_fn.name())}&gt;"
    if t._requires_grad:
        return "requires_grad=True (leaf)"
    return "no grad"


def tensor_html(t, values):
    """The HTML view of `t`; `values` is the text of its values (None for a tensor that
    stands for values it does not hold, such as a tracer: its repr is shown instead)."""
    shape = "(" + ", ".join(str(d) for d in t.shape) + ("," if len(t.shape) == 1 else "") + ")"
    cells = [("shape", escape(shape)), ("dtype", escape(t.dtype.name)),
             ("autograd", _autograd_cell(t))]
    if t._grad is not None:
        cells.append(("grad", "set"))
    head = "".join(f'<th style="text-align:left;padding:0 4px">{k}</th>'
                   f'<td style="text-align:left;padding:0 10px 0 0">{v}</td>'
                   for k, v in cells)
    body = values if values is not None else repr(t)
    return (f'<div class="adkit-tensor"><table style="border-collapse:collapse;'
            f'font-size:12px"><tr><th style="text-align:left;padding:0 4px 0 0">'
            f"{escape(type(t).__name__)}</th>{head}</tr></table>"
            f'<pre style="{_STYLE}">{escape(body)}</pre></div>')

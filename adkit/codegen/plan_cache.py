"""The disk cache of plans: what a jitted signature compiled to, keyed by its traced
graph, so another process's first call skips the passes, planning, LLVM IR and LLVM.

Owns: `key(graph, passes)` (None when the signature is not cached), `load(key)` (the
Compiled, or None) and `store(key, compiled)`. Does not: hold files (disk_cache.py,
which writes atomically and checks a sha256 before anything reads an entry), encode
values (plan_codec.py) or plan (compiled.py).

Key: a sha256 of the traced graph's data (ops by class name, their parameters, shapes,
dtypes, constants' bytes, edges, the source lines ops were traced at; argument and
result structure: plan_digest.digest) and of everything the plan and its code depend
on: this cache's format, adkit's code (each module's size and modification time: an
edited adkit never reads an older entry), numpy's and Python's versions, LLVM's and
the CPU's (runtime.version_key), the threads plans split work over, the ADKIT_*
settings, jit's passes. Only jit's own pipeline is cached (a user's passes are
functions, known to this process only), and no graph that reads a tensor requiring
grad (its calls read the parameter live). What a key needs once per process (the
code fingerprint, LLVM's host facts) is made by the first key: a thread making it from
import on (as for a while) cost a small graph's warm first call ~2 ms, trace slowed
by the thread's GIL hand-offs (case c: 8.8-12.4, median 10.5, without it; 9.1-15.7,
median 12.6, with it; 8 turns).
Value: one file: a JSON header (format, counts, what the code calls), the optimized
Compiled's plan_state() as plan_codec writes it (the plan, then its graphs' contents,
which are read when first used: a run needs the plan only), the arrays' bytes, the
object code and the LLVM IR (read when asked for). A hit decodes the plan, then links
the object code, in the caller's thread: a link thread beside the decoding took longer
than the two one after the other, its ~30 calls into LLVM each waiting for the GIL
while the decoder held it (GMM large, warm first call: 22.5 -> 19.1 ms, median of 8
turns; its OpenBLAS load 3.5 ms on the thread, 0.3 in turn). An entry that cannot be
read, decoded or linked is a miss (compiled again, and then overwritten); graphs'
contents are checked when read (a forged one raises then, never runs code).
"""
import functools
import hashlib
import json
import os
import struct
import sys

import numpy as np

from .. import _config
from . import disk_cache, plan_codec, plan_digest, pool, runtime
from .compiled import OPTIMIZE, Compiled

FORMAT = "adkit-plan-5"
_MAGIC = b"adkit-plan-5\n"
_SUFFIX = ".plan"
_ADKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# settings that say where the cache is or what is dumped, not what is compiled
_NOT_CODEGEN = ("ADKIT_CACHE_DIR", "ADKIT_DISABLE_CACHE", "ADKIT_DUMP")


def directory_fingerprint(root):
    """A hash of each Python module's path, size and modification time under root."""
    parts, folders = [], [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    parts.append(f"{entry.path[len(root):]}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def code_fingerprint():
    """adkit's code as this process found it (an edit, a reinstall or another version
    changes it)."""
    return directory_fingerprint(_ADKIT_DIR)


@functools.lru_cache(maxsize=None)
def _host():
    """What code depends on that a process cannot change: numpy's, Python's and
    LLVM's versions, the CPU (runtime.version_key)."""
    return np.__version__, sys.version, runtime.version_key()


def _settings():
    """What plans and code depend on besides the graph and adkit's code."""
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith("ADKIT_") and not k.startswith(_NOT_CODEGEN))
    passes = [f"{p.__module__}.{p.__qualname__}" for p in OPTIMIZE.passes]
    return repr((FORMAT, code_fingerprint(), _host(), runtime.mvec_available(),
                 pool.planned_threads(), runtime.target_vector_bytes(), env, passes))


def key(graph, passes):
    """The cache key of a traced graph compiled with `passes` (None: jit's pipeline),
    or None when it is not cached (caching off, a user's passes, a parameter read, or
    something in the graph that is not data: a user's op class)."""
    if passes is not None or disk_cache.cache_dir() is None or _config.dump_ir() or \
            _config.dump_llvm():  # (a hit would dump nothing)
        return None
    if any(data.get("requires_grad") for _, data in graph.nx.nodes(data=True)):
        return None
    try:
        traced = plan_digest.digest(graph)
    except plan_codec.NotData:
        return None
    return hashlib.sha256((_settings() + "\n" + traced).encode()).hexdigest()


def load(k):
    """The Compiled stored under key k (optimized code), or None: none stored, or an
    entry that cannot be read, decoded or linked (a damaged or foreign file)."""
    if k is None:
        return None
    data = disk_cache.load(k, _SUFFIX, _MAGIC)
    compiled = restored(data) if data is not None else None
    if compiled is not None:
        compiled.plan_key = k
    return compiled


def restored(data):
    """The Compiled an entry's bytes (`entry`'s, joined) hold: its plan decoded, its
    object code linked; None when they cannot be read, decoded or linked."""
    try:
        head, text, graphs, blobs, objects, texts = _split(data)
        if head.get("format") != FORMAT:
            return None
        state = plan_codec.decode(text, blobs, graphs)
        return Compiled.restored(
            state, (lambda: _linked(head, objects, texts)) if objects else lambda: None)
    except Exception:  # noqa: BLE001 -- any damage is a miss: the signature compiles
        return None


def _linked(head, objects, texts):
    """The stored object code's NativeModule, with what it calls loaded first."""
    runtime.mvec_available()
    if head["blas"]:
        runtime.blas_library()
    if head["pool"]:
        pool.ensure()  # registers the pool's entry point before the code is linked
    return runtime.from_object_code(
        lambda: [bytes(t).decode() for t in texts], [bytes(o) for o in objects])


def _split(data):
    """(header, plan text, graphs text, [blobs], [object code], [IR text]) of an
    entry's payload: chunk lengths, then the chunks: a JSON header, the plan's JSON,
    its graphs' JSON, the arrays' bytes, each module's object code and IR."""
    view = memoryview(data)
    (count,) = struct.unpack_from("<Q", view, 0)
    if not 3 <= count < 1 << 20:
        raise ValueError("not a plan cache entry")
    lengths = struct.unpack_from(f"<{count}Q", view, 8)
    chunks, at = [], 8 * (count + 1)
    for n in lengths:
        chunks.append(view[at:at + n])
        at += n
    if at != len(view):
        raise ValueError("a plan cache entry of the wrong length")
    head = json.loads(bytes(chunks[0]))
    blobs, native = head["blobs"], head["native"]  # (TypeError if not a dict)
    if not (type(blobs) is int and type(native) is int and 0 <= blobs and
            0 <= native and 3 + blobs + 2 * native == count):
        raise ValueError("a plan cache entry of the wrong shape")
    rest = chunks[3:]
    return (head, bytes(chunks[1]).decode(), bytes(chunks[2]).decode(), rest[:blobs],
            rest[blobs:blobs + native], rest[blobs + native:])


def store(k, compiled):
    """Store an optimized Compiled under key k (k None: not cached), unless it is there
    already (it was stored or loaded under k). A plan holding something that is not
    data (plan_codec.NotData) is not stored."""
    if k is not None and compiled.plan_key != k:
        write(k, compiled)


def write(k, compiled):
    """Write the entry of an optimized Compiled under key k (atomically)."""
    chunks = entry(compiled)
    if chunks is not None:
        disk_cache.store(k, chunks, _SUFFIX, _MAGIC)
        compiled.plan_key = k


def entry(compiled):
    """The entry of an optimized Compiled, as byte strings to write one after another
    (chunk lengths, then the chunks); None for quick code and for a plan holding
    something that is not data."""
    module = compiled.module
    if module is not None and (not module.optimized or
                               getattr(module, "object_code", None) is None):
        return None
    texts = module.texts if module is not None else []
    try:
        text, graphs, blobs = plan_codec.encode(compiled.plan_state())
    except plan_codec.NotData:
        return None
    head = {"format": FORMAT, "native": len(texts), "blobs": len(blobs),
            "blas": any("cblas_" in t for t in texts),
            "pool": any(pool.RUN_NAME in t for t in texts)}
    objects = module.object_code if module is not None else []
    chunks = [json.dumps(head).encode(), text.encode(), graphs.encode(), *blobs,
              *map(bytes, objects), *(t.encode() for t in texts)]
    header = struct.pack(f"<{len(chunks) + 1}Q", len(chunks), *map(len, chunks))
    return [header, *chunks]


__all__ = ["code_fingerprint", "directory_fingerprint", "entry", "key", "load",
           "restored", "store", "write"]

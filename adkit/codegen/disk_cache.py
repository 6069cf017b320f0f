"""The on-disk cache of compiled object code.

Owns: where the cache lives (ADKIT_CACHE_DIR, else $XDG_CACHE_HOME/adkit, else
~/.cache/adkit; ADKIT_DISABLE_CACHE=1 turns it off), keys (a hash of the LLVM IR and of
what the code depends on: llvmlite and LLVM versions, CPU name and features), and atomic
writes (a temporary file renamed into place). Stores object code only, behind a magic
line and its sha256 (checked before LLVM sees it): no pickle, so a cache file can never
run Python code, and a damaged one is compiled again.
"""
import hashlib
import os
import tempfile


def cache_dir():
    """The cache directory, or None when caching is disabled."""
    if os.environ.get("ADKIT_DISABLE_CACHE", "") not in ("", "0"):
        return None
    path = os.environ.get("ADKIT_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        path = os.path.join(base, "adkit")
    return path


def key(llvm_ir, dependencies):
    return hashlib.sha256((dependencies + "\n" + llvm_ir).encode()).hexdigest()


def _path(k):
    directory = cache_dir()
    return None if directory is None else os.path.join(directory, k[:2], k + ".o")


_MAGIC = b"adkit-object-1\n"


def load(k):
    """Object code stored under key k, or None (also for a damaged file: LLVM must
    never see bytes that are not exactly what was stored, it would crash on them)."""
    path = _path(k)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if len(blob) <= head or not blob.startswith(_MAGIC):
        return None
    digest, data = blob[len(_MAGIC):head], blob[head:]
    return data if hashlib.sha256(data).digest() == digest else None


def store(k, data):
    """Write object code atomically; a cache that cannot be written is skipped."""
    path = _path(k)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(data).digest() + data)
        os.replace(tmp, path)
    except OSError:
        pass

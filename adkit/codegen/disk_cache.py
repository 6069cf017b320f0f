"""The on-disk cache of compiled object code.

Owns: where the cache lives (ADKIT_CACHE_DIR, else $XDG_CACHE_HOME/adkit, else
~/.cache/adkit; ADKIT_DISABLE_CACHE=1 turns it off), keys of object code (a hash of the
LLVM IR and of what the code depends on: llvmlite and LLVM versions, CPU name and
features), and atomic writes (a temporary file renamed into place: two processes
writing one entry leave one whole file). Stores object code (".o") and the plan
cache's entries (".plan", plan_cache.py: data, never pickle), each behind a magic line
and its sha256 (checked before LLVM or the decoder sees it): a cache file can never run
Python code, and a damaged one is compiled again.
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


def _path(k, suffix=".o"):
    directory = cache_dir()
    return None if directory is None else os.path.join(directory, k[:2], k + suffix)


_MAGIC = b"adkit-object-1\n"


def load(k, suffix=".o", magic=_MAGIC):
    """The bytes stored under key k, or None (also for a damaged file: LLVM must
    never see bytes that are not exactly what was stored, it would crash on them)."""
    path = _path(k, suffix)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:  # none stored (or unreadable)
        return None
    head = len(magic) + 32
    if len(blob) <= head or not blob.startswith(magic):
        return None
    digest, data = blob[len(magic):head], blob[head:]
    return data if hashlib.sha256(data).digest() == digest else None


def store(k, data, suffix=".o", magic=_MAGIC):
    """Write bytes (or a list of byte strings, written one after another) atomically;
    a cache that cannot be written is skipped."""
    path = _path(k, suffix)
    if path is None:
        return
    chunks = data if isinstance(data, list) else [data]
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(magic + digest.digest())
                for chunk in chunks:
                    f.write(chunk)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass

"""Attributes a stored plan decodes when first read, not when it is loaded.

Owns: `DeferredAttribute` (the descriptor a class puts where such an attribute is),
`Later` (what the encoder writes apart: plan_codec.py writes its value with the
graphs' contents, after the rest) and `Deferred` (what the decoder puts there
meanwhile). Does not: encode or decode (plan_codec.py).

A restored plan runs its steps' entry points; its kernels and native calls (what the
code was made from: for views, export and tests) are ~80% of what a GMM gradient's plan
holds, and decoding them was most of a warm first call's decoding (plan_cache.py).
"""


class Later:
    """A value the encoder writes with the later part of an entry."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Deferred:
    """A decoded entry's value not read yet: read() reads it (and the rest of the
    entry's later part, once)."""

    __slots__ = ("read",)

    def __init__(self, read):
        self.read = read


class DeferredAttribute:
    """A data descriptor for an attribute that may hold a Deferred: the first read
    replaces it by its value. The encoder writes the attribute as Later."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        try:
            value = obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute "
                                 f"{self.name!r}") from None
        if type(value) is Deferred:
            value = obj.__dict__[self.name] = value.read()
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value


def stored(cls, name, value):
    """Attribute `name` of a `cls` object, as the encoder writes it: Later when the
    class keeps it in a DeferredAttribute, else the value itself."""
    return Later(value) if isinstance(getattr(cls, name, None), DeferredAttribute) \
        else value


__all__ = ["Deferred", "DeferredAttribute", "Later", "stored"]

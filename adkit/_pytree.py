"""Pytrees: flatten and unflatten nested tuples, lists, dicts and namedtuples.

Owns: `tree_flatten(tree, is_leaf) -> (leaves, spec)` and `tree_unflatten(spec, leaves)`.
Does not: know about tensors (callers choose what counts as a leaf). A spec is hashable
and compares equal for equal structures, so it can key caches (jit signatures).
"""
from collections import namedtuple

class TreeSpec(namedtuple("TreeSpec", ("kind", "meta", "children"))):
    """A pytree's structure. Printed the way a user wrote it, one `*` per leaf:
    `(*, [*, *])`, `{'w': *, 'b': *}`, `Point(x=*, y=*)` (error messages show it)."""
    __slots__ = ()

    def __str__(self):
        if self.kind == "leaf":
            return "*"
        inner = [str(c) for c in self.children]
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.meta, inner)) + "}"
        if self.kind == "namedtuple":
            fields = ", ".join(f"{f}={c}" for f, c in zip(self.meta._fields, inner))
            return f"{self.meta.__name__}({fields})"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"

    def __repr__(self):
        return f"TreeSpec({self})"


LEAF = TreeSpec("leaf", None, ())


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


def tree_flatten(tree, is_leaf=None):
    """Leaves in depth-first order and the spec to rebuild the structure. Containers are
    tuples, lists, dicts (in insertion order) and namedtuples; anything else a leaf."""
    leaves = []
    spec = _flatten(tree, leaves, is_leaf)
    return leaves, spec


def _flatten(tree, leaves, is_leaf):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return LEAF
    if _is_namedtuple(tree):
        return TreeSpec("namedtuple", type(tree),
                        tuple(_flatten(x, leaves, is_leaf) for x in tree))
    if isinstance(tree, (tuple, list)):
        return TreeSpec(type(tree).__name__, None,
                        tuple(_flatten(x, leaves, is_leaf) for x in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)  # insertion order, as torch.utils._pytree keeps it
        return TreeSpec("dict", keys, tuple(_flatten(tree[k], leaves, is_leaf) for k in keys))
    leaves.append(tree)
    return LEAF


def freeze(value):
    """A hashable stand-in for `value` that compares equal exactly when the values do
    (and their container types agree): lists, tuples, dicts and sets become tagged
    tuples, recursively; anything else must be hashable itself (else TypeError)."""
    if isinstance(value, (list, tuple)) and not _is_namedtuple(value):
        return (type(value).__name__, tuple(freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, frozenset(freeze(v) for v in value))
    hash(value)
    return value


def tree_unflatten(spec, leaves):
    """The structure described by `spec`, filled with `leaves` in order."""
    it = iter(leaves)
    result = _unflatten(spec, it)
    if next(it, _SENTINEL) is not _SENTINEL:
        raise ValueError("tree_unflatten: more leaves than the spec has places")
    return result


_SENTINEL = object()


def _unflatten(spec, it):
    if spec.kind == "leaf":
        value = next(it, _SENTINEL)
        if value is _SENTINEL:
            raise ValueError("tree_unflatten: fewer leaves than the spec has places")
        return value
    children = [_unflatten(c, it) for c in spec.children]
    if spec.kind == "namedtuple":
        return spec.meta(*children)
    if spec.kind == "tuple":
        return tuple(children)
    if spec.kind == "list":
        return children
    return dict(zip(spec.meta, children))


def tree_map(fn, tree, is_leaf=None):
    leaves, spec = tree_flatten(tree, is_leaf)
    return tree_unflatten(spec, [fn(x) for x in leaves])


def num_leaves(spec):
    return 1 if spec.kind == "leaf" else sum(num_leaves(c) for c in spec.children)

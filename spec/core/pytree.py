"""Pytrees as jit sees them: tuples, lists, dicts and None around leaves.

The spec needs only the containers a user passes to ``jax.jit``: a tuple, a list, a dict
(flattened in sorted key order, as JAX does) and ``None``, which is a container with no
children (an argument that is None has no leaves). Everything else is a leaf. Paths are
written the way JAX's ``keystr`` writes them: ``[0]['w'][1]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

__all__ = ["Node", "structure", "leaves_with_paths", "leaves", "is_container", "show_path",
           "map_leaves", "fill", "prefix_mismatch", "broadcast_prefix", "show_tree"]


def is_container(value: Any) -> bool:
    """True for the containers jit flattens (tuple, list, dict, None)."""
    return value is None or type(value) in (tuple, list, dict)


@dataclasses.dataclass(frozen=True)
class Node:
    """The shape of a pytree without its leaves: a kind and the children's structures."""

    kind: str                      # "tuple", "list", "dict", "none" or "leaf"
    keys: tuple = ()               # dict keys (sorted) for "dict"
    children: tuple["Node", ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def describe(self) -> str:
        """A short description for messages: ``tuple of 2``, ``dict with keys ['a', 'b']``."""
        if self.kind == "leaf":
            return "a leaf"
        if self.kind == "none":
            return "None"
        if self.kind == "dict":
            return f"a dict with keys {list(self.keys)}"
        return f"a {self.kind} of length {len(self.children)}"


LEAF = Node("leaf")


def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError:
        return tuple(sorted(d, key=repr))


def structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Node:
    """The structure of ``tree``; ``is_leaf`` may declare more values to be leaves."""
    if is_leaf is not None and is_leaf(tree):
        return LEAF
    if tree is None:
        return Node("none")
    kind = type(tree)
    if kind is tuple or kind is list:
        return Node(kind.__name__, (), tuple(structure(c, is_leaf) for c in tree))
    if kind is dict:
        keys = _sorted_keys(tree)
        return Node("dict", keys, tuple(structure(tree[k], is_leaf) for k in keys))
    return LEAF


def show_key(key: Any) -> str:
    return f"[{key!r}]"


def show_path(path: tuple) -> str:
    """``('args', 0, 'w')`` -> ``args[0]['w']``: the first key is a bare name."""
    if not path:
        return ""
    head, *rest = path
    return str(head) + "".join(show_key(k) for k in rest)


def leaves_with_paths(tree: Any, prefix: tuple = (),
                      is_leaf: Callable[[Any], bool] | None = None
                      ) -> Iterator[tuple[tuple, Any]]:
    """Every leaf of ``tree`` with its path, in JAX's flattening order."""
    if is_leaf is not None and is_leaf(tree):
        yield prefix, tree
    elif tree is None:
        return
    elif type(tree) in (tuple, list):
        for i, child in enumerate(tree):
            yield from leaves_with_paths(child, prefix + (i,), is_leaf)
    elif type(tree) is dict:
        for key in _sorted_keys(tree):
            yield from leaves_with_paths(tree[key], prefix + (key,), is_leaf)
    else:
        yield prefix, tree


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    return [leaf for _, leaf in leaves_with_paths(tree, (), is_leaf)]


def map_leaves(fn: Callable[..., Any], tree: Any, *, none_is_leaf: bool = False,
               with_path: bool = False) -> Any:
    """``tree`` with every leaf replaced by ``fn(leaf)`` (``fn(path, leaf)`` with
    ``with_path``); containers keep their type, dicts list their keys in flattening order.

    >>> map_leaves(lambda x: x * 2, {"b": (1, None), "a": [3]})
    {'a': [6], 'b': (2, None)}
    >>> map_leaves(lambda p, x: show_path(("t", *p)), (None, [0]), none_is_leaf=True,
    ...            with_path=True)
    ('t[0]', ['t[1][0]'])
    """

    def walk(node: Any, path: tuple) -> Any:
        if node is None and not none_is_leaf:
            return None
        if type(node) in (tuple, list):
            return type(node)(walk(v, path + (i,)) for i, v in enumerate(node))
        if type(node) is dict:
            return {k: walk(node[k], path + (k,)) for k in _sorted_keys(node)}
        return fn(path, node) if with_path else fn(node)

    return walk(tree, ())


def fill(tree: Any, values: Any) -> Any:
    """``tree`` with its leaves replaced, in flattening order, by ``values``.

    >>> fill({"b": 0, "a": (0, 0)}, [1, 2, 3])
    {'a': (1, 2), 'b': 3}
    """
    it = iter(values)
    return map_leaves(lambda _: next(it), tree)


# --------------------------------------------------------------------------- prefixes

def prefix_mismatch(prefix: Any, full: Node, path: tuple) -> str | None:
    """Why ``prefix`` is not a tree prefix of ``full`` (None: it is).

    >>> print(prefix_mismatch((1, 2), structure((1,)), ()))
    at the top level the shardings hold a tuple of length 2 where the value's has length 1
    """
    if not is_container(prefix) or prefix is None:
        return None  # a leaf (None included) broadcasts over any subtree
    where = show_path(("", *path)) or "the top level"
    kind = type(prefix).__name__
    if full.kind == "leaf":
        return f"at {where} the shardings hold a {kind} where the value is a single leaf"
    if full.kind != kind:
        return f"at {where} the shardings hold a {kind} where the value holds {full.describe()}"
    if kind == "dict":
        keys = tuple(sorted(prefix, key=repr))
        if set(prefix) != set(full.keys):
            return (f"at {where} the shardings have dict keys {list(keys)} where the value has "
                    f"{list(full.keys)}")
        children = [prefix[k] for k in full.keys]
        keys_in_order = full.keys
    else:
        if len(prefix) != len(full.children):
            return (f"at {where} the shardings hold a {kind} of length {len(prefix)} where the "
                    f"value's has length {len(full.children)}")
        children = list(prefix)
        keys_in_order = tuple(range(len(prefix)))
    for key, child, node in zip(keys_in_order, children, full.children):
        found = prefix_mismatch(child, node, path + (key,))
        if found:
            return found
    return None


def broadcast_prefix(prefix: Any, full: Node) -> list[Any]:
    """The prefix's leaves, each repeated over the leaves of the subtree it covers."""
    if not is_container(prefix) or prefix is None:
        return [prefix] * full.num_leaves
    children = [prefix[k] for k in full.keys] if isinstance(prefix, dict) else list(prefix)
    out: list[Any] = []
    for child, node in zip(children, full.children):
        out.extend(broadcast_prefix(child, node))
    return out


def show_tree(node: Node) -> str:
    """A structure written with ``*`` for each leaf: ``((*, *), {'a': *})``."""
    if node.kind == "leaf":
        return "*"
    if node.kind == "none":
        return "None"
    if node.kind == "dict":  # each child written once: a dict nested n deep is O(n), not 2**n
        return "{" + ", ".join(f"{k!r}: {show_tree(c)}"
                               for k, c in zip(node.keys, node.children)) + "}"
    inner = ", ".join(show_tree(c) for c in node.children)
    return ("(" + inner + ("," if len(node.children) == 1 else "") + ")"
            if node.kind == "tuple" else "[" + inner + "]")

"""Arguments as pytrees: static and dynamic parts, paths, and shardings prefixes (TREE-1, TREE-2).

The engine flattens with JAX's own pytree registry, so every container JAX accepts
(tuples, lists, dicts, None, namedtuples, registered classes) works; it matches a tree of
shardings against a tree of values node by node, over JAX treedefs, and names every leaf
by its path the way the jit-call semantics does: ``args[0]['w']``, ``kwargs['k']``,
``result[1]``, where ``args[i]`` counts the dynamic positional arguments only.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

import jax
from jax import tree_util

from .layouts import Format, Laid
from .rules import reject, rule
from .shardings import UNSPECIFIED

__all__ = ["ArgumentNames", "resolve_argnums", "split_static", "leaf_paths",
           "match_in_shardings", "match_out_shardings", "sharding_leaves", "show_tree"]


# --------------------------------------------------------------------------- static arguments

def _as_ints(value: Any, what: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise reject("ENG-4", TypeError, f"{what} must be an int or a sequence of ints, got "
                     f"{value!r}") from None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise reject("ENG-4", TypeError, f"{what} must be an int or a sequence of ints, got "
                     f"{value!r}")
    return items


def _as_names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    items = tuple(value)
    if not all(isinstance(n, str) for n in items):
        raise reject("ENG-4", TypeError, f"{what} must be a string or a sequence of strings, "
                     f"got {value!r}")
    return items


def _signature(fun: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def _infer(signature: inspect.Signature | None, nums: tuple[int, ...] | None,
           names: tuple[str, ...] | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Argument numbers from names and names from numbers, through the signature."""
    if signature is None:
        return nums or (), names or ()
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if nums is not None and names is not None:
        return nums, names
    if nums is None and names is None:
        return (), ()
    if names is None:
        assert nums is not None
        count = len(positional)
        found = tuple(positional[i].name for i in nums
                      if -count <= i < count and positional[i].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return nums, found
    index = {p.name: i for i, p in enumerate(positional)
             if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD}
    return tuple(index[n] for n in names if n in index), names


class ArgumentNames:
    """Which arguments are static and which donated, by position and by name."""

    __slots__ = ("static_nums", "static_names", "donate_nums", "donate_names")

    def __init__(self, static_nums: tuple[int, ...], static_names: tuple[str, ...],
                 donate_nums: tuple[int, ...], donate_names: tuple[str, ...]) -> None:
        self.static_nums = static_nums
        self.static_names = static_names
        self.donate_nums = donate_nums
        self.donate_names = donate_names


def resolve_argnums(fun: Callable, static_argnums: Any, static_argnames: Any,
                    donate_argnums: Any, donate_argnames: Any) -> ArgumentNames:
    """Static and donated arguments by number and by name, each completed from the other."""
    signature = _signature(fun)
    s_nums = None if static_argnums is None else _as_ints(static_argnums, "static_argnums")
    s_names = None if static_argnames is None else _as_names(static_argnames, "static_argnames")
    d_nums = None if donate_argnums is None else _as_ints(donate_argnums, "donate_argnums")
    d_names = None if donate_argnames is None else _as_names(donate_argnames, "donate_argnames")
    s_nums, s_names = _infer(signature, s_nums, s_names)
    d_nums, d_names = _infer(signature, d_nums, d_names)
    both = set(s_names) & set(d_names)
    if both:
        raise reject("ENG-4", ValueError, "static_argnames and donate_argnames cannot intersect; "
                     f"{sorted(both)} appear in both")
    return ArgumentNames(tuple(s_nums), tuple(s_names), tuple(d_nums), tuple(d_names))


def split_static(args: tuple, kwargs: dict, names: ArgumentNames
                 ) -> tuple[tuple, dict, tuple, tuple[bool, ...]]:
    """(dynamic positional args, dynamic kwargs, static values, which positions were dynamic)."""
    count = len(args)
    static = {i if i >= 0 else i + count for i in names.static_nums}
    if static:
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        static_values = tuple((i, args[i]) for i in sorted(static) if 0 <= i < count)
    else:
        dynamic, static_values = args, ()
    if kwargs and names.static_names:
        named = {k: v for k, v in kwargs.items() if k not in names.static_names}
        static_values += tuple(sorted(((k, v) for k, v in kwargs.items()
                                       if k in names.static_names), key=lambda kv: kv[0]))
    else:
        named = kwargs
    return dynamic, named, static_values, tuple(i not in static for i in range(count))


def donated_leaves(dynamic_positions: tuple[bool, ...], names: ArgumentNames,
                   dynamic_args: tuple, dynamic_kwargs: dict) -> tuple[bool, ...]:
    """For every flat dynamic leaf, whether the call donates it."""
    count = len(dynamic_positions)
    donate = {i if i >= 0 else i + count for i in names.donate_nums}
    flags: list[bool] = []
    original = [i for i, dynamic in enumerate(dynamic_positions) if dynamic]
    for position, arg in zip(original, dynamic_args):
        flags += [position in donate] * len(tree_util.tree_leaves(arg))
    for key in sorted(dynamic_kwargs):
        flags += [key in names.donate_names] * len(tree_util.tree_leaves(dynamic_kwargs[key]))
    return tuple(flags)


# --------------------------------------------------------------------------- paths

def _key_text(key: Any) -> str:
    return tree_util.keystr((key,))


def leaf_paths(dynamic_args: tuple, dynamic_kwargs: dict) -> list[str]:
    """Each flat dynamic leaf's path: ``args[0]['w']``, ``kwargs['k']``."""
    flat, _ = tree_util.tree_flatten_with_path((dynamic_args, dynamic_kwargs))
    out = []
    for keys, _leaf in flat:
        head = "args" if keys[0].idx == 0 else "kwargs"
        out.append(head + "".join(_key_text(k) for k in keys[1:]))
    return out


def result_paths(out_tree: Any) -> list[str]:
    dummy = tree_util.tree_unflatten(out_tree, list(range(out_tree.num_leaves)))
    flat, _ = tree_util.tree_flatten_with_path(dummy)
    return ["result" + "".join(_key_text(k) for k in keys) for keys, _leaf in flat]


# --------------------------------------------------------------------------- prefixes

def _is_sharding_leaf(x: Any) -> bool:
    return x is None or x is UNSPECIFIED or isinstance(
        x, (jax.sharding.Sharding, jax.sharding.PartitionSpec, Format, Laid))


def sharding_leaves(tree: Any) -> list[tuple[str, Any]]:
    """Every leaf of a shardings tree (None included) with its path below the tree."""
    if tree is UNSPECIFIED:
        return []
    flat, _ = tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)
    return [("".join(_key_text(k) for k in keys), leaf) for keys, leaf in flat]


def _describe(node: Any) -> str:
    data = node.node_data()
    if data is None:
        return "a leaf"
    kind, aux = data
    if kind is type(None):
        return "None"
    if kind is dict:
        return f"a dict with keys {list(aux)}"
    return f"a {kind.__name__} of length {len(node.children())}"


def _mismatch(prefix: Any, full: Any, where: str) -> str | None:
    """Why treedef ``prefix`` is not a prefix of treedef ``full`` (None: it is)."""
    pdata = prefix.node_data()
    if pdata is None:
        return None  # a leaf covers any subtree
    at = where or "the top level"
    fdata = full.node_data()
    kind = pdata[0].__name__
    if fdata is None:
        return f"at {at} the shardings hold a {kind} where the value is a single leaf"
    if fdata[0] is not pdata[0]:
        return f"at {at} the shardings hold a {kind} where the value holds {_describe(full)}"
    pchildren, fchildren = prefix.children(), full.children()
    if pdata[1] != fdata[1]:
        if pdata[0] is dict:
            return (f"at {at} the shardings have dict keys {list(pdata[1])} where the value has "
                    f"{list(fdata[1])}")
        return f"at {at} the shardings and the value differ in their {kind} metadata"
    if len(pchildren) != len(fchildren):
        return (f"at {at} the shardings hold a {kind} of length {len(pchildren)} where the "
                f"value's has length {len(fchildren)}")
    keys = list(pdata[1]) if pdata[0] is dict else list(range(len(pchildren)))
    for key, p, f in zip(keys, pchildren, fchildren):
        found = _mismatch(p, f, f"{where}[{key!r}]")
        if found:
            return found
    return None


def _broadcast(prefix_def: Any, full: Any, leaves: Iterable[Any], out: list[Any]) -> None:
    if prefix_def.node_data() is None:
        out.extend([next(leaves)] * full.num_leaves)  # type: ignore[call-overload]
        return
    for p, f in zip(prefix_def.children(), full.children()):
        _broadcast(p, f, leaves, out)


def _prefix_structure(tree: Any) -> tuple[list[Any], Any]:
    return tree_util.tree_flatten(tree, is_leaf=_is_sharding_leaf)


def _per_leaf(shardings: Any, full: Any) -> tuple[list[Any] | None, str | None]:
    """(one sharding per leaf of ``full``, None), or (None, why the tree is not a prefix)."""
    if shardings is UNSPECIFIED or _is_sharding_leaf(shardings):
        return [shardings] * full.num_leaves, None
    leaves, prefix = _prefix_structure(shardings)
    found = _mismatch(prefix, full, "")
    if found is not None:
        return None, found
    out: list[Any] = []
    _broadcast(prefix, full, iter(leaves), out)
    return out, None


@rule("TREE-1")
def match_in_shardings(in_shardings: Any, positional: tuple) -> list[Any]:
    """``in_shardings`` is a single leaf for every argument, or a tuple with one tree prefix per positional argument.

    A list is read as a tuple here; leaves cover whole subtrees, and containers match in type,
    length and keys.
    """
    full = tree_util.tree_structure(positional)
    if isinstance(in_shardings, list):
        in_shardings = tuple(in_shardings)
    matched, found = _per_leaf(in_shardings, full)
    if matched is not None:
        return matched
    empty = _is_empty_container(in_shardings)
    raise reject("TREE-1", AssertionError if empty else ValueError,
                 "in_shardings must be a tree prefix of the positional arguments: "
                 + _not_a_prefix_of_the_arguments(in_shardings, full, len(positional), found),
                 jax_error="AssertionError" if empty else None)


def _not_a_prefix_of_the_arguments(in_shardings: Any, full: Any, count: int,
                                   found: str | None) -> str:
    """Where in_shardings parts from the positional arguments: at the top (its kind or its
    length), or inside an entry (``found``); and the fix when wrapping it would do."""
    top_fits = type(in_shardings) is tuple and len(in_shardings) == count
    if top_fits:
        words = str(found)
    elif type(in_shardings) is tuple:
        words = (f"it is a tuple of length {len(in_shardings)} for {count} positional "
                 "argument(s)")
    else:
        words = f"it is a {type(in_shardings).__name__}, not a tuple of {count} entries"
    if count != 1 or _mismatch(_prefix_structure((in_shardings,))[1], full, "") is not None:
        return words
    return (f"{words}. It looks like in_shardings should be wrapped in a singleton tuple: "
            f"({in_shardings!r},).")


def _is_empty_container(tree: Any) -> bool:
    try:
        return len(tree) == 0
    except TypeError:
        return False


@rule("TREE-2")
def match_out_shardings(out_shardings: Any, out_tree: Any) -> list[Any]:
    """``out_shardings`` is a single leaf for every result or a tree prefix of the function's result, containers matching in type (a list is not a tuple here), length and dict keys."""
    matched, found = _per_leaf(out_shardings, out_tree)
    if matched is not None:
        return matched
    empty = _is_empty_container(out_shardings)
    raise reject("TREE-2", AssertionError if empty else ValueError,
                 f"out_shardings must be a tree prefix of the function's result: {found}",
                 jax_error="AssertionError" if empty else None)


def show_tree(treedef: Any) -> str:
    """A short picture of a structure for messages: ``((*, *), {'k': *})``."""
    return str(treedef).replace("PyTreeDef(", "", 1)[:-1]


def convert_tree(tree: Any, convert: Callable[[Any, str], Any], which: str) -> Any:
    """The shardings tree with each leaf converted (JIT-3), keeping its structure."""
    if tree is UNSPECIFIED:
        return UNSPECIFIED
    paths_leaves, treedef = tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)
    converted = [convert(leaf, which + "".join(_key_text(k) for k in keys))
                 for keys, leaf in paths_leaves]
    return tree_util.tree_unflatten(treedef, converted)


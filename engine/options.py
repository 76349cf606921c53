"""jit's options, checked once when ``jit(...)`` is called (JIT-1, JIT-2), and the form of a call against them (JIT-4).

:class:`Options` holds what ``jit(fun, ...)`` was given, normalized: left-out shardings read
as UNSPECIFIED, static and donated arguments resolved to numbers and names, and the key that
every call of the function shares (the C++ dispatcher's, and part of each executable's).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax import tree_util

from . import layouts
from .rules import reject, rule
from .shardings import UNSPECIFIED, check_leaf
from .trees import ArgumentNames, resolve_argnums, sharding_leaves

__all__ = ["NOT_GIVEN", "Options", "check_device_options", "check_call_form"]

NOT_GIVEN = object()   # an option jit was not given (its keyword defaults)


def _unspecified(value: Any) -> Any:
    """The engine's UNSPECIFIED for a left-out option (JAX's own marker included)."""
    if value is NOT_GIVEN or type(value).__name__ == "UnspecifiedValue":
        return UNSPECIFIED
    return value


def _open_leaves(tree: Any) -> Any:
    """JAX's own UNSPECIFIED marker used as a leaf reads as None (both leave the leaf open)."""
    if tree is UNSPECIFIED or tree is None:
        return tree
    marker = lambda x: x is None or type(x).__name__ == "UnspecifiedValue"  # noqa: E731
    leaves, treedef = tree_util.tree_flatten(tree, is_leaf=marker)
    if not any(type(x).__name__ == "UnspecifiedValue" for x in leaves):
        return tree
    return tree_util.tree_unflatten(
        treedef, [None if type(x).__name__ == "UnspecifiedValue" else x for x in leaves])


class Options:
    """jit's options, checked (JIT-1, JIT-2) and normalized once, at ``jit(...)``."""

    __slots__ = ("in_shardings", "out_shardings", "names", "given_argnums", "keep_unused",
                 "device", "backend", "inline", "compiler_options", "device_or_backend", "key")

    def __init__(self, fun: Callable, in_shardings: Any, out_shardings: Any,
                 static_argnums: Any, static_argnames: Any, donate_argnums: Any,
                 donate_argnames: Any, keep_unused: bool, device: Any, backend: Any,
                 inline: bool, compiler_options: Any) -> None:
        in_shardings = _open_leaves(_unspecified(in_shardings))
        out_shardings = _open_leaves(_unspecified(out_shardings))
        check_device_options(device, backend, in_shardings, out_shardings)
        if isinstance(in_shardings, list):
            in_shardings = tuple(in_shardings)  # a list is read as a tuple (TREE-1)
        _check_sharding_leaves(in_shardings, out_shardings)
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.names: ArgumentNames = resolve_argnums(fun, static_argnums, static_argnames,
                                                    donate_argnums, donate_argnames)
        # As the user gave them, for JAX's own jit: JAX completes numbers from names (and
        # back) only where one of the two is left out, and reads the signature only then.
        self.given_argnums = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                                  donate_argnums=donate_argnums, donate_argnames=donate_argnames)
        self.keep_unused = bool(keep_unused)
        self.device = device
        self.backend = backend
        self.inline = inline
        self.compiler_options = compiler_options
        self.device_or_backend = device is not None or backend is not None
        self.key = (self.names.donate_nums, self.names.donate_names, self.keep_unused,
                    device, backend, bool(inline),
                    tuple(sorted((compiler_options or {}).items())))

    def dispatch_key(self) -> tuple:
        """Everything in these options that decides a call (the C++ dispatcher's key)."""
        trees = []
        for tree in (self.in_shardings, self.out_shardings):
            leaves, treedef = tree_util.tree_flatten(tree, is_leaf=lambda x: x is None)
            trees.append((treedef, tuple(leaves)))
        return ("shardlaw.engine", self.key, self.names.static_nums, self.names.static_names,
                tuple(trees))

    def target_device(self) -> Any:
        if self.device is not None:
            return self.device
        return jax.local_devices(backend=self.backend)[0]


def _check_sharding_leaves(in_shardings: Any, out_shardings: Any) -> None:
    """JIT-2 on every leaf of both trees, layouts first."""
    trees = (("in_shardings", in_shardings), ("out_shardings", out_shardings))
    leaves = [(which + path, leaf) for which, tree in trees
              for path, leaf in sharding_leaves(tree)]
    # JAX splits layouts off both trees, refusing bare ones, before it checks any leaf.
    leaves.sort(key=lambda item: not (isinstance(item[1], layouts.Layout)
                                      or item[1] is layouts.AUTO))
    for where, leaf in leaves:
        check_leaf(leaf, where)


@rule("JIT-1")
def check_device_options(device: Any, backend: Any, in_shardings: Any, out_shardings: Any) -> None:
    """``device=`` and ``backend=`` exclude each other and exclude ``in_shardings`` and ``out_shardings``."""
    if device is None and backend is None:
        return
    given = f"device={device}" if device is not None else f"backend={backend!r}"
    if device is not None and backend is not None:
        raise reject("JIT-1", ValueError, f"jit was given device={device} and "
                     f"backend={backend!r}; only one of them may be given")
    for name, value in (("in_shardings", in_shardings), ("out_shardings", out_shardings)):
        if value is not None and value is not UNSPECIFIED:
            raise reject("JIT-1", ValueError,
                         f"jit was given {given} and {name}; {name} must then be left out. "
                         "Drop device=/backend= (deprecated) and place the inputs with "
                         "jax.device_put, or pass shardings instead.")


@rule("JIT-4")
def check_call_form(kwargs: dict, in_shardings: Any, context: Any, device_or_backend: bool) -> None:
    """Keyword arguments cannot meet a specified ``in_shardings``, and a context mesh cannot meet ``device=``/``backend=``."""
    if kwargs and in_shardings is not None and in_shardings is not UNSPECIFIED:
        raise reject("JIT-4", ValueError,
                     f"the call passes keyword arguments {sorted(kwargs)} while in_shardings is "
                     "given; in_shardings covers positional arguments only. Pass them "
                     "positionally, or leave in_shardings out.")
    if context is not None and device_or_backend:
        raise reject("JIT-4", ValueError,
                     f"the call runs under the context mesh {context} while jit was given "
                     "device= or backend=. Leave the mesh context, or drop device=/backend=.")

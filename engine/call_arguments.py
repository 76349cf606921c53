"""One call's arguments as the engine sees them, and the checks that need nothing else (ENG-1, -2, -3, -6).

:class:`CallArguments` splits a call's arguments into static and dynamic parts, flattens the
dynamic ones, says what kind of value each leaf is, and builds the call's signature key (the
key of the engine's signature cache; JAX's C++ dispatcher keeps its own).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import tree_util

from . import internals, layouts
from .resolution import ABSTRACT, ARRAY, NUMPY, NUMPY_SCALAR, SCALAR, Input
from .rules import EngineRejection, reject, rule
from .trees import ArgumentNames, leaf_paths, split_static

__all__ = ["CallArguments", "FOREIGN", "NO_STATICS", "refused_leaf", "foreign_argument",
           "check_not_deleted", "check_donated_once", "check_donations", "short"]

FOREIGN = "foreign"   # a leaf the jit-call rules do not describe: JAX's jit takes the call
NO_STATICS = ArgumentNames((), (), (), ())   # every argument dynamic (an AOT executable's call)


class CallArguments:
    """One call's arguments as the engine sees them: static and dynamic parts, flat leaves."""

    __slots__ = ("args", "kwargs", "dyn_args", "dyn_kwargs", "statics", "positions", "leaves",
                 "treedef", "kinds", "key", "tracers", "foreign", "refs", "_paths")

    def __init__(self, args: tuple, kwargs: dict, names: ArgumentNames, abstract_ok: bool) -> None:
        self.args, self.kwargs = args, kwargs
        self.dyn_args, self.dyn_kwargs, self.statics, self.positions = split_static(
            args, kwargs, names)
        self.leaves, self.treedef = tree_util.tree_flatten((self.dyn_args, self.dyn_kwargs))
        self._paths: list[str] | None = None
        self.tracers = False
        self.foreign = False
        self.refs: list[int] = []   # the leaves that are mutable refs (jax.new_ref)
        keys = []
        kinds = []
        for i, leaf in enumerate(self.leaves):
            kind, leaf_key = self._leaf(i, leaf, abstract_ok)
            kinds.append(kind)
            keys.append(leaf_key)
        self.kinds = kinds
        concrete, abstract = internals.context_meshes()
        self.key = (self.treedef, self._static_key(), tuple(keys), internals.trace_context(),
                    concrete, abstract, _default_device_key())

    def _static_key(self) -> tuple:
        """The static arguments as a key, refused (ENG-1) where one cannot be hashed."""
        # 1, 1.0 and True hash and compare equal but trace differently: keep their types.
        static_key = tuple((where, type(value), value) for where, value in self.statics)
        try:
            hash(static_key)
        except TypeError as error:
            where, bad = next(((w, v) for w, v in self.statics if not _hashable(v)),
                              (None, None))
            path = f"args[{where}]" if isinstance(where, int) else f"kwargs[{where!r}]"
            raise reject("ENG-1", ValueError,
                         "Non-hashable static arguments are not supported: the static argument "
                         f"{path} is a {type(bad).__name__} ({short(bad)}), which cannot be "
                         f"hashed ({error}). Make it hashable (a tuple instead of a list), or "
                         "pass it as an array.", path) from None
        return static_key

    def _leaf(self, i: int, leaf: Any, abstract_ok: bool) -> tuple[str, Any]:
        kind = type(leaf)
        if kind is internals.ArrayImpl:
            if leaf.is_deleted() and not abstract_ok:
                raise check_not_deleted(leaf, self.paths()[i])
            return ARRAY, (leaf.aval, leaf.sharding, leaf._committed,
                           layouts.array_layout(leaf))
        if isinstance(leaf, internals.Tracer):
            self.tracers = True
            return "tracer", None
        if kind is np.ndarray:
            return NUMPY, (NUMPY, leaf.shape, leaf.dtype)
        if kind in (bool, int, float, complex):
            return SCALAR, (SCALAR, kind)
        if isinstance(leaf, np.generic):
            return NUMPY_SCALAR, (NUMPY_SCALAR, leaf.dtype)
        if isinstance(leaf, np.ndarray):
            return NUMPY, (NUMPY, leaf.shape, leaf.dtype)
        if isinstance(leaf, jax.ShapeDtypeStruct) and abstract_ok:
            return ABSTRACT, (ABSTRACT, leaf.shape, leaf.dtype, leaf.sharding,
                              getattr(leaf, "weak_type", False),
                              getattr(getattr(leaf, "format", None), "layout", None))
        if type(leaf) is internals.ShapedArray and abstract_ok:
            typed = internals.typed_sharding(leaf)
            return ABSTRACT, (ABSTRACT, leaf.shape, leaf.dtype, typed, leaf.weak_type, None)
        if kind is internals.Ref:
            # A mutable ref is a committed input on its own sharding (REF-1); the engine
            # decides the call's rules and JAX's jit runs it (stage_compile).
            self.refs.append(i)
            return ARRAY, (jax.typeof(leaf), leaf.sharding, True, layouts.array_layout(leaf))
        if isinstance(leaf, jax.Array):
            return ARRAY, (leaf.aval, leaf.sharding, getattr(leaf, "_committed", True),
                           layouts.array_layout(leaf))
        # Anything else (tokens, objects JAX knows how to type, or values it refuses) is
        # not the sharding rules' business: the call goes to JAX's own jit as it is.
        self.foreign = True
        return FOREIGN, None

    def paths(self) -> list[str]:
        if self._paths is None:
            self._paths = leaf_paths(self.dyn_args, self.dyn_kwargs)
        return self._paths

    def layout(self, i: int) -> Any:
        """The layout argument ``i`` is in (a layout key; None: default, or not an array)."""
        # Read off the signature key, which holds each array's layout already.
        kind, key = self.kinds[i], self.key[2][i]
        if kind == ARRAY:
            return key[3]
        if kind == ABSTRACT and isinstance(key[5], layouts.Layout):
            return layouts.layout_key(key[5], len(key[1]))
        return None

    def shape(self, i: int) -> tuple[int, ...]:
        leaf = self.leaves[i]
        if self.kinds[i] == SCALAR:
            return ()
        return tuple(np.shape(leaf)) if not hasattr(leaf, "shape") else tuple(leaf.shape)

    def aval(self, i: int) -> Any:
        leaf = self.leaves[i]
        if self.kinds[i] == ABSTRACT:
            # As JAX types it: a 64-bit dtype is narrowed when x64 is off.
            return jax.core.ShapedArray(leaf.shape, jax.dtypes.canonicalize_dtype(leaf.dtype),
                                        weak_type=getattr(leaf, "weak_type", False))
        return jax.typeof(leaf)

    def input(self, i: int, jit_sharding: Any) -> Input:
        leaf, kind = self.leaves[i], self.kinds[i]
        held, committed = None, False
        if kind == ARRAY:
            held, committed = leaf.sharding, bool(getattr(leaf, "_committed", True))
        elif kind == ABSTRACT and self.key[2][i][3] is not None:
            held, committed = self.key[2][i][3], True   # the sharding its key recorded
        dtype = getattr(leaf, "dtype", type(leaf))
        return Input(self.paths()[i], kind, self.shape(i), dtype, held, committed, jit_sharding)


def refused_leaf(arguments: CallArguments, for_call: bool) -> int | None:
    """The first leaf the rules do not describe that JAX cannot take either (None: none)."""
    for i, kind in enumerate(arguments.kinds):
        if kind == FOREIGN and not internals.jax_takes(arguments.leaves[i], for_call):
            return i
    return None


@rule("ENG-2")
def foreign_argument(arguments: CallArguments, i: int) -> EngineRejection:
    """A dynamic argument is a value JAX can type: an array, a numpy value, a scalar, a token."""
    leaf, path = arguments.leaves[i], arguments.paths()[i]
    return reject("ENG-2", TypeError,
                  f"JAX's jit refuses the argument {path}, a value of type "
                  f"{type(leaf).__name__} ({short(leaf)}). Mark it static with "
                  "static_argnums/static_argnames, or convert it with jnp.asarray.", path)


@rule("ENG-3")
def check_not_deleted(leaf: Any, path: str) -> EngineRejection:
    """An argument array must not have been deleted (donated to an earlier call, or by hand)."""
    error = reject("ENG-3", RuntimeError,
                   f"the argument is an array that has been deleted (donated to an earlier "
                   f"call, or deleted by hand): shape {leaf.shape}. Pass the result of the "
                   "call that took it, or do not donate it.", path)
    try:
        leaf._check_if_deleted()     # JAX's own words for it
    except RuntimeError as jax_error:
        return error.as_jax(jax_error)
    return error


@rule("ENG-6")
def check_donated_once(arguments: CallArguments, key: int) -> EngineRejection:
    """An array a call donates appears nowhere else among that call's arguments."""
    paths = [p for p, leaf in zip(arguments.paths(), arguments.leaves) if id(leaf) == key]
    leaf = next(leaf for leaf in arguments.leaves if id(leaf) == key)
    return reject("ENG-6", internals.JaxRuntimeError,
                  f"the array at {' and '.join(paths)} (shape {leaf.shape}, "
                  f"{leaf.sharding}) is donated by this call and also passed to it again; a "
                  "donated buffer is handed over to the program, so it cannot be read a "
                  "second time in the same call (JAX fails here when running, and with "
                  "several devices the process crashes). Pass a copy (x.copy()) for the "
                  "second use, or do not donate it.", paths[0])


def check_donations(names: ArgumentNames, args: tuple, kwargs: dict) -> None:
    """ENG-3 and ENG-6 before every call of a function that donates, fast path included.

    JAX's dispatcher hands a donating executable a deleted array, or the same buffer
    twice, without looking; XLA then fails, and with several devices the process dies.
    The check runs in front of the dispatcher, for donating functions only.
    """
    positions = {i if i >= 0 else i + len(args) for i in names.donate_nums}
    donated: set[int] = set()
    seen: dict[int, int] = {}
    parts = [(i in positions, a) for i, a in enumerate(args)]
    parts += [(k in names.donate_names, v) for k, v in kwargs.items()]
    for donating, part in parts:
        for leaf in tree_util.tree_leaves(part):
            if type(leaf) is not internals.ArrayImpl:
                continue
            if leaf.is_deleted():
                CallArguments(args, kwargs, names, abstract_ok=False)  # raises ENG-3, located
            key = id(leaf)
            seen[key] = seen.get(key, 0) + 1
            if donating:
                donated.add(key)
    for key in donated:
        if seen[key] > 1:
            raise check_donated_once(CallArguments(args, kwargs, names, True), key)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _default_device_key() -> Any:
    device = internals.default_device()
    return device if isinstance(device, str) or device is None else device.id

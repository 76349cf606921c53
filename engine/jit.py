"""``shardlaw.engine.jit``: jax.jit's interface, the jit-call semantics, the shardlaw cache policy.

A call goes through three levels:

1. **dispatch** — JAX's own C++ dispatcher, keyed by the exact argument signature (types,
   sharding objects, committed flags, static values, jit context). A known signature runs
   without any Python, as fast as ``jax.jit``. The engine hands the dispatcher a signature's
   executable only when running the arguments as they are is right: every committed array
   already sits where the executable wants it. Otherwise (a committed argument jit moves)
   every call of that signature comes back to Python, which moves it (never a buffer on
   the wrong device);
2. **signature** — the engine's decision for one signature (a :class:`Plan`): the rules of
   the jit-call semantics applied in JAX's order, the executable to use, how to hand it
   the arguments (as they are, relabelled over the same buffers, or moved) and how to
   label the results. A refused signature keeps its rejection, raised again on each call;
3. **executable** — the process-wide :data:`~shardlaw.engine.cache.CACHE`: one compiled
   program per placement class. A signature that is placement-equal to one compiled
   before reuses its executable; its arguments are relabelled over their own buffers
   (zero copy) and its results are labelled as ``jax.jit`` would label them for this call.

The engine decides with its own implementation of the rules (leaf creation, prefix
matching, fit, resolution, device assignment, recovery of result shardings), on JAX
objects, and lowers and compiles through JAX's public stages.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import operator
import os
import threading
import time
import types
import warnings
import weakref
from typing import Any, Callable

import jax
import numpy as np
from jax import tree_util
from jax.sharding import NamedSharding, SingleDeviceSharding

from . import aot, internals, layouts
from .cache import CACHE, Entry, owner_token
from .recovery import (
    Value, compiled_results, concrete_inputs, concrete_mesh, raw, recover_shardings,
    single_device_results,
)
from .resolution import (
    ABSTRACT, ARRAY, NUMPY, NUMPY_SCALAR, SCALAR, Input, Source, check_has_devices,
    check_iota_tiles, check_tile_count,
    check_reused_replica, device_assignment, distinct_sources, input_source, kept_inputs,
    moves, replicate_scalars, resolve_input, results_committed,
)
from .rules import EngineRejection, LeftToJax, recording, reject, rule
from .shardings import (
    UNSPECIFIED, check_fits, check_leaf, context_mesh, devices_of, hlo, hlo_equal, is_partial,
    jax_equivalent, leaf_to_sharding, num_devices, placement_class, placement_equivalent,
)
from .trees import (
    ArgumentNames, convert_tree, donated_leaves, leaf_paths, match_in_shardings,
    match_out_shardings, resolve_argnums, result_paths, sharding_leaves, split_static,
)

__all__ = ["jit", "Engine", "Plan", "CacheInfo", "JittedFunction"]

_NOT_GIVEN = object()
_NO_STATICS = ArgumentNames((), (), (), ())
FOREIGN = "foreign"   # a leaf the jit-call rules do not describe: JAX's jit takes the call

# Whether functions jitted from now on count their calls (one Python frame per call).
_COUNT_CALLS = [os.environ.get("SHARDLAW_ENGINE_COUNT_CALLS", "0") not in ("", "0")]
_UNHASHABLE = "Non-hashable static arguments"   # how JAX's C++ dispatcher refuses one
_SIGNATURE_CAPACITY = 4096
_RECENT = 16

# --------------------------------------------------------------------------- the options


def _unspecified(value: Any) -> Any:
    """The engine's UNSPECIFIED for a left-out option (JAX's own marker included)."""
    if value is _NOT_GIVEN or type(value).__name__ == "UnspecifiedValue":
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
        trees = (("in_shardings", in_shardings), ("out_shardings", out_shardings))
        leaves = [(which + path, leaf) for which, tree in trees
                  for path, leaf in sharding_leaves(tree)]
        # JAX splits layouts off both trees, refusing bare ones, before it checks any leaf.
        leaves.sort(key=lambda item: not (isinstance(item[1], layouts.Layout)
                                          or item[1] is layouts.AUTO))
        for where, leaf in leaves:
            check_leaf(leaf, where)
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


# --------------------------------------------------------------------------- one call

class Site:
    """One call's arguments as the engine sees them: static and dynamic parts, flat leaves."""

    __slots__ = ("args", "kwargs", "dyn_args", "dyn_kwargs", "statics", "positions", "leaves",
                 "treedef", "kinds", "key", "tracers", "foreign", "_paths")

    def __init__(self, args: tuple, kwargs: dict, names: ArgumentNames, abstract_ok: bool) -> None:
        self.args, self.kwargs = args, kwargs
        self.dyn_args, self.dyn_kwargs, self.statics, self.positions = split_static(
            args, kwargs, names)
        self.leaves, self.treedef = tree_util.tree_flatten((self.dyn_args, self.dyn_kwargs))
        self._paths: list[str] | None = None
        self.tracers = False
        self.foreign = False
        keys = []
        kinds = []
        for i, leaf in enumerate(self.leaves):
            kind, leaf_key = self._leaf(i, leaf, abstract_ok)
            kinds.append(kind)
            keys.append(leaf_key)
        self.kinds = kinds
        try:
            # 1, 1.0 and True hash and compare equal but trace differently: keep their types.
            static_key = tuple((where, type(value), value) for where, value in self.statics)
            hash(static_key)
        except TypeError as error:
            where, bad = next(((w, v) for w, v in self.statics if not _hashable(v)),
                              (None, None))
            path = f"args[{where}]" if isinstance(where, int) else f"kwargs[{where!r}]"
            raise reject("ENG-1", ValueError,
                         "Non-hashable static arguments are not supported: the static argument "
                         f"{path} is a {type(bad).__name__} ({_short(bad)}), which cannot be "
                         f"hashed ({error}). Make it hashable (a tuple instead of a list), or "
                         "pass it as an array.", path) from None
        concrete, abstract = internals.context_meshes()
        self.key = (self.treedef, static_key, tuple(keys), internals.trace_context(),
                    concrete, abstract, _default_device_key())

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


def _refused_leaf(site: Site, for_call: bool) -> int | None:
    """The first leaf the rules do not describe that JAX cannot take either (None: none)."""
    for i, kind in enumerate(site.kinds):
        if kind == FOREIGN and not internals.jax_takes(site.leaves[i], for_call):
            return i
    return None


@rule("ENG-2")
def _foreign_argument(site: Site, i: int) -> EngineRejection:
    """A dynamic argument is a value JAX can type: an array, a numpy value, a scalar, a token."""
    leaf, path = site.leaves[i], site.paths()[i]
    return reject("ENG-2", TypeError,
                  f"JAX's jit refuses the argument {path}, a value of type "
                  f"{type(leaf).__name__} ({_short(leaf)}). Mark it static with "
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
def check_donated_once(site: Site, key: int) -> EngineRejection:
    """An array a call donates appears nowhere else among that call's arguments."""
    paths = [p for p, leaf in zip(site.paths(), site.leaves) if id(leaf) == key]
    leaf = next(leaf for leaf in site.leaves if id(leaf) == key)
    return reject("ENG-6", internals.JaxRuntimeError,
                  f"the array at {' and '.join(paths)} (shape {leaf.shape}, "
                  f"{leaf.sharding}) is donated by this call and also passed to it again; a "
                  "donated buffer is handed over to the program, so it cannot be read a "
                  "second time in the same call (JAX fails here when running, and with "
                  "several devices the process crashes). Pass a copy (x.copy()) for the "
                  "second use, or do not donate it.", paths[0])


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _default_device_key() -> Any:
    device = internals.default_device()
    return device if isinstance(device, str) or device is None else device.id


# --------------------------------------------------------------------------- the decision

class Plan:
    """The engine's decision for one call signature, and how to run it."""

    __slots__ = (
        "rejection", "fired", "in_paths", "in_shardings", "out_paths", "out_shardings",
        "device_assignment", "num_devices", "kept", "out_committed", "transfers", "entry",
        "compiled_here", "conversions", "out_labels", "out_tree", "fastpath", "fast_ok",
        "donated", "exe_inputs", "num_inputs", "empty_results", "__weakref__")

    def __init__(self) -> None:
        self.rejection: EngineRejection | None = None
        self.fired: tuple[str, ...] = ()
        self.in_paths: tuple[str, ...] = ()
        self.in_shardings: tuple = ()
        self.out_paths: tuple[str, ...] = ()
        self.out_shardings: tuple = ()
        self.device_assignment: tuple = ()
        self.num_devices = 0
        self.kept: tuple[int, ...] = ()
        self.out_committed: tuple[bool, ...] = ()
        self.transfers: tuple[str, ...] = ()
        self.entry: Entry | None = None
        self.compiled_here = False
        self.conversions: list[Any] = []
        self.out_labels: list[Any] = []
        self.out_tree: Any = None
        self.fastpath: Any = None
        self.fast_ok = False
        self.donated: tuple[bool, ...] = ()
        self.exe_inputs: tuple = ()
        self.num_inputs = 0
        self.empty_results: tuple[int, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.rejection is None


class Decision:
    """A call being decided, stage by stage (what each stage found)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.context: Any = None
        self.target: Any = None
        self.jit_in: list[Any] = []
        self.in_layouts: list[Any] = []
        self.out_layouts: list[Any] = []
        self.out_tree_shardings: Any = UNSPECIFIED
        self.traced: Any = None
        self.out_paths: list[str] = []
        self.out_flat: list[Any] = []
        self.out_avals: list[Any] = []
        self.inputs: list[Input] = []
        self.resolved: list[Any] = []
        self.kept: tuple[int, ...] = ()
        self.assignment: tuple = ()
        self.count = 0
        self.final: list[Any] = []
        self.committed = False
        self.compiler_options: dict[str, Any] | None = None   # given to Lowered.compile


# --------------------------------------------------------------------------- statistics

class CacheInfo:
    """What the engine's caches hold for one jitted function, and how they were used.

    ``calls`` counts every call and ``dispatch_hits`` the calls JAX's C++ dispatcher ran on
    its own (a known signature whose arguments go as they are) — both None unless the
    function counts its calls (:func:`count_calls`, or static arguments); ``python_calls`` the calls
    that reached the engine (new signatures, signatures whose arguments must move, calls
    inside another transformation); ``refused_in_dispatch`` calls the dispatcher refused
    before the engine saw them (an unhashable static argument, ENG-1). Signatures:
    ``signature_hits``/``signature_misses``/``signatures`` (held). Executables:
    ``executable_hits`` (a placement-equal signature reused one), ``executable_misses`` and
    ``compiles``, ``executables`` (held for this function), ``executables_total`` and
    ``capacity`` (the process-wide cache). ``recent_misses`` says why each recent miss
    missed; ``divergences`` lists any place where JAX's compiled program differed from the
    engine's own prediction (empty when the engine and JAX agree).
    """

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()
                          if k not in ("recent_misses", "divergences"))
        return f"CacheInfo({parts})"

    def __str__(self) -> str:
        off = "not counted (shardlaw.engine.count_calls(True) counts them)"
        hits = off if self.dispatch_hits is None else f"{self.dispatch_hits}"
        lines = [
            f"calls: {off if self.calls is None else self.calls}",
            f"dispatch (C++): {hits} hit(s) run without Python, "
            f"{self.python_calls} call(s) reached Python (new signatures, signatures whose "
            f"arguments must move, calls inside other transformations), "
            f"{self.refused_in_dispatch} refused by the dispatcher; "
            f"{self.dispatch_entries} signature(s) held",
            f"signature: {self.signature_hits} hit(s), {self.signature_misses} miss(es), "
            f"{self.signatures} held",
            f"executable: {self.executable_hits} hit(s), {self.executable_misses} miss(es) "
            f"({self.compiles} compile(s)), {self.executables} held "
            f"({self.executables_total}/{self.capacity} in the process)",
        ]
        if self.recent_misses:
            lines.append("recent misses:")
            lines += [f"  {m}" for m in self.recent_misses]
        if self.divergences:
            lines.append("divergences from JAX:")
            lines += [f"  {d}" for d in self.divergences]
        return "\n".join(lines)


class _Stats:
    def __init__(self) -> None:
        self.python_calls = 0
        self.refused_in_dispatch = 0
        self.signature_hits = 0
        self.signature_misses = 0
        self.executable_hits = 0
        self.executable_misses = 0
        self.compiles = 0
        self.recent: collections.deque[str] = collections.deque(maxlen=_RECENT)
        self.divergences: collections.deque[str] = collections.deque(maxlen=64)


# --------------------------------------------------------------------------- the engine

class Engine:
    """Everything one ``jit(fun, ...)`` holds: options, plans, statistics, the dispatcher."""

    def __init__(self, fun: Callable, options: Options, signature_capacity: int) -> None:
        self.fun = fun
        self.options = options
        self.token = owner_token(fun, self)
        self._lock = threading.RLock()
        self._plans: collections.OrderedDict[tuple, Plan] = collections.OrderedDict()
        self._capacity = signature_capacity
        self._stats = _Stats()
        self.calls = itertools.count()   # every call of the jitted function (atomic step)
        # Whether the jitted function runs a frame in front of the dispatcher (and so counts
        # its calls): when asked to, and always with static arguments (for ENG-1).
        self.counted = _COUNT_CALLS[0] or bool(options.names.static_nums
                                               or options.names.static_names)
        self._generation = 0
        self._dispatcher_ref: Callable[[], Any] = lambda: None
        self._inner = self._jax_jit(options.out_shardings)
        self._inner_open: Any = None

    # ----------------------------------------------------------------- JAX's jit, inside

    def _jax_jit(self, out_shardings: Any) -> Any:
        o = self.options
        kwargs: dict[str, Any] = dict(
            **o.given_argnums, keep_unused=o.keep_unused, device=o.device, backend=o.backend, inline=o.inline,
            compiler_options=o.compiler_options)
        if o.in_shardings is not UNSPECIFIED:
            kwargs["in_shardings"] = o.in_shardings
        if out_shardings is not UNSPECIFIED:
            kwargs["out_shardings"] = out_shardings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                return internals.JAX_JIT(self.fun, **kwargs)
            except EngineRejection:
                raise
            except (ValueError, TypeError) as error:
                raise reject("ENG-4", type(error) if type(error) in (ValueError, TypeError)
                             else ValueError, f"jax.jit refuses these options: {error}") from None

    # ----------------------------------------------------------------- the dispatcher's miss

    def cache_miss(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        """Called by the C++ dispatcher for a signature it cannot run on its own."""
        with self._lock:
            self._stats.python_calls += 1
        site = Site(args, kwargs, self.options.names, abstract_ok=False)
        if site.tracers or not internals.trace_state_clean():
            # Inside another transformation (a tracer among the arguments, or one closed
            # over): jit as a primitive of the outer trace, as JAX's own jit does.
            return self._inner(*args, **kwargs), None, False
        if site.foreign:
            return self.left_to_jax(site, run=True), None, False
        try:
            plan = self.plan(site)
        except LeftToJax:
            return self.left_to_jax(site, run=True), None, False
        internals.note_python_dispatch()
        outputs = self.run(plan, site)
        return outputs, plan.fastpath, False

    def unhashable_static(self, args: tuple, kwargs: dict) -> Exception:
        """ENG-1 for a call the C++ dispatcher refused because a static argument is unhashable."""
        with self._lock:
            self._stats.refused_in_dispatch += 1
        try:
            Site(args, kwargs, self.options.names, abstract_ok=False)
        except EngineRejection as error:
            return error
        return reject("ENG-1", ValueError, "a static argument cannot be hashed")

    def left_to_jax(self, site: Site, run: bool) -> Any:
        """A call the rules do not describe, decided by JAX's own jit: run (``run``) or traced.

        When JAX refuses one of the leaves the rules do not describe (it cannot type it, or
        jit takes no such argument in a call), the refusal is ENG-2 in JAX's class and words;
        anything else the call raises (the function's own errors included) is JAX's, unchanged.
        """
        bad = _refused_leaf(site, for_call=run)
        try:
            if run:
                return self._inner(*site.args, **site.kwargs)
            return self._inner.trace(*site.args, **site.kwargs)
        except (TypeError, ValueError) as error:
            if bad is None:
                raise
            raise _foreign_argument(site, bad).as_jax(error, any_class=True) from None

    def check_donations(self, args: tuple, kwargs: dict) -> None:
        """ENG-3 and ENG-6 before every call of a function that donates, fast path included.

        JAX's dispatcher hands a donating executable a deleted array, or the same buffer
        twice, without looking; XLA then fails, and with several devices the process dies.
        The check runs in front of the dispatcher, for donating functions only.
        """
        names = self.options.names
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
                    Site(args, kwargs, names, abstract_ok=False)  # raises ENG-3, located
                key = id(leaf)
                seen[key] = seen.get(key, 0) + 1
                if donating:
                    donated.add(key)
        for key in donated:
            if seen[key] > 1:
                raise check_donated_once(Site(args, kwargs, names, True), key)

    def site(self, args: tuple, kwargs: dict, abstract_ok: bool, statics: bool = True) -> Site:
        """One call's arguments as this function sees them (``statics=False``: all dynamic,
        as an executable compiled ahead of time takes them)."""
        names = self.options.names if statics else _NO_STATICS
        return Site(args, kwargs, names, abstract_ok=abstract_ok)

    def decision(self, site: Site) -> "Decision":
        """A call to decide, stage by stage (the AOT stages run them one at a time)."""
        return Decision(site)

    def plan(self, site: Site) -> Plan:
        """The decision for ``site``'s signature (cached, or made and compiled now); raises its rejection."""
        plan = self.decision_for(site)
        if plan.rejection is not None:
            raise _again(plan)
        return plan

    def decision_for(self, site: Site) -> Plan:
        """The decision for ``site``'s signature, accepted or not: cached, or made (and compiled) now."""
        with self._lock:
            plan = self._plans.get(site.key)
            if plan is not None:
                self._plans.move_to_end(site.key)
                self._stats.signature_hits += 1
                return plan
        generation = self._generation
        reason = self._why_new(site)
        with self._lock:
            self._stats.signature_misses += 1
            self._stats.recent.append(f"signature: {reason}")
        plan = self._decide(site)
        with self._lock:
            if generation == self._generation:
                self._plans[site.key] = plan
                while len(self._plans) > self._capacity:
                    self._plans.popitem(last=False)
            if plan.entry is not None:
                plan.entry.users.add(self)
        return plan

    def _why_new(self, site: Site) -> str:
        """What makes this signature new: how it differs from the closest one seen."""
        with self._lock:
            known = list(self._plans)[-_RECENT:]
        if not known:
            return "first call"
        names = ("argument structure", "static arguments", None, "jit context (config)",
                 "context mesh", "abstract context mesh", "default device")
        best, best_count = None, None
        for key in known:
            count = sum(a != b for a, b in zip(key, site.key))
            if key[0] == site.key[0] and key[2] != site.key[2]:
                count = sum(a != b for a, b in zip(key[2], site.key[2]))
            if best_count is None or count < best_count:
                best, best_count = key, count
        assert best is not None
        for index, (a, b) in enumerate(zip(best, site.key)):
            if a == b:
                continue
            if index != 2 or best[0] != site.key[0]:
                return f"new {names[index] or 'argument types'}"
            paths = site.paths()
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    return f"{paths[i]}: {_leaf_words(y)} (was {_leaf_words(x)})"
        return "a signature evicted before"

    def _decide(self, site: Site) -> Plan:
        decision = Decision(site)
        with recording() as fired:
            try:
                self.stage_call(decision)
                self.stage_trace(decision)
                self.stage_lower(decision)
                plan = self.stage_compile(decision)
                self.stage_dispatch(decision)
            except EngineRejection as error:
                plan = Plan()
                plan.rejection = self.in_jax_words(error, site)
        plan.fired = tuple(dict.fromkeys(fired))
        return plan

    def in_jax_words(self, error: EngineRejection, site: Site) -> EngineRejection:
        """``error`` as an instance of the class JAX raises for this call, with JAX's message first.

        Only on the refusal path: JAX's own jit is taken through the same call up to the
        stage where JAX refuses it (trace, lower or compile; nothing runs), and what it
        raises lends its class and words. Where JAX raises nothing there (the engine refuses
        earlier than JAX would, or JAX only fails when running), the engine's words stand.
        """
        stage = error.stage
        if stage not in ("trace", "lower", "compile") or site.tracers:
            return error
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = self._inner.trace(*site.args, **site.kwargs)
                if stage != "trace":
                    lowered = traced.lower()
                    if stage == "compile":
                        lowered.compile()
        except EngineRejection:
            return error
        except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, whatever its class
            return error.as_jax(jax_error)
        return error

    # ----------------------------------------------------------------- the stages

    def stage_call(self, d: Decision) -> None:
        """At the call, before tracing: JIT-5, JIT-4, JIT-3, TREE-1, FIT-1 (inputs)."""
        o, site = self.options, d.site
        d.context = context_mesh()
        check_call_form(site.kwargs, o.in_shardings, d.context, o.device_or_backend)
        n = len(site.leaves)
        if o.device_or_backend:
            d.target = o.target_device()
            target = SingleDeviceSharding(d.target)
            d.jit_in = [target] * n
            d.out_tree_shardings = target
        else:
            convert = functools.partial(_leaf_to_sharding, context=d.context)
            in_tree = convert_tree(o.in_shardings, convert, "in_shardings")
            d.out_tree_shardings = convert_tree(o.out_shardings, convert, "out_shardings")
            if site.kwargs:
                d.jit_in = [UNSPECIFIED] * n   # JIT-4: in_shardings is left out here
            else:
                d.jit_in = match_in_shardings(in_tree, site.dyn_args)
            d.jit_in, d.in_layouts = layouts.split(d.jit_in)
            d.jit_in = [UNSPECIFIED if s is None else s for s in d.jit_in]
        paths = site.paths() if n else []
        for i, s in enumerate(d.jit_in):
            if s is not UNSPECIFIED:
                check_fits(s, site.shape(i), paths[i])
        for i, given in enumerate(d.in_layouts):
            layouts.check_rank(paths[i], given, site.shape(i), "argument")

    def stage_trace(self, d: Decision) -> None:
        """Tracing, then TREE-2 and FIT-1 (results)."""
        d.traced = self._trace(d)
        if internals.trace_state_clean():
            internals.check_no_escaped_tracers(d.traced)
        d.out_avals = list(d.traced.jaxpr.out_avals)
        if not all(isinstance(a, internals.ShapedArray) for a in d.out_avals):
            raise LeftToJax("a result is not an array (a token, say)")
        out_tree = d.traced.out_tree
        d.out_paths = result_paths(out_tree)
        d.out_flat = self._out_shardings(d, out_tree, d.out_avals)

    def _out_shardings(self, d: Decision, out_tree: Any, out_avals: list[Any]) -> list[Any]:
        flat = match_out_shardings(d.out_tree_shardings, out_tree)
        flat, d.out_layouts = layouts.split(flat)
        flat = [UNSPECIFIED if s is None else s for s in flat]
        paths = result_paths(out_tree)
        for s, aval, path in zip(flat, out_avals, paths):
            if s is not UNSPECIFIED:
                check_fits(s, tuple(aval.shape), path)
        for given, aval, path in zip(d.out_layouts, out_avals, paths):
            layouts.check_rank(path, given, tuple(aval.shape), "result")
        return flat

    def _trace(self, d: Decision) -> Any:
        site = d.site
        try:
            return self._inner.trace(*site.args, **site.kwargs)
        except EngineRejection:
            raise
        except Exception as error:
            if self.options.out_shardings is UNSPECIFIED:
                raise
            # JAX refused while tracing. If the function traces without out_shardings,
            # the engine's own rules say what is wrong with them.
            if self._inner_open is None:
                self._inner_open = self._jax_jit(UNSPECIFIED)
            try:
                plain = self._inner_open.trace(*site.args, **site.kwargs)
            except Exception:  # noqa: BLE001 - the function itself fails: JAX's error stands
                raise error from None
            self._out_shardings(d, plain.out_tree, list(plain.jaxpr.out_avals))
            raise

    def stage_lower(self, d: Decision) -> None:
        """Before lowering: RES-1..5, KEEP-1, DA-1..4, EXE-1, EXE-2."""
        o, site = self.options, d.site
        n = len(site.leaves)
        d.inputs = [site.input(i, d.jit_in[i]) for i in range(n)]
        processes = jax.process_count()
        d.resolved = []
        for item in d.inputs:
            d.resolved.append(resolve_input(item, processes, o.device_or_backend))
        # Layouts, after every sharding: argument by argument (LAY-1, LAY-5), then results.
        for i, given in enumerate(d.in_layouts):
            if given is not None:
                item = d.inputs[i]
                layouts.check_argument(item.path, given, site.layout(i),
                                       item.committed and site.kinds[i] == ARRAY,
                                       len(item.shape), d.jit_in[i])
        for given, s, path in zip(d.out_layouts, d.out_flat, d.out_paths):
            layouts.check_layout_devices(path, given, s)
        used = internals.used_inputs(d.traced.jaxpr)
        if used is None or len(used) != n:
            used = [True] * n
        d.kept = kept_inputs(used, o.keep_unused)
        sources = distinct_sources(
            [input_source(d.inputs[i], d.resolved[i]) for i in d.kept],
            [Source(s, f"out_shardings for {p}", p) for s, p in zip(d.out_flat, d.out_paths)])
        assignment, d.count = device_assignment(sources, d.context)
        check_has_devices(assignment, d.context)
        assert assignment is not None
        d.assignment = tuple(assignment)
        d.final = replicate_scalars(d.resolved, [len(i.shape) for i in d.inputs], d.assignment)
        for path, s in [*((d.inputs[i].path, d.final[i]) for i in d.kept),
                        *zip(d.out_paths, d.out_flat)]:
            check_tile_count(s, path)
            check_iota_tiles(s, path)
        d.committed = results_committed(d.context, d.count,
                                        [d.resolved[i] for i in d.kept], d.out_flat)

    def stage_dispatch(self, d: Decision, inputs: list[Input] | None = None) -> None:
        """Handing the arguments over: RES-5 under device=/backend= (kept inputs only)."""
        if not self.options.device_or_backend:
            return
        inputs = d.inputs if inputs is None else inputs
        for i in d.kept:
            check_reused_replica(inputs[i], d.target)

    def executable_key(self, d: Decision) -> tuple:
        """The placement class of this call: what the executable depends on."""
        site = d.site
        # Every argument as the program types it: shape, dtype, weak type, memory space, and
        # the type's sharding where its mesh has Explicit axes (the program can see those).
        avals = tuple((tuple(a.shape), a.dtype, bool(getattr(a, "weak_type", False)),
                       str(getattr(a, "memory_space", "")), _explicit_type(a))
                      for a in d.traced.jaxpr.in_avals)
        kept_classes = tuple(_input_class(d.resolved[i], d.final[i], site.shape(i),
                                          d.assignment) for i in d.kept)
        out_classes = tuple(
            "open" if s is UNSPECIFIED else placement_class(s, tuple(a.shape))
            for s, a in zip(d.out_flat, d.out_avals))
        # The program itself stands for everything that shapes it (config, context mesh);
        # where it runs is the device assignment.
        program = hashlib.sha1(internals.program_text(d.traced.jaxpr).encode()).hexdigest()
        # Layouts: those jit's options give, and the committed arguments' own (JAX compiles
        # a committed argument in a non-default layout into an executable of its own).
        n = len(site.leaves)
        given_in = [layouts.layout_key(x, len(site.shape(i)))
                    for i, x in enumerate(d.in_layouts)] if d.in_layouts else []
        held = [site.layout(i) if d.inputs[i].committed else None for i in range(n)]
        given_out = [layouts.layout_key(x, len(a.shape))
                     for x, a in zip(d.out_layouts, d.out_avals)] if d.out_layouts else []
        layout_part = (tuple(given_in), tuple(held), tuple(given_out))
        if not any(given_in) and not any(held) and not any(given_out):
            layout_part = None
        return (site.treedef, site.key[1], avals, internals.program_context(), program,
                self.options.key, d.kept, kept_classes, out_classes,
                tuple(dev.id for dev in d.assignment), layout_part,
                tuple(sorted((d.compiler_options or {}).items())))

    def stage_compile(self, d: Decision) -> Plan:
        """The executable (from the cache, or compiled), the results' shardings (OUT-1..3), how to run."""
        self._check_input_recovery(d)
        key = self.executable_key(d)
        entry, compiled_here = CACHE.get_or_compile(
            self.token, key, functools.partial(self._compile, d, key))
        with self._lock:
            if compiled_here:
                self._stats.executable_misses += 1
                self._stats.compiles += 1
                self._stats.recent.append(f"executable: {self._why_compiled(key)}")
            else:
                self._stats.executable_hits += 1
        return self._plan_for(d, entry, compiled_here)

    def _check_input_recovery(self, d: Decision) -> None:
        """OUT-2 on the inputs: a given GSPMDSharding that cannot be re-read over the first
        given mesh fails JAX after compiling; the engine refuses before compiling."""
        in_avals = list(d.traced.jaxpr.in_avals)
        kept_values = [Value.of_aval(in_avals[i]) for i in d.kept]
        kept_final = concrete_inputs([d.final[i] for i in d.kept], d.assignment)
        try:
            recover_shardings(kept_final, kept_values, kept_final, kept_values, None)
        except EngineRejection as error:
            raise error.at(d.inputs[d.kept[0]].path) from None

    def _why_compiled(self, key: tuple) -> str:
        others = [e.key for e in CACHE.entries(self.token) if e.key != key]
        if not others:
            return "first compile of this function"
        names = ("argument structure", "static arguments", "argument types", "jit config",
                 "traced program", "options", "kept inputs", "input placements",
                 "result placements", "device assignment", "layouts",
                 "compiler options")
        closest = min(others, key=lambda k: sum(a != b for a, b in zip(k, key)))
        differing = [names[i] for i, (a, b) in enumerate(zip(closest, key)) if a != b]
        return "new " + ", ".join(differing)

    def _compile(self, d: Decision, key: tuple) -> Entry:
        start = time.perf_counter()
        try:
            lowered = d.traced.lower()
        except EngineRejection:
            raise
        except ValueError as error:
            if "incompatible devices" in str(error):
                raise reject("DA-1", ValueError, f"{error}") from None
            raise
        try:
            compiled = lowered.compile(d.compiler_options)
        except ValueError as error:
            if type(error).__name__ == "IndivisibleError":
                raise reject("OUT-2", ValueError, str(error),
                             d.out_paths[0] if d.out_paths else "result",
                             jax_error="IndivisibleError") from None
            raise
        facts = internals.executable_facts(compiled)
        return Entry(key, self.token, facts, time.perf_counter() - start, d.context is not None)

    # ----------------------------------------------------------------- results and running

    def _plan_for(self, d: Decision, entry: Entry, compiled_here: bool) -> Plan:
        site = d.site
        plan = Plan()
        n = len(site.leaves)
        plan.num_inputs = n
        plan.in_paths = tuple(site.paths()) if n else ()
        plan.in_shardings = tuple(d.final)
        plan.out_paths = tuple(d.out_paths)
        plan.device_assignment = d.assignment
        plan.num_devices = d.count
        plan.kept = d.kept
        plan.out_committed = (d.committed,) * len(d.out_paths)
        plan.transfers = tuple(item.path for item, s in zip(d.inputs, d.final) if moves(item, s))
        plan.donated = donated_leaves(site.positions, self.options.names, site.dyn_args,
                                      site.dyn_kwargs)
        plan.entry = entry
        plan.compiled_here = compiled_here
        plan.out_tree = d.traced.out_tree
        facts = entry.facts
        exe_inputs, outs = self._recover(d, facts)
        plan.exe_inputs = tuple(exe_inputs)
        if compiled_here:
            theirs = list(facts.out_shardings)
            self._compare(d, outs, theirs, exe_inputs, facts)
            outs = theirs
        plan.out_shardings = tuple(outs)
        plan.conversions = self._conversions(d, facts)
        plan.out_labels = [None] * len(outs) if compiled_here else \
            self._out_labels(d, facts, outs, plan.out_committed)
        # jax 0.10.2 hands back a zero-size result split by its sharding with unsplit
        # per-device buffers (np.asarray of it fails); the engine makes such results anew,
        # empty and split as their sharding says, on the Python path.
        plan.empty_results = tuple(
            j for j, (s, aval) in enumerate(zip(outs, d.out_avals))
            if 0 in tuple(aval.shape) and tuple(s.shard_shape(tuple(aval.shape)))
            != tuple(aval.shape))
        plan.fast_ok = facts.fast and not plan.empty_results and all(
            c is None or c[2] for c in plan.conversions)
        return plan

    def _recover(self, d: Decision, facts: Any) -> tuple[list[Any], list[Any]]:
        """This call's input and result shardings, over the executable's placements."""
        site = d.site
        in_avals = list(d.traced.jaxpr.in_avals)
        kept_values = [Value.of_aval(in_avals[i]) for i in d.kept]
        kept_final = concrete_inputs([d.final[i] for i in d.kept], d.assignment)
        placed_in = []
        for i, s in zip(d.kept, kept_final):
            if s is UNSPECIFIED:
                chosen = facts.input_sharding(i)
                s = raw(chosen, len(site.shape(i))) if chosen is not None else UNSPECIFIED
            placed_in.append(s)
        recovered = recover_shardings(placed_in, kept_values, kept_final, kept_values, None)
        # A result whose type has unreduced or reduced axes comes back as its type says,
        # which is what JAX's executable reports: nothing to re-read.
        chosen_out = [s if is_partial(getattr(a, "sharding", None)) else raw(s, len(a.shape))
                      for s, a in zip(facts.out_shardings, d.out_avals)]
        placed_out = compiled_results(d.out_flat, chosen_out, d.assignment)
        out_values = [Value.of_aval(a) for a in d.out_avals]
        try:
            outs = recover_shardings(placed_out, out_values, recovered, kept_values, d.context)
        except EngineRejection as error:
            raise error.at(d.out_paths[0] if d.out_paths else "result") from None
        outs = single_device_results(outs, d.assignment)
        outs = [_typed_result(o, s, aval) for o, s, aval in zip(outs, d.out_flat, d.out_avals)]
        exe_inputs: list[Any] = [None] * len(site.leaves)
        for i, s in zip(d.kept, single_device_results(recovered, d.assignment)):
            exe_inputs[i] = s
        return exe_inputs, outs

    def _compare(self, d: Decision, mine: list[Any], theirs: list[Any], exe_inputs: list[Any],
                 facts: Any) -> None:
        """Record where the engine's own prediction differs from what JAX compiled."""
        problems = []
        for path, a, b, aval in zip(d.out_paths, mine, theirs, d.out_avals):
            shape = tuple(aval.shape)
            if type(a) is not type(b) or not placement_equivalent(a, b, shape) or (
                    isinstance(a, NamedSharding) and (a.mesh.axis_names, a.mesh.axis_sizes)
                    != (b.mesh.axis_names, b.mesh.axis_sizes)):
                problems.append(f"{path}: engine {a}, JAX {b}")
        kept = sorted(i - facts.num_consts for i in facts.kept if i >= facts.num_consts)
        if tuple(kept) != d.kept:
            problems.append(f"kept inputs: engine {d.kept}, JAX {tuple(kept)}")
        if theirs:
            assignment = devices_of(theirs[0])
            if tuple(assignment) != d.assignment:
                problems.append(f"device assignment: engine {[x.id for x in d.assignment]}, "
                                f"JAX {[x.id for x in assignment]}")
        if problems:
            with self._lock:
                self._stats.divergences.extend(problems)

    def _conversions(self, d: Decision, facts: Any) -> list[Any]:
        """For each flat input: None (as it is) or (how, sharding, fast path keeps it right, aval, order)."""
        site = d.site
        out: list[Any] = [None] * len(site.leaves)
        for i in d.kept:
            if site.kinds[i] == ARRAY and d.inputs[i].committed:
                out[i] = _conversion(site.leaves[i], facts, i)
        return out

    def _out_labels(self, d: Decision, facts: Any, outs: list[Any],
                    committed: tuple[bool, ...]) -> list[Any]:
        """For each result: None (as the executable labels it) or (sharding, aval, order)."""
        labels: list[Any] = []
        for j, (mine, aval) in enumerate(zip(outs, d.out_avals)):
            theirs = facts.out_shardings[j] if j < len(facts.out_shardings) else None
            if theirs is not None and mine == theirs and aval == facts.out_avals[j]:
                labels.append(None)
                continue
            order = _reorder(internals.addressable_devices(theirs),
                             internals.addressable_devices(mine)) if theirs is not None else None
            labels.append((mine, aval, order, committed[j] if j < len(committed) else True))
        return labels

    def run(self, plan: Plan, site: Site) -> Any:
        """Run ``plan`` on ``site``'s arguments (the Python path)."""
        return self._execute(plan, site.leaves, site.treedef, plan.conversions)

    def run_aot(self, plan: Plan, args: tuple, kwargs: dict, leaves: list[Any],
                treedef: Any) -> Any:
        """Run an AOT-compiled plan on arguments AOT-1..3 accepted."""
        entry = plan.entry
        assert entry is not None
        facts = entry.facts
        conversions: list[Any] = [None] * len(leaves)
        for i in plan.kept:
            leaf = leaves[i]
            if type(leaf) is internals.ArrayImpl and leaf._committed:
                conversions[i] = _conversion(leaf, facts, i)
        return self._execute(plan, leaves, treedef, conversions)

    def _execute(self, plan: Plan, leaves: list[Any], treedef: Any,
                 conversions: list[Any]) -> Any:
        entry = plan.entry
        assert entry is not None
        if any(c is not None for c in conversions):
            leaves = list(leaves)
            for i, conversion in enumerate(conversions):
                if conversion is None:
                    continue
                how, sharding, _fast, aval, order = conversion
                if how == "relabel":
                    # The same buffers, labelled with the executable's sharding: no copy.
                    buffers = internals.single_device_arrays(leaves[i])
                    if order is not None:
                        buffers = [buffers[k] for k in order]
                    leaves[i] = internals.array_over(aval, sharding, buffers, True)
                else:
                    # Another placement: move it, as jit does (never a buffer on the wrong device).
                    donate = plan.donated[i] if i < len(plan.donated) else False
                    leaves[i] = jax.device_put(leaves[i], sharding, donate=donate)
        flat, out_tree = internals.execute(entry.facts, leaves, treedef)
        outputs = tree_util.tree_unflatten(out_tree, flat)
        if entry.out_committed is None:
            entry.out_committed = tuple(bool(getattr(x, "_committed", True)) for x in flat)
        if plan.compiled_here and entry.out_committed != plan.out_committed:
            with self._lock:
                self._stats.divergences.append(
                    f"committed: engine {plan.out_committed}, JAX {entry.out_committed}")
            plan.out_committed = entry.out_committed
            plan.out_labels = [None if label is None else (*label[:3], c)
                               for label, c in zip(plan.out_labels, plan.out_committed)]
        if any(label is not None for label in plan.out_labels):
            flat = list(flat)
            for j, label in enumerate(plan.out_labels):
                if label is None:
                    continue
                sharding, aval, order, committed = label
                buffers = internals.single_device_arrays(flat[j])
                if order is not None:
                    buffers = [buffers[k] for k in order]
                flat[j] = internals.array_over(aval, sharding, buffers, committed)
            outputs = tree_util.tree_unflatten(out_tree, flat)
        if not plan.compiled_here and entry.out_committed != plan.out_committed:
            # One executable serves uncommitted and committed arguments alike (an open input
            # on a one-device program): whether results are committed is this call's (EXE-2).
            flat = [internals.array_over(x.aval, x.sharding, internals.single_device_arrays(x), c)
                    if type(x) is internals.ArrayImpl and x._committed != c else x
                    for x, c in zip(flat, plan.out_committed)]
            outputs = tree_util.tree_unflatten(out_tree, flat)
        if plan.empty_results:
            flat = list(flat)
            for j in plan.empty_results:
                flat[j] = _empty_result(flat[j])
            outputs = tree_util.tree_unflatten(out_tree, flat)
        if plan.fastpath is None and plan.fast_ok:
            plan.fastpath = internals.fastpath_data(entry.facts, entry.facts.out_tree, flat,
                                                    plan.num_inputs)
        return outputs

    # ----------------------------------------------------------------- cache control

    def forget(self, entry: Entry) -> None:
        """An executable left the cache: drop the plans that use it, and the C++ signatures."""
        with self._lock:
            gone = [k for k, p in self._plans.items() if p.entry is entry]
            for k in gone:
                del self._plans[k]
        dispatcher = self._dispatcher_ref()
        if dispatcher is not None:
            dispatcher._clear_cache()

    def clear_cache(self) -> None:
        """Drop this function's signatures, plans and executables (other functions keep theirs)."""
        with self._lock:
            self._generation += 1
            self._plans.clear()
        dispatcher = self._dispatcher_ref()
        if dispatcher is not None:
            dispatcher._clear_cache()
        CACHE.drop_owner(self.token)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                self._inner.clear_cache()
            except Exception:  # noqa: BLE001 - JAX's own caches are a courtesy
                pass

    def cache_info(self) -> CacheInfo:
        dispatcher = self._dispatcher_ref()
        s = self._stats
        with self._lock:
            calls = _count(self.calls) if self.counted else None
            return CacheInfo(
                calls=calls,
                dispatch_hits=None if calls is None else max(
                    0, calls - s.python_calls - s.refused_in_dispatch),
                dispatch_entries=dispatcher._cache_size() if dispatcher is not None else 0,
                python_calls=s.python_calls, refused_in_dispatch=s.refused_in_dispatch,
                signature_hits=s.signature_hits, signature_misses=s.signature_misses,
                signatures=len(self._plans),
                executable_hits=s.executable_hits, executable_misses=s.executable_misses,
                compiles=s.compiles, executables=CACHE.count(self.token),
                executables_total=len(CACHE), capacity=CACHE.capacity,
                recent_misses=list(s.recent), divergences=list(s.divergences))


def _input_class(resolved: Any, final: Any, shape: tuple[int, ...], assignment: tuple) -> Any:
    """An input's placement class in the executable key (CACHE-12 C3): an input left open
    that jit places itself is in the class of where it goes — the device of a one-device
    program, or replicated over the devices for a scalar (EXE-1, ``final``)."""
    if resolved is UNSPECIFIED and len(assignment) == 1:
        resolved = SingleDeviceSharding(assignment[0])
    elif resolved is UNSPECIFIED and len(shape) == 0:
        resolved = final
    return "open" if resolved is UNSPECIFIED else placement_class(resolved, shape)


def _empty_result(array: Any) -> Any:
    """A zero-size result made anew: empty per-device buffers of its shard shape, same type and flag."""
    sharding = array.sharding
    shard = sharding.shard_shape(array.shape)
    host = np.zeros(shard, array.dtype)
    buffers = [jax.device_put(host, d) for d in internals.addressable_devices(sharding)]
    return internals.array_over(array.aval, sharding, buffers, array._committed)


def _explicit_type(aval: Any) -> Any:
    """The sharding an argument's type carries when its mesh has Explicit axes, else None."""
    typed = getattr(aval, "sharding", None)
    mesh = getattr(typed, "mesh", None)
    if mesh is None or jax.sharding.AxisType.Explicit not in getattr(mesh, "axis_types", ()):
        return None
    return typed


def _count(counter: itertools.count) -> int:
    """How many steps ``counter`` has taken (itertools.count shows it only in its repr)."""
    return int(repr(counter)[len("count("):-1])


def _conversion(leaf: Any, facts: Any, i: int) -> Any:
    """How to hand a committed array to the executable: None (as it is), relabelled, or moved.

    The tuple says how, to which sharding, whether the C++ fast path (which hands over the
    buffers positionally, or moves arrays on another number of devices) stays right for
    it, the executable's input type, and the buffer order.
    """
    want = facts.input_sharding(i)
    if want is None:
        return None
    held, shape = leaf.sharding, tuple(leaf.shape)
    if jax_equivalent(held, want, len(shape)):
        return None
    if placement_equivalent(held, want, shape):
        same_order = devices_of(held) == devices_of(want)
        order = _reorder(internals.addressable_devices(held), internals.addressable_devices(want))
        return ("relabel", want, same_order, facts.input_aval(i), order)
    fast = num_devices(held) != num_devices(want) or num_devices(want) == 1
    return ("move", want, fast, None, None)


def _again(plan: Plan) -> EngineRejection:
    """A cached rejection, fresh, with the rules that fired on the way to it."""
    assert plan.rejection is not None
    error = plan.rejection.again()
    error.fired = plan.fired  # type: ignore[attr-defined]
    return error


def _reorder(have: tuple, want: tuple) -> list[int] | None:
    """Indices that put buffers ordered by ``have`` in the order of ``want`` (None: same)."""
    if have == want:
        return None
    position = {d: k for k, d in enumerate(have)}
    return [position[d] for d in want]


def _typed_result(out: Any, given: Any, aval: Any) -> Any:
    """A result left open whose type carries Explicit mesh axes comes back as its type says.

    Under Explicit axes jit takes a result's sharding from its type (the spec the type
    carries, over the type's mesh made concrete) when the compiler placed it so; the jit-call
    semantics model Auto axes only, and this is the engine's reading of JAX for the rest.
    """
    typed = getattr(aval, "sharding", None)
    mesh = getattr(typed, "mesh", None)
    if given is not UNSPECIFIED or mesh is None or mesh.empty or not isinstance(
            out, (NamedSharding, SingleDeviceSharding, internals.GSPMDSharding)):
        return out
    kinds = set(mesh.axis_types)
    if jax.sharding.AxisType.Explicit not in kinds or jax.sharding.AxisType.Manual in kinds:
        return out
    devices = devices_of(out)
    if mesh.size != len(devices):
        return out
    candidate = NamedSharding(concrete_mesh(mesh, tuple(devices)), typed.spec,
                              memory_kind=out.memory_kind)
    ndim = len(aval.shape)
    return candidate if hlo_equal(hlo(candidate, ndim), hlo(out, ndim)) else out


def _leaf_to_sharding(leaf: Any, which: str, context: Any) -> Any:
    return leaf_to_sharding(leaf, context, which)


def _leaf_words(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 4 and hasattr(key[0], "shape"):
        aval, sharding, committed, layout = key
        return (f"{aval.str_short()} on {sharding}" + ("" if committed else " (uncommitted)")
                + ("" if layout is None else f" in {layouts.layout_text(layout)}"))
    return repr(key)


# --------------------------------------------------------------------------- jit


def jit(fun: Callable | Any = _NOT_GIVEN, /, *, in_shardings: Any = _NOT_GIVEN,
        out_shardings: Any = _NOT_GIVEN, static_argnums: Any = None,
        static_argnames: Any = None, donate_argnums: Any = None, donate_argnames: Any = None,
        keep_unused: bool = False, device: Any = None, backend: str | None = None,
        inline: bool = False, compiler_options: dict[str, Any] | None = None) -> Any:
    """``jax.jit`` with the jit-call semantics enforced and the shardlaw cache policy.

    Takes jax.jit's arguments and returns a function that behaves like ``jax.jit``'s, plus
    ``.explain(*args, **kwargs)`` (the verdict and the rules that decided it, without
    running), ``.cache_info()`` and ``.clear_cache()``. Used without ``fun`` it is a
    decorator factory: ``@jit(static_argnums=0)``.
    """
    if fun is _NOT_GIVEN:
        return functools.partial(
            jit, in_shardings=in_shardings, out_shardings=out_shardings,
            static_argnums=static_argnums, static_argnames=static_argnames,
            donate_argnums=donate_argnums, donate_argnames=donate_argnames,
            keep_unused=keep_unused, device=device, backend=backend, inline=inline,
            compiler_options=compiler_options)
    if not callable(fun):
        raise _options_in_jax_words(
            reject("ENG-4", TypeError, f"jit expects a callable, got {type(fun)}: {_short(fun)}"),
            fun, in_shardings, out_shardings, {})
    if device is not None or backend is not None:
        warnings.warn(
            "backend and device argument on jit is deprecated. You can use "
            '`jax.device_put(..., jax.local_devices(backend="cpu")[0])` on the inputs to the '
            "jitted function to get the same behavior.", DeprecationWarning, stacklevel=2)
    given = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                 donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                 keep_unused=keep_unused, device=device, backend=backend, inline=inline,
                 compiler_options=compiler_options)
    try:
        options = Options(fun, in_shardings, out_shardings, static_argnums, static_argnames,
                          donate_argnums, donate_argnames, keep_unused, device, backend,
                          inline, compiler_options)
    except EngineRejection as error:
        raise _options_in_jax_words(error, fun, in_shardings, out_shardings, given) from None
    engine = Engine(fun, options, _SIGNATURE_CAPACITY)
    return _wrap(engine)


class JittedFunction:
    """What ``jit(fun)`` returns: JAX's C++ dispatcher, with the jitted function's methods.

    Calling it calls the dispatcher itself (``__call__`` is a property that hands the
    dispatcher over, so a known signature runs in C++ with no Python frame in between).
    Everything the engine needs lives in slots, never in the instance's ``__dict__``:
    ``functools.wraps``, ``jax.grad``, ``jax.vmap`` and ``jax.jit`` copy a wrapped
    function's ``__dict__`` onto their wrapper, and a ``lower`` copied that way would lower
    the engine's function in place of the wrapper's (``jax.jit(jax.grad(f)).lower(x)``
    would compile ``f``). No reference cycle is made, so a jitted function, its engine and
    what its function closes over go as soon as the last reference does (as jax.jit's).
    """

    __slots__ = ("_call", "_dispatcher", "_engine", "_methods", "__dict__", "__weakref__")
    __call__ = property(operator.attrgetter("_call"))

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # As a class attribute it binds like a method, as jax.jit's functions do.
        return self if instance is None else types.MethodType(self, instance)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.trace(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.lower(*args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.eval_shape(*args, **kwargs)

    def explain(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.explain(*args, **kwargs)

    def cache_info(self) -> CacheInfo:
        return self._engine.cache_info()

    def clear_cache(self) -> None:
        self._engine.clear_cache()

    def _cache_size(self) -> int:
        """How many signatures the C++ dispatcher holds (as jax.jit's ``_cache_size``)."""
        return self._dispatcher._cache_size()

    def _clear_cache(self) -> None:
        self._engine.clear_cache()

    def __getstate__(self) -> Any:
        return self._dispatcher.__getstate__()

    def __repr__(self) -> str:
        # Written as jax.jit's functions are, which logs and tests already read.
        try:
            return f"<PjitFunction of {self.__wrapped__!r}>"
        except Exception:  # noqa: BLE001 - a repr must not fail, as jax.jit's does not
            return "<PjitFunction>"


def _options_in_jax_words(error: EngineRejection, fun: Callable, in_shardings: Any,
                          out_shardings: Any, given: dict[str, Any]) -> EngineRejection:
    """A refusal of jit's options, in the class and words of JAX's own refusal of them."""
    if in_shardings is not _NOT_GIVEN:
        given["in_shardings"] = in_shardings
    if out_shardings is not _NOT_GIVEN:
        given["out_shardings"] = out_shardings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            internals.JAX_JIT(fun, **given)
    except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, whatever its class
        return error.as_jax(jax_error)
    return error


def _wrap(engine: Engine) -> Any:
    """The jitted function: JAX's C++ dispatcher (behind a counting frame when asked), with methods.

    The frame (when counting is on, :func:`count_calls`, or the function has static
    arguments) counts every call — JAX's dispatcher counts no hits, and ``cache_info``
    reports them exactly — and turns the dispatcher's own refusal of an unhashable static
    argument, raised before any engine code runs, into ENG-1 with the argument's path.
    Everything else is the dispatcher's: a known signature runs in C++.
    """
    o = engine.options
    name = internals.fun_name(engine.fun)
    dispatcher = internals.make_dispatcher(name, engine.fun, engine.cache_miss,
                                           o.names.static_nums, o.names.static_names,
                                           o.dispatch_key())
    dispatcher._fun = engine.fun  # what JAX's NaN checker reads off a dispatcher
    engine._dispatcher_ref = _weak(dispatcher)
    call: Any = dispatcher
    donates = bool(o.names.donate_nums or o.names.donate_names)
    if engine.counted or donates:
        calls = engine.calls
        check = engine.check_donations if donates else None

        def call(*args: Any, **kwargs: Any) -> Any:
            next(calls)
            if check is not None:
                check(args, kwargs)
            try:
                return dispatcher(*args, **kwargs)
            except ValueError as error:
                if type(error) is ValueError and str(error).startswith(_UNHASHABLE):
                    raise engine.unhashable_static(args, kwargs) from None
                raise

    jitted = JittedFunction()
    jitted._call = call
    jitted._dispatcher = dispatcher
    jitted._engine = engine
    jitted._methods = aot.Methods(engine)
    internals.wraps(engine.fun, jitted)   # name, docstring, __wrapped__, as jax.jit gives them
    return jitted


def count_calls(enabled: bool = True) -> None:
    """Whether functions jitted from now on count every call (off by default; also
    ``SHARDLAW_ENGINE_COUNT_CALLS=1``).

    Counting runs one Python frame in front of JAX's C++ dispatcher (about 0.2–0.4 µs a
    call), and ``cache_info()`` then reports dispatch hits exactly. Without it a known
    signature runs with nothing in front of the dispatcher, as ``jax.jit``'s does, and
    ``cache_info()`` reports the calls that reached Python but not the C++ hits. A function
    with static arguments always has the frame (and counts): it turns the dispatcher's own
    refusal of an unhashable static argument into ENG-1 with the argument's path.
    """
    _COUNT_CALLS[0] = bool(enabled)


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


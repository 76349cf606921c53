"""When ``jax.jit`` (jax 0.10.2) traces, lowers and compiles again, and the shardlaw cache policy.

A call of a jitted function is answered by the first of six caches that holds it; each
cache is keyed by an equivalence written here as a rule (``CACHE-n``):

======== ============================================ ===================================
level    JAX's cache                                  JAX's counter (``test_util``)
======== ============================================ ===================================
dispatch the C++ fast path (``PjitFunctionCache``)    ``count_pjit_cpp_cache_miss``
params   ``pjit._infer_params_cached`` (per wrapper)  (none; ``cache_info()``)
trace    ``partial_eval.trace_to_jaxpr``              ``count_jit_tracing_cache_miss``
lowering ``pjit._pjit_lower``                         ``count_jit_compilation_cache_miss``
module   ``pxla._cached_lowering_to_hlo``             ``count_jit_and_pmap_lowerings``
compile  ``pxla._cached_compilation`` (XLA)           (backend compile events)
======== ============================================ ===================================

A dispatch hit ends the call; otherwise the params cache is asked, and only its miss asks
the trace cache; every dispatch miss asks the lowering cache, and only a lowering miss asks
the module and compile caches. JAX's counter names mislead twice: the "compilation cache
miss" counter counts lowering misses (a new ``MeshComputation``, compiled once), and the
"lowerings" counter counts module misses.

:func:`explain_cache` runs a sequence of :class:`CallSite` values (a call description, the
function object and the jit wrapper it goes through) through the model and returns, per
call, which levels hit and which missed, and for each miss the key difference against the
closest earlier entry. :func:`policy_classes` says what shardlaw's policy (CACHE-12) would
compile instead: one executable per placement class.

Calls that the jit-call semantics reject are shown and leave the caches as they were (JAX
keeps a fall-back entry on its dispatch path; the model does not follow errors). The model
covers calls of concrete arguments; ``.lower()``/``.trace()`` and AOT calls are not modelled.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Sequence

from .call import Arg, Call, Verdict, check_call
from ..placement.equivalence import hlo_equal, jax_equivalent, placement_equivalent
from ..core.hlo import Replicated
from .layouts import Layout
from .assignment import replicate_scalars
from .pipeline import jit_call, jit_shardings
from .layouts import given_layouts
from .matching import match_out_shardings
from .options import jit_context_mesh
from .resolution import Input, resolve_input
from ..placement.blocks import devices_indices_map, is_fully_replicated, to_hlo
from ..core.pytree import is_container, leaves_with_paths, structure
from ..core.rules import Failure, Rejection, reject, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, AxisType, DeviceList, Mesh, PartitionSpec

__all__ = [
    "CallSite", "CacheRow", "CacheTable", "PolicyRow", "LEVELS", "COUNTERS",
    "explain_cache", "policy_classes", "policy_key", "placement_class",
    "describe_cache_table", "differences", "dispatch_cache", "dispatch_equal", "dispatch_signature",
    "abstract_value", "params_key", "trace_key", "lowering_key", "semantically_equal",
    "module_key", "compile_key", "check_sequence",
]

LEVELS = ("dispatch", "params", "trace", "lowering", "module", "compile")

# The JAX counter (jax._src.test_util) or event that counts each level's misses.
COUNTERS = {
    "dispatch": "count_pjit_cpp_cache_miss",
    "params": "pjit._infer_params_cached.cache_info().misses",
    "trace": "count_jit_tracing_cache_miss",
    "lowering": "count_jit_compilation_cache_miss",
    "module": "count_jit_and_pmap_lowerings",
    "compile": "/jax/core/compile/backend_compile_duration events",
}

# Narrowing of 64-bit types: JAX runs with x64 off unless told otherwise.
_CANONICAL = {"float64": "float32", "int64": "int32", "uint64": "uint32",
              "complex128": "complex64"}


# =========================================================================== call sites

@dataclasses.dataclass(frozen=True)
class CallSite:
    """One call in a sequence: the call, and names for its function object and jit wrapper.

    Sites with the same ``function`` call the same Python function object; sites with the
    same ``wrapper`` go through the same ``jax.jit(...)`` object, so they share its options.
    """

    call: Call
    function: str = "f"
    wrapper: str = "w"

    def __post_init__(self) -> None:
        # A call site holds a call description (CALL-0) and names its function object and
        # wrapper by strings (CACHE-0), so that a site that exists can be run and shown.
        check_call(isinstance(self.call, Call), "a call site's call", "a Call", self.call)
        for part in ("function", "wrapper"):
            name = getattr(self, part)
            if type(name) is not str:
                raise reject(NotASiteName(part, name, type(name).__name__))

    def __repr__(self) -> str:
        return f"<{self.function} via {self.wrapper}>"

    @functools.cached_property
    def facts(self) -> "_Facts":
        """What the cache keys read from this call, read once."""
        return _Facts.of(self.call)


@dataclasses.dataclass(frozen=True)
class BadSequence(Failure, rule="CACHE-0"):
    template = "call {index}: {problem}"
    index: int
    problem: str


@dataclasses.dataclass(frozen=True)
class NotASequence(Failure, rule="CACHE-0", error=TypeError):
    template = "a call sequence must be an iterable of CallSite values, got {value!r} ({kind})"
    value: Any
    kind: str


@dataclasses.dataclass(frozen=True)
class NotACallSite(Failure, rule="CACHE-0", error=TypeError):
    template = "call {index}: expected a CallSite, got {value!r}"
    index: int
    value: Any


@dataclasses.dataclass(frozen=True)
class NotASiteName(Failure, rule="CACHE-0", error=TypeError):
    template = "a call site's {part} must be a name (a str), got {value!r} ({kind})"
    part: str
    value: Any
    kind: str


def _read_sequence(sites: Any) -> list:
    """The sites of a call sequence, read once (a generator is not asked twice), each a
    :class:`CallSite`."""
    if isinstance(sites, (str, bytes, bytearray, dict)) or not isinstance(sites, Iterable):
        raise reject(NotASequence(sites, type(sites).__name__))
    read: list[CallSite] = []
    iterator = iter(sites)
    while True:
        try:
            site = next(iterator)
        except StopIteration:
            return read
        except Exception:  # an iterable that fails while it is read
            raise reject(NotASequence(sites, type(sites).__name__)) from None
        # Refused at the first entry that is not a call site, before the rest is read (a
        # device list of a million entries is not walked to the end).
        if not isinstance(site, CallSite):
            raise reject(NotACallSite(len(read), site))
        read.append(site)


@rule("CACHE-0", mirrors="(input checking of a call sequence; JAX has no such value)")
def check_sequence(sites: Sequence[CallSite]) -> list[CallSite]:
    """A call sequence holds call sites of concrete arguments, and each jit wrapper wraps one function with one set of options.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Out
    >>> call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)))
    >>> kept = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)),
    ...             options=JitOptions(keep_unused=True))
    >>> check_sequence([CallSite(call, "f", "w"), CallSite(kept, "f", "w")])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [CACHE-0]: call 1: wrapper 'w' was made with other options (call 0 went through it with JitOptions(...))
    >>> explain_cache(7)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [CACHE-0]: a call sequence must be an iterable of CallSite values, got 7 (int)

    The sites are returned as a list, read once.
    """
    sites = _read_sequence(sites)
    wrappers: dict[str, tuple[int, CallSite]] = {}
    for index, site in enumerate(sites):
        call = site.call
        if call.aot_args is not None or any(
                isinstance(a, Arg) and a.kind == "abstract"
                for _, a in leaves_with_paths((call.args, call.kwargs))):
            raise reject(BadSequence(index, "the cache model covers calls of concrete arguments, "
                                            "not .lower() or AOT calls"))
        first = wrappers.setdefault(site.wrapper, (index, site))
        earlier, other = first
        if other.function != site.function:
            raise reject(BadSequence(index, f"wrapper {site.wrapper!r} wraps {other.function!r} "
                                            f"(call {earlier}), not {site.function!r}"))
        if other.call.options != call.options:
            raise reject(BadSequence(index, f"wrapper {site.wrapper!r} was made with other "
                                            f"options (call {earlier} went through it with "
                                            "JitOptions(...))"))
    return sites


# =========================================================================== key parts

@dataclasses.dataclass(frozen=True)
class Part:
    """One component of a cache key: what it is, the value compared, and what to show."""

    what: str
    value: Any
    shown: Any = dataclasses.field(default=None, compare=False, hash=False)


@dataclasses.dataclass(frozen=True)
class Placed:
    """A sharding with the shape it places (how a sharding part of a key is shown)."""

    sharding: Any
    shape: tuple[int, ...]


Key = tuple  # of Part

@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the keys read from one call: flat inputs, statics, shardings as jit resolves them."""

    flat: tuple                 # (path, Arg) per flat dynamic input
    dynamic: Any                # the dynamic arguments' structure
    statics: tuple              # (path, value) per static argument
    static_positions: tuple     # (static_argnums, static_argnames) as the wrapper has them
    resolved: tuple             # per flat input: the sharding lowering gets (or UNSPECIFIED)
    outs: tuple                 # (path, Out, sharding or UNSPECIFIED) per flat result
    donated: tuple              # per flat input: donated?
    context: tuple              # (context mesh as set, default device)

    @classmethod
    def of(cls, call: Call) -> "_Facts":
        n = call.normal
        _, jit_in, out_tree = jit_shardings(n, jit_context_mesh(call.context_mesh))
        resolved = tuple(_resolved(Input(path, arg, s), call.process_count, n.device_or_backend)
                         for (path, arg), s in zip(n.flat_in, jit_in))
        out_flat = match_out_shardings(out_tree, n.results)
        outs = tuple((path, o, UNSPECIFIED if s is None else s)
                     for (path, o), s in zip(n.flat_out, out_flat))
        return cls(n.flat_in, n.dynamic, n.statics,
                   (tuple(sorted(n.static)), tuple(sorted(n.static_names))), resolved, outs,
                   _donated(call, n.static), (call.context_mesh, call.default_device))


def _resolved(item: Input, processes: int, device_or_backend: bool) -> Any:
    """The input's resolved sharding; None when resolving refuses it (RES-1..4)."""
    try:
        return resolve_input(item, processes, device_or_backend)
    except Rejection:
        return None  # the call is refused while lowering; its params and trace still count


def _donated(call: Call, static: frozenset[int]) -> tuple[bool, ...]:
    """Per flat dynamic input: is it donated (donate_argnums count all positions)."""
    options = call.options
    donate = {i if i >= 0 else i + len(call.args) for i in options.donate_argnums}
    flags: list[bool] = []
    for i, arg in enumerate(call.args):
        if i in static:
            continue
        flags += [i in donate] * len(list(leaves_with_paths(arg)))
    for name in sorted(call.kwargs):
        if name in options.static_argnames:
            continue
        flags += [name in options.donate_argnames] * len(list(leaves_with_paths(
            call.kwargs[name])))
    return tuple(flags)


def _context_parts(facts: _Facts) -> list[Part]:
    mesh, default_device = facts.context
    return [Part("the context mesh", mesh), Part("the default device", default_device)]


def _static_parts(facts: _Facts) -> list[Part]:
    # Static values compare by type and equality: True and 1 are different static values.
    return [Part(f"static {path}", (type(value), value), f"{value!r} ({type(value).__name__})")
            for path, value in facts.statics]


def _structure_part(facts: _Facts) -> Part:
    return Part("the arguments' structure", facts.dynamic,
                _structure_text(facts.dynamic))


def _structure_text(node: Any) -> str:
    (args, kwargs) = node.children
    names = list(kwargs.keys)
    return f"{len(args.children)} positional argument(s)" + (
        f", keywords {names}" if names else "")


# =========================================================================== dispatch

def _options_tree(tree: Any) -> tuple:
    """An in_shardings/out_shardings option as jit keeps it: structure (None a leaf), leaves."""
    if isinstance(tree, list):
        tree = tuple(tree)  # jit turns a top-level list into a tuple
    is_leaf = (lambda v: v is None or not is_container(v))
    return structure(tree, is_leaf), tuple(_python_key(s) for s in
                                           (leaf for _, leaf in leaves_with_paths(tree, (),
                                                                                  is_leaf)))


@dataclasses.dataclass(frozen=True)
class DispatchCache:
    """The dispatch cache a wrapper uses: its function object and its global options key."""

    function: str
    options: tuple

    def __repr__(self) -> str:
        return f"<dispatch cache of {self.function}>"


@rule("CACHE-1", mirrors="jax._src.interpreters.pxla.JitGlobalCppCacheKeys; "
                         "jaxlib PjitFunctionCache::Lookup")
def dispatch_cache(site: CallSite) -> DispatchCache:
    """Jit wrappers of the same function object share one dispatch cache when they agree on donate_argnums, donate_argnames, device, backend, in_shardings and out_shardings (compared leaf by leaf, None a leaf); static_argnums, static_argnames and keep_unused are not compared.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Out
    >>> def site(options, wrapper):
    ...     return CallSite(Call(args=(Arg.numpy((4,)),), outputs=Out((4,)), options=options),
    ...                     "f", wrapper)
    >>> dispatch_cache(site(JitOptions(), "w1")) == dispatch_cache(
    ...     site(JitOptions(keep_unused=True), "w2"))
    True
    >>> dispatch_cache(site(JitOptions(), "w1")) == dispatch_cache(
    ...     site(JitOptions(in_shardings=None), "w3"))
    False
    """
    o = site.call.options
    key = (o.donate_argnums, o.donate_argnames, o.device, o.backend,
           _options_tree(o.in_shardings), _options_tree(o.out_shardings))
    return DispatchCache(site.function, key)


def _dispatch_key(sharding: Any) -> Any:
    """The C++ fast path's view of an argument's sharding (None: the argument has none)."""
    if sharding is None:
        return None
    if isinstance(sharding, NamedSharding):
        return ("NamedSharding", sharding.mesh, sharding.spec, sharding.memory_kind)
    if isinstance(sharding, SingleDeviceSharding):
        return ("SingleDeviceSharding", sharding.device, sharding.memory_kind)
    return ("GSPMDSharding", sharding.devices, sharding.hlo, sharding.memory_kind)


@rule("CACHE-2", mirrors="jaxlib EqualShardingsForJit / HashShardingForJit (jax_jit.cc)")
def dispatch_equal(a: Any, b: Any) -> bool:
    """The dispatch path counts two argument shardings as the same only when they are of one type and written alike.

    (C1) Two NamedShardings have the same mesh, PartitionSpec (trailing None included) and
    memory kind.
    (C2) Two SingleDeviceShardings have the same device and memory kind.
    (C3) Two GSPMDShardings have the same devices in the same order, HLO sharding and memory
    kind.

    >>> from shardlaw.spec import Mesh, NamedSharding, P, GSPMDSharding, to_hlo
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> dispatch_equal(NamedSharding(m, P("x")), NamedSharding(m, P("x")))
    True
    >>> dispatch_equal(NamedSharding(m, P("x")), NamedSharding(m, P("x", None)))
    False
    >>> dispatch_equal(NamedSharding(m, P("x")),
    ...                GSPMDSharding(m.devices, to_hlo(NamedSharding(m, P("x")), 2)))
    False
    """
    return _dispatch_key(a) == _dispatch_key(b)


def _jax_array(arg: Arg) -> bool:
    return arg.kind in ("committed", "uncommitted")


def _dtype(arg: Arg) -> str:
    return _CANONICAL.get(arg.dtype, arg.dtype)


def _weak(arg: Arg) -> bool:
    # Python int, float and complex are weakly typed; Python bool is not.
    return arg.kind == "scalar" and arg.dtype != "bool"


@rule("CACHE-3", mirrors="jaxlib PjitFunction::ComputeCallSignature; CallSignature::operator==")
def dispatch_signature(site: CallSite) -> Key:
    """A call is answered by the dispatch fast path when an earlier accepted call through the same dispatch cache (CACHE-1) had the same signature.

    (C1) The arguments' structure and keyword names are the same.
    (C2) Every static value is of the same type and equal.
    (C3) Every dynamic leaf has the same dtype and shape, and is a Python scalar (a Python
    bool included) or not alike.
    (C4) Every jax.Array has the same sharding (CACHE-2) and committedness.
    (C5) The context mesh and the default device are the same.

    >>> from shardlaw.spec import Arg, Call, Out
    >>> a = CallSite(Call(args=(Arg.scalar("float"),), outputs=Out(())))
    >>> b = CallSite(Call(args=(Arg.numpy((), "float32"),), outputs=Out(())))
    >>> [p.what for p in differences(dispatch_signature(a), dispatch_signature(b))]
    ['args[0] weak type']

    The fast path marks every Python scalar weakly typed, a Python ``bool`` too, although
    tracing does not (CACHE-4): ``True`` and ``numpy.bool_(True)`` miss here and share a trace.
    """
    facts = site.facts
    parts = [_structure_part(facts), *_static_parts(facts)]
    for path, arg in facts.flat:
        held = arg.sharding if _jax_array(arg) else None
        parts += [Part(f"{path} dtype", _dtype(arg)), Part(f"{path} shape", arg.shape),
                  Part(f"{path} weak type", arg.kind == "scalar"),
                  Part(f"{path} sharding", _dispatch_key(held), Placed(held, arg.shape)),
                  Part(f"{path} committed", arg.kind == "committed")]
    return tuple(parts + _context_parts(facts))


# =========================================================================== tracing

@dataclasses.dataclass(frozen=True)
class Aval:
    """What tracing sees of an argument (JAX's ShapedArray)."""

    shape: tuple[int, ...]
    dtype: str
    weak_type: bool = False
    memory: str = "device"
    mesh: AbstractMesh | None = None
    spec: PartitionSpec | None = None

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        memory = "" if self.memory == "device" else f"<{self.memory}>"
        weak = "{weak_type=True}" if self.weak_type else ""
        on = "" if self.mesh is None else f" on {self.mesh!r}"
        spec = "" if self.spec is None else f" {self.spec!r}"
        return f"{self.dtype}{memory}[{dims}]{weak}{on}{spec}"


def _memory_space(kind: str | None) -> str:
    return "host" if kind in ("pinned_host", "unpinned_host") else "device"


def _normalized(spec: PartitionSpec, ndim: int) -> PartitionSpec:
    parts = [p if isinstance(p, (str, tuple)) else None for p in spec.partitions]
    return PartitionSpec(*(parts + [None] * (ndim - len(parts))), unreduced=spec.unreduced,
                         reduced=spec.reduced)


def _typed_spec(mesh: Any, spec: PartitionSpec, ndim: int) -> PartitionSpec | None:
    """The PartitionSpec a type carries: its Explicit axes only (None: the mesh has none)."""
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t is AxisType.Explicit}
    if not explicit:
        return None

    def keep(entry: Any) -> Any:
        names = entry if isinstance(entry, tuple) else (entry,) if isinstance(entry, str) else ()
        return tuple(n for n in names if n in explicit) or None

    parts = [keep(e) for e in _normalized(spec, ndim).partitions]
    return PartitionSpec(*parts, unreduced=spec.unreduced, reduced=spec.reduced)


@rule("CACHE-4", mirrors="jax._src.core.shaped_abstractify (ArrayImpl.aval); "
                         "core.update_aval_with_sharding")
def abstract_value(arg: Arg) -> Aval:
    """Tracing sees an argument as its shape, dtype, weak type, memory space and, on a concrete mesh, that mesh.

    (C1) Its shape, and its dtype with 64-bit types narrowed (x64 being off).
    (C2) Whether it is weakly typed: a Python int, float or complex is.
    (C3) Its memory space.
    (C4) For a jax.Array on a NamedSharding over a concrete mesh, that mesh's axis names,
    sizes and types, with the PartitionSpec only when the mesh has Explicit axes.

    >>> from shardlaw.spec import Arg, Mesh, NamedSharding, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> print(abstract_value(Arg.committed((8, 8), NamedSharding(m, P("x")))))
    float32[8,8] on AbstractMesh({'x': 2, 'y': 4})
    >>> print(abstract_value(Arg.scalar("int")))
    int32[]{weak_type=True}
    >>> print(abstract_value(Arg.numpy((4,), "float64")))
    float32[4]
    """
    held = arg.sharding if _jax_array(arg) else None
    memory = _memory_space(held.memory_kind) if held is not None else "device"
    if isinstance(held, NamedSharding) and isinstance(held.mesh, Mesh):
        return Aval(arg.shape, _dtype(arg), _weak(arg), memory, held.mesh.abstract,
                    _typed_spec(held.mesh, held.spec, len(arg.shape)))
    return Aval(arg.shape, _dtype(arg), _weak(arg), memory)


def _aval_parts(facts: _Facts) -> list[Part]:
    return [Part(f"{path} type", abstract_value(arg)) for path, arg in facts.flat]


@rule("CACHE-5", mirrors="jax._src.pjit._infer_params_cached")
def params_key(site: CallSite) -> Key:
    """A jit wrapper goes on to tracing unless an earlier call through the same wrapper object had the same argument structure, static values (same type and equal), abstract values (CACHE-4) and context; wrappers never share this cache.

    >>> from shardlaw.spec import Arg, Call, Out
    >>> a = CallSite(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))
    >>> b = CallSite(Call(args=(Arg.uncommitted((4,)),), outputs=Out((4,))))
    >>> params_key(a) == params_key(b)
    True
    """
    facts = site.facts
    return tuple([_structure_part(facts), *_static_parts(facts), *_aval_parts(facts),
                  *_context_parts(facts)])


@rule("CACHE-6", mirrors="jax._src.interpreters.partial_eval.trace_to_jaxpr (weakref_lru_cache)")
def trace_key(site: CallSite) -> Key:
    """A function object is traced again unless an earlier trace of it, through any wrapper with the same static argument positions and names, had the same argument structure, static values, abstract values (CACHE-4) and context.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Mesh, NamedSharding, Out, P
    >>> x = (Arg.numpy((8,)),)
    >>> plain = CallSite(Call(args=x, outputs=Out((8,))), "f", "w1")
    >>> given = CallSite(Call(args=x, outputs=Out((8,)), options=JitOptions(
    ...     in_shardings=NamedSharding(Mesh.iota((2,), ("x",)), P("x")))), "f", "w2")
    >>> trace_key(plain) == trace_key(given)
    True
    """
    facts = site.facts
    return tuple([Part("the static argument positions", facts.static_positions),
                  *params_key(site)])


# =========================================================================== lowering

def _python_key(sharding: Any) -> Any:
    """A sharding as Python's ``==`` and ``hash`` see it (the lowering key, jit's options)."""
    if isinstance(sharding, GSPMDSharding):
        hlo = Replicated() if is_fully_replicated(sharding) else sharding.hlo
        return ("GSPMDSharding", sharding.devices, hlo, sharding.memory_kind)
    if isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        return _dispatch_key(sharding)
    return sharding  # UNSPECIFIED, None, a PartitionSpec


@rule("CACHE-7", mirrors="jax._src.pjit._pjit_lower (weakref_lru_cache)")
def lowering_key(site: CallSite) -> Key:
    """A trace is lowered again (JAX counts a compilation cache miss) unless an earlier lowering of the same trace had the same parameters.

    (C1) The resolved input shardings (RES-1: the in_sharding when given, a committed
    argument's own sharding, otherwise open) and the output shardings are equal.
    (C2) The donation, keep_unused and context are the same.
    (C3) Shardings compare by Python equality, so an equivalent sharding written differently
    misses.

    >>> from shardlaw.spec import Arg, Call, Mesh, NamedSharding, Out, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> def site(spec):
    ...     return CallSite(Call(args=(Arg.committed((8, 8), NamedSharding(m, spec)),),
    ...                          outputs=Out((8, 8))))
    >>> [p.what for p in differences(lowering_key(site(P("x"))), lowering_key(site(P("x", None))))]
    ['args[0] in sharding']
    """
    facts = site.facts
    options = site.call.options
    parts = [Part(f"{path} in sharding", _python_key(s), Placed(s, arg.shape))
             for (path, arg), s in zip(facts.flat, facts.resolved)]
    parts += [Part(f"{path} out sharding", _python_key(s), Placed(s, out.shape))
              for path, out, s in facts.outs]
    parts += [Part("donation", facts.donated), Part("keep_unused", options.keep_unused)]
    return tuple(parts + _context_parts(facts))


def _semantic(sharding: Any, ndim: int) -> Any:
    if sharding is UNSPECIFIED:
        return "open"
    hlo = to_hlo(sharding, ndim)
    return (Replicated() if hlo_equal(hlo, Replicated()) else hlo, sharding.memory_kind)


@rule("CACHE-8", mirrors="jax._src.interpreters.pxla.SemanticallyEqualShardings")
def semantically_equal(a: Any, b: Any, ndim: int) -> bool:
    """For the module key two shardings are the same when both are open, or when neither is and they lower to equal HLO shardings (EQ-3) in the same memory kind; their device lists are not compared.

    >>> from shardlaw.spec import Mesh, NamedSharding, P, SingleDeviceSharding, UNSPECIFIED
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> reversed_order = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    >>> semantically_equal(NamedSharding(m, P("x")), NamedSharding(reversed_order, P("x")), 2)
    True
    >>> semantically_equal(SingleDeviceSharding(3), SingleDeviceSharding(5), 1)
    True
    >>> semantically_equal(UNSPECIFIED, SingleDeviceSharding(0), 1)
    False
    """
    return _semantic(a, ndim) == _semantic(b, ndim)


def _module_aval(arg: Arg, sharding: Any) -> Aval:
    """The input's type as the module key holds it: updated from a NamedSharding input."""
    aval = abstract_value(arg)
    if isinstance(sharding, NamedSharding):
        mesh = sharding.mesh if isinstance(sharding.mesh, AbstractMesh) else sharding.mesh.abstract
        return dataclasses.replace(aval, mesh=mesh,
                                   spec=_typed_spec(mesh, sharding.spec, len(arg.shape)),
                                   memory=_memory_space(sharding.memory_kind))
    return aval


@rule("CACHE-9", mirrors="jax._src.interpreters.pxla._cached_lowering_to_hlo; "
                         "lower_sharding_computation")
def module_key(site: CallSite, verdict: Verdict) -> Key:
    """The StableHLO module is built again (count_jit_and_pmap_lowerings) unless an earlier module of the same trace, keep_unused and donation had the same kept input types and shardings on as many devices.

    (C1) The kept inputs' types are the same, each updated with its input sharding's
    abstract mesh, typed PartitionSpec (CACHE-4) and memory space when that sharding is a
    NamedSharding.
    (C2) The kept inputs' shardings are semantically equal (CACHE-8), 0-d inputs left open
    being replicated when the program spans several devices.
    (C3) The output shardings are semantically equal.
    (C4) The number of devices is the same.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Mesh, NamedSharding, Out, P, jit_call
    >>> def site(mesh, spec):
    ...     call = Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)),
    ...                 options=JitOptions(in_shardings=NamedSharding(mesh, spec)))
    ...     return CallSite(call), jit_call(call)
    >>> m, renamed = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b"))
    >>> [p.what for p in differences(module_key(*site(m, P("x"))), module_key(*site(renamed, P("a"))))]
    ['args[0] module type']
    >>> module_key(*site(m, P("x"))) == module_key(*site(m, P("x", None)))
    True
    """
    facts = site.facts
    assignment = _device_list_of(verdict)
    ranks = [len(arg.shape) for _, arg in facts.flat]
    placed = replicate_scalars(list(facts.resolved), ranks, assignment)
    parts = []
    for i in verdict.kept_inputs:
        path, arg = facts.flat[i]
        parts += [Part(f"{path} module type", _module_aval(arg, placed[i])),
                  Part(f"{path} module sharding", _semantic(placed[i], len(arg.shape)),
                       Placed(placed[i], arg.shape))]
    parts += [Part(f"{path} module sharding", _semantic(s, len(out.shape)),
                   Placed(s, out.shape))
              for path, out, s in facts.outs]
    parts.append(Part("the number of devices", verdict.num_devices))
    return tuple(parts)


def _device_list_of(verdict: Verdict) -> DeviceList:
    return DeviceList.of_ids(verdict.device_assignment or ())


@rule("CACHE-10", mirrors="jax._src.interpreters.pxla._cached_compilation")
def compile_key(site: CallSite, verdict: Verdict) -> Key:
    """XLA compiles a module again unless that same module was compiled for the same device assignment, in the same order.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Out, SingleDeviceSharding, jit_call
    >>> def site(device):
    ...     call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)),
    ...                 options=JitOptions(in_shardings=SingleDeviceSharding(device)))
    ...     return CallSite(call), jit_call(call)
    >>> compile_key(*site(3)) == compile_key(*site(5))
    False
    """
    return (Part("the device assignment", verdict.device_assignment),)


# =========================================================================== the model

@dataclasses.dataclass
class _Level:
    """One cache: buckets of (key, entry id)."""

    buckets: dict = dataclasses.field(default_factory=dict)
    next_id: int = 0
    traces: dict = dataclasses.field(default_factory=dict)   # params entry -> trace entry
    fallback: set = dataclasses.field(default_factory=set)   # entries of calls that failed

    def lookup(self, bucket: Any, key: Key) -> tuple[int | None, list]:
        entries = self.buckets.setdefault(bucket, [])
        for k, entry in entries:
            if k == key:
                return entry, entries
        return None, entries

    def insert(self, entries: list, key: Key) -> int:
        self.next_id += 1
        entries.append((key, self.next_id))
        return self.next_id


@dataclasses.dataclass(frozen=True)
class CacheRow:
    """One call of a sequence: per level "hit", "miss" or "" (not asked), and why each missed."""

    index: int
    site: CallSite
    outcome: tuple[str, ...]
    reasons: tuple[str, ...]
    rejected: str | None = None
    note: str | None = None

    def at(self, level: str) -> str:
        return self.outcome[LEVELS.index(level)]

    def why(self, level: str) -> str:
        return self.reasons[LEVELS.index(level)]

    def misses(self) -> dict[str, int]:
        """Per level, 1 when it missed (what JAX's counters add for this call)."""
        return {level: int(o == "miss") for level, o in zip(LEVELS, self.outcome)}

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "function": self.site.function,
                "wrapper": self.site.wrapper, "rejected": self.rejected, "note": self.note,
                "outcome": dict(zip(LEVELS, self.outcome)),
                "reasons": {lv: r for lv, r in zip(LEVELS, self.reasons) if r}}


class CacheTable(tuple):
    """The rows of :func:`explain_cache`; ``str()`` gives the table."""

    def __str__(self) -> str:
        return describe_cache_table(self)

    def totals(self) -> dict[str, int]:
        """Per level, the number of misses over the sequence."""
        return {level: sum(r.misses()[level] for r in self) for level in LEVELS}


def explain_cache(sites: Iterable[CallSite]) -> CacheTable:
    """Per call of ``sites``: which of jit's caches hit and which missed, and why (CACHE-0..10).

    >>> from shardlaw.spec import Arg, Call, Mesh, NamedSharding, Out, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> def call(spec):
    ...     return Call(args=(Arg.committed((8, 8), NamedSharding(m, spec)),), outputs=Out((8, 8)))
    >>> table = explain_cache([CallSite(call(P("x"))), CallSite(call(P("x"))),
    ...                        CallSite(call(P("x", None)))])
    >>> [row.outcome for row in table]
    [('miss', 'miss', 'miss', 'miss', 'miss', 'miss'), ('hit', '', '', '', '', ''), ('miss', 'hit', '', 'miss', 'hit', 'hit')]
    >>> print(table[2].why("dispatch"))
    args[0] sharding: NamedSharding(Mesh({'x': 2, 'y': 4}), P('x')) -> NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', None)) (written differently, JAX-equivalent)
    """
    state = {level: _Level() for level in LEVELS}
    return CacheTable(_one_call(index, site, verdict, state) if verdict.accepted
                      else _rejected(index, site, verdict, state)
                      for index, site, verdict in _verdicts(sites))


def _verdicts(sites: Iterable[CallSite]) -> Iterable[tuple[int, CallSite, Verdict]]:
    """Each site of a checked sequence (CACHE-0) with its index and jit's verdict."""
    for index, site in enumerate(check_sequence(sites)):
        yield index, site, jit_call(site.call)


def _rejected(index: int, site: CallSite, verdict: Verdict, state: dict) -> CacheRow:
    """A call jit would reject: the dispatch fast path still answers it if it can.

    The fast path looks the signature up before any check runs, so a call that differs from
    a cached one only in what its key leaves out (keep_unused, CACHE-1) runs the cached
    executable instead of being refused. Otherwise JAX raises, and leaves a dispatch entry
    that sends every later call with that signature to the Python path; a call refused
    while lowering or later also leaves its trace. (Entries that calls refused during
    tracing leave are not modelled.)
    """
    rejection = f"{verdict.rule}: {verdict.message}"
    blank = ("",) * len(LEVELS)
    if verdict.stage in ("jit", "trace", "description"):
        return CacheRow(index, site, blank, blank, rejection)
    try:
        return _one_call(index, site, verdict, state, rejection)
    except Rejection:
        return CacheRow(index, site, blank, blank, rejection)


def _one_call(index: int, site: CallSite, verdict: Verdict, state: dict,
              rejection: str | None = None) -> CacheRow:
    outcome = dict.fromkeys(LEVELS, "")
    reasons = dict.fromkeys(LEVELS, "")

    def ask(level: str, bucket: Any, key: Key, first: str) -> int:
        entry, entries = state[level].lookup(bucket, key)
        if entry is not None:
            outcome[level] = "hit"
            return entry
        outcome[level] = "miss"
        reasons[level] = _why(key, [k for k, _ in entries], first)
        return state[level].insert(entries, key)

    def row(note: str | None = None) -> CacheRow:
        return CacheRow(index, site, tuple(outcome.values()), tuple(reasons.values()),
                        None if note else rejection, note)

    facts = site.facts
    fallback = state["dispatch"].fallback
    entry = ask("dispatch", dispatch_cache(site), dispatch_signature(site),
                f"first call of {site.function} through a dispatch cache with these jit options")
    if entry in fallback and (rejection is None or outcome["dispatch"] == "hit"):
        outcome["dispatch"] = "miss"
        reasons["dispatch"] = ("an earlier call with this signature failed; the fast path "
                               "sends it to Python every time")
    elif outcome["dispatch"] == "hit":
        return row(None if rejection is None else
                   f"served by the fast path although jit would refuse it ({rejection})")
    elif rejection is not None:
        fallback.add(entry)
    # A params entry remembers the trace it found; only a params miss asks the trace cache.
    found = state["params"].traces
    params = ask("params", site.wrapper, params_key(site), f"first call through {site.wrapper}")
    if outcome["params"] == "miss":
        found[params] = ask("trace", (site.function, facts.static_positions), trace_key(site),
                            f"first trace of {site.function}")
    if rejection is not None:
        return row()
    trace = found[params]
    ask("lowering", trace, lowering_key(site), "first lowering of this trace")
    if outcome["lowering"] == "hit":
        return row()
    # The module cache is keyed by the pruned trace, which keep_unused and donation make.
    pruned = (trace, site.call.options.keep_unused, facts.donated)
    module = ask("module", pruned, module_key(site, verdict), "first module of this trace")
    ask("compile", module, compile_key(site, verdict), "first compilation of this module")
    return row()


# =========================================================================== reasons

def differences(new: Key, old: Key) -> list[Part]:
    """The parts of key ``new`` that key ``old`` lacks or holds with another value."""
    before = {p.what: p for p in old}
    after = {p.what for p in new}
    return [p for p in new if p.what not in before or before[p.what].value != p.value] + [
        Part(p.what, _GONE) for p in old if p.what not in after]


_GONE = "(gone)"


def _why(key: Key, earlier: list[Key], first: str) -> str:
    if not earlier:
        return first
    # The closest earlier entry: fewest differing parts, the latest among equals.
    best = min(reversed(earlier), key=lambda old: len(differences(key, old)))
    before = {p.what: p for p in best}
    return "; ".join(_describe(before.get(p.what), p) for p in differences(key, best))


def _text(part: Part) -> str:
    if isinstance(part.shown, str):
        return part.shown
    return str(part.value) if isinstance(part.value, Aval) else repr(part.value)


def _describe(old: Part | None, new: Part) -> str:
    if old is None:
        return f"{new.what}: new ({_text(new)})"
    if new.value is _GONE:
        return f"{new.what}: gone (was {_text(old)})"
    if isinstance(old.shown, Placed) and isinstance(new.shown, Placed):
        a, b = old.shown.sharding, new.shown.sharding
        return f"{new.what}: {_show(a)} -> {_show(b)}" + _how(a, b, new.shown.shape)
    return f"{new.what}: {_text(old)} -> {_text(new)}"


def _show(sharding: Any) -> str:
    if sharding is None:
        return "no sharding"
    if sharding is UNSPECIFIED:
        return "open"
    return repr(sharding)


def _how(a: Any, b: Any, shape: tuple[int, ...]) -> str:
    """How two shardings differ, in the words of the equivalence rules."""
    concrete = (NamedSharding, SingleDeviceSharding, GSPMDSharding)
    if not (isinstance(a, concrete) and isinstance(b, concrete)):
        return ""
    ndim = len(shape)
    try:
        if jax_equivalent(a, b, ndim):
            return " (written differently, JAX-equivalent)"
        same_memory = a.memory_kind == b.memory_kind
        if not same_memory:
            return " (memory kind differs)"
        same_hlo = hlo_equal(to_hlo(a, ndim), to_hlo(b, ndim))
        if placement_equivalent(a, b, shape):
            return " (placement-equal, not JAX-equivalent)"
        if same_hlo and sorted(a.device_list.ids()) == sorted(b.device_list.ids()):
            return " (same HLO, device order differs)"
        if same_hlo:
            return " (same HLO, other devices)"
        return " (HLO differs)"
    except Rejection:
        return ""


# =========================================================================== the table

def describe_cache_table(rows: Iterable[Any]) -> str:
    """The per-call table of :func:`explain_cache` rows (or their ``as_dict()`` forms) as text.

    >>> from shardlaw.spec import Arg, Call, Out
    >>> call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)))
    >>> print(describe_cache_table(explain_cache([CallSite(call), CallSite(call)])))
    call  site    dispatch params trace lowering module compile
       0  f via w miss     miss   miss  miss     miss   miss
                  dispatch: first call of f through a dispatch cache with these jit options
       1  f via w hit      .      .     .        .      .
    misses        1        1      1     1        1      1
    """
    dicts = [r.as_dict() if isinstance(r, CacheRow) else r for r in rows]
    sites = [f"{d['function']} via {d['wrapper']}" for d in dicts]
    site_width = max([len("site")] + [len(s) for s in sites])
    widths = [max(len(level), 4) for level in LEVELS]
    head = f"call  {'site':<{site_width}} " + " ".join(
        f"{level:<{w}}" for level, w in zip(LEVELS, widths))
    lines = [head.rstrip()]
    totals = dict.fromkeys(LEVELS, 0)
    for d, site in zip(dicts, sites):
        cells = []
        for level, w in zip(LEVELS, widths):
            cell = d["outcome"].get(level) or "."
            totals[level] += cell == "miss"
            cells.append(f"{cell:<{w}}")
        lines.append(f"{d['index']:>4}  {site:<{site_width}} " + " ".join(cells).rstrip())
        for key in ("rejected", "note"):
            if d.get(key):
                lines.append(f"{'':>6}{'':<{site_width}} {key}: {d[key]}")
        first_reason = next(((lv, d["reasons"][lv]) for lv in LEVELS
                             if d["reasons"].get(lv)), None)
        for level in LEVELS:
            reason = d["reasons"].get(level)
            if reason and (level, reason) == first_reason or (
                    reason and not reason.startswith("first")):
                lines.append(f"{'':>6}{'':<{site_width}} {level}: {reason}")
    lines.append(f"misses{'':<{site_width}} " + " ".join(
        f"{totals[level]:<{w}}" for level, w in zip(LEVELS, widths)).rstrip())
    return "\n".join(lines)


# =========================================================================== the policy

@dataclasses.dataclass(frozen=True)
class PlacementClass:
    """Which device holds which box of the array, and in which memory kind."""

    boxes: tuple
    memory_kind: str | None

    def __repr__(self) -> str:
        return f"<placement class over {len(self.boxes)} device(s), {self.memory_kind}>"


@rule("CACHE-11", mirrors="(none: the shardlaw policy's class of a sharding; EQ-2 made a key)")
def placement_class(sharding: Any, shape: Any) -> PlacementClass:
    """The placement class of a sharding for a shape is its set of (device, box) pairs with its memory kind; two shardings share a class exactly when they are placement-equivalent (EQ-2, which compares memory kinds).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> m = Mesh.iota((2, 4), ("x", "y"))
    >>> reversed_order = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
    >>> placement_class(NamedSharding(m, P()), (8,)) == placement_class(
    ...     NamedSharding(reversed_order, P()), (8,))
    True
    >>> placement_class(NamedSharding(m, P("x")), (8,)) == placement_class(
    ...     NamedSharding(m, P("y")), (8,))
    False

    A sharding whose devices hold no boxes (unreduced, manual) has no class: IDX-1 refuses it.
    """
    boxes = tuple(sorted(devices_indices_map(sharding, shape).items()))
    return PlacementClass(boxes, sharding.memory_kind)


def _class_or_open(sharding: Any, shape: tuple[int, ...]) -> Any:
    return "open" if sharding is UNSPECIFIED else placement_class(sharding, shape)


def _input_class(sharding: Any, shape: tuple[int, ...], verdict: Verdict) -> Any:
    """(C3) An input left open that jit places itself is in the class of where it goes: the
    one device of a one-device program; replicated over the devices, for a scalar (EXE-1)."""
    devices = verdict.device_assignment.devices
    if sharding is UNSPECIFIED and len(devices) == 1:
        sharding = SingleDeviceSharding(devices[0])
    elif sharding is UNSPECIFIED and len(shape) == 0:
        sharding = replicate_scalars([sharding], [0], devices)[0]
    return _class_or_open(sharding, shape)


@rule("CACHE-12", mirrors="(none: the shardlaw cache policy)")
def policy_key(site: CallSite, verdict: Verdict) -> Key:
    """Under the shardlaw policy a call reuses an executable when it calls the same function with the same program types, placement classes, devices and layouts.

    (C1) The static values, the argument structure and every argument's program type (shape,
    dtype, weak type, memory space, and the mesh and spec of a type on a mesh with Explicit
    axes) are the same.
    (C2) Every kept input and every output sharding has the same placement class (CACHE-11),
    or both are open.
    (C3) An input left open that jit places itself counts as placed there: on a one-device
    program on that device, and a scalar replicated over the devices (EXE-1); whether the
    results are committed is decided per call, not per executable.
    (C4) The device assignment, donation and keep_unused are the same.
    (C5) The layouts are the same: those jit's options give, and the committed arguments'
    own.

    >>> from shardlaw.spec import Arg, AxisType, Call, Layout, Mesh, NamedSharding, Out, P, jit_call
    >>> m, renamed = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b"))
    >>> def site(sharding, layout=None):
    ...     call = Call(args=(Arg.committed((8, 8), sharding, layout=layout),), outputs=Out((8, 8)))
    ...     return CallSite(call), jit_call(call)
    >>> policy_key(*site(NamedSharding(m, P("x")))) == policy_key(
    ...     *site(NamedSharding(renamed, P("a", None))))
    True

    Explicit mesh axes are part of an argument's type, which the function can read
    (``jax.typeof(x).sharding``): the same placement written over renamed Explicit axes is
    another program, and another class.

    >>> explicit = (AxisType.Explicit, AxisType.Explicit)
    >>> e = Mesh.iota((2, 4), ("x", "y"), axis_types=explicit)
    >>> e_renamed = Mesh.iota((2, 4), ("a", "b"), axis_types=explicit)
    >>> policy_key(*site(NamedSharding(e, P("x")))) == policy_key(
    ...     *site(NamedSharding(e_renamed, P("a"))))
    False

    A committed argument in another layout is compiled for on its own (LAY-3), and so is
    a layout jit's options give.

    >>> s = NamedSharding(m, P("x"))
    >>> policy_key(*site(s)) == policy_key(*site(s, Layout((0, 1))))
    True
    >>> policy_key(*site(s)) == policy_key(*site(s, Layout((1, 0))))
    False
    """
    facts = site.facts
    parts = [Part("the function", site.function), _structure_part(facts),
             *_static_parts(facts), *(Part(f"{path} value", _program_type(arg))
                                      for path, arg in facts.flat)]
    for i in verdict.kept_inputs:
        path, arg = facts.flat[i]
        parts.append(Part(f"{path} placement",
                          _input_class(facts.resolved[i], arg.shape, verdict)))
    parts += [Part(f"{path} placement", _class_or_open(s, out.shape))
              for path, out, s in facts.outs]
    parts += [Part("the device assignment", verdict.device_assignment),
              Part("donation", facts.donated),
              Part("keep_unused", site.call.options.keep_unused),
              Part("layouts", _layouts(site.call, facts))]
    return tuple(parts)


def _layouts(call: Call, facts: _Facts) -> Any:
    """The layouts that shape the executable: those jit's options give (inputs, results) and
    the committed arguments' own (LAY-3); None when every one is the default."""
    given_in, given_out = given_layouts(call.normal)
    held = tuple(_canonical_layout(arg.layout) if arg.kind == "committed" else None
                 for _, arg in facts.flat)
    parts = (tuple(map(_canonical_layout, given_in)), held,
             tuple(map(_canonical_layout, given_out)))
    return None if not any(x is not None for part in parts for x in part) else parts


def _canonical_layout(layout: Any) -> Any:
    return None if isinstance(layout, Layout) and layout.is_default else layout


def _program_type(arg: Arg) -> tuple:
    """What the traced program sees of an argument beyond its placement (CACHE-4 less Auto meshes)."""
    aval = abstract_value(arg)
    explicit = (aval.mesh, aval.spec) if aval.spec is not None else None
    return (aval.shape, aval.dtype, aval.weak_type, aval.memory, explicit)


@dataclasses.dataclass(frozen=True)
class PolicyRow:
    """One call under the policy: its class, and whether the policy compiles for it."""

    index: int
    cls: int | None          # None: rejected
    compiles: bool
    representative: int | None


def policy_classes(sites: Iterable[CallSite]) -> list[PolicyRow]:
    """Per call: the policy class (CACHE-12) it falls in and whether the policy compiles.

    >>> from shardlaw.spec import Arg, Call, Mesh, NamedSharding, Out, P
    >>> m, renamed = Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b"))
    >>> def site(sharding):
    ...     return CallSite(Call(args=(Arg.committed((8, 8), sharding),), outputs=Out((8, 8))))
    >>> rows = policy_classes([site(NamedSharding(m, P("x"))), site(NamedSharding(renamed, P("a"))),
    ...                        site(NamedSharding(m, P("y")))])
    >>> [(r.cls, r.compiles) for r in rows]
    [(0, True), (0, False), (1, True)]
    """
    seen: dict[Key, tuple[int, int]] = {}
    rows = []
    for index, site, verdict in _verdicts(sites):
        if not verdict.accepted:
            rows.append(PolicyRow(index, None, False, None))
            continue
        key = policy_key(site, verdict)
        if key in seen:
            cls, first = seen[key]
            rows.append(PolicyRow(index, cls, False, first))
        else:
            seen[key] = (len(seen), index)
            rows.append(PolicyRow(index, len(seen) - 1, True, index))
    return rows

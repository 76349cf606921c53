"""The keys of jit's six caches (CACHE-1 to CACHE-10).

Dispatch (CACHE-1 to CACHE-3), tracing (CACHE-4 to CACHE-6), and lowering, modules and
compilation (CACHE-7 to CACHE-10). Each cache is keyed by an equivalence, written here as a
rule that builds the key (a tuple of :class:`~shardlaw.spec.jit.cache_sites.Part` values)
or compares two shardings as that cache does; :func:`differences` says which parts of two
keys differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .call import SCALAR_DTYPES, Arg, Verdict, placed_dtype
from ..placement.equivalence import hlo_equal
from ..core.hlo import Replicated
from .assignment import replicate_scalars
from ..placement.blocks import is_fully_replicated, to_hlo
from ..core.pytree import is_container, leaves_with_paths, structure
from ..core.rules import rule, varies
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, AxisType, DeviceList, Mesh, PartitionSpec
from .cache_sites import (
    CallFacts, CallSite, Key, Part, Placed, context_parts, static_parts, structure_part,
)

__all__ = [
    "Aval", "DispatchCache", "dispatch_cache", "dispatch_equal", "dispatch_signature",
    "abstract_value", "params_key", "trace_key", "lowering_key", "semantically_equal",
    "module_key", "compile_key", "differences",
]

# A Python scalar argument's type by the dtype its description gives it.
_PYTHON_TYPE = {dtype: python for python, dtype in SCALAR_DTYPES.items()}


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


def _typed(arg: Arg) -> tuple[str, bool]:
    """The dtype and weak type tracing gives ``arg`` (ARG-2, 64-bit types narrowed)."""
    return placed_dtype(_PYTHON_TYPE[arg.dtype] if arg.kind == "scalar" else arg.kind,
                        arg.dtype)


def traced_dtype(arg: Arg) -> str:
    """The dtype tracing gives an argument (ARG-2, 64-bit types narrowed), without its weak type."""
    return _typed(arg)[0]


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
    parts = [structure_part(facts), *static_parts(facts)]
    for path, arg in facts.flat:
        held = arg.sharding if _jax_array(arg) else None
        parts += [Part(f"{path} dtype", traced_dtype(arg)), Part(f"{path} shape", arg.shape),
                  Part(f"{path} weak type", arg.kind == "scalar"),
                  Part(f"{path} sharding", _dispatch_key(held), Placed(held, arg.shape)),
                  Part(f"{path} committed", arg.kind == "committed")]
    return tuple(parts + context_parts(facts))


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

    (C1) Its shape, and its dtype with 64-bit types narrowed (x64 being off: ARG-2).
    (C2) Whether it is weakly typed: a Python int, float or complex is (ARG-2).
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
    dtype, weak = _typed(arg)
    if isinstance(held, NamedSharding) and isinstance(held.mesh, Mesh):
        return Aval(arg.shape, dtype, weak, memory, held.mesh.abstract,
                    _typed_spec(held.mesh, held.spec, len(arg.shape)))
    return Aval(arg.shape, dtype, weak, memory)


def _aval_parts(facts: CallFacts) -> list[Part]:
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
    return tuple([structure_part(facts), *static_parts(facts), *_aval_parts(facts),
                  *context_parts(facts)])


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


def _original_key(sharding: Any) -> Any:
    """A sharding as JAX 0.4.13's ``SameDeviceAssignmentTuple`` compares it: by the
    sharding jit was given or the argument held (its "original"), each type by its own
    equality (a NamedSharding by mesh and spec as written, trailing None included); no
    memory kind."""
    if isinstance(sharding, NamedSharding):
        return ("NamedSharding", sharding.mesh, sharding.spec)
    if isinstance(sharding, SingleDeviceSharding):
        return ("SingleDeviceSharding", sharding.device)
    if isinstance(sharding, GSPMDSharding):
        return ("GSPMDSharding", sharding.hlo)
    return sharding  # UNSPECIFIED


def _first_devices(shardings: Any) -> Any:
    """The device list of the first sharding that is given (None: none is)."""
    for s in shardings:
        if s is not UNSPECIFIED and s is not None:
            return s.devices if isinstance(s, GSPMDSharding) else (
                DeviceList.of_ids([s.device.id]) if isinstance(s, SingleDeviceSharding)
                else s.mesh.devices)
    return None


def _lowering_key_0_4(function: Any, site: CallSite) -> Key:
    """CACHE-7 in JAX 0.4.13: the shardings by their originals, with the device list."""
    facts = site.facts
    options = site.call.options
    parts = [Part(f"{path} in sharding", _original_key(s), Placed(s, arg.shape))
             for (path, arg), s in zip(facts.flat, facts.resolved)]
    parts += [Part(f"{path} out sharding", _original_key(s), Placed(s, out.shape))
              for path, out, s in facts.outs]
    given = [*facts.resolved, *(s for _, _, s in facts.outs)]
    parts += [Part("the device assignment", _first_devices(given)),
              Part("donation", facts.donated), Part("keep_unused", options.keep_unused)]
    return tuple(parts + context_parts(facts))


@varies("0.4.13", "A trace is lowered again unless an earlier lowering of the same trace had "
        "the same parameters, its shardings compared as SameDeviceAssignmentTuple compares "
        "them: each by the sharding jit was given or the argument held, together with the "
        "device list of the first one given.", decide=_lowering_key_0_4,
        clauses=("(C1) Each resolved input sharding and each output sharding is compared by "
                 "its original: a NamedSharding by its mesh (devices and axis names) and its "
                 "spec as written (P('x') and P('x', None) differ), a SingleDeviceSharding "
                 "by its device; shardings have no memory kind.",
                 "(C2) The key holds the device list of the first sharding given (in "
                 "inputs, then outputs), as well as the donation, keep_unused, the `with "
                 "mesh:` block's mesh and the default device."))
@rule("CACHE-7", mirrors="jax._src.pjit._pjit_lower (weakref_lru_cache); "
                         "SameDeviceAssignmentTuple (JAX 0.4.13)")
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
    return tuple(parts + context_parts(facts))


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


# =========================================================================== comparing keys

def differences(new: Key, old: Key) -> list[Part]:
    """The parts of key ``new`` that key ``old`` lacks or holds with another value."""
    before = {p.what: p for p in old}
    after = {p.what for p in new}
    return [p for p in new if p.what not in before or before[p.what].value != p.value] + [
        Part(p.what, GONE) for p in old if p.what not in after]


# The value :func:`differences` gives a part the new key lacks (``explain_cache`` says "gone").
GONE = "(gone)"

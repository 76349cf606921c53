"""The semantics of a whole jit call: from a :class:`~shardlaw.spec.call.Call` to a Verdict.

``jax.jit(f, in_shardings=..., out_shardings=...)(*args, **kwargs)`` decides shardings in
stages, and so does :func:`jit_call`, one rule per decision:

1. at ``jax.jit(...)``: the device/backend options (JIT-1) and the leaves of
   ``in_shardings``/``out_shardings`` (JIT-2);
2. at the call, before tracing: the call's form (JIT-4), what each leaf means under the
   context mesh (JIT-3, JIT-5), matching ``in_shardings`` against the positional
   arguments (TREE-1) and each argument against its sharding (FIT-1) and its layout
   (LAY-4);
3. after tracing: matching ``out_shardings`` against the results (TREE-2, FIT-1, LAY-4);
4. at lowering: resolving each argument's sharding (RES-1..4) and layout (LAY-1, LAY-5,
   LAY-3), the results' layouts (LAY-5),
   the inputs the program keeps (KEEP-1), the one device assignment (DA-1..4), replicated
   scalars (EXE-1) and whether results are committed (EXE-2);
5. after compiling: the results' shardings, and those the executable takes the inputs jit
   left open in, recovered from the compiler's choice (OUT-1..3), and the results' layouts
   (LAY-2);
6. calling the compiled executable ahead of time (AOT-1..3).

A leaf of ``in_shardings``/``out_shardings`` may be a
:class:`~shardlaw.spec.layouts.Format`: its sharding part is the leaf's sharding for every
sharding rule, and its layout part is what the LAY rules read.

Rules of the placement core (NS-5, DIV-1, EQ-1, EQ-3, LOW-1) are reused where jit applies
them. A rejection names the argument or result by its pytree path.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterable, Sequence

from .call import Arg, Call, JitOptions, Verdict, check_call
from .equivalence import hlo_equal, jax_equivalent
from .hlo import HloSharding, Maximal, Replicated, SubgroupType, Tiled
from .iota import Iota
from .layouts import (  # the LAY failures are named here too: jit's rejections, listed
    AUTO_LAYOUT, Format, Layout, LayoutMismatch, LayoutRankMismatch, LayoutWithoutDevices,
    check_argument_layout, check_layout_devices, check_layout_rank, executable_input_layouts,
    is_layout, layout_text, result_layouts, split_format,
)
from .placement import (
    TilesDoNotMatchRank, check_rank, is_fully_replicated, num_devices, shard_shape, to_hlo,
)
from .pytree import Node, is_container, leaves_with_paths, map_leaves, show_path, structure
from .rules import Failure, Rejection, reject, require, rule, tracing
from .shardings import (
    UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding, check_axes_unique,
)
from .values import AbstractMesh, AxisType, DeviceList, Mesh, PartitionSpec, UNCONSTRAINED

P = PartitionSpec  # the name the examples use

__all__ = ["jit_call", "STAGES"]

# The stage at which JAX raises each family's rejections.
STAGES = {
    "CALL": "description", "JIT-1": "jit", "JIT-2": "jit", "NS": "jit", "VAL": "jit",
    "JIT-3": "trace", "JIT-4": "trace", "JIT-5": "trace", "TREE-1": "trace",
    "TREE-2": "trace", "FIT": "trace", "DIV": "trace", "RES": "lower", "RES-5": "call",
    "DA": "lower", "EXE-3": "compile", "EXE-4": "lower",
    "KEEP": "lower", "EXE": "lower", "OUT": "compile", "AOT": "aot",
    "LAY-1": "lower", "LAY-4": "trace", "LAY-5": "lower",
}


def _stage(rule_id: str) -> str:
    return STAGES.get(rule_id, STAGES.get(rule_id.rsplit("-", 1)[0], "trace"))


def _devices_text(devices: DeviceList) -> str:
    if len(devices) > 12:
        shown = ", ".join(str(devices.id_at(i)) for i in range(8))
        return f"[{shown}, ... ({len(devices)} devices)]"
    return str(list(devices.ids()))


# =========================================================================== failures

@dataclasses.dataclass(frozen=True)
class DeviceOptionConflict(Failure):
    rule: ClassVar[str] = "JIT-1"
    template: ClassVar[str] = "jit was given {given}; {problem}"
    given: str
    problem: str

    @property
    def hint(self) -> str:  # type: ignore[override]
        return ("Drop device=/backend= (deprecated) and place the inputs with "
                "jax.device_put, or pass shardings instead.")


@dataclasses.dataclass(frozen=True)
class BadLeaf(Failure):
    rule: ClassVar[str] = "JIT-2"
    error_type: ClassVar[type[Exception]] = TypeError
    jax_error: ClassVar[str] = "TypeError"
    template: ClassVar[str] = ("a leaf of {which} must be a Sharding, a PartitionSpec or None, "
                               "got {leaf!r}")
    hint: ClassVar[str] = "Wrap mesh axis names in P(...), or pass a NamedSharding."
    which: str
    leaf: Any


@dataclasses.dataclass(frozen=True)
class LeafNotAllowed(Failure):
    rule: ClassVar[str] = "JIT-2"
    template: ClassVar[str] = "{which} holds {leaf!r}, but {problem}"
    which: str
    leaf: Any
    problem: str


@dataclasses.dataclass(frozen=True)
class BareLayout(LeafNotAllowed):
    hint: ClassVar[str] = "Wrap it with a sharding: Format(layout, sharding)."


@dataclasses.dataclass(frozen=True)
class SpecWithoutMesh(Failure):
    rule: ClassVar[str] = "JIT-3"
    error_type: ClassVar[type[Exception]] = RuntimeError
    jax_error: ClassVar[str] = "RuntimeError"
    template: ClassVar[str] = ("{which} holds the PartitionSpec {spec}, which names mesh axes, "
                               "but no mesh is set")
    hint: ClassVar[str] = ("Set one with jax.set_mesh(mesh), or pass NamedSharding(mesh, spec) "
                           "instead of the bare spec.")
    which: str
    spec: Any


@dataclasses.dataclass(frozen=True)
class CallFormConflict(Failure):
    rule: ClassVar[str] = "JIT-4"
    template: ClassVar[str] = "{problem}"
    problem: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@dataclasses.dataclass(frozen=True)
class NotAPrefix(Failure):
    rule: ClassVar[str] = "TREE-1"
    template: ClassVar[str] = ("{which} must be a tree prefix of {against}: {detail}")
    which: str
    against: str
    detail: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@dataclasses.dataclass(frozen=True)
class OutNotAPrefix(NotAPrefix):
    rule: ClassVar[str] = "TREE-2"


@dataclasses.dataclass(frozen=True)
class EmptyNotAPrefix(NotAPrefix):
    error_type: ClassVar[type[Exception]] = AssertionError
    jax_error: ClassVar[str] = "AssertionError"


@dataclasses.dataclass(frozen=True)
class EmptyOutNotAPrefix(EmptyNotAPrefix):
    rule: ClassVar[str] = "TREE-2"


@dataclasses.dataclass(frozen=True)
class DoesNotFit(Failure):
    rule: ClassVar[str] = "FIT-1"
    template: ClassVar[str] = "a value of shape {shape} does not fit its sharding: {reason}"
    shape: tuple
    reason: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@dataclasses.dataclass(frozen=True)
class DoesNotDivide(DoesNotFit):
    jax_error: ClassVar[str] = "IndivisibleError"


@dataclasses.dataclass(frozen=True)
class TilesDoNotFit(DoesNotFit):
    error_type: ClassVar[type[Exception]] = AssertionError
    jax_error: ClassVar[str] = "AssertionError"


@dataclasses.dataclass(frozen=True)
class UncommittedOnManyDevices(Failure):
    rule: ClassVar[str] = "RES-1"
    error_type: ClassVar[type[Exception]] = NotImplementedError
    jax_error: ClassVar[str] = "NotImplementedError"
    template: ClassVar[str] = ("the argument is an uncommitted array spread over {count} devices "
                               "({sharding}); jit cannot decide where it belongs")
    hint: ClassVar[str] = "Commit it with jax.device_put(x, sharding), or give an in_sharding."
    sharding: Any
    count: int


@dataclasses.dataclass(frozen=True)
class HostArrayNotReplicated(Failure):
    rule: ClassVar[str] = "RES-2"
    template: ClassVar[str] = ("a numpy argument of shape {shape} meets the in_sharding "
                               "{sharding}, which is not fully replicated, in a program of "
                               "{processes} processes; each process holds only its own numpy data")
    hint: ClassVar[str] = ("Build a global array first (jax.make_array_from_process_local_data), "
                           "or give a replicated in_sharding.")
    shape: tuple
    sharding: Any
    processes: int


@dataclasses.dataclass(frozen=True)
class MemoryKindMismatch(Failure):
    rule: ClassVar[str] = "RES-3"
    template: ClassVar[str] = ("the in_sharding puts the argument in memory kind {wanted!r}, but "
                               "the argument lives in {held!r}; jit does not move between "
                               "memory kinds")
    hint: ClassVar[str] = "Move it first with jax.device_put(x, s.with_memory_kind({wanted!r}))."
    wanted: Any
    held: Any


@dataclasses.dataclass(frozen=True)
class CommittedMismatch(Failure):
    rule: ClassVar[str] = "RES-4"
    template: ClassVar[str] = ("the argument is committed to {held} (HLO {held_hlo}), but the "
                               "in_sharding is {wanted} (HLO {wanted_hlo}); jit does not reshard "
                               "committed arguments")
    hint: ClassVar[str] = ("Reshard it first with jax.device_put(x, in_sharding), or leave its "
                           "in_sharding unspecified.")
    held: Any
    held_hlo: str
    wanted: Any
    wanted_hlo: str


@dataclasses.dataclass(frozen=True)
class ReplicaInOtherMemory(Failure):
    rule: ClassVar[str] = "RES-5"
    template: ClassVar[str] = ("jit was given device={device}, and the argument is a replicated "
                               "array on devices {devices} in memory kind {held!r}; JAX reuses its "
                               "copy on device {device} as it is, and the program wants "
                               "{wanted!r}")
    hint: ClassVar[str] = ("Move it first: jax.device_put(x, jax.devices()[{device}]), or drop "
                           "device= (deprecated).")
    device: int
    devices: str
    held: Any
    wanted: Any


@dataclasses.dataclass(frozen=True)
class DeviceAssignmentMismatch(Failure):
    rule: ClassVar[str] = "DA-1"
    template: ClassVar[str] = ("jit needs one device assignment for the whole program, but the "
                               "{first} is on devices {first_devices} and the {second} is on "
                               "devices {second_devices}")
    hint: ClassVar[str] = ("Put both on the same devices in the same order (jax.device_put), or "
                           "build both shardings from one mesh.")
    first: str
    first_devices: str
    second: str
    second_devices: str


@dataclasses.dataclass(frozen=True)
class AbstractSizeMismatch(Failure):
    rule: ClassVar[str] = "DA-2"
    template: ClassVar[str] = ("the {first} spans {first_size} devices but the {second} spans "
                               "{second_size}; abstract meshes must match the program's size")
    first: str
    first_size: int
    second: str
    second_size: int


@dataclasses.dataclass(frozen=True)
class NoConcreteDevices(Failure):
    rule: ClassVar[str] = "DA-4"
    template: ClassVar[str] = ("every sharding of the call is over an abstract mesh ({mesh}), so "
                               "the call has no devices to run on")
    hint: ClassVar[str] = ("Use a concrete Mesh for at least one sharding or the context mesh, or "
                           "lower with jit(f).trace(...).lower(lowering_platforms=...).")
    mesh: Any


@dataclasses.dataclass(frozen=True)
class TileCountMismatch(Failure):
    rule: ClassVar[str] = "EXE-3"
    error_type: ClassVar[type[Exception]] = RuntimeError
    jax_error: ClassVar[str] = "JaxRuntimeError"
    template: ClassVar[str] = ("the sharding {sharding} names {named} device positions but "
                               "lists {held} devices; XLA's verifier refuses the program")
    hint: ClassVar[str] = "Make the tile assignment cover exactly the GSPMDSharding's devices."
    sharding: Any
    named: int
    held: int


@dataclasses.dataclass(frozen=True)
class ListedTiles(Failure):
    rule: ClassVar[str] = "EXE-4"
    error_type: ClassVar[type[Exception]] = TypeError
    jax_error: ClassVar[str] = "TypeError"
    template: ClassVar[str] = ("the sharding {sharding} lists its tile assignment device by "
                               "device; JAX lowers GSPMD tilings only when written as an iota "
                               "order")
    hint: ClassVar[str] = ("Write the tiles as an iota order (e.g. {{devices=[4,1]<=[4]}}), or "
                           "use a NamedSharding over a Mesh in that device order.")
    sharding: Any


@dataclasses.dataclass(frozen=True)
class RecoveryFailed(Failure):
    rule: ClassVar[str] = "OUT-2"
    template: ClassVar[str] = ("the compiler placed the result with {hlo}, which cannot be "
                               "written as a PartitionSpec over the mesh {mesh}: {why}")
    hlo: str
    mesh: Any
    why: str


@dataclasses.dataclass(frozen=True)
class RecoveryIndivisible(RecoveryFailed):
    error_type: ClassVar[type[Exception]] = ValueError
    jax_error: ClassVar[str] = "IndivisibleError"


@dataclasses.dataclass(frozen=True)
class RecoveryNotImplemented(RecoveryFailed):
    error_type: ClassVar[type[Exception]] = NotImplementedError
    jax_error: ClassVar[str] = "NotImplementedError"


@dataclasses.dataclass(frozen=True)
class RecoveryLookup(RecoveryFailed):
    error_type: ClassVar[type[Exception]] = KeyError
    jax_error: ClassVar[str] = "KeyError"


@dataclasses.dataclass(frozen=True)
class RecoveryAssertion(RecoveryFailed):
    error_type: ClassVar[type[Exception]] = AssertionError
    jax_error: ClassVar[str] = "AssertionError"


@dataclasses.dataclass(frozen=True)
class AotStructureMismatch(Failure):
    rule: ClassVar[str] = "AOT-1"
    error_type: ClassVar[type[Exception]] = TypeError
    jax_error: ClassVar[str] = "TypeError"
    template: ClassVar[str] = ("the executable was compiled for arguments shaped as {compiled}, "
                               "but is called with {called}")
    compiled: str
    called: str


@dataclasses.dataclass(frozen=True)
class AotTypeMismatch(Failure):
    rule: ClassVar[str] = "AOT-2"
    error_type: ClassVar[type[Exception]] = TypeError
    jax_error: ClassVar[str] = "TypeError"
    template: ClassVar[str] = ("{count} argument(s) differ from the types the executable was "
                               "compiled for; {shown}: {details}")
    hint: ClassVar[str] = "Lower and compile again for the new types, or cast the arguments."
    count: int
    shown: str
    details: str


@dataclasses.dataclass(frozen=True)
class AotShardingMismatch(Failure):
    rule: ClassVar[str] = "AOT-3"
    template: ClassVar[str] = ("{count} committed argument(s) are {how} otherwise than the "
                               "executable was compiled for; {shown}: {details}")
    hint: ClassVar[str] = ("jax.device_put each one to the executable's {formats} first, "
                           "or compile again for these {what}.")
    count: int
    shown: str
    details: str
    how: str = "placed"
    formats: str = "input_shardings"
    what: str = "shardings"


# =========================================================================== 1. jax.jit(...)

@rule("JIT-1", mirrors="jax._src.pjit._parse_jit_arguments")
def check_device_options(options: JitOptions) -> None:
    """``device=`` and ``backend=`` exclude each other and exclude ``in_shardings`` and ``out_shardings``.

    >>> check_device_options(JitOptions(device=1, in_shardings=P()))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [JIT-1]: jit was given device=1 and in_shardings; in_shardings must then be left out Drop device=/backend= (deprecated) and place the inputs with jax.device_put, or pass shardings instead.
    """
    device, backend = options.device, options.backend
    if device is None and backend is None:
        return
    given = f"device={device}" if device is not None else f"backend={backend!r}"
    require(device is None or backend is None, lambda: DeviceOptionConflict(
        f"device={device} and backend={backend!r}", "only one of them may be given"))
    for name in ("in_shardings", "out_shardings"):
        value = getattr(options, name)
        require(value is None or value is UNSPECIFIED, lambda name=name: DeviceOptionConflict(
            f"{given} and {name}", f"{name} must then be left out"))


def _leaf_paths(tree: Any, which: str) -> list[tuple[str, Any]]:
    if tree is UNSPECIFIED:
        return []
    return [(show_path((which, *p)), leaf) for p, leaf in leaves_with_paths(
        tree, (), is_leaf=lambda x: x is None)]


@rule("JIT-2", mirrors="jax._src.pjit._split_layout_and_sharding; "
                       "jax._src.sharding_impls.prepare_axis_resources")
def check_leaf(leaf: Any, which: str) -> None:
    """Every leaf of ``in_shardings``/``out_shardings`` is None, a PartitionSpec, a Sharding or a Format (whose sharding part is checked alike), never a bare Layout; a NamedSharding's mesh is not empty; neither holds UNCONSTRAINED; a PartitionSpec names each mesh axis once.

    JAX looks for bare layouts in both trees before it checks any other leaf, so
    :func:`jit_call` checks those leaves first.

    >>> check_leaf("x", "in_shardings[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionTypeError: [JIT-2]: a leaf of in_shardings[0] must be a Sharding, a PartitionSpec or None, got 'x' Wrap mesh axis names in P(...), or pass a NamedSharding.
    >>> check_leaf(P(UNCONSTRAINED), "out_shardings")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [JIT-2]: out_shardings holds P(UNCONSTRAINED), but jit does not take UNCONSTRAINED dimensions
    >>> check_leaf(Layout((1, 0)), "in_shardings[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [JIT-2]: in_shardings[1] holds Layout((1, 0)), but jit does not accept device-local layouts directly Wrap it with a sharding: Format(layout, sharding).
    """
    if is_layout(leaf):
        raise reject(BareLayout(which, leaf, "jit does not accept device-local layouts directly"))
    leaf, _ = split_format(leaf)
    if leaf is None or leaf is UNSPECIFIED:
        return
    if isinstance(leaf, (NamedSharding, SingleDeviceSharding, GSPMDSharding)):
        if isinstance(leaf, NamedSharding):
            # JAX's empty mesh holds no device; a mesh without axes holds one and is fine.
            require(leaf.mesh.size > 0, lambda: LeafNotAllowed(which, leaf, "its mesh is empty"))
            spec = leaf.spec
        else:
            return
    elif isinstance(leaf, PartitionSpec):
        spec = leaf
    else:
        raise reject(BadLeaf(which, leaf))
    require(UNCONSTRAINED not in spec.partitions, lambda: LeafNotAllowed(
        which, leaf, "jit does not take UNCONSTRAINED dimensions"))
    if isinstance(leaf, PartitionSpec):
        check_axes_unique(spec)


# =========================================================================== 2. the call

@rule("JIT-5", mirrors="jax._src.pjit.get_ctx_mesh")
def jit_context_mesh(context: Mesh | AbstractMesh | None) -> Mesh | AbstractMesh | None:
    """jit sees the concrete mesh set with ``jax.set_mesh``, or an abstract context mesh only when one of its axes is Explicit.

    >>> jit_context_mesh(AbstractMesh((2,), ("x",))) is None
    True
    >>> jit_context_mesh(AbstractMesh((2,), ("x",), (AxisType.Explicit,)))
    AbstractMesh({'x': 2}, types=('Explicit',))
    """
    if context is None or isinstance(context, Mesh):
        return context
    return context if AxisType.Explicit in context.axis_types else None


@rule("JIT-4", mirrors="jax._src.pjit._trace_for_jit")
def check_call_form(call: Call, context: Mesh | AbstractMesh | None) -> None:
    """Keyword arguments cannot meet a specified ``in_shardings``, and a context mesh cannot meet ``device=``/``backend=``.

    >>> from shardlaw.spec.call import Arg
    >>> check_call_form(Call(args=(Arg.numpy((2,)),), kwargs={"y": Arg.numpy((2,))},
    ...                      options=JitOptions(in_shardings=None)), None)
    >>> check_call_form(Call(args=(), kwargs={"y": Arg.numpy((2,))},
    ...                      options=JitOptions(in_shardings=P())), None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [JIT-4]: the call passes keyword arguments ['y'] while in_shardings is given; in_shardings covers positional arguments only Pass them positionally, or leave in_shardings out.
    """
    ins = call.options.in_shardings
    require(not (call.kwargs and ins is not None and ins is not UNSPECIFIED),
            lambda: CallFormConflict(
                f"the call passes keyword arguments {sorted(call.kwargs)} while in_shardings "
                "is given; in_shardings covers positional arguments only",
                "Pass them positionally, or leave in_shardings out."))
    device_or_backend = call.options.device is not None or call.options.backend is not None
    require(not (context is not None and device_or_backend), lambda: CallFormConflict(
        f"the call runs under the context mesh {context!r} while jit was given device= or "
        "backend=", "Leave the mesh context, or drop device=/backend=."))


@rule("JIT-3", mirrors="jax._src.pjit._create_sharding_for_array; "
                       "_create_sharding_with_device_backend")
def leaf_to_sharding(leaf: Any, context: Mesh | AbstractMesh | None, which: str) -> Any:
    """Under jit a None leaf leaves the sharding to jit, a Sharding stands for itself, a PartitionSpec becomes a NamedSharding over the context mesh, which must be set, and a Format stands for its sharding part.

    >>> leaf_to_sharding(None, Mesh.iota((2,), ("x",)), "in_shardings[0]")
    UNSPECIFIED
    >>> leaf_to_sharding(P("x"), Mesh.iota((2,), ("x",)), "in_shardings[0]")
    NamedSharding(Mesh({'x': 2}), P('x'))
    >>> leaf_to_sharding(P("x"), None, "in_shardings[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionRuntimeError: [JIT-3]: in_shardings[0] holds the PartitionSpec P('x'), which names mesh axes, but no mesh is set Set one with jax.set_mesh(mesh), or pass NamedSharding(mesh, spec) instead of the bare spec.
    >>> leaf_to_sharding(Format(Layout.AUTO), None, "out_shardings")
    UNSPECIFIED
    """
    leaf, _ = split_format(leaf)
    if leaf is None or leaf is UNSPECIFIED:
        return UNSPECIFIED
    if isinstance(leaf, PartitionSpec):
        require(context is not None, lambda: SpecWithoutMesh(which, leaf))
        try:
            return NamedSharding(context, leaf)
        except Rejection as error:
            raise error.at(which) from None
    return leaf


def device_option_sharding(options: JitOptions, call: Call) -> SingleDeviceSharding:
    # backend= picks the platform's first local device; device= that device.
    return SingleDeviceSharding(options.device if options.device is not None else 0)


# --------------------------------------------------------------------------- prefixes

def _mismatch(prefix: Any, full: Node, path: tuple) -> str | None:
    """Why ``prefix`` is not a tree prefix of ``full`` (None: it is)."""
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
        found = _mismatch(child, node, path + (key,))
        if found:
            return found
    return None


def _broadcast(prefix: Any, full: Node) -> list[Any]:
    """The prefix's leaves, each repeated over the leaves of the subtree it covers."""
    if not is_container(prefix) or prefix is None:
        return [prefix] * full.num_leaves
    children = [prefix[k] for k in full.keys] if isinstance(prefix, dict) else list(prefix)
    out: list[Any] = []
    for child, node in zip(children, full.children):
        out.extend(_broadcast(child, node))
    return out


@rule("TREE-1", mirrors="jax._src.pjit._process_in_axis_resources; "
                        "jax._src.api_util.flatten_axis_resources")
def match_in_shardings(in_shardings: Any, positional: Node) -> list[Any]:
    """``in_shardings`` is a single leaf for every argument, or a tuple (a list is read as one) with one tree prefix per positional argument, where a leaf covers a whole subtree and containers must match in type, length and dict keys.

    >>> from shardlaw.spec.pytree import structure
    >>> match_in_shardings([P("x"), None], structure((1, {"a": 2, "b": 3})))
    [P('x'), None, None]
    >>> match_in_shardings(P("x"), structure(((1, 2),)))
    [P('x'), P('x')]
    >>> match_in_shardings((P("x"), P()), structure(((1, 2),)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [TREE-1]: in_shardings must be a tree prefix of the positional arguments: it is a tuple of length 2 for 1 positional argument(s) It looks like in_shardings should be wrapped in a singleton tuple: ((P('x'), P()),).

    An empty container that does not match fails JAX's internal assertion (AssertionError):

    >>> match_in_shardings((), structure((1,)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionAssertionError: [TREE-1]: in_shardings must be a tree prefix of the positional arguments: it is a tuple of length 0 for 1 positional argument(s)
    """
    if in_shardings is UNSPECIFIED or in_shardings is None or not is_container(in_shardings):
        return [in_shardings] * positional.num_leaves
    if isinstance(in_shardings, list):
        in_shardings = tuple(in_shardings)
    found = _mismatch(in_shardings, positional, ())
    if found is None:
        return _broadcast(in_shardings, positional)
    count = len(positional.children)
    if type(in_shardings) is not tuple:
        detail = f"it is a {type(in_shardings).__name__}, not a tuple of {count} entries"
    elif len(in_shardings) != count:
        detail = f"it is a tuple of length {len(in_shardings)} for {count} positional argument(s)"
    else:
        detail = found
    fix = ""
    if count == 1 and _mismatch((in_shardings,), positional, ()) is None:
        fix = (f"It looks like in_shardings should be wrapped in a singleton tuple: "
               f"({in_shardings!r},).")
    # JAX's own check takes an empty container for a leaf and fails an internal assertion.
    kind = EmptyNotAPrefix if len(in_shardings) == 0 else NotAPrefix
    raise reject(kind("in_shardings", "the positional arguments", detail, fix))


@rule("TREE-2", mirrors="jax._src.pjit._check_and_canonicalize_out_shardings")
def match_out_shardings(out_shardings: Any, results: Node) -> list[Any]:
    """``out_shardings`` is a single leaf for every result or a tree prefix of the function's result, containers matching in type (a list is not a tuple here), length and dict keys.

    >>> from shardlaw.spec.pytree import structure
    >>> match_out_shardings((P("x"), None), structure((1, [2, 3])))
    [P('x'), None, None]
    >>> match_out_shardings([P("x"), None], structure((1, 2)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [TREE-2]: out_shardings must be a tree prefix of the function's result: at the top level the shardings hold a list where the value holds a tuple of length 2
    """
    if out_shardings is UNSPECIFIED or out_shardings is None or not is_container(out_shardings):
        return [out_shardings] * results.num_leaves
    found = _mismatch(out_shardings, results, ())
    kind = EmptyOutNotAPrefix if len(out_shardings) == 0 else OutNotAPrefix
    require(found is None, lambda: kind("out_shardings", "the function's result", found or ""))
    return _broadcast(out_shardings, results)


@rule("FIT-1", mirrors="jax._src.pjit.pjit_check_aval_sharding")
def check_fits(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """Each argument and result given a sharding has at least the rank the sharding needs and divides evenly into its shards.

    >>> check_fits(NamedSharding(Mesh.iota((4,), ("x",)), P("x")), (6,), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [FIT-1] at args[0]: a value of shape (6,) does not fit its sharding: [DIV-1]: dimension 0 of shape (6,) has size 6, which NamedSharding(Mesh({'x': 4}), P('x')) splits 4 ways; 6 is not a multiple of 4 (ways per dimension: (4,)) Pad dimension 0 to a multiple of 4, or split it over fewer mesh axes.
    """
    if sharding is UNSPECIFIED:
        return
    try:
        check_rank(sharding, shape)
        shard_shape(sharding, shape)
    except Rejection as error:
        failure = error.failure
        # JAX raises what its own check raises: IndivisibleError, or a bare AssertionError
        # when a GSPMD tile assignment has another rank than the value.
        kind = (DoesNotDivide if failure.jax_error == "IndivisibleError" else
                TilesDoNotFit if isinstance(failure, TilesDoNotMatchRank) else DoesNotFit)
        raise reject(kind(tuple(shape), str(error)), path) from None


# =========================================================================== 3. resolution

@dataclasses.dataclass(frozen=True)
class Input:
    """One flat dynamic input as lowering sees it."""

    path: str
    arg: Arg
    jit_sharding: Any          # from in_shardings (UNSPECIFIED when left to jit)


def _arg_sharding(arg: Arg) -> tuple[Any, bool]:
    if arg.sharding is None:
        return UNSPECIFIED, False
    return arg.sharding, arg.is_committed


@rule("RES-1", mirrors="jax._src.pjit.finalize_arg_sharding")
def sharding_from_argument(arg: Arg) -> Any:
    """With no in_sharding, a committed argument brings its own sharding, an uncommitted one on one device leaves the choice to jit, and an uncommitted one on several devices is refused.

    >>> sharding_from_argument(Arg.uncommitted((4,)))
    UNSPECIFIED
    >>> sharding_from_argument(Arg.committed((4,), SingleDeviceSharding(3)))
    SingleDeviceSharding(Device(3))
    """
    held, committed = _arg_sharding(arg)
    if held is UNSPECIFIED or committed:
        return held
    count = num_devices(held)
    require(count == 1, lambda: UncommittedOnManyDevices(held, count))
    return UNSPECIFIED


@rule("RES-2", mirrors="jax._src.pjit._resolve_in_shardings (numpy inputs, process_count > 1)")
def check_host_array(arg: Arg, wanted: Any, processes: int) -> None:
    """In a program of several processes a numpy argument may only meet a fully replicated in_sharding.

    >>> check_host_array(Arg.numpy((8,)), NamedSharding(Mesh.iota((2,), ("x",)), P("x")), 2)
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [RES-2]: a numpy argument of shape (8,) meets the in_sharding NamedSharding(Mesh({'x': 2}), P('x')), which is not fully replicated, in a program of 2 processes; each process holds only its own numpy data Build a global array first (jax.make_array_from_process_local_data), or give a replicated in_sharding.
    """
    if arg.kind == "numpy" and processes > 1:
        require(is_fully_replicated(wanted), lambda: HostArrayNotReplicated(
            arg.shape, wanted, processes))


@rule("RES-3", mirrors="jax._src.pjit._resolve_in_shardings (memory kinds)")
def check_memory_kinds(arg: Arg, wanted: Any) -> None:
    """An argument that has a concrete sharding, committed or not, must already be in the memory kind its in_sharding names.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_memory_kinds(Arg.uncommitted((4,)),
    ...                    NamedSharding(mesh, P(), memory_kind="pinned_host"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [RES-3]: the in_sharding puts the argument in memory kind 'pinned_host', but the argument lives in 'device'; jit does not move between memory kinds Move it first with jax.device_put(x, s.with_memory_kind('pinned_host')).
    """
    held, _ = _arg_sharding(arg)
    if held is UNSPECIFIED or not held.is_concrete:
        return
    require(wanted.memory_kind == held.memory_kind, lambda: MemoryKindMismatch(
        wanted.memory_kind, held.memory_kind))


@rule("RES-4", mirrors="jax._src.pjit._resolve_in_shardings (committed arguments)")
def check_committed(arg: Arg, wanted: Any) -> None:
    """A committed argument must lower to the same HLO sharding as its in_sharding; devices are not compared, so jit moves a committed argument whose blocks match onto the in_sharding's devices.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_committed(Arg.committed((4,), SingleDeviceSharding(5)), NamedSharding(mesh, P()))
    >>> check_committed(Arg.committed((4,), NamedSharding(mesh, P())), NamedSharding(mesh, P("x")))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [RES-4]: the argument is committed to NamedSharding(Mesh({'x': 2}), P()) (HLO {replicated}), but the in_sharding is NamedSharding(Mesh({'x': 2}), P('x')) (HLO {devices=[2]<=[2]}); jit does not reshard committed arguments Reshard it first with jax.device_put(x, in_sharding), or leave its in_sharding unspecified.
    """
    held, committed = _arg_sharding(arg)
    if held is UNSPECIFIED or not held.is_concrete or not committed:
        return
    ndim = len(arg.shape)
    held_hlo, wanted_hlo = to_hlo(held, ndim), to_hlo(wanted, ndim)
    require(hlo_equal(held_hlo, wanted_hlo), lambda: CommittedMismatch(
        held, str(held_hlo), wanted, str(wanted_hlo)))


@rule("RES-5", mirrors="jax._src.interpreters.pxla.shard_args (a replicated array's copy "
                      "is reused; xla::PjRtBuffers memory-kind check)")
def check_reused_replica(arg: Arg, target: SingleDeviceSharding) -> None:
    """Under ``device=``/``backend=`` jit skips the argument checks and moves each kept argument to the device, except that an array replicated over several devices, one of them the target, is used as is, so it must already be in the target's memory kind.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> pinned = NamedSharding(mesh, P(), memory_kind="pinned_host")
    >>> check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(5))
    >>> check_reused_replica(Arg.committed((4,), pinned), SingleDeviceSharding(0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [RES-5]: jit was given device=0, and the argument is a replicated array on devices [0, 1] in memory kind 'pinned_host'; JAX reuses its copy on device 0 as it is, and the program wants 'device' Move it first: jax.device_put(x, jax.devices()[0]), or drop device= (deprecated).
    """
    held = arg.sharding
    if held is None or not held.is_concrete or held.memory_kind == target.memory_kind:
        return
    devices = held.device_list
    device = target.device.id
    if len(devices) > 1 and devices.position_of(device) is not None and \
            is_fully_replicated(held):
        raise reject(ReplicaInOtherMemory(device, _devices_text(devices), held.memory_kind,
                                          target.memory_kind))


def resolve_input(item: Input, processes: int, device_or_backend: bool) -> Any:
    """The sharding lowering gets for one input (RES-1..4 in JAX's order)."""
    if device_or_backend:
        return item.jit_sharding
    if item.jit_sharding is UNSPECIFIED:
        return sharding_from_argument(item.arg)
    check_host_array(item.arg, item.jit_sharding, processes)
    check_memory_kinds(item.arg, item.jit_sharding)
    check_committed(item.arg, item.jit_sharding)
    return item.jit_sharding


@rule("KEEP-1", mirrors="jax._src.interpreters.pxla._dce_jaxpr")
def kept_inputs(uses: Sequence[bool], keep_unused: bool) -> tuple[int, ...]:
    """The compiled program keeps every input under ``keep_unused=True`` and otherwise only the inputs the function uses; dropped inputs take no part in the device assignment.

    >>> kept_inputs((True, False, True), keep_unused=False)
    (0, 2)
    >>> kept_inputs((True, False, True), keep_unused=True)
    (0, 1, 2)
    """
    return tuple(i for i, used in enumerate(uses) if used or keep_unused)


# --------------------------------------------------------------------------- devices

@dataclasses.dataclass(frozen=True)
class Source:
    """Where a sharding that takes part in the device assignment comes from."""

    sharding: Any
    what: str            # "argument args[0] (committed)", "in_shardings for args[1]", ...
    path: str | None = None


def _ids(sharding: Any) -> DeviceList:
    return sharding.device_list


@rule("DA-1", mirrors="jax._src.interpreters.pxla._get_and_check_device_assignment")
def device_assignment(sources: Sequence[Source], context: Mesh | AbstractMesh | None,
                      default_device: int) -> tuple[DeviceList | None, int]:
    """Every concrete sharding of the kept inputs and of the results lists the same devices in the same order — the context mesh's when one is set; that list is the device assignment.

    >>> a = Source(SingleDeviceSharding(0), "argument args[0]")
    >>> b = Source(SingleDeviceSharding(1), "argument args[1]")
    >>> devices, count = device_assignment([a, a], None, 0)
    >>> devices.id_tuple(), count
    ((0,), 1)
    >>> device_assignment([a, b], None, 0)
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [DA-1]: jit needs one device assignment for the whole program, but the argument args[0] is on devices [0] and the argument args[1] is on devices [1] Put both on the same devices in the same order (jax.device_put), or build both shardings from one mesh.
    """
    abstract = context if isinstance(context, AbstractMesh) else None
    abstract_what = "context mesh"
    any_concrete = isinstance(context, Mesh)
    first: tuple[DeviceList, str] | None = None
    for source in sources:
        s = source.sharding
        if s is UNSPECIFIED:
            continue
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            check_abstract_size(abstract, abstract_what, s.mesh.size, source.what)
            abstract, abstract_what = s.mesh, source.what
            continue
        any_concrete = True
        ids = _ids(s)
        if first is None:
            first = (ids, source.what)
        if context is None:
            other, other_devices = first[1], _devices_text(first[0])
            same = first[0] == ids
        elif isinstance(context, AbstractMesh):
            other, other_devices = "context mesh", f"(any {context.size})"
            same = context.size == len(ids)
        else:
            other, other_devices = "context mesh", _devices_text(context.devices)
            same = context.devices == ids
        if not same:
            raise reject(DeviceAssignmentMismatch(other, other_devices, source.what,
                                                  _devices_text(ids)), source.path)
    if first is None and isinstance(context, Mesh):
        assignment = context.devices
    elif first is None:
        assignment = DeviceList.of_ids(default_assignment(default_device))
    else:
        assignment = first[0]
    if any_concrete and abstract is not None:
        check_abstract_size(abstract, abstract_what, len(assignment), "device assignment")
    if any_concrete or abstract is None:
        return assignment, len(assignment)
    return None, abstract.size


@rule("DA-2", mirrors="jax._src.interpreters.pxla._get_and_check_device_assignment "
                      "(abstract meshes)")
def check_abstract_size(abstract: AbstractMesh | None, what: str, size: int, other: str) -> None:
    """Shardings over abstract meshes are compared by size only: every abstract mesh of a call, and the device assignment, span the same number of devices.

    >>> check_abstract_size(AbstractMesh((2, 4), ("x", "y")), "in_shardings for args[0]", 4,
    ...                     "device assignment")
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [DA-2]: the in_shardings for args[0] spans 8 devices but the device assignment spans 4; abstract meshes must match the program's size
    """
    if abstract is None:
        return
    require(abstract.size == size, lambda: AbstractSizeMismatch(what, abstract.size, other, size))


@rule("DA-3", mirrors="jax._src.interpreters.pxla.get_default_device")
def default_assignment(default_device: int) -> tuple[int, ...]:
    """With no sharding and no context mesh, the program runs on the default device alone (``jax.default_device``, else the first local device).

    >>> default_assignment(0)
    (0,)
    """
    return (default_device,)


@rule("DA-4", mirrors="jax._src.interpreters.pxla.lower_sharding_computation "
                      "(device_assignment is None)")
def check_has_devices(assignment: DeviceList | None, context: Any) -> None:
    """A call whose shardings are all over abstract meshes has no devices, so jit cannot run it.

    >>> check_has_devices(None, AbstractMesh((2,), ("x",), (AxisType.Explicit,)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [DA-4]: every sharding of the call is over an abstract mesh (AbstractMesh({'x': 2}, types=('Explicit',))), so the call has no devices to run on Use a concrete Mesh for at least one sharding or the context mesh, or lower with jit(f).trace(...).lower(lowering_platforms=...).
    """
    require(assignment is not None, lambda: NoConcreteDevices(context))


@rule("EXE-1", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (ndim == 0)")
def replicate_scalars(shardings: Sequence[Any], ranks: Sequence[int],
                      assignment: DeviceList | None) -> list[Any]:
    """On more than one device, a 0-d input whose sharding jit left open is replicated over the device assignment.

    >>> replicate_scalars([UNSPECIFIED, UNSPECIFIED], [0, 1], DeviceList.of_ids([0, 1]))
    [GSPMDSharding({replicated}, devices=DeviceList(Iota[2])), UNSPECIFIED]
    """
    if assignment is None or len(assignment) <= 1:
        return list(shardings)
    replicated = GSPMDSharding(assignment, Replicated())
    return [replicated if s is UNSPECIFIED and rank == 0 else s
            for s, rank in zip(shardings, ranks)]


@rule("EXE-3", mirrors="XLA's HLO verifier, reached through UnloadedMeshExecutable.from_hlo")
def check_tile_count(sharding: Any) -> None:
    """A GSPMDSharding handed to the compiler names exactly as many device positions as its device list holds.

    >>> check_tile_count(GSPMDSharding([0, 1], "{devices=[4]<=[4]}"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionRuntimeError: [EXE-3]: the sharding GSPMDSharding({devices=[4]<=[4]}, devices=DeviceList(Iota[2])) names 4 device positions but lists 2 devices; XLA's verifier refuses the program Make the tile assignment cover exactly the GSPMDSharding's devices.
    """
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled):
        named, held = sharding.hlo.num_devices, len(sharding.devices)
        require(named == held, lambda: TileCountMismatch(sharding, named, held))


@rule("EXE-4", mirrors="GSPMDSharding._to_sdy_sharding (lowering to Shardy)")
def check_iota_tiles(sharding: Any) -> None:
    """A tiled GSPMDSharding handed to the compiler has its tile assignment written as an iota order, not as a list of device positions.

    JAX caches the conversion by sharding equality, so within one process a listed
    tiling that equals an iota tiling converted earlier slips through; the rule states what a
    fresh process does.

    >>> check_iota_tiles(GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]<=[4]}"))
    >>> check_iota_tiles(GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]1,0,2,3}"))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionTypeError: [EXE-4]: the sharding GSPMDSharding({devices=[4,1]1,0,2,3}, devices=DeviceList(Iota[4])) lists its tile assignment device by device; JAX lowers GSPMD tilings only when written as an iota order Write the tiles as an iota order (e.g. {devices=[4,1]<=[4]}), or use a NamedSharding over a Mesh in that device order.
    """
    if isinstance(sharding, GSPMDSharding) and isinstance(sharding.hlo, Tiled):
        require(isinstance(sharding.hlo.assignment, Iota), lambda: ListedTiles(sharding))


@rule("EXE-2", mirrors="jax._src.interpreters.pxla.lower_sharding_computation (committed)")
def results_committed(context: Any, count: int, kept_shardings: Iterable[Any],
                      out_shardings: Iterable[Any]) -> bool:
    """The results come back committed when a context mesh is set, the program spans more than one device, or any kept input or result has a sharding jit did not leave open.

    >>> results_committed(None, 1, [UNSPECIFIED], [UNSPECIFIED])
    False
    >>> results_committed(None, 1, [SingleDeviceSharding(0)], [UNSPECIFIED])
    True
    """
    return bool(context is not None or count > 1
                or any(s is not UNSPECIFIED for s in kept_shardings)
                or any(s is not UNSPECIFIED for s in out_shardings))


# =========================================================================== 4. results

def _superdims(assignment: tuple[int, ...] | Iota, hlo: str, mesh: Any) -> list[tuple[int, int]]:
    """(size, stride) pairs, minor first, that generate the tile assignment's positions."""
    if isinstance(assignment, Iota):
        dims, perm = assignment.reshape_dims, assignment.perm
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        found: list[tuple[int, int]] = []
        for axis in reversed(perm):
            size, stride = dims[axis], strides[axis]
            if size == 1:
                continue
            if found and found[-1][0] * found[-1][1] == stride:
                found[-1] = (found[-1][0] * size, found[-1][1])
            else:
                found.append((size, stride))
        return found
    flat = list(assignment)
    require(flat[0] == 0, lambda: RecoveryNotImplemented(
        hlo, mesh, "its tile assignment does not start at position 0"))
    found = []
    while len(flat) > 1:
        stride = flat[1]
        size = 1
        while size < len(flat) and flat[size] == size * stride:
            size += 1
        found.append((size, stride))
        flat = flat[::size]
    return found


@rule("OUT-2", mirrors="jax._src.sharding_impls.parse_flatten_op_sharding; unflatten_array")
def spec_from_hlo(hlo: HloSharding, mesh: Mesh | AbstractMesh, memory_kind: Any = None
                  ) -> NamedSharding:
    """An HLO sharding reads back as a PartitionSpec over a mesh when its tile assignment is the mesh's device order transposed: each tiled dimension takes, in that order, mesh axes whose sizes divide it.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> from shardlaw.spec.hlo import parse_hlo
    >>> spec_from_hlo(parse_hlo("{devices=[4,2]<=[2,4]T(1,0)}"), mesh)
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('y', 'x'))
    >>> spec_from_hlo(parse_hlo("{devices=[2,4]<=[8]}"), Mesh.iota((4, 2), ("x", "y")))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [OUT-2]: the compiler placed the result with {devices=[2,4]<=[8]}, which cannot be written as a PartitionSpec over the mesh Mesh({'x': 4, 'y': 2}): tile dimension 0 of size 2 is not a multiple of mesh axis 'x' of size 4
    """
    text = str(hlo)

    def done(*partitions: Any) -> NamedSharding:
        return NamedSharding(mesh, PartitionSpec(*partitions), memory_kind=memory_kind)

    if isinstance(hlo, Replicated):
        return done()
    if isinstance(hlo, Maximal):
        require(mesh.size == 1, lambda: RecoveryAssertion(text, mesh, "it is a maximal sharding"))
        return done()
    if not isinstance(hlo, Tiled):
        raise reject(RecoveryAssertion(text, mesh, f"it is a {type(hlo).__name__} sharding"))
    sizes = {n: s for n, s in zip(mesh.axis_names, mesh.axis_sizes) if s != 1}
    names = list(sizes)
    strides = {}
    acc = 1
    for name in reversed(names):
        strides[name] = acc
        acc *= sizes[name]
    size_at_stride = {strides[n]: sizes[n] for n in names}
    name_of = {(sizes[n], strides[n]): n for n in names}
    order: list[str] = []
    for size, stride in reversed(_superdims(hlo.assignment, text, mesh)):
        pieces = []
        target = size_at_stride.get(stride)
        require(target is not None, lambda: RecoveryLookup(
            text, mesh, f"no mesh axis has stride {stride}"))
        while size > target:
            require(target > 1 and size % target == 0, lambda: RecoveryAssertion(
                text, mesh, f"a run of {size} devices does not split into mesh axes"))
            pieces.append((target, stride))
            size //= target
            stride *= target
            target = size_at_stride.get(stride)
            require(target is not None, lambda: RecoveryLookup(
                text, mesh, f"no mesh axis has stride {stride}"))
        require(size == target, lambda: RecoveryAssertion(
            text, mesh, f"a run of {size} devices does not match a mesh axis"))
        pieces.append((size, stride))
        for piece in reversed(pieces):
            require(piece in name_of, lambda piece=piece: RecoveryLookup(
                text, mesh, f"no mesh axis has size {piece[0]} at stride {piece[1]}"))
            order.append(name_of[piece])
    partitions: list[tuple[str, ...]] = []
    axes = iter(order)
    for dim, tile in enumerate(hlo.dims):
        taken: list[str] = []
        while tile > 1:
            axis = next(axes, None)
            require(axis is not None, lambda: RecoveryAssertion(
                text, mesh, "the mesh axes run out before the tiles do"))
            require(tile % sizes[axis] == 0, lambda: RecoveryIndivisible(
                text, mesh, f"tile dimension {dim} of size {tile} is not a multiple of mesh "
                            f"axis {axis!r} of size {sizes[axis]}"))
            tile //= sizes[axis]
            taken.append(axis)
        partitions.append(tuple(taken))
    require(len(hlo.subgroups) <= 1, lambda: RecoveryNotImplemented(
        text, mesh, "it has more than one kind of subgroup"))
    if hlo.subgroups == (SubgroupType.REPLICATED,):
        partitions = partitions[:-1]
    while partitions and partitions[-1] == ():
        partitions.pop()
    return done(*partitions)


@rule("OUT-1", mirrors="jax._src.interpreters.pxla.maybe_recover_user_shardings; "
                       "_get_out_sharding_from_orig_sharding")
def recover_shardings(placed: list[Any], values: Sequence[Any], given: Sequence[Any],
                      given_values: Sequence[Any], context: Mesh | AbstractMesh | None
                      ) -> list[Any]:
    """A value the compiler placed (a GSPMDSharding) comes back in the type of the first NamedSharding or SingleDeviceSharding the user gave — that sharding itself when JAX-equivalent, else re-read over its mesh (or its one device) — else of the first such among the placed values, else over the context mesh, and stays a GSPMDSharding when none applies or re-reading fails.

    JAX applies this to the executable's inputs (``given``: the shardings jit resolved)
    and then to its results (``given``: the inputs so recovered). ``values`` and
    ``given_values`` are the values' types (:class:`~shardlaw.spec.call.Out`: rank and mesh).

    >>> from shardlaw.spec.call import Out
    >>> mesh = Mesh.iota((2,), ("x",))
    >>> named = NamedSharding(mesh, P("x"))
    >>> compiler = GSPMDSharding(mesh.devices, "{devices=[2]<=[2]}")
    >>> recover_shardings([compiler], [Out((4,))], [named], [Out((4,))], None)
    [NamedSharding(Mesh({'x': 2}), P('x'))]
    >>> recover_shardings([compiler], [Out((4,))], [], [], None)
    [GSPMDSharding({devices=[2]<=[2]}, devices=DeviceList(Iota[2]))]
    """
    if not any(isinstance(o, GSPMDSharding) for o in placed):
        return list(placed)
    origin: tuple[Any, Any] | None = None
    for s, value in [*zip(given, given_values), *((s, None) for s in placed)]:
        if isinstance(s, (NamedSharding, SingleDeviceSharding)):
            origin = (s, value)
            break
    if origin is None:
        if isinstance(context, Mesh):
            return [spec_from_hlo(o.hlo, context, o.memory_kind) if isinstance(o, GSPMDSharding)
                    else o for o in placed]
        return list(placed)
    user, user_value = origin
    result = []
    for o, value in zip(placed, values):
        rank = len(value.shape)
        if not isinstance(o, GSPMDSharding):
            result.append(o)
        elif isinstance(user, SingleDeviceSharding):
            result.append(SingleDeviceSharding(o.devices.id_at(0), memory_kind=o.memory_kind))
        elif (user_value is not None and len(user_value.shape) == rank
              and value.mesh == user.mesh.abstract and jax_equivalent(o, user, rank)):
            result.append(user)
        else:
            mesh = _mesh_for_result(value, user.mesh, o)
            try:
                if mesh is None:
                    raise reject(RecoveryAssertion(str(o.hlo), value.mesh, "mesh size differs"))
                result.append(spec_from_hlo(o.hlo, mesh, o.memory_kind))
            except Rejection as error:
                if error.failure.jax_error == "IndivisibleError":
                    raise
                result.append(o)
    return result


def _input_type(arg: Arg) -> Any:
    """An input's type as tracing sees it: a committed NamedSharding carries its mesh."""
    from .call import Out

    mesh = None
    if arg.is_committed and isinstance(arg.sharding, NamedSharding):
        mesh = arg.sharding.mesh.abstract
    return Out(arg.shape, arg.dtype, None, mesh)


def _concrete_inputs(shardings: Sequence[Any], assignment: DeviceList) -> list[Any]:
    """Input shardings over abstract meshes, made concrete over the device assignment."""
    out = []
    for s in shardings:
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            s = NamedSharding(Mesh(s.mesh.axis_sizes, s.mesh.axis_names, assignment,
                                   s.mesh.axis_types), s.spec, memory_kind=s.memory_kind)
        out.append(s)
    return out


def _mesh_for_result(out: Any, given: Mesh, placed: GSPMDSharding) -> Mesh | None:
    """The mesh a result is re-read over: its type's mesh made concrete, else the input's."""
    typed = out.mesh
    if typed is None or AxisType.Manual in typed.axis_types:
        return given
    if typed.size != len(placed.devices):
        return None
    return Mesh(typed.axis_sizes, typed.axis_names, placed.devices, typed.axis_types)


@rule("OUT-3", mirrors="jax._src.interpreters.pxla.finalize_shardings")
def single_device_results(outs: Sequence[Any], assignment: DeviceList) -> list[Any]:
    """On a one-device program, a result still placed by an HLO sharding comes back as a SingleDeviceSharding on that device.

    >>> single_device_results([GSPMDSharding([3], "{replicated}")], DeviceList.of_ids([3]))
    [SingleDeviceSharding(Device(3))]
    """
    if len(assignment) != 1:
        return list(outs)
    return [SingleDeviceSharding(assignment.id_at(0), memory_kind=o.memory_kind)
            if isinstance(o, GSPMDSharding) else o for o in outs]


def compiled_results(specified: Sequence[Any], compiler: Sequence[HloSharding | None],
                     assignment: DeviceList, memory: Sequence[str | None]) -> list[Any]:
    """What the executable reports before recovery: the given sharding, else the compiler's."""
    outs = []
    for s, choice, kind in zip(specified, compiler, memory):
        if isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh):
            s = NamedSharding(Mesh(s.mesh.axis_sizes, s.mesh.axis_names, assignment,
                                   s.mesh.axis_types), s.spec, memory_kind=s.memory_kind)
        if s is not UNSPECIFIED:
            outs.append(s)
        elif len(assignment) == 1:
            outs.append(GSPMDSharding(assignment, Replicated(), memory_kind=kind))
        elif choice is None:
            outs.append(UNSPECIFIED)
        else:
            outs.append(GSPMDSharding(assignment, choice, memory_kind=kind))
    return outs


def compiled_inputs(resolved: Sequence[Any], compiler: Sequence[HloSharding | None],
                    assignment: DeviceList) -> list[Any]:
    """What the executable is compiled to take, before recovery: the resolved sharding, else
    (jit left the input open) the compiler's choice — replicated on a one-device program,
    where no partitioner runs — else UNSPECIFIED (the choice is not known)."""
    taken = []
    for s, choice in zip(resolved, compiler):
        if s is not UNSPECIFIED:
            taken.append(s)
        elif len(assignment) == 1:
            taken.append(GSPMDSharding(assignment, Replicated()))
        elif choice is None:
            taken.append(UNSPECIFIED)
        else:
            taken.append(GSPMDSharding(assignment, choice))
    return taken


# =========================================================================== 5. AOT calls

def flat_arguments(args: tuple, kwargs: dict, static: set[int], static_names: set[str]
               ) -> tuple[list[tuple[str, Any]], Node]:
    dynamic_args = tuple(a for i, a in enumerate(args) if i not in static)
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
    flat = [(show_path(("args", *p)), leaf) for p, leaf in leaves_with_paths(dynamic_args)]
    flat += [(show_path(("kwargs", *p)), leaf) for p, leaf in leaves_with_paths(dynamic_kwargs)]
    return flat, structure((dynamic_args, dynamic_kwargs))


def _show_tree(node: Node) -> str:
    if node.kind == "leaf":
        return "*"
    if node.kind == "none":
        return "None"
    inner = ", ".join(_show_tree(c) for c in node.children)
    if node.kind == "dict":
        inner = ", ".join(f"{k!r}: {_show_tree(c)}" for k, c in zip(node.keys, node.children))
        return "{" + inner + "}"
    return ("(" + inner + ("," if len(node.children) == 1 else "") + ")"
            if node.kind == "tuple" else "[" + inner + "]")


def _details(items: list[str]) -> tuple[str, str]:
    shown = "the first 5" if len(items) > 5 else "they are"
    return shown, "; ".join(items[:5])


@rule("AOT-1", mirrors="jax._src.stages.Compiled.call")
def check_aot_structure(compiled: Node, called: Node) -> None:
    """An executable compiled ahead of time takes arguments of exactly the pytree structure it was compiled for.

    >>> from shardlaw.spec.pytree import structure
    >>> check_aot_structure(structure(((1,), {})), structure(((1, 2), {})))
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionTypeError: [AOT-1]: the executable was compiled for arguments shaped as ((*,), {}), but is called with ((*, *), {})
    """
    require(compiled == called, lambda: AotStructureMismatch(_show_tree(compiled),
                                                             _show_tree(called)))


@rule("AOT-2", mirrors="jax._src.interpreters.pxla.check_arg_avals_for_call")
def check_aot_types(compiled: Sequence[tuple[str, Arg]], called: Sequence[Arg]) -> None:
    """Each argument of an AOT call has the shape and dtype it was compiled for (every input, kept or not; at most five differences are listed).

    >>> check_aot_types([("args[0]", Arg.numpy((4,)))], [Arg.numpy((4,), "int32")])
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionTypeError: [AOT-2] at args[0]: 1 argument(s) differ from the types the executable was compiled for; they are: args[0] compiled for float32[4], called with int32[4] Lower and compile again for the new types, or cast the arguments.
    """
    bad = [f"{path} compiled for {a.dtype}{list(a.shape)}, called with {b.dtype}{list(b.shape)}"
           for (path, a), b in zip(compiled, called) if (a.shape, a.dtype) != (b.shape, b.dtype)]
    if bad:
        first = next(path for (path, a), b in zip(compiled, called)
                     if (a.shape, a.dtype) != (b.shape, b.dtype))
        raise reject(AotTypeMismatch(len(bad), *_details(bad)), first)


@rule("AOT-3", mirrors="jax._src.interpreters.pxla.check_array_xla_sharding_layout_match")
def check_aot_shardings(expected: Sequence[tuple[str, Any]], called: Sequence[Arg],
                        device_or_backend: bool = False,
                        layouts: Sequence[Any] | None = None) -> None:
    """Each committed array passed to an AOT-compiled executable must be JAX-equivalent (EQ-1) to the input sharding it was compiled with — not merely lower to the same HLO as at jit time; for an input jit left open, the compiler's choice: the one device of a one-device program, else what the call's ``compiler_in`` oracle says, and no comparison where it says nothing — and be in the layout the executable takes it in; uncommitted, numpy and scalar arguments, and every argument under ``device=``/``backend=``, are moved and laid out without a check.

    ``expected`` holds the executable's input shardings (UNSPECIFIED: not known, not
    compared); an input compiled from a numpy array, a scalar or an uncommitted array was
    left open, so what the executable takes is the compiler's choice, not where the argument
    was. ``layouts`` holds the executable's layout per expected input (None: the default; an
    input whose layout the compiler chose and the call does not give is not compared).
    Sharding and layout differences are listed together, as JAX lists them.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_aot_shardings([("args[0]", NamedSharding(mesh, P()))],
    ...                     [Arg.committed((4,), SingleDeviceSharding(0))])
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [AOT-3] at args[0]: 1 committed argument(s) are placed otherwise than the executable was compiled for; they are: args[0] passed SingleDeviceSharding(Device(0)), compiled for NamedSharding(Mesh({'x': 2}), P()) jax.device_put each one to the executable's input_shardings first, or compile again for these shardings.
    >>> lone = SingleDeviceSharding(0)
    >>> check_aot_shardings([("args[0]", lone)], [Arg.committed((4, 4), lone)],
    ...                     layouts=[Layout((1, 0))])
    Traceback (most recent call last):
    ...
    shardlaw.spec.rules.RejectionValueError: [AOT-3] at args[0]: 1 committed argument(s) are laid out otherwise than the executable was compiled for; they are: args[0] passed in the default layout (0, 1), compiled for Layout((1, 0)) jax.device_put each one to the executable's input_formats first, or compile again for these layouts.

    Compiled from a numpy array, a one-device program takes the input on its device (here
    the default device, 0); on more devices the compiler chooses (``compiler_in``):

    >>> from shardlaw.spec.call import Out
    >>> from shardlaw.spec.hlo import parse_hlo
    >>> print(jit_call(Call(args=(Arg.numpy((4,)),), outputs=Out((4,)),
    ...                     aot_args=(Arg.committed((4,), SingleDeviceSharding(3)),))).message)
    [AOT-3] at args[0]: 1 committed argument(s) are placed otherwise than the executable was compiled for; they are: args[0] passed SingleDeviceSharding(Device(3)), compiled for SingleDeviceSharding(Device(0)) jax.device_put each one to the executable's input_shardings first, or compile again for these shardings.
    >>> split = NamedSharding(mesh, P("x"))
    >>> call = Call(args=(Arg.numpy((4,)), Arg.committed((4,), split)), outputs=Out((4,)),
    ...             aot_args=(Arg.committed((4,), NamedSharding(mesh, P())),
    ...                       Arg.committed((4,), split)))
    >>> jit_call(call).accepted
    True
    >>> chosen = (parse_hlo("{devices=[2]<=[2]}"), None)   # the compiler split args[0]
    >>> jit_call(dataclasses.replace(call, compiler_in=chosen)).rule
    'AOT-3'
    """
    bad: list[tuple[str, str, str]] = []
    if device_or_backend:
        return
    layouts = layouts if layouts is not None else (None,) * len(expected)
    for (path, wanted), arg, laid in zip(expected, called, layouts):
        if arg.kind != "committed" or wanted is UNSPECIFIED:
            continue
        rank = len(arg.shape)
        if not jax_equivalent(arg.sharding, wanted, rank):
            bad.append(("sharding", path, f"{path} passed {arg.sharding!r}, compiled for "
                                          f"{wanted!r}"))
        held = arg.layout.major_to_minor if arg.layout is not None else tuple(range(rank))
        want = laid.major_to_minor if isinstance(laid, Layout) else tuple(range(rank))
        if laid is not AUTO_LAYOUT and held != want:
            bad.append(("layout", path, f"{path} passed in {layout_text(arg.layout, rank)}, "
                                        f"compiled for {layout_text(laid, rank)}"))
    if bad:
        kinds = {kind for kind, _, _ in bad}
        how, formats, what = (("placed", "input_shardings", "shardings") if kinds == {"sharding"}
                              else ("laid out", "input_formats", "layouts")
                              if kinds == {"layout"} else
                              ("placed and laid out", "input_formats", "shardings and layouts"))
        raise reject(AotShardingMismatch(len(bad), *_details([b for _, _, b in bad]), how,
                                         formats, what), bad[0][1])


# =========================================================================== the verdict

def _dedupe(trace: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(trace))


def jit_call(call: Call) -> Verdict:
    """What ``jax.jit`` (jax 0.10.2) does with ``call``: a :class:`Verdict` with its trace.

    >>> from shardlaw.spec.call import Arg, Out
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Arg.committed((8, 8), NamedSharding(mesh, P("x", "y")))
    >>> v = jit_call(Call(args=(x,), outputs=Out((8, 8))))
    >>> v.accepted, v.num_devices, v.device_assignment
    (True, 8, (0, 1, 2, 3, 4, 5, 6, 7))
    >>> other = Arg.committed((8,), SingleDeviceSharding(3))
    >>> print(jit_call(Call(args=(x, other), outputs=Out((8, 8)))).message)
    [DA-1] at args[1]: jit needs one device assignment for the whole program, but the argument args[0] (committed) is on devices [0, 1, 2, 3, 4, 5, 6, 7] and the argument args[1] (committed) is on devices [3] Put both on the same devices in the same order (jax.device_put), or build both shardings from one mesh.
    """
    with tracing() as trace:
        try:
            fields = _decide(call)
        except Rejection as error:
            failure = error.failure
            return Verdict(False, _dedupe(trace), rule=failure.rule,
                           error_type=failure.error_type.__name__, jax_error=failure.jax_error,
                           message=str(error), path=error.path, stage=_stage(failure.rule))
    return Verdict(True, _dedupe(trace), **fields)


def _decide(call: Call) -> dict[str, Any]:
    options = call.options
    # 1. At jax.jit(...): options and leaves.
    check_device_options(options)
    leaves = _leaf_paths(options.in_shardings, "in_shardings") + _leaf_paths(
        options.out_shardings, "out_shardings")
    # JAX splits the layouts off both trees, refusing bare ones, before it checks any leaf.
    leaves.sort(key=lambda item: not is_layout(item[1]))
    for which, leaf in leaves:
        try:
            check_leaf(leaf, which)
        except Rejection as error:
            raise error.at(error.path or which) from None
    device_or_backend = options.device is not None or options.backend is not None

    # 2. At the call: the form, the context, the leaves' meaning, the inputs.
    static = {i if i >= 0 else i + len(call.args) for i in options.static_argnums}
    static_names = set(options.static_argnames)
    flat_in, _ = flat_arguments(call.args, call.kwargs, static, static_names)
    for path, leaf in flat_in:
        check_call(isinstance(leaf, Arg), f"the dynamic argument {path}",
                   "an Arg (mark static positions with static_argnums)", leaf)
    context = jit_context_mesh(call.context_mesh)
    check_call_form(call, context)
    if device_or_backend:
        placed = device_option_sharding(options, call)
        in_tree: Any = placed
        out_tree: Any = placed
    else:
        in_tree = convert_leaves(options.in_shardings, context, "in_shardings")
        out_tree = convert_leaves(options.out_shardings, context, "out_shardings")
    positional = structure(tuple(a for i, a in enumerate(call.args) if i not in static))
    if device_or_backend:
        jit_shardings = [in_tree] * len(flat_in)
    elif call.kwargs:  # JIT-4: in_shardings is left out here
        jit_shardings = [UNSPECIFIED] * len(flat_in)
    else:
        jit_shardings = match_in_shardings(in_tree, positional)
    jit_shardings = [UNSPECIFIED if s is None else s for s in jit_shardings]
    laid_out = not device_or_backend and not call.kwargs
    in_layouts = (_flat_layouts(options.in_shardings, positional, "in_shardings") if laid_out
                  else [None] * len(flat_in))
    for (path, arg), s in zip(flat_in, jit_shardings):
        check_fits(s, arg.shape, path)
    for (path, arg), laid in zip(flat_in, in_layouts):
        if laid is None:
            continue
        try:
            check_layout_rank(laid, arg.shape, "argument")
        except Rejection as error:
            raise error.at(path) from None

    # 3. After tracing: the results.
    flat_out = [(show_path(("result", *p)), o) for p, o in leaves_with_paths(call.outputs)]
    out_shardings = match_out_shardings(out_tree, structure(call.outputs))
    out_shardings = [UNSPECIFIED if s is None else s for s in out_shardings]
    out_layouts = (_flat_layouts(options.out_shardings, structure(call.outputs), "out_shardings")
                   if not device_or_backend else [None] * len(flat_out))
    for (path, out), s in zip(flat_out, out_shardings):
        check_fits(s, out.shape, path)
    for (path, out), laid in zip(flat_out, out_layouts):
        if laid is None:
            continue
        try:
            check_layout_rank(laid, out.shape, "result")
        except Rejection as error:
            raise error.at(path) from None

    # 4. Lowering: resolution, kept inputs, devices, scalars, committedness.
    inputs = [Input(path, arg, s) for (path, arg), s in zip(flat_in, jit_shardings)]
    resolved = []
    for item in inputs:
        try:
            resolved.append(resolve_input(item, call.process_count, device_or_backend))
        except Rejection as error:
            raise error.at(item.path) from None
    # Layouts are resolved after every sharding, input by input, kept or not; then results.
    for item, laid in zip(inputs, in_layouts):
        if laid is None:
            continue
        try:
            check_argument_layout(item.arg, laid)
            check_layout_devices(laid, item.jit_sharding)
        except Rejection as error:
            raise error.at(item.path) from None
    for (path, _), laid, s in zip(flat_out, out_layouts, out_shardings):
        if laid is None:
            continue
        try:
            check_layout_devices(laid, s)
        except Rejection as error:
            raise error.at(path) from None
    # The layout rules take part only where a layout does: else every layout is the default.
    layouts_in_play = (any(given is not None for given in in_layouts + out_layouts)
                       or any(item.arg.layout is not None for item in inputs))
    taken_in = (executable_input_layouts([item.arg for item in inputs], in_layouts,
                                         call.compiler_in_layouts) if layouts_in_play
                else (None,) * len(inputs))
    uses = call.uses if call.uses is not None else (True,) * len(inputs)
    check_call(len(uses) == len(inputs), "uses", f"{len(inputs)} flags, one per flat input",
               uses)
    kept = kept_inputs(uses, options.keep_unused)
    sources = [Source(resolved[i], _source_name(inputs[i]), inputs[i].path) for i in kept]
    sources += [Source(s, f"out_shardings for {path}", path)
                for (path, _), s in zip(flat_out, out_shardings)]
    assignment, count = device_assignment(sources, context, call.default_device)
    check_has_devices(assignment, context)
    assert assignment is not None
    ranks = [len(item.arg.shape) for item in inputs]
    kept_shardings = [resolved[i] for i in kept]
    final = replicate_scalars(resolved, ranks, assignment)
    for path, s in [*((inputs[i].path, final[i]) for i in kept),
                    *((path, s) for (path, _), s in zip(flat_out, out_shardings))]:
        try:
            check_tile_count(s)
            check_iota_tiles(s)
        except Rejection as error:
            raise error.at(path) from None
    committed = results_committed(context, count, kept_shardings, out_shardings)

    # 5. Compiled: the results' shardings.
    compiler = call.compiler if call.compiler is not None else (None,) * len(flat_out)
    check_call(len(compiler) == len(flat_out), "compiler",
               f"{len(flat_out)} entries, one per flat result", compiler)
    memory = call.compiler_memory if call.compiler_memory is not None else (None,) * len(flat_out)
    check_call(len(memory) == len(flat_out), "compiler_memory",
               f"{len(flat_out)} entries, one per flat result", memory)
    outs = compiled_results(out_shardings, compiler, assignment, memory)
    compiler_in = call.compiler_in if call.compiler_in is not None else (None,) * len(flat_in)
    check_call(len(compiler_in) == len(flat_in), "compiler_in",
               f"{len(flat_in)} entries, one per flat input", compiler_in)
    kept_final = [final[i] for i in kept]
    kept_values = [_input_type(inputs[i].arg) for i in kept]
    try:
        concrete = _concrete_inputs(kept_final, assignment)
        taken = compiled_inputs(concrete, [compiler_in[i] for i in kept], assignment)
        recovered = recover_shardings(taken, kept_values, concrete, kept_values, None)
    except Rejection as error:
        raise error.at(inputs[kept[0]].path) from None
    try:
        outs = recover_shardings(outs, [o for _, o in flat_out], recovered, kept_values, context)
    except Rejection as error:
        raise error.at(flat_out[0][0] if flat_out else "result") from None
    outs = single_device_results(outs, assignment)
    check_call(call.compiler_layouts is None or len(call.compiler_layouts) == len(flat_out),
               "compiler_layouts", f"{len(flat_out)} entries, one per flat result",
               call.compiler_layouts)
    check_call(call.compiler_in_layouts is None or len(call.compiler_in_layouts) == len(flat_in),
               "compiler_in_layouts", f"{len(flat_in)} entries, one per flat input",
               call.compiler_in_layouts)
    given_out = (result_layouts(out_layouts, call.compiler_layouts) if layouts_in_play
                 else (None,) * len(flat_out))
    executable_inputs = list(final)
    for i, s in zip(kept, single_device_results(recovered, assignment)):
        executable_inputs[i] = s

    transfers = tuple(item.path for item, s in zip(inputs, final)
                      if item.arg.kind in ("committed", "uncommitted") and s is not UNSPECIFIED
                      and _moves(item.arg, s))

    # 6. Dispatch: the call itself, or the AOT call of the compiled executable.
    if call.aot_args is not None:
        _aot_call(call, flat_in, static, static_names, kept, executable_inputs, taken_in)
    elif device_or_backend:
        _check_replicas([(inputs[i].path, inputs[i].arg) for i in kept], in_tree)

    return dict(
        in_paths=tuple(p for p, _ in flat_in), in_shardings=tuple(final),
        out_paths=tuple(p for p, _ in flat_out), out_shardings=tuple(outs),
        device_assignment=assignment.id_tuple(), num_devices=count, kept_inputs=kept,
        out_committed=(committed,) * len(flat_out), transfers=transfers,
        in_layouts=taken_in, out_layouts=given_out)


def convert_leaves(tree: Any, context: Any, which: str) -> Any:
    """Each leaf of a shardings tree, turned into a sharding (JIT-3), keeping the tree."""
    if tree is UNSPECIFIED:
        return UNSPECIFIED

    return map_leaves(lambda path, leaf: leaf_to_sharding(leaf, context,
                                                          show_path((which, *path))),
                      tree, none_is_leaf=True, with_path=True)


def given_layouts(call: Call) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The layout each flat input and each flat result is given by a Format of jit's options (None: none given)."""
    options = call.options
    static = {i if i >= 0 else i + len(call.args) for i in options.static_argnums}
    flat_in, _ = flat_arguments(call.args, call.kwargs, static, set(options.static_argnames))
    flat_out = list(leaves_with_paths(call.outputs))
    if options.device is not None or options.backend is not None:
        return (None,) * len(flat_in), (None,) * len(flat_out)
    positional = structure(tuple(a for i, a in enumerate(call.args) if i not in static))
    given_in = (_flat_layouts(options.in_shardings, positional, "in_shardings")
                if not call.kwargs else [None] * len(flat_in))
    given_out = _flat_layouts(options.out_shardings, structure(call.outputs), "out_shardings")
    return tuple(given_in), tuple(given_out)


def _flat_layouts(tree: Any, node: Node, which: str) -> list[Any]:
    """The layout part of each flat leaf's Format (None: none), once TREE-1/2 matched ``tree``."""
    if tree is UNSPECIFIED or tree is None:
        return [None] * node.num_leaves
    layouts = map_leaves(lambda leaf: split_format(leaf)[1], tree, none_is_leaf=True)
    if which == "in_shardings" and isinstance(layouts, list):
        layouts = tuple(layouts)  # TREE-1 reads a top-level list as a tuple
    if not is_container(layouts) or layouts is None:
        return [layouts] * node.num_leaves
    return _broadcast(layouts, node)


def _source_name(item: Input) -> str:
    if item.jit_sharding is not UNSPECIFIED:
        return f"in_shardings for {item.path}"
    return f"argument {item.path} ({'committed' if item.arg.is_committed else 'uncommitted'})"


def _moves(arg: Arg, s: Any) -> bool:
    held = arg.sharding
    if held is None or not held.is_concrete or not getattr(s, "is_concrete", False):
        return False
    return held.device_list != s.device_list or not hlo_equal(
        to_hlo(held, len(arg.shape)), to_hlo(s, len(arg.shape)))


def _aot_call(call: Call, flat_in: list[tuple[str, Arg]], static: set[int],
              static_names: set[str], kept: tuple[int, ...], executable: list[Any],
              layouts: Sequence[Any]) -> None:
    assert call.aot_args is not None and call.aot_kwargs is not None
    # The executable takes the dynamic arguments only: static ones are not passed again.
    _, compiled_tree = flat_arguments(call.args, call.kwargs, static, static_names)
    flat_called, called_tree = flat_arguments(call.aot_args, call.aot_kwargs, set(), set())
    check_aot_structure(compiled_tree, called_tree)
    called = [a for _, a in flat_called]
    for path, leaf in flat_called:
        check_call(isinstance(leaf, Arg), f"the AOT call's {path}", "an Arg", leaf)
    check_aot_types(flat_in, called)
    device_or_backend = call.options.device is not None or call.options.backend is not None
    check_aot_shardings([(flat_in[i][0], executable[i]) for i in kept],
                        [called[i] for i in kept], device_or_backend,
                        [layouts[i] for i in kept])
    if device_or_backend:
        _check_replicas([(flat_called[i][0], called[i]) for i in kept], executable[kept[0]]
                        if kept else None)


def _check_replicas(kept: list[tuple[str, Arg]], target: Any) -> None:
    """RES-5 over the inputs handed to the program (under device=/backend=)."""
    if not isinstance(target, SingleDeviceSharding):
        return
    for path, arg in kept:
        try:
            check_reused_replica(arg, target)
        except Rejection as error:
            raise error.at(path) from None


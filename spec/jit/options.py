"""jit's options and the call's form: the JIT rules.

At ``jax.jit(...)`` jit checks its device options (JIT-1) and every leaf of
``in_shardings``/``out_shardings`` (JIT-2). At the call it reads the context mesh (JIT-5),
checks the call's form (JIT-4) and turns each leaf into a sharding (JIT-3). Each rule's
failure is written right above it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .call import Call, JitOptions
from .layouts import Format, Layout, is_layout, split_format
from ..core.pytree import leaves_with_paths, map_leaves, show_path
from ..core.rules import Failure, located, reject, require, rule, varies
from ..core.shardings import (
    UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding, check_axes_unique,
)
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec, UNCONSTRAINED

P = PartitionSpec  # the name the examples use

__all__ = ["check_device_options", "check_leaf", "jit_context_mesh", "check_call_form",
           "leaf_to_sharding", "device_option_sharding", "convert_leaves", "leaf_paths"]


@dataclasses.dataclass(frozen=True)
class DeviceOptionConflict(Failure, rule="JIT-1"):
    template = "jit was given {given}; {problem}"
    given: str
    problem: str

    @property
    def hint(self) -> str:  # type: ignore[override]
        return ("Drop device=/backend= (deprecated) and place the inputs with "
                "jax.device_put, or pass shardings instead.")


@rule("JIT-1", mirrors="jax._src.pjit._parse_jit_arguments")
def check_device_options(options: JitOptions) -> None:
    """``device=`` and ``backend=`` exclude each other and exclude ``in_shardings`` and ``out_shardings``.

    >>> check_device_options(JitOptions(device=1, in_shardings=P()))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [JIT-1]: jit was given device=1 and in_shardings; in_shardings must then be left out. Drop device=/backend= (deprecated) and place the inputs with jax.device_put, or pass shardings instead.
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


def leaf_paths(tree: Any, which: str) -> list[tuple[str, Any]]:
    """Each leaf of a shardings tree (None a leaf) with its path, ``in_shardings[0]``."""
    if tree is UNSPECIFIED:
        return []
    return [(show_path((which, *p)), leaf) for p, leaf in leaves_with_paths(
        tree, (), is_leaf=lambda x: x is None)]


@dataclasses.dataclass(frozen=True)
class BadLeaf(Failure, rule="JIT-2", error=TypeError):
    template = "a leaf of {which} must be a Sharding, a PartitionSpec or None, got {leaf!r}"
    hint = "Wrap mesh axis names in P(...), or pass a NamedSharding."
    which: str
    leaf: Any


@dataclasses.dataclass(frozen=True)
class LeafNotAllowed(Failure, rule="JIT-2"):
    template = "{which} holds {leaf!r}, but {problem}"
    which: str
    leaf: Any
    problem: str


@dataclasses.dataclass(frozen=True)
class BareLayout(LeafNotAllowed):
    hint = "Wrap it with a sharding: Format(layout, sharding)."


@rule("JIT-2", mirrors="jax._src.pjit._split_layout_and_sharding; "
                       "jax._src.sharding_impls.prepare_axis_resources")
def check_leaf(leaf: Any, which: str) -> None:
    """Every leaf of ``in_shardings``/``out_shardings`` is None, a PartitionSpec, a Sharding or a Format (whose sharding part is checked alike), never a bare Layout; a NamedSharding's mesh is not empty; neither holds UNCONSTRAINED; a PartitionSpec names each mesh axis once.

    JAX looks for bare layouts in both trees before it checks any other leaf, so
    :func:`jit_call` checks those leaves first.

    >>> check_leaf("x", "in_shardings[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [JIT-2]: a leaf of in_shardings[0] must be a Sharding, a PartitionSpec or None, got 'x'. Wrap mesh axis names in P(...), or pass a NamedSharding.
    >>> check_leaf(P(UNCONSTRAINED), "out_shardings")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [JIT-2]: out_shardings holds P(UNCONSTRAINED), but jit does not take UNCONSTRAINED dimensions
    >>> check_leaf(Layout((1, 0)), "in_shardings[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [JIT-2]: in_shardings[1] holds Layout((1, 0)), but jit does not accept device-local layouts directly. Wrap it with a sharding: Format(layout, sharding).
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


@varies("0.4.13", "JAX 0.4.13 has no jax.set_mesh and no abstract meshes: jax.jit reads "
        "no context mesh, and CALL-1 refuses a call described with one.",
        absent=True)
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


@dataclasses.dataclass(frozen=True)
class CallFormConflict(Failure, rule="JIT-4"):
    template = "{problem}"
    problem: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@rule("JIT-4", mirrors="jax._src.pjit._trace_for_jit")
def check_call_form(call: Call, context: Mesh | AbstractMesh | None) -> None:
    """Keyword arguments cannot meet a specified ``in_shardings``, and a context mesh cannot meet ``device=``/``backend=``.

    >>> from shardlaw.spec.jit.call import Arg
    >>> check_call_form(Call(args=(Arg.numpy((2,)),), kwargs={"y": Arg.numpy((2,))},
    ...                      options=JitOptions(in_shardings=None)), None)
    >>> check_call_form(Call(args=(), kwargs={"y": Arg.numpy((2,))},
    ...                      options=JitOptions(in_shardings=P())), None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [JIT-4]: the call passes keyword arguments ['y'] while in_shardings is given; in_shardings covers positional arguments only. Pass them positionally, or leave in_shardings out.
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


@dataclasses.dataclass(frozen=True)
class SpecWithoutMesh(Failure, rule="JIT-3", error=RuntimeError):
    template = "{which} holds the PartitionSpec {spec}, which names mesh axes, but no mesh is set"
    hint = ("Set one with jax.set_mesh(mesh), or pass NamedSharding(mesh, spec) "
            "instead of the bare spec.")
    which: str
    spec: Any


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
    shardlaw.spec.core.rules.RejectionRuntimeError: [JIT-3]: in_shardings[0] holds the PartitionSpec P('x'), which names mesh axes, but no mesh is set. Set one with jax.set_mesh(mesh), or pass NamedSharding(mesh, spec) instead of the bare spec.
    >>> leaf_to_sharding(Format(Layout.AUTO), None, "out_shardings")
    UNSPECIFIED
    """
    leaf, _ = split_format(leaf)
    if leaf is None or leaf is UNSPECIFIED:
        return UNSPECIFIED
    if isinstance(leaf, PartitionSpec):
        require(context is not None, lambda: SpecWithoutMesh(which, leaf))
        with located(which):   # the spec must fit the context mesh (NS-1..4)
            return NamedSharding(context, leaf)
    return leaf


def device_option_sharding(options: JitOptions) -> SingleDeviceSharding:
    """Where ``device=``/``backend=`` put the program (backend= picks the platform's first
    local device; device= that device)."""
    return SingleDeviceSharding(options.device if options.device is not None else 0)


def convert_leaves(tree: Any, context: Any, which: str) -> Any:
    """Each leaf of a shardings tree, turned into a sharding (JIT-3), keeping the tree."""
    if tree is UNSPECIFIED:
        return UNSPECIFIED
    return map_leaves(lambda path, leaf: leaf_to_sharding(leaf, context,
                                                          show_path((which, *path))),
                      tree, none_is_leaf=True, with_path=True)

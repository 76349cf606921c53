"""The catalogue of named call sequences behind the docs' cache table (docs/cache.rst).

Each workload is a short sequence of :class:`~shardlaw.spec.jit.cache.CallSite` values. For
each, :func:`measure` counts what JAX did (traces, modules lowered, JAX's "compilation
cache misses", XLA compilations), what the model predicts, and how many executables the
shardlaw policy would compile (its placement classes, CACHE-12).
``benchmarks/cache_catalogue.py`` prints the table; ``tests/test_cache_differential.py``
checks the docs' copy of it against JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardlaw.spec import (
    GSPMDSharding, Mesh, NamedSharding, P, SingleDeviceSharding, to_hlo,
)
from shardlaw.spec.jit.cache import CallSite, explain_cache, policy_classes
from shardlaw.spec.jit.call import Arg, Call, JitOptions, Static

from .cache_strategies import outputs_for

__all__ = ["WORKLOADS", "Workload", "Measured", "measure", "COLUMNS"]

M = Mesh.iota((2, 4), ("x", "y"))
RENAMED = Mesh.iota((2, 4), ("a", "b"))
REVERSED = Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
SIZE_ONE = Mesh.iota((2, 1, 4), ("x", "one", "y"))
# The same devices with the axes swapped: ('y', 'x') over the transposed device grid.
TRANSPOSED = Mesh((4, 2), ("y", "x"), [0, 4, 1, 5, 2, 6, 3, 7])
ONE = Mesh.iota((1,), ("a",))
X = (8, 8)


def _call(*args: Any, options: JitOptions = JitOptions(), ignored: frozenset = frozenset(),
          **kw: Any) -> Call:
    static = options.static_argnums
    outputs = outputs_for(args, {}, static, ignored)
    n = sum(1 for a in args if isinstance(a, Arg))
    return Call(args=args, outputs=outputs, options=options,
                uses=tuple(i not in ignored for i in range(n)), **kw)


def _on(sharding: Any, shape: tuple[int, ...] = X) -> Call:
    return _call(Arg.committed(shape, sharding))


def _sites(*calls: Call, function: str = "f", wrapper: str = "w") -> list[CallSite]:
    return [CallSite(c, function, wrapper) for c in calls]


def _wrappers(*calls: Call) -> list[CallSite]:
    return [CallSite(c, "f", f"w{i}") for i, c in enumerate(calls)]


def _named(mesh: Mesh, spec: Any) -> NamedSharding:
    return NamedSharding(mesh, spec)


_PX = _named(M, P("x"))
_GSPMD = GSPMDSharding(M.devices, to_hlo(_PX, 2))
_SAME = _on(_PX)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    what: str
    sites: tuple


def _unused_pair(keep: bool) -> Call:
    args = (Arg.committed(X, _PX), Arg.committed((4,), SingleDeviceSharding(5)))
    return _call(*args, options=JitOptions(keep_unused=keep), ignored=frozenset({1}))


WORKLOADS: tuple[Workload, ...] = (
    Workload("repeat", "the same array three times", tuple(_sites(_SAME, _SAME, _SAME))),
    Workload("equal copies", "three arrays built with equal shardings",
             tuple(_sites(_on(_PX), _on(_named(M, P("x"))), _on(_named(M, P("x")))))),
    Workload("trailing None", "P('x'), then P('x', None)",
             tuple(_sites(_on(_PX), _on(_named(M, P("x", None)))))),
    Workload("renamed axes", "mesh axes ('x', 'y'), then ('a', 'b')",
             tuple(_sites(_on(_PX), _on(_named(RENAMED, P("a")))))),
    Workload("GSPMD vs Named", "a NamedSharding, then the GSPMDSharding of its HLO",
             tuple(_sites(_on(_PX), _on(_GSPMD)))),
    Workload("size-1 axis", "a mesh axis of size 1 added",
             tuple(_sites(_on(_PX), _on(_named(SIZE_ONE, P("x")))))),
    Workload("transposed mesh", "the mesh transposed, the same spec",
             tuple(_sites(_on(_PX), _on(_named(TRANSPOSED, P("x")))))),
    Workload("one device", "SingleDeviceSharding(0), then a 1-device mesh",
             tuple(_sites(_on(SingleDeviceSharding(0)), _on(_named(ONE, P()))))),
    Workload("reversed, replicated", "replicated over devices 0..7, then 7..0",
             tuple(_sites(_on(_named(M, P())), _on(_named(REVERSED, P()))))),
    Workload("placement-equal six", "P('x') written six ways (rows 3-7 together)",
             tuple(_sites(_on(_PX), _on(_named(M, P("x", None))), _on(_named(RENAMED, P("a"))),
                          _on(_GSPMD), _on(_named(SIZE_ONE, P("x"))),
                          _on(_named(TRANSPOSED, P("x")))))),
    Workload("host values", "numpy, an uncommitted array, a committed one (device 0)",
             tuple(_sites(_call(Arg.numpy(X)), _call(Arg.uncommitted(X)),
                          _on(SingleDeviceSharding(0))))),
    Workload("weak scalars", "a Python float, a numpy float32, a Python float again",
             tuple(_sites(_call(Arg.scalar("float")), _call(Arg.numpy((), "float32")),
                          _call(Arg.scalar("float"))))),
    Workload("in_shardings spelled twice", "two wrappers: in P('x') and P('x', None)",
             tuple(_wrappers(_call(Arg.numpy(X), options=JitOptions(in_shardings=_PX)),
                             _call(Arg.numpy(X), options=JitOptions(
                                 in_shardings=_named(M, P("x", None))))))),
    Workload("in_shardings renamed", "two wrappers: in over ('x', 'y'), then ('a', 'b')",
             tuple(_wrappers(_call(Arg.numpy(X), options=JitOptions(in_shardings=_PX)),
                             _call(Arg.numpy(X), options=JitOptions(
                                 in_shardings=_named(RENAMED, P("a"))))))),
    Workload("out_shardings renamed", "two wrappers: out over ('x', 'y'), then ('a', 'b')",
             tuple(_wrappers(_call(Arg.numpy(X), options=JitOptions(out_shardings=_PX)),
                             _call(Arg.numpy(X), options=JitOptions(
                                 out_shardings=_named(RENAMED, P("a"))))))),
    Workload("static True, 1", "a static argument True, then 1 (equal, another type)",
             tuple(_sites(*(_call(Arg.numpy(X), Static(v),
                                  options=JitOptions(static_argnums=(1,)))
                            for v in (True, 1))))),
    Workload("keep_unused", "jit(g), then jit(g, keep_unused=True): served by jit(g)",
             tuple(_wrappers(_unused_pair(False), _unused_pair(True)))),
)

COLUMNS = ("calls", "traces", "modules", "jax_compilation_misses", "xla_compiles",
           "placement_classes")


@dataclasses.dataclass(frozen=True)
class Measured:
    """One workload's numbers (one of each column)."""

    calls: int
    traces: int
    modules: int
    jax_compilation_misses: int
    xla_compiles: int
    placement_classes: int

    def row(self) -> tuple[int, ...]:
        return tuple(getattr(self, c) for c in COLUMNS)


def predict(workload: Workload) -> Measured:
    """The model's numbers (no JAX)."""
    totals = explain_cache(workload.sites).totals()
    classes = {r.cls for r in policy_classes(workload.sites) if r.cls is not None}
    return Measured(len(workload.sites), totals["trace"], totals["module"], totals["lowering"],
                    totals["compile"], len(classes))


def measure(workload: Workload) -> Measured:
    """JAX's numbers (the policy column is the spec's: JAX has no such policy)."""
    from .cache_harness import run_sequence

    observed = run_sequence(list(workload.sites))
    errors = [o.error for o in observed if o.error is not None]
    if errors:
        raise RuntimeError(f"{workload.name}: JAX raised {errors[0]!r}")
    total = {level: sum(o.counts[level] for o in observed)
             for level in ("trace", "module", "lowering", "compile")}
    return Measured(len(workload.sites), total["trace"], total["module"], total["lowering"],
                    total["compile"], predict(workload).placement_classes)

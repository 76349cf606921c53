"""Test vectors from Hypothesis calls and real JAX: writing them, and replaying them in JAX.

:func:`generate` draws calls with :func:`~shardlaw.properties.call_strategies.calls`, runs
each through real ``jax.jit`` with :func:`~shardlaw.properties.jit_harness.compare_call`
(which fills the compiler oracle from what JAX did) and keeps the calls on which JAX and
the spec agree, until every rule of the jit-call families has ``per_rule`` vectors on its
accepting side and, when the rule can refuse a call, on its rejecting side. The pinned
cases of the differential tests come first, as hand-written vectors (:data:`HAND`).

:func:`replay_in_jax` runs one vector's call in JAX and says how JAX's outcome differs
from the vector's expected verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterator

import shardlaw.spec as S
from shardlaw.spec import Arg, Call, JitOptions, Out
from shardlaw.spec.jit.call import Verdict
from shardlaw.spec.core.rules import Failure
from shardlaw.spec.vectors.jit_vectors import Vector, dump_vector, jit_rules, vector_text

from . import hits, jit_harness

__all__ = ["HAND", "Judged", "GenerationReport", "NotReplayable",
           "rejecting_rules", "wanted_buckets", "judge", "generate", "replay_in_jax",
           "prepare_jax"]

def rejecting_rules() -> set[str]:
    """The rules that can refuse a call: those some failure value of the spec names."""
    found = set()
    pending = list(Failure.__subclasses__())
    while pending:
        kind = pending.pop()
        found.add(kind.rule)
        pending += kind.__subclasses__()
    return found


def wanted_buckets() -> list[tuple[str, str]]:
    """(rule, side) for every side of every jit-call rule that vectors must show."""
    refusing = rejecting_rules()
    return [(r, side) for r in jit_rules()
            for side in (("accept", "reject") if r in refusing else ("accept",))]


# =========================================================================== hand vectors

MESH = S.Mesh.iota((2, 4), ("x", "y"))
NS = S.NamedSharding(MESH, S.P("x", "y"))
REVERSED = S.Mesh((2, 4), ("x", "y"), list(range(7, -1, -1)))
GSPMD = S.GSPMDSharding(MESH.devices, "{devices=[2,4]<=[8]}")
MESH42 = S.Mesh.iota((4, 2), ("x", "y"))


@dataclasses.dataclass(frozen=True)
class Hand:
    """A hand-written vector: its name, the rule and side it shows, why, and the call."""

    name: str
    rule: str
    side: str
    description: str
    call: Call


def _aot(call: Call, *args: Any) -> Call:
    return dataclasses.replace(call, aot_args=args, aot_kwargs={})


_BASE = Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)))
_NUMPY = Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8), source=0))
_LAID = Arg.committed((8, 8), NS, layout=S.Layout((1, 0)))  # device_put(x, Format(L, NS))
_ABSTRACT = S.NamedSharding(S.AbstractMesh((2, 4), ("x", "y")), S.P())
_TWO = (Arg.committed((8, 8), NS), Arg.committed((8,), S.SingleDeviceSharding(3)))
MIXED = S.Mesh.iota((4, 2), ("x", "y"), (S.AxisType.Explicit, S.AxisType.Auto))
_EXPLICIT_ROWS = S.NamedSharding(S.Mesh.iota((4, 2), ("x", "y"), (S.AxisType.Explicit,) * 2),
                                 S.P("x"))
_ABSTRACT_OK = Call(args=(Arg.numpy((8,)), Arg.committed((8,), S.NamedSharding(
    S.Mesh.iota((4,), ("x",)), S.P()))), outputs=Out((8,)),
    options=JitOptions(in_shardings=(S.NamedSharding(S.AbstractMesh((4,), ("x",)), S.P()), None)))

HAND: tuple[Hand, ...] = (
    Hand("da-1-argument-on-another-device", "DA-1", "reject",
         "Two committed arguments on different devices: one on the 2x4 mesh, one on device 3.",
         Call(args=_TWO, outputs=Out((8, 8)))),
    Hand("da-1-unused-argument-takes-no-part", "DA-1", "accept",
         "An unused argument on other devices is dropped before the device assignment.",
         Call(args=_TWO, outputs=Out((8, 8), source=0), uses=(True, False))),
    Hand("da-1-kept-unused-argument-takes-part", "DA-1", "reject",
         "Under keep_unused=True the unused argument on device 3 takes part, and clashes.",
         Call(args=_TWO, outputs=Out((8, 8), source=0), uses=(True, False),
              options=JitOptions(keep_unused=True))),
    Hand("da-1-reversed-device-order", "DA-1", "reject",
         "The same devices in reversed order are another device assignment.",
         Call(args=(Arg.committed((8, 8), NS),
                    Arg.committed((8, 8), S.NamedSharding(REVERSED, S.P()))), outputs=Out((8, 8)))),
    Hand("fit-1-indivisible-argument", "FIT-1", "reject",
         "A numpy argument of 6 rows meets an in_sharding that splits rows 4 ways.",
         Call(args=(Arg.numpy((6, 8)),), outputs=Out((6, 8)),
              options=JitOptions(in_shardings=S.NamedSharding(S.Mesh.iota((4,), ("x",)),
                                                              S.P("x"))))),
    Hand("fit-2-type-split-unevenly-over-explicit-axes", "FIT-2", "reject",
         "A ShapeDtypeStruct of 6 rows typed over an Explicit axis of 4: its type does not "
         "divide, refused while tracing.",
         Call(args=(Arg.abstract((6, 8), "float32", _EXPLICIT_ROWS),),
              outputs=Out((6, 8), source=0))),
    Hand("fit-2-auto-axes-left-out-of-the-type", "FIT-2", "accept",
         "A ShapeDtypeStruct split over an Explicit axis of 4 (rows) and an Auto axis of 2 "
         "(columns): the type keeps the Explicit axis only, and both divide.",
         Call(args=(Arg.abstract((8, 6), "float32", S.NamedSharding(MIXED, S.P("x", "y"))),),
              outputs=Out((8, 6), source=0))),
    Hand("fit-3-abstract-argument-split-unevenly", "FIT-3", "reject",
         "A ShapeDtypeStruct of 6 rows over an Auto axis of 4: traced, refused when lowered "
         "(IndivisibleError).",
         Call(args=(Arg.abstract((6, 8), "float32", S.NamedSharding(MESH42, S.P("x"))),),
              outputs=Out((6, 8), source=0))),
    Hand("fit-3-abstract-argument-split-evenly", "FIT-3", "accept",
         "A ShapeDtypeStruct of 8 rows over an Auto axis of 4 lowers and compiles.",
         Call(args=(Arg.abstract((8, 8), "float32", S.NamedSharding(MESH42, S.P("x"))),),
              outputs=Out((8, 8), source=0))),
    Hand("res-4-silent-move-equal-hlo", "RES-4", "accept",
         "A committed array on device 5 meets a replicated in_sharding over 8 devices: equal "
         "HLO, so jit moves it.",
         Call(args=(Arg.committed((8, 8), S.SingleDeviceSharding(5)),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.NamedSharding(MESH, S.P())))),
    Hand("res-4-committed-other-hlo", "RES-4", "reject",
         "A committed argument split P('x', 'y') meets the in_sharding P('y', 'x').",
         Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.NamedSharding(MESH, S.P("y", "x"))))),
    Hand("res-1-uncommitted-on-several-devices", "RES-1", "reject",
         "An uncommitted array spread over 8 devices.",
         Call(args=(Arg.uncommitted((8, 8), NS),), outputs=Out((8, 8)))),
    Hand("da-2-abstract-mesh-of-the-right-size", "DA-2", "accept",
         "An in_sharding over an abstract mesh of 4 devices in a program on 4 devices.",
         _ABSTRACT_OK),
    Hand("da-2-abstract-mesh-of-another-size", "DA-2", "reject",
         "An in_sharding over an abstract mesh of 2 devices in a program on 4 devices.",
         dataclasses.replace(_ABSTRACT_OK, options=JitOptions(in_shardings=(
             S.NamedSharding(S.AbstractMesh((2,), ("x",)), S.P()), None)))),
    Hand("da-4-only-abstract-shardings", "DA-4", "reject",
         "The only sharding of the call is over an abstract mesh: no devices to run on.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
             in_shardings=S.NamedSharding(S.AbstractMesh((2,), ("x",)), S.P("x"))))),
    Hand("exe-1-scalar-replicated", "EXE-1", "accept",
         "A Python scalar next to an argument on 8 devices is replicated over them.",
         Call(args=(Arg.committed((8, 8), NS), Arg.scalar()),
              outputs=(Out((8, 8), source=0), Out(())))),
    Hand("da-3-lone-uncommitted-program", "DA-3", "accept",
         "One uncommitted argument and no shardings: the default device, results uncommitted.",
         Call(args=(Arg.uncommitted((4,)),), outputs=Out((4,)))),
    Hand("jit-3-spec-under-context-mesh", "JIT-3", "accept",
         "A bare PartitionSpec under jax.set_mesh becomes a NamedSharding over that mesh.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8), source=0), context_mesh=MESH,
              options=JitOptions(in_shardings=S.P("x")))),
    Hand("jit-3-spec-under-auto-abstract-mesh", "JIT-3", "reject",
         "An abstract context mesh of Auto axes is not seen by jit: the spec has no mesh.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8), source=0),
              context_mesh=MESH.abstract, options=JitOptions(in_shardings=S.P("x")))),
    Hand("jit-2-string-leaf", "JIT-2", "reject",
         "An axis name where a PartitionSpec belongs.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(in_shardings="x"))),
    Hand("jit-2-array-leaf", "JIT-2", "reject",
         "An array passed as in_shardings.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)),
              options=JitOptions(in_shardings=(Arg.numpy((8,)),)))),
    Hand("jit-2-unconstrained-in-sharding", "JIT-2", "reject",
         "An UNCONSTRAINED dimension in an in_sharding.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
             in_shardings=S.NamedSharding(MESH, S.P(S.UNCONSTRAINED))))),
    Hand("jit-2-unconstrained-out-spec", "JIT-2", "reject",
         "An UNCONSTRAINED dimension in a bare out_shardings spec under a context mesh.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), context_mesh=MESH,
              options=JitOptions(out_shardings=S.P(S.UNCONSTRAINED)))),
    Hand("out-1-result-over-named-input", "OUT-1", "accept",
         "The compiler's choice comes back as a NamedSharding over the first named input's mesh.",
         Call(args=(Arg.committed((8,), S.NamedSharding(MESH, S.P("x"))),
                    Arg.committed((8, 8), GSPMD)), outputs=Out((8, 8), source=1))),
    Hand("out-2-choice-not-a-spec-over-the-mesh", "OUT-2", "reject",
         "Over a 4x2 mesh the compiler's 2x4 tiling cannot be written as a PartitionSpec.",
         Call(args=(Arg.committed((8,), S.NamedSharding(MESH42, S.P("x"))),
                    Arg.committed((8, 8), GSPMD)), outputs=Out((8, 8), source=1))),
    Hand("out-3-single-device-result", "OUT-3", "accept",
         "A program on one device returns a SingleDeviceSharding.",
         Call(args=(Arg.committed((4,), S.SingleDeviceSharding(2)),), outputs=Out((4,)))),
    Hand("aot-3-renamed-mesh-is-equivalent", "AOT-3", "accept",
         "The executable accepts an argument over a mesh with other axis names.",
         _aot(_BASE, Arg.committed((8, 8), S.NamedSharding(S.Mesh.iota((2, 4), ("a", "b")),
                                                           S.P("a", "b"))))),
    Hand("aot-3-reordered-devices", "AOT-3", "reject",
         "The executable refuses an argument whose mesh lists the devices in reverse order.",
         _aot(_BASE, Arg.committed((8, 8), S.NamedSharding(REVERSED, S.P("x", "y"))))),
    Hand("aot-2-other-dtype", "AOT-2", "reject",
         "The executable refuses an int32 argument where it was compiled for float32.",
         _aot(_BASE, Arg.committed((8, 8), NS, "int32"))),
    Hand("aot-1-extra-argument", "AOT-1", "reject",
         "The executable refuses a second argument it was not compiled for.",
         _aot(_BASE, Arg.committed((8, 8), NS), Arg.numpy((2,)))),
    Hand("res-2-numpy-split-across-processes", "RES-2", "reject",
         "Two processes: a numpy argument meets a split in_sharding (spec only: the JAX "
         "harness runs one process).",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)), process_count=2, devices=4,
              options=JitOptions(in_shardings=NS))),
    Hand("res-2-numpy-replicated-across-processes", "RES-2", "accept",
         "Two processes: a numpy argument meets a replicated in_sharding (spec only).",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)), process_count=2, devices=4,
              options=JitOptions(in_shardings=S.NamedSharding(MESH, S.P())))),
    # Disagreements found while the spec was written, kept as regression vectors.
    Hand("exe-3-gspmd-tiles-exceed-devices", "EXE-3", "reject",
         "A GSPMD in_sharding that tiles 4 ways over a list of 2 devices: XLA's verifier "
         "refuses it (JaxRuntimeError).",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
             in_shardings=S.GSPMDSharding([0, 1], "{devices=[4]<=[4]}")))),
    Hand("exe-3-gspmd-tiles-fill-devices", "EXE-3", "accept",
         "A GSPMD in_sharding that tiles 4 ways over 4 devices.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
             in_shardings=S.GSPMDSharding([0, 1, 2, 3], "{devices=[4]<=[4]}")))),
    Hand("exe-4-listed-gspmd-tiles", "EXE-4", "reject",
         "A GSPMD in_sharding whose tiles are listed device by device: JAX cannot lower it "
         "(TypeError), in a process that has not lowered an equal iota tiling.",
         Call(args=(Arg.numpy((4, 4)),), outputs=Out((4, 4)), options=JitOptions(
             in_shardings=S.GSPMDSharding([7, 6, 5, 4], "{devices=[2,2]3,1,2,0}")))),
    Hand("exe-4-iota-gspmd-tiles", "EXE-4", "accept",
         "A GSPMD in_sharding whose tiles are an iota order.",
         Call(args=(Arg.numpy((4, 4)),), outputs=Out((4, 4)), options=JitOptions(
             in_shardings=S.GSPMDSharding([7, 6, 5, 4], "{devices=[2,2]<=[2,2]T(1,0)}")))),
    Hand("jit-2-mesh-without-axes-is-not-empty", "JIT-2", "accept",
         "A NamedSharding over a mesh with no axes holds one device; jit takes it.",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), options=JitOptions(
             in_shardings=S.NamedSharding(S.Mesh((), (), [0]), S.P())))),
    Hand("tree-1-empty-tuple-for-one-argument", "TREE-1", "reject",
         "in_shardings=() for one argument: JAX fails an internal assertion.",
         Call(args=(Arg.numpy((4,)),), outputs=Out((4,)), options=JitOptions(in_shardings=()))),
    Hand("tree-2-empty-dict-for-one-result", "TREE-2", "reject",
         "out_shardings={} for one result: JAX fails an internal assertion.",
         Call(args=(Arg.numpy((4,)),), outputs=Out((4,)), options=JitOptions(out_shardings={}))),
    Hand("res-5-device-option-reuses-pinned-replica", "RES-5", "reject",
         "device=0 and an argument replicated on devices 0..2 in pinned_host memory: JAX reuses "
         "the copy on device 0 and its memory kind clashes.",
         Call(args=(Arg.committed((6,), S.NamedSharding(S.Mesh.iota((3,), ("a",)), S.P(),
                                                        memory_kind="pinned_host")),),
              outputs=Out((6,)), options=JitOptions(device=0))),
    Hand("out-2-input-recovery-indivisible", "OUT-2", "reject",
         "A GSPMD {devices=[2,4]<=[8]} argument after a NamedSharding argument on a 4x2 mesh: "
         "JAX re-reads the executable's inputs over that mesh and raises IndivisibleError.",
         Call(args=(Arg.committed((8,), S.NamedSharding(S.Mesh.iota((4, 2), ("x", "y")),
                                                        S.P("x"))),
                    Arg.committed((8, 8), S.GSPMDSharding(MESH.devices, "{devices=[2,4]<=[8]}"))),
              outputs=Out((8, 8), source=1))),
    # Layouts: Format(layout, sharding) leaves and arrays laid out otherwise (LAY, JIT-2, AOT-3).
    Hand("lay-1-unused-committed-array-in-another-layout", "LAY-1", "reject",
         "in_shardings asks for the default layout (0, 1) of a committed array laid out (1, 0); "
         "the function does not use it, and jit refuses it all the same.",
         Call(args=(Arg.committed((8, 8), NS), _LAID), outputs=Out((8, 8), source=0),
              uses=(True, False),
              options=JitOptions(in_shardings=(NS, S.Format(S.Layout((0, 1)), NS))))),
    Hand("lay-1-auto-matches-no-committed-array", "LAY-1", "reject",
         "Format(Layout.AUTO, s) for a committed array: the compiler's choice is not one an "
         "existing array can already have.",
         Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8), source=0),
              options=JitOptions(in_shardings=S.Format(S.Layout.AUTO, NS)))),
    Hand("lay-1-committed-array-in-the-layout-asked-for", "LAY-1", "accept",
         "A committed array laid out (1, 0) meets Format(Layout((1, 0)), s).",
         Call(args=(_LAID,), outputs=Out((8, 8), source=0),
              options=JitOptions(in_shardings=S.Format(S.Layout((1, 0)), NS)))),
    Hand("lay-1-numpy-is-laid-out-as-asked", "LAY-1", "accept",
         "A numpy argument meets Format(Layout((1, 0)), s): jit lays it out.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8), source=0),
              options=JitOptions(in_shardings=S.Format(S.Layout((1, 0)), NS)))),
    Hand("lay-2-result-in-the-layout-asked-for", "LAY-2", "accept",
         "out_shardings=Format(Layout((1, 0)), s): the result comes back laid out (1, 0).",
         Call(args=(Arg.committed((8, 8), NS),), outputs=Out((8, 8), source=0),
              options=JitOptions(out_shardings=S.Format(S.Layout((1, 0)), NS)))),
    Hand("lay-3-executable-takes-the-arrays-own-layout", "LAY-3", "accept",
         "A committed array laid out (1, 0) and no layout asked for: the program takes it in "
         "its own layout, and the result comes back in the default one.",
         Call(args=(_LAID,), outputs=Out((8, 8), source=0))),
    Hand("lay-4-layout-of-another-rank", "LAY-4", "reject",
         "Format(Layout((0,)), s) for a 2-D argument.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=S.Format(S.Layout((0,)), NS)))),
    Hand("lay-4-layout-of-the-rank-of-the-result", "LAY-4", "accept",
         "Format(Layout((1, 0)), s) for a 2-D result.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)),
              options=JitOptions(out_shardings=S.Format(S.Layout((1, 0)), NS)))),
    Hand("lay-5-layout-with-an-abstract-sharding", "LAY-5", "reject",
         "Format(Layout((1, 0)), s) where s is over an abstract mesh: jit cannot lay the value "
         "out without devices.",
         Call(args=(Arg.numpy((8, 8)), Arg.committed((8, 8), NS)), outputs=Out((8, 8), source=1),
              options=JitOptions(in_shardings=(S.Format(S.Layout((1, 0)), _ABSTRACT), None)))),
    Hand("lay-5-auto-layout-with-an-abstract-sharding", "LAY-5", "accept",
         "Format(Layout.AUTO, s) where s is over an abstract mesh: the compiler lays it out.",
         Call(args=(Arg.numpy((8, 8)), Arg.committed((8, 8), NS)), outputs=Out((8, 8), source=1),
              options=JitOptions(in_shardings=(S.Format(S.Layout.AUTO, _ABSTRACT), None)))),
    Hand("jit-2-bare-layout", "JIT-2", "reject",
         "A Layout where a sharding belongs: jit wants it wrapped in a Format.",
         Call(args=(Arg.numpy((8, 8)),), outputs=Out((8, 8)),
              options=JitOptions(in_shardings=(S.Layout((1, 0)),)))),
    Hand("aot-3-argument-in-another-layout", "AOT-3", "reject",
         "The executable, compiled for the default layout, refuses a committed array laid out "
         "(1, 0).",
         _aot(_BASE, _LAID)),
    Hand("aot-3-open-input-on-the-program-device", "AOT-3", "accept",
         "Compiled from a numpy array alone, the executable takes its input on the default "
         "device: a committed array there is accepted.",
         _aot(_NUMPY, Arg.committed((8, 8), S.SingleDeviceSharding(0)))),
    Hand("aot-3-open-input-committed-elsewhere", "AOT-3", "reject",
         "Compiled from a numpy array alone (on the default device 0), the executable refuses "
         "an array committed to device 3.",
         _aot(_NUMPY, Arg.committed((8, 8), S.SingleDeviceSharding(3)))),
    Hand("aot-3-open-input-where-the-compiler-put-it", "AOT-3", "reject",
         "Compiled from a numpy array for a result split over 8 devices, the executable takes "
         "the input as the compiler chose (compiler_in): a replicated array is refused.",
         _aot(dataclasses.replace(_NUMPY, options=JitOptions(out_shardings=NS)),
              Arg.committed((8, 8), S.NamedSharding(MESH, S.P())))),
)


# =========================================================================== judging

@dataclasses.dataclass(frozen=True)
class Judged:
    """A call as the spec judged it (compiler oracle and traced facts filled in), the verdict,
    and how real JAX disagreed (empty: it agreed; None: not run in JAX)."""

    call: Call
    verdict: Verdict
    problems: tuple[str, ...] | None


@contextlib.contextmanager
def _recording_judged_calls() -> Iterator[list[Call]]:
    # compare_call fills the compiler oracle and the traced facts into the call before it asks
    # the spec, but returns only the verdict; the vector needs that filled call, so it is
    # caught on its way to jit_call. (A compare_call that returned it would make this go.)
    seen: list[Call] = []
    original = jit_harness.jit_call

    def recording(call: Call) -> Verdict:
        seen.append(call)
        return original(call)

    jit_harness.jit_call = recording
    try:
        yield seen
    finally:
        jit_harness.jit_call = original


def judge(call: Call) -> Judged:
    """The call as the spec judges it after real JAX filled its oracle, and the disagreements.

    A call of several processes cannot run in the one-process harness: the spec alone judges it.
    """
    if call.process_count > 1:
        return Judged(call, S.jit_call(call), None)
    with _recording_judged_calls() as seen:
        verdict, _, problems = jit_harness.compare_call(call)
    judged = seen[-1] if seen else call
    if S.jit_call(judged) != verdict:
        raise RuntimeError("the call caught on its way to jit_call is not the one judged")
    return Judged(judged, verdict, tuple(problems))


# =========================================================================== generating

@dataclasses.dataclass
class GenerationReport:
    """What :func:`generate` wrote, and what it could not."""

    written: dict[tuple[str, str], list[str]]
    drawn: int = 0          # calls run in JAX
    disagreements: list[Judged] = dataclasses.field(default_factory=list)
    unrunnable: list[str] = dataclasses.field(default_factory=list)

    def missing(self, per_rule: int) -> list[tuple[str, str, int]]:
        return [(r, s, len(files)) for (r, s), files in self.written.items()
                if len(files) < per_rule]


def _prepare(directory: Path, replace: bool) -> None:
    """An empty directory to write into; with ``replace``, old vectors are removed first."""
    directory.mkdir(parents=True, exist_ok=True)
    old = sorted(directory.rglob("*.json"))
    if old and not replace:
        raise FileExistsError(f"{directory} already holds {len(old)} .json files; "
                              "choose an empty directory or replace them")
    for path in old:
        path.unlink()
    for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
        if not any(sub.iterdir()):
            sub.rmdir()


def _write(directory: Path, relative: str, vector: dict) -> str:
    path = directory / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(vector_text(vector), encoding="utf-8")
    return relative


def _bucket_for(verdict: Verdict, written: dict[tuple[str, str], list[str]],
                per_rule: int) -> tuple[str, str] | None:
    """The bucket a call best fills: its rejecting rule, else the emptiest rule it passes."""
    if not verdict.accepted:
        key = (verdict.rule or "", "reject")
        return key if key in written and len(written[key]) < per_rule else None
    open_ = [(len(written[(r, "accept")]), i, (r, "accept")) for i, r in enumerate(verdict.trace)
             if (r, "accept") in written and len(written[(r, "accept")]) < per_rule]
    return min(open_)[2] if open_ else None


def _may_fill(verdict: Verdict, written: dict[tuple[str, str], list[str]],
              per_rule: int) -> bool:
    """Whether a call whose verdict before JAX ran (no oracle yet) is ``verdict`` touches a
    rule with an open bucket: only such calls are worth a run in JAX."""
    touched = set(verdict.trace) | {verdict.rule}
    return any(r in touched and len(files) < per_rule for (r, _), files in written.items())


def _draw_calls(consume: Callable[[Call], None], seed: int, budget: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from .call_strategies import calls

    @settings(max_examples=budget, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(calls(layouts=True))
    def draw(call: Call) -> None:
        consume(call)

    draw()


def generate(directory: str | Path, per_rule: int = 3, *, seed: int = 0, budget: int = 4000,
             replace: bool = False, hand: bool = True) -> GenerationReport:
    """Write vectors into ``directory``: the hand vectors (under ``hand/``), then up to
    ``per_rule`` vectors for each side of each jit-call rule (under ``RULE/``), drawn from
    at most ``budget`` Hypothesis calls on which real JAX and the spec agree."""
    directory = Path(directory)
    _prepare(directory, replace)
    written: dict[tuple[str, str], list[str]] = {key: [] for key in wanted_buckets()}
    report = GenerationReport(written)
    texts: set[str] = set()
    with hits.kept():   # the harness's hit counts are left as they were
        for item in HAND if hand else ():
            judged = judge(item.call)
            if judged.problems:
                raise AssertionError(f"hand vector {item.name}: JAX disagrees with the spec: "
                                     + "; ".join(judged.problems))
            vector = dump_vector(judged.call, judged.verdict, name=item.name, rule=item.rule,
                                 side=item.side, description=item.description)
            texts.add(vector_text(vector["call"]))
            written.setdefault((item.rule, item.side), []).append(
                _write(directory, f"hand/{item.name}.json", vector))

        def consume(call: Call) -> None:
            if all(len(files) >= per_rule for files in written.values()):
                return
            if not _may_fill(S.jit_call(call), written, per_rule):
                return
            report.drawn += 1
            try:
                judged = judge(call)
            except Exception as error:  # noqa: BLE001 - a call the harness cannot build
                report.unrunnable.append(f"{type(error).__name__}: {error}")
                return
            if judged.problems:
                report.disagreements.append(judged)
                return
            key = _bucket_for(judged.verdict, written, per_rule)
            if key is None:
                return
            rule_id, side = key
            vector = dump_vector(judged.call, judged.verdict, rule=rule_id, side=side,
                                 name=f"{rule_id}-{side}-{len(written[key]) + 1:02d}")
            text = vector_text(vector["call"])
            if text in texts:
                return
            texts.add(text)
            written[key].append(_write(directory, f"{rule_id}/{side}-{len(written[key]) + 1:02d}"
                                                  ".json", vector))

        _draw_calls(consume, seed, budget)
    return report


# =========================================================================== replaying

class NotReplayable(Exception):
    """The vector's call cannot run in the JAX harness (the reason is the message)."""


def prepare_jax(devices: int = 8) -> None:
    """Give JAX ``devices`` CPU devices (before its backend starts), or say why it cannot."""
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        jax.config.update("jax_num_cpu_devices", devices)
    have = len(jax.devices())
    if have < devices:
        raise NotReplayable(f"JAX started with {have} devices before the replay could ask for "
                            f"{devices}")


def replay_in_jax(vector: Vector) -> list[str]:
    """How real ``jax.jit`` differs from the vector's expected verdict (empty: it agrees)."""
    call, expect = vector.call, vector.expect
    if expect is None:
        raise NotReplayable("the vector has no expected verdict")
    if call.process_count > 1:
        raise NotReplayable(f"the call runs in {call.process_count} JAX processes; the harness "
                            "runs one")
    import jax
    if vector.jax != jax.__version__:
        return [f"the vector describes jax {vector.jax}; jax {jax.__version__} is installed"]
    outcome = jit_harness.run_in_jax(call)
    error = outcome.error or outcome.aot_error
    if expect.accepted:
        if error is not None:
            base, name = jit_harness.error_kind(error)
            return [f"expected the call to be accepted, JAX raised {name} ({base}): "
                    f"{str(error)[:300]}"]
        return jit_harness.compare_results(call, expect, outcome)
    if error is None:
        return [f"expected the call to be rejected by {expect.rule} ({expect.error_type}), "
                "JAX accepted it"]
    if not jit_harness.same_error_type(expect, error):
        base, name = jit_harness.error_kind(error)
        return [f"expected {expect.error_type} ({expect.rule}), JAX raised {name} ({base}): "
                f"{str(error)[:300]}"]
    return []


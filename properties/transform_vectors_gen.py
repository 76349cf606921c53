"""Transformed-call vectors from harness cases checked against real JAX: writing them, and
replaying them in JAX.

Each family of the transformations (ARG, BAT, AD, WSC, SMAP) has a harness
(``properties/<family>_harness.py``) that compares a case with real JAX and records, per
rule, the two sides the case showed (:func:`shardlaw.properties.hits.record`).
:func:`generate` draws cases from the harness's strategy (and takes the pinned cases of
:data:`PINNED`), keeps the cases on which JAX and the spec agree, and for each (rule, side)
the case showed writes the spec call of the case that shows it (:func:`steps`: the calls of
:data:`~shardlaw.spec.transforms.transformed.TRANSFORMS` the harness makes, in order) as
``vectors/transforms/<family>/<rule>-<side>-<n>.json``, with the case itself as the
vector's ``origin``. :func:`replay_in_jax` rebuilds a vector's case, runs it in JAX again
and checks that the vector's call is one of its steps.

Run: ``python -m shardlaw.properties.transform_vectors_gen [DIR] [--per-rule N] [--budget N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Callable

import jax
from hypothesis import HealthCheck, given, settings

from shardlaw.spec import UNSPECIFIED, AxisType, Mesh, NamedSharding, P
from shardlaw.spec.transforms.autodiff import JitBody, JitEquation
from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of
from shardlaw.spec.bridge.shardmap import collective_in_jax, manual_sharding_in_jax
from shardlaw.spec.jit.call import Arg
from shardlaw.spec.core.rules import RULES
from shardlaw.spec.transforms.shardmap import (
    Returned, Shaped, collective_groups, manual_sharding, replica_groups,
)
from shardlaw.spec.vectors.transformed_vectors import (
    HarnessCase, TransformedVector, dump_transformed, transformed_differences,
)
from shardlaw.spec.transforms.transformed import TransformedCall, TransformedVerdict, explain_transformed
from shardlaw.spec.vectors.jit_vectors import vector_text

from . import (
    arguments_harness, autodiff_harness, batching_harness, constraint_harness, hits,
    shardmap_harness,
)
from .vectors_gen import rejecting_rules

__all__ = ["FAMILIES", "SIDES", "SPEC_ONLY_REASON", "CollectiveCase", "ManualCase", "Family",
           "steps", "sides_hit", "rule_sides",
           "wanted", "generate", "rebuild_case", "replay_in_jax", "main"]

# Rules that only decide: their two sides (the harness's first and second outcome) by name.
SIDES: dict[str, tuple[str, str]] = {
    "ARG-2": ("weak", "not-weak"), "BAT-1": ("kept", "batched"),
    "AD-1": ("nonzero", "zero"), "AD-2": ("tangents", "no-tangents"),
    "AD-3": ("dropped", "kept"), "AD-4": ("staged", "none"), "AD-5": ("staged", "none"),
    "AD-6": ("dropped", "all-kept"), "AD-7": ("staged", "none"), "AD-8": ("staged", "gone"),
    "SMAP-14": ("grouped", "apart"), "SMAP-15": ("manual", "none"),
}
# The harness counters of a rule's outcomes kept apart from the rule's own counter: the
# rule and its two sides. WSC-6 also accepts and refuses; ARG-2 and WSC-9 only decide.
_DECISION_KEYS = {"ARG-2 weak": ("ARG-2", ("weak", "not-weak")),
                  "WSC-6 dims": ("WSC-6", ("dims", "no-dims")),
                  "WSC-9 result": ("WSC-9", ("as-constrained", "adjusted"))}
_ONLY_DECIDING = ("ARG-2", "WSC-9")
# Rules of these families that only whole programs meet (explain_program walks the
# equations they decide; no transformed-call question reaches them): held to JAX by the
# program properties (tests/test_program_*.py) and kept in program vectors, not here.
PROGRAM_ONLY = {
    "AD-9": "a result typed over an all-Explicit mesh against the program's device count",
    "AD-10": "the residuals a shard_map equation's linearization stores",
    "AD-11": "the specs of a transposed shard_map equation",
    "AD-12": "the transposes of the collectives inside a shard_map body",
    "AD-13": "the types of the cotangents equations hand back over Explicit axes",
    "AD-14": "two cotangents of different types over Explicit axes summed at one value",
    "AD-15": "a unary primitive a transpose applies to a cotangent typed unreduced",
    "AD-16": "a product's transpose reshaped to an operand's cotangent type unreduced",
    "AD-17": "a tangent or cotangent passed to linearize's or vjp's function, typed",
    "AD-18": "a product with a literal that a transpose applies to an unreduced cotangent",
    "BAT-10": "a program's value typed with reduced axes that vmap maps or broadcasts",
    "SMAP-20": "the varying axes of a collective inside a shard_map body",
    "SMAP-21": "the shape of a collective's result inside a shard_map body",
    "SMAP-22": "ppermute's pairs, checked when a shard_map body is lowered",
    "SMAP-23": "a psum_scatter's operand typed split over Explicit axes, when lowered",
    "SMAP-24": "a collective's result keeping its operand's split over automatic Explicit axes",
    "SMAP-25": "an untiled all_gather's operand typed split over Explicit axes, when lowered",
    "WSC-10": "a constraint's operand's split over Explicit axes, read from its traced type",
    "WSC-11": "a constraint on a value typed with reduced axes, lowered in a jit's body",
    "WSC-12": "a bound constraint's spec merged with its operand's split, when lowered",
}


@dataclasses.dataclass(frozen=True)
class Family:
    name: str          # the harness: properties/<name>_harness.py
    prefix: str        # the rule family
    compared_with: str

    @property
    def harness(self) -> Any:
        return _harness(self.name)


FAMILIES = {f.name: f for f in (
    Family("arguments", "ARG", "jax.device_put(value, sharding), or an identity jax.jit with "
           "in_shardings: the dtype, weak type, committed flag and each device's shard, or "
           "the exception type"),
    Family("batching", "BAT", "jax.vmap (nested, with spmd_axis_name) of a jax.jit call: "
           "the in/out shardings of the batched jit equation in jax.make_jaxpr, or the "
           "exception type"),
    Family("autodiff", "AD", "jax.jvp / linearize / vjp / grad / value_and_grad, partial "
           "evaluation and DCE of a jax.jit call: the in/out shardings and donation of each "
           "jit equation jax.make_jaxpr stages"),
    Family("constraint", "WSC", "jax.lax.with_sharding_constraint (under jax.vmap when "
           "batched), traced and run under jax.jit: each constraint equation's sharding and "
           "unconstrained dims, each result's sharding, or the exception type"),
    Family("shardmap", "SMAP", "jax.shard_map traced and lowered: the specs, per-shard "
           "shapes and varying axes inside and out, or the exception type and stage"),
)}


_HARNESSES = {"arguments": arguments_harness, "batching": batching_harness,
              "autodiff": autodiff_harness, "constraint": constraint_harness,
              "shardmap": shardmap_harness}


def _harness(name: str) -> Any:
    return _HARNESSES[name]


# =========================================================================== pinned cases

@dataclasses.dataclass(frozen=True)
class CollectiveCase:
    """A psum over ``collective_axes`` inside a shard_map with ``manual_axes``: the replica
    groups of the lowered HLO (SMAP-14; test_shardmap's collective test)."""

    mesh: Any
    collective_axes: tuple
    manual_axes: frozenset


@dataclasses.dataclass(frozen=True)
class ManualCase:
    """A value of ``rank`` inside a shard_map with ``manual_axes``: its HLO sharding
    (SMAP-15; test_shardmap's manual sharding test)."""

    mesh: Any
    manual_axes: frozenset
    rank: int


def _compare_collective(case: CollectiveCase) -> list[str]:
    h = _harness("shardmap")
    hlo, _ = collective_in_jax(case.mesh, case.collective_axes, case.manual_axes, False)
    positions = replica_groups(case.mesh, case.collective_axes, case.manual_axes)
    groups = collective_groups(case.mesh, case.collective_axes, case.manual_axes)
    if isinstance(hlo, BaseException):
        return [f"JAX refused: {hlo!r}"]
    if (hlo is None and any(len(g) > 1 for g in positions)) or (
            hlo is not None and hlo != positions):
        return [f"JAX's replica groups {hlo}, the spec's {positions}"]
    h.count_hit("SMAP-14", True)
    if any(len(g) < case.mesh.size for g in groups):
        h.count_hit("SMAP-14", False)
    return []


def _compare_manual(case: ManualCase) -> list[str]:
    found = manual_sharding_in_jax(case.mesh, case.manual_axes, case.rank)
    mine = manual_sharding(case.mesh, case.manual_axes, case.rank)
    if found != mine:
        return [f"JAX's manual sharding {found}, the spec's {mine}"]
    _harness("shardmap").count_hit("SMAP-15", mine is not None)
    return []


def _pinned() -> dict[str, list[Any]]:
    b = _harness("batching")
    mesh = Mesh.iota((2, 4), ("x", "y"))
    permuted = Mesh((2, 4), ("x", "y"), [3, 1, 0, 2, 7, 5, 6, 4])
    cube = Mesh.iota((2, 2, 2), ("z", "y", "x"))
    explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    mixed = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit, AxisType.Auto))
    unreduced = NamedSharding(explicit, P("x", unreduced={"y"}))
    return {"batching": [  # an inner vmap that reads unreduced tiles back (test_nested_vmaps)
        b.VmapCase((1,), (unreduced,), (0,), (UNSPECIFIED,), b.Vmap((0,)), outer=outer)
        for outer in (b.Vmap((0,)), b.Vmap((0,), spmd_axis_name="x"))
    ], "shardmap": [
        _harness("shardmap").SmapCall(  # an out spec unreduced over what the result is not
            explicit, P(), P(unreduced={"x"}), (Shaped((8,)),), Returned(0), frozenset(), True),
        _harness("shardmap").SmapCall(  # a type kept inside that cannot split the shard
            mixed, P("y"), P(), (Shaped((4,), P("x")),), Returned(0), frozenset({"y"}), True),
        _harness("shardmap").SmapCall(  # a result varying along x returned replicated
            mesh, P("x"), P(), (Shaped((8,)),), Returned(0), frozenset(), True),
        CollectiveCase(permuted, ("x",), frozenset({"x", "y"})),
        CollectiveCase(mesh, ("y", "x"), frozenset({"x", "y"})),
        CollectiveCase(cube, ("x",), frozenset({"x"})),
        ManualCase(cube, frozenset({"y", "x"}), 1),
        ManualCase(Mesh.iota((1, 8), ("x", "y")), frozenset({"x"}), 2),
        ManualCase(Mesh.iota((8, 1), ("x", "y")), frozenset({"y"}), 0),
        ManualCase(mesh, frozenset({"x"}), 2),
    ]}


# Sides no harness case shows: a description JAX has no counterpart of (the *-0 rules'
# refusals). Written from the spec alone, without an origin, and said so.
SPEC_ONLY_REASON = ("spec only: a description the spec refuses before any JAX call could be "
                    "made (JAX has no such value to compare)")


def _spec_only() -> list[tuple[str, str, TransformedCall]]:
    mesh = Mesh.iota((2, 4), ("x", "y"))
    return [
        ("arguments", "ARG-0", TransformedCall.of("place_argument", value_kind="list",
                                                  shape=(), dtype="float32")),
        ("constraint", "WSC-0", TransformedCall.of("with_sharding_constraint",
                                                   values=Arg.numpy((8,)), shardings=P(),
                                                   context_mesh="x")),
        ("autodiff", "AD-0", TransformedCall.of("pruned_equation",
                                                primal_equation=JitEquation((), ()),
                                                jit_body=JitBody(0, ()),
                                                used_outputs=[True])),
        ("shardmap", "SMAP-0", TransformedCall.of("check_shard_map", mesh="m", in_specs=P(),
                                                  out_specs=P(), operands=(Shaped((8,)),),
                                                  results=Returned(0))),
        ("shardmap", "SMAP-0", TransformedCall.of("check_shard_map", mesh=mesh, in_specs=P(),
                                                  out_specs=P(), operands=(Shaped((8,)),),
                                                  results=Returned(3))),
    ]


# =========================================================================== steps

def _run(calls: list[TransformedCall], transform: str, **arguments: Any) -> Any:
    """Ask the spec one step; record the call; the result (None after a rejection)."""
    call = TransformedCall.of(transform, **arguments)
    calls.append(call)
    verdict = explain_transformed(call)
    return verdict.result if verdict.accepted else _Stop


class _Stop:  # a step refused: the harness stops there
    pass


def _arguments_steps(case: Any) -> list[TransformedCall]:
    calls: list[TransformedCall] = []
    _run(calls, "place_argument", value_kind=case.value_kind, shape=case.shape,
         dtype=case.dtype, sharding=case.sharding, int_value=case.int_value, via=case.via)
    return calls


def _batching_steps(case: Any) -> list[TransformedCall]:
    h, calls = _harness("batching"), []
    inner_types, outer_types = h.type_specs(case)
    if case.outer is not None:
        o = case.outer
        if _run(calls, "vmap_jit", arg_shardings=[UNSPECIFIED] * len(case.ranks),
                result_shardings=[], arg_shapes=h.outer_shapes(case), result_ranks=[],
                in_axes=o.in_axes, result_axes=(), axis_size=o.axis_size,
                spmd_axis_name=o.spmd_axis_name, context_mesh=None,
                arg_specs=outer_types) is _Stop:
            return calls
    shapes, v = h.inner_shapes(case), case.inner
    batched = _run(calls, "vmap_jit", arg_shardings=case.arg_shardings,
                   result_shardings=case.result_shardings, arg_shapes=shapes,
                   result_ranks=case.result_ranks, in_axes=v.in_axes,
                   result_axes=h._result_axes(case.sources, v.in_axes, shapes),
                   axis_size=v.axis_size, spmd_axis_name=v.spmd_axis_name,
                   context_mesh=case.context_mesh, arg_specs=inner_types)
    if case.outer is not None and batched is not _Stop:
        full, o = h.outer_shapes(case), case.outer
        ranks = tuple(r + (s is not None and v.in_axes[s] is not None)
                      for r, s in zip(case.result_ranks, case.sources))
        _run(calls, "vmap_jit", arg_shardings=batched.in_shardings,
             result_shardings=batched.out_shardings, arg_shapes=full, result_ranks=ranks,
             in_axes=o.in_axes, result_axes=h._result_axes(case.sources, o.in_axes, full),
             axis_size=o.axis_size, spmd_axis_name=o.spmd_axis_name,
             context_mesh=case.context_mesh, arg_specs=outer_types)
    return calls


def _autodiff_steps(case: Any) -> list[TransformedCall]:
    h, calls = _harness("autodiff"), []
    eqn, _ = h.trace(case)
    given = dict(primal_equation=equation_from_jax(eqn),
                 jit_body=jit_body_of(eqn, case.differentiated, h._mode(case)))
    nonzero = case.differentiated
    if case.transformation == "dce":
        _run(calls, "pruned_equation", **given, used_outputs=case.used)
        return calls
    if case.transformation == "partial_eval":
        for transform in ("partially_evaluated", "known_equation", "unknown_equation"):
            _run(calls, transform, **given, unknown_inputs=nonzero)
        return calls
    _run(calls, "nonzero_outputs", jit_body=given["jit_body"], nonzero_tangents=nonzero)
    if case.transformation == "jvp":
        _run(calls, "jvp_equation", **given, nonzero_tangents=nonzero)
        return calls
    if case.transformation == "linearize":
        for transform in ("linearized_equations", "linearized_primal", "linearized_tangent"):
            _run(calls, transform, **given, nonzero_tangents=nonzero)
        return calls
    used = case.used if case.transformation in h.GRADS else (True,) * len(case.outputs)
    _run(calls, "linearized_primal", **given, nonzero_tangents=nonzero)
    _run(calls, "transposed_equation", **given, nonzero_tangents=nonzero,
         cotangent_outputs=used)
    return calls


def _constraint_steps(case: Any) -> list[TransformedCall]:
    calls: list[TransformedCall] = []
    found = _run(calls, "with_sharding_constraint", values=case.values,
                 shardings=case.shardings, context_mesh=case.context_mesh)
    if found is _Stop:
        return calls
    if case.batch_dim is not None:
        batched = []
        for c in found:
            if c.equation:
                c = _run(calls, "batch_constraint", constraint=c, batch_dim=case.batch_dim,
                         spmd_axis_name=case.spmd_axis_name)
                if c is _Stop:
                    return calls
            batched.append(c)
        found = batched
    if _run(calls, "lower_constraints", constraints=found) is _Stop:
        return calls
    if case.batch_dim is None:
        for c in found:
            _run(calls, "constrained_result", constraint=c)
    return calls


def _shardmap_steps(case: Any) -> list[TransformedCall]:
    calls: list[TransformedCall] = []
    if isinstance(case, CollectiveCase):
        for transform in ("replica_groups", "collective_groups"):
            _run(calls, transform, mesh=case.mesh, collective_axes=case.collective_axes,
                 manual_axes=case.manual_axes)
        return calls
    if isinstance(case, ManualCase):
        _run(calls, "manual_sharding", mesh=case.mesh, manual_axes=case.manual_axes,
             rank=case.rank)
        return calls
    _run(calls, "check_shard_map", mesh=case.mesh, in_specs=case.in_specs,
         out_specs=case.out_specs, operands=case.operands, results=case.results,
         manual_axes=case.manual_axes, check_vma=case.check_vma)
    return calls


_STEPS: dict[str, Callable[[Any], list[TransformedCall]]] = {
    "arguments": _arguments_steps, "batching": _batching_steps, "autodiff": _autodiff_steps,
    "constraint": _constraint_steps, "shardmap": _shardmap_steps,
}


def steps(family: str, case: Any) -> list[TransformedCall]:
    """The spec calls the family's harness makes for ``case``, in order, up to the first
    that refuses."""
    return _STEPS[family](case)


# =========================================================================== comparing

def _hits(family: Family) -> dict[str, tuple[int, int]]:
    """What the family's harness has recorded so far (shardlaw.properties.hits)."""
    return hits.counts(family.harness.SOURCE)


def rule_sides(key: str) -> tuple[str, tuple[str, str]] | None:
    """The rule a harness counter counts and the names of its two sides (None: the
    counter is not one a vector shows)."""
    if key in _DECISION_KEYS:
        return _DECISION_KEYS[key]
    if key in _ONLY_DECIDING:
        return None
    return key, SIDES.get(key, ("accept", "reject"))


def _compare(family: Family, case: Any) -> list[str]:
    h = family.harness
    return {"arguments": lambda: h.compare_argument(case),
            "batching": lambda: h.compare_case(case),
            "autodiff": lambda: h.compare_case(case),
            "constraint": lambda: h.compare_constraint(case),
            "shardmap": lambda: (_compare_collective(case) if isinstance(case, CollectiveCase)
                                 else _compare_manual(case) if isinstance(case, ManualCase)
                                 else h.compare_shard_map(case))}[family.name]()


def sides_hit(family: Family, case: Any) -> tuple[list[str], set[tuple[str, str]]]:
    """Compare ``case`` with real JAX: (the disagreements, the (rule, side) pairs the
    harness counted for it)."""
    before = _hits(family)
    problems = _compare(family, case)
    found = set()
    for key, counts in _hits(family).items():
        named = rule_sides(key)
        if named is None or not named[0].startswith(family.prefix + "-"):
            continue
        for second in (0, 1):
            if counts[second] > before.get(key, (0, 0))[second]:
                found.add((named[0], named[1][second]))
    return problems, found


def _shows(verdict: TransformedVerdict, rule_id: str, side: str) -> bool:
    """Whether a verdict shows ``rule_id`` on ``side`` (a deciding rule's outcome: it fired)."""
    if side == "reject":
        return not verdict.accepted and verdict.rule == rule_id
    return rule_id in verdict.trace and verdict.rule != rule_id


def wanted() -> list[tuple[str, str, str]]:
    """(family, rule, side) for every side of every rule of the five families."""
    refusing = rejecting_rules()
    out = []
    for family in FAMILIES.values():
        ids = sorted((r for r in RULES if r.startswith(family.prefix + "-")),
                     key=lambda r: int(r.rsplit("-", 1)[1]))
        for rule_id in ids:
            if rule_id in PROGRAM_ONLY:
                continue
            names = [named for key, named in _DECISION_KEYS.items() if named[0] == rule_id]
            if rule_id in SIDES:
                names.append((rule_id, SIDES[rule_id]))
            elif rule_id not in _ONLY_DECIDING:  # a rule that never refuses: accepting only
                names.append((rule_id, ("accept", "reject") if rule_id in refusing
                              else ("accept",)))
            out += [(family.name, rule_id, side) for _, pair in names for side in pair]
    return out


# =========================================================================== writing


@dataclasses.dataclass
class GenerationReport:
    written: dict[tuple[str, str, str], int] = dataclasses.field(default_factory=dict)
    cases: int = 0
    disagreements: list[str] = dataclasses.field(default_factory=list)
    # (family, rule, side) -> the smallest candidates: (size, order, call, verdict, case)
    kept: dict[tuple[str, str, str], list[tuple]] = dataclasses.field(default_factory=dict)


def _size(family: Family, call: TransformedCall, verdict: TransformedVerdict, case: Any) -> int:
    """How long the vector's text is: the generator keeps the shortest (most readable)."""
    return len(vector_text(dump_transformed(call, verdict, origin=case,
                                            origin_harness=family.name)))


def _keep(family: Family, case: Any, found: set[tuple[str, str]], per_rule: int,
          report: GenerationReport) -> None:
    """Offer the case's calls as candidates for each (rule, side) it showed."""
    calls = None
    sizes: dict[int, int] = {}
    for rule_id, side in sorted(found):
        calls = steps(family.name, case) if calls is None else calls
        for n, call in enumerate(calls):
            verdict = explain_transformed(call)
            if not _shows(verdict, rule_id, side):
                continue
            if n not in sizes:
                sizes[n] = _size(family, call, verdict, case)
            kept = report.kept.setdefault((family.name, rule_id, side), [])
            kept.append((sizes[n], report.cases, call, verdict, case))
            kept.sort(key=lambda c: c[:2])
            del kept[per_rule:]
            break


def _compared_with(family: str, case: Any) -> str:
    """The JAX call the case was compared on, in words."""
    if isinstance(case, CollectiveCase):
        return ("jax.lax.psum over collective_axes inside jax.shard_map (axis_names = the "
                "manual axes), lowered under jax.jit: the replica groups of the all-reduce in "
                "the StableHLO text")
    if isinstance(case, ManualCase):
        return ("a value of the rank inside jax.shard_map with axis_names = the manual axes, "
                "lowered under jax.jit: the HLO sharding the module gives it")
    return FAMILIES[family].compared_with


def _write_kept(directory: Path, report: GenerationReport) -> None:
    for (family, rule_id, side), kept in sorted(report.kept.items()):
        for n, (_, _, call, verdict, case) in enumerate(kept, 1):
            name = f"{rule_id}-{side}-{n}"
            vector = dump_transformed(call, verdict, name=name, rule=rule_id, side=side,
                                      compared_with=_compared_with(family, case),
                                      origin=case, origin_harness=family)
            (directory / family).mkdir(parents=True, exist_ok=True)
            (directory / family / f"{name}.json").write_text(vector_text(vector))
            report.written[(family, rule_id, side)] = n


def _write_spec_only(family: str, rule_id: str, call: TransformedCall, directory: Path,
                     report: GenerationReport) -> None:
    key = (family, rule_id, "reject")
    count = report.written.get(key, 0)
    verdict = explain_transformed(call)
    assert _shows(verdict, rule_id, "reject"), (call, verdict)
    name = f"{rule_id}-reject-{count + 1}"
    vector = dump_transformed(call, verdict, name=name, rule=rule_id, side="reject",
                              description=SPEC_ONLY_REASON)
    (directory / family).mkdir(parents=True, exist_ok=True)
    (directory / family / f"{name}.json").write_text(vector_text(vector))
    report.written[key] = count + 1


def _offer(family: Family, case: Any, directory: Path, per_rule: int,
           report: GenerationReport) -> None:
    report.cases += 1
    problems, found = sides_hit(family, case)
    if problems:
        report.disagreements.append(f"{family.name}: {case!r}: {problems}")
        return
    _keep(family, case, found, per_rule, report)


def _strategy(family: Family) -> Any:
    h = family.harness
    return {"arguments": lambda: h.argument_cases(), "batching": lambda: h.vmap_cases(),
            "autodiff": lambda: h.grad_cases(), "constraint": lambda: h.constraint_cases(),
            "shardmap": lambda: h.smap_calls()}[family.name]()


def generate(directory: str | Path, per_rule: int = 2, budget: int = 300,
             families: tuple[str, ...] = tuple(FAMILIES)) -> GenerationReport:
    """Write vectors under ``directory/<family>/``: the spec-only description refusals, then
    for each side of each rule the ``per_rule`` shortest vectors from the pinned cases and
    ``budget`` drawn cases per family (Hypothesis, derandomized: the same set every run)."""
    root, report = Path(directory), GenerationReport()
    pinned = _pinned()
    for family_name, rule_id, call in _spec_only():
        if family_name in families:
            _write_spec_only(family_name, rule_id, call, root, report)
    for name in families:
        family = FAMILIES[name]
        for case in pinned.get(name, ()):
            _offer(family, case, root, per_rule, report)

        @settings(max_examples=budget, database=None, derandomize=True, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(_strategy(family))
        def draw(case: Any) -> None:
            _offer(family, case, root, per_rule, report)
        draw()
    _write_kept(root, report)
    return report


# =========================================================================== replaying

def rebuild_case(case: Any) -> Any:
    """The harness case a vector's origin holds, as the harness's own object."""
    if isinstance(case, HarnessCase):
        cls = _case_class(case.harness or _owner(case.name), case.name)
        return cls(**{k: rebuild_case(v) for k, v in case.fields})
    if type(case) in (tuple, list):
        return type(case)(rebuild_case(v) for v in case)
    return case


def _owner(name: str) -> str:
    return {"Vmap": "batching", "OutputPlan": "autodiff"}[name]


def _case_class(harness: str, name: str) -> Any:
    if name in ("CollectiveCase", "ManualCase"):
        return globals()[name]
    return getattr(_harness(harness), name)


def replay_in_jax(vector: TransformedVector) -> list[str]:
    """Run the vector's origin case in real JAX again: the disagreements between JAX and the
    spec, the vector's (rule, side) if the case no longer shows it, and whether the vector's
    call is still one of the case's steps with the expected verdict (empty: all holds)."""
    if vector.origin is None:
        return ["the vector has no origin case to run in JAX"]
    family = FAMILIES[vector.origin.harness]
    case = rebuild_case(vector.origin)
    problems, found = sides_hit(family, case)
    if vector.rule is not None and (vector.rule, vector.side) not in found:
        problems.append(f"the case no longer shows {vector.rule} {vector.side} against JAX "
                        f"(it shows {sorted(found)})")
    if vector.call not in steps(family.name, case):
        problems.append("the vector's call is not one the harness makes for its case")
    if vector.expect is not None:
        problems += transformed_differences(vector.expect, explain_transformed(vector.call))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?", default="vectors/transforms")
    parser.add_argument("--per-rule", type=int, default=2)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument("--replace", action="store_true",
                        help="remove the vectors already in DIR's family folders first")
    args = parser.parse_args(argv)
    chosen = tuple(args.family or FAMILIES)
    old = sorted(p for f in chosen for p in Path(args.directory).glob(f"{f}/*.json"))
    if old and not args.replace:
        parser.error(f"{args.directory} already holds {len(old)} vectors (use --replace)")
    for path in old:
        path.unlink()
    jax.config.update("jax_num_cpu_devices", 8)
    report = generate(args.directory, args.per_rule, args.budget, chosen)
    for (family, rule_id, side), n in sorted(report.written.items()):
        print(f"{family:10s} {rule_id:8s} {side:12s} {n}")
    print(f"{report.cases} cases compared with JAX, {len(report.disagreements)} disagreements")
    for line in report.disagreements:
        print("  " + line[:300])
    return 1 if report.disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())

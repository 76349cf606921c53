"""The spec against real JAX, example for example.

Each ``compare_*`` function asks the spec and JAX (0.10.2) the same question about one
input and returns the list of disagreements, in words (empty: they agree). A question
that JAX refuses must be refused by the spec too, with a :class:`Rejection` whose
``failure.jax_error`` names JAX's exception class; where JAX fails with a bare internal
error instead of a deliberate one (see :data:`INTERNAL_ERRORS`), any rejection counts as
agreement, and the pair is tallied in :data:`INTERNAL_AGREEMENTS` so reports can show
which rule stands in for which crash.

Some inputs are refused by both sides in a way that is known example for example: a
:class:`Refusal` names the rule whose function must refuse, the rule its failure cites, the
exception type, and the exception classes JAX raises for the same input (observed in
jax 0.10.2 and recorded in ``notes/jax-facts.md``). A comparison given a refusal holds both
sides to it exactly, and :data:`REFUSALS_COMPARED` counts the refusals held.

Every spec call runs under :func:`shardlaw.spec.core.rules.tracing`; each rule's accepting
and rejecting outcomes are recorded with :func:`shardlaw.properties.hits.record` (source
``"differential"``); :func:`hit_counts` says how often each rule accepted and rejected, so a
property can show that it reached both sides, and :func:`hit_table` prints the counts.

Needs JAX with enough devices (``jax_num_cpu_devices``); the spec side needs nothing.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple

from shardlaw.properties import hits
from shardlaw.spec.core import rules
from shardlaw.spec.placement.equivalence import hlo_equal, jax_equivalent, placement_equivalent
from shardlaw.spec.core.hlo import HloSharding, hlo_text, iota_tile, parse_hlo
from shardlaw.spec.bridge.convert import jax_box, to_jax
from shardlaw.spec.placement.blocks import (
    check_rank, device_ids, devices_indices_map, is_fully_replicated, replica_id, replica_ids,
    shard_shape, tiles_per_dimension, to_hlo,
)
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.core.shardings import (
    GSPMDSharding, NamedSharding, SingleDeviceSharding, UNSPECIFIED,
)
from shardlaw.spec.core.values import AbstractMesh, Device, Mesh, PartitionSpec

__all__ = [
    "INTERNAL_ERRORS", "INTERNAL_AGREEMENTS", "PREDICATES", "hit_counts", "reset_counts",
    "hit_table", "refusing_rule", "REFUSED_VIA", "REFUSALS_COMPARED", "Refusal", "NOT_A_SHARDING",
    "MANUAL_HAS_NO_TILES", "NOT_ON_DEVICE", "NOT_AN_HLO_VALUE",
    "compare", "compare_placement", "compare_equivalence", "compare_placement_equivalence",
    "placement_equal_by_jax", "compare_hlo_text", "compare_iota_tile", "compare_hlo_value",
    "compare_construction", "compare_named_sharding", "compare_lowering",
    "compare_tiles_per_dimension", "compare_replica_id", "compare_hlo_text_of",
]

# JAX exceptions that are crashes rather than answers: any spec rejection matches them.
INTERNAL_ERRORS = frozenset({"IndexError", "AssertionError", "KeyError", "MemoryError",
                             "JaxRuntimeError"})

# (JAX's internal error class, the spec rule that rejected the same input) -> count
INTERNAL_AGREEMENTS: collections.Counter[tuple[str, str]] = collections.Counter()

# The source under which this harness records its rules' outcomes (shardlaw.properties.hits).
SOURCE = "differential"

# (rule whose function refused, rule its failure cites) -> count, where the two differ
REFUSED_VIA: collections.Counter[tuple[str, str]] = collections.Counter()

# (rule whose function refused, rule its failure cites) -> how many refusals were held to a
# Refusal and matched JAX's behaviour on the same input
REFUSALS_COMPARED: collections.Counter[tuple[str, str]] = collections.Counter()

# Rules that answer a yes/no question: called directly, True counts as their accepting side
# and False as their rejecting side (they never raise for their own reasons).
PREDICATES = frozenset({"EQ-1", "EQ-2", "EQ-3", "REP-1"})


def hit_counts() -> collections.Counter[tuple[str, str]]:
    """How often each rule accepted or rejected, over every comparison made so far.

    A rejected call counts for the rule its failure cites and, when that is another rule,
    also for the rule whose function refused the input (the innermost rule running when
    the rejection was raised): ``to_hlo`` refusing a value that is not a sharding is
    LOW-1's rejecting side even though the failure cites VAL-8. :data:`REFUSED_VIA` keeps
    those pairs apart.
    """
    return collections.Counter({(rule_id, side): n
                                for rule_id, sides in hits.counts(SOURCE).items()
                                for side, n in zip(("accept", "reject"), sides) if n})


def reset_counts() -> None:
    hits.clear(SOURCE)
    INTERNAL_AGREEMENTS.clear()
    REFUSED_VIA.clear()
    REFUSALS_COMPARED.clear()


def hit_table() -> str:
    """The hit counts as a Markdown table: one row per rule, accepted and rejected calls, the
    rejections cited from another rule's failure, and the refusals held against JAX."""
    counted = hit_counts()
    rules_seen = sorted({r for r, _ in counted} | {r for r, _ in REFUSED_VIA},
                        key=lambda r: (r.rsplit("-", 1)[0], int(r.rsplit("-", 1)[1])))
    lines = ["| rule | accept | reject | of which citing another rule | refusals held to JAX |",
             "|---|---:|---:|---|---|"]
    for r in rules_seen:
        via = ", ".join(f"{cited} {n}" for (by, cited), n in sorted(REFUSED_VIA.items())
                        if by == r)
        held = ", ".join(f"{cited} {n}" for (by, cited), n in sorted(REFUSALS_COMPARED.items())
                         if by == r)
        lines.append(f"| {r} | {counted[(r, 'accept')]} | {counted[(r, 'reject')]} | {via} | "
                     f"{held} |")
    return "\n".join(lines)


class Refusal(NamedTuple):
    """A refusal known on both sides: where JAX raises one of ``jax`` (exception class
    names), the spec's function for rule ``by`` refuses the same input with a failure citing
    ``rule``, raised as ``error``."""

    by: str
    rule: str
    error: type[Exception]
    jax: tuple[str, ...]


# to_hlo of a value that is not a sharding. JAX lowers with a method of its sharding
# classes (Sharding._to_xla_hlo_sharding), so any other value has no such attribute: an
# AttributeError, not a check. The spec refuses with TypeError, the class jax.jit raises
# for the same value given as in_shardings / out_shardings.
NOT_A_SHARDING = Refusal("LOW-1", "VAL-8", TypeError, ("AttributeError",))

# tiles_per_dimension of a sharding that lowers to a manual HLO sharding: JAX's
# get_num_ways_dim_sharded asserts against {manual} (AssertionError) and raises
# NotImplementedError ("Unhandled OpSharding type") for manual subgroups.
MANUAL_HAS_NO_TILES = Refusal("DIV-2", "IDX-1", NotImplementedError,
                              ("AssertionError", "NotImplementedError"))

# replica_id of a device the sharding does not span: JAX's device_replica_id_map has no
# entry for it (a KeyError from the dict, the device as its message).
NOT_ON_DEVICE = Refusal("IDX-2", "IDX-1", KeyError, ("KeyError",))

# hlo_text of a value that is not an HLO sharding: XLA's printer, HloSharding.__repr__,
# refuses the argument ("incompatible function arguments"): TypeError.
NOT_AN_HLO_VALUE = Refusal("HLO-3", "HLO-2", TypeError, ("TypeError",))


# --------------------------------------------------------------------------- outcomes

class _Outcome:
    """What one side answered: a value, or the exception it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error

    def __repr__(self) -> str:
        if self.error is None:
            return repr(self.value)
        return f"{type(self.error).__name__}({_first_line(self.error)!r})"


def _first_line(error: BaseException) -> str:
    lines = str(error).splitlines()
    return lines[0][:200] if lines else ""


def _ask_jax(question: Callable[[], Any]) -> _Outcome:
    try:
        return _Outcome(question())
    except Exception as e:  # noqa: BLE001 - every JAX failure is an answer to compare
        return _Outcome(error=e)


# Every registered rule runs inside the same wrapper function (rules.rule's ``fire``).
_RULE_CALL = next(iter(rules.RULES.values())).function.__code__


def refusing_rule(rejection: Rejection) -> str | None:
    """The rule whose function refused: the innermost rule running when ``rejection`` was raised."""
    found = None
    tb = rejection.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is _RULE_CALL:
            found = tb.tb_frame.f_locals.get("rule_id", found)
        tb = tb.tb_next
    return found


def _ask_spec(question: Callable[[], Any], predicate: str | None) -> _Outcome:
    """Run a spec question under a trace and tally which rules accepted or rejected.

    A call that returns means every rule that fired accepted (``predicate``, the rule asked
    directly, is tallied by its answer instead); a call that is rejected counts for the rule
    named by the failure and, when another rule's function refused (see :func:`hit_counts`),
    for that rule too. Any other exception is a spec crash and is returned as such.
    """
    with rules.tracing() as trace:
        try:
            value = question()
        except Rejection as e:
            hits.record(SOURCE, e.failure.rule, refused=True)
            by = refusing_rule(e)
            if by is not None and by != e.failure.rule and by not in PREDICATES:
                hits.record(SOURCE, by, refused=True)
                REFUSED_VIA[(by, e.failure.rule)] += 1
            return _Outcome(error=e)
        except Exception as e:  # noqa: BLE001 - a crash is a finding, reported by compare
            return _Outcome(error=e)
    for rule_id in set(trace):
        if rule_id in PREDICATES and rule_id != predicate:
            continue  # nested yes/no answers are not visible from here
        if rule_id != predicate:
            hits.record(SOURCE, rule_id, refused=False)
    if predicate is not None:
        hits.record(SOURCE, predicate, refused=not value)
    return _Outcome(value)


def compare(what: str, spec_question: Callable[[], Any], jax_question: Callable[[], Any],
            *, predicate: str | None = None,
            same: Callable[[Any, Any], bool] = lambda a, b: a == b,
            refusal: Refusal | None = None) -> list[str]:
    """Ask both sides one question; the disagreements, in words (empty: they agree).

    With ``refusal`` (decided from JAX's facts about the input, never from the spec's), both
    sides must refuse exactly as it says.
    """
    jax = _ask_jax(jax_question)
    spec = _ask_spec(spec_question, predicate)
    if refusal is not None:
        return _judge_refusal(what, spec, jax, refusal)
    return _judge(what, spec, jax, same)


def _judge_refusal(what: str, spec: _Outcome, jax: _Outcome, refusal: Refusal) -> list[str]:
    if spec.error is not None and not isinstance(spec.error, Rejection):
        return [f"{what}: the spec crashed with {spec!r} (JAX: {jax!r})"]
    problems = []
    if jax.error is None or type(jax.error).__name__ not in refusal.jax:
        problems.append(f"{what}: JAX was expected to raise one of {refusal.jax} "
                        f"(notes/jax-facts.md), but gave {jax!r}")
    if spec.error is None:
        return problems + [f"{what}: the spec answers {spec!r}; {refusal.by} must refuse"]
    error = spec.error
    assert isinstance(error, Rejection)
    by = refusing_rule(error)
    if (by, error.failure.rule) != (refusal.by, refusal.rule) or not isinstance(
            error, refusal.error):
        problems.append(f"{what}: the spec refuses in {by} citing {error.failure.rule} with "
                        f"{type(error).__name__}; expected {refusal.by} citing {refusal.rule} "
                        f"with {refusal.error.__name__}: {spec!r}")
    if not problems:
        REFUSALS_COMPARED[(refusal.by, refusal.rule)] += 1
    return problems


def _judge(what: str, spec: _Outcome, jax: _Outcome,
           same: Callable[[Any, Any], bool]) -> list[str]:
    if spec.error is not None and not isinstance(spec.error, Rejection):
        return [f"{what}: the spec crashed with {spec!r} (JAX: {jax!r})"]
    if jax.error is None and spec.error is None:
        return [] if same(spec.value, jax.value) else [f"{what}: spec {spec!r} != JAX {jax!r}"]
    if jax.error is None:
        return [f"{what}: spec rejects with {spec!r}, JAX answers {jax!r}"]
    if spec.error is None:
        return [f"{what}: JAX raises {jax!r}, spec answers {spec!r}"]
    jax_name = type(jax.error).__name__
    failure = spec.error.failure  # type: ignore[union-attr]
    if jax_name in INTERNAL_ERRORS:
        INTERNAL_AGREEMENTS[(jax_name, failure.rule)] += 1
        return []
    if failure.jax_error != jax_name:
        return [f"{what}: JAX raises {jax!r}, spec rejects with {failure.rule} "
                f"naming {failure.jax_error}: {spec!r}"]
    return []


# --------------------------------------------------------------------------- placement

def _jax_sharding(spec_sharding: Any) -> tuple[Any, list[str]]:
    try:
        return to_jax(spec_sharding), []
    except Exception as e:  # noqa: BLE001
        return None, [f"JAX refuses to build {spec_sharding!r}: {type(e).__name__}: "
                      f"{_first_line(e)}"]


def _jax_indices(jax_s: Any, shape: tuple[int, ...]) -> list[tuple[int, Any]]:
    return [(d.id, jax_box(index, shape)) for d, index in jax_s.devices_indices_map(shape).items()]


def _jax_replica_ids(jax_s: Any, shape: tuple[int, ...]) -> dict[int, int]:
    from jax._src.sharding_impls import device_replica_id_map
    return {d.id: r for d, r in device_replica_id_map(jax_s, shape).items()}


def _spec_replica_ids(s: Any, shape: tuple[int, ...]) -> dict[int, int]:
    ids = replica_ids(s, shape)
    # the symbolic one-device rule must agree with counting boxes
    assert all(replica_id(s, shape, d) == r for d, r in ids.items()), ids
    return ids


def compare_placement(spec_sharding: Any, shape: tuple[int, ...]) -> list[str]:
    """Lowering, shard shape, per-device boxes, replica ids, full replication, the rank rule and tile counts, against JAX.

    Boxes are compared as ordered lists, so the device-assignment order must agree too.
    """
    jax_s, problems = _jax_sharding(spec_sharding)
    if problems:
        return problems
    s, shape, ndim = spec_sharding, tuple(shape), len(shape)
    problems += compare(f"LOW-1 to_hlo({s!r}, {ndim})", lambda: hlo_text(to_hlo(s, ndim)),
                        lambda: str(jax_s._to_xla_hlo_sharding(ndim)))
    problems += compare(f"DIV-1 shard_shape({s!r}, {shape})", lambda: shard_shape(s, shape),
                        lambda: tuple(jax_s.shard_shape(shape)))
    problems += compare(f"IDX-1 devices_indices_map({s!r}, {shape})",
                        lambda: list(devices_indices_map(s, shape).items()),
                        lambda: _jax_indices(jax_s, shape))
    problems += compare(f"IDX-2 replica ids of {s!r} for {shape}",
                        lambda: _spec_replica_ids(s, shape), lambda: _jax_replica_ids(jax_s, shape))
    problems += compare(f"REP-1 is_fully_replicated({s!r})", lambda: is_fully_replicated(s),
                        lambda: jax_s.is_fully_replicated, predicate="REP-1")
    if isinstance(s, (NamedSharding, GSPMDSharding)):
        problems += compare(f"NS-5 check_rank({s!r}, {shape})", lambda: check_rank(s, shape),
                            lambda: jax_s.check_compatible_aval(shape))
    problems += _compare_tiles(s, jax_s, ndim)
    return problems


# The spec values that the bridge builds JAX objects for.
_BRIDGED = (Device, Mesh, AbstractMesh, PartitionSpec, NamedSharding, SingleDeviceSharding,
            GSPMDSharding, HloSharding)


def _jax_counterpart(value: Any) -> Any:
    """What JAX is given for a value: the JAX object for a value the bridge knows, JAX's own
    UNSPECIFIED marker for the spec's, and any other (plain Python) value unchanged."""
    if value is UNSPECIFIED:
        from jax._src.sharding_impls import UNSPECIFIED as JAX_UNSPECIFIED
        return JAX_UNSPECIFIED
    if isinstance(value, _BRIDGED):
        return to_jax(value)
    return value


def compare_lowering(value: Any, ndim: int) -> list[str]:
    """LOW-1 on any value: to_hlo against JAX's ``_to_xla_hlo_sharding``, a method of JAX's
    sharding classes; what is not a JAX sharding is refused by both (:data:`NOT_A_SHARDING`)."""
    import jax
    try:
        jax_value = _jax_counterpart(value)
    except Exception as e:  # noqa: BLE001
        return [f"JAX refuses to build {value!r}: {type(e).__name__}: {_first_line(e)}"]
    refusal = None if isinstance(jax_value, jax.sharding.Sharding) else NOT_A_SHARDING
    return compare(f"LOW-1 to_hlo({value!r}, {ndim})", lambda: hlo_text(to_hlo(value, ndim)),
                   lambda: str(jax_value._to_xla_hlo_sharding(ndim)), refusal=refusal)


def _is_manual(hlo: Any) -> bool:
    from jax._src.lib import xla_client as xc
    return hlo.is_manual() or xc.OpSharding.Type.MANUAL in hlo.subgroup_types()


def _compare_tiles(s: Any, jax_s: Any, ndim: int) -> list[str]:
    from jax._src.op_shardings import get_num_ways_dim_sharded, is_hlo_sharding_replicated

    lowered = _ask_jax(lambda: jax_s._to_xla_hlo_sharding(ndim))
    manual = lowered.error is None and _is_manual(lowered.value)

    def by_jax() -> tuple[tuple[int, ...], int, bool]:
        hlo = jax_s._to_xla_hlo_sharding(ndim)
        ways, copies = get_num_ways_dim_sharded(hlo)
        return tuple(ways), copies, is_hlo_sharding_replicated(hlo)

    def same(spec_answer: Any, jax_answer: Any) -> bool:
        (tiles, copies), (ways, jax_copies, replicated) = spec_answer, jax_answer
        if replicated or not ways:
            # JAX answers ([], 1) when nothing is cut (replicated, unreduced), and a
            # one-device sharding cuts nothing whatever its tile rank; its count is no
            # replication factor there.
            return all(t == 1 for t in tiles) and all(w == 1 for w in ways)
        return tiles == ways and copies == jax_copies

    return compare(f"DIV-2 tiles_per_dimension({s!r}, {ndim})",
                   lambda: tiles_per_dimension(s, ndim), by_jax, same=same,
                   refusal=MANUAL_HAS_NO_TILES if manual else None)


def compare_tiles_per_dimension(s: Any, ndim: int) -> list[str]:
    """DIV-2: tiles_per_dimension against JAX's get_num_ways_dim_sharded of its own lowering;
    a sharding that lowers to a manual HLO sharding is refused by both
    (:data:`MANUAL_HAS_NO_TILES`)."""
    jax_s, problems = _jax_sharding(s)
    return problems or _compare_tiles(s, jax_s, ndim)


def compare_replica_id(s: Any, shape: tuple[int, ...], device_id: int) -> list[str]:
    """IDX-2 for one device: replica_id against JAX's device_replica_id_map; a device the
    sharding does not span is refused by both (:data:`NOT_ON_DEVICE`).

    ``device_id`` must name one of JAX's devices.
    """
    import jax
    from jax._src.sharding_impls import device_replica_id_map
    jax_s, problems = _jax_sharding(s)
    if problems:
        return problems
    shape = tuple(shape)
    (device,) = [d for d in jax.devices() if d.id == device_id]
    replica_map = _ask_jax(lambda: device_replica_id_map(jax_s, shape))
    foreign = replica_map.error is None and device not in replica_map.value
    return compare(f"IDX-2 replica_id({s!r}, {shape}, {device_id})",
                   lambda: replica_id(s, shape, device_id),
                   lambda: device_replica_id_map(jax_s, shape)[device],
                   refusal=NOT_ON_DEVICE if foreign else None)


# --------------------------------------------------------------------------- equivalence

def compare_equivalence(a: Any, b: Any, ndim: int) -> list[str]:
    """JAX-equivalence (``is_equivalent_to``) and HLO equality (``are_hlo_shardings_equal``), against JAX."""
    from jax._src.op_shardings import are_hlo_shardings_equal
    (ja, problems_a), (jb, problems_b) = _jax_sharding(a), _jax_sharding(b)
    if problems_a or problems_b:
        return problems_a + problems_b
    problems = compare(f"EQ-1 jax_equivalent({a!r}, {b!r}, {ndim})",
                       lambda: jax_equivalent(a, b, ndim), lambda: ja.is_equivalent_to(jb, ndim),
                       predicate="EQ-1")
    problems += compare(f"EQ-3 hlo_equal of {a!r} and {b!r} at rank {ndim}",
                        lambda: hlo_equal(to_hlo(a, ndim), to_hlo(b, ndim)),
                        lambda: are_hlo_shardings_equal(ja._to_xla_hlo_sharding(ndim),
                                                        jb._to_xla_hlo_sharding(ndim)),
                        predicate="EQ-3")
    return problems


def placement_equal_by_jax(a: Any, b: Any, shape: tuple[int, ...]) -> bool:
    """Placement-equivalence as JAX's own shardings show it: same devices, same boxes (from
    ``devices_indices_map``), and the same memory kind (JAX's ``memory_kind``).

    Takes spec shardings; raises what JAX raises when it cannot place the shape.
    """
    shape = tuple(shape)
    ja, jb = to_jax(a), to_jax(b)
    same_boxes = dict(_jax_indices(ja, shape)) == dict(_jax_indices(jb, shape))
    return same_boxes and ja.memory_kind == jb.memory_kind


def compare_placement_equivalence(a: Any, b: Any, shape: tuple[int, ...]) -> list[str]:
    """The spec's placement_equivalent against the truth derived from JAX's devices_indices_map."""
    shape = tuple(shape)
    for s in (a, b):
        _, problems = _jax_sharding(s)
        if problems:
            return problems
    return compare(f"EQ-2 placement_equivalent({a!r}, {b!r}, {shape})",
                   lambda: placement_equivalent(a, b, shape),
                   lambda: placement_equal_by_jax(a, b, shape), predicate="EQ-2")


# --------------------------------------------------------------------------- HLO text

def compare_hlo_text(text: str) -> list[str]:
    """Reading then printing HLO sharding text: the spec's parse_hlo and hlo_text against XLA's from_string and str."""
    from jax._src.lib import xla_client as xc
    return compare(f"HLO-2/HLO-3 text {text!r}", lambda: hlo_text(parse_hlo(text)),
                   lambda: str(xc.HloSharding.from_string(text)))


def compare_hlo_value(hlo: HloSharding) -> list[str]:
    """A spec HLO sharding prints as XLA prints the same sharding (built by XLA's constructors).

    Reading the text back is :func:`compare_hlo_text`'s question: XLA's parser does not
    always give back what its constructors built (a lone subgroup without data tiling).
    """
    return compare(f"HLO-3 hlo_text({hlo!r})", lambda: hlo_text(hlo), lambda: str(to_jax(hlo)))


def compare_hlo_text_of(value: Any) -> list[str]:
    """HLO-3 on any value: hlo_text against XLA's printer, ``HloSharding.__repr__`` (which
    ``str`` of an HloSharding calls); what is not an HLO sharding is refused by both
    (:data:`NOT_AN_HLO_VALUE`). Python's own ``str`` accepts anything, so it is not the
    counterpart.
    """
    from jax._src.lib import xla_client as xc
    try:
        jax_value = _jax_counterpart(value)
    except Exception as e:  # noqa: BLE001
        return [f"JAX refuses to build {value!r}: {type(e).__name__}: {_first_line(e)}"]
    refusal = None if isinstance(jax_value, xc.HloSharding) else NOT_AN_HLO_VALUE
    return compare(f"HLO-3 hlo_text({value!r})", lambda: hlo_text(value),
                   lambda: xc.HloSharding.__repr__(jax_value), refusal=refusal)


def compare_iota_tile(dims: Any, reshape_dims: Any = None, perm: Any = None,
                      subgroups: tuple[Any, ...] = ()) -> list[str]:
    """The spec's iota_tile (canonical form, HLO-1) against ``xc.HloSharding.iota_tile``.

    ``subgroups`` are spec SubgroupType values. Only give JAX inputs it refuses politely:
    some malformed tile assignments abort the process inside XLA.
    """
    from jax._src.lib import xla_client as xc

    def by_jax() -> str:
        kinds = [xc.OpSharding.Type(int(k)) for k in subgroups]
        return str(xc.HloSharding.iota_tile(
            list(dims), reshape_dims=[] if reshape_dims is None else list(reshape_dims),
            transpose_perm=[] if perm is None else list(perm), subgroup_types=kinds))

    return compare(f"HLO-1 iota_tile({dims}, {reshape_dims}, {perm}, {subgroups})",
                   lambda: hlo_text(iota_tile(dims, reshape_dims, perm, subgroups)), by_jax)


# --------------------------------------------------------------------------- construction

def compare_construction(what: str, by_spec: Callable[[], Any], by_jax: Callable[[], Any],
                         *, validated_by: tuple[str, ...] = ()) -> list[str]:
    """Both sides build a value from the same raw input: same accept/reject, same error class.

    Value checks (``VAL-*``) run in constructors, not in traced rule functions; when the
    spec builds the value, each rule in ``validated_by`` is tallied as accepting.
    """
    def build() -> Any:
        value = by_spec()
        for rule_id in validated_by:
            hits.record(SOURCE, rule_id, refused=False)
        return value

    return compare(what, build, by_jax, same=lambda a, b: True)


def compare_named_sharding(mesh: Any, spec: Any, memory_kind: str | None = None) -> list[str]:
    """Building a NamedSharding from a spec mesh and PartitionSpec: the validity rules NS-1..NS-4 and VAL-7 against JAX's constructor."""
    import jax

    def by_spec() -> Any:
        return NamedSharding(mesh, spec, memory_kind=memory_kind)

    def by_jax() -> Any:
        return jax.sharding.NamedSharding(to_jax(mesh), to_jax(spec), memory_kind=memory_kind)

    return compare_construction(f"NamedSharding({mesh!r}, {spec!r}, memory_kind={memory_kind!r})",
                                by_spec, by_jax, validated_by=("VAL-7",))

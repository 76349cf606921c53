"""The spec against real JAX, example for example.

Each ``compare_*`` function asks the spec and JAX (0.10.2) the same question about one
input and returns the list of disagreements, in words (empty: they agree). A question
that JAX refuses must be refused by the spec too, with a :class:`Rejection` whose
``failure.jax_error`` names JAX's exception class; where JAX fails with a bare internal
error instead of a deliberate one (see :data:`INTERNAL_ERRORS`), any rejection counts as
agreement, and the pair is tallied in :data:`INTERNAL_AGREEMENTS` so reports can show
which rule stands in for which crash.

Every spec call runs under :func:`shardlaw.spec.rules.tracing`; :func:`hit_counts` says how
often each rule accepted and rejected, so a property can show that it reached both sides.

Needs JAX with enough devices (``jax_num_cpu_devices``); the spec side needs nothing.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from shardlaw.spec import rules
from shardlaw.spec.equivalence import hlo_equal, jax_equivalent, placement_equivalent
from shardlaw.spec.hlo import HloSharding, hlo_text, iota_tile, parse_hlo
from shardlaw.spec.jax_bridge import jax_box, to_jax
from shardlaw.spec.placement import (
    check_rank, device_ids, devices_indices_map, is_fully_replicated, replica_id, replica_ids, shard_shape,
    to_hlo,
)
from shardlaw.spec.rules import Rejection
from shardlaw.spec.shardings import GSPMDSharding, NamedSharding

__all__ = [
    "INTERNAL_ERRORS", "INTERNAL_AGREEMENTS", "PREDICATES", "hit_counts", "reset_counts",
    "compare", "compare_placement", "compare_equivalence", "compare_placement_equivalence",
    "placement_equal_by_jax", "compare_hlo_text", "compare_iota_tile", "compare_hlo_value",
    "compare_construction", "compare_named_sharding",
]

# JAX exceptions that are crashes rather than answers: any spec rejection matches them.
INTERNAL_ERRORS = frozenset({"IndexError", "AssertionError", "KeyError", "MemoryError",
                             "JaxRuntimeError"})

# (JAX's internal error class, the spec rule that rejected the same input) -> count
INTERNAL_AGREEMENTS: collections.Counter[tuple[str, str]] = collections.Counter()

# (rule ID, 'accept' | 'reject') -> how many spec calls had that outcome
_HITS: collections.Counter[tuple[str, str]] = collections.Counter()

# Rules that answer a yes/no question: called directly, True counts as their accepting side
# and False as their rejecting side (they never raise for their own reasons).
PREDICATES = frozenset({"EQ-1", "EQ-2", "EQ-3", "REP-1"})


def hit_counts() -> collections.Counter[tuple[str, str]]:
    """How often each rule accepted or rejected, over every comparison made so far."""
    return collections.Counter(_HITS)


def reset_counts() -> None:
    _HITS.clear()
    INTERNAL_AGREEMENTS.clear()


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


def _ask_spec(question: Callable[[], Any], predicate: str | None) -> _Outcome:
    """Run a spec question under a trace and tally which rules accepted or rejected.

    A call that returns means every rule that fired accepted (``predicate``, the rule asked
    directly, is tallied by its answer instead); a call that is rejected counts once for the
    rule named by the failure. Any other exception is a spec crash and is returned as such.
    """
    with rules.tracing() as trace:
        try:
            value = question()
        except Rejection as e:
            _HITS[(e.failure.rule, "reject")] += 1
            return _Outcome(error=e)
        except Exception as e:  # noqa: BLE001 - a crash is a finding, reported by compare
            return _Outcome(error=e)
    for rule_id in set(trace):
        if rule_id in PREDICATES and rule_id != predicate:
            continue  # nested yes/no answers are not visible from here
        if rule_id != predicate:
            _HITS[(rule_id, "accept")] += 1
    if predicate is not None:
        _HITS[(predicate, "accept" if value else "reject")] += 1
    return _Outcome(value)


def compare(what: str, spec_question: Callable[[], Any], jax_question: Callable[[], Any],
            *, predicate: str | None = None,
            same: Callable[[Any, Any], bool] = lambda a, b: a == b) -> list[str]:
    """Ask both sides one question; the disagreements, in words (empty: they agree)."""
    jax = _ask_jax(jax_question)
    spec = _ask_spec(spec_question, predicate)
    return _judge(what, spec, jax, same)


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
    """Lowering, shard shape, per-device boxes, replica ids, full replication and the rank rule, against JAX.

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
    return problems


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
    """Placement-equivalence as JAX's own ``devices_indices_map`` shows it: same devices, same boxes.

    Takes spec shardings; raises what JAX raises when it cannot place the shape.
    """
    shape = tuple(shape)
    ja, jb = to_jax(a), to_jax(b)
    return dict(_jax_indices(ja, shape)) == dict(_jax_indices(jb, shape))


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
            _HITS[(rule_id, "accept")] += 1
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

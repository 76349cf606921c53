"""``shardlaw vectors run`` and ``shardlaw check`` for the repository's two other vector
formats: call sequences for the cache model (``"format": "shardlaw-jit-sequence"``,
``vectors/cache/``) and divergence pairs (``"format": "shardlaw-equivalence"``,
``vectors/equivalence/``, described in its ``README.md``).

A sequence replays against the spec (:func:`~shardlaw.spec.jit.cache.explain_cache` against
the expected cache outcomes) or against JAX's own cache counters. A divergence pair replays
against the spec (EQ-2 placement equivalence, EQ-1 JAX equivalence and IDX-1 placement, each
against ``expect``) or against JAX (the costs it records, measured again). The engine
replays jit-call vectors only, so it skips both.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, TextIO

__all__ = ["EQUIVALENCE_FORMAT", "EquivalenceVector", "is_more_text", "load_more",
           "is_more_vector", "more_hits", "replay_more", "check_equivalence"]

EQUIVALENCE_FORMAT = "shardlaw-equivalence"
_FORMAT = re.compile(r'"format"\s*:\s*"(shardlaw-jit-sequence|shardlaw-equivalence)"')
_EQUIVALENCE_KEYS = ("format", "version", "jax", "class", "title", "jax_notion_that_differs",
                     "shape", "a", "b", "a_text", "b_text", "expect", "jax_costs")


@dataclasses.dataclass(frozen=True)
class EquivalenceVector:
    """A divergence pair: two shardings of one shape, the placement both give, and what
    each notion of equivalence answers (``expect``) and JAX's costs (``jax_costs``, or None
    when not measured)."""

    name: str
    a: Any
    b: Any
    shape: tuple[int, ...]
    expect: dict[str, Any]
    jax_costs: dict[str, Any] | None
    jax: str


def is_more_text(text: str) -> bool:
    """Whether JSON text says it is a sequence vector or a divergence pair."""
    return _FORMAT.search(text) is not None


def is_more_vector(vector: Any) -> bool:
    """Whether a vector read is a sequence vector or a divergence pair."""
    from shardlaw.spec.vectors.sequence_vectors import SequenceVector
    return isinstance(vector, (SequenceVector, EquivalenceVector))


def load_more(text: str) -> Any:
    """The sequence vector or divergence pair in ``text`` (VEC-1 when malformed)."""
    from shardlaw.spec.vectors.sequence_vectors import SEQUENCE_FORMAT, load_sequence
    if _FORMAT.search(text)[1] == SEQUENCE_FORMAT:  # type: ignore[index]
        return load_sequence(text)
    return _load_equivalence(json.loads(text))


def _load_equivalence(data: Any) -> EquivalenceVector:
    from shardlaw.sharding_text import sharding_from_json
    from shardlaw.spec.vectors.vector_checks import check_vector

    check_vector(isinstance(data, dict), (), "a divergence pair (a JSON object)", data)
    for key in _EQUIVALENCE_KEYS:
        check_vector(key in data, (key,), f"the key {key!r} of a divergence pair", None)
    for key in data:
        check_vector(key in _EQUIVALENCE_KEYS, (key,),
                     f"a key of a divergence pair ({', '.join(_EQUIVALENCE_KEYS)})", key)
    check_vector(data["format"] == EQUIVALENCE_FORMAT, ("format",),
                 f"the format name {json.dumps(EQUIVALENCE_FORMAT)}", data["format"])
    check_vector(data["version"] == 1 and type(data["version"]) is int, ("version",),
                 "a format version this shardlaw reads (1)", data["version"])
    shape = data["shape"]
    check_vector(isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape),
                 ("shape",), "a list of non-negative integers", shape)
    expect = data["expect"]
    check_vector(isinstance(expect, dict)
                 and set(expect) == {"placement_equivalent", "jax_equivalent", "placement"},
                 ("expect",), "an object of placement_equivalent, jax_equivalent, placement",
                 expect)
    for key in ("placement_equivalent", "jax_equivalent"):
        check_vector(type(expect[key]) is bool, ("expect", key), "true or false", expect[key])
    costs = data["jax_costs"]
    check_vector(costs is None or isinstance(costs, dict), ("jax_costs",),
                 "an object of measured costs, or null", costs)
    return EquivalenceVector(str(data["class"]), sharding_from_json(data["a"]),
                             sharding_from_json(data["b"]), tuple(shape), expect, costs,
                             str(data["jax"]))


def _placement(expect: dict[str, Any]) -> dict[int, tuple] | None:
    """The placement ``expect`` writes, as ``devices_indices_map`` answers (None: malformed)."""
    try:
        return {int(device): tuple(tuple(r) for r in box) for device, box in expect["placement"]}
    except (TypeError, ValueError):
        return None


def _equivalence_differences(vector: EquivalenceVector) -> list[str]:
    from shardlaw.spec import devices_indices_map, jax_equivalent, placement_equivalent

    differences = []
    said = {"placement_equivalent": placement_equivalent(vector.a, vector.b, vector.shape),
            "jax_equivalent": jax_equivalent(vector.a, vector.b, len(vector.shape))}
    for key, answer in said.items():
        if vector.expect[key] != answer:
            differences.append(f"{key}: expected {vector.expect[key]}, the spec says {answer}")
    placement = _placement(vector.expect)
    for side, sharding in (("a", vector.a), ("b", vector.b)):
        boxes = devices_indices_map(sharding, vector.shape)
        if boxes != placement:
            differences.append(f"placement: expected {vector.expect['placement']}, the spec "
                               f"places {side} as {sorted(boxes.items())}")
    return differences


def more_hits(vector: Any) -> list[tuple[str, str]]:
    """The rules the spec applies to a sequence or a pair (each on its accepting side)."""
    from shardlaw.spec.core.rules import tracing
    from shardlaw.spec.jit.cache import explain_cache

    with tracing() as trace:
        try:
            if isinstance(vector, EquivalenceVector):
                _equivalence_differences(vector)
            else:
                explain_cache(vector.sites)
        except Exception:  # noqa: BLE001 - the replay says what went wrong; hits are a tally
            pass
    return [(rule_id, "accept") for rule_id in dict.fromkeys(trace)]


def replay_more(against: str, vector: Any, skip: type[Exception] | None = None) -> list[str]:
    """The differences of a sequence or a pair from what ``against`` answers; ``skip`` is
    raised where ``against`` cannot replay it."""
    if against == "engine":
        raise (skip or RuntimeError)("the engine replays jit-call vectors only")
    if isinstance(vector, EquivalenceVector):
        if against == "spec":
            return _equivalence_differences(vector)
        if vector.jax_costs is None:
            raise (skip or RuntimeError)("a pair whose costs in JAX were not measured")
        from shardlaw.properties.model_check import jax_costs
        measured = jax_costs(vector.a, vector.b, vector.shape)
        return [f"jax_costs.{key}: expected {vector.jax_costs.get(key)!r}, JAX gives {value!r}"
                for key, value in measured.items() if vector.jax_costs.get(key) != value]
    from shardlaw.spec.vectors.sequence_vectors import cache_differences
    if against == "spec":
        from shardlaw.spec.jit.cache import explain_cache
        return cache_differences(vector, explain_cache(vector.sites))
    from shardlaw.properties.cache_harness import compare_sequence
    rows, _, problems = compare_sequence(vector.sites)
    return list(problems) + cache_differences(vector, rows)


def check_equivalence(file: str, vector: EquivalenceVector, as_json: bool, out: TextIO) -> int:
    """``shardlaw check`` of a divergence pair: the two shardings, the placement both give,
    and whether the spec answers as the pair expects."""
    from shardlaw.sharding_text import sharding_text

    differences = _equivalence_differences(vector)
    if as_json:
        json.dump({"file": file, "name": vector.name, "jax": vector.jax,
                   "a": sharding_text(vector.a), "b": sharding_text(vector.b),
                   "shape": list(vector.shape), "expect": vector.expect,
                   "matches": not differences, "differences": differences}, out, indent=2)
        out.write("\n")
        return 1 if differences else 0
    w = out.write
    w(f"{file}: a divergence pair ({vector.name}) over shape {vector.shape}\n")
    w(f"  a  {sharding_text(vector.a)}\n  b  {sharding_text(vector.b)}\n")
    w(f"  placement-equivalent (EQ-2): {vector.expect['placement_equivalent']}; "
      f"JAX-equivalent (EQ-1): {vector.expect['jax_equivalent']}\n")
    w("\nExpected by the vector: " + ("the spec matches." if not differences else
                                      "the spec differs:\n  " + "\n  ".join(differences)) + "\n")
    return 1 if differences else 0

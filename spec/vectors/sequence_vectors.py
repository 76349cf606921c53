"""Call-sequence vectors: calls made one after another and the cache outcome of each.

A sequence vector is one JSON object::

    {"format": "shardlaw-jit-sequence", "version": 2, "jax": "0.10.2",
     "sequence": [{"function": "f", "wrapper": "w", "call": {...}}, ...],
     "expect_cache": [{...per cache level: "hit", "miss" or ""...}, ...]}

Each call is written as in a jit-call vector (:mod:`~shardlaw.spec.vectors.jit_vectors`);
the expected outcomes are those :func:`~shardlaw.spec.jit.cache.explain_cache` gives.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..core.rules import Rejection, reject
from ..jit.cache import LEVELS, CacheRow
from ..jit.cache_sites import CallSite, check_sequence
from .vector_checks import (
    JAX_VERSION, VERSION, VERSIONS, UnreadableWhenWritten, read_document, check_vector,
    check_writable,
)
from .vector_reader import CALL_KEYS, CallReader, as_int, as_list, maybe, as_object, as_str
from .vector_writer import call_json

__all__ = ["SEQUENCE_FORMAT", "OUTCOMES", "SequenceVector", "dump_sequence", "load_sequence",
           "cache_differences"]

SEQUENCE_FORMAT = "shardlaw-jit-sequence"
OUTCOMES = ("hit", "miss", "")   # "": the call never reached that level


@dataclasses.dataclass(frozen=True)
class SequenceVector:
    """A sequence of calls (each a :class:`~shardlaw.spec.jit.cache_sites.CallSite`) and,
    optionally, the cache outcome expected for each call: per level ``"hit"``, ``"miss"`` or
    ``""`` (a level the call never reached)."""

    sites: tuple
    expect: tuple | None = None
    name: str | None = None
    description: str | None = None
    jax: str = JAX_VERSION


def dump_sequence(sites: Any, *, expect: Any = None, name: str | None = None,
                  description: str | None = None, jax: str = JAX_VERSION) -> dict:
    """The vector for a call sequence (and its expected cache outcomes) as a JSON-ready dict.

    ``expect``: the rows of :func:`~shardlaw.spec.jit.cache.explain_cache` (their outcomes are
    written), or None.

    >>> from shardlaw.spec.jit.cache import CallSite, explain_cache
    >>> sites = [CallSite(Call(args=(Arg.numpy((4,)),), outputs=Out((4,))))] * 2
    >>> v = dump_sequence(sites, expect=explain_cache(sites))
    >>> v["expect_cache"][1]["dispatch"], load_sequence(v).sites == tuple(sites)
    ('hit', True)
    """

    sites = check_sequence(sites)  # an iterable of CallSites, as explain_cache takes (CACHE-0)
    out: dict[str, Any] = {"format": SEQUENCE_FORMAT, "version": VERSION, "jax": jax}
    for key, value in (("name", name), ("description", description)):
        if value is not None:
            out[key] = value
    entries = []
    for i, site in enumerate(sites):
        check_writable(isinstance(site, CallSite), ("sequence", i), "a call site",
                       "a CallSite", site)
        entries.append({"function": site.function, "wrapper": site.wrapper,
                        "call": call_json(site.call)})
    out["sequence"] = entries
    if expect is not None:
        rows = _expected_rows(expect, len(entries))
        out["expect_cache"] = [_outcome_json(row) for row in rows]
    try:
        load_sequence(out)
    except Rejection as error:
        raise reject(UnreadableWhenWritten(str(error))) from None
    return out


def _outcome_json(row: Any) -> dict:
    form = row.as_dict() if hasattr(row, "as_dict") else row
    return {level: value for level, value in form["outcome"].items()}


def _expected_rows(expect: Any, count: int) -> tuple[CacheRow, ...]:
    """The expected outcomes of a sequence: explain_cache's rows, one per call site."""
    check_writable(isinstance(expect, (list, tuple)), ("expect_cache",), "the expected outcomes",
                   "a list of explain_cache rows (or None)", expect)
    for i, row in enumerate(expect):
        check_writable(isinstance(row, CacheRow), ("expect_cache", i), "an expected outcome",
                       "a row of explain_cache", row)
    check_writable(len(expect) == count, ("expect_cache",), "the expected outcomes",
                   f"one row per call site ({count})", expect)
    return tuple(expect)


def load_sequence(obj_or_text: Any) -> SequenceVector:
    """The :class:`SequenceVector` a JSON object (or its text) describes; VEC-1 when malformed."""

    vector = read_document(obj_or_text)
    fields = as_object(vector, (), "a sequence vector (a JSON object)",
                       ("format", "version", "jax", "sequence"),
                       ("name", "description", "expect_cache"))
    check_vector(fields["format"] == SEQUENCE_FORMAT, ("format",),
                 f"the format name {json.dumps(SEQUENCE_FORMAT)}", fields["format"])
    check_vector(fields["version"] in VERSIONS and type(fields["version"]) is int, ("version",),
                 f"a format version this shardlaw reads ({', '.join(map(str, VERSIONS))})",
                 fields["version"])
    jax = as_str(fields["jax"], ("jax",), "a JAX version such as \"0.10.2\"")
    labels = {key: maybe(as_str)(fields.get(key), (key,)) for key in ("name", "description")}
    entries = as_list(fields["sequence"], ("sequence",), "a list of calls")
    check_vector(len(entries) > 0, ("sequence",), "at least one call", entries)
    sites = []
    for i, entry in enumerate(entries):
        path = ("sequence", i)
        site = as_object(entry, path, "a call site", ("call",), ("function", "wrapper"))
        call_fields = as_object(site["call"], path + ("call",), "the call", (), CALL_KEYS)
        count = as_int(call_fields.get("devices", 8), path + ("call", "devices"),
                       "a device count of at least 1", 1)
        processes = as_int(call_fields.get("process_count", 1), path + ("call", "process_count"),
                           "a process count of at least 1", 1)
        call = CallReader(count * processes, count).call(call_fields, path + ("call",))
        sites.append(CallSite(call, as_str(site.get("function", "f"), path + ("function",)),
                              as_str(site.get("wrapper", "w"), path + ("wrapper",))))
    expect = None
    if fields.get("expect_cache") is not None:
        rows = as_list(fields["expect_cache"], ("expect_cache",), "a list of per-call outcomes")
        check_vector(len(rows) == len(sites), ("expect_cache",),
                     f"one outcome per call ({len(sites)})", len(rows))
        outcomes = []
        for i, row in enumerate(rows):
            got = as_object(row, ("expect_cache", i), "a per-level outcome", LEVELS, ())
            for level in LEVELS:
                check_vector(got[level] in OUTCOMES, ("expect_cache", i, level),
                             f"one of {list(OUTCOMES)}", got[level])
            outcomes.append(dict(got))
        expect = tuple(outcomes)
    return SequenceVector(tuple(sites), expect, labels["name"], labels["description"], jax)


def cache_differences(vector: SequenceVector, rows: Any) -> list[str]:
    """Where the rows of explain_cache differ from the outcomes the vector expects."""
    if vector.expect is None:
        return []
    found = []
    for i, (want, row) in enumerate(zip(vector.expect, rows)):
        got = _outcome_json(row)
        for level, value in want.items():
            if got.get(level) != value:
                found.append(f"call {i}: {level} expected {value}, the model says {got.get(level)}")
    return found

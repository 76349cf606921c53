"""The fuzz layer's spec cases: the targets, a call of one with drawn arguments, its run.

A *target* is one public name of :mod:`shardlaw.spec` (a constructor, a query, a method of
a value); its arguments are drawn by parameter name (``fuzz_values.py``). A new public name
is fuzzed as soon as it is exported: :data:`EXEMPT` lists the few that are not, and why.
Every rejection of a spec case is recorded with :func:`shardlaw.properties.hits.record`
(source ``"fuzz"``, a rule refusing hostile input: not held to JAX).
"""

from __future__ import annotations

import collections
import dataclasses
import decimal
import functools
import inspect
import math
from typing import Any, Callable, Iterator

from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.spec.vectors.jit_vectors import dump_sequence, load_sequence

from . import hits
from .fuzz_outcomes import SPEC_LIMIT_S, Outcome, classify
from .fuzz_values import argument

__all__ = ["Target", "targets", "TARGETS", "EXEMPT", "SpecCase", "spec_case_for",
           "spec_cases", "recombined", "run_spec_case"]

# The prover answers within its timeout_s plus this.
PROVER_GRACE_S = 1.0


@dataclasses.dataclass(frozen=True)
class Target:
    """One public callable of the spec, with the name its arguments are drawn for."""

    name: str
    function: Callable[..., Any]
    # Extra checks of an accepted result (for the prover: its time limit).
    prover: bool = False


def _jit_call_of(whole_call: Any) -> Any:
    """jit_call of a drawn call (its rules refuse with verdicts, counted in the coverage)."""
    return S.jit_call(whole_call)


def _explain_cache_of(whole_sites: Any) -> Any:
    """explain_cache of drawn call sites."""
    return S.explain_cache(whole_sites)


def _value_methods() -> list[Target]:
    """Queries on values a user holds: built valid, asked with hostile arguments."""
    mesh = S.Mesh.iota((2, 4), ("x", "y"))
    reversed_list = S.DeviceList.of_ids(range(7, -1, -1))
    iota = S.Iota((2, 4), (1, 0))
    return [
        Target("Mesh.axis_size", mesh.axis_size), Target("Mesh.axis_type", mesh.axis_type),
        Target("AbstractMesh.axis_size", mesh.abstract.axis_size),
        Target("DeviceList.id_at", reversed_list.id_at),
        Target("DeviceList.position_of", reversed_list.position_of),
        Target("DeviceList[position]", reversed_list.__getitem__),
        Target("DeviceList(iota)[position]", S.DeviceList(iota).__getitem__),
        Target("DeviceList(iota).position_of", S.DeviceList(iota).position_of),
        Target("Iota.position_of", iota.position_of),
        Target("Mesh.iota", S.Mesh.iota), Target("DeviceList.of_ids", S.DeviceList.of_ids),
        Target("Arg.committed", S.Arg.committed), Target("Arg.uncommitted", S.Arg.uncommitted),
        Target("Arg.abstract", S.Arg.abstract),
        Target("jit_call(drawn call)", _jit_call_of),
        Target("explain_cache(drawn sites)", _explain_cache_of),
        # Public in their module, not in shardlaw.spec: the sequence vectors.
        Target("dump_sequence", dump_sequence), Target("load_sequence", load_sequence),
    ]


# Public names that are not fuzzed, and why.
EXEMPT = {
    "RULES": "the rule registry, a dict (no input)",
    "Rule": "a registry record, built only by the @rule decorator",
    "Rejection": "the error type itself",
    "explain": "turns a Failure into words; takes the project's own Failure values only",
    "rule": "the decorator that registers rules (for the spec's authors)",
    "tracing": "a context manager without arguments",
    "from_jax": "needs JAX; the bridge is fuzzed with the engine",
    "to_jax": "needs JAX; the bridge is fuzzed with the engine",
    "describe_call": "needs JAX; the bridge is fuzzed with the engine",
    "HloSharding": "an abstract base with no fields",
    "AxisType": "an enum (its lookups are Python's)",
    "SubgroupType": "an enum (its lookups are Python's)",
    "UNCONSTRAINED": "a marker value, not callable",
    "AUTO": "a marker value, not callable",
    "UNSPECIFIED": "a marker value, not callable",
    "AUTO_LAYOUT": "a marker value, not callable",
    "INFER": "a marker value (shard_map's in_specs left out), not callable",
    "Verdict": "a result record the spec builds; users read it",
}


def targets(prover: bool = True) -> list[Target]:
    """Every fuzzed callable: the public names of shardlaw.spec not in EXEMPT, and methods."""
    out = [Target(name, getattr(S, name)) for name in S.__all__ if name not in EXEMPT]
    out += _value_methods()
    if prover:
        try:
            import z3  # noqa: F401
        except ImportError:  # the prover needs z3; without it the rest is fuzzed
            return out
        from shardlaw.spec.prove import smt
        out += [Target("prove_equivalent", smt.prove_equivalent, prover=True),
                Target("prove_for_every_shape", smt.prove_for_every_shape, prover=True)]
    return out


TARGETS = targets()


@dataclasses.dataclass
class SpecCase:
    target: Target
    args: tuple
    kwargs: dict

    def __repr__(self) -> str:
        from shardlaw.spec.core.rules import _bounded
        shown = ", ".join([_bounded(a, repr) for a in self.args]
                          + [f"{k}={_bounded(v, repr)}" for k, v in self.kwargs.items()])
        return f"{self.target.name}({shown})"


def _parameters(function: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return []


_PROVER_LIMITS = [0.2, 0.5, 1.0]
_HOSTILE_LIMITS = [float("inf"), float("nan"), -1.0, 0.0, 1e308, "1", None, True,
                   decimal.Decimal("0.5"), 2**63]


def _build_case(target: Target, pick: Callable[[str, str], Any]) -> SpecCase:
    """A call of ``target`` whose arguments come from ``pick(what, parameter name)``:
    ``what`` is "values" (a list, for ``*args``), "omit" (a bool: leave a default out),
    "value" or "timeout"."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in _parameters(target.function):
        if p.name == "self" or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            args += pick("values", p.name)
        elif p.default is not p.empty and pick("omit", p.name):
            continue  # left out: the default
        elif p.kind is p.KEYWORD_ONLY or kwargs:
            kwargs[p.name] = pick("value", p.name)
        else:
            args.append(pick("value", p.name))
    if target.prover:
        # A short limit, or a hostile one: the prover must check it and keep to it.
        kwargs["timeout_s"] = pick("timeout", "timeout_s")
    return SpecCase(target, tuple(args), kwargs)


@st.composite
def spec_case_for(draw: Any, target: Target) -> SpecCase:
    """One call of ``target``, every argument drawn (shrinks to the smallest failing call)."""
    def pick(what: str, name: str) -> Any:
        if what == "values":
            return draw(st.lists(argument(name), max_size=4))
        if what == "omit":
            return draw(st.integers(0, 2)) == 0
        if what == "timeout":
            return draw(st.one_of(st.sampled_from(_PROVER_LIMITS),
                                  st.sampled_from(_HOSTILE_LIMITS)))
        return draw(argument(name))
    return _build_case(target, pick)


def recombined(cases: list[SpecCase], rng: Any, count: int) -> Iterator[SpecCase]:
    """``count`` more calls built from the values the drawn ``cases`` hold: a random target,
    each argument taken from those drawn for a parameter of the same name (mostly) or for
    any parameter. Cheap next to drawing, so the deep campaign runs many per draw."""
    pool: dict[str, list[Any]] = collections.defaultdict(list)
    every: list[Any] = []
    for case in cases:
        names = [p.name for p in _parameters(case.target.function)
                 if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        for name, value in list(zip(names, case.args)) + list(case.kwargs.items()):
            pool[name].append(value)
            every.append(value)
    if not every:
        return

    def pick(what: str, name: str) -> Any:
        if what == "values":
            return [rng.choice(pool.get(name) or every) for _ in range(rng.randrange(5))]
        if what == "omit":
            return rng.randrange(3) == 0
        if what == "timeout":
            return rng.choice(_PROVER_LIMITS + _HOSTILE_LIMITS)
        if pool.get(name) and rng.random() < 0.7:
            return rng.choice(pool[name])
        return rng.choice(every)
    for _ in range(count):
        yield _build_case(rng.choice(TARGETS), pick)


def spec_cases(only: list[Target] | None = None) -> st.SearchStrategy[SpecCase]:
    """One call of one target with drawn arguments."""
    return st.one_of([_case_strategy(t) for t in (only or TARGETS)])


@functools.lru_cache(maxsize=None)
def _case_strategy(target: Target) -> st.SearchStrategy[SpecCase]:
    return spec_case_for(target)


def run_spec_case(case: SpecCase, limit_s: float = SPEC_LIMIT_S) -> Outcome:
    """Call the target; a value, a rejection with a rule ID, or the failure. A rejected
    jit-call verdict is a value whose detail names its rule (``verdict JIT-2``), so that
    the rules jit_call refuses with count in the coverage too."""
    answer: list[Any] = []
    outcome = classify(lambda: answer.append(
        case.target.function(*case.args, **case.kwargs)), limit_s)
    if outcome.kind == "value" and answer and isinstance(answer[0], S.Verdict) \
            and not answer[0].accepted:
        outcome = dataclasses.replace(outcome, detail=f"verdict {answer[0].rule}")
    limit = case.kwargs.get("timeout_s")
    if case.target.prover and outcome.kind == "value" and isinstance(limit, (int, float)) \
            and not isinstance(limit, bool) and math.isfinite(limit) \
            and outcome.seconds > limit + PROVER_GRACE_S:
        return Outcome("overrun", f"{outcome.seconds:.1f} s for timeout_s={limit}",
                       outcome.seconds)
    if outcome.kind == "rejected":
        hits.record("fuzz", outcome.detail, refused=True)
    return outcome

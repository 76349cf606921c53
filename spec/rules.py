"""The rule registry, rule failures, and the trace of rules that fired.

Every rule of the specification is a small function decorated with :func:`rule`. The
decorator records the rule's stable ID, its one-sentence statement (the first sentence of
the docstring) and the JAX function it mirrors, so that the documentation and the property
suites can list every rule from one place.

A rule that rejects its input does so with :func:`require`, passing a *failure value*: a
frozen dataclass that carries the rule ID and the facts. Failures are turned into words in
exactly one place, :func:`explain`, and raised as a :class:`Rejection` whose class also
derives from the built-in exception type that JAX raises for the same input, so that
``except ValueError`` keeps working for callers that switch from JAX to shardlaw.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import re
from typing import Any, Callable, ClassVar, Iterator

__all__ = [
    "Rule", "RULES", "rule", "Failure", "Rejection", "require", "reject", "explain",
    "tracing", "fired",
]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule of the specification."""

    id: str
    statement: str
    function: Callable[..., Any]
    mirrors: str

    @property
    def family(self) -> str:
        return self.id.rsplit("-", 1)[0]

    @property
    def module(self) -> str:
        return self.function.__module__


RULES: dict[str, Rule] = {}

_ID = re.compile(r"^[A-Z]+(-[A-Z]+)*-[0-9]+$")

# The rules that fired, in order, while a trace is being recorded (None: not recording).
_TRACE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shardlaw_trace", default=None)


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def rule(rule_id: str, *, mirrors: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as the rule ``rule_id``; its docstring's first sentence is the rule."""
    if not _ID.match(rule_id):
        raise ValueError(f"rule ID {rule_id!r} is not of the form FAMILY-N")

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        if rule_id in RULES:
            raise ValueError(f"rule ID {rule_id} is registered twice "
                             f"({RULES[rule_id].function.__qualname__} and {function.__qualname__})")
        statement = _first_sentence(function.__doc__)
        if not statement:
            raise ValueError(f"rule {rule_id} ({function.__qualname__}) has no statement")

        @functools.wraps(function)
        def fire(*args: Any, **kwargs: Any) -> Any:
            trace = _TRACE.get()
            if trace is not None:
                trace.append(rule_id)
            return function(*args, **kwargs)

        fire.rule_id = rule_id  # type: ignore[attr-defined]
        RULES[rule_id] = Rule(rule_id, statement, fire, mirrors)
        return fire

    return register


class tracing:
    """Record the IDs of the rules that fire inside a ``with`` block.

    >>> from shardlaw.spec import shard_shape, NamedSharding, Mesh, P
    >>> with tracing() as trace:
    ...     _ = shard_shape(NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("x")), (4, 4))
    >>> "DIV-1" in trace
    True
    """

    def __enter__(self) -> list[str]:
        self._fired: list[str] = []
        self._token = _TRACE.set(self._fired)
        return self._fired

    def __exit__(self, *exc: object) -> None:
        _TRACE.reset(self._token)


def fired() -> list[str] | None:
    """The rules fired so far in the innermost :class:`tracing` block (None outside one)."""
    trace = _TRACE.get()
    return None if trace is None else list(trace)


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a rule rejected its input: the rule's ID and the facts, no words.

    Subclasses set ``rule`` (the ID of the rule that fails), ``error_type`` (the built-in
    exception type JAX raises for the same input), ``jax_error`` (the name of the exception
    class JAX raises, which may be a subclass of ``error_type`` such as ``IndivisibleError``)
    and ``template``, a message written with the failure's field names; ``hint`` is an
    optional suggestion of the fix.
    """

    rule: ClassVar[str] = "SPEC-0"
    error_type: ClassVar[type[Exception]] = ValueError
    jax_error: ClassVar[str] = "ValueError"
    template: ClassVar[str] = ""
    hint: ClassVar[str] = ""

    def facts(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class Rejection(Exception):
    """A rule rejected its input. Concrete classes also derive from a built-in exception type."""

    failure: Failure
    path: str | None

    def __init__(self, failure: Failure, path: str | None = None) -> None:
        self.failure = failure
        self.path = path
        super().__init__(explain(failure, path))

    @property
    def rule(self) -> str:
        return self.failure.rule

    def at(self, path: str) -> "Rejection":
        """The same rejection, located at the argument's pytree path."""
        return type(self)(self.failure, path)


_REJECTION_CLASSES: dict[type[Exception], type[Rejection]] = {}


def _rejection_class(error_type: type[Exception]) -> type[Rejection]:
    cls = _REJECTION_CLASSES.get(error_type)
    if cls is None:
        cls = type(f"Rejection{error_type.__name__}", (Rejection, error_type), {
            "__module__": __name__,
            "__doc__": f"A rule rejected its input; JAX raises {error_type.__name__} here.",
        })
        _REJECTION_CLASSES[error_type] = cls
    return cls


def reject(failure: Failure, path: str | None = None) -> Rejection:
    """The exception for ``failure``: a :class:`Rejection` of the built-in type JAX raises."""
    return _rejection_class(failure.error_type)(failure, path)


def require(condition: bool, failure: Failure | Callable[[], Failure]) -> None:
    """Raise the rejection for ``failure`` unless ``condition`` holds.

    ``failure`` may be a callable that builds the failure value, so that building it costs
    nothing on the accepting side.
    """
    if not condition:
        raise reject(failure() if callable(failure) and not isinstance(failure, Failure)
                     else failure)


def explain(failure: Failure, path: str | None = None) -> str:
    """The one place where failures become words: ``[RULE] at PATH: message. Hint.``"""
    where = f" at {path}" if path else ""
    facts = {k: _show(v) for k, v in failure.facts().items()}
    facts.update({k: getattr(failure, k) for k in ("least",) if hasattr(failure, k)})
    text = failure.template.format(**facts) if failure.template else repr(failure)
    hint = failure.hint.format(**facts) if failure.hint else ""
    return f"[{failure.rule}]{where}: {text}" + (f" {hint}" if hint else "")


def _show(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) > 16:
        return "(" + ", ".join(map(repr, value[:8])) + f", ... {len(value) - 8} more)"
    return value


def rules_in(family: str) -> Iterator[Rule]:
    """The registered rules of one family, in ID order."""
    return iter(sorted((r for r in RULES.values() if r.family == family),
                       key=lambda r: int(r.id.rsplit("-", 1)[1])))

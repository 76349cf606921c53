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

import contextlib
import contextvars
import dataclasses
import functools
import re
from typing import Any, Callable, ClassVar, Iterator

from shardlaw.rule_index import family_of, is_description, stage_of

__all__ = [
    "Rule", "RULES", "rule", "Failure", "IllFormedParameter", "Rejection", "require", "reject", "explain",
    "tracing", "fired", "located", "staged", "remembering", "override",
    "Variant", "VARIANTS", "varies", "DEFAULT_EDITION", "current_edition", "edition_held",
]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule of the specification."""

    id: str
    statement: str
    function: Callable[..., Any]
    mirrors: str
    clauses: tuple[str, ...] = ()     # "(C1) ...", "(C2) ...": a compound rule's parts

    @property
    def family(self) -> str:
        return self.id.rsplit("-", 1)[0]

    @property
    def family_title(self) -> str:
        """The title of its family (declared once, in :mod:`shardlaw.rule_index`)."""
        return family_of(self.id).title

    @property
    def stage(self) -> str | None:
        """When a jit call meets this rule (declared once, in :mod:`shardlaw.rule_index`)."""
        return stage_of(self.id)

    @property
    def module(self) -> str:
        return self.function.__module__

    @property
    def variants(self) -> dict[str, "Variant"]:
        """How the rule reads in older JAX releases, by release (empty: the same in all)."""
        return dict(VARIANTS.get(self.id, {}))

    def in_edition(self, jax: str) -> "Rule | Variant":
        """The rule as it reads for JAX ``jax``: its variant there, else the rule itself."""
        return VARIANTS.get(self.id, {}).get(jax, self)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A rule as an older JAX release has it: its statement and clauses there, the exception
    classes that release raises in place of the newer ones (``raises``: newer class name ->
    older class name; a built-in keeps its place), how it decides (None: as the rule does)
    — or ``absent``, the release has no such rule."""

    rule: str
    jax: str
    statement: str
    clauses: tuple[str, ...] = ()
    raises: tuple[tuple[str, str], ...] = ()
    decide: Callable[..., Any] | None = None
    absent: bool = False

    def jax_error(self, newer: str) -> str:
        """The class this release raises where the version of record raises ``newer``."""
        return dict(self.raises).get(newer, newer)


# rule ID -> {JAX release -> the rule's variant there}
VARIANTS: dict[str, dict[str, Variant]] = {}

DEFAULT_EDITION = "0.10.2"   # the version of record

# The JAX release the rules applied now answer for (shardlaw.spec.core.editions).
_EDITION: contextvars.ContextVar[str] = contextvars.ContextVar("shardlaw_edition",
                                                               default=DEFAULT_EDITION)


def current_edition() -> str:
    """The JAX release the rules applied now answer for."""
    return _EDITION.get()


@contextlib.contextmanager
def edition_held(jax: str) -> Iterator[str]:
    """Rules applied inside the block answer for JAX ``jax`` (checked by the caller:
    :func:`shardlaw.spec.core.editions.holding`)."""
    token = _EDITION.set(jax)
    try:
        yield jax
    finally:
        _EDITION.reset(token)


def varies(jax: str, statement: str, *, raises: dict[str, str] | None = None,
           decide: Callable[..., Any] | None = None, absent: bool = False,
           clauses: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare, above a rule's ``@rule``, how the rule reads in JAX ``jax``: ``statement``
    (and ``clauses``) there, the classes raised there in place of the newer ones
    (``raises``, by class name: ``{"IndivisibleError": "ValueError"}``), and
    ``decide(function, *args, **kwargs)`` where it decides otherwise (``function``: the
    rule's own)."""
    def register(fire: Callable[..., Any]) -> Callable[..., Any]:
        rule_id = getattr(fire, "rule_id", None)
        if rule_id is None:
            raise ValueError(f"varies({jax!r}) must be written above a @rule")
        if jax == DEFAULT_EDITION or jax in VARIANTS.get(rule_id, {}):
            raise ValueError(f"rule {rule_id} has its variant for JAX {jax} declared twice "
                             "or for the version of record")
        VARIANTS.setdefault(rule_id, {})[jax] = Variant(
            rule_id, jax, statement, clauses, tuple(sorted((raises or {}).items())), decide,
            absent)
        return fire
    return register


RULES: dict[str, Rule] = {}

_ID = re.compile(r"^[A-Z]+(-[A-Z]+)*-[0-9]+$")

# The rules that fired, in order, while a trace is being recorded (None: not recording).
_TRACE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "shardlaw_trace", default=None)


# A sentence ends at a period that closes a word (not ``..`` or ``...``) before a space.
_SENTENCE_END = re.compile(r"(?<![.])\.(?![.])(?=\s|$)")

# A clause of a compound rule: a docstring line ``(C1) text`` and its continuation lines.
_CLAUSE = re.compile(r"^\(C([0-9]+)\)\s+")


def first_sentence(doc: str | None) -> str:
    """The docstring's first sentence (a period inside ``0 ..`` does not end it).

    >>> first_sentence("Holds each of ``0 .. n-1`` once. More.")
    'Holds each of ``0 .. n-1`` once.'
    """
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(text)
    return text if end is None else text[: end.end()]


def _clauses(doc: str | None) -> tuple[str, ...]:
    r"""The numbered clauses of a docstring: lines ``(C1) ...``, ``(C2) ...``, in order.

    A clause runs on over the lines that follow it, up to a blank line or an example.

    >>> _clauses("Rule.\n\n(C1) First\n  part.\n(C2) Second.\n\n>>> 1")
    ('(C1) First part.', '(C2) Second.')
    """
    found: list[str] = []
    inside = False
    for line in (doc or "").splitlines():
        text = line.strip()
        if _CLAUSE.match(text):
            found.append(text)
            inside = True
        elif inside and text and not text.startswith(">>>"):
            found[-1] += " " + text
        else:
            inside = False
    for n, clause in enumerate(found, 1):
        if not clause.startswith(f"(C{n}) "):
            raise ValueError(f"clause {clause[:12]!r} is out of order (expected (C{n}))")
    return tuple(found)


def rule(rule_id: str, *, mirrors: str, pure: bool = False
         ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as the rule ``rule_id``; its docstring's first sentence is the rule.

    A ``pure`` rule's answer depends on its (immutable) arguments alone: inside a
    :func:`remembering` block it answers each question once.
    """
    if not _ID.match(rule_id):
        raise ValueError(f"rule ID {rule_id!r} is not of the form FAMILY-N")
    try:
        family_of(rule_id)
    except KeyError as undeclared:
        raise ValueError(undeclared.args[0]) from None

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        if rule_id in RULES:
            raise ValueError(f"rule ID {rule_id} is registered twice "
                             f"({RULES[rule_id].function.__qualname__} and {function.__qualname__})")
        statement = first_sentence(function.__doc__)
        if not statement:
            raise ValueError(f"rule {rule_id} ({function.__qualname__}) has no statement")

        # A jit trace lists JAX's rules only: checks of the description are not recorded.
        recorded = not is_description(rule_id)

        @functools.wraps(function)
        def fire(*args: Any, **kwargs: Any) -> Any:
            trace = _TRACE.get()
            if trace is not None and recorded:
                trace.append(rule_id)
            if rule_id in _OVERRIDES:  # replaced for a while (override)
                return _OVERRIDES[rule_id](function, *args, **kwargs)
            if rule_id in VARIANTS:    # decided otherwise in an older release
                variant = VARIANTS[rule_id].get(_EDITION.get())
                if variant is not None and variant.decide is not None:
                    return variant.decide(function, *args, **kwargs)
            answers = _ANSWERS.get() if pure else None
            if answers is None:
                return function(*args, **kwargs)
            key = (rule_id, *map(id, args), *kwargs.items())
            if key not in answers:
                answers[key] = (args, function(*args, **kwargs))  # args keep their ids taken
            return answers[key][1]

        fire.rule_id = rule_id  # type: ignore[attr-defined]
        RULES[rule_id] = Rule(rule_id, statement, fire, mirrors, _clauses(function.__doc__))
        return fire

    return register


# Rules replaced inside an override block: rule ID -> the replacement.
_OVERRIDES: dict[str, Callable[..., Any]] = {}


@contextlib.contextmanager
def override(rule_id: str, replacement: Callable[..., Any]) -> Iterator[None]:
    """Inside the block rule ``rule_id`` is decided by ``replacement(function, *args,
    **kwargs)``, ``function`` being the rule's own: a campaign plants a wrong rule this way
    and must find it. The rule still fires (a trace records it), wherever it is called from.

    >>> from shardlaw.spec import shard_shape, NamedSharding, Mesh, P
    >>> def refuse(function, *args, **kwargs):
    ...     raise ValueError("planted")
    >>> with override("DIV-1", refuse):
    ...     shard_shape(NamedSharding(Mesh.iota((2,), ("x",)), P("x")), (4,))
    Traceback (most recent call last):
    ...
    ValueError: planted
    >>> shard_shape(NamedSharding(Mesh.iota((2,), ("x",)), P("x")), (4,))
    (2,)
    """
    if rule_id not in RULES:
        raise KeyError(f"{rule_id!r} names no rule")
    previous = _OVERRIDES.get(rule_id)
    _OVERRIDES[rule_id] = replacement
    try:
        yield
    finally:
        if previous is None:
            del _OVERRIDES[rule_id]
        else:
            _OVERRIDES[rule_id] = previous


def overridden_rules() -> tuple[str, ...]:
    """The IDs of the rules an :func:`override` block replaces now, in order.

    >>> with override("DIV-1", lambda function, *args, **kwargs: function(*args, **kwargs)):
    ...     overridden_rules()
    ('DIV-1',)
    """
    return tuple(sorted(_OVERRIDES))


# The answers of pure rules inside a remembering block, by the identity of their arguments.
_ANSWERS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("shardlaw_answers",
                                                                       default=None)


@contextlib.contextmanager
def remembering() -> Iterator[None]:
    """Inside the block a pure rule asked again about the same values answers at once.

    A trace keeps each rule's first firing, so it is the same with or without the block.

    >>> from shardlaw.spec import to_hlo, SingleDeviceSharding
    >>> lone = SingleDeviceSharding(0)
    >>> with remembering():
    ...     to_hlo(lone, 1) is to_hlo(lone, 1)
    True
    """
    token = _ANSWERS.set({})
    try:
        yield
    finally:
        _ANSWERS.reset(token)


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


# Where a rule is being applied: the pytree path of the argument or result (None: the call
# as a whole), and the stage of the jit call running. A rejection is born with both.
_WHERE: contextvars.ContextVar[str | None] = contextvars.ContextVar("shardlaw_where",
                                                                    default=None)
_STAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("shardlaw_stage",
                                                                    default=None)


@contextlib.contextmanager
def located(path: str | None) -> Iterator[None]:
    """Rules applied inside the block are about the argument or result at ``path``.

    >>> from shardlaw.spec import NamedSharding, Mesh, P, shard_shape
    >>> with located("args[0]"):
    ...     shard_shape(NamedSharding(Mesh.iota((2,), ("x",)), P("x")), (3,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [DIV-1] at args[0]: dimension 0 of shape (3,) ...
    """
    token = _WHERE.set(path)
    try:
        yield
    finally:
        _WHERE.reset(token)


def staged(stage: str) -> "_InStage":
    """Rules applied inside the block run in the jit call's stage ``stage``."""
    return _InStage(stage)


class _InStage:
    """The block of :func:`staged`: the stage set on entering, put back on leaving (a plain
    context manager: a rewrite enters one per value it checks)."""

    __slots__ = ("stage", "token")

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self) -> None:
        self.token = _STAGE.set(self.stage)

    def __exit__(self, *raised: Any) -> None:
        _STAGE.reset(self.token)


def fired() -> list[str] | None:
    """The rules fired so far in the innermost :class:`tracing` block (None outside one)."""
    trace = _TRACE.get()
    return None if trace is None else list(trace)


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a rule rejected its input: the rule's ID and the facts, no words.

    A failure class is a frozen dataclass whose fields are the facts. Its class keywords
    say which rule fails and what JAX raises: ``rule``, the rule's ID; ``error``, the
    built-in exception type JAX raises for the same input (read as ``error_type``); and
    ``jax_error``, the name of the exception class JAX raises, which may be a subclass of
    ``error`` such as ``IndivisibleError``. A keyword not given is inherited (from here:
    ValueError), except that ``error`` without ``jax_error`` makes ``jax_error`` the
    error's own name. Two plain class attributes, not fields, put it into words:
    ``template``, a message written with the field names, and ``hint``, an optional
    suggestion of the fix.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Uneven(Failure, rule="SPEC-0", jax_error="IndivisibleError"):
    ...     template = "{size} is not a multiple of {ways}"
    ...     size: int
    ...     ways: int
    >>> Uneven.rule, Uneven.error_type, Uneven.jax_error
    ('SPEC-0', <class 'ValueError'>, 'IndivisibleError')
    >>> explain(Uneven(6, 4))
    '[SPEC-0]: 6 is not a multiple of 4'
    >>> @dataclasses.dataclass(frozen=True)
    ... class Unknown(Uneven, error=KeyError):
    ...     pass
    >>> Unknown.rule, Unknown.error_type, Unknown.jax_error
    ('SPEC-0', <class 'KeyError'>, 'KeyError')
    """

    rule: ClassVar[str] = "SPEC-0"
    error_type: ClassVar[type[Exception]] = ValueError
    jax_error: ClassVar[str] = "ValueError"
    template: ClassVar[str] = ""
    hint: ClassVar[str] = ""

    def __init_subclass__(cls, *, rule: str | None = None,
                          error: type[Exception] | None = None, jax_error: str | None = None,
                          **keywords: Any) -> None:
        super().__init_subclass__(**keywords)
        if error is not None:
            if not (isinstance(error, type) and issubclass(error, Exception)):
                raise TypeError(f"{cls.__qualname__}: error={error!r} is not an exception class")
            jax_error = error.__name__ if jax_error is None else jax_error
        given = {"rule": rule, "error_type": error, "jax_error": jax_error}
        for name, value in given.items():
            if value is not None:
                if name in vars(cls):
                    raise TypeError(f"{cls.__qualname__} sets {name} in its body and by a "
                                    "class keyword")
                setattr(cls, name, value)

    def facts(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class IllFormedParameter(Failure, error=TypeError):
    """A parameter of a spec function that is not what it must be: the failure of each
    family's "the parameters are well-formed" rule (ARG-0, WSC-0, AD-0, SMAP-0), which
    subclasses it with its rule ID."""

    template = "{parameter} must be {expected}, got {value!r}"
    parameter: str
    expected: str
    value: Any


class Rejection(Exception):
    """A rule rejected its input. Concrete classes also derive from a built-in exception type."""

    failure: Failure
    path: str | None
    raised_in: str | None      # the stage running when the rule refused (None: outside one)
    jax: str                   # the JAX release the refusal answers for
    jax_error: str             # the name of the class that release raises

    def __init__(self, failure: Failure, path: str | None = None) -> None:
        self.failure = failure
        self.path = path
        self.raised_in = _STAGE.get()
        self.jax = _EDITION.get()
        variant = VARIANTS.get(failure.rule, {}).get(self.jax)
        self.jax_error = (failure.jax_error if variant is None
                          else variant.jax_error(failure.jax_error))
        super().__init__(explain(failure, path))

    @property
    def rule(self) -> str:
        return self.failure.rule

    @property
    def stage(self) -> str | None:
        """The stage at which jit raises this refusal: its rule's declared stage, else the
        stage that was running."""
        return stage_of(self.failure.rule) or self.raised_in


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
    """The exception for ``failure``: a :class:`Rejection` of the built-in type JAX raises,
    at ``path``, else at the path of the innermost :func:`located` block."""
    return _rejection_class(failure.error_type)(failure, path if path is not None
                                                else _WHERE.get())


def require(condition: bool, failure: Failure | Callable[[], Failure]) -> None:
    """Raise the rejection for ``failure`` unless ``condition`` holds.

    ``failure`` may be a callable that builds the failure value, so that building it costs
    nothing on the accepting side.
    """
    if not condition:
        raise reject(failure() if callable(failure) and not isinstance(failure, Failure)
                     else failure)


def explain(failure: Failure, path: str | None = None) -> str:
    """The one place where failures become words: ``[RULE] at PATH: message. Hint.``

    It cannot fail: a template names the failure's fields (``{dims}``, ``{value!r}``), the
    values are shown bounded (deep or huge input is abbreviated, a value whose own repr
    raises is named by its type), and text that is not a template (a computed hint) is
    used as it is, braces included. A message followed by a hint ends as a sentence, and so
    does the hint (:func:`as_sentence`).
    """
    where = f" at {bounded_text(path, str)}" if path else ""
    try:
        facts = dict(failure.facts())
        facts.update({k: getattr(failure, k) for k in ("least",) if hasattr(failure, k)})
    except Exception as error:  # a failure value whose fields cannot be read
        facts = {}
        where += f" (its facts could not be read: {type(error).__name__})"
    template = _class_text(failure, "template")
    if template:
        text = _fill(template, facts)
    else:
        text = bounded_text(failure, repr)
    hint = _class_text(failure, "hint")
    if hint is None:  # a hint computed from the facts is text already, never a template
        hint = bounded_text(getattr(failure, "hint", ""), str)
    else:
        hint = _fill(hint, facts)
    hint = as_sentence(hint)
    if not hint:
        return f"[{failure.rule}]{where}: {text}"
    return f"[{failure.rule}]{where}: {as_sentence(text)} {hint}"


def as_sentence(text: str) -> str:
    """``text`` ended as a sentence: trailing blanks dropped, and a period added unless it
    already ends with ``.``, ``!``, ``?`` or ``…`` (empty text stays empty).

    >>> as_sentence("jit does not reshard committed arguments"), as_sentence("Cast it first. ")
    ('jit does not reshard committed arguments.', 'Cast it first.')
    """
    text = str.rstrip(text)  # str's own method: a str subclass's overrides are not called
    return text + "." if text and text[-1] not in ".!?\u2026" else text


def _class_text(failure: Failure, name: str) -> str | None:
    """The template ``name`` as the class declares it, or None when it is a computed property."""
    for klass in type(failure).__mro__:
        if name in vars(klass):
            declared = vars(klass)[name]
            return declared if isinstance(declared, str) else None
    return ""


# ``{{`` and ``}}`` are literal braces; ``{name}``, ``{name!r}`` and ``{name:spec}`` are a
# fact (its str, its repr, or formatted with a number's spec such as ``:g``).
_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z_0-9]*)(?:!([rs]))?(?::([^{}]*))?\}")


def _fill(template: str, facts: dict[str, Any]) -> str:
    """The template with each named field replaced; a name that is not a fact stays as written."""
    def field(match: re.Match[str]) -> str:
        token, name, conversion, spec = match[0], match[1], match[2], match[3]
        if name is None:
            return token[0]
        if name not in facts:
            return token
        value = facts[name]
        if spec and conversion is None and isinstance(value, (int, float)):
            try:
                return format(value, spec)
            except (ValueError, TypeError):  # a spec that does not fit the value: show it plainly
                pass
        return bounded_text(value, repr if conversion == "r" else str)
    return _FIELD.sub(field, template)


# How much of a value a message shows.
_MAX_TEXT = 2000
_MAX_DIGITS = 60
_MAX_DEPTH = 8
_MAX_ITEMS = 16
_CONTAINERS = (tuple, list, dict, set, frozenset)


def bounded_text(value: Any, convert: Callable[[Any], str]) -> str:
    """``repr(value)`` (or ``str``) as a message shows it: long tuples cut after 8 entries,
    deep containers abbreviated, huge integers by their size, long text cut in the middle."""
    try:
        if isinstance(value, tuple) and len(value) > _MAX_ITEMS:
            shown = ", ".join(bounded_text(v, repr) for v in value[:8])
            return f"({shown}, ... {len(value) - 8} more)"
        if isinstance(value, int) and not isinstance(value, bool) and \
                value.bit_length() > _MAX_DIGITS * 3.32:
            return f"an integer of {value.bit_length()} bits"
        if isinstance(value, _CONTAINERS) and _too_big(value):
            text = _abbreviated(value, _MAX_DEPTH)
        else:
            text = convert(value)
            if not isinstance(text, str):
                raise TypeError(f"{convert.__name__}() returned {type(text).__name__}")
    except Exception as error:  # the value's own repr failed (RecursionError, ValueError ...)
        return f"<a {type(value).__name__} whose {convert.__name__}() raises " \
               f"{type(error).__name__}>"
    if len(text) > _MAX_TEXT:
        half = _MAX_TEXT // 2
        text = f"{text[:half]} ... {text[-half // 4:]} ({len(text)} characters)"
    return text


def _too_big(value: Any) -> bool:
    """Whether a container nests deeper than a message shows, or holds very many values."""
    stack, seen = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if depth > _MAX_DEPTH or seen > 10_000:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in list(item.values())[:10_001])
            stack.extend((k, depth + 1) for k in list(item)[:10_001])
        elif isinstance(item, _CONTAINERS):
            stack.extend((v, depth + 1) for v in list(item)[:10_001])
        elif isinstance(item, int) and not isinstance(item, bool) and \
                item.bit_length() > _MAX_DIGITS * 3.32:
            return True
    return False


def _abbreviated(value: Any, depth: int) -> str:
    """A container written to ``depth`` levels and ``_MAX_ITEMS`` entries a level."""
    if not isinstance(value, _CONTAINERS):
        return bounded_text(value, repr)
    if depth <= 0:
        return f"<a {type(value).__name__} nested deeper>"
    if isinstance(value, dict):
        items = [f"{_abbreviated(k, depth - 1)}: {_abbreviated(v, depth - 1)}"
                 for k, v in list(value.items())[:_MAX_ITEMS]]
    else:
        items = [_abbreviated(v, depth - 1) for v in list(value)[:_MAX_ITEMS]]
    if len(value) > _MAX_ITEMS:
        items.append(f"... {len(value) - _MAX_ITEMS} more")
    opening, closing = {list: "[]", tuple: "()", dict: "{}"}.get(type(value), "{}")
    if isinstance(value, (set, frozenset)) and not value:
        return f"{type(value).__name__}()"
    if type(value) is tuple and len(value) == 1:
        return f"({items[0]},)"
    return opening + ", ".join(items) + closing


def rules_in(family: str) -> Iterator[Rule]:
    """The registered rules of one family, in ID order."""
    return iter(sorted((r for r in RULES.values() if r.family == family),
                       key=lambda r: int(r.id.rsplit("-", 1)[1])))

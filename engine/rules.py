"""The rules as the engine fires them: the trace of rules that decided a call, and rejections.

Each decision of the engine is a function marked with :func:`rule` and the ID of the rule of
the jit-call semantics it implements; while a call is being decided, the IDs of the rules
that fired are recorded in order (:func:`recording`), which is what ``explain`` shows.

A rejection is one exception per refused call, carrying the rule that refused it.

A rejection derives from :class:`EngineRejection` *and* from the built-in exception type
``jax.jit`` raises for the same call (ValueError, TypeError, RuntimeError,
NotImplementedError, AssertionError, KeyError, or plain Exception where JAX raises its own
``DuplicateSpecError``), so an ``except ValueError`` written for JAX keeps working. It
carries:

* ``rule`` — the ID of the rule of the jit-call semantics that refused the call (``FIT-1``,
  ``DA-1``, ...), or an ``ENG-n`` ID for odd input the semantics does not describe;
* ``path`` — the argument or result it is about, as a pytree path (``args[0]['w']``,
  ``result[1]``), or None;
* ``stage`` — when JAX raises it: ``jit``, ``trace``, ``lower``, ``compile``, ``call`` or
  ``aot``;
* ``jax_error`` — the name of the class JAX raises (``IndivisibleError`` for a
  ValueError subclass, for instance).

The engine's own rule IDs, for input beyond the jit-call semantics:

* ``ENG-1`` static arguments must be hashable (ValueError, as JAX);
* ``ENG-2`` every dynamic leaf is an array, a numpy value or a Python scalar (TypeError);
* ``ENG-3`` an argument array must not have been deleted (RuntimeError);
* ``ENG-4`` the options of ``jit`` itself are well formed (JAX's own type and words);
* ``ENG-5`` a lowered call compiles for its own devices' platform and device assignment;
* ``ENG-6`` an array a call donates appears nowhere else among that call's arguments
  (JAX's ``JaxRuntimeError`` on one device; with several, jax.jit 0.10.2 crashes).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator

from shardlaw.rule_index import LEFT_TO_JAX, stage_of

__all__ = ["EngineRejection", "reject", "rejection_class", "stage_of", "LEFT_TO_JAX", "rule",
           "recording", "note"]


def _nowhere(rule_id: str) -> None:
    """Where a fired rule's ID goes while nothing is recording."""


# Where the ID of a rule that fires is written: a recording's list (its append), or nowhere.
_WRITE_FIRED: contextvars.ContextVar[Callable[[str], None]] = contextvars.ContextVar(
    "shardlaw_engine_fired", default=_nowhere)


def rule(rule_id: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as the engine's implementation of rule ``rule_id``."""

    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def fire(*args: Any, **kwargs: Any) -> Any:
            _WRITE_FIRED.get()(rule_id)
            return function(*args, **kwargs)

        fire.rule_id = rule_id  # type: ignore[attr-defined]
        return fire

    return mark


def note(rule_id: str) -> None:
    """Record that ``rule_id`` fired (for decisions made inline)."""
    _WRITE_FIRED.get()(rule_id)


@contextlib.contextmanager
def recording() -> Iterator[list[str]]:
    """Record, in order, the IDs of the rules that fire inside a ``with`` block."""
    fired: list[str] = []
    writing = _WRITE_FIRED.set(fired.append)
    try:
        yield fired
    finally:
        _WRITE_FIRED.reset(writing)

# The stage at which JAX raises each rule's rejections, and the rules the engine leaves to
# JAX on purpose (no engine code decides them; JAX's own code does, and what it decides or
# raises stands), with why: declared once, in shardlaw.rule_index (data only), which the
# specification reads too. tests/test_spec_engine_link.py holds the engine to it.


class LeftToJax(Exception):
    """A call the jit-call rules do not describe (a token among the results, say): JAX's
    own jit decides it. Raised and caught inside the engine; never reaches the user.
    ``decision``: what the engine decided before handing the call over (a call with
    mutable refs among its arguments is decided up to compiling), or None."""

    def __init__(self, why: str, decision: Any = None) -> None:
        super().__init__(why)
        self.decision = decision


class EngineRejection(Exception):
    """The engine refused a call; concrete classes also derive from the class JAX raises.

    ``str(error)`` is JAX's own message for the same call, when the engine could have JAX
    say it (``jax_message``), followed by ``[RULE] at PATH: explanation`` — so ``except``
    clauses and message patterns written against JAX keep working.
    """

    rule: str
    path: str | None
    stage: str | None
    jax_error: str
    message: str
    jax_message: str | None
    base: type[BaseException] = Exception

    def __init__(self, rule: str, message: str, path: str | None = None,
                 jax_error: str | None = None, jax_message: str | None = None,
                 stage: str | None = None) -> None:
        self.rule = rule
        self.path = path
        # The rule's stage; ``stage`` for a rule of no jit stage that a jit applies at one
        # (a shard_map's collectives inside a jit's body are checked when it is lowered).
        self.stage = stage or stage_of(rule)
        self.message = message
        self.jax_message = jax_message
        self.jax_error = jax_error or (self.base.__name__ if self.base is not Exception
                                       else "Exception")
        BaseException.__init__(self, self._text())

    def _text(self) -> str:
        where = f" at {self.path}" if self.path else ""
        ours = f"[{self.rule}]{where}: {self.message}"
        return f"{self.jax_message}\n{ours}" if self.jax_message else ours

    def __str__(self) -> str:
        return self._text()

    def __reduce__(self) -> Any:
        return (_rebuild, (self.base, self.rule, self.message, self.path, self.jax_error,
                           self.jax_message, self.stage))

    def again(self) -> "EngineRejection":
        """A fresh copy to raise once more (a cached rejection keeps no old traceback)."""
        return type(self)(self.rule, self.message, self.path, self.jax_error, self.jax_message,
                          self.stage)

    def at(self, path: str | None) -> "EngineRejection":
        """The same rejection, about another argument or result."""
        return type(self)(self.rule, self.message, path, self.jax_error, self.jax_message,
                          self.stage)

    def as_jax(self, error: BaseException, any_class: bool = False) -> "EngineRejection":
        """The same rejection as an instance of the very class JAX raised, with JAX's words first.

        ``error`` is what JAX raised for the same call; it is used only when its class is
        one the engine's built-in type admits (JAX refused for the same kind of reason), or
        with ``any_class`` (the engine left the decision to JAX, whose class then stands).
        """
        if isinstance(error, EngineRejection) or not (any_class
                                                      or isinstance(error, self.error_type)):
            return self
        words = str(error).strip()
        return rejection_class(type(error))(self.rule, self.message, self.path,
                                            type(error).__name__, words or None, self.stage)

    @property
    def error_type(self) -> type[BaseException]:
        """The built-in exception type this rejection also is."""
        return next(c for c in type(self).__mro__ if c.__module__ == "builtins")


_CLASSES: dict[type, type] = {}


def rejection_class(base: type[BaseException]) -> type[EngineRejection]:
    """The engine rejection class that also derives from ``base`` (a built-in or JAX's class)."""
    cls = _CLASSES.get(base)
    if cls is None:
        if base is Exception:
            cls = EngineRejection
        else:
            cls = type(f"Engine{base.__name__}", (EngineRejection, base), {
                "__module__": __name__, "base": base,
                "__doc__": f"The engine refused a call; JAX raises {base.__name__} here.",
            })
        _CLASSES[base] = cls
    return cls


def _rebuild(base: type, rule: str, message: str, path: str | None,
             jax_error: str, jax_message: str | None = None,
             stage: str | None = None) -> EngineRejection:
    return rejection_class(base)(rule, message, path, jax_error, jax_message, stage)


def reject(rule: str, error_type: type[BaseException], message: str, path: str | None = None,
           *, jax_error: str | None = None, stage: str | None = None) -> EngineRejection:
    """The exception to raise: rule ``rule`` refused the call, as JAX refuses it with ``error_type``
    (at ``stage``, for a rule that has none of its own)."""
    return rejection_class(error_type)(rule, message, path, jax_error, stage=stage)


EngineValueError = rejection_class(ValueError)
EngineTypeError = rejection_class(TypeError)
EngineRuntimeError = rejection_class(RuntimeError)
EngineNotImplementedError = rejection_class(NotImplementedError)
EngineAssertionError = rejection_class(AssertionError)
EngineKeyError = rejection_class(KeyError)

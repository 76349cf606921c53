"""What the JSON of every vector must be, on the way in (VEC-1) and on the way out (VEC-2).

The versions of the jit vector formats, the limits on a vector's text (how deep it nests, how
long its integers are), the VEC rules and their failures, and the path of a JSON value as a
message names it. The jit-call, call-sequence and program vectors are all read and written
under these rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from typing import Any, Iterator

from ..core.rules import Failure, Rejection, reject, rule

__all__ = ["VERSION", "VERSIONS", "JAX_VERSION", "MAX_DEPTH", "json_path", "check_vector",
           "check_writable"]

VERSION = 2
VERSIONS = (1, 2)   # the versions this shardlaw reads; 2 added layouts (Arg.layout, Format,
                    # ...) and the compiler's choices for inputs jit left open (compiler_in)
JAX_VERSION = "0.10.2"

# The deepest a vector nests JSON arrays and objects (the stored vectors reach 13). Python's
# JSON parser and this reader recurse once per level, so deeper input is refused (VEC-1)
# before it is read, and a call whose vector would nest deeper is not written (VEC-2).
MAX_DEPTH = 100

# The most digits an integer of a vector's text may have (int64 needs 19; larger values are
# read, then refused with what they mean, up to this length).
_LONGEST_INTEGER = 100


# =========================================================================== failures

@dataclasses.dataclass(frozen=True)
class BadVector(Failure, rule="VEC-1"):
    template = "expected {expected}, got {shown}"
    expected: str
    shown: str


@dataclasses.dataclass(frozen=True)
class RefusedValue(Failure, rule="VEC-1"):
    template = "{what} is not valid: {reason}"
    what: str
    reason: str


@dataclasses.dataclass(frozen=True)
class NotWritable(Failure, rule="VEC-2", error=TypeError):
    template = "{what} cannot be written as a vector: it must be {expected}, got {shown}"
    what: str
    expected: str
    shown: str


@dataclasses.dataclass(frozen=True)
class UnreadableWhenWritten(Failure, rule="VEC-2"):
    template = "the call was written, but the vector does not read back: {reason}"
    reason: str


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(path: tuple) -> str:
    """``('call', 'args', 0, 'sharding')`` -> ``call.args[0].sharding``; ``()`` -> ``(the vector)``."""
    if not path:
        return "(the vector)"
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        elif isinstance(key, str) and _NAME.match(key):
            text += ("." if text else "") + key
        elif isinstance(key, str):
            text += f"[{json.dumps(key)}]"
        else:  # a key of an object given as Python values, not read from JSON text
            text += f"[{_show(key)}]"
    return text


def _show(value: Any) -> str:
    """The value as a message shows it: its JSON (else its repr), at most 160 characters."""
    if _too_deep(value) is not None:
        return f"a {type(value).__name__} that nests too deep (more than {MAX_DEPTH} levels)"
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        try:
            text = repr(value)
        except Exception as error:  # a value whose own repr fails (a 5,000-digit integer)
            text = f"<a {type(value).__name__} whose repr() raises {type(error).__name__}>"
    return text if len(text) <= 160 else text[:150] + " ... (" + str(len(text)) + " characters)"


def _too_deep(value: Any) -> tuple | None:
    """The path to the first array or object of ``value`` that lies deeper than
    :data:`MAX_DEPTH` (the outermost is at depth 1); None when there is none. Read without
    recursion, so that a value of any depth (or one that holds itself) is answered."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if len(path) >= MAX_DEPTH:
            return path
        stack.extend((child, path + (key,)) for key, child in children)
    return None


# A JSON string, to the end of the text if it is not closed (skipped: brackets inside it
# nest nothing), or a bracket.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


def _text_depth_exceeded(text: str) -> int | None:
    """The character at which JSON ``text`` opens an array or object deeper than
    :data:`MAX_DEPTH`; None when it does not."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match[0]
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


@rule("VEC-1", mirrors="(input checking of a test vector; JAX has no such format)")
def check_vector(condition: bool, path: tuple, expected: str, value: Any) -> None:
    """A test vector is a JSON object of this format and version whose every field has the documented type, names only devices the call has, and holds values the spec accepts.

    >>> load_vector('{"format": "shardlaw-jit-call", "version": 3, "jax": "0.10.2", "call": {}}')
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VEC-1] at version: expected a format version this shardlaw reads (1, 2), got 3
    >>> load_vector({"format": "shardlaw-jit-call", "version": 1, "jax": "0.10.2",
    ...              "call": {"args": [{"type": "Arg", "kind": "committed", "shape": [4],
    ...                                 "sharding": {"type": "SingleDeviceSharding",
    ...                                              "device": 11}}]}})
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VEC-1] at call.args[0].sharding.device: expected a device id below 8 (the call has 8 devices), got 11
    """
    if not condition:
        raise reject(BadVector(expected, _show(value)), json_path(path))


@rule("VEC-2", mirrors="(output checking of a test vector; JAX has no such format)")
def check_writable(condition: bool, path: tuple, what: str, expected: str, value: Any) -> None:
    """A call is written as a vector only when JSON carries every value back exactly: dict keys are strings, numbers are finite, and static values are built from None, booleans, numbers, strings, tuples, lists and dicts.

    >>> dump_vector(Call(args=({1: Arg.numpy((2,))},), outputs=Out((2,))))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [VEC-2] at call.args[0]: a dict key cannot be written as a vector: it must be a string, got 1
    """
    if not condition:
        raise reject(NotWritable(what, expected, _show(value)), json_path(path))


@contextlib.contextmanager
def building(path: tuple, what: str) -> Iterator[None]:
    """Build a spec value from what was read; the spec's refusal becomes VEC-1 at ``path``."""
    try:
        yield
    except Rejection as error:
        if error.rule == "VEC-1":  # already located where it was read
            raise
        raise reject(RefusedValue(what, str(error)), json_path(path)) from None


# =========================================================================== reading the text

def _parse(text: str | bytes | bytearray) -> Any:
    def no_repeats(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            check_vector(key not in seen, (), "JSON objects without repeated keys",
                         f"the key {key!r} twice")
            seen[key] = value
        return seen

    def no_constant(name: str) -> Any:
        check_vector(False, (), "JSON numbers (no NaN or Infinity)", name)

    def integer(digits: str) -> int:
        # Every integer of a vector is an int64 (19 digits); a longer one is refused before
        # Python converts it (past 4,300 digits its conversion refuses with ValueError).
        check_vector(len(digits.lstrip("-")) <= _LONGEST_INTEGER, (),
                     f"JSON integers of at most {_LONGEST_INTEGER} digits",
                     f"an integer of {len(digits.lstrip('-')):,} digits")
        return int(digits)

    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
        except UnicodeDecodeError as error:
            check_vector(False, (), "JSON text", str(error))
    deep = _text_depth_exceeded(text)
    check_vector(deep is None, (), f"JSON text nested at most {MAX_DEPTH} deep",
                 f"text that nests too deep: an array or object at depth {MAX_DEPTH + 1}, "
                 f"opened at character {deep}")
    try:
        return json.loads(text, object_pairs_hook=no_repeats, parse_constant=no_constant,
                          parse_int=integer)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        check_vector(False, (), "JSON text", str(error))


def read_document(obj_or_text: Any) -> Any:
    """What a vector is read from: its JSON text parsed, or the JSON value as given; either
    nested at most :data:`MAX_DEPTH` deep (VEC-1, at the path where it goes deeper)."""
    if isinstance(obj_or_text, (str, bytes, bytearray)):
        return _parse(obj_or_text)
    deep = _too_deep(obj_or_text)
    if deep is not None:
        found: Any = obj_or_text
        for key in deep:
            found = found[key]
        check_vector(False, deep, f"JSON nested at most {MAX_DEPTH} deep", found)
    return obj_or_text

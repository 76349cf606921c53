"""Call sequences for the cache model: call sites (CACHE-0) and what the keys read of a call.

A :class:`CallSite` is a call description with names for the function object it calls and
the ``jax.jit`` wrapper it goes through; :func:`check_sequence` holds a sequence of them to
what the model covers. A key of a cache is a tuple of :class:`Part` values read from the
call's facts (``CallSite.facts``), read once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Sequence

from .call import Arg, Call, Verdict, check_call
from .pipeline import jit_call, jit_shardings
from .matching import match_out_shardings
from .older import call_context
from .resolution import Input, resolve_input
from ..core.pytree import leaves_with_paths
from ..core.rules import Failure, Rejection, current_edition, reject, rule
from ..core.shardings import UNSPECIFIED

__all__ = ["CallSite", "check_sequence", "Part", "Placed", "Key"]


# =========================================================================== call sites

@dataclasses.dataclass(frozen=True)
class CallSite:
    """One call in a sequence: the call, and names for its function object and jit wrapper.

    Sites with the same ``function`` call the same Python function object; sites with the
    same ``wrapper`` go through the same ``jax.jit(...)`` object, so they share its options.
    """

    call: Call
    function: str = "f"
    wrapper: str = "w"

    def __post_init__(self) -> None:
        # A call site holds a call description (CALL-0) and names its function object and
        # wrapper by strings (CACHE-0), so that a site that exists can be run and shown.
        check_call(isinstance(self.call, Call), "a call site's call", "a Call", self.call)
        for part in ("function", "wrapper"):
            name = getattr(self, part)
            if type(name) is not str:
                raise reject(NotASiteName(part, name, type(name).__name__))

    def __repr__(self) -> str:
        return f"<{self.function} via {self.wrapper}>"

    @functools.cached_property
    def facts(self) -> "CallFacts":
        """What the cache keys read from this call, read once."""
        return CallFacts.of(self.call)


@dataclasses.dataclass(frozen=True)
class BadSequence(Failure, rule="CACHE-0"):
    template = "call {index}: {problem}"
    index: int
    problem: str


@dataclasses.dataclass(frozen=True)
class NotASequence(Failure, rule="CACHE-0", error=TypeError):
    template = "a call sequence must be an iterable of CallSite values, got {value!r} ({kind})"
    value: Any
    kind: str


@dataclasses.dataclass(frozen=True)
class NotACallSite(Failure, rule="CACHE-0", error=TypeError):
    template = "call {index}: expected a CallSite, got {value!r}"
    index: int
    value: Any


@dataclasses.dataclass(frozen=True)
class NotASiteName(Failure, rule="CACHE-0", error=TypeError):
    template = "a call site's {part} must be a name (a str), got {value!r} ({kind})"
    part: str
    value: Any
    kind: str


def _read_sequence(sites: Any) -> list:
    """The sites of a call sequence, read once (a generator is not asked twice), each a
    :class:`CallSite`."""
    if isinstance(sites, (str, bytes, bytearray, dict)) or not isinstance(sites, Iterable):
        raise reject(NotASequence(sites, type(sites).__name__))
    read: list[CallSite] = []
    iterator = iter(sites)
    while True:
        try:
            site = next(iterator)
        except StopIteration:
            return read
        except Exception:  # an iterable that fails while it is read
            raise reject(NotASequence(sites, type(sites).__name__)) from None
        # Refused at the first entry that is not a call site, before the rest is read (a
        # device list of a million entries is not walked to the end).
        if not isinstance(site, CallSite):
            raise reject(NotACallSite(len(read), site))
        read.append(site)


@rule("CACHE-0", mirrors="(input checking of a call sequence; JAX has no such value)")
def check_sequence(sites: Sequence[CallSite]) -> list[CallSite]:
    """A call sequence holds call sites of concrete arguments, and each jit wrapper wraps one function with one set of options.

    >>> from shardlaw.spec import Arg, Call, JitOptions, Out
    >>> call = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)))
    >>> kept = Call(args=(Arg.numpy((4,)),), outputs=Out((4,)),
    ...             options=JitOptions(keep_unused=True))
    >>> check_sequence([CallSite(call, "f", "w"), CallSite(kept, "f", "w")])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [CACHE-0]: call 1: wrapper 'w' was made with other options (call 0 went through it with JitOptions(...))
    >>> explain_cache(7)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [CACHE-0]: a call sequence must be an iterable of CallSite values, got 7 (int)

    The sites are returned as a list, read once.
    """
    sites = _read_sequence(sites)
    wrappers: dict[str, tuple[int, CallSite]] = {}
    for index, site in enumerate(sites):
        call = site.call
        if call.aot_args is not None or any(
                isinstance(a, Arg) and a.kind == "abstract"
                for _, a in leaves_with_paths((call.args, call.kwargs))):
            raise reject(BadSequence(index, "the cache model covers calls of concrete arguments, "
                                            "not .lower() or AOT calls"))
        first = wrappers.setdefault(site.wrapper, (index, site))
        earlier, other = first
        if other.function != site.function:
            raise reject(BadSequence(index, f"wrapper {site.wrapper!r} wraps {other.function!r} "
                                            f"(call {earlier}), not {site.function!r}"))
        if other.call.options != call.options:
            raise reject(BadSequence(index, f"wrapper {site.wrapper!r} was made with other "
                                            f"options (call {earlier} went through it with "
                                            "JitOptions(...))"))
    return sites


def site_verdicts(sites: Iterable[CallSite]) -> Iterable[tuple[int, CallSite, Verdict]]:
    """Each site of a checked sequence (CACHE-0) with its index and jit's verdict."""
    for index, site in enumerate(check_sequence(sites)):
        yield index, site, jit_call(site.call, jax=current_edition())


# =========================================================================== key parts

@dataclasses.dataclass(frozen=True)
class Part:
    """One component of a cache key: what it is, the value compared, and what to show."""

    what: str
    value: Any
    shown: Any = dataclasses.field(default=None, compare=False, hash=False)


@dataclasses.dataclass(frozen=True)
class Placed:
    """A sharding with the shape it places (how a sharding part of a key is shown)."""

    sharding: Any
    shape: tuple[int, ...]


Key = tuple  # of Part

@dataclasses.dataclass(frozen=True)
class CallFacts:
    """What the keys read from one call: flat inputs, statics, shardings as jit resolves them."""

    flat: tuple                 # (path, Arg) per flat dynamic input
    dynamic: Any                # the dynamic arguments' structure
    statics: tuple              # (path, value) per static argument
    static_positions: tuple     # (static_argnums, static_argnames) as the wrapper has them
    resolved: tuple             # per flat input: the sharding lowering gets (or UNSPECIFIED)
    outs: tuple                 # (path, Out, sharding or UNSPECIFIED) per flat result
    donated: tuple              # per flat input: donated?
    context: tuple              # (context mesh as set, default device)

    @classmethod
    def of(cls, call: Call) -> "CallFacts":
        n = call.normal
        _, jit_in, out_tree = jit_shardings(n, call_context(call))
        resolved = tuple(_resolved(Input(path, arg, s), call.process_count, n.device_or_backend)
                         for (path, arg), s in zip(n.flat_in, jit_in))
        out_flat = match_out_shardings(out_tree, n.results)
        outs = tuple((path, o, UNSPECIFIED if s is None else s)
                     for (path, o), s in zip(n.flat_out, out_flat))
        return cls(n.flat_in, n.dynamic, n.statics,
                   (tuple(sorted(n.static)), tuple(sorted(n.static_names))), resolved, outs,
                   _donated(call, n.static),
                   (call.resource_mesh or call.context_mesh, call.default_device))


def _resolved(item: Input, processes: int, device_or_backend: bool) -> Any:
    """The input's resolved sharding; None when resolving refuses it (RES-1..4)."""
    try:
        return resolve_input(item, processes, device_or_backend)
    except Rejection:
        return None  # the call is refused while lowering; its params and trace still count


def _donated(call: Call, static: frozenset[int]) -> tuple[bool, ...]:
    """Per flat dynamic input: is it donated (donate_argnums count all positions)."""
    options = call.options
    donate = {i if i >= 0 else i + len(call.args) for i in options.donate_argnums}
    flags: list[bool] = []
    for i, arg in enumerate(call.args):
        if i in static:
            continue
        flags += [i in donate] * len(list(leaves_with_paths(arg)))
    for name in sorted(call.kwargs):
        if name in options.static_argnames:
            continue
        flags += [name in options.donate_argnames] * len(list(leaves_with_paths(
            call.kwargs[name])))
    return tuple(flags)


def context_parts(facts: CallFacts) -> list[Part]:
    """The key parts of the call's context: the context mesh as set, the default device."""
    mesh, default_device = facts.context
    return [Part("the context mesh", mesh), Part("the default device", default_device)]


def static_parts(facts: CallFacts) -> list[Part]:
    """One key part per static argument: its type and its value."""
    # Static values compare by type and equality: True and 1 are different static values.
    return [Part(f"static {path}", (type(value), value), f"{value!r} ({type(value).__name__})")
            for path, value in facts.statics]


def structure_part(facts: CallFacts) -> Part:
    """The key part of the dynamic arguments' structure."""
    return Part("the arguments' structure", facts.dynamic,
                _structure_text(facts.dynamic))


def _structure_text(node: Any) -> str:
    (args, kwargs) = node.children
    names = list(kwargs.keys)
    return f"{len(args.children)} positional argument(s)" + (
        f", keywords {names}" if names else "")

"""Calling an executable compiled ahead of time: the AOT rules.

``jit(f).lower(...).compile()`` returns an executable that checks each call against what it
was compiled for: the arguments' pytree structure (AOT-1), their types (AOT-2) and the
committed arrays' shardings and layouts (AOT-3). Each rule's failure is written right above
it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .call import Arg
from ..placement.blocks import to_hlo
from ..placement.equivalence import hlo_equal, jax_equivalent
from .layouts import AUTO_LAYOUT, Layout, layout_text
from ..core.pytree import Node, show_tree
from ..core.rules import Failure, reject, require, rule, varies
from ..core.shardings import UNSPECIFIED, NamedSharding, SingleDeviceSharding
from ..core.values import Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["check_aot_structure", "check_aot_types", "check_aot_shardings"]


def _details(items: list[str]) -> tuple[str, str]:
    """How many differences a message lists (at most five), and those it lists."""
    shown = "the first 5" if len(items) > 5 else "they are"
    return shown, "; ".join(items[:5])


@dataclasses.dataclass(frozen=True)
class AotStructureMismatch(Failure, rule="AOT-1", error=TypeError):
    template = ("the executable was compiled for arguments shaped as {compiled}, "
                "but is called with {called}")
    compiled: str
    called: str


@rule("AOT-1", mirrors="jax._src.stages.Compiled.call")
def check_aot_structure(compiled: Node, called: Node) -> None:
    """An executable compiled ahead of time takes arguments of exactly the pytree structure it was compiled for.

    >>> from shardlaw.spec.core.pytree import structure
    >>> check_aot_structure(structure(((1,), {})), structure(((1, 2), {})))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [AOT-1]: the executable was compiled for arguments shaped as ((*,), {}), but is called with ((*, *), {})
    """
    require(compiled == called, lambda: AotStructureMismatch(show_tree(compiled),
                                                             show_tree(called)))


@dataclasses.dataclass(frozen=True)
class AotTypeMismatch(Failure, rule="AOT-2", error=TypeError):
    template = ("{count} argument(s) differ from the types the executable was "
                "compiled for; {shown}: {details}")
    hint = "Lower and compile again for the new types, or cast the arguments."
    count: int
    shown: str
    details: str


def _kept_types_0_4(function: Any, compiled: Sequence[tuple[str, Arg]], called: Sequence[Arg],
                    kept: Sequence[int] | None = None) -> None:
    """AOT-2 in JAX 0.4.13: only the inputs the program kept are compared."""
    keep = range(len(compiled)) if kept is None else kept
    function([compiled[i] for i in keep], [called[i] for i in keep])


@varies("0.4.13", "Each argument of an AOT call that the program kept has the shape and "
        "dtype it was compiled for; dropped inputs are not compared.", decide=_kept_types_0_4)
@rule("AOT-2", mirrors="jax._src.interpreters.pxla.check_arg_avals_for_call")
def check_aot_types(compiled: Sequence[tuple[str, Arg]], called: Sequence[Arg],
                    kept: Sequence[int] | None = None) -> None:
    """Each argument of an AOT call has the shape and dtype it was compiled for (every input, kept or not; at most five differences are listed).

    ``kept``, the inputs the program kept, is read by the 0.4.13 variant only.

    >>> check_aot_types([("args[0]", Arg.numpy((4,)))], [Arg.numpy((4,), "int32")])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [AOT-2] at args[0]: 1 argument(s) differ from the types the executable was compiled for; they are: args[0] compiled for float32[4], called with int32[4]. Lower and compile again for the new types, or cast the arguments.
    """
    bad = [f"{path} compiled for {a.dtype}{list(a.shape)}, called with {b.dtype}{list(b.shape)}"
           for (path, a), b in zip(compiled, called) if (a.shape, a.dtype) != (b.shape, b.dtype)]
    if bad:
        first = next(path for (path, a), b in zip(compiled, called)
                     if (a.shape, a.dtype) != (b.shape, b.dtype))
        raise reject(AotTypeMismatch(len(bad), *_details(bad)), first)


@dataclasses.dataclass(frozen=True)
class AotShardingMismatch(Failure, rule="AOT-3"):
    template = ("{count} committed argument(s) are {how} otherwise than the "
                "executable was compiled for; {shown}: {details}")
    hint = ("jax.device_put each one to the executable's {formats} first, "
            "or compile again for these {what}.")
    count: int
    shown: str
    details: str
    how: str = "placed"
    formats: str = "input_shardings"
    what: str = "shardings"


def _differences(expected: Sequence[tuple[str, Any]], called: Sequence[Arg],
                 layouts: Sequence[Any]) -> list[tuple[str, str, str]]:
    """(kind, path, words) for each committed argument placed or laid out otherwise."""
    bad: list[tuple[str, str, str]] = []
    for (path, wanted), arg, laid in zip(expected, called, layouts):
        if arg.kind != "committed" or wanted is UNSPECIFIED:
            continue
        rank = len(arg.shape)
        if not jax_equivalent(arg.sharding, wanted, rank):
            bad.append(("sharding", path, f"{path} passed {arg.sharding!r}, compiled for "
                                          f"{wanted!r}"))
        held = arg.layout.major_to_minor if arg.layout is not None else tuple(range(rank))
        want = laid.major_to_minor if isinstance(laid, Layout) else tuple(range(rank))
        if laid is not AUTO_LAYOUT and held != want:
            bad.append(("layout", path, f"{path} passed in {layout_text(arg.layout, rank)}, "
                                        f"compiled for {layout_text(laid, rank)}"))
    return bad


def _hlo_only_0_4(function: Any, expected: Sequence[tuple[str, Any]], called: Sequence[Arg],
                  device_or_backend: bool = False, layouts: Sequence[Any] | None = None) -> None:
    """AOT-3 in JAX 0.4.13: a committed array passes when its HLO sharding, written over
    its own devices' positions, equals the executable's; its devices are not compared, and
    a one-device array reads as replicated (JAX then copies it over)."""
    if device_or_backend:
        return
    bad = []
    for (path, wanted), arg in zip(expected, called):
        if arg.kind != "committed" or wanted is UNSPECIFIED:
            continue
        rank = len(arg.shape)
        if not hlo_equal(to_hlo(arg.sharding, rank), to_hlo(wanted, rank)):
            bad.append((path, f"{path} passed {arg.sharding!r}, compiled for {wanted!r}"))
    if bad:
        raise reject(AotShardingMismatch(len(bad), *_details([b for _, b in bad])), bad[0][0])


@varies("0.4.13", "Each committed array passed to an executable compiled ahead of time must "
        "lower to the HLO sharding the executable takes; its devices are not compared and "
        "a one-device array counts as replicated, so JAX copies it over.",
        decide=_hlo_only_0_4)
@rule("AOT-3", mirrors="jax._src.interpreters.pxla.check_array_xla_sharding_layout_match")
def check_aot_shardings(expected: Sequence[tuple[str, Any]], called: Sequence[Arg],
                        device_or_backend: bool = False,
                        layouts: Sequence[Any] | None = None) -> None:
    """Each committed array passed to an executable compiled ahead of time must be placed and laid out as the executable takes it; other arguments are moved without a check.

    (C1) A committed array's sharding is JAX-equivalent (EQ-1) to the input sharding the
    executable was compiled with, not merely lowered to the same HLO as at jit time.
    (C2) For an input jit left open the executable takes the compiler's choice: the one
    device of a one-device program, else what the call's ``compiler_in`` oracle says; where
    it says nothing, nothing is compared.
    (C3) A committed array is in the layout the executable takes it in; an input whose
    layout the compiler chose (``Layout.AUTO``) is not compared.
    (C4) Uncommitted, numpy and scalar arguments, and every argument under
    ``device=``/``backend=``, are moved and laid out without a check.

    ``expected`` holds the executable's input shardings (UNSPECIFIED: not known) and
    ``layouts`` its layout per input (None: the default). Sharding and layout differences
    are listed together, as JAX lists them.

    >>> mesh = Mesh.iota((2,), ("x",))
    >>> check_aot_shardings([("args[0]", NamedSharding(mesh, P()))],
    ...                     [Arg.committed((4,), SingleDeviceSharding(0))])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AOT-3] at args[0]: 1 committed argument(s) are placed otherwise than the executable was compiled for; they are: args[0] passed SingleDeviceSharding(Device(0)), compiled for NamedSharding(Mesh({'x': 2}), P()). jax.device_put each one to the executable's input_shardings first, or compile again for these shardings.
    >>> lone = SingleDeviceSharding(0)
    >>> check_aot_shardings([("args[0]", lone)], [Arg.committed((4, 4), lone)],
    ...                     layouts=[Layout((1, 0))])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AOT-3] at args[0]: 1 committed argument(s) are laid out otherwise than the executable was compiled for; they are: args[0] passed in the default layout (0, 1), compiled for Layout((1, 0)). jax.device_put each one to the executable's input_formats first, or compile again for these layouts.
    """
    if device_or_backend:
        return
    layouts = layouts if layouts is not None else (None,) * len(expected)
    bad = _differences(expected, called, layouts)
    if bad:
        kinds = {kind for kind, _, _ in bad}
        how, formats, what = (("placed", "input_shardings", "shardings") if kinds == {"sharding"}
                              else ("laid out", "input_formats", "layouts")
                              if kinds == {"layout"} else
                              ("placed and laid out", "input_formats", "shardings and layouts"))
        raise reject(AotShardingMismatch(len(bad), *_details([b for _, _, b in bad]), how,
                                         formats, what), bad[0][1])

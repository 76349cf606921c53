"""Layouts: the order in which each device's block of an array lies in memory, and what jit does with it.

A :class:`Layout` names an array's dimensions from the most major to the most minor
(``Layout((1, 0))`` is a 2-D array stored column by column); an array's *default layout*
is ``(0, 1, ..., rank - 1)``. ``jax.jit`` takes layouts only inside a
:class:`Format` leaf of ``in_shardings``/``out_shardings``: ``Format(layout, sharding)``,
whose sharding part is read as the leaf's sharding and whose layout part is one of a
concrete :class:`Layout`, :data:`AUTO_LAYOUT` (``Layout.AUTO``: the compiler chooses) or
None (no layout asked for). The spec models ``major_to_minor`` only: XLA's tiling and
sub-byte element sizes are not part of it.

The jit rules (LAY-1..4) decide which layouts a call's arguments must already have, which
layout the compiled program takes each input in and which layout each result comes back
in. Values: VAL-9 (a layout is a permutation), VAL-10 (a Format's parts).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence

from ..core.pytree import Node, broadcast_prefix, is_container
from ..core.rules import Failure, reject, require, rule, varies
from ..core.shardings import (
    UNSPECIFIED, GSPMDSharding, Marker, NamedSharding, SingleDeviceSharding,
)

__all__ = ["Layout", "AUTO_LAYOUT", "Format", "is_layout", "split_format", "layout_text",
           "check_major_to_minor", "check_format", "check_argument_layout",
           "executable_input_layouts", "result_layouts", "check_layout_rank",
           "check_layout_devices", "flat_layouts", "given_in_layouts", "given_out_layouts",
           "given_layouts"]

AUTO_LAYOUT = Marker("Layout.AUTO", "The compiler chooses the layout (jax's Layout.AUTO).")


# =========================================================================== values

def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class NotALayout(Failure, rule="VAL-9", error=TypeError):
    template = "a layout's major_to_minor must be a sequence of integers, got {value!r}"
    value: Any


@dataclasses.dataclass(frozen=True)
class NotAnOrder(Failure, rule="VAL-9"):
    template = ("a layout's major_to_minor must order the dimensions 0 .. {top}, "
                "each once, got {order}")
    hint = "Write each dimension once, e.g. Layout((1, 0)) for a 2-D array."
    order: tuple
    top: int


@rule("VAL-9", mirrors="(input checking; jax.experimental.layout.Layout takes any integers, "
                       "and XLA's verifier refuses them when the program is compiled)")
def check_major_to_minor(order: Any) -> tuple[int, ...]:
    """A layout orders an array's dimensions from major to minor: its ``major_to_minor`` is a permutation of ``0 .. rank-1``.

    >>> check_major_to_minor([1, 0])
    (1, 0)
    >>> Layout((0, 0))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-9]: a layout's major_to_minor must order the dimensions 0 .. 1, each once, got (0, 0). Write each dimension once, e.g. Layout((1, 0)) for a 2-D array.
    """
    if not isinstance(order, (tuple, list)) or not all(_is_int(d) for d in order):
        raise reject(NotALayout(order))
    order = tuple(order)
    require(sorted(order) == list(range(len(order))),
            lambda: NotAnOrder(order, len(order) - 1))
    return order


@dataclasses.dataclass(frozen=True)
class Layout:
    """How each device's block of an array lies in memory: dimensions from major to minor.

    >>> Layout((1, 0)), Layout.default(2), Layout((0, 1)).is_default
    (Layout((1, 0)), Layout((0, 1)), True)
    """

    major_to_minor: tuple[int, ...]
    AUTO: ClassVar[Any] = AUTO_LAYOUT

    def __post_init__(self) -> None:
        object.__setattr__(self, "major_to_minor", check_major_to_minor(self.major_to_minor))

    @classmethod
    def default(cls, rank: int) -> "Layout":
        """The layout arrays of this rank have unless something lays them out otherwise."""
        return cls(tuple(range(rank)))

    @property
    def rank(self) -> int:
        return len(self.major_to_minor)

    @property
    def is_default(self) -> bool:
        return self.major_to_minor == tuple(range(self.rank))

    def __repr__(self) -> str:
        return f"Layout({self.major_to_minor!r})"


def is_layout(value: Any) -> bool:
    """A layout as jit's options may hold one: a :class:`Layout` or :data:`AUTO_LAYOUT`."""
    return value is AUTO_LAYOUT or isinstance(value, Layout)


_SHARDINGS = (NamedSharding, SingleDeviceSharding, GSPMDSharding)


@dataclasses.dataclass(frozen=True)
class BadFormatPart(Failure, rule="VAL-10", error=TypeError):
    template = "a Format's {part} must be {expected}, got {value!r}"
    part: str
    expected: str
    value: Any

    @property
    def hint(self) -> str:  # type: ignore[override]
        if self.part == "sharding":
            return ("A Format takes a Sharding, not a PartitionSpec: write "
                    "Format(layout, NamedSharding(mesh, spec)).")
        return ""


@dataclasses.dataclass(frozen=True)
class FormatWithoutSharding(Failure, rule="VAL-10"):
    template = "a Format with the concrete layout {layout!r} needs a concrete sharding, got None"
    hint = ("Pass Format(layout, NamedSharding(mesh, spec)) or "
            "Format(layout, SingleDeviceSharding(device)).")
    layout: Any


@rule("VAL-10", mirrors="jax.experimental.layout.Format.__init__")
def check_format(layout: Any, sharding: Any) -> None:
    """A Format pairs a Layout, ``Layout.AUTO`` or None with a Sharding or None (never a PartitionSpec), and a concrete Layout comes with a sharding.

    >>> Format(Layout((1, 0)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [VAL-10]: a Format with the concrete layout Layout((1, 0)) needs a concrete sharding, got None. Pass Format(layout, NamedSharding(mesh, spec)) or Format(layout, SingleDeviceSharding(device)).
    >>> Format(Layout.AUTO)
    Format(Layout.AUTO, None)
    """
    require(layout is None or is_layout(layout), lambda: BadFormatPart(
        "layout", "None, Layout.AUTO or a Layout", layout))
    require(sharding is None or isinstance(sharding, _SHARDINGS), lambda: BadFormatPart(
        "sharding", "None or a Sharding", sharding))
    require(not (isinstance(layout, Layout) and sharding is None),
            lambda: FormatWithoutSharding(layout))


@dataclasses.dataclass(frozen=True)
class Format:
    """A leaf of ``in_shardings``/``out_shardings`` that gives a layout along with a sharding.

    ``layout`` is a :class:`Layout`, :data:`AUTO_LAYOUT` or None (no layout asked for);
    ``sharding`` a sharding or None (left to jit).
    """

    layout: Any = None
    sharding: Any = None

    def __post_init__(self) -> None:
        check_format(self.layout, self.sharding)

    def __repr__(self) -> str:
        return f"Format({self.layout!r}, {self.sharding!r})"


def split_format(leaf: Any) -> tuple[Any, Any]:
    """(the sharding part, the layout part) of a shardings leaf; other leaves have no layout."""
    if isinstance(leaf, Format):
        return leaf.sharding, leaf.layout
    return leaf, None


def layout_text(layout: Any, rank: int) -> str:
    if layout is AUTO_LAYOUT:
        return "Layout.AUTO"
    if layout is None or layout.is_default:
        return f"the default layout {tuple(range(rank))}"
    return repr(layout)


def _canonical(layout: Any) -> Any:
    """None for the default layout (and for none); a layout otherwise."""
    return None if isinstance(layout, Layout) and layout.is_default else layout


# =========================================================================== the jit rules

@dataclasses.dataclass(frozen=True)
class LayoutRankMismatch(Failure, rule="LAY-4"):
    template = "the layout {layout!r} names {named} dimension(s), but the {what} has shape {shape}"
    layout: Any
    named: int
    what: str
    shape: tuple


@rule("LAY-4", mirrors="jax._src.pjit.check_aval_layout_compatibility")
def check_layout_rank(layout: Any, shape: tuple[int, ...], what: str) -> None:
    """A Format's concrete layout names exactly as many dimensions as the argument or result it covers has.

    >>> check_layout_rank(Layout((1, 0)), (8,), "argument")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LAY-4]: the layout Layout((1, 0)) names 2 dimension(s), but the argument has shape (8,)
    """
    if isinstance(layout, Layout):
        require(layout.rank == len(shape), lambda: LayoutRankMismatch(
            layout, layout.rank, what, tuple(shape)))


@dataclasses.dataclass(frozen=True)
class LayoutMismatch(Failure, rule="LAY-1"):
    template = ("in_shardings asks for {wanted}, but the committed "
                "array passed here is in {held}; jit does not lay out committed "
                "arrays again")
    wanted: str
    held: str
    auto: bool

    @property
    def hint(self) -> str:  # type: ignore[override]
        if self.auto:
            return ("Layout.AUTO lets the compiler choose, which an existing committed array "
                    "cannot follow: pass a jax.ShapeDtypeStruct to .lower(), or give the "
                    "array's own layout.")
        return ("Lay it out first with jax.device_put(x, Format(layout, sharding)), or leave "
                "the layout out (Format(None, sharding)).")


@varies("0.4.13", "JAX 0.4.13 has no layouts (no jax.experimental.layout): CALL-1 "
        "refuses a call described with one.",
        absent=True)
@rule("LAY-1", mirrors="jax._src.pjit._resolve_in_layouts")
def check_argument_layout(arg: Any, wanted: Any) -> None:
    """A committed ``jax.Array`` whose in_shardings leaf is a Format with a layout must already be in exactly that layout; other arguments are laid out as asked.

    (C1) A committed array is in exactly the Format's concrete layout, whether the function
    uses it or not.
    (C2) ``Layout.AUTO`` matches no committed array.
    (C3) Numpy arrays, scalars, uncommitted arrays and abstract values are laid out as
    asked, without a check.

    >>> from shardlaw.spec.jit.call import Arg
    >>> lone = SingleDeviceSharding(0)
    >>> check_argument_layout(Arg.numpy((4, 4)), Layout((1, 0)))
    >>> check_argument_layout(Arg.committed((4, 4), lone, layout=Layout((1, 0))), Layout((1, 0)))
    >>> check_argument_layout(Arg.committed((4, 4), lone), Layout((1, 0)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LAY-1]: in_shardings asks for Layout((1, 0)), but the committed array passed here is in the default layout (0, 1); jit does not lay out committed arrays again. Lay it out first with jax.device_put(x, Format(layout, sharding)), or leave the layout out (Format(None, sharding)).
    """
    if wanted is None or arg.kind != "committed":
        return
    rank = len(arg.shape)
    held = arg.layout if arg.layout is not None else Layout.default(rank)
    require(wanted is not AUTO_LAYOUT and wanted.major_to_minor == held.major_to_minor,
            lambda: LayoutMismatch(layout_text(wanted, rank), layout_text(held, rank),
                                   wanted is AUTO_LAYOUT))


@dataclasses.dataclass(frozen=True)
class LayoutWithoutDevices(Failure, rule="LAY-5"):
    template = ("the layout {layout!r} comes with {sharding!r}, a sharding over an "
                "abstract mesh; jit needs devices to lay a value out")
    hint = ("Give the Format a sharding over a concrete Mesh, or leave the layout "
            "to the compiler (Layout.AUTO).")
    layout: Any
    sharding: Any


@rule("LAY-5", mirrors="jax._src.pjit._resolve_in_layouts; _resolve_out_layouts "
                       "(is_default_layout asks the sharding for its devices)")
def check_layout_devices(layout: Any, sharding: Any) -> None:
    """A Format's concrete layout comes with a sharding over concrete devices: jit refuses one over an abstract mesh while lowering (``Layout.AUTO`` and None take any sharding).

    >>> from shardlaw.spec.core.values import AbstractMesh, P
    >>> check_layout_devices(Layout.AUTO, NamedSharding(AbstractMesh((2,), ("x",)), P()))
    >>> check_layout_devices(Layout((0,)), NamedSharding(AbstractMesh((2,), ("x",)), P()))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LAY-5]: the layout Layout((0,)) comes with NamedSharding(AbstractMesh({'x': 2}), P()), a sharding over an abstract mesh; jit needs devices to lay a value out. Give the Format a sharding over a concrete Mesh, or leave the layout to the compiler (Layout.AUTO).
    """
    if isinstance(layout, Layout) and isinstance(sharding, NamedSharding):
        require(sharding.is_concrete, lambda: LayoutWithoutDevices(layout, sharding))


@rule("LAY-3", mirrors="jax._src.pjit._resolve_in_layouts (the layouts it resolves)")
def executable_input_layouts(args: Sequence[Any], wanted: Sequence[Any],
                             chosen: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """The compiled program takes each input in the layout its in_shardings Format names (the compiler's choice under ``Layout.AUTO``), else in a committed array's own layout, else in the default layout.

    ``chosen`` holds the compiler's choice per input where it is known; an AUTO input whose
    choice is not known stays :data:`AUTO_LAYOUT`. None stands for the default layout.

    >>> from shardlaw.spec.jit.call import Arg
    >>> laid = Arg.committed((4, 4), SingleDeviceSharding(0), layout=Layout((1, 0)))
    >>> executable_input_layouts([laid, Arg.numpy((4, 4)), Arg.numpy((4,))],
    ...                          [None, Layout((1, 0)), Layout.AUTO])
    (Layout((1, 0)), Layout((1, 0)), Layout.AUTO)
    """
    chosen = chosen if chosen is not None else (None,) * len(args)
    out = []
    for arg, given, choice in zip(args, wanted, chosen):
        if given is AUTO_LAYOUT:
            out.append(AUTO_LAYOUT if choice is None else _canonical(choice))
        elif given is not None:
            out.append(_canonical(given))
        elif arg.kind == "committed":
            out.append(arg.layout)
        else:
            out.append(None)
    return tuple(out)


@rule("LAY-2", mirrors="jax._src.pjit._resolve_out_layouts; "
                       "jax._src.interpreters.pxla._get_layouts_from_executable")
def result_layouts(wanted: Sequence[Any], chosen: Sequence[Any] | None = None
                   ) -> tuple[Any, ...]:
    """A result comes back in the layout its out_shardings Format names, in the compiler's choice under ``Layout.AUTO``, and otherwise in the default layout, whatever the layouts of the arguments.

    ``chosen`` holds the compiler's choice per result where it is known; an AUTO result
    whose choice is not known stays :data:`AUTO_LAYOUT`. None stands for the default layout.

    >>> result_layouts([Layout((1, 0)), None, Layout.AUTO, Layout.AUTO],
    ...                [None, None, Layout((1, 0)), None])
    (Layout((1, 0)), None, Layout((1, 0)), Layout.AUTO)
    """
    chosen = chosen if chosen is not None else (None,) * len(wanted)
    out = []
    for given, choice in zip(wanted, chosen):
        if given is AUTO_LAYOUT:
            out.append(AUTO_LAYOUT if choice is None else _canonical(choice))
        else:
            out.append(_canonical(given))
    return tuple(out)


# =========================================================================== the layouts given

def flat_layouts(layout_tree: Any, node: Node, which: str) -> list[Any]:
    """The layout given for each flat leaf (None: none), once TREE-1/2 matched the tree.

    ``layout_tree`` is a shardings tree with each leaf replaced by its Format's layout part.

    >>> from shardlaw.spec.core.pytree import structure
    >>> flat_layouts([Layout((1, 0)), None], structure(((1, 2), 3)), "in_shardings")
    [Layout((1, 0)), Layout((1, 0)), None]
    """
    if layout_tree is UNSPECIFIED or layout_tree is None:
        return [None] * node.num_leaves
    if which == "in_shardings" and isinstance(layout_tree, list):
        layout_tree = tuple(layout_tree)  # TREE-1 reads a top-level list as a tuple
    if not is_container(layout_tree):
        return [layout_tree] * node.num_leaves
    return broadcast_prefix(layout_tree, node)


def given_in_layouts(normal: Any) -> tuple[Any, ...]:
    """The layout a Format of ``in_shardings`` gives each flat input (None: none), for a
    :class:`~shardlaw.spec.jit.call.NormalCall` whose in_shardings TREE-1 accepts.

    With keyword arguments in_shardings is left out (JIT-4), and ``device=``/``backend=``
    exclude it (JIT-1): no layout is given then.
    """
    if normal.device_or_backend or normal.call.kwargs:
        return (None,) * len(normal.flat_in)
    return tuple(flat_layouts(normal.in_layout_tree, normal.positional, "in_shardings"))


def given_out_layouts(normal: Any) -> tuple[Any, ...]:
    """The layout a Format of ``out_shardings`` gives each flat result (None: none), for a
    :class:`~shardlaw.spec.jit.call.NormalCall` whose out_shardings TREE-2 accepts."""
    if normal.device_or_backend:
        return (None,) * len(normal.flat_out)
    return tuple(flat_layouts(normal.out_layout_tree, normal.results, "out_shardings"))


def given_layouts(normal: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The layouts given to the flat inputs and to the flat results (:func:`given_in_layouts`,
    :func:`given_out_layouts`)."""
    return given_in_layouts(normal), given_out_layouts(normal)

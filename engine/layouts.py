"""Layouts: ``Format(layout, sharding)`` leaves of jit's options, and arrays' own layouts.

jit reads a ``Format`` leaf of ``in_shardings``/``out_shardings`` as its sharding (the
sharding rules apply to that part) plus a layout that JAX's compiler uses. The engine hands
the layouts to JAX unchanged and keeps three facts of its own:

* LAY-1 — a committed array whose ``in_shardings`` leaf gives a layout (a concrete one or
  ``Layout.AUTO``) must carry exactly that layout; jit refuses it otherwise (ValueError,
  while lowering), for every argument, kept or not;
* LAY-4 — a concrete layout orders as many dimensions as its argument or result has
  (ValueError, at the call, after FIT-1); LAY-5 — a concrete layout needs a sharding over
  concrete devices (ValueError, while lowering, with LAY-1 argument by argument);
* VAL-9 — a concrete layout is a permutation of the dimensions (JAX's ``Layout`` takes any
  integers and XLA fails when compiling; the engine refuses it at ``jit(...)``);
* an argument's own layout takes part in the signature and the executable key: JAX
  compiles a committed argument in a non-default layout into its own executable;
* a given layout takes part in the executable key.
"""

from __future__ import annotations

from typing import Any

from jax.experimental.layout import Format, Layout

from jax.sharding import AbstractMesh

from .rules import reject, rule

__all__ = ["Format", "Layout", "Laid", "AUTO", "split", "array_layout", "layout_text",
           "check_argument", "check_layout", "check_rank", "check_layout_devices",
           "check_order", "layout_key"]

AUTO = Layout.AUTO


class Laid:
    """A Format leaf after JIT-3: the converted sharding and the layout it was given with."""

    __slots__ = ("sharding", "layout")

    def __init__(self, sharding: Any, layout: Any) -> None:
        self.sharding = sharding
        self.layout = layout

    def __repr__(self) -> str:
        return f"Format({layout_text(self.layout)}, {self.sharding!r})"


def split(leaves: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the sharding part of each leaf, the layout each gives or None)."""
    if not any(type(leaf) is Laid for leaf in leaves):
        return leaves, [None] * len(leaves)
    shardings, layouts = [], []
    for leaf in leaves:
        if type(leaf) is Laid:
            shardings.append(leaf.sharding)
            layouts.append(leaf.layout)
        else:
            shardings.append(leaf)
            layouts.append(None)
    return shardings, layouts


def layout_key(layout: Any, ndim: int) -> Any:
    """A hashable form of a layout; None for the default layout (and for no layout)."""
    if layout is None:
        return None
    if layout is AUTO:
        return "AUTO"
    order = tuple(layout.major_to_minor)
    tiling = tuple(tuple(t) for t in (layout.tiling or ()))
    bits = getattr(layout, "sub_byte_element_size_in_bits", 0)
    if order == tuple(range(ndim)) and not tiling and not bits:
        return None
    return (order, tiling, bits)


def array_layout(array: Any) -> Any:
    """The layout an array's buffers are in, as :func:`layout_key` (None: the default)."""
    fmt = getattr(array, "format", None)
    layout = getattr(fmt, "layout", None)
    if layout is None:
        return None
    return layout_key(layout, len(array.shape))


def layout_text(layout: Any) -> str:
    if layout is None:
        return "the default layout"
    if layout is AUTO or layout == "AUTO":
        return "Layout.AUTO"
    if isinstance(layout, tuple):
        order, tiling, _ = layout
        return f"Layout(major_to_minor={order}" + (f", tiling={tiling})" if tiling else ")")
    return f"Layout(major_to_minor={tuple(layout.major_to_minor)})"


def _matches(given: Any, held: Any, ndim: int) -> bool:
    """Whether an array laid out as ``held`` (a layout key) satisfies the layout ``given``."""
    if given is AUTO:
        return False
    order = tuple(given.major_to_minor)
    held_order = tuple(range(ndim)) if held is None else held[0]
    if order != held_order:
        return False
    if given.tiling is not None:
        held_tiling = () if held is None else held[1]
        if tuple(tuple(t) for t in given.tiling) != held_tiling:
            return False
    return True


def check_argument(path: str, given: Any, held: Any, committed: bool, ndim: int,
                   sharding: Any) -> None:
    """LAY-1 then LAY-5 for one argument, as jit resolves input layouts one by one."""
    check_layout(path, given, held, committed, ndim)
    check_layout_devices(path, given, sharding)


@rule("LAY-1")
def check_layout(path: str, given: Any, held: Any, committed: bool, ndim: int) -> None:
    """A committed ``jax.Array`` whose in_shardings leaf is a Format with a layout must already be in exactly that layout; other arguments are laid out as asked.

    The layout asked for may be a concrete one or ``Layout.AUTO``; every argument is checked,
    kept by the program or not.
    """
    if given is None or not committed or _matches(given, held, ndim):
        return
    hint = ("Layout.AUTO lets the compiler choose, which a committed array cannot follow: "
            "pass it uncommitted, or give its own layout"
            if given is AUTO else
            "Lay it out first (jax.device_put(x, Format(layout, sharding))), or leave the "
            "layout out of in_shardings (Format(None, sharding))")
    raise reject("LAY-1", ValueError,
                 f"in_shardings gives {path} the layout {layout_text(given)}, but the committed "
                 f"array passed there is in {layout_text(held)}. {hint}.", path)


@rule("LAY-4")
def check_rank(path: str, given: Any, shape: tuple[int, ...], what: str) -> None:
    """A Format's concrete layout names exactly as many dimensions as the argument or result it covers has."""
    if given is None or given is AUTO:
        return
    order = tuple(given.major_to_minor)
    if len(order) != len(shape):
        raise reject("LAY-4", ValueError,
                     f"the layout {layout_text(given)} given for {path} orders {len(order)} "
                     f"dimension(s), but the {what} there has shape {tuple(shape)} "
                     f"({len(shape)} dimension(s)). Give a layout of its rank.", path)


@rule("LAY-5")
def check_layout_devices(path: str, given: Any, sharding: Any) -> None:
    """A Format's concrete layout comes with a sharding over concrete devices: jit refuses one over an abstract mesh while lowering (``Layout.AUTO`` and None take any sharding)."""
    if given is None or given is AUTO:
        return
    mesh = getattr(sharding, "mesh", None)
    if isinstance(mesh, AbstractMesh):
        raise reject("LAY-5", ValueError,
                     f"the layout {layout_text(given)} given for {path} comes with {sharding}, "
                     "over an abstract mesh; laying a value out needs its devices. Give the "
                     "Format a sharding over a concrete Mesh, or let the compiler choose "
                     "(Layout.AUTO).", path)


@rule("VAL-9")
def check_order(layout: Any, which: str) -> None:
    """A layout orders an array's dimensions from major to minor: its ``major_to_minor`` is a permutation of ``0 .. rank-1``."""
    order = tuple(getattr(layout, "major_to_minor", ()) or ())
    if sorted(order) != list(range(len(order))):
        raise reject("VAL-9", ValueError,
                     f"{which} holds the layout {layout_text(layout)}, whose major_to_minor "
                     f"{order} does not order the dimensions 0 .. {len(order) - 1} each once "
                     "(XLA would refuse it only when compiling). Write each dimension once, "
                     "e.g. Layout((1, 0)) for a 2-D array.", which)

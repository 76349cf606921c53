"""Layouts: ``Format(layout, sharding)`` leaves of jit's options, and arrays' own layouts.

jit reads a ``Format`` leaf of ``in_shardings``/``out_shardings`` as its sharding (the
sharding rules apply to that part) plus a layout that JAX's compiler uses. The engine hands
the layouts to JAX unchanged and keeps three facts of its own:

* LAY-1 — a committed array whose ``in_shardings`` leaf gives a layout (a concrete one or
  ``Layout.AUTO``) must carry exactly that layout; jit refuses it otherwise (ValueError,
  while lowering), for every argument, kept or not;
* an argument's own layout takes part in the signature and the executable key: JAX
  compiles a committed argument in a non-default layout into its own executable;
* a given layout takes part in the executable key.
"""

from __future__ import annotations

from typing import Any

from jax.experimental.layout import Format, Layout

from .rules import reject, rule

__all__ = ["Format", "Layout", "Laid", "AUTO", "split", "array_layout", "layout_text",
           "check_layouts", "layout_key"]

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


@rule("LAY-1")
def check_layouts(paths: list[str], layouts: list[Any], held: list[Any], committed: list[bool],
                  ndims: list[int]) -> None:
    """A committed array whose in_shardings leaf is a Format with a layout (a concrete one or AUTO) must already be in exactly that layout, kept by the program or not."""
    for path, given, have, is_committed, ndim in zip(paths, layouts, held, committed, ndims):
        if given is None or not is_committed:
            continue
        if not _matches(given, have, ndim):
            hint = ("Layout.AUTO lets the compiler choose, which a committed array cannot "
                    "follow: pass it uncommitted, or give its own layout"
                    if given is AUTO else
                    "Lay it out first (jax.device_put(x, Format(layout, sharding))), or "
                    "leave the layout out of in_shardings (Format(None, sharding))")
            raise reject("LAY-1", ValueError,
                         f"in_shardings gives {path} the layout {layout_text(given)}, but the "
                         f"committed array passed there is in {layout_text(have)}. {hint}.",
                         path)

"""Which device holds which block of an array, drawn as SVG.

One cell per block of the array (the distinct boxes of the spec's ``devices_indices_map``,
IDX-1), laid out as the array is: dimension 0 down, dimension 1 across (a vector is one
row, dimension 0 across); a value of rank 3 or more is drawn as one grid per block of the
further dimensions. A cell is labelled with the ids of the devices that hold it (the
copies of a block share a cell) and coloured by the lowest of them, so two placements
drawn side by side show the same block on the same devices in the same colour.

The picture carries its words: a ``<title>`` and a ``<desc>`` that lists every block,
text labels on every cell, and colour never the only mark (a highlighted device is also
bracketed, ``[5]``). The same sharding and shape give the same bytes. Standard library
only; ``shardlaw prove --svg`` and the docs' ``shardlaw-grid`` directive draw with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

__all__ = ["Layout", "layout_of", "grid_svg", "grid_svgs", "device_label", "MAX_DEVICES",
           "MAX_CELLS"]

Range = tuple[int, int]
Box = tuple[Range, ...]

# Beyond these the picture says what it would hold instead of drawing it.
MAX_DEVICES = 256
MAX_CELLS = 256
MAX_ACROSS = 32

# Light tints that dark text reads on, one per lowest device id modulo their number.
PALETTE = ("#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc", "#d9d2e9", "#fff2cc", "#d0e0e3",
           "#f4cccc")
TEXT = "#1b1b1b"
EDGE = "#445566"
HIGHLIGHT = "#c00000"

FONT = 13            # px, monospace
CHAR = 8.0           # px, the advance of one monospace character at FONT (about 0.6 em)
LINE = 16            # px between label lines
IDS_PER_LINE = 4     # device ids (or runs of ids) per label line
MAX_LINES = 4


@dataclasses.dataclass(frozen=True)
class Layout:
    """The blocks of one sharding for one shape: the ranges down (dimension 0, for rank 2
    or more), across (dimension 1; dimension 0 for a vector), one panel per block of the
    further dimensions, and the devices that hold each box."""

    shape: tuple[int, ...]
    down: tuple[Range, ...]
    across: tuple[Range, ...]
    panels: tuple[Box, ...]
    held: dict[Box, tuple[int, ...]]

    def box(self, panel: Box, row: Range | None, col: Range | None) -> Box:
        """The box of the cell at (row, col) of a panel (a vector has no row, a scalar
        neither)."""
        return tuple(r for r in (row, col) if r is not None) + panel


def layout_of(sharding: Any, shape: Sequence[int]) -> Layout:
    """The blocks of ``sharding`` for ``shape``, from the spec's ``devices_indices_map``
    (which raises the spec's rejection for a shape the sharding cannot place)."""
    from shardlaw.spec import devices_indices_map

    shape = tuple(shape)
    boxes = devices_indices_map(sharding, shape)
    held: dict[Box, list[int]] = {}
    for device, box in boxes.items():
        held.setdefault(tuple(box), []).append(device)
    rank = len(shape)

    def ranges(dim: int) -> tuple[Range, ...]:
        return tuple(sorted({box[dim] for box in held}))

    down = ranges(0) if rank >= 2 else ()
    across = ranges(1) if rank >= 2 else ranges(0) if rank == 1 else ()
    panels = tuple(sorted({box[2:] for box in held})) if rank >= 3 else ((),)
    return Layout(shape, down, across, panels,
                  {box: tuple(sorted(ids)) for box, ids in held.items()})


# --------------------------------------------------------------------------- labels

def _runs(ids: Sequence[int]) -> list[str]:
    """Device ids as items: runs of three or more consecutive ids as ``a–b``."""
    items: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        if j - i >= 2:
            items.append(f"{ids[i]}\u2013{ids[j]}")
        else:
            items += [str(d) for d in ids[i:j + 1]]
        i = j + 1
    return items


def device_label(ids: Sequence[int], highlight: int | None = None) -> list[str]:
    """The lines of a cell's label: the device ids, runs shortened, ``highlight``
    bracketed, at most MAX_LINES lines."""
    ids = sorted(ids)
    if not ids:
        return ["-"]
    if highlight in ids:
        k = ids.index(highlight)
        items = _runs(ids[:k]) + [f"[{highlight}]"] + _runs(ids[k + 1:])
    else:
        items = _runs(ids)
    lines = [",".join(items[i:i + IDS_PER_LINE]) for i in range(0, len(items), IDS_PER_LINE)]
    if len(lines) > MAX_LINES:
        shown = items[:IDS_PER_LINE * (MAX_LINES - 1)]
        lines = lines[:MAX_LINES - 1] + [f"\u2026 +{len(items) - len(shown)} more"]
    return lines


def _range_text(r: Range | None) -> str:
    return "" if r is None else f"{r[0]}:{r[1]}"


def _box_words(layout: Layout, box: Box) -> str:
    if not box:
        return "the whole scalar"
    names = ["rows", "columns"] if len(box) >= 2 else ["elements"]
    words = [f"{names[d]} {_range_text(r)}" for d, r in enumerate(box[:2])]
    words += [f"dimension {d} {_range_text(r)}" for d, r in enumerate(box[2:], 2)]
    return ", ".join(words)


def _held_words(ids: Sequence[int]) -> str:
    return ("device " if len(ids) == 1 else "devices ") + ", ".join(map(str, ids))


def _escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


# --------------------------------------------------------------------------- drawing

@dataclasses.dataclass
class _Canvas:
    parts: list[str] = dataclasses.field(default_factory=list)

    def text(self, x: float, y: float, text: str, *, anchor: str = "start",
             weight: str = "", size: int = FONT, fill: str = "currentColor") -> None:
        extra = f' font-weight="{weight}"' if weight else ""
        extra += f' font-size="{size}"' if size != FONT else ""
        self.parts.append(f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" '
                          f'fill="{fill}"{extra}>{_escape(text)}</text>')


def _cell_size(layouts: Sequence[Layout], highlight: int | None) -> tuple[float, float]:
    labels = [device_label(ids, highlight) for layout in layouts for ids in layout.held.values()]
    longest = max((len(line) for label in labels for line in label), default=1)
    lines = max((len(label) for label in labels), default=1)
    ranges = [r for layout in layouts for r in layout.across]
    longest = max([longest] + [len(_range_text(r)) for r in ranges])
    return max(56.0, CHAR * longest + 18), max(34.0, LINE * lines + 16)


def _too_big(sharding: Any, layout: Layout | None) -> str | None:
    count = len(sharding.device_list)
    if count > MAX_DEVICES:
        return f"not drawn: {count} devices (at most {MAX_DEVICES} are drawn)"
    if layout is not None:
        cells = len(layout.held)
        if cells > MAX_CELLS or len(layout.across) > MAX_ACROSS:
            return f"not drawn: {cells} blocks (at most {MAX_CELLS} are drawn)"
    return None


def _panel(canvas: _Canvas, layout: Layout, panel: Box, x0: float, y0: float,
           cell: tuple[float, float], highlight: int | None) -> tuple[float, float]:
    """One grid of cells with its range labels; returns its width and height."""
    cw, ch = cell
    rank = len(layout.shape)
    head = 34.0 if rank >= 1 else 0.0      # dimension name and column ranges above
    side = 58.0 if rank >= 2 else 0.0      # dimension name and row ranges to the left
    rows: Sequence[Range | None] = layout.down if rank >= 2 else (None,)
    cols: Sequence[Range | None] = layout.across if rank >= 1 else (None,)
    if rank >= 1:
        canvas.text(x0 + side + cw * len(cols) / 2, y0 + 12,
                    "dim 1 \u2192" if rank >= 2 else "dim 0 \u2192", anchor="middle", size=11)
        for j, col in enumerate(cols):
            canvas.text(x0 + side + cw * (j + 0.5), y0 + head - 6, _range_text(col),
                        anchor="middle", size=11)
    if rank >= 2:
        canvas.text(x0 + side - 6, y0 + 12, "dim 0 \u2193", anchor="end", size=11)
        for i, row in enumerate(rows):
            canvas.text(x0 + side - 6, y0 + head + ch * (i + 0.5) + 4, _range_text(row),
                        anchor="end", size=11)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            box = layout.box(panel, row, col)
            _cell(canvas, layout, box, x0 + side + cw * j, y0 + head + ch * i, cell, highlight)
    return side + cw * len(cols), head + ch * len(rows)


def _cell(canvas: _Canvas, layout: Layout, box: Box, x: float, y: float,
          cell: tuple[float, float], highlight: int | None) -> None:
    """One block: a rectangle coloured by its lowest device, and the devices' ids."""
    cw, ch = cell
    ids = layout.held.get(box, ())
    marked = highlight is not None and highlight in ids
    fill = PALETTE[min(ids) % len(PALETTE)] if ids else "#ffffff"
    canvas.parts.append(
        f'<g class="block" data-box="{" ".join(map(_range_text, box))}" '
        f'data-devices="{" ".join(map(str, ids))}">'
        f'<title>{_escape(_box_words(layout, box))}: {_held_words(ids)}</title>')
    canvas.parts.append(
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(cw)}" height="{_num(ch)}" '
        f'fill="{fill}" stroke="{HIGHLIGHT if marked else EDGE}" '
        f'stroke-width="{3 if marked else 1}"/>')
    label = device_label(ids, highlight)
    top = y + ch / 2 - LINE * (len(label) - 1) / 2 + 4
    for k, line in enumerate(label):
        canvas.text(x + cw / 2, top + LINE * k, line, anchor="middle", fill=TEXT,
                    weight="bold" if marked else "")
    canvas.parts.append("</g>")


def _description(label: str, layout: Layout | None, note: str | None) -> str:
    name = f"{label}: " if label else ""
    if layout is None or note:
        return f"{name}{note}."
    blocks = sorted(layout.held.items())
    words = "; ".join(f"{_box_words(layout, box)} on {_held_words(ids)}"
                      for box, ids in blocks)
    return f"{name}{len(blocks)} block{'s' * (len(blocks) != 1)}: {words}."


def _layout_or_note(sharding: Any, shape: tuple[int, ...]) -> tuple[Layout | None, str | None]:
    note = _too_big(sharding, None)
    layout = None if note else layout_of(sharding, shape)
    note = note or _too_big(sharding, layout)
    return (None, note) if note else (layout, None)


def _draw(canvas: _Canvas, drawn: list[tuple[str, Layout | None, str | None]], top: float,
          cell: tuple[float, float], highlight: int | None) -> tuple[float, float]:
    """The panels side by side from ``top``: each a label, then its grids (one per block of
    dimensions 2 and on) or the note that says why it is not drawn. Returns the extent."""
    gap, x, height = 36.0, 10.0, top
    for label, layout, note in drawn:
        y = top + (22.0 if label else 0.0)
        if label:
            canvas.text(x, top + 14, label, weight="bold")
        if layout is None:
            canvas.text(x, y + 16, note or "")
            width, used = CHAR * len(note or "") + 8, 24.0
        else:
            width, used = 0.0, 0.0
            for panel in layout.panels:
                if panel:
                    canvas.text(x, y + used + 14, "dimensions 2.. at "
                                + ", ".join(map(_range_text, panel)), size=11)
                    used += 20
                w, h = _panel(canvas, layout, panel, x, y + used, cell, highlight)
                width, used = max(width, w), used + h + 12
        if label:
            width = max(width, CHAR * 1.05 * len(label))
        x += width + gap
        height = max(height, y + used)
    return x - gap + 10, height + 8


def grid_svg(shardings: Any, shape: Sequence[int], *, title: str | None = None,
             highlight: int | None = None, ident: str = "shardlaw-grid",
             show_title: bool = True) -> str:
    """An SVG picture of which device holds which block of an array of ``shape``.

    ``shardings`` is one sharding, or a list of ``(label, sharding)`` drawn side by side
    with one cell size (placements to compare). ``highlight`` outlines (and brackets) the
    blocks of one device. ``title`` is always the picture's ``<title>``, and written above
    it unless ``show_title`` is false (a page's caption says it). ``ident`` prefixes the
    ids of the ``<title>`` and ``<desc>``; give each picture on one HTML page its own.
    """
    panels = list(shardings) if isinstance(shardings, (list, tuple)) else [("", shardings)]
    drawn = [(label, *_layout_or_note(sharding, tuple(shape))) for label, sharding in panels]
    title = title or f"which device holds which block, shape {tuple(shape)}"
    return _picture(drawn, _shared_cell(drawn, highlight), title, show_title, highlight, ident)


def grid_svgs(panels: Sequence[tuple[str, Any]], shape: Sequence[int], *,
              highlight: int | None = None, ident: str = "shardlaw-grid") -> list[str]:
    """One picture per ``(label, sharding)``, all with one cell size, for a page that lays
    them out itself (side by side where there is room, one under the other where there is
    not); each is titled by its label."""
    drawn = [(label, *_layout_or_note(sharding, tuple(shape))) for label, sharding in panels]
    cell = _shared_cell(drawn, highlight)
    return [_picture([one], cell, f"{one[0]}: which device holds which block, shape "
                                  f"{tuple(shape)}", False, highlight, f"{ident}-{k}")
            for k, one in enumerate(drawn, 1)]


def _shared_cell(drawn: list[tuple[str, Layout | None, str | None]], highlight: int | None
                 ) -> tuple[float, float]:
    return _cell_size([layout for _, layout, _ in drawn if layout is not None], highlight)


def _picture(drawn: list[tuple[str, Layout | None, str | None]], cell: tuple[float, float],
             title: str, show_title: bool, highlight: int | None, ident: str) -> str:
    canvas = _Canvas()
    if show_title:
        canvas.text(10, 19, title, weight="bold", size=14)
    width, height = _draw(canvas, drawn, 32.0 if show_title else 4.0, cell, highlight)
    if show_title:
        width = max(width, 8.8 * len(title) + 20)
    desc = " ".join(_description(label, layout, note) for label, layout, note in drawn)
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" class="shardlaw-grid" '
            f'width="{_num(width)}" height="{_num(height)}" '
            f'viewBox="0 0 {_num(width)} {_num(height)}" role="img" '
            f'aria-labelledby="{ident}-title {ident}-desc" '
            f'font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" '
            f'font-size="{FONT}">',
            f'<title id="{ident}-title">{_escape(title)}</title>',
            f'<desc id="{ident}-desc">{_escape(desc)}</desc>']
    return "\n".join(head + canvas.parts + ["</svg>"]) + "\n"

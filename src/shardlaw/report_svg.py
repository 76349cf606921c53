"""A campaign report drawn as two SVG charts: rule coverage and examples per second.

A campaign report is the JSON ``shardlaw campaign`` writes (``notes/campaign-report-*.json``):
``rules`` maps a rule ID to how often a drawn example was ``accepted`` and ``rejected`` by
it, ``never_hit`` lists the sides no example reached (``"CACHE-2 accepted"``), and
``suites`` maps a suite to its ``examples`` and the seconds its properties ran.

* :func:`coverage_svg`: one row per rule, in the rule index's family order, rejections to
  the left of the rule's ID and acceptances to the right, on a log scale (the counts run
  from 1 to hundreds of thousands); a side no example reached says "never".
* :func:`speed_svg`: examples per second of property time, one bar per suite.

Standard library only, deterministic (the same report gives the same bytes), and every
mark has words: a ``<title>``, a ``<desc>``, the counts written beside the bars.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["coverage_svg", "speed_svg", "report_svgs", "rule_counts", "suite_speeds"]

ACCEPTED = "#3b76c4"   # blue and orange: told apart with every common colour deficiency
REJECTED = "#d9822b"
GRID = "#8a8a8a"
FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"

ROW = 13.0         # px per rule
FAMILY_GAP = 5.0   # px between families
HALF = 150.0       # px on each side of the rule IDs: the longest bar and its count
BAR = 108.0        # px of the longest bar (the rest is room for its count)
MIDDLE = 58.0      # px for the rule IDs between the two sides
CHAR = 6.2         # px, one character at 10 px


def _escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _count(n: float) -> str:
    return f"{int(n):,}"


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 10,
          weight: str = "", style: str = "", fill: str = "currentColor") -> str:
    extra = f' font-weight="{weight}"' if weight else ""
    extra += f' font-style="{style}"' if style else ""
    return (f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" font-size="{size}" '
            f'fill="{fill}"{extra}>{_escape(text)}</text>')


def _svg(width: float, height: float, ident: str, title: str, desc: str,
         body: list[str]) -> str:
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" class="shardlaw-chart" '
            f'width="{_num(width)}" height="{_num(height)}" '
            f'viewBox="0 0 {_num(width)} {_num(height)}" role="img" '
            f'aria-labelledby="{ident}-title {ident}-desc" font-family="{FONT}">',
            f'<title id="{ident}-title">{_escape(title)}</title>',
            f'<desc id="{ident}-desc">{_escape(desc)}</desc>']
    return "\n".join(head + body + ["</svg>"]) + "\n"


# --------------------------------------------------------------------------- reading

def _rule_key(rule_id: str) -> tuple[int, str, int]:
    """Family order from the rule index (unknown families last, by name), then number."""
    from shardlaw.rule_index import FAMILIES

    family, _, number = rule_id.rpartition("-")
    order = list(FAMILIES)
    rank = order.index(family) if family in order else len(order)
    return rank, family, int(number) if number.isdigit() else 0


def rule_counts(report: Mapping[str, Any]) -> list[tuple[str, int, int, bool, bool]]:
    """(rule ID, accepted, rejected, accepted never hit, rejected never hit) per rule, in
    family order. A side counts as never hit when ``never_hit`` names it, or, for a report
    without ``never_hit``, when its count is zero."""
    rules = report.get("rules") or {}
    listed = report.get("never_hit")
    never = set(listed or ())
    rows = []
    for rule_id in sorted(rules, key=_rule_key):
        hits = rules[rule_id] or {}
        accepted, rejected = int(hits.get("accepted", 0)), int(hits.get("rejected", 0))
        if listed is None:
            a_never, r_never = accepted == 0, rejected == 0
        else:
            a_never, r_never = f"{rule_id} accepted" in never, f"{rule_id} rejected" in never
        rows.append((rule_id, accepted, rejected, a_never, r_never))
    return rows


def suite_speeds(report: Mapping[str, Any]) -> list[tuple[str, int, float]]:
    """(suite, examples, examples per second of property time) per suite, in report order;
    the rate is the report's own, or examples over the suite's seconds."""
    out = []
    for name, suite in (report.get("suites") or {}).items():
        suite = suite or {}
        examples = int(suite.get("examples", 0))
        rate = suite.get("examples_per_second", suite.get("examples_per_property_second"))
        if rate is None:
            seconds = suite.get("seconds", suite.get("property_seconds")) or 0
            rate = examples / seconds if seconds else 0.0
        out.append((str(name), examples, float(rate)))
    return out


# --------------------------------------------------------------------------- coverage

def _scale(top: int) -> tuple[int, Any]:
    """Decades on the axis and the bar length of a count, log10(1 + n) of BAR."""
    decades = max(1, math.ceil(math.log10(1 + max(top, 1))))
    return decades, lambda n: BAR * math.log10(1 + n) / decades


def coverage_svg(report: Mapping[str, Any], *, ident: str = "campaign-coverage") -> str:
    """Each rule's accepted and rejected hits, log scale, never-hit sides marked."""
    rows = rule_counts(report)
    title = "Rule coverage: examples per rule"
    left, top = 8.0, 76.0
    width = left * 2 + HALF * 2 + MIDDLE
    if not rows:
        body = [_text(left, 18, title, size=12, weight="bold"),
                _text(left, 44, "No rule hits recorded in this report.", size=11)]
        return _svg(width, 60, ident, title, "No rule hits recorded.", body)
    decades, length = _scale(max(max(a, r) for _, a, r, _, _ in rows))
    centre_l = left + HALF                 # where the rejected bars start (going left)
    centre_r = centre_l + MIDDLE           # where the accepted bars start
    body = [_text(left, 18, title, size=12, weight="bold"),
            f'<rect x="{_num(left)}" y="28" width="10" height="10" fill="{REJECTED}"/>',
            _text(left + 14, 37, "rejected (left)", size=10),
            f'<rect x="{_num(left + 130)}" y="28" width="10" height="10" fill="{ACCEPTED}"/>',
            _text(left + 144, 37, "accepted (right)", size=10),
            _text(left, 52, "log scale; \u201cnever\u201d: no example reached that side",
                  size=10)]
    y, family, bands = top, None, []
    placed = []
    for rule_id, accepted, rejected, a_never, r_never in rows:
        fam = rule_id.rpartition("-")[0]
        if family is not None and fam != family:
            y += FAMILY_GAP
        family = fam
        placed.append((y, rule_id, accepted, rejected, a_never, r_never))
        y += ROW
    bottom = y
    # the decades, on both sides
    for k in range(decades + 1):
        for sign, start in ((-1, centre_l), (1, centre_r)):
            x = start + sign * BAR * k / decades
            body.append(f'<line x1="{_num(x)}" y1="{_num(top - 6)}" x2="{_num(x)}" '
                        f'y2="{_num(bottom)}" stroke="{GRID}" stroke-width="0.5" '
                        f'stroke-dasharray="2 3"/>')
            if k % 2 == 0:  # every other decade named: 18 px apart is too close to read
                body.append(_text(x, top - 9, _decade(k), anchor="middle", size=9))
                body.append(_text(x, bottom + 12, _decade(k), anchor="middle", size=9))
    for y, rule_id, accepted, rejected, a_never, r_never in placed:
        bands.append(f"{rule_id} accepted {_side(accepted, a_never)}, "
                     f"rejected {_side(rejected, r_never)}")
        body += _rule_row(y, rule_id, (rejected, r_never), (accepted, a_never),
                          (centre_l, centre_r), length)
    never_sides = sum(a_never + r_never for _, _, _, a_never, r_never in rows)
    desc = (f"{len(rows)} rules; {never_sides} sides never hit. " + "; ".join(bands) + ".")
    return _svg(width, bottom + 20, ident, title, desc, body)


def _rule_row(y: float, rule_id: str, rejected: tuple[int, bool], accepted: tuple[int, bool],
              centres: tuple[float, float], length: Any) -> list[str]:
    """One rule: its ID between the sides, each side a bar and its count, or "never"."""
    mid = y + ROW / 2
    (r_count, r_never), (a_count, a_never) = rejected, accepted
    out = [f'<g class="rule" data-rule="{rule_id}" data-accepted="{a_count}" '
           f'data-rejected="{r_count}">',
           f'<title>{rule_id}: accepted {_side(a_count, a_never)}, '
           f'rejected {_side(r_count, r_never)}</title>',
           _text(sum(centres) / 2, mid + 3.5, rule_id, anchor="middle")]
    for (count, never), colour, sign, start in ((rejected, REJECTED, -1, centres[0]),
                                                (accepted, ACCEPTED, 1, centres[1])):
        anchor = "end" if sign < 0 else "start"
        if count:
            w = max(length(count), 1.0)
            out.append(f'<rect x="{_num(start - w if sign < 0 else start)}" y="{_num(y + 2)}" '
                       f'width="{_num(w)}" height="{_num(ROW - 4)}" fill="{colour}"/>')
            out.append(_text(start + sign * (w + 3), mid + 3, _count(count), anchor=anchor,
                             size=8))
        elif never:
            out.append(_text(start + sign * 3, mid + 3, "never", anchor=anchor, size=9,
                             style="italic", weight="bold"))
    return out + ["</g>"]


def _decade(k: int) -> str:
    return {0: "0", 1: "10", 2: "100", 3: "1k", 4: "10k", 5: "100k", 6: "1M",
            7: "10M"}.get(k, f"1e{k}")


def _side(count: int, never: bool) -> str:
    return "never" if never and not count else _count(count)


# --------------------------------------------------------------------------- speed

def speed_svg(report: Mapping[str, Any], *, ident: str = "campaign-speed") -> str:
    """Examples per second of property time, one bar per suite."""
    suites = suite_speeds(report)
    title = "Examples per second of property time, per suite"
    left, top, row, bar = 8.0, 40.0, 24.0, 140.0
    names = max((len(name) for name, _, _ in suites), default=6)
    label_w = CHAR * 1.1 * names + 12
    width = left * 2 + label_w + bar + 165
    if not suites:
        body = [_text(left, 18, title, size=12, weight="bold"),
                _text(left, 44, "No suites recorded in this report.", size=11)]
        return _svg(width, 60, ident, title, "No suites recorded.", body)
    fastest = max(rate for _, _, rate in suites) or 1.0
    body = [_text(left, 18, title, size=12, weight="bold")]
    total = report.get("examples_per_second")
    if total is not None:
        body.append(_text(left, 32, f"the whole campaign: {float(total):,.1f} examples per "
                                    f"second of wall time", size=10))
    words = []
    for i, (name, examples, rate) in enumerate(suites):
        y = top + row * i
        w = max(bar * rate / fastest, 1.0) if rate else 0.0
        x0 = left + label_w
        words.append(f"{name} {rate:,.1f} per second ({_count(examples)} examples)")
        body.append(f'<g class="suite" data-suite="{_escape(name)}" '
                    f'data-rate="{rate:.1f}" data-examples="{examples}">')
        body.append(f"<title>{_escape(words[-1])}</title>")
        body.append(_text(x0 - 8, y + 15, name, anchor="end", size=11))
        if w:
            body.append(f'<rect x="{_num(x0)}" y="{_num(y + 4)}" width="{_num(w)}" '
                        f'height="{_num(row - 8)}" fill="{ACCEPTED}"/>')
        body.append(_text(x0 + w + 6, y + 15, f"{rate:,.1f}/s \u00b7 {_count(examples)} "
                                              f"examples", size=10))
        body.append("</g>")
    desc = f"{len(suites)} suites: " + "; ".join(words) + "."
    return _svg(width, top + row * len(suites) + 8, ident, title, desc, body)


def report_svgs(report: Mapping[str, Any]) -> dict[str, str]:
    """Both charts of one report: ``{"coverage": svg, "speed": svg}``."""
    return {"coverage": coverage_svg(report), "speed": speed_svg(report)}

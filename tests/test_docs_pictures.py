"""The docs' pictures: device grids (``shardlaw.grid_svg``), campaign charts
(``shardlaw.report_svg``), the directives that draw them at build time
(``docs/_ext/shardlaw_pictures.py``) and the CSS that keeps rule IDs whole and long lines
inside the column.

A grid is held against the spec's ``devices_indices_map``: one cell per distinct box, each
labelled with exactly the devices that hold that box.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from shardlaw.grid_svg import device_label, grid_svg, grid_svgs
from shardlaw.report_svg import coverage_svg, report_svgs, rule_counts, speed_svg
from shardlaw.sharding_text import parse_sharding
from shardlaw.spec import devices_indices_map

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
REPORT = ROOT / "notes" / "campaign-report-2026-12-02-e.json"

GRIDS = [
    ("mesh=2x4:x,y spec=x,y", (8, 8)),
    ("mesh=2x4:x,y spec=x", (8, 8)),                        # copies: 4 devices per block
    ("mesh=2x4:x,y spec=(x,y)", (16,)),                     # a vector, one row
    ("mesh=4x2:y,x devices=0,4,1,5,2,6,3,7 spec=y,x", (8, 4)),
    ("gspmd:{devices=[2,1,4]<=[8] last_tile_dim_replicate}", (4, 6)),
    ("mesh=2x2x2:x,y,z spec=x,y,z", (2, 4, 6)),             # rank 3: one grid per z block
    ("mesh=2x4:x,y", ()),                                   # a scalar
    ("single:3", (4, 2)),
]


def _blocks(svg: str) -> dict[tuple, tuple[int, ...]]:
    """The cells of a picture: box -> devices, read back from the SVG."""
    root = ElementTree.fromstring(svg)
    cells = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") != "block":
            continue
        box = tuple(tuple(int(n) for n in r.split(":")) for r in g.get("data-box").split())
        assert box not in cells, f"two cells for {box}"
        cells[box] = tuple(int(d) for d in g.get("data-devices").split())
        texts = [t.text for t in g.iter(f"{SVG}text")]
        assert texts == device_label(cells[box]), (box, texts)
        assert len(list(g.iter(f"{SVG}rect"))) == 1
    return cells


@pytest.mark.parametrize("text, shape", GRIDS)
def test_a_grid_has_one_cell_per_block_labelled_with_its_devices(text, shape):
    sharding = parse_sharding(text)
    svg = grid_svg(sharding, shape, ident="t")
    expected: dict[tuple, list[int]] = {}
    for device, box in devices_indices_map(sharding, shape).items():
        expected.setdefault(tuple(box), []).append(device)
    assert _blocks(svg) == {box: tuple(sorted(ids)) for box, ids in expected.items()}


@pytest.mark.parametrize("text, shape", GRIDS[:3])
def test_a_grid_says_what_it_shows_in_words(text, shape):
    root = ElementTree.fromstring(grid_svg(parse_sharding(text), shape, ident="g7"))
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "g7-title g7-desc"
    assert root.find(f"{SVG}title").get("id") == "g7-title"
    desc = root.find(f"{SVG}desc")
    assert desc.get("id") == "g7-desc" and "block" in desc.text
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"


def test_a_grid_is_the_same_bytes_every_time():
    sharding = parse_sharding("mesh=2x4:x,y devices=7,6,5,4,3,2,1,0 spec=y")
    assert grid_svg(sharding, (8, 8)) == grid_svg(sharding, (8, 8))


def test_the_highlighted_device_is_outlined_and_bracketed():
    svg = grid_svg(parse_sharding("mesh=2x4:x,y spec=x"), (8,), highlight=5)
    root = ElementTree.fromstring(svg)
    outlined = [g for g in root.iter(f"{SVG}g") if g.get("class") == "block"
                and g.find(f"{SVG}rect").get("stroke") == "#c00000"]
    assert [g.get("data-devices") for g in outlined] == ["4 5 6 7"]
    assert [t.text for t in outlined[0].iter(f"{SVG}text")] == ["4,[5],6,7"]


def test_device_labels_shorten_runs_and_stay_short():
    assert device_label([0, 1, 2, 3]) == ["0\u20133"]
    assert device_label([0, 4]) == ["0,4"]
    assert device_label([0, 1, 2, 3], highlight=2) == ["0,1,[2],3"]
    many = device_label(list(range(0, 200, 2)))
    assert len(many) == 4 and many[-1].startswith("\u2026")


def test_too_many_devices_are_named_not_drawn():
    svg = grid_svg(parse_sharding("mesh=1024:x spec=x"), (1024,))
    assert _blocks(svg) == {}
    assert "not drawn: 1024 devices" in svg


def test_panels_side_by_side_or_apart_share_one_cell_size():
    a, b = parse_sharding("mesh=2x4:x,y spec=x,y"), parse_sharding("mesh=2x4:x,y spec=x")
    together = ElementTree.fromstring(grid_svg([("A", a), ("B", b)], (8, 8)))
    assert len([g for g in together.iter(f"{SVG}g") if g.get("class") == "block"]) == 10
    apart = [ElementTree.fromstring(s) for s in grid_svgs([("A", a), ("B", b)], (8, 8),
                                                          ident="p")]
    sizes = {(r.get("width"), r.get("height")) for root in apart for r in root.iter(f"{SVG}rect")}
    assert len(sizes) == 1
    assert [root.get("aria-labelledby") for root in apart] == ["p-1-title p-1-desc",
                                                                "p-2-title p-2-desc"]


# --------------------------------------------------------------------------- campaign charts

def test_the_recorded_report_draws_every_rule_and_suite():
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    charts = report_svgs(report)
    coverage = ElementTree.fromstring(charts["coverage"])
    rows = {g.get("data-rule"): g for g in coverage.iter(f"{SVG}g") if g.get("class") == "rule"}
    assert set(rows) == set(report["rules"])
    for rule_id, counts in report["rules"].items():
        assert int(rows[rule_id].get("data-accepted")) == counts["accepted"]
        assert int(rows[rule_id].get("data-rejected")) == counts["rejected"]
    for side in report["never_hit"]:
        rule_id, _, _ = side.partition(" ")
        assert "never" in [t.text for t in rows[rule_id].iter(f"{SVG}text")], side
    speed = ElementTree.fromstring(charts["speed"])
    suites = [g.get("data-suite") for g in speed.iter(f"{SVG}g") if g.get("class") == "suite"]
    assert suites == list(report["suites"])


def test_rules_are_drawn_in_family_order():
    ids = [row[0] for row in rule_counts({"rules": {"DIV-2": {}, "VAL-10": {}, "VAL-2": {},
                                                    "ZZZ-1": {}, "DIV-1": {}}})]
    assert ids == ["VAL-2", "VAL-10", "DIV-1", "DIV-2", "ZZZ-1"]


def test_an_empty_report_draws_two_charts_that_say_so():
    charts = report_svgs({})
    for name, words in (("coverage", "No rule hits"), ("speed", "No suites")):
        root = ElementTree.fromstring(charts[name])
        assert any(words in (t.text or "") for t in root.iter(f"{SVG}text"))
    assert ElementTree.fromstring(coverage_svg({"rules": {"DIV-1": {"accepted": 0}}}))
    assert ElementTree.fromstring(speed_svg({"suites": {"laws": {"examples": 0}}}))


# --------------------------------------------------------------------------- the docs

@pytest.fixture(scope="module")
def pictures():
    pytest.importorskip("sphinx")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        return importlib.import_module("shardlaw_pictures")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


def test_the_grid_directive_reads_the_prove_syntax(pictures):
    panels, shape = pictures.read_grid("mesh=2x4:x,y spec=x,y shape=8,8", [])
    assert shape == (8, 8) and [label for label, _ in panels] == [""]
    panels, shape = pictures.read_grid("shape=8", ["a: mesh=2x4:x,y spec=x",
                                                   "b: gspmd:{devices=[8]<=[8]}"])
    assert shape == (8,) and [label for label, _ in panels] == ["a", "b"]


def test_a_placement_rule_page_draws_its_first_example(pictures):
    from shardlaw.spec import RULES
    import inspect
    rule = RULES["DIV-1"]
    original = inspect.unwrap(rule.function)
    example = next(b for b in re.split(r"\n\s*\n", inspect.getdoc(original))
                   if b.lstrip().startswith(">>>"))
    lines = pictures.example_grid(example, original.__module__, "DIV-1")
    assert lines[0] == ".. shardlaw-grid:: shape=8,8"
    assert 'NamedSharding(mesh, P("x", "y")): mesh=2x4:x,y spec=x,y' in [l.strip() for l in lines]
    assert set(pictures.PICTURED_FAMILIES) == {"LOW", "DIV", "DEV", "IDX", "REP"}


def test_the_css_keeps_rule_ids_whole_and_wraps_long_lines():
    css = (ROOT / "docs" / "_static" / "shardlaw.css").read_text(encoding="utf-8")
    rules = {selectors.strip(): body for selectors, body in
             re.findall(r"([^{}]+)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S))}

    def declared(selector: str, declaration: str) -> bool:
        return any(selector in [s.strip() for s in selectors.split(",")]
                   and declaration in body for selectors, body in rules.items())

    assert declared('a.reference[href*="#rule-"]', "white-space: nowrap")
    for block in ("div.highlight-pycon pre", "div.highlight-text pre"):
        assert declared(block, "white-space: pre-wrap")
        assert declared(block, "overflow-wrap: anywhere")
    assert declared("div.keep-columns pre", "white-space: pre")
    assert declared("figure.shardlaw-picture .shardlaw-svg svg", "max-width: 100%")

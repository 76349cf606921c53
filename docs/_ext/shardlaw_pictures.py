"""Sphinx extension: pictures drawn at build time, inline SVG in the HTML.

``.. shardlaw-grid::`` draws which device holds which block (:mod:`shardlaw.grid_svg`) of
shardings written as ``shardlaw prove`` reads them (:mod:`shardlaw.sharding_text`)::

    .. shardlaw-grid:: mesh=2x4:x,y spec=x,y shape=8,8
       :highlight: 5
       :caption: Device 5 holds rows 4:8, columns 2:4.

    .. shardlaw-grid:: shape=8,8

       P('x', 'y'): mesh=2x4:x,y spec=x,y
       its GSPMD rewrite: gspmd:{devices=[2,4]<=[8]}

(each content line ``label: sharding``, drawn side by side). ``.. shardlaw-campaign-chart::
PATH`` draws a recorded campaign report (:mod:`shardlaw.report_svg`), ``:chart: coverage``
or ``speed``; ``PATH`` is relative to the page.

:func:`example_grid` finds the shardings of a rule's first example for the rule pages
(``shardlaw_rules``), which show one grid per rule of the placement families.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import json
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

# The rule families whose pages show their first example's sharding.
PICTURED_FAMILIES = ("LOW", "DIV", "DEV", "IDX", "REP")
SHARDING_CLASSES = {"NamedSharding", "GSPMDSharding", "SingleDeviceSharding"}
MAX_PANELS = 3


def _figure(svg: str, caption: str, classes: list[str], directive: SphinxDirective
            ) -> list[nodes.Node]:
    figure = nodes.figure(classes=["shardlaw-picture"] + classes)
    figure += nodes.raw("", f'<div class="shardlaw-svg">{svg}</div>', format="html")
    if caption:
        parsed, messages = directive.state.inline_text(caption, directive.lineno)
        figure += nodes.caption(caption, "", *parsed)
        return [figure] + messages
    return [figure]


def _ident(directive: SphinxDirective, kind: str) -> str:
    return f"{kind}-{directive.env.new_serialno('shardlaw-picture')}"


# --------------------------------------------------------------------------- grids

def read_grid(argument: str, content: list[str]) -> tuple[list[tuple[str, Any]], tuple[int, ...]]:
    """The (label, sharding) panels and the shape a ``shardlaw-grid`` directive gives."""
    from shardlaw.sharding_text import ShardingTextError, parse_ints, parse_sharding

    words = argument.split()
    shapes = [w for w in words if w.startswith("shape=")]
    if len(shapes) != 1:
        raise ShardingTextError("give the shape once, as shape=8,8 (shape= for a scalar)")
    shape = tuple(parse_ints(shapes[0][len("shape="):], "shape="))
    text = " ".join(w for w in words if not w.startswith("shape="))
    panels = [("", parse_sharding(text))] if text else []
    for line in content:
        if line.strip():
            label, sep, written = line.partition(": ")
            if not sep:
                raise ShardingTextError(f"a panel is 'label: sharding', got {line.strip()!r}")
            panels.append((label.strip(), parse_sharding(written.strip())))
    if not panels:
        raise ShardingTextError("no sharding to draw")
    return panels, shape


class GridDirective(SphinxDirective):
    """``.. shardlaw-grid:: SHARDING shape=DIMS``: which device holds which block."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = {"caption": directives.unchanged, "title": directives.unchanged,
                   "highlight": directives.nonnegative_int}

    def run(self) -> list[nodes.Node]:
        from shardlaw.grid_svg import grid_svg, grid_svgs
        from shardlaw.sharding_text import ShardingTextError
        from shardlaw.spec import Rejection

        try:
            panels, shape = read_grid(self.arguments[0] if self.arguments else "",
                                      list(self.content))
            caption = self.options.get("caption", "")
            highlight, ident = self.options.get("highlight"), _ident(self, "grid")
            if len(panels) == 1 and not panels[0][0]:
                # the caption says what the picture shows; its <title> says it to a reader
                svgs = [grid_svg(panels[0][1], shape, highlight=highlight, ident=ident,
                                 title=self.options.get("title") or " ".join(caption.split()),
                                 show_title=not caption)]
            else:  # one picture per panel: side by side, or stacked on a narrow screen
                svgs = grid_svgs(panels, shape, highlight=highlight, ident=ident)
        except (ShardingTextError, Rejection) as problem:
            raise self.error(f"shardlaw-grid: {problem}") from None
        return _figure("".join(svgs), caption, ["shardlaw-grid-figure"], self)


# --------------------------------------------------------------------------- campaigns

class CampaignChartDirective(SphinxDirective):
    """``.. shardlaw-campaign-chart:: REPORT.json``: a recorded campaign, drawn."""

    required_arguments = 1
    option_spec = {"chart": lambda text: directives.choice(text, ("coverage", "speed")),
                   "caption": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        from shardlaw.report_svg import coverage_svg, speed_svg

        relative, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(relative)
        try:
            report = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as problem:
            raise self.error(f"shardlaw-campaign-chart: cannot read {relative}: {problem}")
        chart = self.options.get("chart", "coverage")
        draw = coverage_svg if chart == "coverage" else speed_svg
        svg = draw(report, ident=_ident(self, f"campaign-{chart}"))
        return _figure(svg, self.options.get("caption", ""), [f"shardlaw-{chart}-figure"], self)


# --------------------------------------------------------------------------- rule pages

def _called(node: ast.AST) -> str | None:
    func = getattr(node, "func", None)
    return func.id if isinstance(func, ast.Name) else \
        func.attr if isinstance(func, ast.Attribute) else None


def _literal_shape(node: ast.AST | None) -> tuple[int, ...] | int | None:
    """A shape (a tuple of ints) or a rank (an int) written as a literal, else None."""
    try:
        value = ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return value
    return None


def _shape_after(tree: ast.AST, call: ast.Call) -> tuple[int, ...] | int | None:
    """The argument after ``call`` in the call that takes it: a shape, or a rank."""
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Call) and call in parent.args:
            i = parent.args.index(call)
            return _literal_shape(parent.args[i + 1] if i + 1 < len(parent.args) else None)
    return None


def _places(shardings: list[Any], shape: tuple[int, ...]) -> bool:
    from shardlaw.spec import Rejection, devices_indices_map
    try:
        for sharding in shardings:
            devices_indices_map(sharding, shape)
    except Rejection:
        return False
    return True


def example_grid(example: str, module: str, rule_id: str) -> list[str]:
    """A ``shardlaw-grid`` directive for the shardings of the first statement of a rule's
    example that builds one (run in the rule's module), or [] when there is none to draw
    (no sharding, an abstract mesh, a partly manual one, or a statement that refuses)."""
    from shardlaw.sharding_text import sharding_text

    # what the doctest sees: shardlaw.spec's names (doctest_global_setup), then the module's
    spec = importlib.import_module("shardlaw.spec")
    namespace = {name: getattr(spec, name) for name in spec.__all__}
    namespace.update((k, v) for k, v in vars(importlib.import_module(module)).items()
                     if not k.startswith("__"))
    for statement in doctest.DocTestParser().get_examples(example):
        try:
            tree = ast.parse(statement.source)
        except SyntaxError:
            return []
        calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)
                        and _called(n) in SHARDING_CLASSES),
                       key=lambda n: (n.lineno, n.col_offset))
        try:
            if not calls:
                exec(compile(tree, f"<{rule_id} example>", "exec"), namespace)
                continue
            calls = calls[:MAX_PANELS]
            shardings = [eval(compile(ast.Expression(c), f"<{rule_id} example>", "eval"),
                              namespace) for c in calls]
            panels = [(ast.get_source_segment(statement.source, c) or "", sharding_text(s))
                      for c, s in zip(calls, shardings)]
        except Exception:  # a refusal, or a sharding the text form cannot say
            return []
        given = _shape_after(tree, calls[0])
        if isinstance(given, tuple) and _places(shardings, given):
            shape, how = given, "on shape"
        else:
            rank = given if isinstance(given, int) else max(
                [len(s.spec) for s in shardings if hasattr(s, "spec")], default=1) or 1
            candidates = [(n,) * rank for n in (8, 16, 32)]
            shape = next((c for c in candidates if _places(shardings, c)), None)
            if shape is None:
                return []
            how = "drawn for shape"
        what = "sharding" if len(panels) == 1 else "shardings"
        caption = f"The first example's {what}, {how} {shape}: which device holds which block."
        lines = [f".. shardlaw-grid:: shape={','.join(map(str, shape))}",
                 f"   :caption: {caption}", ""]
        lines += [f"   {label}: {text}" for label, text in panels]
        return lines + [""]
    return []


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("shardlaw-grid", GridDirective)
    app.add_directive("shardlaw-campaign-chart", CampaignChartDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

"""The engine's floor plan: rooms of a size a reader can hold, each class named once.

Measured with ``ast`` over every ``.py`` file of ``engine/``: no module over 600 lines, no
class over 300, no function or method over 60 (decorators and docstrings included), and no
two classes of the engine under one name (the engine's internal records — ``CallDecision``,
``DispatchPlan`` — are named apart from the JAX-like stage objects ``Traced``, ``Lowered``,
``Compiled``). A room that grows past its size is split by concern, not squeezed; the
the contributor page's layout entry for ``engine/`` (docs/contributing.rst) names every
module, so a newcomer finds each room.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
MODULE_LINES = 600
CLASS_LINES = 300
FUNCTION_LINES = 60


def _modules() -> list[tuple[str, str, ast.Module]]:
    out = []
    for path in sorted(ENGINE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        out.append((str(path.relative_to(ENGINE.parent)), text, ast.parse(text)))
    return out


def _size(node: ast.AST) -> int:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return node.end_lineno - first + 1   # type: ignore[attr-defined]


def _oversized() -> list[str]:
    found = []
    for where, text, tree in _modules():
        lines = len(text.splitlines())
        if lines > MODULE_LINES:
            found.append(f"{where}: {lines} lines (at most {MODULE_LINES})")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _size(node) > CLASS_LINES:
                found.append(f"{where}:{node.lineno} class {node.name}: {_size(node)} lines "
                             f"(at most {CLASS_LINES})")
            elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and _size(node) > FUNCTION_LINES):
                found.append(f"{where}:{node.lineno} def {node.name}: {_size(node)} lines "
                             f"(at most {FUNCTION_LINES})")
    return found


def test_the_walk_sees_the_engine():
    names = {where for where, _, _ in _modules()}
    assert {"engine/jit.py", "engine/aot.py", "engine/stages.py"} <= names


def test_no_room_of_the_engine_is_too_large():
    found = _oversized()
    assert not found, "split these by concern:\n  " + "\n  ".join(found)


def test_every_engine_class_has_a_name_of_its_own():
    places: dict[str, list[str]] = {}
    for where, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                places.setdefault(node.name, []).append(f"{where}:{node.lineno}")
    shared = {name: where for name, where in places.items() if len(where) > 1}
    assert not shared, f"classes of the engine that share a name: {shared}"


def test_the_contributor_layout_names_every_engine_module():
    text = (ENGINE.parent / "docs" / "contributing.rst").read_text(encoding="utf-8")
    row = re.search(r"^``engine/``[^\n]*\n((?:   [^\n]*\n)+)", text, re.M)
    assert row is not None, "docs/contributing.rst has no layout entry for engine/"
    named = set(re.findall(r"``([a-z_]+)\.py``", row.group(1)))
    present = {p.stem for p in ENGINE.glob("*.py")} - {"__init__"}
    assert named == present, sorted(named ^ present)

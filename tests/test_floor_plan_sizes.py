"""The floor plan's room sizes for the spec, the properties and the package (issue 22).

Measured with ``ast`` over every ``.py`` file of ``spec/``, ``properties/`` and ``src/``,
their sub-folders included: no module over 1,000 lines, no class over 300 lines, no
function or method over 60 lines (a def or class from its ``def``/``class`` line to its last
line: ``end_lineno - lineno + 1``, docstring included, decorators not). A room that grows
past its size is split by concern, not squeezed. ``engine/`` has its own, tighter plan
(``tests/test_floor_plan_engine.py``: 600-line modules).

No room is over today. A room over its size that is known and being split goes in
:data:`KNOWN`, and the list can only shrink: an exception that is no longer needed fails
:func:`test_the_known_exceptions_are_still_needed` until it is removed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("spec", "properties", "src")
MODULE_LINES = 1000
CLASS_LINES = 300
FUNCTION_LINES = 60

# (file, what) of each room over its size that is known and temporary; what is "module"
# for the module's length, else "class NAME" or "def NAME".
KNOWN: set[tuple[str, str]] = set()


def _modules() -> list[tuple[str, str, ast.Module]]:
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            out.append((path.relative_to(ROOT).as_posix(), text, ast.parse(text, str(path))))
    return out


def _oversized() -> dict[tuple[str, str], str]:
    """Every room over its size: (file, what) -> the message that names it."""
    found = {}
    for where, text, tree in _modules():
        lines = len(text.splitlines())
        if lines > MODULE_LINES:
            found[where, "module"] = f"{where}: {lines} lines (at most {MODULE_LINES})"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                kind, limit = "class", CLASS_LINES
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind, limit = "def", FUNCTION_LINES
            else:
                continue
            size = node.end_lineno - node.lineno + 1
            if size > limit:
                found[where, f"{kind} {node.name}"] = (
                    f"{where}:{node.lineno} {kind} {node.name}: {size} lines (at most {limit})")
    return found


def test_the_walk_sees_every_folder():
    names = {where for where, _, _ in _modules()}
    assert {"spec/jit/call.py", "spec/core/rules.py", "properties/registry.py",
            "src/shardlaw/cli.py"} <= names


def test_no_room_is_too_large():
    found = [message for key, message in sorted(_oversized().items()) if key not in KNOWN]
    assert not found, "split these by concern:\n  " + "\n  ".join(found)


def test_the_known_exceptions_are_still_needed():
    over = _oversized()
    done = sorted(f"{where} ({what})" for where, what in KNOWN if (where, what) not in over)
    assert not done, ("within their limits now; remove them from KNOWN in "
                      "tests/test_floor_plan_sizes.py:\n  " + "\n  ".join(done))

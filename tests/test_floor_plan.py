"""The spec's floor plan: layers import downward only, JAX and z3 stay in their rooms, the
README's layout table names every module, and the earlier module paths still import."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from shardlaw.spec.layers import LAYERS, MOVED, RANK

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec"
MODULES = sorted(p for p in SPEC.rglob("*.py"))
# what each room may import besides the standard library and the spec
ALLOWED = {"bridge": {"jax", "jaxlib", "numpy"}, "prove": {"z3"}}
# data the spec shares with the engine, which never imports the spec
SHARED = {"shardlaw.rule_index"}


def _layer(path: Path) -> str | None:
    parts = path.relative_to(SPEC).parts
    return parts[0] if len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative ones resolved."""
    package = ["shardlaw", "spec", *path.relative_to(SPEC).parts[:-1]]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if not node.module:   # from . import a, b: each is a module
                    found += [(node.lineno, f"{name}.{a.name}") for a in node.names]
                    continue
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def test_every_spec_module_sits_in_a_layer():
    layers = {layer for layer, _ in LAYERS}
    assert set(RANK) == layers
    loose = [p.name for p in MODULES if _layer(p) is None]
    assert sorted(loose) == ["__init__.py", "layers.py"], loose
    assert {_layer(p) for p in MODULES} - {None} == layers


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SPEC)))
def test_imports_go_down_and_stay_in_their_rooms(path):
    layer = _layer(path)
    wrong = []
    for line, name in _imports(path):
        top = name.split(".")[0]
        if name in SHARED:
            continue
        if name.startswith("shardlaw.spec."):
            target = name.split(".")[2]
            if layer is None or target not in RANK:
                continue
            if target != layer and RANK[target] >= RANK[layer]:
                wrong.append(f"line {line}: {layer} imports {name} ({target} is not below it)")
        elif name == "shardlaw.spec" and layer is not None:
            wrong.append(f"line {line}: {layer} imports the package root")
        elif name.startswith("shardlaw."):
            wrong.append(f"line {line}: the spec imports {name}")
        elif top not in sys.stdlib_module_names and top != "__future__":
            if top not in ALLOWED.get(layer, set()):
                wrong.append(f"line {line}: {layer or 'spec'} imports {name}")
    assert not wrong, f"{path.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_the_readme_layout_names_every_spec_module():
    text = (ROOT / "README.md").read_text()
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `spec/([a-z_]+)/` \|([^\n]*)$", text, re.M)}
    assert set(rows) == set(RANK), sorted(rows)
    for layer, row in rows.items():
        named = set(re.findall(r"`([a-z_]+)\.py`", row))
        present = {p.stem for p in (SPEC / layer).glob("*.py")} - {"__init__"}
        assert named == present, (layer, sorted(named ^ present))


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_earlier_module_paths_still_import(old):
    sys.modules.pop(f"shardlaw.spec.{old}", None)   # imported afresh, so it warns
    with pytest.warns(DeprecationWarning, match=f"shardlaw.spec.{old} moved to"):
        before = importlib.import_module(f"shardlaw.spec.{old}")
    now = importlib.import_module(f"shardlaw.spec.{MOVED[old]}")
    assert before is now and now.__spec__.name == now.__name__

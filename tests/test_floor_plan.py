"""The spec's floor plan: layers import downward only, JAX and z3 stay in their rooms, the
contributor page (docs/contributing.rst) names every module, the README's layout is one
short line per folder, and the earlier module paths still import."""

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
SHARED = {"shardlaw.rule_index", "shardlaw.compiled_hlo"}


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


def layout_entries(text: str) -> dict[str, str]:
    """The folders of docs/contributing.rst's layout and what each entry says (its
    definition: the indented lines under the ````folder/```` term)."""
    return {m[1]: m[2] for m in re.finditer(r"^``([a-z_./]+/)``[^\n]*\n((?:   [^\n]*\n)+)",
                                            text, re.M)}


def test_the_contributor_layout_names_every_spec_module():
    text = (ROOT / "docs" / "contributing.rst").read_text(encoding="utf-8")
    rows = {folder[len("spec/"):-1]: row for folder, row in layout_entries(text).items()
            if folder.startswith("spec/") and folder != "spec/"}
    assert set(rows) == set(RANK), sorted(rows)
    for layer, row in rows.items():
        named = set(re.findall(r"``([a-z_]+)\.py``", row))
        present = {p.stem for p in (SPEC / layer).glob("*.py")} - {"__init__"}
        assert named == present, (layer, sorted(named ^ present))


def test_the_readme_layout_is_one_short_line_per_folder():
    """The README's layout table: every folder of the repository (and each layer of the
    spec) on one line of its own, the detail left to docs/contributing.rst."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+/)` \| [^|\n]+ \|$", section, re.M)
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(lines) and all(len(line) <= 100 for line in lines), lines
    folders = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and _tracked(p)}
    expected = folders - {"src/"} | {"src/shardlaw/"} | {f"spec/{layer}/" for layer in RANK}
    assert set(rows) == expected, sorted(set(rows) ^ expected)
    assert "docs/contributing.rst" in section
    # every folder of the README is described in the contributor page
    assert set(rows) <= set(layout_entries(
        (ROOT / "docs" / "contributing.rst").read_text(encoding="utf-8")))


def _tracked(folder: Path) -> bool:
    """A folder of the repository rather than of a tool (.git, a virtual environment,
    caches, build output)."""
    return (not folder.name.startswith(".") or folder.name == ".ci") and \
        folder.name not in {"build", "dist", "__pycache__"} and \
        not folder.name.endswith(".egg-info") and not (folder / "pyvenv.cfg").exists()


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_earlier_module_paths_still_import(old):
    sys.modules.pop(f"shardlaw.spec.{old}", None)   # imported afresh, so it warns
    with pytest.warns(DeprecationWarning, match=f"shardlaw.spec.{old} moved to"):
        before = importlib.import_module(f"shardlaw.spec.{old}")
    now = importlib.import_module(f"shardlaw.spec.{MOVED[old]}")
    assert before is now and now.__spec__.name == now.__name__

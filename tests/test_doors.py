"""Doors, not holes: a name another module needs is public there (issue 31, part 5).

Every ``.py`` file of the checkout's code (``spec/``, ``engine/``, ``properties/``,
``src/shardlaw/``, ``tests/``, ``docs/_ext/``, ``benchmarks/``, ``examples/``) is read with
``ast``. A *hole* is a private name (``_name``, not a dunder) of one shardlaw module used by
another: imported (``from shardlaw.spec.core.rules import _x``, relative imports resolved),
read off the module (``rules._x``, where ``rules`` is bound to a shardlaw module by an
import) or named to ``getattr``/``setattr`` (``monkeypatch.setattr(rules, "_x", ...)``). JAX's own private modules are not shardlaw's rooms and are not counted here.

A hole that is known and allowed is in :data:`INTERNALS`: a test (or the fuzz suite) that
exercises an internal on purpose, each with its reason. Every other name that crosses a
module boundary is public in the module that defines it. The list only shrinks: an entry
whose hole is gone fails :func:`test_every_allowed_hole_is_still_there` until it is removed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("spec", "engine", "properties", "src/shardlaw", "tests", "docs/_ext", "benchmarks",
           "examples")
# folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"src/shardlaw": "shardlaw", "spec": "shardlaw.spec", "engine": "shardlaw.engine",
            "properties": "shardlaw.properties"}

Hole = tuple[str, str, str]   # (importing file, the module whose name it is, the name)

# Tests that reach an internal on purpose: (file, module, name) -> why.
INTERNALS: dict[Hole, str] = {
    ("tests/test_campaign.py", "shardlaw.campaign", "_share"):
        "the --share argument's parser, tested on its bad spellings directly",
    ("tests/test_campaign.py", "shardlaw.campaign_plugin", "_shares"):
        "the plugin's split of time among suites, tested without a campaign run",
    ("tests/test_campaign.py", "shardlaw.campaign_plugin", "_Worker"):
        "an inactive worker state swapped in to count examples without xdist",
    ("tests/test_campaign.py", "shardlaw.campaign_plugin", "_count_examples"):
        "the wrapper that clears JAX's caches every so many examples, called directly",
    ("tests/test_stages.py", "shardlaw.spec.jit.pipeline", "_refused"):
        "the pipeline's one exit for refusals, wrapped to record every rejection as raised",
    ("properties/suites/fuzz.py", "shardlaw.properties.fuzz_engine", "_child_command"):
        "the engine fuzzer's child command, replaced by a script that crashes on purpose",
}

ALLOWED: dict[Hole, str] = dict(INTERNALS)


def _module_name(where: str) -> tuple[str, bool]:
    """The dotted name a file imports as, and whether it is a package's ``__init__``."""
    parts = list(Path(where).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    for folder, name in PACKAGES.items():
        depth = len(Path(folder).parts)
        if tuple(parts[:depth]) == Path(folder).parts:
            return ".".join([name, *parts[depth:]]), package
    if parts[:2] == ["docs", "_ext"]:   # Sphinx puts docs/_ext on the path
        return ".".join(parts[2:]), package
    return ".".join(parts), package


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def holes_in(where: str, source: str, modules: set[str]) -> list[tuple[int, str, str]]:
    """(line, module, name) for each private name of another shardlaw module ``source``
    uses: imported from it, or read off it (or named to ``getattr``/``setattr``) where an
    import binds the module to a name."""
    me, package = _module_name(where)
    here = me.split(".") if package else me.split(".")[:-1]
    bound: dict[str, str] = {}   # a local name -> the module it is bound to
    found = []
    tree = ast.parse(source, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _private(alias.name) and module != me and module.startswith("shardlaw"):
                    found.append((node.lineno, module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            module = _bound_module(node.value, bound)
            if module in modules and module != me:
                found.append((node.lineno, module, node.attr))
        elif isinstance(node, ast.Call) and _names_an_attribute(node) and \
                _private(node.args[1].value):   # setattr(module, "_x", ...), monkeypatch's too
            module = _bound_module(node.args[0], bound)
            if module in modules and module != me:
                found.append((node.lineno, module, node.args[1].value))
    return sorted(found)


def _bound_module(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The module an expression names (``H``, ``shardlaw.spec.core``), if an import bound it."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in bound:
        return ".".join([bound[node.id], *reversed(chain)])
    return None


def _names_an_attribute(call: ast.Call) -> bool:
    """Whether a call is ``getattr``/``setattr``/``delattr`` (a function or a method such as
    ``monkeypatch.setattr``) of an object and an attribute named by a string."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in ("getattr", "setattr", "delattr") and len(call.args) >= 2 and \
        isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)


def _files() -> dict[str, str]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                out[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    return out


def find_holes() -> dict[Hole, list[int]]:
    """Every hole of the checkout: (file, module, name) -> the lines where it is used."""
    files = _files()
    modules = {_module_name(where)[0] for where in files}
    holes: dict[Hole, list[int]] = {}
    for where, source in files.items():
        for line, module, name in holes_in(where, source, modules):
            holes.setdefault((where, module, name), []).append(line)
    return holes


HOLES = find_holes()


def test_no_module_reaches_into_another_modules_private_names():
    unlisted = sorted(set(HOLES) - set(ALLOWED))
    assert not unlisted, (
        f"{len(unlisted)} private name(s) used across modules; give the neighbour a public, "
        "documented name (or move the function where it is used):\n" + "\n".join(
            f"{where}:{HOLES[where, module, name][0]}: {module}.{name}"
            for where, module, name in unlisted))


def test_every_allowed_hole_is_still_there():
    gone = sorted(set(ALLOWED) - set(HOLES))
    assert not gone, "no longer used; remove from the allow-list in tests/test_doors.py:\n" + \
        "\n".join(f"{where}: {module}.{name}" for where, module, name in gone)


def test_every_allowed_hole_says_why():
    """Each entry names the internal a test reaches on purpose and why, in a sentence of its
    own: not a placeholder such as the "pending: ..." of rooms once being rebuilt."""
    for hole, reason in ALLOWED.items():
        assert len(reason.split()) >= 5 and not reason.lower().startswith(
            ("pending", "todo", "tbd")), (hole, reason)
        assert hole[0].startswith(("tests/", "properties/suites/")), hole


def test_the_walk_sees_each_kind_of_hole():
    """The walk finds an imported name, a relative import, a name read off a module and one
    named to setattr, and leaves alone a module's own names, dunders, other libraries'
    private modules and objects that are not modules."""
    modules = {"shardlaw.spec.core.rules", "shardlaw.spec.core.values",
               "shardlaw.properties.jit_harness"}
    source = "\n".join([
        "from shardlaw.spec.core.rules import _bounded, explain, __all__",
        "from .rules import _sentence",
        "from ..core.values import _check",
        "from shardlaw.properties import jit_harness as H",
        "import shardlaw.spec.core.values",
        "from jax._src.lib import _jax",
        "from shardlaw.spec.core.hlo import _mine",
        "H._build(1), H.public(2), shardlaw.spec.core.values._devices, _jax.x",
        "monkeypatch.setattr(H, '_kind', None), getattr(H, 'public'), setattr(x, '_y', 1)",
    ])
    found = holes_in("spec/core/hlo.py", source, modules)
    assert found == [
        (1, "shardlaw.spec.core.rules", "_bounded"), (2, "shardlaw.spec.core.rules", "_sentence"),
        (3, "shardlaw.spec.core.values", "_check"),
        (8, "shardlaw.properties.jit_harness", "_build"),
        (8, "shardlaw.spec.core.values", "_devices"),
        (9, "shardlaw.properties.jit_harness", "_kind")], found

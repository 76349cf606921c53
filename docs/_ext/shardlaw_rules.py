"""Sphinx extension: write one page per rule family from the rule registry.

At ``config-inited`` it imports the specification and every module that registers
properties (``shardlaw.properties.*`` and the test modules in ``tests/``), then writes
``docs/rules/index.rst`` and ``docs/rules/<family>.rst``. Each rule gets the same entry:
its ID, its statement, the JAX function it mirrors, its source, its docstring examples as
``.. doctest::`` blocks (run by ``sphinx-build -b doctest``) and the properties that check it.
``docs/rules/`` is generated and git-ignored; files are rewritten only when they change.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]

# Family prefix -> page title; a family missing here is titled by its prefix.
FAMILY_TITLES = {
    "HLO": "HLO shardings: canonical form, text, parsing",
    "NS": "NamedSharding validation",
    "LOW": "Lowering to HLO shardings",
    "DIV": "Dividing dimensions",
    "DEV": "Devices",
    "IDX": "Indices: which device holds which box",
    "REP": "Replication",
    "EQ": "Equivalence",
    "CALL": "Call descriptions",
    "JIT": "jit options and sharding leaves",
    "TREE": "Matching shardings to pytrees",
    "FIT": "Arguments and results fit their shardings",
    "RES": "Resolving argument shardings",
    "LAY": "Layouts: Format leaves, arrays' layouts, results' layouts",
    "KEEP": "Kept inputs",
    "DA": "The device assignment",
    "EXE": "What the compiled program receives",
    "OUT": "Result shardings",
    "AOT": "Calling an ahead-of-time compiled executable",
    "CACHE": "When jit traces, lowers and compiles again; the cache policy",
    "VEC": "Test vectors: reading and writing",
    "SMT": "Proving placement equivalence with z3",
}


# --------------------------------------------------------------------------- property modules

def property_modules() -> list[str]:
    """Names of the modules that may register properties with ``checks``."""
    names: list[str] = []
    try:
        import shardlaw.properties as properties
        names += [m.name for m in pkgutil.iter_modules(properties.__path__, "shardlaw.properties.")]
    except ImportError:
        pass
    tests = ROOT / "tests"
    if tests.is_dir():
        names += sorted(p.stem for p in tests.glob("test_*.py"))
    return names


def load_checks() -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Import the property modules; return CHECKS, the modules that could not be imported
    (ImportError) and those that failed with another error."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    failed: list[str] = []
    missing: list[str] = []
    if (ROOT / "tests" / "conftest.py").exists():
        try:
            importlib.import_module("conftest")
        except Exception as error:  # a broken conftest breaks the test suite too
            failed.append(f"conftest ({type(error).__name__}: {error})")
    for name in property_modules():
        try:
            importlib.import_module(name)
        except ImportError as error:
            # a module others are still writing may import what does not exist yet
            missing.append(f"{name} ({type(error).__name__}: {error})")
        except Exception as error:
            failed.append(f"{name} ({type(error).__name__}: {error})")
    from shardlaw.properties.registry import CHECKS
    return CHECKS, missing, failed


# --------------------------------------------------------------------------- text helpers

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"(``.+?``)")


def prose(text: str) -> str:
    """Docstring prose as safe reStructuredText: roles become literals, markup is escaped."""
    text = _ROLE.sub(r"``\1``", text)
    out = []
    for i, part in enumerate(_LITERAL.split(text)):
        if i % 2:
            out.append(part)
        else:
            for ch in "\\*`|_[":
                part = part.replace(ch, "\\" + ch)
            out.append(part)
    return "".join(out)


def split_docstring(doc: str) -> tuple[list[str], list[str]]:
    """The prose paragraphs and the example blocks (``>>>`` runs) of a docstring."""
    paragraphs, examples = [], []
    for block in re.split(r"\n\s*\n", doc.strip()):
        if block.lstrip().startswith(">>>"):
            examples.append(block)
        else:
            paragraphs.append(block)
    return paragraphs, examples


def indent(text: str, by: str = "   ") -> str:
    return textwrap.indent(text, by, lambda line: True).replace(by + "\n", "\n")


# --------------------------------------------------------------------------- pages

def rule_entry(rule: Any, checks: dict[str, list[str]]) -> str:
    function = rule.function
    original = getattr(function, "__wrapped__", function)
    doc = inspect.getdoc(original) or ""
    paragraphs, examples = split_docstring(doc)
    title = f"{rule.id}: ``{original.__name__}``"
    lines = [f".. _rule-{rule.id}:", "", title, "-" * len(title), "",
             f":Statement: {prose(rule.statement)}",
             f":Rule ID: ``{rule.id}``",
              f":Defined in: ``{original.__module__}.{original.__qualname__}``",
              f":Mirrors: ``{rule.mirrors}``", ""]
    # the docstring's first paragraph holds the statement; later paragraphs explain it
    for paragraph in paragraphs[1:]:
        lines += [prose(" ".join(paragraph.split())), ""]

    lines += ["**Examples** (run by ``sphinx-build -b doctest``)", ""]
    if examples:
        module = original.__module__
        lines += [f".. testsetup:: {rule.id}", "",
                  f"   import importlib as _importlib",
                  f"   globals().update({{k: v for k, v in vars(_importlib.import_module("
                  f"{module!r})).items() if not k.startswith('__')}})", ""]
        for example in examples:
            lines += [f".. doctest:: {rule.id}", "", indent(example), ""]
    else:
        lines += ["This rule has no example yet.", ""]

    lines += ["**Checked by**", ""]
    names = checks.get(rule.id, [])
    if names:
        lines += [f"* ``{property_name(name)}``" for name in names] + [""]
    else:
        lines += ["No property checks this rule yet.", ""]

    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        source = "# source not available"
    lines += ["**Source**", "", ".. code-block:: python", "", indent(textwrap.dedent(source)), ""]
    return "\n".join(lines)


def property_name(qualified: str) -> str:
    """A property's name as pytest shows it: helper scopes (``f.<locals>.``) left out."""
    return re.sub(r"(?:[\w]+\.<locals>\.)+", "", qualified)


def family_page(family: str, rules: list[Any], checks: dict[str, list[str]]) -> str:
    title = f"{family}: {FAMILY_TITLES.get(family, family + ' rules')}"
    lines = [".. This page is generated by docs/_ext/shardlaw_rules.py; do not edit.", "",
             title, "=" * len(title), "",
             "Rules of this family:", ""]
    lines += [f"* :ref:`rule-{r.id}` — {prose(r.statement)}" for r in rules] + [""]
    for r in rules:
        lines.append(rule_entry(r, checks))
    return "\n".join(lines)


def index_page(families: list[str], rules_count: int, checks: dict[str, list[str]],
               unchecked: list[str], missing: list[str]) -> str:
    lines = [".. This page is generated by docs/_ext/shardlaw_rules.py; do not edit.", "",
             "The rules", "=========", "",
             f"The specification has {rules_count} rules in {len(families)} families. Every "
             "entry gives the rule's ID, its statement (the first sentence of its docstring), "
             "the JAX function it mirrors, its examples, which this documentation runs as "
             "doctests, the properties that check it, and its source.", ""]
    if unchecked:
        lines += ["Rules that no property checks yet: "
                  + ", ".join(f":ref:`rule-{r}`" for r in unchecked) + ".", ""]
    else:
        lines += ["Every rule is checked by at least one property.", ""]
    if missing:
        lines += ["Property modules that could not be imported when this page was built:", ""]
        lines += [f"* {prose(name)}" for name in missing] + [""]
    lines += [".. toctree::", "   :maxdepth: 2", ""]
    lines += [f"   {family.lower()}" for family in families] + [""]
    return "\n".join(lines)


# The value types, in the order the values page lists them: (group, names).
VALUE_TYPES = [
    ("Devices and meshes", ["Iota", "Device", "DeviceList", "AxisType", "AbstractMesh", "Mesh"]),
    ("Partition specs", ["PartitionSpec", "UNCONSTRAINED"]),
    ("HLO shardings", ["HloSharding", "Replicated", "Maximal", "Manual", "Unreduced", "Tiled",
                       "SubgroupType"]),
    ("Shardings", ["NamedSharding", "SingleDeviceSharding", "GSPMDSharding", "UNSPECIFIED",
                   "AUTO"]),
    ("Rules and rejections", ["Rule", "Rejection"]),
]


def value_types_include() -> str:
    """The list of value types with their docstrings (included by ``values.rst``)."""
    import shardlaw.spec as spec

    lines = [".. This file is generated by docs/_ext/shardlaw_rules.py; do not edit.", ""]
    for group, names in VALUE_TYPES:
        lines += [group, "-" * len(group), ""]
        for name in names:
            value = getattr(spec, name, None)
            if value is None:
                continue
            kind = "class" if inspect.isclass(value) else "marker"
            doc = inspect.getdoc(value) or ""
            module = getattr(value, "__module__", "shardlaw.spec") if kind == "class" \
                else "shardlaw.spec"
            paragraphs = [prose(" ".join(p.split())) for p in split_docstring(doc)[0]]
            lines += [f"``{name}`` ({kind}, ``{module}``)",
                      indent("\n\n".join(paragraphs) or "(no description)"), ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app: Any, config: Any) -> None:
    from shardlaw.spec import RULES

    checks, missing, failed = load_checks()
    for name in missing:
        logger.info("shardlaw: property module not imported: %s", name)
    for name in failed:
        logger.warning("shardlaw: property module failed to import: %s", name)

    families: dict[str, list[Any]] = {}
    for r in RULES.values():
        families.setdefault(r.family, []).append(r)
    for rules in families.values():
        rules.sort(key=lambda r: int(r.id.rsplit("-", 1)[1]))

    out = Path(app.srcdir) / "rules"
    out.mkdir(exist_ok=True)
    wanted = {"index.rst"}
    unchecked = [r.id for rules in families.values() for r in rules if not checks.get(r.id)]
    _write(out / "index.rst", index_page(list(families), len(RULES), checks, unchecked, missing))
    for family, rules in families.items():
        name = f"{family.lower()}.rst"
        wanted.add(name)
        _write(out / name, family_page(family, rules, checks))
    _write(out / "value-types.inc", value_types_include())
    for stale in out.glob("*.rst"):
        if stale.name not in wanted:
            stale.unlink()


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

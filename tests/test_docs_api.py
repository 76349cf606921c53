"""The API reference (docs/api/): every name a page cites links to a documented object.

The docs build resolves a reference such as ``:func:`shardlaw.spec.jit_call``` to the page
of the module that defines the object (``docs/conf.py``: ``_canonical``). Building the docs
takes minutes, so this test reads the pages' references and asks the same questions the
build does: the name imports, its defining module is one the API reference generates a
page for, and autodoc documents it there (a public name with a docstring).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REFERENCE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj):"
                       r"`(?:[^`<]*<)?~?([^`<>]*?)>?`")


@pytest.fixture(scope="module")
def conf():
    spec = importlib.util.spec_from_file_location("shardlaw_docs_conf", DOCS / "conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _references() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.rst")):
        for target in REFERENCE.findall(page.read_text(encoding="utf-8")):
            if target.startswith("shardlaw."):
                found.append((page.name, target))
    return found


def _imported(conf, name: str):
    return conf._imported(name)


def _in_scope(conf, module: str) -> bool:
    """Whether the API reference generates a page for ``module`` (docs/api/index.rst)."""
    listed = re.findall(r"^   (shardlaw[.\w]*)$", (DOCS / "api" / "index.rst").read_text(),
                        re.M)
    skipped = conf.autosummary_context["skipped_modules"]
    unopened = conf.autosummary_context["unopened_packages"]
    return (any(module == top or module.startswith(top + ".") for top in listed)
            and not any(module == s or module.startswith(s + ".") for s in skipped)
            and not any(module.startswith(u + ".") for u in unopened)
            and not any(part.startswith("_") for part in module.split(".")))


def test_the_programs_page_cites_names_the_reference_documents(conf):
    assert len([r for r in _references() if r[0] == "programs.rst"]) >= 28


@pytest.mark.parametrize("page, target", _references())
def test_every_cited_name_links_to_its_documentation(conf, page, target):
    obj = conf._imported(target)
    assert obj is not None, f"{page}: {target} does not import"
    name = conf._canonical(target)
    assert name is not None, f"{page}: {target} has no defining module"
    if isinstance(obj, types.ModuleType):
        assert _in_scope(conf, name), f"{page}: module {name} has no page in docs/api/"
        return
    module = name.rsplit(".", 1)[0]
    while module not in sys.modules:
        module = module.rsplit(".", 1)[0]
    assert _in_scope(conf, module), f"{page}: {target} is defined in {module}, not in docs/api/"
    assert not name.rsplit(".", 1)[-1].startswith("_"), f"{page}: {target} is private ({name})"
    if callable(obj):
        owner = _imported(conf, name.rsplit(".", 1)[0])
        # a method without a docstring links to its class (documented, with its docstring)
        assert inspect.getdoc(obj) or isinstance(owner, type) and owner.__doc__, \
            f"{page}: {name} has no docstring"
    else:  # data: autodoc documents it from its doc comment (#: ...)
        from sphinx.pycode import ModuleAnalyzer
        documented = ModuleAnalyzer.for_module(module).find_attr_docs()
        assert ("", name.rsplit(".", 1)[-1]) in documented, f"{page}: {name} has no #: comment"


def test_a_re_exported_name_resolves_to_its_definition(conf):
    assert conf._canonical("shardlaw.spec.jit_call") == "shardlaw.spec.jit.pipeline.jit_call"
    assert conf._canonical("shardlaw.spec.Arg.abstract") == "shardlaw.spec.jit.call.Arg.abstract"
    assert conf._canonical("shardlaw.spec.jit") == "shardlaw.spec.jit"
    assert conf._canonical("shardlaw.spec.no_such_name") is None


def test_the_reference_is_in_the_table_of_contents_and_the_index_has_entries():
    index = (DOCS / "index.rst").read_text(encoding="utf-8")
    assert "   api/index" in index and "   contributing" in index
    assert "genindex" in index and "modindex" in index


def _documented(module: types.ModuleType) -> list[tuple[str, str]]:
    """(name, docstring) of a module and of the functions, classes and methods it defines."""
    found = [(module.__name__, module.__doc__ or "")]
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            found.append((f"{module.__name__}.{name}", obj.__doc__ or ""))
        if inspect.isclass(obj):
            found += [(f"{module.__name__}.{name}.{m}", f.__doc__ or "")
                      for m, f in vars(obj).items()
                      if not m.startswith("_") and inspect.isfunction(f)]
    return found


def test_every_docstring_of_the_reference_renders_as_written(conf):
    """docs/conf.py shows a docstring docutils cannot read cleanly verbatim (a literal block)
    rather than failing the build; none of the reference's modules needs that fallback
    (continuation lines of a (Cn) clause indented under it read as a definition list, a
    name ending in ``_`` as a link)."""
    import pkgutil
    modules = []
    for top in ("shardlaw.spec", "shardlaw.engine", "shardlaw.properties"):
        package = importlib.import_module(top)
        modules += [top] + [m.name for m in pkgutil.walk_packages(package.__path__, top + ".")]
    malformed = {}
    for name in modules:
        if not _in_scope(conf, name):
            continue
        for where, doc in _documented(importlib.import_module(name)):
            problems = conf._rest_problems(inspect.cleandoc(doc), None) if doc else []
            if problems:
                malformed[where] = problems
    assert not malformed, malformed

"""Sphinx configuration for the shardlaw documentation.

The rule pages (``docs/rules/``) are generated from the rule registry at build time by
the ``shardlaw_rules`` extension in ``docs/_ext``. Build with::

    sphinx-build -W -b html docs docs/_build/html
    sphinx-build -W -b doctest docs docs/_build/doctest
"""

import doctest
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
# The build never imports tests/: the rule pages read the test files' @checks as text.

import shardlaw  # noqa: E402

project = "shardlaw"
author = "the shardlaw developers"
copyright = "the shardlaw developers"
release = version = shardlaw.__version__

extensions = [
    "sphinx.ext.doctest",
    "sphinx.ext.autodoc",      # the API reference (docs/api/): the docstrings, from the code
    "sphinx.ext.autosummary",  # one page per module, generated into docs/api/generated/
    "shardlaw_rules",
    "shardlaw_pictures",  # device grids and campaign charts, drawn at build time
]

exclude_patterns = ["_build", "api/_templates"]
templates_path = ["api/_templates"]

# The API reference: every module of the packages docs/api/index.rst lists, recursively,
# except the modules that are pytest's rather than a reader's: the campaign suites are test
# files (their package's own helpers are documented, its modules not opened); the workers
# and plugins run inside pytest or a child process.
autosummary_generate = True
autosummary_imported_members = False   # a re-exported name is documented where it is defined
autosummary_context = {"unopened_packages": ["shardlaw.properties.suites"], "skipped_modules": [
    "shardlaw.properties.processes_worker",
    "shardlaw.properties.fuzz_engine_child",
    "shardlaw.engine.conformance_plugin",
    "shardlaw.engine.conformance_worker",
]}
# Recursive autosummary writes a page for a skipped module as well (Sphinx 9 does, 7.0 does
# not); such a page is in no toctree, which -W makes an error when a later build (another
# Sphinx, the same clone) reads it. It is excluded by name, whichever Sphinx wrote it.
exclude_patterns += [f"api/generated/{name}.rst" for name in autosummary_context["skipped_modules"]]
# A module's own names: those it defines (a package's __all__ re-exports names documented in
# the modules that define them).
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"   # signatures stay short; the types go beside the text

# Furo: a wide, readable column for reference pages, a navigation sidebar and an
# on-page table of contents; docs/_static/shardlaw.css lays out the rule blocks.
html_theme = "furo"
html_title = f"shardlaw {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": True,
    "top_of_page_buttons": [],
}
pygments_style = "friendly"
pygments_dark_style = "monokai"

# Every example in the docs is executed by `sphinx-build -b doctest`.
doctest_global_setup = "from shardlaw.spec import *"
doctest_default_flags = (doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
                         | doctest.DONT_ACCEPT_TRUE_FOR_1)
doctest_test_doctest_blocks = "default"


# --------------------------------------------------------------------------- API reference

def _imported(dotted: str) -> object | None:
    """The object a dotted name reaches by importing its longest module prefix (None: none)."""
    import importlib
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - not a module (or not importable): a shorter prefix
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def _canonical(dotted: str) -> str | None:
    """Where the object a name reaches is documented: its defining module and qualified name
    (``shardlaw.spec.jit_call`` -> ``shardlaw.spec.jit.pipeline.jit_call``)."""
    obj = _imported(dotted)
    if obj is None:
        return None
    if isinstance(obj, type(sys)):
        return obj.__name__
    obj = getattr(obj, "__func__", obj)   # a classmethod or staticmethod reached on its class
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and not isinstance(obj, (dict, list, tuple, frozenset, set, str)):
        return f"{module}.{qualname}"
    # Data (a constant, a table) knows no module: it is documented where the name says.
    parent = _imported(dotted.rsplit(".", 1)[0]) if "." in dotted else None
    return dotted if isinstance(parent, type(sys)) else None


def _resolve_by_definition(app, env, node, contnode):
    """A Python reference by a name the API reference does not document under (a package's
    re-export, or a bare name documented once) links to where the object is documented."""
    from sphinx.util.nodes import make_refnode

    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = node["reftarget"].lstrip("~.")
    name = _canonical(target) if target.startswith("shardlaw.") else None
    if name is None and "." not in target:   # a bare name: the one object of that name
        found = [full for full in domain.objects if full.startswith("shardlaw.")
                 and full.rsplit(".", 1)[-1] == target]
        name = found[0] if len(found) == 1 else None
    entry = domain.objects.get(name) if name else None
    if entry is None and name:   # a member without a docstring: its class, documented
        owner = name.rsplit(".", 1)[0]
        entry = domain.objects.get(owner)
        entry = entry if entry is not None and entry.objtype == "class" else None
    if entry is None:
        modules = domain.modules.get(name) if name else None
        if modules is None:
            return None
        return make_refnode(app.builder, node["refdoc"], modules.docname, modules.node_id,
                            contnode, name)
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode,
                        name)


_SPHINX_ONLY = ("Unknown interpreted text role", "Unknown directive type",
                "No role entry", "No directive entry")


def _rest_problems(text: str, env) -> list[str]:
    """What docutils says is wrong with ``text`` as reST (read with Sphinx's roles and
    directives, as the page will read it)."""
    import io

    from docutils import nodes
    from docutils.core import publish_doctree

    tree = publish_doctree(text, settings_overrides={
        "report_level": 2, "halt_level": 5, "warning_stream": io.StringIO(), "env": env})
    # Messages of the parse are in the tree; those of its transforms (an unknown target
    # name) are kept aside.
    messages = [*tree.findall(nodes.system_message), *tree.transform_messages]
    return [message.astext() for message in messages
            if message["level"] >= 2 and not any(s in message.astext() for s in _SPHINX_ONLY)]


def _verbatim_when_malformed(app, what, name, obj, options, lines):
    """A docstring docutils cannot read cleanly is shown as it is written (a literal block)
    rather than breaking the warning-free build; the code's owners fix it in the code."""
    if lines and _rest_problems("\n".join(lines), app.env):
        lines[:] = ["::", ""] + [f"   {line}" for line in lines] + [""]


def _examples_as_code(app, doctree):
    """The examples of the API pages are shown, not run by the doctest build: pytest runs
    them in their modules (tests/test_rule_examples.py), and the rule pages run the rules'."""
    from docutils import nodes
    if not app.env.docname.startswith("api/"):
        return
    for block in list(doctree.findall(nodes.doctest_block)):
        block.replace_self(nodes.literal_block(block.rawsource, block.astext(),
                                               language="pycon"))


class _AmbiguousInDocstrings:
    """A logging filter: a short name in a docstring's annotations or text (``Source``,
    ``Value``) that two packages define is linked to the first and not warned about, also
    where autodoc reports a class's annotations at its generated page rather than at its
    docstring; the pages written by hand keep the warning."""

    def filter(self, record) -> bool:
        from docutils.utils import get_source_line
        location = getattr(record, "location", None)
        where = (get_source_line(location)[0] if hasattr(location, "parent")
                 else location) or ""
        return not ("more than one target found" in str(record.msg)
                    and ("docstring of shardlaw." in str(where)
                         or "api/generated/shardlaw." in str(where).replace("\\", "/")))


def setup(app):
    import logging
    logging.getLogger("sphinx.sphinx.domains.python").addFilter(_AmbiguousInDocstrings())
    app.connect("missing-reference", _resolve_by_definition)
    app.connect("autodoc-process-docstring", _verbatim_when_malformed)
    app.connect("doctree-read", _examples_as_code)

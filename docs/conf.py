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
    "shardlaw_rules",
    "shardlaw_pictures",  # device grids and campaign charts, drawn at build time
]

exclude_patterns = ["_build"]
templates_path: list[str] = []

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

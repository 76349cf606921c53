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
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))
# The test modules register properties (which rules they check); the rule pages list them.
sys.path.insert(0, str(ROOT / "tests"))

import shardlaw  # noqa: E402

project = "shardlaw"
author = "the shardlaw developers"
copyright = "the shardlaw developers"
release = version = shardlaw.__version__

extensions = [
    "sphinx.ext.doctest",
    "shardlaw_rules",
]

exclude_patterns = ["_build"]
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []

# Every example in the docs is executed by `sphinx-build -b doctest`.
doctest_global_setup = "from shardlaw.spec import *"
doctest_default_flags = (doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
                         | doctest.DONT_ACCEPT_TRUE_FOR_1)
doctest_test_doctest_blocks = "default"

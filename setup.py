"""Package discovery for shardlaw's layout (everything else is in pyproject.toml).

The import package ``shardlaw`` is assembled from four folders: ``src/shardlaw`` is
``shardlaw``, and the top-level ``spec/``, ``engine/`` and ``properties/`` are
``shardlaw.spec``, ``shardlaw.engine`` and ``shardlaw.properties`` (``package-dir`` in
pyproject.toml says so). Declarative discovery (``[tool.setuptools.packages.find]``)
names what it finds after the folder it searched, not after the package the folder is,
so the sub-packages are found here: every folder with an ``__init__.py`` under one of the
four, named under its package. A new sub-package is picked up without an edit;
``tests/test_packaging.py`` checks that a built wheel holds every one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def package_dirs() -> dict[str, str]:
    """The import package -> folder map of pyproject.toml's ``[tool.setuptools]``."""
    config = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(config["tool"]["setuptools"]["package-dir"])


def packages(dirs: dict[str, str]) -> list[str]:
    """Each mapped package and every package folder beneath it, by its import name."""
    found = []
    for name, folder in dirs.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(str(HERE / folder))]
    return sorted(set(found))


setup(packages=packages(package_dirs()))

"""The property suites, modules of the installed package that pytest runs by name.

Each module holds the properties of one part of a ``shardlaw campaign`` suite (the
campaign's ``SUITES`` says which): ``placement``, ``jit``, ``engine``, ``cache``, the
transformations' ``batching``, ``autodiff``, ``constraint``, ``arguments`` and
``shardmap``, ``fuzz``, ``proofs``, ``programs``, ``steps`` (real-shaped steps) and
``processes`` (several JAX
processes under ``jax.distributed``; the ``laws`` suite is
:mod:`shardlaw.properties.laws`). Anywhere shardlaw is installed, with shardlaw's pytest
plugin asked in (JAX's eight CPU devices; :mod:`shardlaw.pytest_plugin`)::

    python -m pytest -o shardlaw=true --pyargs shardlaw.properties.suites.placement

and the files of ``tests/`` run them in the project's own ``pytest`` run by importing
their tests (``tests/test_differential.py`` runs ``placement``, and so on).

A property runs the loaded Hypothesis profile's number of examples. One that runs more or
fewer says so with :func:`examples`, in the ``ci`` profile's terms, so that every other
profile (``deep``, a campaign's) scales it alike.
"""

from __future__ import annotations

from hypothesis import settings

__all__ = ["CI_EXAMPLES", "examples"]

# The examples a property runs in the ci profile unless it says otherwise.
CI_EXAMPLES = 200


def examples(n: int) -> int:
    """``n`` examples where the ``ci`` profile runs 200, as many in proportion under the
    profile loaded now (read when the property is defined).

    >>> examples(600) == 3 * settings.default.max_examples   # ci: 600, deep: 15,000
    True
    """
    return max(1, round(n * settings.default.max_examples / CI_EXAMPLES))

"""The cache model (spec/jit/cache.py) against real jax.jit's counters, call for call.

The properties are the suite :mod:`shardlaw.properties.suites.cache` (``shardlaw campaign
--suite cache``); importing its tests runs them here.
"""

import re
from pathlib import Path

from shardlaw.properties.cache_workloads import COLUMNS, WORKLOADS, measure, predict
# pytest collects the suite's tests from this module's namespace
from shardlaw.properties.suites.cache import *  # noqa: F401,F403

# The catalogue table of the docs is the checkout's, held to JAX here (not in the suite).
DOCS = Path(__file__).resolve().parents[1] / "docs" / "cache.rst"


def _docs_table() -> dict[str, tuple[int, ...]]:
    """The catalogue table as docs/cache.rst prints it: workload -> its numbers."""
    text = DOCS.read_text()
    block = text.split(".. catalogue-start")[1].split(".. catalogue-end")[0]
    table: dict[str, tuple[int, ...]] = {}
    for row in re.split(r"\n   \* - ", block)[2:]:
        cells = [c.strip() for c in re.split(r"\n     - ", row)]
        table[cells[0]] = tuple(int(c) for c in cells[1:])
    return table


def test_docs_catalogue_table_is_what_jax_does():
    table = _docs_table()
    assert list(table) == [w.name for w in WORKLOADS], "docs/cache.rst lists other workloads"
    for workload in WORKLOADS:
        measured = measure(workload)
        assert table[workload.name] == measured.row(), (
            f"{workload.name}: the docs say {dict(zip(COLUMNS, table[workload.name]))}, JAX "
            f"does {dict(zip(COLUMNS, measured.row()))}; rerun benchmarks/cache_catalogue.py --rst")
        assert predict(workload) == measured

"""``str(f.cache_info())`` reads as sentences whether calls are counted or not."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from shardlaw.engine.statistics import CacheInfo  # noqa: E402

FIELDS = dict(python_calls=1, refused_in_dispatch=0, dispatch_entries=1, signature_hits=0,
              signature_misses=1, signatures=1, executable_hits=0, executable_misses=1,
              compiles=1, executables=1, executables_total=3, capacity=4096, recent_misses=(),
              divergences=())


def test_the_dispatch_line_when_hits_are_not_counted():
    lines = str(CacheInfo(calls=None, dispatch_hits=None, **FIELDS)).splitlines()
    assert lines[0] == "calls: not counted (shardlaw.engine.count_calls(True) counts them)"
    assert lines[1].startswith("dispatch (C++): hits not counted, 1 call(s) reached Python ")
    assert "counts them) hit(s)" not in "\n".join(lines)


def test_the_dispatch_line_when_hits_are_counted():
    lines = str(CacheInfo(calls=5, dispatch_hits=4, **FIELDS)).splitlines()
    assert lines[0] == "calls: 5"
    assert lines[1].startswith("dispatch (C++): 4 hit(s) run without Python, 1 call(s) "
                               "reached Python ")

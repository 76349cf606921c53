"""shardlaw's pytest plugin: eight CPU devices for JAX and the ``ci``/``fresh``/``deep`` profiles.

Installing shardlaw registers this module under ``pytest11``, so every pytest run in the
environment loads it before any ``conftest.py``:

* JAX gets eight CPU devices (``jax_num_cpu_devices``), set before a test can start its
  backend, and only when no backend has started yet (too late otherwise: JAX is left as
  it is). ``SHARDLAW_CPU_DEVICES=N`` asks for another count, ``0`` leaves JAX alone.
* The Hypothesis profiles ``ci`` (200 examples, no deadline, the blob to reproduce a
  failure printed), ``fresh`` (the same) and ``deep`` (5,000 examples) are registered,
  so that every pytest process of the environment (a campaign's workers too) knows the
  name ``HYPOTHESIS_PROFILE`` gives, unless a profile of that
  name was registered already by someone else than Hypothesis itself (Hypothesis ships a
  ``ci`` profile of its own; that one is replaced). A ``conftest.py`` that registers these
  names again wins, as it runs later.
* The profile named by ``HYPOTHESIS_PROFILE`` is loaded once the conftest files have been
  read (so a profile they register can be named), unless ``--hypothesis-profile`` was given.
* ``SHARDLAW_EXAMPLES_DB=DIR`` makes that profile (or the default) keep its examples in the
  directory ``DIR``: the database ``shardlaw campaign --db DIR`` and HypoFuzz share.

Nothing here needs JAX or Hypothesis: without them the plugin does nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:
    import jax
    from jax._src import xla_bridge
except ImportError:  # the spec alone: no JAX to set up
    jax = None  # type: ignore[assignment]

try:
    from hypothesis import HealthCheck, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import InvalidArgument
except ImportError:  # shardlaw installed without its test extras
    settings = None  # type: ignore[assignment]

__all__ = ["NUM_CPU_DEVICES", "PROFILES", "give_jax_cpu_devices", "register_profiles",
           "share_examples"]

NUM_CPU_DEVICES = 8

# name -> the settings of shardlaw's profile for a user's suite. tests/conftest.py registers
# the same names for the project's own tests, its ci derandomized (CI's gate).
_DEFAULT_SIZE: dict[str, Any] = {"max_examples": 200, "deadline": None, "derandomize": False,
                                 "print_blob": True, "suppress_health_check": ["too_slow"]}
PROFILES: dict[str, dict[str, Any]] = {
    "ci": _DEFAULT_SIZE,
    "fresh": _DEFAULT_SIZE,
    "deep": {"max_examples": 5000, "deadline": None},
}


def _device_count() -> int:
    text = os.environ.get("SHARDLAW_CPU_DEVICES", str(NUM_CPU_DEVICES)).strip()
    return int(text) if text.isdigit() else NUM_CPU_DEVICES


def give_jax_cpu_devices(count: int | None = None) -> bool:
    """Ask JAX for ``count`` CPU devices if its backend has not started; whether it was set."""
    count = _device_count() if count is None else count
    if count <= 0 or jax is None or xla_bridge.backends_are_initialized():
        return False
    jax.config.update("jax_num_cpu_devices", count)
    return True


def _hypothesis_own(name: str, profile: Any) -> bool:
    """Whether ``profile`` is the one Hypothesis registers itself (its ``ci``)."""
    return name == "ci" and profile.derandomize and profile.database is None


def register_profiles() -> list[str]:
    """Register shardlaw's profiles where no one else did; the names registered."""
    if settings is None:
        return []
    done = []
    for name, values in PROFILES.items():
        try:
            existing = settings.get_profile(name)
        except InvalidArgument:
            existing = None
        if existing is not None and not _hypothesis_own(name, existing):
            continue
        chosen = dict(values)
        if "suppress_health_check" in chosen:
            chosen["suppress_health_check"] = [getattr(HealthCheck, check)
                                               for check in chosen["suppress_health_check"]]
        settings.register_profile(name, **chosen)
        done.append(name)
    return done


give_jax_cpu_devices()
register_profiles()


def pytest_configure(config: Any) -> None:
    """Load ``HYPOTHESIS_PROFILE`` now that the conftest files have registered theirs."""
    if settings is None:
        return
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if name and not config.getoption("hypothesis_profile", None):
        try:
            settings.load_profile(name)
        except InvalidArgument:
            sys.stderr.write(f"shardlaw: HYPOTHESIS_PROFILE={name!r} names no registered "
                             "profile; Hypothesis' default is used\n")
    share_examples(os.environ.get("SHARDLAW_EXAMPLES_DB", ""))


def share_examples(where: str) -> bool:
    """Keep the loaded profile's examples in the directory ``where`` (nothing if empty)."""
    if settings is None or not where.strip():
        return False
    database = DirectoryBasedExampleDatabase(where)
    if settings.default.database == database:
        return False
    settings.register_profile("shardlaw-shared-db", parent=settings.default, database=database)
    settings.load_profile("shardlaw-shared-db")
    return True

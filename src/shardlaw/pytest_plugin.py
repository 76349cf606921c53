"""shardlaw's pytest plugin: for a project that asks, CPU devices for JAX and shardlaw's profiles.

Installing shardlaw registers this module under ``pytest11``, so pytest imports it in every
run of the environment. It acts only in a run that opts in; anywhere else it imports
nothing beyond the standard library and changes nothing. A run opts in by

* the ini key ``shardlaw = true`` (in ``[tool.pytest.ini_options]`` of ``pyproject.toml``,
  or ``pytest.ini``), or ``-o shardlaw=true`` on pytest's command line;
* or the environment variable ``SHARDLAW_PYTEST=1``, which wins over the ini key either
  way (``SHARDLAW_PYTEST=0`` keeps the plugin out of a project that opted in).

In a run that opted in, before the ``conftest.py`` files are read:

* JAX (imported then, and only if installed) gets eight CPU devices through
  ``jax_num_cpu_devices``, unless a count was set already: ``XLA_FLAGS`` holds
  ``--xla_force_host_platform_device_count``, ``jax_num_cpu_devices`` is configured
  (``JAX_NUM_CPU_DEVICES`` or an earlier ``jax.config.update``), or a backend has started.
  ``SHARDLAW_CPU_DEVICES=N`` asks for another count, ``0`` leaves JAX alone.
* Hypothesis gets the profiles ``shardlaw-ci`` (200 examples, no deadline, the blob that
  reproduces a failure printed), ``shardlaw-fresh`` (the same) and ``shardlaw-deep`` (5,000
  examples), under these names only: Hypothesis' own ``ci`` and a project's profiles are
  left as they are. A profile is loaded only when named: ``--hypothesis-profile`` or
  ``HYPOTHESIS_PROFILE``, the latter read once the conftest files have registered theirs.
* ``SHARDLAW_EXAMPLES_DB=DIR`` keeps the loaded profile's examples in the directory ``DIR``:
  the database ``shardlaw campaign --db DIR`` and HypoFuzz share.

``pytest -p no:shardlaw`` keeps the plugin out of a run altogether.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

__all__ = ["INI_KEY", "ENVIRONMENT", "NUM_CPU_DEVICES", "PROFILES", "opted_in",
           "user_device_count", "give_jax_cpu_devices", "register_profiles", "share_examples",
           "SHORT_NAMES", "load_named_profile"]

INI_KEY = "shardlaw"             # shardlaw = true: the project asks for the plugin
ENVIRONMENT = "SHARDLAW_PYTEST"  # SHARDLAW_PYTEST=1 asks, =0 declines, whatever the ini says
NUM_CPU_DEVICES = 8

# name -> the settings of one of shardlaw's profiles. tests/conftest.py registers the
# project's own ci, fresh and deep (its ci derandomized: CI's gate).
_DEFAULT_SIZE: dict[str, Any] = {"max_examples": 200, "deadline": None, "derandomize": False,
                                 "print_blob": True, "suppress_health_check": ["too_slow"]}
PROFILES: dict[str, dict[str, Any]] = {
    "shardlaw-ci": _DEFAULT_SIZE,
    "shardlaw-fresh": _DEFAULT_SIZE,
    "shardlaw-deep": {"max_examples": 5000, "deadline": None},
}

# the names the README and the examples use, outside pytest: each one shardlaw's profile
SHORT_NAMES = {"ci": "shardlaw-ci", "fresh": "shardlaw-fresh", "deep": "shardlaw-deep"}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
_XLA_COUNT = re.compile(r"--xla_force_host_platform_device_count(=|\s|$)")


def _flag(text: str, where: str) -> bool:
    """``text`` read as yes or no; a usage error naming ``where`` for anything else."""
    value = text.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    import pytest
    raise pytest.UsageError(f"shardlaw: {where}={text!r} is neither true nor false "
                            f"(one of {', '.join(_TRUE)} / {', '.join(_FALSE[:-1])})")


def opted_in(config: Any) -> bool:
    """Whether this run asked for the plugin: ``SHARDLAW_PYTEST``, else the ini key."""
    if ENVIRONMENT in os.environ:
        return _flag(os.environ[ENVIRONMENT], ENVIRONMENT)
    return bool(config.getini(INI_KEY))


def user_device_count() -> str | None:
    """Where a CPU device count was set already (by ``XLA_FLAGS`` or JAX's config), or None."""
    if _XLA_COUNT.search(os.environ.get("XLA_FLAGS", "")):
        return "XLA_FLAGS"
    if os.environ.get("JAX_NUM_CPU_DEVICES", "").strip():
        return "JAX_NUM_CPU_DEVICES"
    jax = sys.modules.get("jax")
    if jax is not None and getattr(jax.config, "jax_num_cpu_devices", -1) != -1:
        return "jax_num_cpu_devices"
    return None


def _device_count() -> int:
    text = os.environ.get("SHARDLAW_CPU_DEVICES", str(NUM_CPU_DEVICES)).strip()
    return int(text) if text.isdigit() else NUM_CPU_DEVICES


def give_jax_cpu_devices(count: int | None = None) -> bool:
    """Ask JAX for ``count`` CPU devices unless a count was set or a backend started;
    whether it was asked."""
    count = _device_count() if count is None else count
    if count <= 0 or user_device_count() is not None:
        return False
    try:
        import jax
        from jax._src import xla_bridge
    except ImportError:  # the spec alone: no JAX to set up
        return False
    if xla_bridge.backends_are_initialized():
        return False  # too late to change: JAX is left as it is
    jax.config.update("jax_num_cpu_devices", count)
    return True


def register_profiles() -> list[str]:
    """Register shardlaw's profiles (Hypothesis installed); the names registered."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # shardlaw installed without its test extras
        return []
    for name, values in PROFILES.items():
        chosen = dict(values)
        if "suppress_health_check" in chosen:
            chosen["suppress_health_check"] = [getattr(HealthCheck, check)
                                               for check in chosen["suppress_health_check"]]
        settings.register_profile(name, **chosen)
    return list(PROFILES)


def load_named_profile(name: str | None = None) -> str:
    """Outside pytest (a script, an example), load the profile ``name`` names (by default
    ``$HYPOTHESIS_PROFILE``; ``deep`` is ``shardlaw-deep``); the name loaded."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument
    name = name if name is not None else os.environ.get("HYPOTHESIS_PROFILE", "default")
    register_profiles()
    loaded = SHORT_NAMES.get(name, name)
    try:
        settings.load_profile(loaded)
    except InvalidArgument:
        known = ", ".join(["default", *SHORT_NAMES, *PROFILES])
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r} names no profile (known: {known})") \
            from None
    return loaded


def share_examples(where: str) -> bool:
    """Keep the loaded profile's examples in the directory ``where`` (nothing if empty)."""
    if not where.strip():
        return False
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    database = DirectoryBasedExampleDatabase(where)
    if settings.default.database == database:
        return False
    settings.register_profile("shardlaw-shared-db", parent=settings.default, database=database)
    settings.load_profile("shardlaw-shared-db")
    return True


# --------------------------------------------------------------------------- hooks

def pytest_addoption(parser: Any) -> None:
    parser.addini(INI_KEY, type="bool", default=False,
                  help="shardlaw's pytest plugin: CPU devices for JAX and the shardlaw-ci, "
                       "-fresh and -deep Hypothesis profiles (or SHARDLAW_PYTEST=1)")


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    """Before any conftest.py: JAX's devices and shardlaw's profiles, in a run that asked."""
    if opted_in(early_config):
        give_jax_cpu_devices()
        register_profiles()


def pytest_configure(config: Any) -> None:
    """Load ``HYPOTHESIS_PROFILE`` now that the conftest files have registered theirs, and
    the shared database."""
    if not opted_in(config):
        return
    try:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if name and not config.getoption("hypothesis_profile", None):
        try:
            settings.load_profile(name)
        except InvalidArgument:
            sys.stderr.write(f"shardlaw: HYPOTHESIS_PROFILE={name!r} names no registered "
                             "profile; Hypothesis' default is used\n")
    share_examples(os.environ.get("SHARDLAW_EXAMPLES_DB", ""))


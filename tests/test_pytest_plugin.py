"""shardlaw's pytest plugin asks first: an unrelated project keeps its own settings.

Each test writes a small project into a temporary folder (its own ``pytest.ini`` and
test file, nothing of shardlaw's) and runs pytest on it in a subprocess of this same
environment, where shardlaw and its ``pytest11`` entry point are installed: the project's
own test asserts what it expects of its run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardlaw import pytest_plugin

# What the outside world may set that the plugin reads: cleared, then set per test.
_OURS = ("SHARDLAW_PYTEST", "SHARDLAW_CPU_DEVICES", "SHARDLAW_EXAMPLES_DB",
         "HYPOTHESIS_PROFILE", "XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS", "CI",
         "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")


def _run_project(where: Path, ini: str, test: str, *options: str,
                 conftest: str = "", **env: str) -> subprocess.CompletedProcess:
    """Write a project (``pytest.ini``, a test file, a conftest) and run pytest on it."""
    (where / "pytest.ini").write_text("[pytest]\n" + textwrap.dedent(ini))
    (where / "test_theirs.py").write_text(textwrap.dedent(test))
    if conftest:
        (where / "conftest.py").write_text(textwrap.dedent(conftest))
    environment = {k: v for k, v in os.environ.items() if k not in _OURS}
    environment.update(JAX_PLATFORMS="cpu", **env)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *options], cwd=where, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "1 passed" in done.stdout, done.stdout[-4000:]
    return done


# The unrelated project: under CI=1 with its own XLA_FLAGS, a conftest that registers its
# own "deep" and HYPOTHESIS_PROFILE=deep in the environment (which only shardlaw reads).
_THEIR_CONFTEST = """
    from hypothesis import settings
    settings.register_profile("deep", max_examples=7)
"""
_THEIR_TEST = """
    import os
    import sys

    import pytest
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    def test_nothing_of_ours_changed(request):
        # the plugin is installed and loaded, and did nothing
        assert request.config.pluginmanager.hasplugin("shardlaw")
        assert "jax" not in sys.modules and "jaxlib" not in sys.modules
        # Hypothesis' own ci profile, loaded by Hypothesis under CI=1, untouched
        ci = settings.get_profile("ci")
        assert ci.derandomize and ci.database is None and ci.max_examples == 100
        assert settings.get_current_profile_name() == "ci"
        assert settings().derandomize and settings().max_examples == 100
        assert settings.get_profile("deep").max_examples == 7
        with pytest.raises(InvalidArgument):
            settings.get_profile("shardlaw-ci")
        # their own device count
        assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
        import jax
        assert jax.config.jax_num_cpu_devices == -1
        assert jax.device_count() == 4
"""


def test_an_unrelated_project_keeps_its_devices_profiles_and_imports(tmp_path):
    _run_project(tmp_path, "", _THEIR_TEST, conftest=_THEIR_CONFTEST, CI="1",
                 HYPOTHESIS_PROFILE="deep",
                 XLA_FLAGS="--xla_force_host_platform_device_count=4")


def test_shardlaw_pytest_0_keeps_the_plugin_out_of_a_project_that_opted_in(tmp_path):
    _run_project(tmp_path, "shardlaw = true\n", _THEIR_TEST, conftest=_THEIR_CONFTEST,
                 CI="1", HYPOTHESIS_PROFILE="deep", SHARDLAW_PYTEST="0",
                 XLA_FLAGS="--xla_force_host_platform_device_count=4")


# A project that opted in: eight devices, shardlaw's three profiles, HYPOTHESIS_PROFILE
# read, Hypothesis' own ci left as it is.
_OPTED_IN_TEST = """
    import sys

    import jax
    from hypothesis import settings

    def test_set_up():
        assert jax.device_count() == {devices}
        ci, fresh = settings.get_profile("shardlaw-ci"), settings.get_profile("shardlaw-fresh")
        assert (ci.max_examples, ci.derandomize, ci.deadline) == (200, False, None)
        assert (fresh.max_examples, fresh.derandomize) == (200, False)
        assert settings.get_profile("shardlaw-deep").max_examples == 5000
        assert settings.get_profile("ci").derandomize        # Hypothesis' own
        assert settings.get_current_profile_name() == "shardlaw-deep"
        assert settings().max_examples == 5000
"""


@pytest.mark.parametrize("ini, options, env", [
    ("shardlaw = true\n", (), {}),
    ("", ("-o", "shardlaw=true"), {}),
    ("", (), {"SHARDLAW_PYTEST": "1"}),
], ids=["ini", "command-line", "environment"])
def test_a_project_that_opts_in_gets_eight_devices_and_shardlaws_profiles(tmp_path, ini,
                                                                          options, env):
    _run_project(tmp_path, ini, _OPTED_IN_TEST.format(devices=8), *options,
                 HYPOTHESIS_PROFILE="shardlaw-deep", CI="1", **env)


@pytest.mark.parametrize("env, devices", [
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, 4),
    ({"JAX_NUM_CPU_DEVICES": "2"}, 2),
    ({"SHARDLAW_CPU_DEVICES": "3"}, 3),
], ids=["XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "SHARDLAW_CPU_DEVICES"])
def test_an_opted_in_project_keeps_a_device_count_it_set(tmp_path, env, devices):
    _run_project(tmp_path, "shardlaw = true\n", _OPTED_IN_TEST.format(devices=devices),
                 HYPOTHESIS_PROFILE="shardlaw-deep", **env)


def test_an_unreadable_opt_in_is_a_usage_error_naming_the_variable(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    environment = {k: v for k, v in os.environ.items() if k not in _OURS}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=tmp_path, env={**environment, "SHARDLAW_PYTEST": "maybe"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "SHARDLAW_PYTEST='maybe' is neither true nor false" in done.stderr


def test_importing_the_plugin_imports_neither_jax_nor_hypothesis():
    done = subprocess.run([sys.executable, "-c", "import sys, shardlaw.pytest_plugin; "
                           "print(sorted({'jax', 'hypothesis', 'pytest'} & set(sys.modules)))"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_this_project_opts_in_and_its_own_profiles_are_loaded(pytestconfig):
    """The project's own run: opted in by its pyproject.toml, with tests/conftest.py's
    ci/fresh/deep (ci derandomized, the default)."""
    from hypothesis import settings
    assert pytestconfig.getini("shardlaw") is True
    assert pytestconfig.pluginmanager.hasplugin("shardlaw")
    assert settings.get_profile("shardlaw-deep").max_examples == 5000
    profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    if profile == "ci" and not pytestconfig.getoption("hypothesis_profile", None):
        assert settings.get_current_profile_name() == "ci"
        assert settings().derandomize and settings().max_examples == 200
    import jax
    assert jax.device_count() == pytest_plugin.NUM_CPU_DEVICES

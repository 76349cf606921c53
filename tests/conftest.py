"""Test setup: eight CPU devices for JAX, and the project's own Hypothesis profiles.

The project opts in to its own pytest plugin (``shardlaw = true`` in ``pyproject.toml``;
:mod:`shardlaw.pytest_plugin`), which asks JAX for eight CPU devices before this file is
read, unless the environment set a count, and registers ``shardlaw-ci``, ``-fresh`` and
``-deep``. The project's run wants eight whatever the environment says: JAX fixes its
device count when its backend starts, so the count is set here too, before any test
module touches JAX. The project's own profiles, chosen with ``HYPOTHESIS_PROFILE``:

* ``ci`` (the default, a few minutes in all): derandomized, so the gate a commit passes
  before it lands draws the same examples on every run of the same dependencies — a
  failure it shows is the change's, not the dice's;
* ``fresh``: the same size, drawn at random each run (what ``ci`` was before; run it by hand
  to look for new counterexamples);
* ``deep``: long random runs by hand (5,000 examples a property).
"""

import os

from hypothesis import HealthCheck, settings

NUM_CPU_DEVICES = 8


def _give_jax_eight_devices() -> None:
    try:
        import jax
    except ImportError:  # the spec's own tests run without JAX
        return
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        return  # already set up (or too late to change): leave JAX as it is
    jax.config.update("jax_num_cpu_devices", NUM_CPU_DEVICES)


_give_jax_eight_devices()

DEFAULT_SIZE = dict(max_examples=200, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", derandomize=True, **DEFAULT_SIZE)
settings.register_profile("fresh", derandomize=False, **DEFAULT_SIZE)
settings.register_profile("deep", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

"""A pytest plugin for the conformance run: puts the engine in place of ``jax.jit`` first.

Loaded with ``-p shardlaw.engine.conformance_plugin`` before any test module is imported.
``SHARDLAW_CONFORMANCE=engine`` installs the engine (:func:`shardlaw.engine.install`), so
``jax.jit`` and ``from jax import jit`` in the test files are the engine's; ``bare`` assigns
``jax.jit = shardlaw.engine.jit`` by hand and routes nothing else (the bare patch); ``jax``
(the default) leaves JAX as it is, which is the baseline the engine is compared with.
"""

from __future__ import annotations

import os

MODE = os.environ.get("SHARDLAW_CONFORMANCE", "jax")

if MODE == "engine":
    from shardlaw.engine import install

    install()
elif MODE == "bare":
    # the bare patch: jax.jit assigned by hand, nothing else routed
    import jax

    from shardlaw.engine import jit as _engine_jit

    jax.jit = _engine_jit
elif MODE != "jax":
    raise SystemExit(f"SHARDLAW_CONFORMANCE must be 'jax', 'engine' or 'bare', not {MODE!r}")


def pytest_report_header(config):  # noqa: ANN001, ARG001 - pytest's hook signature
    import jax

    return f"shardlaw conformance: jax.jit is {jax.jit.__module__}.{jax.jit.__qualname__}"


def pytest_collection_finish(session):  # noqa: ANN001 - pytest's hook signature
    import jax

    from shardlaw.engine import jit as engine_jit

    # A run that claims the engine but tests JAX (or the reverse) measures nothing.
    if (jax.jit is engine_jit) != (MODE in ("engine", "bare")):
        raise SystemExit(f"conformance mode {MODE!r}, but jax.jit is {jax.jit!r}")

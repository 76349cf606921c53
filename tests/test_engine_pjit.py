"""install() covers pjit: ``jax.experimental.pjit.pjit`` and ``jax._src.pjit.pjit`` become the engine's.

JAX's multiprocess tests and a few libraries still call the deprecated pjit. In jax 0.10.2
it is jit with the mesh of the legacy ``with mesh:`` block as its context: PartitionSpecs
and None leaves of its shardings are over that mesh (None meaning replicated), and the
function is traced under it. Every comparison is with JAX's own pjit, call for call.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardlaw.engine as engine
from shardlaw.engine import internals
from shardlaw.engine.adopt import PjitFunction, pjit as engine_pjit

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _mesh():
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))


def _entries():
    from jax._src import pjit as pjit_module
    import jax.experimental.pjit as experimental

    return pjit_module.pjit, experimental.pjit


def _calls(x):
    """A few pjit calls, inside and outside a mesh block: (what they return, their types)."""
    pjit_src, pjit_experimental = _entries()
    mesh = _mesh()
    seen, types = {}, set()
    with mesh:
        f = pjit_src(lambda a: a * 2, in_shardings=P("x", "y"), out_shardings=None)
        g = pjit_experimental(lambda a, b: (a + b, a - b), in_shardings=None,
                              out_shardings=(P("y"), None))
        h = pjit_src(lambda a: jax.lax.with_sharding_constraint(a, P(None, "y")))
        donated = pjit_src(lambda a: a + 1, in_shardings=P("x"), donate_argnums=0)
        seen["spec in, None out"] = f(x)
        seen["None in, tuple out"] = g(x, x + 1)
        seen["constraint by spec in the body"] = h(x)
        seen["donated"] = donated(jax.device_put(x, NamedSharding(mesh, P("x"))))
        seen["lower"] = f.lower(x).compile()(x)
        seen["eval_shape"] = jax.eval_shape(f, x)
        types |= {type(f), type(g), type(h)}
    plain = pjit_src(lambda a: a - 1)
    seen["no mesh block"] = plain(x)
    types.add(type(plain))
    return seen, types


def _facts(value):
    if isinstance(value, jax.ShapeDtypeStruct):
        return ("shape", value.shape, str(value.dtype), value.sharding)
    if isinstance(value, tuple):
        return tuple(_facts(v) for v in value)
    return (value.sharding, value.committed, np.asarray(value).tolist())


def test_pjit_under_install_is_the_engine_and_answers_as_jax_pjit():
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    expected, jax_types = _calls(x)
    with engine.install():
        got, engine_types = _calls(x)
    assert engine_types == {PjitFunction}
    assert PjitFunction not in jax_types
    for name in expected:
        assert _facts(got[name]) == _facts(expected[name]), name


def test_the_engine_pjit_decides_through_the_engine():
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    f = engine_pjit(lambda a: a * 3, in_shardings=P("x"))
    with _mesh():
        f(x)
        f(x)
        info = f.cache_info()
        explanation = f.explain(x)
    assert info.signature_misses == 1 and info.compiles == 1
    assert explanation.accepted and explanation.trace
    assert explanation.in_shardings[0] == NamedSharding(_mesh(), P("x"))
    # Outside any mesh block a PartitionSpec has no mesh: refused, as jax's pjit refuses it.
    with pytest.raises(Exception) as engine_error:
        f(x)
    with pytest.raises(Exception) as jax_error:
        internals.JAX_PJIT(lambda a: a * 3, in_shardings=P("x"))(x)
    assert isinstance(engine_error.value, type(jax_error.value))


def test_install_and_uninstall_replace_and_restore_both_pjit_entries_in_order():
    original = _entries()
    assert original == (internals.JAX_PJIT, internals.JAX_PJIT)
    with engine.install():
        assert _entries() == (engine_pjit, engine_pjit)
        with engine.install():
            assert _entries() == (engine_pjit, engine_pjit)
        assert _entries() == (engine_pjit, engine_pjit)
        assert jax.jit is engine.jit
    assert _entries() == original
    assert jax.jit is internals.JAX_JIT
    # Still a deprecation, as JAX's own entry is.
    import jax.experimental.pjit as experimental

    with engine.install(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert experimental.pjit is engine_pjit
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_a_pjit_function_binds_as_a_method_as_jax_pjit_does():
    def scaled(self, x):
        return x * self.scale

    class Model:
        scale = 3.0
        by_engine = engine_pjit(scaled, static_argnums=0)
        by_jax = internals.JAX_PJIT(scaled, static_argnums=0)

    x = np.arange(8.0, dtype=np.float32)
    model = Model()
    assert np.asarray(model.by_engine(x)).tolist() == np.asarray(model.by_jax(x)).tolist()
    assert type(model.by_engine).__name__ == type(model.by_jax).__name__ == "method"

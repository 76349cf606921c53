"""shardlaw.engine.jit as a drop-in for jax.jit: the interface, the stages, bad input, a sharded MLP.

Every test compares with ``jax.jit`` on the same inputs where JAX can run them (each fresh
``jax.jit`` called once, see notes/jit-facts.md §9), and checks the engine's own
additions: rule IDs and paths on rejections, ``explain``, ``cache_info``, ``clear_cache``.
"""

import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from shardlaw.engine import EngineRejection, jit
from shardlaw.properties.engine_workloads import mlp

DEVICES = jax.devices()[:8]
MESH = Mesh(np.array(DEVICES).reshape(2, 4), ("x", "y"))


def _same(engine_out, jax_out):
    """Same structure, values, sharding types and placements, committed flags."""
    a_leaves, a_tree = jax.tree_util.tree_flatten(engine_out)
    b_leaves, b_tree = jax.tree_util.tree_flatten(jax_out)
    assert a_tree == b_tree
    for a, b in zip(a_leaves, b_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert type(a.sharding) is type(b.sharding), (a.sharding, b.sharding)
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)
        assert a._committed == b._committed


def test_decorator_pytrees_keywords_and_static_arguments():
    def f(tree, n, *, scale):
        return {"sum": tree["a"] * n + tree["b"][0], "scaled": tree["b"][1] * scale}

    tree = {"a": jnp.arange(4.0), "b": (jnp.ones(4), jax.device_put(np.ones(4), DEVICES[2]))}
    jitted = jit(static_argnums=1)(f)
    _same(jitted(tree, 3, scale=2.0), jax.jit(f, static_argnums=1)(tree, 3, scale=2.0))
    by_name = jit(f, static_argnames="n")
    _same(by_name(tree, n=4, scale=1.0), jax.jit(f, static_argnames="n")(tree, n=4, scale=1.0))
    assert jitted.__name__ == "f" and jitted.__wrapped__ is f


def test_keep_unused_and_device_option_warn_like_jax():
    def f(a, b):
        return a * 2

    x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(MESH, P("x")))
    elsewhere = jax.device_put(np.ones(3, np.float32), DEVICES[5])
    _same(jit(f)(x, elsewhere), jax.jit(f)(x, elsewhere))  # the unused one takes no part
    with pytest.raises(ValueError) as info:
        jit(f, keep_unused=True)(x, elsewhere)
    assert info.value.rule == "DA-1" and info.value.path == "args[1]"
    with pytest.warns(DeprecationWarning, match="deprecated"):
        on_three = jit(f, device=DEVICES[3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        _same(on_three(x, elsewhere), jax.jit(f, device=DEVICES[3])(x, elsewhere))


def test_rejections_carry_rule_path_and_builtin_type():
    x = np.ones((6,), np.float32)
    cases = [
        (lambda: jit(lambda a: a, in_shardings=NamedSharding(MESH, P("y")))(x),
         ValueError, "FIT-1", "args[0]"),
        (lambda: jit(lambda a: a, in_shardings=P("x"))(x), RuntimeError, "JIT-3", None),
        (lambda: jit(lambda a: a, in_shardings="x"), TypeError, "JIT-2", "in_shardings"),
        (lambda: jit(lambda a: a, in_shardings=(None, None))(x), ValueError, "TREE-1", None),
        (lambda: jit(lambda a: a, in_shardings=())(x), AssertionError, "TREE-1", None),
        (lambda: jit(lambda a: (a, a), out_shardings=[None, None])(x), ValueError, "TREE-2",
         None),
        (lambda: jit(lambda a, k: a, in_shardings=SingleDeviceSharding(DEVICES[0]))(x, k=x),
         ValueError, "JIT-4", None),
    ]
    for make_call, error_type, rule_id, path in cases:
        with pytest.raises(error_type) as info:
            make_call()
        assert isinstance(info.value, EngineRejection)
        assert info.value.rule == rule_id, info.value
        assert info.value.path == path, info.value


def test_committed_argument_refused_before_anything_runs():
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(MESH, P("x")))
    jitted = jit(lambda a: a, in_shardings=NamedSharding(MESH, P("y")))
    for _ in range(2):  # refused on every call, from the cached decision the second time
        with pytest.raises(ValueError, match=r"\[RES-4\] at args\[0\]"):
            jitted(x)
    assert jitted.cache_info().executables == 0


def test_bad_input_gives_clear_errors_and_a_consistent_cache():
    f = jit(lambda a, n: a * len(n), static_argnums=1)
    # A call meets JAX's C++ dispatcher first, which refuses with JAX's own ValueError;
    # the engine's stages refuse with ENG-1.
    with pytest.raises(ValueError, match="hashable"):
        f(jnp.ones(2), [1, 2])
    with pytest.raises(ValueError) as info:
        f.lower(jnp.ones(2), [1, 2])
    assert info.value.rule == "ENG-1" and "hashable" in str(info.value)
    with pytest.raises(TypeError) as info:
        jit(lambda t: t["a"])({"a": "text"})
    assert info.value.rule == "ENG-2" and info.value.path == "args[0]['a']"
    gone = jnp.ones(3)
    gone.delete()
    with pytest.raises(RuntimeError) as info:
        jit(lambda a: a)(gone)
    assert info.value.rule == "ENG-3"
    assert f(jnp.ones(2), (1, 2)).tolist() == [2.0, 2.0]
    assert f.cache_info().signatures == 1


def test_stages_trace_lower_compile_and_aot_checks():
    s = NamedSharding(MESH, P("x", "y"))
    x = jax.device_put(np.arange(64.0, dtype=np.float32).reshape(8, 8), s)
    f = lambda a: a @ a.T  # noqa: E731
    traced = jit(f).trace(x)
    assert traced.out_info.shape == (8, 8)
    compiled = jit(f).lower(x).compile()
    theirs = jax.jit(f).lower(x).compile()
    assert "dot" in jit(f).lower(x).as_text()
    _same(compiled(x), theirs(x))
    assert compiled.input_shardings[0][0].is_equivalent_to(theirs.input_shardings[0][0], 2)
    renamed = NamedSharding(Mesh(np.array(DEVICES).reshape(2, 4), ("a", "b")), P("a", "b"))
    _same(compiled(jax.device_put(x, renamed)), theirs(jax.device_put(x, renamed)))
    reversed_mesh = Mesh(np.array(DEVICES[::-1]).reshape(2, 4), ("x", "y"))
    for bad, error_type, rule_id in [
            ((jax.device_put(x, NamedSharding(reversed_mesh, P("x", "y"))),), ValueError, "AOT-3"),
            ((x.astype(jnp.int32),), TypeError, "AOT-2"),
            ((x, x), TypeError, "AOT-1")]:
        with pytest.raises(error_type) as info:
            compiled(*bad)
        assert info.value.rule == rule_id
        with pytest.raises(error_type):
            theirs(*bad)
    shape = jit(f).eval_shape(jax.ShapeDtypeStruct((8, 8), jnp.float32))
    assert shape.shape == (8, 8)


def test_explain_says_what_and_why_without_running():
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(MESH, P("x")))
    f = jit(lambda a: a + 1)
    before = f.explain(x)
    assert before.accepted and before.executable == "compiled for this signature"
    assert before.device_assignment == tuple(range(8))
    assert "DA-1" in before.trace and "RES-1" in before.trace
    # The compiler's choice for the open result is known before any call runs...
    assert before.out_shardings[0] == NamedSharding(MESH, P("x"))
    assert f.cache_info().compiles == 1 and f.cache_info().python_calls == 0
    # ... and the call that follows runs the executable explain compiled.
    out = f(x)
    assert f.cache_info().compiles == 1
    assert out.sharding == before.out_shardings[0]
    assert f.explain(x) == before
    abstract = f.explain(jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=x.sharding))
    assert abstract.accepted and abstract.out_shardings == before.out_shardings
    bad = jit(lambda a: a, in_shardings=NamedSharding(MESH, P("y"))).explain(x)
    assert not bad.accepted and bad.rule == "RES-4" and bad.path == "args[0]"
    assert "RES-4" in str(bad)


def test_cache_info_counts_every_call_and_where_it_was_served():
    f = jit(lambda a, n: a * len(n), static_argnums=1)
    x = jnp.ones(4)
    for _ in range(5):
        f(x, (1, 2))
    with pytest.raises(ValueError) as caught:
        f(x, [1, 2])                 # JAX's dispatcher refuses it before the engine sees it
    assert caught.value.rule == "ENG-1" and caught.value.path == "args[1]"
    assert "list" in str(caught.value) and "[1, 2]" in str(caught.value)
    with pytest.raises(ValueError) as caught:
        f.lower(x, [1, 2])
    assert caught.value.rule == "ENG-1"
    info = f.cache_info()
    assert (info.calls, info.dispatch_hits, info.python_calls, info.refused_in_dispatch) == (
        6, 4, 1, 1)
    assert info.compiles == 1 and "4 hit(s) run without Python" in str(info)
    assert f(x, (3, 4)).tolist() == [2.0] * 4    # the cache is still consistent


def test_cache_info_and_clear_cache():
    f = jit(lambda a: a * 3)
    x = jnp.ones(4)
    f(x)
    f(x)
    info = f.cache_info()
    assert info.compiles == 1 and info.executables == 1 and info.python_calls == 1
    assert "first call" in " ".join(info.recent_misses)
    f.clear_cache()
    assert f.cache_info().executables == 0 and f.cache_info().signatures == 0
    assert f(x).tolist() == [3.0] * 4
    assert f.cache_info().compiles == 2


def test_inside_other_transformations():
    f = jit(lambda a: jnp.sin(a) * 2)
    x = jnp.linspace(0, 1, 8)
    np.testing.assert_allclose(jax.grad(lambda a: f(a).sum())(x), 2 * jnp.cos(x), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(lambda a: f(a) + 1)(x), jnp.sin(x) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(f)(x), jnp.sin(x) * 2, rtol=1e-6)
    with jax.disable_jit():
        np.testing.assert_allclose(f(x), jnp.sin(x) * 2, rtol=1e-6)


def test_sharded_mlp_training_step_is_a_drop_in():
    """Data parallel over 'data' (2), model parallel over 'model' (4): same losses, same shardings."""
    make, step, x, y = mlp()
    runs = []
    for jit_fn in (jax.jit, jit):
        stepper = jit_fn(step, donate_argnums=0)
        params, losses, shardings = make(), [], None
        for _ in range(4):
            old = params
            params, loss = stepper(params, x, y)
            assert all(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(old))
            losses.append(float(loss))
            shardings = [(type(p.sharding), p.sharding) for p in jax.tree_util.tree_leaves(params)]
        runs.append((losses, shardings, params, stepper))
    (theirs, their_shardings, their_params, _), (mine, my_shardings, my_params, stepper) = runs
    assert mine == theirs and mine[-1] < mine[0]
    assert my_shardings == their_shardings
    _same(my_params, their_params)
    assert stepper.cache_info().compiles == 1


def test_the_engine_never_imports_the_spec():
    code = textwrap.dedent("""
        import sys, jax
        jax.config.update("jax_num_cpu_devices", 8)
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from shardlaw.engine import jit
        mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
        x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("x")))
        f = jit(lambda a: a * 2)
        f(x); f(x); f.explain(x); f.lower(x).compile()(x)
        try:
            jit(lambda a: a, in_shardings=NamedSharding(mesh, P("y")))(x)
        except ValueError:
            pass
        loaded = sorted(m for m in sys.modules if m.startswith("shardlaw.spec"))
        assert not loaded, loaded
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_stage_objects_carry_what_jax_stages_carry():
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(MESH, P("x")))
    g = lambda a, b: (a * 2, b)  # noqa: E731
    mine, theirs = jit(g, donate_argnums=1), jax.jit(g, donate_argnums=1)
    traced = [f.trace(x, 1.0) for f in (mine, theirs)]
    for name in ("out_avals", "fun_name", "donate_argnums", "in_tree", "out_tree"):
        assert getattr(traced[0], name) == getattr(traced[1], name), name
    lowered = [t.lower() for t in traced]
    for name in ("in_tree", "out_tree", "donate_argnums", "in_avals"):
        assert getattr(lowered[0], name) == getattr(lowered[1], name), name
    assert lowered[0].out_info == lowered[1].out_info
    assert lowered[0].cost_analysis() == lowered[1].cost_analysis()
    compiled = [lo.compile() for lo in lowered]
    assert compiled[0].input_formats == compiled[1].input_formats
    assert compiled[0].output_formats == compiled[1].output_formats
    assert compiled[0].in_avals == compiled[1].in_avals


def test_lowering_for_other_platforms_and_compile_options():
    x = jnp.ones(4)
    f = jit(lambda a: a * 2)
    for platforms in (("cpu",), ("cpu", "cuda"), ("cuda",)):
        text = f.trace(x).lower(lowering_platforms=platforms).as_text()
        assert text == jax.jit(lambda a: a * 2).trace(x).lower(
            lowering_platforms=platforms).as_text()
    assert f.trace(x).lower(lowering_platforms=("cpu",)).compile()(x).tolist() == [2.0] * 4
    for platforms in (("cpu", "cuda"), ("cuda",)):
        with pytest.raises(ValueError) as caught:
            f.trace(x).lower(lowering_platforms=platforms).compile()
        assert caught.value.rule == "ENG-5" and str(platforms) in str(caught.value)
    with pytest.raises(ValueError) as caught:
        f.lower(x).compile(device_assignment=(jax.devices()[1],))
    assert caught.value.rule == "ENG-5"
    before = f.cache_info().compiles
    compiled = f.lower(x).compile({"xla_cpu_enable_fast_math": False})
    assert compiled(x).tolist() == [2.0] * 4
    assert f.cache_info().compiles == before + 1   # other compiler options: another executable


@pytest.mark.parametrize("shape,spec", [((0, 8), P(None, "y")), ((4, 0), P("x")),
                                        ((8, 0), P("x", "y"))])
def test_zero_size_results_split_by_their_sharding_are_readable(shape, spec):
    """jax.jit returns these with unsplit per-device buffers, which np.asarray cannot read."""
    s = NamedSharding(MESH, spec)
    theirs = jax.jit(lambda a: a * 2, out_shardings=s)(np.zeros(shape, np.float32))
    assert theirs.addressable_shards[0].data.shape == shape          # JAX's bug, as seen
    f = jit(lambda a: a * 2, out_shardings=s)
    for _ in range(3):
        mine = f(np.zeros(shape, np.float32))
        assert mine.sharding == theirs.sharding and mine._committed == theirs._committed
        assert all(sh.data.shape == s.shard_shape(shape) for sh in mine.addressable_shards)
        assert np.asarray(mine).shape == shape


def test_call_counting_is_a_frame_in_front_of_the_dispatcher_only_when_asked_for():
    from shardlaw.engine import count_calls
    f = jit(lambda a: a + 1)
    assert type(_called(f)).__name__ == "PjitFunction" and f.__wrapped__ is not None
    x = jnp.ones(4)
    for _ in range(3):
        assert f(x).tolist() == [2.0] * 4
    info = f.cache_info()
    assert info.calls is None and info.dispatch_hits is None and info.python_calls == 1
    assert "not counted" in str(info) and info.compiles == 1
    assert f.explain(x).accepted and f.lower(x).compile()(x).tolist() == [2.0] * 4
    count_calls(True)
    try:
        counted = jit(lambda a: a + 1)
    finally:
        count_calls(False)
    assert type(_called(counted)).__name__ == "function"
    for _ in range(3):
        counted(x)
    assert (counted.cache_info().calls, counted.cache_info().dispatch_hits) == (3, 2)
    assert type(_called(jit(lambda a: a))).__name__ == "PjitFunction"    # off again
    assert type(_called(jit(lambda a, n: a, static_argnums=1))).__name__ == "function"  # ENG-1


def _called(jitted):
    """What calling a jitted function runs: the dispatcher itself (an engine function of
    jax.jit's own type), or the frame in front of it."""
    from shardlaw.engine import JittedFunction
    return jitted._call if type(jitted) is JittedFunction else jitted

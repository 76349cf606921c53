"""What a user sees of the engine where jax.jit once showed otherwise: the stack a traced
function runs in, and how a PRNG key result's sharding is spelled.

Each case runs under a fresh ``jax.jit`` and under the engine in its three forms: called as
``shardlaw.engine.jit``, as ``jax.jit`` under :func:`shardlaw.engine.install`, and as
``jax.jit`` assigned by hand (the bare patch). JAX's own ``api_test.py::TracebackTest::
test_jit_traceback`` counts the frames a jitted call puts between the caller and the traced
function (6 under jax.jit, 13 under the engine before, 7 with static or donated arguments
after that); ``pjit_test.py::ArrayPjitTest::
test_partial_sharded_prng_key_inp`` reads ``jax.random.key_data`` of a key array the
dispatcher returned (``P(None, 'y', 'x')`` under jax.jit, ``P(None, 'y', 'x', None)``
under the engine before). These tests are ours, written against jax.jit itself.
"""

from __future__ import annotations

import contextlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import shardlaw.engine as engine

MODES = ("engine.jit", "install()", "bare patch")


@contextlib.contextmanager
def _jit_as(mode: str):
    """The jit a user calls in ``mode``: JAX's own, or the engine's in one of its forms."""
    if mode == "jax.jit":
        yield jax.jit
    elif mode == "engine.jit":
        yield engine.jit
    elif mode == "install()":
        with engine.install():
            yield jax.jit
    else:
        original = jax.jit
        jax.jit = engine.jit
        try:
            yield jax.jit
        finally:
            jax.jit = original


def _depth(jit, kind: str) -> int:
    """Frames between this function's frame and the traced function's, for a call of
    ``kind`` of a fresh jit of it (the traced function's own frame counted)."""
    here = sys._getframe()
    seen = []

    def f(x, *rest):
        frame, count = sys._getframe(), 0
        while frame is not here:
            frame, count = frame.f_back, count + 1
        seen.append(count)
        return x

    x = np.ones(3, np.float32)
    if kind == "call":
        jit(f)(x)
    elif kind == "static argument":
        jit(f, static_argnums=1)(x, 2)
    elif kind == "donated argument":
        jit(f, donate_argnums=0)(jnp.ones(3))
    elif kind == "static and donated arguments":
        jit(f, static_argnums=1, donate_argnums=0)(jnp.ones(3), 2)
    elif kind == "static argument by name":
        jit(lambda x, n: f(x, n), static_argnames="n")(x, n=2)
    elif kind == "static argument, second value":
        g = jit(f, static_argnums=1)
        g(x, 2)
        seen.clear()
        g(x, 3)
    elif kind == "trace":
        jit(f).trace(x)
    elif kind == "lower":
        jit(f).lower(x)
    elif kind == "eval_shape":
        jit(f).eval_shape(x)
    elif kind == "jax.eval_shape":
        jax.eval_shape(jit(f), x)
    elif kind == "under grad":
        jax.grad(lambda v: jit(f)(v).sum())(x)
    elif kind == "under vmap":
        jax.vmap(jit(f))(np.ones((2, 3), np.float32))
    assert len(seen) == 1, seen
    return seen[0]


KINDS = ("call", "trace", "lower", "eval_shape", "under grad", "under vmap")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_traced_function_runs_no_deeper_than_under_jax_jit(mode, kind):
    with _jit_as("jax.jit") as jit:
        theirs = _depth(jit, kind)
    with _jit_as(mode) as jit:
        mine = _depth(jit, kind)
    assert mine <= theirs, f"{kind} under {mode}: {mine} frames, jax.jit {theirs}"


def test_the_depth_jax_counts_is_jax_jits():
    # JAX's test expects 6 frames from the caller's into a function its jit traces (the
    # function's own counted); the engine's call is held to the same number, not merely
    # to whatever jax.jit does here.
    with _jit_as("jax.jit") as jit:
        assert _depth(jit, "call") == 6
    for mode in MODES:
        with _jit_as(mode) as jit:
            assert _depth(jit, "call") == 6, mode


@pytest.mark.parametrize("mode", MODES)
def test_jax_eval_shape_of_an_engine_function_runs_no_deeper(mode):
    # jax.eval_shape asks a function of JAX's jitted type as it asks JAX's own; an engine
    # function with nothing in front of its dispatcher is of that type, in every mode.
    with _jit_as("jax.jit") as jit:
        theirs = _depth(jit, "jax.eval_shape")
    with _jit_as(mode) as jit:
        assert _depth(jit, "jax.eval_shape") <= theirs


FRAMED = ("static argument", "donated argument", "static and donated arguments",
          "static argument by name", "static argument, second value")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", FRAMED)
def test_behind_the_frame_in_front_of_the_dispatcher_no_deeper_than_jax_jit(mode, kind):
    # A function with static or donated arguments runs one frame in front of JAX's C++
    # dispatcher (ENG-1 for an unhashable static argument, ENG-3/ENG-6 for donations:
    # docs/engine.rst); that frame is the API boundary, and the dispatcher's miss decides
    # the new signature in its own frame, so the function runs as deep as under jax.jit.
    with _jit_as("jax.jit") as jit:
        theirs = _depth(jit, kind)
    with _jit_as(mode) as jit:
        mine = _depth(jit, kind)
    assert mine <= theirs, f"{kind} under {mode}: {mine} frames, jax.jit {theirs}"


@pytest.mark.parametrize("kind", ("call", "static argument", "donated argument"))
def test_with_call_counting_on_no_deeper_than_jax_jit(kind):
    # Counting puts the same frame in front of every function's dispatcher.
    with _jit_as("jax.jit") as jit:
        theirs = _depth(jit, kind)
    engine.count_calls(True)
    try:
        mine = _depth(engine.jit, kind)
    finally:
        engine.count_calls(False)
    assert mine <= theirs, f"{kind} counted: {mine} frames, jax.jit {theirs}"


def test_a_framed_functions_first_call_leaves_its_signature_to_the_dispatcher():
    # Decided in the miss's own frame, the signature's plan is kept and handed to the C++
    # dispatcher as on any miss: later calls run without Python (one python call in all).
    f = engine.jit(lambda x, n: x * n, static_argnums=1)
    g = engine.jit(lambda x: x + 1, donate_argnums=0)
    for _ in range(3):
        f(np.ones(3, np.float32), 2)
        g(jnp.ones(3))
    for jitted in (f, g):
        info = jitted.cache_info()
        assert (info.python_calls, info.signature_misses, info.compiles) == (1, 1, 1), info


# --------------------------------------------------------------------------- PRNG keys

def _keys_from_seeds(jit):
    """A key array made inside a jit from seeds split over two of three mesh axes, then
    transposed (so its spec names the axes in the other order): the first call (the Python
    path), the second (the C++ dispatcher's), and an ahead-of-time compiled call."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"))
    seeds = jax.device_put(np.arange(32, dtype=np.uint32).reshape(8, 2, 2),
                           NamedSharding(mesh, P("x", "y", None)))

    def make_keys(s):
        return jax.vmap(jax.vmap(jax.vmap(jax.random.key)))(s).T

    jitted = jit(make_keys)
    first, second = jitted(seeds), jitted(seeds)
    ahead = jitted.lower(seeds).compile()(seeds)
    return mesh, (first, second, ahead)


def _spelled(sharding):
    return type(sharding).__name__, tuple(sharding.spec), sharding.mesh.axis_names


@pytest.mark.parametrize("mode", MODES)
def test_a_key_results_sharding_and_key_data_are_spelled_as_jax_jit_spells_them(mode):
    with _jit_as("jax.jit") as jit:
        mesh, theirs = _keys_from_seeds(jit)
    with _jit_as(mode) as jit:
        _, mine = _keys_from_seeds(jit)
    for call, a, b in zip(("first call", "second call", "compiled ahead"), mine, theirs):
        assert jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
        assert _spelled(a.sharding) == _spelled(b.sharding), call
        assert a.sharding == b.sharding, call
        data, want = jax.random.key_data(a), jax.random.key_data(b)
        assert _spelled(data.sharding) == _spelled(want.sharding), call
        assert data.sharding == want.sharding, call
        np.testing.assert_array_equal(np.asarray(data), np.asarray(want))
    # the case JAX's test reads: a key the dispatcher returned, its data on the key's spec
    assert jax.random.key_data(mine[1]).sharding == NamedSharding(mesh, P(None, "y", "x"))

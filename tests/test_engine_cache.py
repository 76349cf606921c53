"""The shardlaw cache policy in the engine: one executable per placement class, no transfer, no crash.

Placement-equal shardings written differently (renamed axes, GSPMD for Named, size-1 axes,
trailing Nones, a one-device mesh for a SingleDeviceSharding) share one executable, and the
results still come back exactly as a fresh ``jax.jit`` gives them. Arguments are handed to
the executable over their own buffers; an argument on other devices is moved every time
(``jax.jit`` hands the wrong buffer to XLA on a repeat call, notes/jit-facts.md §9). The
cache is bounded, thread-safe, and forgets a function that is garbage-collected.
"""

import gc
import threading

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import shardlaw.spec as S
from shardlaw.engine import CACHE, jit, set_capacity
from shardlaw.engine import internals
from shardlaw.properties import strategies as ST
from shardlaw.properties.call_strategies import home_meshes
from shardlaw.properties.engine_workloads import count_compiles, placement_equal_workload, rewrites
from shardlaw.properties.registry import checks

DEVICES = jax.devices()[:8]
MESH = Mesh(np.array(DEVICES).reshape(2, 4), ("x", "y"))


def f(a):
    return a * 2 + 1


def _fresh_jax(fun, *args, **options):
    """What a fresh jax.jit does with one call (each fresh jax.jit is called once)."""
    return jax.jit(lambda *a: fun(*a), **options)(*args)


def _same(mine, theirs):
    assert type(mine.sharding) is type(theirs.sharding), (mine.sharding, theirs.sharding)
    assert mine.sharding == theirs.sharding, (mine.sharding, theirs.sharding)
    assert mine._committed == theirs._committed
    assert mine.shape == theirs.shape and mine.dtype == theirs.dtype
    if mine.size:  # jax 0.10.2 cannot read back some zero-size sharded results at all
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def test_placement_equal_workload_compiles_once_per_class():
    shape, workload = placement_equal_workload()
    host = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    arrays = [jax.device_put(host, s) for _, _, s in workload]
    expected = [_fresh_jax(f, a) for a in arrays]
    classes = len({placement for _, placement, _ in workload})
    jitted = jit(lambda a: f(a))
    with count_compiles() as engine_count:
        for a, theirs in zip(arrays, expected):
            _same(jitted(a), theirs)
            _same(jitted(a), theirs)   # the C++ fast path
    jax.clear_caches()
    plain = jax.jit(lambda a: f(a))
    with count_compiles() as jax_count:
        for a in arrays:
            plain(a)
            plain(a)
    print(f"\n{len(workload)} placement-equal variants, {classes} placement classes: "
          f"engine compiled {engine_count.count}, jax.jit {jax_count.count}")
    assert engine_count.count == classes == jitted.cache_info().compiles
    assert jitted.cache_info().python_calls == len(workload)


@st.composite
def _sharding_sequences(draw):
    """A sharding over a random mesh, a shape it fits, and calls with its placement-equal rewrites."""
    mesh = draw(home_meshes(max_devices=8))
    spec = draw(ST.partition_specs(mesh, max_rank=2))
    spec = S.P(*[e if isinstance(e, (str, tuple)) or e is None else None for e in spec])
    sharding = S.NamedSharding(mesh, spec)
    if draw(st.integers(0, 5)) == 0:
        sharding = S.SingleDeviceSharding(draw(st.sampled_from(mesh.devices.id_tuple())))
    shape = draw(ST.shapes_for(sharding, divisible=True, max_rank=2))
    other = draw(st.sampled_from([None, S.NamedSharding(mesh, S.P()),
                                  S.SingleDeviceSharding(0)]))
    picks = draw(st.lists(st.integers(0, 20), min_size=2, max_size=6))
    return sharding, tuple(shape), other, picks


@checks("EQ-2")
@given(_sharding_sequences())
@settings(max_examples=25)
def test_call_sequences_compile_once_per_placement_class(case):
    spec_sharding, shape, other, picks = case
    sharding = S.to_jax(spec_sharding)
    variants = [s for _, s in rewrites(sharding, len(shape))]
    if other is not None:
        variants.append(S.to_jax(other))
    sequence = [variants[p % len(variants)] for p in picks]
    host = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    jitted = jit(lambda a: f(a))
    for s in sequence:
        x = jax.device_put(host, s)
        _same(jitted(x), _fresh_jax(f, x))
    # The policy: one executable per placement class (and ordered device list).
    classes = []
    for s in dict.fromkeys(sequence):
        ours = S.from_jax(s)
        devices = tuple(d.id for d in s._device_assignment)
        if not any(S.placement_equivalent(ours, c, shape) and devices == d for c, d in classes):
            classes.append((ours, devices))
    assert jitted.cache_info().compiles == len(classes)


def test_relabelled_arguments_share_their_buffers():
    """A placement-equal argument in another device order is relabelled, never copied."""
    reversed_mesh = Mesh(np.array(DEVICES[::-1]).reshape(2, 4), ("x", "y"))
    x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4),
                       NamedSharding(reversed_mesh, P()))
    jitted = jit(f, in_shardings=NamedSharding(MESH, P()))
    seen = []
    original_array_over, original_put = internals.array_over, jax.device_put

    def watched_array_over(aval, sharding, buffers, committed):
        seen.append(sorted(b.unsafe_buffer_pointer() for b in buffers))
        return original_array_over(aval, sharding, buffers, committed)

    def no_transfer(*args, **kwargs):
        raise AssertionError("the engine moved an argument it only needed to relabel")

    mine = []
    try:
        internals.array_over = watched_array_over
        jax.device_put = no_transfer
        for _ in range(3):
            mine.append(jitted(x))
    finally:
        internals.array_over, jax.device_put = original_array_over, original_put
    pointers = sorted(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)
    assert seen and all(p == pointers for p in seen)
    theirs = _fresh_jax(f, x, in_shardings=NamedSharding(MESH, P()))
    for out in mine:
        _same(out, theirs)


def test_committed_argument_on_other_devices_is_moved_on_every_call():
    """jax.jit crashes on the second call here (SIGSEGV, notes/jit-facts.md §9)."""
    permuted = Mesh(np.array([DEVICES[i] for i in (0, 2, 1, 3, 4, 6, 5, 7)]).reshape(2, 4),
                    ("x", "y"))
    x = jax.device_put(np.arange(64.0, dtype=np.float32).reshape(8, 8),
                       NamedSharding(permuted, P("x")))
    wanted = NamedSharding(MESH, P("x"))
    jitted = jit(f, in_shardings=wanted)
    theirs = _fresh_jax(f, x, in_shardings=wanted)
    for _ in range(4):
        _same(jitted(x), theirs)
    info = jitted.cache_info()
    assert info.python_calls == 4 and info.compiles == 1
    assert jitted.explain(x).transfers == ("args[0]",)


def test_donated_arguments_are_invalidated_as_in_jax():
    shape, workload = placement_equal_workload()
    host = np.ones(shape, np.float32)
    jitted = jit(lambda a: a + 1, donate_argnums=0)
    for how, _, s in workload[:6]:
        mine, theirs = jax.device_put(host, s), jax.device_put(host, s)
        out = jitted(mine)
        _fresh_jax_donated = jax.jit(lambda a: a + 1, donate_argnums=0)(theirs)
        assert mine.is_deleted() == theirs.is_deleted(), how
        _same(out, _fresh_jax_donated)


def test_the_cache_is_bounded():
    shape, workload = placement_equal_workload()
    host = np.ones(shape, np.float32)
    arrays = [jax.device_put(host, s) for _, _, s in workload]
    capacity = CACHE.capacity
    try:
        set_capacity(2)
        jitted = jit(lambda a: f(a))
        for _ in range(2):
            for a in arrays:
                _same(jitted(a), _fresh_jax(f, a))
                assert len(CACHE) <= 2
    finally:
        set_capacity(capacity)


def test_entries_go_with_their_function():
    def make():
        local = jit(lambda a: a - 1)
        local(np.ones(3, np.float32))
        return local._engine.token

    token = make()
    gc.collect()
    assert CACHE.count(token) == 0


def test_concurrent_calls_and_clear_cache():
    shape, workload = placement_equal_workload()
    host = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    arrays = [jax.device_put(host, s) for _, _, s in workload]
    expected = [_fresh_jax(f, a) for a in arrays]
    jitted = jit(lambda a: f(a))
    failures = []

    def caller(offset):
        try:
            for k in range(3 * len(arrays)):
                i = (k + offset) % len(arrays)
                _same(jitted(arrays[i]), expected[i])
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))

    def clearer():
        try:
            for _ in range(5):
                jitted.clear_cache()
        except Exception as error:  # noqa: BLE001
            failures.append(repr(error))

    threads = [threading.Thread(target=caller, args=(k * 5,)) for k in range(4)]
    threads.append(threading.Thread(target=clearer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures[:3]
    info = jitted.cache_info()
    assert info.executables <= 3 and not info.divergences
    for a, theirs in zip(arrays, expected):
        _same(jitted(a), theirs)


@pytest.mark.parametrize("committed", [True, False])
def test_one_device_programs_stay_on_their_device(committed):
    x = jax.device_put(np.ones(4, np.float32), DEVICES[3]) if committed else \
        jax.device_put(np.ones(4, np.float32))
    jitted = jit(f)
    for _ in range(3):
        out = jitted(x)
    _same(out, _fresh_jax(f, x))
    assert isinstance(out.sharding, SingleDeviceSharding)


def _policy_sequences():
    from shardlaw.properties.cache_strategies import call_sequences
    return call_sequences()


@checks("CACHE-12")
@given(_policy_sequences())
@settings(max_examples=int(__import__("os").environ.get("ENGINE_SEQUENCES", "30")))
def test_engine_compiles_what_the_policy_predicts(sites):
    """Call sequences of the cache model: the engine compiles once per policy class (CACHE-12),
    Explicit mesh axes included (they are part of an argument's type, in the policy and in
    the engine alike)."""
    import warnings

    from shardlaw.engine import EngineRejection
    from shardlaw.properties import jit_harness as H
    from shardlaw.properties.cache_harness import ignored_of, harness_function
    from shardlaw.spec.jit.cache import policy_classes

    rows = policy_classes(sites)
    functions, wrappers = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for site, row in zip(sites, rows):
            call = site.call
            fun = functions.setdefault(site.function, harness_function(ignored_of(call)))
            if site.wrapper not in wrappers:
                wrappers[site.wrapper] = jit(fun, **H.jit_kwargs(call))
            results = []
            for jit_fn in (wrappers[site.wrapper], jax.jit(fun, **H.jit_kwargs(call))):
                with H.default_device_context(call):
                    args, kwargs = H.build_values(call.args), H.build_values(call.kwargs)
                with H.mesh_context(call), H.default_device_context(call):
                    try:
                        results.append(jit_fn(*args, **kwargs))
                    except ValueError as error:
                        results.append(error)
            mine, theirs = results
            if row.cls is None or isinstance(theirs, Exception):
                assert isinstance(mine, EngineRejection) and isinstance(theirs, Exception), results
                continue
            for a, b in zip(*map(jax.tree_util.tree_leaves, results)):
                _same(a, b)
    compiled = sum(w.cache_info().compiles for w in wrappers.values())
    divergences = [d for w in wrappers.values() for d in w.cache_info().divergences]
    assert not divergences, divergences
    predicted = sum(r.compiles for r in rows)
    report = ([(r.cls, r.compiles) for r in rows],
              [m for w in wrappers.values() for m in w.cache_info().recent_misses])
    assert compiled == predicted, report

"""Layouts through the engine: Format leaves of jit's options and arrays in non-default layouts.

Every case is held to a fresh ``jax.jit`` on the same arguments: acceptance, JAX's error
type and the engine's rule ID (JIT-2 for a bare Layout, LAY-1 for a committed array in
another layout than its Format gives), and for accepted calls the results' values,
shardings, committed flags and layouts, on the first call and on the C++ fast path.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.layout import Format, Layout
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardlaw.engine import EngineRejection, jit

DEVICES = jax.devices()[:8]
MESH = Mesh(np.array(DEVICES).reshape(2, 4), ("x", "y"))
S = NamedSharding(MESH, P("x"))
HOST = np.arange(64, dtype=np.float32).reshape(8, 8)


def transposed(a):
    return a.T * 2


def _arguments():
    column_major = jax.jit(lambda a: a, out_shardings=Format(Layout((1, 0)), S))(HOST)
    assert column_major.format.layout.major_to_minor == (1, 0)
    return {"committed": jax.device_put(HOST, S), "numpy": HOST,
            "committed (1, 0)": column_major, "uncommitted": jnp.asarray(HOST)}


OPTIONS = {
    "in bare Layout": dict(in_shardings=Layout((0, 1))),
    "in Format(AUTO)": dict(in_shardings=Format(Layout.AUTO)),
    "in Format(AUTO, s)": dict(in_shardings=Format(Layout.AUTO, S)),
    "in Format((0, 1), s)": dict(in_shardings=Format(Layout((0, 1)), S)),
    "in Format((1, 0), s)": dict(in_shardings=Format(Layout((1, 0)), S)),
    "in Format(None, s)": dict(in_shardings=Format(None, S)),
    "out Format(AUTO)": dict(out_shardings=Format(Layout.AUTO)),
    "out Format((1, 0), s)": dict(out_shardings=Format(Layout((1, 0)), S)),
    "out bare Layout": dict(out_shardings=Layout((0, 1))),
    "no layouts": {},
}


def _outcome(fn, arg):
    try:
        out = fn(arg)
    except Exception as error:  # noqa: BLE001 - the outcome is compared, not raised
        builtin = next(c for c in type(error).__mro__ if c.__module__ == "builtins")
        return ("refused", builtin, getattr(error, "rule", None))
    return ("ran", out.format.layout.major_to_minor, out.sharding, out._committed,
            np.asarray(out).tolist())


@pytest.mark.parametrize("name", list(OPTIONS))
def test_layout_options_behave_as_in_jax(name):
    options = OPTIONS[name]
    rules = set()
    for label, arg in _arguments().items():
        try:
            theirs = _outcome(jax.jit(transposed, **options), arg)
        except ValueError:   # refused at jax.jit(...)
            theirs = ("refused", ValueError, None)
        try:
            mine_fn = jit(transposed, **options)
        except EngineRejection as error:
            mine = first = ("refused", ValueError, error.rule)
        else:
            first, mine = _outcome(mine_fn, arg), _outcome(mine_fn, arg)
        assert first == mine, (label, first, mine)
        if theirs[0] == "refused":
            assert mine[:2] == theirs[:2], (label, theirs, mine)
            rules.add(mine[2])
        else:
            assert mine == theirs, (label, theirs, mine)
    if "bare" in name:
        assert rules == {"JIT-2"}
    elif "AUTO" in name and name.startswith("in"):
        assert rules == {"LAY-1"}


def test_an_unused_argument_in_another_layout_is_refused_too():
    args = _arguments()
    options = dict(in_shardings=(S, Format(Layout((0, 1)), S)))
    with pytest.raises(ValueError):
        jax.jit(lambda a, b: a, **options)(args["committed"], args["committed (1, 0)"])
    with pytest.raises(ValueError) as caught:
        jit(lambda a, b: a, **options)(args["committed"], args["committed (1, 0)"])
    assert caught.value.rule == "LAY-1" and caught.value.path == "args[1]"
    assert "(1, 0)" in str(caught.value) and "(0, 1)" in str(caught.value)


def test_each_layout_of_an_argument_gets_its_own_executable():
    """JAX compiles a committed argument in a non-default layout separately; so does the engine,
    and calls alternating between the two never hand a buffer to the wrong executable."""
    args = _arguments()
    row, column = args["committed"], args["committed (1, 0)"]
    jitted = jit(lambda a: a * 3)
    for arg in itertools.islice(itertools.cycle([row, column]), 8):
        np.testing.assert_array_equal(np.asarray(jitted(arg)), HOST * 3)
    assert jitted.cache_info().compiles == 2
    relabelled = jax.make_array_from_single_device_arrays(
        column.shape, NamedSharding(Mesh(MESH.devices, ("a", "b")), P("a")),
        [s.data for s in column.addressable_shards])
    if relabelled.format.layout.major_to_minor == (1, 0):
        np.testing.assert_array_equal(np.asarray(jitted(relabelled)), HOST * 3)
        assert jitted.cache_info().compiles == 2   # placement-equal, same layout: reused


def test_aot_compiled_with_a_layout():
    args = _arguments()
    options = dict(in_shardings=Format(Layout((1, 0)), S))
    compiled = jit(transposed, **options).lower(args["committed (1, 0)"]).compile()
    theirs = jax.jit(transposed, **options).lower(args["committed (1, 0)"]).compile()
    np.testing.assert_array_equal(np.asarray(compiled(args["committed (1, 0)"])),
                                  np.asarray(theirs(args["committed (1, 0)"])))
    with pytest.raises(ValueError):
        theirs(args["committed"])
    with pytest.raises(ValueError) as caught:
        compiled(args["committed"])
    assert caught.value.rule == "AOT-3" and caught.value.path == "args[0]"
    plain = jit(transposed).lower(args["committed"]).compile()
    with pytest.raises(ValueError):
        jax.jit(transposed).lower(args["committed"]).compile()(args["committed (1, 0)"])
    with pytest.raises(ValueError) as caught:
        plain(args["committed (1, 0)"])
    assert caught.value.rule == "AOT-3" and "(1, 0)" in str(caught.value)


def test_an_argument_in_a_layout_on_other_devices_is_moved_as_jax_moves_it():
    devices = [DEVICES[i] for i in (0, 2, 1, 3, 4, 6, 5, 7)]
    permuted = NamedSharding(Mesh(np.array(devices).reshape(2, 4), ("x", "y")), P("x"))
    arg = jax.jit(lambda a: a, out_shardings=Format(Layout((1, 0)), permuted))(HOST)
    for options in (dict(in_shardings=Format(Layout((1, 0)), S)), dict(in_shardings=S)):
        theirs = _outcome(jax.jit(lambda a: a * 2, **options), arg)  # one call: see §9
        jitted = jit(lambda a: a * 2, **options)
        for _ in range(3):
            assert _outcome(jitted, arg) == theirs
        assert jitted.cache_info().compiles == 1

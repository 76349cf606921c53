"""What real libraries do with jit, through the engine and through jax.jit alike.

Each test mimics how a library uses jit (flax NNX closing over its hijax Variables, flax's
traceback tests, equinox's ``filter_jit(...).lower()`` under runtime type checks and its
``compile(compiler_options=...)``) with JAX alone, and holds the engine to a fresh
``jax.jit`` of the same function: values, shardings, committed flags, the state the
function leaves behind, exception classes and words, and the frames a user is shown.
"""

from __future__ import annotations

import dataclasses
import os
import re
import traceback
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import hijax   # JAX's own mutable hijax type, Box; JAX exports none publicly
from jax.experimental.layout import Format, Layout
from jax.sharding import NamedSharding, PartitionSpec as P

import shardlaw.engine as engine
from shardlaw.engine import jit

DEVICES = jax.devices()
MESH = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def _sharded(values):
    return jax.device_put(values, NamedSharding(MESH, P("x")))


def _seen(out):
    """What a caller sees of a result: values, sharding, committed flag."""
    return [(np.asarray(x).tolist(), x.sharding, x._committed) for x in jax.tree.leaves(out)]


def _on_both(run):
    """``run(jit_function)`` under jax.jit and under the engine (each builds its own state)."""
    return run(jax.jit), run(jit)


# --------------------------------------------------------------------------- closures

# What a jitted function closes over, made fresh for each run: JAX's mutable hijax Box
# (what flax NNX's Variable(hijax=True) is), refs, and constants of every kind.
CLOSED_OVER = {
    "hijax Box, read": (lambda: hijax.Box(jnp.arange(8.0)), lambda c, x: x + c.get()),
    "hijax Box, written": (lambda: hijax.Box(jnp.arange(8.0)),
                           lambda c, x: (c.set(c.get() * x), c.get() + 1)[1]),
    "hijax Box and an array on device 3": (
        lambda: (hijax.Box(jnp.arange(8.0)), jax.device_put(jnp.ones(8), DEVICES[3])),
        lambda c, x: x + c[0].get() + c[1]),
    "ref, read and written": (lambda: jax.new_ref(jnp.arange(8.0)),
                              lambda r, x: (r.__setitem__(..., r[...] + x), r[...] * 2)[1]),
    "ref on device 3": (lambda: jax.new_ref(jax.device_put(jnp.arange(8.0), DEVICES[3])),
                        lambda r, x: (r.__setitem__(..., r[...] + x), r[...] * 2)[1]),
    "numpy array": (lambda: np.arange(8.0), lambda c, x: x + c),
    "numpy scalar": (lambda: np.float32(3), lambda c, x: x * c),
    "python int": (lambda: 3, lambda c, x: x * c),
    "array on device 3": (lambda: jax.device_put(jnp.ones(8), DEVICES[3]), lambda c, x: x + c),
    "sharded array": (lambda: _sharded(jnp.arange(8.0)), lambda c, x: x + c),
    "PRNG key": (lambda: jax.random.key(0), lambda k, x: x + jax.random.normal(k, (8,))),
}

ARGUMENTS = {
    "python float": lambda: 2.0,
    "uncommitted array": lambda: jnp.full(8, 2.0),
    "array on device 3": lambda: jax.device_put(jnp.full(8, 2.0), DEVICES[3]),
}


def _refusal(error: Exception) -> tuple[bool, str]:
    """A refusal as compared: its class and first line, the function's name left out (JAX
    names it by its qualified name when called, by its bare name ahead of time, and the
    engine decides every call ahead of time)."""
    return (isinstance(error, ValueError),
            re.sub(r" of \S+ with shape", " of <fun> with shape", str(error).split("\n")[0]))


def _closure_run(make, body, argument):
    def run(jit_function):
        closed = make()
        f = jit_function(lambda x: body(closed, x))
        try:
            outs = [_seen(f(argument())) for _ in range(2)]
        except ValueError as error:
            outs = [_refusal(error)]
        boxes = [c for c in (closed if isinstance(closed, tuple) else (closed,))
                 if isinstance(c, hijax.Box)]
        state = [np.asarray(b.get()).tolist() for b in boxes]
        if isinstance(closed, jax.Ref):
            state.append(np.asarray(closed[...]).tolist())
        return outs, state
    return run


@pytest.mark.parametrize("argument", ARGUMENTS, ids=list(ARGUMENTS))
@pytest.mark.parametrize("closed", CLOSED_OVER, ids=list(CLOSED_OVER))
def test_a_closed_over_value_is_taken_as_jax_jit_takes_it(closed, argument):
    make, body = CLOSED_OVER[closed]
    theirs, mine = _on_both(_closure_run(make, body, ARGUMENTS[argument]))
    assert mine == theirs


def test_a_closed_over_box_that_changes_type_is_traced_again_as_jax_jit_does():
    # JAX hoists a closed-over mutable hijax value into the program's inputs and traces
    # again when its type changes (flax NNX: a Variable given a new shape between steps).
    def run(jit_function):
        box = hijax.Box(jnp.arange(4.0))
        traces = []
        f = jit_function(lambda x: (traces.append(1), x + box.get())[1])
        first = np.asarray(f(1.0)).tolist()
        box.set(jnp.arange(6.0))
        second = np.asarray(f(1.0)).tolist()
        return first, second, len(traces)
    theirs, mine = _on_both(run)
    assert mine == theirs
    assert mine[1] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_a_function_closing_over_a_box_is_lowered_ahead_of_time_as_jax_jit_lowers_it():
    # JAX 0.10.2 runs such a function but cannot lower it ahead of time (its hoisted
    # constants do not fit the lowering's argument tree); the engine's stages are JAX's.
    def lowered(jit_function):
        box = hijax.Box(jnp.arange(4.0))
        try:
            return jit_function(lambda x: x + box.get()).lower(1.0).as_text()
        except ValueError as error:
            return _refusal(error)
    theirs, mine = _on_both(lowered)
    assert mine == theirs


# --------------------------------------------------------------------------- tracebacks

@pytest.fixture(params=["remove_frames", "quiet_remove_frames", "tracebackhide"])
def filtering(request):
    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", request.param)
    yield request.param
    jax.config.update("jax_traceback_filtering", before)


def _user_frames(error: BaseException, mode: str) -> list[str]:
    """The frames the user is shown (as flax's traceback tests count them)."""
    return [f"{frame.f_code.co_name}" for frame, _ in traceback.walk_tb(error.__traceback__)
            if mode != "tracebackhide" or "__tracebackhide__" not in frame.f_locals]


def _fails(x, n=1):
    raise ValueError("error here.")


WAYS_TO_FAIL = {
    "call": lambda j: j(_fails)(jnp.ones(3)),
    "call, static argument": lambda j: j(_fails, static_argnums=1)(jnp.ones(3), 2),
    "call, donating": lambda j: j(_fails, donate_argnums=0)(jnp.ones(3)),
    "trace": lambda j: j(_fails).trace(jnp.ones(3)),
    "lower": lambda j: j(_fails).lower(jnp.ones(3)),
    "eval_shape method": lambda j: j(_fails).eval_shape(jnp.ones(3)),
    "nested jit": lambda j: j(lambda x: j(_fails)(x) + 1)(jnp.ones(3)),
    "grad": lambda j: jax.grad(lambda x: j(_fails)(x).sum())(jnp.ones(3)),
    "vmap": lambda j: jax.vmap(j(_fails))(jnp.ones((2, 3))),
}


@pytest.mark.parametrize("counting", [False, True], ids=["dispatcher", "counted"])
@pytest.mark.parametrize("way", WAYS_TO_FAIL, ids=list(WAYS_TO_FAIL))
def test_a_users_traceback_shows_the_frames_jax_jit_shows(filtering, way, counting):
    shown = []
    for jit_function in (jax.jit, jit):
        engine.count_calls(counting)
        try:
            with pytest.raises(ValueError, match="error here") as caught:
                WAYS_TO_FAIL[way](jit_function)
        finally:
            engine.count_calls(False)
        shown.append(_user_frames(caught.value, filtering))
        if filtering == "remove_frames":
            assert type(caught.value.__cause__).__name__ == "UnfilteredStackTrace"
    assert shown[1] == shown[0]
    assert "_fails" in shown[1]


def test_the_engines_frames_are_filtered_out_and_the_full_traceback_stays_available():
    before = jax.config.jax_traceback_filtering
    try:
        jax.config.update("jax_traceback_filtering", "remove_frames")
        with pytest.raises(ValueError) as caught:
            jit(_fails)(jnp.ones(3))
        files = [f.f_code.co_filename for f, _ in traceback.walk_tb(caught.value.__traceback__)]
        unfiltered = [f.f_code.co_filename
                      for f, _ in traceback.walk_tb(caught.value.__cause__.__traceback__)]
        # the engine's own folder (a checkout may sit in a folder named engine too)
        engine_dir = os.path.dirname(os.path.abspath(engine.__file__)) + os.sep
        assert files and not any(name.startswith(engine_dir) for name in files)
        assert any(name.endswith("engine/function_engine.py") for name in unfiltered)
    finally:
        jax.config.update("jax_traceback_filtering", before)


# --------------------------------------------------------------------------- stages

@dataclasses.dataclass
class _CheckedStages:
    """A record typed with JAX's stage classes, checked at construction as a runtime type
    checker checks an equinox Module's fields (``filter_jit(...).lower()`` builds one)."""

    traced: jax.stages.Traced
    lowered: jax.stages.Lowered
    compiled: jax.stages.Compiled

    def __post_init__(self):
        for field, kind in typing.get_type_hints(type(self)).items():
            if not isinstance(getattr(self, field), kind):
                raise TypeError(f"{field}: expected {kind}, got {type(getattr(self, field))}")


def _stages(jit_function, *options):
    f = jit_function(lambda x, y: 2 * x + y, donate_argnums=0)
    x = jnp.arange(4.0)
    lowered = f.lower(x, 4.0)
    return _CheckedStages(f.trace(x, 4.0), lowered, lowered.compile(*options))


def test_the_stages_are_instances_of_jaxs_stage_classes():
    theirs, mine = _on_both(_stages)
    assert type(mine.lowered).__module__ == "shardlaw.engine.aot"
    x = jnp.arange(4.0)
    assert np.asarray(mine.traced(x, 4.0)).tolist() == np.asarray(theirs.traced(x, 4.0)).tolist()
    assert _seen(mine.compiled(jnp.arange(4.0), 4.0)) == _seen(theirs.compiled(jnp.arange(4.0), 4.0))
    assert mine.lowered.as_text() == theirs.lowered.as_text()
    assert str(mine.traced.jaxpr) == str(theirs.traced.jaxpr)
    assert isinstance(jit(lambda a: a), jax.stages.Wrapped)


def _outcome(run):
    try:
        return "ok", _seen(run())
    except Exception as error:  # noqa: BLE001 - the class and words are what is compared
        return isinstance(error, ValueError), str(error).split("\n")[0]


_SQUARE = lambda x: x * x  # noqa: E731 - one function object for both runs
_X = np.arange(8.0, dtype=np.float32)
COMPILER_OPTIONS = {
    "jit, valid": lambda j: j(_SQUARE, compiler_options={"xla_embed_ir_in_executable": True})(_X),
    "jit, unknown option": lambda j: j(_SQUARE, compiler_options={"no_such_option": 1})(_X),
    "jit, bad value": lambda j: j(_SQUARE, compiler_options={
        "xla_embed_ir_in_executable": "maybe"})(_X),
    "jit, unhashable value": lambda j: j(_SQUARE, compiler_options={
        "xla_embed_ir_in_executable": [1]})(_X),
    "compile, keyword": lambda j: j(_SQUARE).lower(_X).compile(
        compiler_options={"xla_embed_ir_in_executable": True})(_X),
    "compile, positional": lambda j: j(_SQUARE).lower(_X).compile(
        {"xla_embed_ir_in_executable": True})(_X),
    "compile, None": lambda j: j(_SQUARE).lower(_X).compile(compiler_options=None)(_X),
    "compile, unknown option": lambda j: j(_SQUARE).lower(_X).compile({"no_such_option": 1})(_X),
    "jit and compile, merged": lambda j: j(
        _SQUARE, compiler_options={"xla_embed_ir_in_executable": True}).lower(_X).compile(
        {"xla_cpu_enable_fast_math": False})(_X),
    "jit's unknown option, compile's valid": lambda j: j(
        _SQUARE, compiler_options={"no_such_option": 1}).trace(_X).lower().compile(
        {"xla_embed_ir_in_executable": True})(_X),
}


@pytest.mark.parametrize("case", COMPILER_OPTIONS, ids=list(COMPILER_OPTIONS))
def test_compiler_options_are_handled_as_jax_jit_handles_them(case):
    theirs = _outcome(lambda: COMPILER_OPTIONS[case](jax.jit))
    mine = _outcome(lambda: COMPILER_OPTIONS[case](jit))
    assert mine == theirs


def test_a_compile_with_other_options_is_another_executable():
    f = jit(lambda x: x * x)
    lowered = f.lower(_X)
    plain = lowered.compile()
    embedded = lowered.compile(compiler_options={"xla_embed_ir_in_executable": True})
    assert plain.runtime_executable() is not embedded.runtime_executable()
    assert f.cache_info().compiles == 2
    assert _seen(embedded(_X)) == _seen(jax.jit(_SQUARE)(_X))


# --------------------------------------------------------------------------- eval_shape

def _formatted():
    layout = Format(Layout(major_to_minor=(0, 1)), NamedSharding(MESH, P("x")))
    argument = jax.device_put(np.arange(128.0 * 16).reshape(128, 16), layout)
    return layout, argument


def test_jax_eval_shape_of_an_engine_function_under_install_is_jax_jits():
    layout, argument = _formatted()
    theirs = jax.eval_shape(jax.jit(_SQUARE, in_shardings=layout, out_shardings=layout),
                            argument)
    with engine.install():
        f = jax.jit(_SQUARE, in_shardings=layout, out_shardings=layout)
        mine = jax.eval_shape(f, argument)
        assert f.eval_shape(argument) == mine
    assert mine == theirs and mine.format == layout


def test_jax_eval_shape_asks_an_engine_function_without_install():
    # jax.eval_shape asks a function for its own answer only when it is JAX's own jitted
    # type; an engine function without a frame in front of its dispatcher is of that type,
    # so under the bare patch too it answers from its own trace (its formats included).
    # One with donated arguments is traced as any callable there (shapes and dtypes only;
    # docs/engine.rst), and install() routes it to its own answer.
    layout, argument = _formatted()
    f = jit(_SQUARE, in_shardings=layout, out_shardings=layout)
    bare, own = jax.eval_shape(f, argument), f.eval_shape(argument)
    assert bare == own and bare.format == layout
    donating = jit(_SQUARE, in_shardings=layout, out_shardings=layout, donate_argnums=0)
    bare, own = jax.eval_shape(donating, argument), donating.eval_shape(argument)
    assert (bare.shape, bare.dtype) == (own.shape, own.dtype)
    assert own.format == layout and bare.format == Format(None, None)
    with engine.install():
        assert jax.eval_shape(donating, argument) == own



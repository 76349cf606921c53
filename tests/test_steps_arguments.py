"""describe_program reads what the user holds as JAX traces it (issue 32), against JAX 0.10.2.

* ARG-2 on the program path: a float64 or int64 numpy argument is traced float32/int32, a
  Python bool is not weakly typed, a weakly typed jax.Array stays weak (one rule,
  :func:`~shardlaw.spec.jit.call.placed_dtype`, which jit's tracing, CACHE-4, calls too);
* a function returning a Python constant is described (JAX returns the constant);
* a jit given ``static_argnums``/``static_argnames`` is described over its other arguments;
* verdicts name inputs by pytree path, as the engine does.

Each case is held to real JAX: the program's input types against ``jax.jit(f).trace``, and
``explain_program``'s verdict against ``jax.jit`` traced, lowered, compiled and run (the
same refusal stage and class, or the same result shardings, committedness and types).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardlaw.properties.program_harness import JaxOutcome, outcome_problems, stage_in_jax
from shardlaw.properties.registry import checks
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.jit.cache_keys import abstract_value
from shardlaw.spec.jit.call import Arg
from shardlaw.spec.program.lowering import live_parts

AUTO = (jax.sharding.AxisType.Auto,) * 2
NS, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec


def mesh(backwards: bool = False):
    devices = np.array(jax.devices()[::-1] if backwards else jax.devices()).reshape(2, 4)
    return jax.sharding.Mesh(devices, ("x", "y"), axis_types=AUTO)


def with_compiler_choices(program, outcome: JaxOutcome):
    """``program`` given the placements JAX's compiler chose where the spec leaves them to
    it: per result, and per input JAX kept (at its position)."""
    changes = {}
    if outcome.compiler is not None:
        changes["compiler"] = tuple(outcome.compiler)
    if outcome.compiler_in is not None:
        kept = [i for i, u in enumerate(live_parts(program).inputs)
                if u or program.keep_unused]
        if len(kept) == len(outcome.compiler_in):
            choices = [None] * len(program.inputs)
            for i, choice in zip(kept, outcome.compiler_in):
                choices[i] = choice
            changes["compiler_in"] = tuple(choices)
    return dataclasses.replace(program, **changes)


def held_to_jax(fun, *args, staged=None, **kwargs):
    """(the program, its verdict, the problems) for ``fun(*args, **kwargs)``: JAX's jit
    (``staged``, else ``fun`` or ``jax.jit(fun)``: what has ``trace(...).lower()``) staged
    to the end, the spec's verdict on describe_program given the compiler's choices; no
    problems where both refuse at one stage with JAX's class, or both accept alike."""
    jitted = staged or (fun if hasattr(fun, "trace") else jax.jit(fun))
    outcome = JaxOutcome()
    bound = (lambda *a: jitted(*a, **kwargs))
    bound.trace = lambda *a: jitted.trace(*a, **kwargs)
    stage_in_jax(bound, args, outcome)
    program = describe_program(fun, *args, **kwargs)
    verdict = explain_program(with_compiler_choices(program, outcome))
    return program, verdict, outcome_problems(verdict, outcome)


def assert_refusal_case(case):
    """A case ``(fun, arguments, error, rule, path)`` held to JAX: accepted alike where
    ``error`` is None, else refused while tracing with JAX's class ``error``, by ``rule`` at
    ``path``."""
    fun, arguments, error, rule, path = case
    args = arguments()
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    if error is None:
        assert verdict.accepted
        return
    with pytest.raises(Exception) as refused:
        jax.jit(fun).trace(*args)
    assert type(refused.value).__name__ == error
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        rule, "trace", path, error)


def traced_types(fun, *args, **kwargs):
    """(dtype, weak type) of each input of JAX's trace of ``fun``."""
    jitted = fun if hasattr(fun, "trace") else jax.jit(fun)
    return [(str(a.dtype), bool(a.weak_type))
            for a in jitted.trace(*args, **kwargs).jaxpr.in_avals]


# --------------------------------------------------------------------------- ARG-2

def _weak(shape):
    """A weakly typed jax.Array (what a jit returning a Python float gives)."""
    return jax.jit(lambda: jnp.broadcast_to(1.0, shape))()


ARGUMENTS = {
    "numpy-float64": lambda: np.ones((8, 4), np.float64),
    "numpy-int64": lambda: np.ones((8, 4), np.int64),
    "numpy-float64-scalar": lambda: np.float64(2.0),
    "python-bool": lambda: True,
    "python-int": lambda: 3,
    "python-float": lambda: 3.0,
    "weak-array-0d": lambda: _weak(()),
    "weak-array-2d": lambda: jax.device_put(_weak((8, 4)), NS(mesh(), P("x"))),
    "bool-array": lambda: np.ones((8, 4), bool),
}


def _uses(value):
    """Steps that place ``value`` inside a jit: a constraint, a device_put, an inner jit
    with in_shardings, a shard_map, a gradient's reshard-free arithmetic."""
    replicated = NS(mesh(), P())
    rank = np.ndim(value)
    split = NS(mesh(), P("x")) if rank else replicated
    return {
        "constraint": lambda x: jax.lax.with_sharding_constraint(x, split),
        "device_put": lambda x: jax.device_put(x, split),
        "inner-jit": lambda x: jax.jit(lambda y: y, in_shardings=split)(x),
        "shard_map": jax.shard_map(lambda y: y, mesh=mesh(), in_specs=P("x") if rank else P(),
                                   out_specs=P("x") if rank else P()),
        "elementwise": lambda x: x + x,
    }


@checks("ARG-2")
@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
def test_an_argument_is_typed_in_the_program_as_jax_traces_it(argument):
    """The program's inputs, as its body types them, are JAX's traced inputs: 64-bit types
    narrowed, a Python bool not weak, a weakly typed array weak (ARG-2); and every step
    that places such a value is decided as JAX decides it (these were PROG-0 refusals)."""
    value = ARGUMENTS[argument]()
    for name, use in _uses(value).items():
        program, verdict, problems = held_to_jax(use, value)
        types = [(v.dtype, v.weak_type) for v in program.value_types[:len(program.inputs)]]
        assert types == traced_types(use, value), (argument, name)
        assert not problems, (argument, name, problems)
        assert verdict.accepted, (argument, name)


@checks("ARG-2")
def test_a_float64_argument_is_refused_where_jax_refuses_it():
    """The refusing side: a float64 numpy argument whose constraint is over the devices in
    another order than the committed argument beside it is refused when lowering, DA-1,
    with JAX's ValueError; the numpy argument's narrowed type changes nothing of it."""
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    backwards = NS(mesh(backwards=True), P("x"))
    fun = lambda a, b: (a, jax.lax.with_sharding_constraint(b, backwards))
    program, verdict, problems = held_to_jax(fun, x, np.ones((8, 4), np.float64))
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("DA-1", "lower", "ValueError")
    assert program.value_types[1].dtype == "float32"


@checks("ARG-2")
def test_jits_tracing_and_the_program_path_call_the_one_rule():
    """CACHE-4 (what jit's tracing sees of an argument) and a program input's type give one
    answer for every kind of argument, both by ARG-2."""
    from shardlaw.spec.program.description import Value

    for arg, value in ((Arg.numpy((4,), "float64"), Value.numpy((4,), "float64")),
                       (Arg.numpy((), "int64"), Value.numpy((), "int64")),
                       (Arg.scalar("bool"), Value.scalar("bool")),
                       (Arg.scalar("int"), Value.scalar("int")),
                       (Arg.scalar("complex"), Value.scalar("complex"))):
        aval = abstract_value(arg)
        assert (aval.dtype, aval.weak_type) == (value.type.dtype, value.type.weak_type), arg


# --------------------------------------------------------------------------- constants

CONSTANT_RESULTS = {
    "float": lambda x: 1.0,
    "int-beside-an-array": lambda x: (x, 3),
    "bool": lambda x: True,
    "inner-jit": lambda x: jax.jit(lambda y: 2.0)(x),
    "out-shardings": jax.jit(lambda x: 1.0, out_shardings=NS(mesh(), P())),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_RESULTS))
def test_a_python_constant_result_is_described(name):
    """A function returning a Python constant (an internal TypeError before): the constant
    is a result of the program, placed, committed and typed as JAX returns it."""
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    _, verdict, problems = held_to_jax(CONSTANT_RESULTS[name], x)
    assert not problems, problems
    assert verdict.accepted


@checks("DA-1")
def test_a_constant_result_placed_elsewhere_is_refused_as_jax_refuses_it():
    """The refusing side: a constant result whose out sharding is over the devices in
    another order than the argument's: DA-1 when lowering, as JAX."""
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    fun = jax.jit(lambda x: (x, 1.0), out_shardings=(None, NS(mesh(backwards=True), P())))
    _, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    assert (verdict.rule, verdict.stage) == ("DA-1", "lower")


# --------------------------------------------------------------------------- statics

def _scaled(x, n, *, by=1.0):
    return jax.lax.with_sharding_constraint(x * n * by, NS(mesh(), P(None, "y")))


STATIC = {
    "argnums": (jax.jit(_scaled, static_argnums=1), (3,), {}),
    "argnums-negative": (jax.jit(_scaled, static_argnums=-1), (3,), {}),
    "argnames-positional": (jax.jit(_scaled, static_argnames="n"), (3,), {}),
    "argnames-keyword": (jax.jit(_scaled, static_argnames=("n", "by")), (3,), {"by": 2.0}),
    "both": (jax.jit(_scaled, static_argnums=1, static_argnames="by"), (3,), {"by": 2.0}),
    "unhashable-looking-value": (jax.jit(lambda x, t: x * len(t), static_argnums=1),
                                 (("a", "b"),), {}),
}


@pytest.mark.parametrize("name", sorted(STATIC))
def test_a_jit_with_static_arguments_is_described_over_its_other_arguments(name):
    """``static_argnums``/``static_argnames`` (JAX's "Non-hashable static arguments" from
    make_jaxpr before): the static values are passed as they are, the program's inputs are
    the other arguments, and the verdict is JAX's."""
    fun, extra, kwargs = STATIC[name]
    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    program, verdict, problems = held_to_jax(fun, x, *extra, **kwargs)
    assert not problems, problems
    assert verdict.accepted
    assert len(program.inputs) == len(fun.trace(x, *extra, **kwargs).jaxpr.in_avals) == 1


@checks("DA-1")
def test_a_static_argument_that_picks_a_refused_sharding_is_refused_as_jax_refuses_it():
    """The refusing side: the static argument chooses a constraint over the devices in
    another order: DA-1 when lowering, named at the equation, as JAX."""
    def step(x, backwards):
        return jax.lax.with_sharding_constraint(x, NS(mesh(backwards), P("x")))

    x = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(), P("x")))
    fun = jax.jit(step, static_argnums=1)
    _, verdict, problems = held_to_jax(fun, x, True)
    assert not problems, problems
    assert (verdict.rule, verdict.stage, verdict.path) == ("DA-1", "lower", "body[0]")
    assert held_to_jax(fun, x, False)[1].accepted


# --------------------------------------------------------------------------- paths

def test_inputs_are_named_by_pytree_path_as_the_engine_names_them():
    """A refusal names the input by its pytree path (``args[0]['b1']``), not its flat
    number, as the engine's refusal of the same call does; and an accepted verdict lists
    each input so."""
    import shardlaw.engine

    here = NS(mesh(), P("x"))
    params = {"w1": jax.device_put(np.ones((8, 4), np.float32), here),
              "b1": jax.device_put(np.ones((8, 4), np.float32), here)}
    batch = jax.device_put(np.ones((8, 4), np.float32), NS(mesh(backwards=True), P("x")))

    def step(params, batch):
        return params["w1"] + batch

    program, verdict, problems = held_to_jax(step, params, batch)
    assert not problems, problems
    assert program.input_paths == ("args[0]['b1']", "args[0]['w1']", "args[1]")
    assert verdict.rule == "DA-1"
    assert "args[1]" in verdict.message and "args[0]['w1']" in verdict.message
    with pytest.raises(ValueError) as engine:
        shardlaw.engine.jit(step)(params, batch)
    named = [p for p in program.input_paths if p in str(engine.value)]
    assert named and all(p in verdict.message for p in named)
    accepted = explain_program(describe_program(step, params, params["b1"]))
    assert accepted.in_paths == ("args[0]['b1']", "args[0]['w1']", "args[1]")


def test_static_arguments_are_left_out_of_the_paths():
    """``args[k]`` counts the positional arguments that are not static, as the engine's
    paths do; keyword arguments are ``kwargs['name']``."""
    x = np.ones((8, 4), np.float32)
    fun = jax.jit(lambda n, x, *, y: x * n + y, static_argnums=0)
    program = describe_program(fun, 2, x, y=x)
    assert program.input_paths == ("args[0]", "kwargs['y']")


def test_placed_dtype_refuses_a_kind_or_dtype_that_is_not_a_string():
    # Found by test_fuzz under a newer Hypothesis: placed_dtype([], 'float32') ended in a
    # bare TypeError (an unhashable kind looked up in a dict) instead of a refusal.
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.jit.call import placed_dtype

    for kind, dtype in (([], "float32"), ("numpy_array", ["float32"]), (None, None)):
        with pytest.raises(Rejection, match=r"\[CALL-0\]"):
            placed_dtype(kind, dtype)
    assert placed_dtype("numpy_array", "float64") == ("float32", False)

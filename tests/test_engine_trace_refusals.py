"""Refusals JAX makes while tracing a jit's body, named by the engine (issue 23, item 8).

A with_sharding_constraint, device_put, reshard, inner jit or shard_map inside the jitted
function, or a collective inside a shard_map's body, is refused by JAX while it traces the
function. Under the engine the error is of JAX's very class, its message JAX's words and
then ``[RULE] at PATH``, the path numbering the traced body as ``engine/program_body.py``
does. Each case here is held to real ``jax.jit``: the same class, JAX's words first, the
rule and the path; its accepting twin runs alike in both. A refusal the engine cannot
locate or whose rule does not refuse keeps JAX's error unchanged.
"""

from __future__ import annotations

import contextlib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardlaw.engine as engine
from shardlaw.properties.registry import checks

AUTO = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
EXPLICIT = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


def _constraint(n, spec, mesh=AUTO):
    return lambda x: jax.lax.with_sharding_constraint(x[:n] * 2, NamedSharding(mesh, spec))


def _device_put(n, spec, mesh=AUTO):
    return lambda x: jax.device_put(x[:n], NamedSharding(mesh, spec))


def _reshard(n, spec):
    return lambda x: jax.sharding.reshard(x[:n], NamedSharding(EXPLICIT, spec))


def _inner_jit_in(n):
    inner = jax.jit(lambda a, b: a + b.sum(),
                    in_shardings=(NamedSharding(AUTO, P()), NamedSharding(AUTO, P("y"))))
    return lambda x: inner(x, x[:n])


def _inner_jit_out(n):
    inner = jax.jit(lambda a: (a, a[:n] * 2), out_shardings=NamedSharding(AUTO, P("y")))
    return lambda x: inner(x)


def _shard_map(n, in_spec, *, body=lambda a: a, out_spec=None, check_vma=True):
    mapped = jax.shard_map(body, mesh=AUTO, in_specs=in_spec,
                           out_specs=in_spec if out_spec is None else out_spec,
                           check_vma=check_vma)
    return lambda x: mapped(x[:n] + 1)


def _psum_over(axis, check_vma=True):
    return _shard_map(8, P("x"), body=lambda a: jax.lax.psum(a * 3, axis), out_spec=P(),
                      check_vma=check_vma)


def _nested(axis):
    mapped = _psum_over(axis, check_vma=False)
    return lambda x: jax.jit(lambda a: mapped(a * 2))(x - 1)


RESHARDED = _reshard(8, P("y"))
EXPLICIT_RESULTS = {RESHARDED}

# (name, refused function, its accepted twin, rule, path); ``x[:n]`` with n < 8 is an
# equation of its own (a slice), counted in the path as JAX traces it, and so is the pvary
# of a constant check_vma inserts before a product inside a shard_map's body
CASES = [
    ("constraint rank", _constraint(8, P("x", "y")), _constraint(8, P("x")),
     "WSC-4", "body[1]"),
    ("constraint over Explicit axes", _constraint(8, P("x"), EXPLICIT),
     _constraint(8, P(), EXPLICIT), "WSC-5", "body[1]"),
    ("device_put rank", _device_put(8, P("x", "y")), _device_put(8, P("y")), "ARG-4", "body[0]"),
    ("device_put uneven", _device_put(6, P("y")), _device_put(6, P()), "ARG-4", "body[1]"),
    ("device_put uneven over Explicit axes", _device_put(6, P("y"), EXPLICIT),
     _device_put(8, P("y"), EXPLICIT), "ARG-4", "body[1]"),
    ("reshard uneven", _reshard(6, P("y")), RESHARDED, "ARG-4", "body[1]"),
    ("inner jit in_shardings", _inner_jit_in(6), _inner_jit_in(4),
     "FIT-1", "body[1].jit.in_shardings[1]"),
    ("inner jit out_shardings", _inner_jit_out(6), _inner_jit_out(4),
     "FIT-1", "body[0].jit.out_shardings[1]"),
    ("shard_map spec axis", _shard_map(8, P("z")), _shard_map(8, P("y")),
     "SMAP-3", "body[1].shard_map.in_specs[0]"),
    ("shard_map spec rank", _shard_map(8, P("y", None)), _shard_map(8, P("y")),
     "SMAP-7", "body[1].shard_map.in_specs[0]"),
    ("shard_map uneven", _shard_map(6, P("y")), _shard_map(4, P("y")),
     "SMAP-8", "body[2].shard_map.in_specs[0]"),
    ("collective over an unknown axis, check_vma", _psum_over("z"), _psum_over("x"),
     "SMAP-13", "body[1].shard_map.body[2]"),
    ("collective over an unknown axis", _psum_over("z", False), _psum_over("x", False),
     "SMAP-13", "body[1].shard_map.body[1]"),
    ("collective two bodies down", _nested("q"), _nested("x"),
     "SMAP-13", "body[1].jit.body[2].shard_map.body[1]"),
]


def _outcome(jit, f, x):
    # a result typed over the Explicit mesh is computed on its 8 devices: under it (AD-9)
    context = jax.set_mesh(EXPLICIT) if f in EXPLICIT_RESULTS else contextlib.nullcontext()
    try:
        with context:
            return jit(f)(x), None
    except Exception as error:  # noqa: BLE001 - the outcome is compared
        return None, error


@checks("WSC-4", "WSC-5", "ARG-4", "FIT-1", "SMAP-3", "SMAP-7", "SMAP-8", "SMAP-13")
@pytest.mark.parametrize("name, refused, accepted, rule, path", CASES, ids=[c[0] for c in CASES])
def test_a_refusal_while_tracing_the_body_names_the_rule(name, refused, accepted, rule, path):
    x = jnp.arange(8.0)
    _, theirs = _outcome(jax.jit, refused, x)
    _, mine = _outcome(engine.jit, refused, x)
    assert theirs is not None, "JAX accepts"
    assert isinstance(mine, engine.EngineRejection), mine
    assert isinstance(mine, type(theirs)) and mine.jax_error == type(theirs).__name__
    assert (mine.rule, mine.path, mine.stage) == (rule, path, "trace")
    assert str(mine).startswith(str(theirs).strip())
    assert f"[{rule}] at {path}: " in str(mine)
    # the accepting side: both accept, with the same values
    theirs_ok, error = _outcome(jax.jit, accepted, x)
    mine_ok, my_error = _outcome(engine.jit, accepted, x)
    assert error is None and my_error is None, (error, my_error)
    for a, b in zip(jax.tree.leaves(theirs_ok), jax.tree.leaves(mine_ok)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_refusal_is_named_at_trace_and_in_explain():
    x = jnp.arange(8.0)
    f = engine.jit(_constraint(8, P("x", "y")))
    with pytest.raises(ValueError) as caught:
        f.trace(x)
    assert caught.value.rule == "WSC-4"
    explained = f.explain(x)
    assert not explained.accepted and explained.rule == "WSC-4"


def test_a_refusal_under_vmap_inside_the_body_keeps_jaxs_error():
    # the constraint is traced under vmap: its operands are another trace's, so the
    # equation it would be is not located; JAX's error stands, unchanged
    f = lambda x: jax.vmap(lambda a: jax.lax.with_sharding_constraint(
        a, NamedSharding(AUTO, P("x"))))(x)
    _, theirs = _outcome(jax.jit, f, jnp.arange(8.0))
    _, mine = _outcome(engine.jit, f, jnp.arange(8.0))
    assert type(mine) is type(theirs) and str(mine) == str(theirs)
    assert not isinstance(mine, engine.EngineRejection)


def test_an_error_of_the_users_own_keeps_its_class_and_words():
    def f(x):
        raise KeyError("mine")
    _, theirs = _outcome(jax.jit, f, jnp.arange(8.0))
    _, mine = _outcome(engine.jit, f, jnp.arange(8.0))
    assert type(mine) is type(theirs) is KeyError and str(mine) == str(theirs)


def test_a_refusal_the_rule_does_not_make_keeps_jaxs_error():
    # a collective mixing axes its operand varies along with others (check_vma): SMAP-13's
    # other clause, which the engine does not decide; JAX's error stands
    body = lambda a: jax.lax.psum(a, ("x", "y"))
    f = _shard_map(8, P("x"), body=body, out_spec=P())
    _, theirs = _outcome(jax.jit, f, jnp.arange(8.0))
    _, mine = _outcome(engine.jit, f, jnp.arange(8.0))
    assert theirs is not None
    assert type(mine) is type(theirs) and str(mine) == str(theirs)


# --------------------------------------------------------------------------- AD-9

REDUCED = NamedSharding(EXPLICIT, P(reduced={"x"}))


def _ad9_cases():
    x = jnp.arange(8.0)
    split = jax.device_put(x, NamedSharding(EXPLICIT, P("x")))
    reduced = jax.device_put(x, REDUCED)
    one = jax.devices()[0]
    resharded = lambda a: jax.sharding.reshard(a, NamedSharding(EXPLICIT, P("y")))
    return [
        # the gradient of a reduced input its loss does not read: its cotangent is typed
        # unreduced over the input's mesh, and no kept input places the program
        ("the gradient of a reduced input", lambda jit: jit(jax.grad(lambda a: a.sum())),
         reduced, lambda jit: jit(jax.grad(lambda a: (a * a).sum())), split),
        ("a reshard with no mesh in context", lambda jit: jit(resharded), x,
         lambda jit: jit(resharded, keep_unused=True), split),
        ("device= with a result typed over the mesh",
         lambda jit: jit(lambda a: a * 2, device=one), split,
         lambda jit: jit(lambda a: a * 2), split),
    ]


@checks("AD-9")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", range(3))
def test_a_result_typed_over_an_explicit_mesh_of_another_size_is_refused_before_lowering(case):
    name, refused, arg, accepted, ok_arg = _ad9_cases()[case]
    _, theirs = _outcome(lambda f: f, refused(jax.jit), arg)
    _, mine = _outcome(lambda f: f, refused(engine.jit), arg)
    assert isinstance(theirs, ValueError), (name, theirs)
    assert isinstance(mine, engine.EngineRejection) and isinstance(mine, type(theirs))
    assert (mine.rule, mine.path, mine.stage) == ("AD-9", "result", "lower")
    assert str(mine).startswith(str(theirs).strip())
    # decided before anything is lowered: explain says so without compiling
    explained = refused(engine.jit).explain(arg)
    assert not explained.accepted and explained.rule == "AD-9"
    expected, error = _outcome(lambda f: f, accepted(jax.jit), ok_arg)
    got, my_error = _outcome(lambda f: f, accepted(engine.jit), ok_arg)
    assert error is None and my_error is None, (error, my_error)
    np.testing.assert_array_equal(np.asarray(expected), np.asarray(got))
    assert got.sharding == expected.sharding


def test_a_constraint_refused_by_another_of_jaxs_checks_keeps_jaxs_error():
    # the first value's layout does not fit it (JAX checks layouts after every leaf's
    # rank, before any leaf's axes); the second names an Explicit axis (WSC-5), which
    # JAX never reached: the engine does not name WSC-5 for JAX's layout refusal
    from jax.experimental.layout import Format, Layout
    shardings = (Format(Layout(major_to_minor=(1, 0)), NamedSharding(AUTO, P())),
                 NamedSharding(EXPLICIT, P("x")))
    f = lambda x: jax.lax.with_sharding_constraint((x, x), shardings)
    _, theirs = _outcome(jax.jit, f, jnp.arange(8.0))
    _, mine = _outcome(engine.jit, f, jnp.arange(8.0))
    assert isinstance(theirs, ValueError)
    assert type(mine) is type(theirs) and str(mine) == str(theirs)


# --------------------------------------------------------------------------- SMAP-23

@checks("SMAP-23")
@pytest.mark.parametrize("axes", [("y",), ("y", "y")])
def test_a_psum_scatter_of_a_value_split_over_an_automatic_explicit_axis_is_refused(axes):
    # JAX refuses it when lowering (AssertionError), before it checks the axes are named
    # once (SMAP-13); the engine refuses it before lowering, by SMAP-23, JAX's words first
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    f = jax.shard_map(lambda a: jax.lax.psum_scatter(a, axes, scatter_dimension=0, tiled=True),
                      mesh=mesh, in_specs=P(None, "y"), out_specs=P("y"), axis_names={"y"},
                      check_vma=False)
    split = jax.device_put(np.arange(128.0).reshape(8, 16), NamedSharding(mesh, P(None, "x")))
    _, theirs = _outcome(jax.jit, f, split)
    _, mine = _outcome(engine.jit, f, split)
    assert type(theirs) is AssertionError
    assert isinstance(mine, engine.EngineRejection) and isinstance(mine, AssertionError)
    assert (mine.rule, mine.stage, mine.path) == ("SMAP-23", "lower", "body[0].shard_map.body[0]")
    assert str(mine).startswith(str(theirs).strip())
    if axes == ("y",):   # the accepting side: the argument's type split over no axis
        unsplit = jax.device_put(np.arange(128.0).reshape(8, 16), NamedSharding(mesh, P()))
        expected, error = _outcome(jax.jit, f, unsplit)
        got, my_error = _outcome(engine.jit, f, unsplit)
        assert error is None and my_error is None, (error, my_error)
        np.testing.assert_array_equal(np.asarray(expected), np.asarray(got))


@checks("SMAP-25")
@pytest.mark.parametrize("dim, refused", [(2, True), (0, False)])
def test_an_untiled_all_gather_whose_broadcast_operand_does_not_divide_is_refused(dim, refused):
    # the operand typed split over the automatic Explicit axis 'y' at dimension 2: gathered
    # at 2, the dimension of 1 JAX inserts there is split 2 ways when lowered (ValueError);
    # gathered at 0, the split stays on a dimension of 4
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    f = jax.shard_map(lambda a: jax.lax.all_gather(a, "x", axis=dim, tiled=False), mesh=mesh,
                      in_specs=P(), out_specs=P(), axis_names={"x"}, check_vma=False)
    x = jax.device_put(np.arange(64.0, dtype=np.float32).reshape(4, 4, 4),
                       NamedSharding(mesh, P(None, None, "y")))
    theirs_ok, theirs = _outcome(jax.jit, f, x)
    mine_ok, mine = _outcome(engine.jit, f, x)
    if not refused:
        assert theirs is None and mine is None, (theirs, mine)
        np.testing.assert_array_equal(np.asarray(theirs_ok), np.asarray(mine_ok))
        return
    assert type(theirs) is ValueError
    assert isinstance(mine, engine.EngineRejection) and isinstance(mine, ValueError)
    assert (mine.rule, mine.stage, mine.path) == ("SMAP-25", "lower", "body[0].shard_map.body[0]")
    assert str(mine).startswith(str(theirs).strip())

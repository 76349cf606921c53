"""A scan's carry as the partitioner propagates it (issues 32 and 33, session 20), held to
jax.jit on 8 CPU devices (reversed): the deep run's five recipes replayed, each rule
pinned on both sides.

* A dynamic slice propagates forward in the partitioner's first pass (PROP-15's
  schedule, Shardy's pass-through operations): a scan's carry meets its ``xs``' split
  there, in the same pass as a ``where`` of the carry's result beside the initial carry
  gives it the initial carry's; which comes first is the partitioner's order, left open.
* A chain of one-operand elementwise equations leads its reader's conflict only where
  its placed value is read by the chain alone (PROP-15): ``sin(b) * d`` is ``b``'s
  split, beside ``cos(b)``, a scan over ``b`` or ``b`` returned it is ``d``'s; left open.
* A carry its body constrains stays open (PROP-22): the initial carry extends the
  constraint's split where they agree, the constraint wins a conflict.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.propagation_harness import Recipe, compare_recipe
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program
from shardlaw.spec.bridge.program import describe_program

P = jax.sharding.PartitionSpec
NS = jax.sharding.NamedSharding


def _mesh(shape, names):
    return jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(shape), names)


def _put(mesh, shape, spec):
    return jax.device_put(jnp.ones(shape), NS(mesh, P(*spec)))


def _both(fun, *args):
    """(JAX's result specs, the spec's verdict) of ``fun`` over ``args``."""
    jitted = jax.jit(fun)
    real = [s.spec for s in jitted.lower(*args).compile().output_shardings]
    return real, explain_program(describe_program(jitted, *args))


def _specs(verdict):
    return [s if s is UNSPECIFIED else s.spec for s in verdict.out_shardings]


def _same(spec, real):
    """Whether two PartitionSpecs name the same split (trailing Nones aside)."""
    def norm(p):
        entries = [None if e is None else (e,) if isinstance(e, str) else tuple(e) or None
                   for e in p]
        while entries and entries[-1] is None:
            entries.pop()
        return entries
    return norm(spec) == norm(real)


# ------------------------------------------------------------------ the deep run's recipes

_SCAN_INPUTS = (((4,), ('x',)), ((4, 4), ('x', 'y')))
_SCAN_STEPS = (('input', (), 0), ('input', (), 1), ('flow', (0, 1), 'scan carry'),
               ('convert', (2,), None), ('where', (0, 2), None))
RECIPES = [
    Recipe(mesh=(2, 2, 2), reversed_devices=True, inputs=(
        ((4,), ('z',)), ((4, 4), (None, ('y', 'z'))), ((4, 4), (('z', 'y'), None)),
        ((4, 4), (('y', 'z'), None))),
        steps=(('input', (), 0), ('scalar', (0,), None), ('input', (), 1),
               ('flow_led', (1, 2), ('scan', (('z', 'y'),))), ('input', (), 2),
               ('flow', (2, 4), 'remat'), ('shard_map', (5,), (None, None)),
               ('reshape', (3,), (2, 2)), ('input', (), 3), ('flow', (2, 8), 'remat')),
        outputs=(9, 7), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(4, 2), reversed_devices=True, inputs=_SCAN_INPUTS, steps=_SCAN_STEPS + (
        ('broadcast', (0,), (1, (4, 4))), ('flow', (3, 4), 'cond')),
        outputs=(4, 2, 3), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(4, 2), reversed_devices=True, inputs=_SCAN_INPUTS, steps=_SCAN_STEPS + (
        ('broadcast', (0,), (1, (4, 4))), ('flow', (3, 1), 'scan carry')),
        outputs=(4, 2, 3), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(4, 2), reversed_devices=True, inputs=_SCAN_INPUTS, steps=_SCAN_STEPS + (
        ('broadcast', (0,), (1, (4, 4))), ('flow', (3, 1), 'scan carry')),
        outputs=(4, 2, 4), devices=(), out_shardings=(), axis_types=''),
    Recipe(mesh=(4, 2), reversed_devices=True, inputs=_SCAN_INPUTS, steps=_SCAN_STEPS + (
        ('broadcast', (0,), (0, (4, 4))), ('flow', (3, 1), 'scan carry')),
        outputs=(4, 2, 4), devices=(), out_shardings=(), axis_types=''),
]


@pytest.mark.parametrize("number", range(len(RECIPES)))
def test_the_deep_runs_scan_carry_recipes_agree_with_jax(number):
    outcome = compare_recipe(RECIPES[number])
    assert not outcome.disagreements, outcome.disagreements


# ------------------------------------------- a carry meets its xs' split in the first pass

def _scan(c0, xs):
    return lax.scan(lambda c, t: (jnp.sin(c) + t, None), c0, xs)[0]


def test_a_carry_meeting_its_xs_and_a_where_in_one_pass_is_left_open():
    """JAX: the carry takes the ``xs``' 'y' (P('y')) and the ``where`` beside the initial
    carry's 'x' is P(); the first pass reaches the carry from both: left open (PROP-4)."""
    mesh = _mesh((4, 2), ("x", "y"))
    a, b = _put(mesh, (4,), ("x",)), _put(mesh, (4, 4), ("x", "y"))

    def f(a, b):
        c = _scan(a, b)
        return jnp.where(a > c, a, c), c
    real, verdict = _both(f, a, b)
    assert [_same(r, s) for r, s in zip(real, [P(), P("y")])] == [True, True]
    assert verdict.accepted and _specs(verdict) == [UNSPECIFIED, UNSPECIFIED]
    assert {why.split("]")[0] for _, why in verdict.undetermined} == {"[PROP-4"}


def test_a_carry_whose_xs_are_unsplit_along_it_keeps_the_initial_carrys_split():
    """The neighbour: ``xs`` split along the scanned dimension only give the carry nothing,
    and the ``where`` and the carry are both the initial carry's P('x'), predicted."""
    mesh = _mesh((4, 2), ("x", "y"))
    a, b = _put(mesh, (4,), ("x",)), _put(mesh, (4, 4), ("y", None))

    def f(a, b):
        c = _scan(a, b)
        return jnp.where(a > c, a, c), c
    real, verdict = _both(f, a, b)
    assert all(_same(r, P("x")) for r in real)
    assert verdict.accepted and all(_same(s, P("x")) for s in _specs(verdict))


# ----------------------------------------------------- a chain whose placed value is shared

def _chain_mesh():
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    return mesh, _put(mesh, (4, 4), (None, ("y", "z"))), _put(mesh, (4, 4), (("y", "z"), None))


def test_a_chain_from_a_value_read_by_it_alone_leads_its_readers_conflict():
    """``sin(b) * d``: the chain ``sin(b)`` holds ``b``'s split when the product is first
    visited, and the product is ``b``'s (PROP-15), in JAX and in the spec."""
    _, b, d = _chain_mesh()
    real, verdict = _both(lambda b, d: (jnp.sin(b) * d,), b, d)
    assert _same(real[0], P(None, ("y", "z")))
    assert verdict.accepted and _same(_specs(verdict)[0], P(None, ("y", "z")))


@pytest.mark.parametrize("other", ["cos", "returned", "scan"])
def test_a_chain_from_a_value_read_elsewhere_too_is_left_open(other):
    """``b`` read elsewhere too (``cos(b)``, ``b`` returned, a scan over ``b``): JAX's
    product is ``d``'s, P(('y', 'z')); the spec leaves it open (PROP-4) rather than say
    ``b``'s."""
    _, b, d = _chain_mesh()
    extra = {"cos": lambda b: jnp.cos(b), "returned": lambda b: b,
             "scan": lambda b: _scan(jnp.zeros((4,)), b)}[other]
    real, verdict = _both(lambda b, d: (jnp.sin(b) * d, extra(b)), b, d)
    assert _same(real[0], P(("y", "z")))
    assert verdict.accepted and _specs(verdict)[0] is UNSPECIFIED
    assert any(why.startswith("[PROP-4]") for _, why in verdict.undetermined)


# ------------------------------------------------------------ a carry its body constrains

def _constrained(mesh, spec, before=True):
    """A scan of three steps whose body constrains its carry to ``spec`` before a ``sin``
    (``before``), else the ``sin``'s result (PROP-13's case)."""
    put = (lambda v: lax.with_sharding_constraint(v, NS(mesh, P(*spec))))
    step = (lambda c: jnp.sin(put(c))) if before else (lambda c: put(jnp.sin(c)))
    return lambda c0: (lax.scan(lambda c, _: (step(c), None), c0, None, length=3)[0],)


CARRIES = [
    # (initial carry, the body's constraint, JAX's carry): a prefix kept, a conflict won
    (("y", "z"), ("y", None), ("y", "z")),
    (("y", "z"), (None, "z"), ("y", "z")),
    (("y", "z"), (None, None), ("y", "z")),
    ((("y", "z"), None), ("y", None), (("y", "z"),)),
    (("y", None), (None, "x"), ("y", "x")),
    ((("y", "z"), None), ("y", "x"), (("y", "z"), "x")),
    (("y", "z"), ("x", None), ("x", "z")),
    (("x", "z"), ("y", None), ("y", "z")),
    (("y", "z"), (None, "x"), ("y", "x")),
]


@checks("PROP-22")
@pytest.mark.parametrize("initial,spec,kept", CARRIES)
def test_a_carry_its_body_constrains_keeps_the_initial_carrys_longer_split(initial, spec,
                                                                           kept):
    """PROP-22: the constraint's split, extended by the initial carry's where one is a
    prefix of the other (issue 32's carry: P('y', 'z') constrained to P('y', None) stays
    P('y', 'z')), the constraint's where they conflict."""
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    real, verdict = _both(_constrained(mesh, spec), _put(mesh, (4, 4), initial))
    assert _same(real[0], P(*kept))
    assert verdict.accepted and _same(_specs(verdict)[0], P(*kept))


@checks("PROP-22")
def test_a_constraint_on_the_next_carry_is_unchanged():
    """The neighbour (PROP-13): the body returns its constraint's result, and the carry
    joins it with the initial carry's split as before."""
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    real, verdict = _both(_constrained(mesh, ("y", None), before=False),
                          _put(mesh, (4, 4), ("y", "z")))
    assert _same(real[0], P("y", "z"))
    assert verdict.accepted and _same(_specs(verdict)[0], P("y", "z"))


@checks("PROP-22")
def test_a_constraint_holding_an_axis_the_initial_carry_holds_elsewhere_is_left_open():
    """The edge: the constraint P('z', None) on a carry P('y', 'z') takes 'z' off the
    second dimension (JAX: P('z')); which factor keeps it is left open (PROP-4)."""
    mesh = _mesh((2, 2, 2), ("x", "y", "z"))
    real, verdict = _both(_constrained(mesh, ("z", None)), _put(mesh, (4, 4), ("y", "z")))
    assert _same(real[0], P("z"))
    assert verdict.accepted and _specs(verdict)[0] is UNSPECIFIED

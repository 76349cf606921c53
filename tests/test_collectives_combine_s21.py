"""COLL-7's combiner over a reduction of several split dimensions (session 21's device deep
run): XLA sums such a reduction with one all-reduce per split dimension, the minor first,
and lists each one's groups by the operand's whole split (the axes summed later count as
split), not by the result's. Two all-reduces combine only where those ordered lists are
equal, so the first sum of ``a.sum()`` of ``P('z', 'x')`` (over 'x', listed ``(z, y)``)
stays apart from a sum over 'x' of ``P('x', None)`` (listed ``(y, z)``) and joins one of
``P('z', 'x')`` over its second dimension (listed ``(z, y)`` too). Held to the compiled
module on 8 CPU devices, both sides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from shardlaw.compiled_hlo import collectives_in_hlo
from shardlaw.properties.collectives_harness import Recipe, compare_collectives
from shardlaw.spec import explain_program
from shardlaw.spec.bridge.program import describe_program

AUTO = (jax.sharding.AxisType.Auto,) * 3


def _mesh():
    return jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=AUTO)


def _both(f, *args):
    """XLA's all-reduces (groups in the order listed, bytes) and the spec's, as sorted lists."""
    text = jax.jit(f).lower(*args).compile().as_text()
    real = sorted((c.kind, tuple(sorted(c.replica_groups)), c.bytes_per_device)
                  for c in collectives_in_hlo(text))
    verdict = explain_program(describe_program(f, *args))
    assert verdict.collectives.complete
    said = sorted((c.kind, tuple(sorted(c.replica_groups.groups())), c.bytes_per_device)
                  for c in verdict.collectives)
    return real, said


@pytest.mark.parametrize("split", [("z", "x"), ("y", "z"), ("x", "y"), ("z", "y"),
                                   (("x", "z"), "y"), ("y", ("x", "z"))])
def test_each_step_of_a_whole_sum_is_listed_by_the_operands_split(split):
    """The order XLA lists each all-reduce's groups in, read off the compiled module."""
    mesh = _mesh()
    a = jax.device_put(jnp.ones((4, 4)), NamedSharding(mesh, P(*split)))
    text = jax.jit(lambda a: a.sum()).lower(a).compile().as_text()
    listed = [c.replica_groups for c in collectives_in_hlo(text)]
    verdict = explain_program(describe_program(lambda a: a.sum(), a))
    said = [_listed(c) for c in verdict.collectives]
    assert said == listed


def _listed(c):
    """The groups of ``c`` in the order :func:`group_order` names: one group per position of
    the listed axes, major to minor, each group's members by the summed axes."""
    import itertools
    mesh = c.replica_groups.mesh
    names = mesh.axis_names
    sizes = {a: mesh.axis_size(a) for a in names}
    out = []
    for outer in itertools.product(*(range(sizes[a]) for a in c.group_order)):
        at = dict(zip(c.group_order, outer))
        group = []
        for inner in itertools.product(*(range(sizes[a]) for a in c.axes)):
            at.update(zip(c.axes, inner))
            position = 0
            for a in names:
                position = position * sizes[a] + at.get(a, 0)
            group.append(position)
        out.append(tuple(group))
    return tuple(out)


def test_a_whole_sums_first_step_stays_apart_from_a_sum_listed_otherwise():
    """``a.sum()`` of ``P('z', 'x')`` beside a sum over 'x' of ``P('x', None)``: three
    all-reduces, none combined (the spec combined two into one of 12 bytes before)."""
    mesh = _mesh()
    a = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("z", "x")))
    b = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("x", None)))
    real, said = _both(lambda a, b: (a.sum(), b.sum(0)), a, b)
    assert len(real) == 3
    assert said == real


def test_a_whole_sums_first_step_joins_a_sum_listed_alike():
    """The other side: beside a sum over 'x' of a ``P('z', 'x')`` value's second
    dimension (listed ``(z, y)`` as well), XLA combines the two (4 + 8 bytes)."""
    mesh = _mesh()
    a = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("z", "x")))
    b = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("z", "x")))
    real, said = _both(lambda a, b: (a.sum(), jnp.sin(b).sum(1)), a, b)
    assert len(real) == 2 and any(size == 12 for *_, size in real)
    assert said == real


RECIPE = Recipe(mesh=(2, 2, 2), reversed_devices=True, inputs=(
    ((4, 2), ("z", "x")), ((4, 2), ("x", None))), steps=(
    ("input", (), 0), ("scalar", (0,), None), ("reshard", (1,), ("x", None)),
    ("unary", (2,), "sin"), ("input", (), 1), ("loop", (0, 4), ("cond reduce", 2, 0)),
    ("reduce", (4,), ("sum", 0)), ("constrain", (4,), (None, "y"))),
    outputs=(5, 6, 7), axis_types="EAA")


def test_the_deep_runs_recipe_agrees():
    """The session-21 device deep run's recipe (a cond's predicate ``x.sum()`` over an
    Explicit 'x' beside a sum of ``P('x', None)``): replayed against the compiled module."""
    assert compare_collectives(RECIPE).disagreements == []

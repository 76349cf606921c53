"""What JAX refuses inside a shard_map's body, described (issue 32; SMAP-26 to SMAP-28).

* SMAP-26 — collectives over axis index groups: JAX 0.10.2 types ``pmax``, ``pmin``,
  ``all_gather``, ``psum_scatter`` and ``all_to_all`` over groups (with or without
  check_vma; a group's length their size) and ``psum``/``pmean`` without check_vma; it
  refuses while tracing groups that do not cover their indices once each (ValueError), a
  psum over groups under check_vma and an all_gather to other than varying values over
  groups (NotImplementedError); when lowering, groups naming a position past the axes
  (IndexError), leaving one out, or an all_gather's groups of different lengths
  (ValueError).
* SMAP-27 — an all_gather to reduced values of an operand not varying along its axes
  (ValueError; every operand without check_vma); to invariant values it is accepted.
* SMAP-28 — a constraint or a reshard inside the body given a NamedSharding over the
  user's concrete mesh (its axes not Manual) of a value varying along a manual axis
  (ValueError, at trace); of a value varying along none, or with a bare spec, accepted.

Each is held to JAX (held_to_jax: jax.jit traced, lowered, compiled and run; the same
stage and class, or the same results), and the refusals name the rule and the equation's
path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from shardlaw.properties.registry import checks

from test_steps_arguments import NS, P, held_to_jax, mesh

AXT = jax.sharding.AxisType
X = np.linspace(-1.0, 1.0, 16 * 32, dtype=np.float32).reshape(16, 32)
G = [[0, 1], [2, 3]]


def _mapped(body, vma, in_specs=P("x", "y"), out_specs=P("x", "y")):
    return lambda x: jax.shard_map(body, mesh=mesh(), in_specs=in_specs,
                                   out_specs=out_specs, check_vma=vma)(jnp.sin(x))


def _held(fun, x=X):
    program, verdict, problems = held_to_jax(fun, x)
    assert not problems, problems
    return verdict


# name: (body, check_vma values, None where accepted, else (stage, class))
GROUPED = {
    "pmax": (lambda x: lax.pmax(x, "y", axis_index_groups=G), (True, False), None),
    "pmin": (lambda x: lax.pmin(x, "y", axis_index_groups=G), (True, False), None),
    "pmax-uneven": (lambda x: lax.pmax(x, "y", axis_index_groups=[[0, 1, 2], [3]]),
                    (True,), None),
    "pmax-two-axes": (lambda x: lax.pmax(x, ("x", "y"), axis_index_groups=[
        [0, 1, 2, 3], [4, 5, 6, 7]]), (True,), None),
    "all_gather": (lambda x: lax.all_gather(x, "y", axis_index_groups=G), (True, False),
                   None),
    "all_gather-tiled-two-axes": (lambda x: lax.all_gather(
        x, ("x", "y"), axis_index_groups=[[0, 5, 2, 3], [4, 1, 6, 7]], tiled=True),
        (True,), None),
    "psum_scatter": (lambda x: lax.psum_scatter(x, "y", scatter_dimension=1,
                                                axis_index_groups=G, tiled=True),
                     (True, False), None),
    "all_to_all": (lambda x: lax.all_to_all(x, "y", 1, 1, axis_index_groups=G, tiled=True),
                   (True, False), None),
    "psum-without-check-vma": (lambda x: lax.psum(x, "y", axis_index_groups=G), (False,),
                               None),
    "pmean-without-check-vma": (lambda x: lax.pmean(x, "y", axis_index_groups=G), (False,),
                                None),
    "psum-under-check-vma": (lambda x: lax.psum(x, "y", axis_index_groups=G), (True,),
                             ("trace", "NotImplementedError")),
    "pmean-under-check-vma": (lambda x: lax.pmean(x, "y", axis_index_groups=G), (True,),
                              ("trace", "NotImplementedError")),
    "all_gather-to-invarying": (lambda x: lax.all_gather(x, "y", axis_index_groups=G,
                                                         to="invarying"),
                                (True, False), ("trace", "NotImplementedError")),
    "pmax-not-covering": (lambda x: lax.pmax(x, "y", axis_index_groups=[[0, 1], [2, 2]]),
                          (True, False), ("trace", "ValueError")),
    "all_gather-not-covering": (lambda x: lax.all_gather(
        x, "y", axis_index_groups=[[0, 1], [2, 2]], tiled=True), (True,),
        ("trace", "ValueError")),
    "psum_scatter-not-covering": (lambda x: lax.psum_scatter(
        x, "y", scatter_dimension=1, axis_index_groups=[[0, 1], [2, 2]], tiled=True),
        (False,), ("trace", "ValueError")),
    "all_to_all-not-covering": (lambda x: lax.all_to_all(
        x, "y", 1, 1, axis_index_groups=[[0, 1], [2, 2]], tiled=True), (True,),
        ("trace", "ValueError")),
    "pmax-past-the-axis": (lambda x: lax.pmax(x, "y", axis_index_groups=[list(range(8))]),
                           (True,), ("lower", "IndexError")),
    "pmax-leaving-one-out": (lambda x: lax.pmax(x, "y", axis_index_groups=[[0, 1]]),
                             (True, False), ("lower", "ValueError")),
    "all_gather-uneven": (lambda x: lax.all_gather(x, "y", axis_index_groups=[
        [0, 1, 2], [3]], tiled=True), (True,), ("lower", "ValueError")),
}
GROUPED_CASES = [(name, vma) for name, (_, vmas, _) in sorted(GROUPED.items())
                 for vma in vmas]


@checks("SMAP-26")
@pytest.mark.parametrize("name,vma", GROUPED_CASES,
                         ids=[f"{n}-{'vma' if v else 'novma'}" for n, v in GROUPED_CASES])
def test_a_collective_over_index_groups_is_typed_or_refused_as_jax_does(name, vma):
    """Accepted: typed as JAX types it (a group's length its size), the result shardings
    JAX's; refused: SMAP-26 at JAX's stage with JAX's class, at the collective's path."""
    body, _, refused = GROUPED[name]
    verdict = _held(_mapped(body, vma))
    if refused is None:
        assert verdict.accepted
    else:
        assert (verdict.rule, verdict.stage, verdict.error_type) == ("SMAP-26", *refused)
        assert verdict.path == "body[1].shard_map.body[0]"


@checks("SMAP-26")
def test_the_replica_groups_of_a_grouped_collective_are_read_at_the_groups_positions():
    """The groups JAX lowers: each of SMAP-14's groups read at each index group's
    positions (the mesh's devices reversed, so ids are not positions)."""
    from shardlaw.spec import explain_program
    from shardlaw.spec.bridge.program import describe_program

    reversed_mesh = mesh(backwards=True)
    fun = lambda x: jax.shard_map(lambda a: lax.pmax(a, "y", axis_index_groups=[[0, 3], [2, 1]]),
                                  mesh=reversed_mesh, in_specs=P("x", "y"),
                                  out_specs=P("x", "y"))(x)
    verdict = explain_program(describe_program(fun, X))
    (record,) = [r for p, r in verdict.decided if p == "body[0].shard_map.body[0]"]
    # the lowered module lists mesh positions; the record, the devices at them
    text = jax.jit(fun).lower(X).as_text()
    assert "replica_groups = dense<[[0, 3], [2, 1], [4, 7], [6, 5]]>" in text
    ids = [d.id for d in reversed_mesh.devices.flat]
    assert record.groups == tuple(tuple(ids[p] for p in g)
                                  for g in ((0, 3), (2, 1), (4, 7), (6, 5)))


# name: (body, check_vma values, refused)
TO_REDUCED = {
    "to-reduced-of-an-invariant": (lambda x: lax.all_gather(jnp.ones((2, 8)), "y",
                                                            to="reduced", tiled=True),
                                   (True, False), True),
    "to-reduced-without-check-vma": (lambda x: lax.all_gather(x, "x", to="reduced",
                                                              tiled=True), (False,), True),
    "to-invarying": (lambda x: lax.all_gather(x, "y", to="invarying", tiled=True).sum(
        0, keepdims=True), (True, False), False),
    "to-invarying-of-an-invariant": (lambda x: x + lax.all_gather(
        jnp.ones((2, 8)), "y", to="invarying", tiled=True)[:8], (True,), False),
}
REDUCED_CASES = [(name, vma) for name, (_, vmas, _) in sorted(TO_REDUCED.items())
                 for vma in vmas]


@checks("SMAP-27")
@pytest.mark.parametrize("name,vma", REDUCED_CASES,
                         ids=[f"{n}-{'vma' if v else 'novma'}" for n, v in REDUCED_CASES])
def test_an_all_gather_to_reduced_values_takes_a_varying_operand(name, vma):
    """JAX refuses an all_gather to reduced values of an operand not varying along its
    axes (ValueError at trace: SMAP-27 at the gather's path); to invariant values it
    gathers any operand (cast varying first), accepted alike."""
    body, _, refused = TO_REDUCED[name]
    verdict = _held(_mapped(body, vma))
    if refused:
        assert (verdict.rule, verdict.stage, verdict.error_type) == (
            "SMAP-27", "trace", "ValueError")
        assert verdict.path.startswith("body[1].shard_map.body[")
    else:
        assert verdict.accepted


def _over(types):
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=types)


def _placed(kind, concrete, spec, invariant=False):
    """A body placing its value (or, ``invariant``, a constant it then adds) with a
    constraint or a reshard, given a NamedSharding over the user's mesh or a bare spec."""
    def body(x, mesh):
        target = NS(mesh, spec) if concrete else spec
        place = (lambda v: lax.with_sharding_constraint(v, target)) if kind == "wsc" else (
            lambda v: jax.sharding.reshard(v, target))
        return place(jnp.ones((2, 32))) + x if invariant else place(x)
    return body


# name: (mesh types, axis names, check_vma, body, refused by)
PLACED = {
    "wsc-concrete-auto": ((AXT.Auto,) * 2, {"x"}, True, _placed("wsc", True, P()), "SMAP-28"),
    "wsc-concrete-all-manual": ((AXT.Auto,) * 2, {"x", "y"}, True,
                                _placed("wsc", True, P(None, "y")), "SMAP-28"),
    "wsc-concrete-explicit-x": ((AXT.Explicit, AXT.Auto), {"x"}, True,
                                _placed("wsc", True, P()), "SMAP-28"),
    "wsc-concrete-names-explicit": ((AXT.Auto, AXT.Explicit), {"x"}, True,
                                    _placed("wsc", True, P(None, "y")), "WSC-5"),
    "reshard-concrete": ((AXT.Auto,) * 2, {"x"}, True, _placed("reshard", True, P()),
                         "SMAP-28"),
    "wsc-concrete-invariant": ((AXT.Auto,) * 2, {"x"}, True,
                               _placed("wsc", True, P(), invariant=True), None),
    "reshard-concrete-invariant": ((AXT.Auto,) * 2, {"x"}, True,
                                   _placed("reshard", True, P(), invariant=True), None),
    "wsc-concrete-without-check-vma": ((AXT.Auto,) * 2, {"x"}, False,
                                       _placed("wsc", True, P(None, "y")), None),
    "wsc-bare-spec": ((AXT.Auto,) * 2, {"x"}, True, _placed("wsc", False, P(None, "y")),
                      None),
    "reshard-bare-spec": ((AXT.Auto, AXT.Explicit), {"x"}, True,
                          _placed("reshard", False, P(None, "y")), None),
}


@checks("SMAP-28")
@pytest.mark.parametrize("name", sorted(PLACED))
def test_a_placement_in_a_body_over_the_users_mesh_is_refused_for_a_varying_value(name):
    """With check_vma, a constraint or reshard given a NamedSharding over the user's mesh
    (its manual axes not Manual there) of a value varying along a manual axis: JAX's
    ValueError at trace, SMAP-28 at the placement's path (WSC-5 first where the spec names
    a non-Auto axis); of an invariant value, without check_vma, or with a bare spec (read
    over the body's mesh), accepted alike."""
    types, manual, vma, body, refused = PLACED[name]
    user_mesh = _over(types)
    fun = lambda x: jax.shard_map(lambda a: body(a, user_mesh), mesh=user_mesh,
                                  in_specs=P("x"), out_specs=P("x"), axis_names=manual,
                                  check_vma=vma)(jnp.sin(x))
    x = X[:4] if AXT.Explicit not in types else jax.device_put(X[:4], NS(user_mesh, P()))
    verdict = _held(fun, x)
    if refused is None:
        assert verdict.accepted
    else:
        assert (verdict.rule, verdict.stage, verdict.error_type) == (
            refused, "trace", "ValueError")
        assert verdict.path == "body[1].shard_map.body[0]"

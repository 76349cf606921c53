"""Whole programs under jax.jvp, jax.linearize, jax.vjp and jax.grad, as rewrites, against real JAX 0.10.2.

The spec rewrites a program's description equation by equation
(:mod:`shardlaw.spec.program.autodiff`); these tests hold the rewrite and
``explain_program``'s answer about it to what ``jax.jit`` of the transformed function does:
the same placing equations (``describe_program`` of JAX's transformed function, or its
jaxpr), and the same refusal or the same results. Issue 23's gap 5 — the gradient of an
input on a reduced sharding — is pinned on both sides by AD-9. The property draws program
recipes (:mod:`shardlaw.properties.program_harness`) under each transformation, two of
them stacked included; the coverage test at the end asks for both sides of the rules it
names.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, example, given, settings

from shardlaw.properties import hits
from shardlaw.properties.program_ad_harness import (
    SOURCE, AdCase, jaxpr_signature, ad_cases, ad_hit_counts, compare_ad, compare_map_ad,
    loss_program, map_ad_cases, map_ad_hit_counts, rewrite, run_transformed, signature,
)
from shardlaw.properties.program_ad_harness import MapAdCase
from shardlaw.properties.program_harness import Case, Recipe, Step, program_of
from shardlaw.properties.program_shardmap_harness import MapCase, Op
from shardlaw.properties.registry import checks
from shardlaw.spec import (
    UNSPECIFIED, Mesh, NamedSharding, Opaque, P, Program, Rejection, SingleDeviceSharding,
    Value, explain_program, from_jax, to_jax,
)
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.core.values import AxisType
from shardlaw.spec.program.autodiff import (
    grad_program, jvp_program, linearize_program, value_and_grad_program, vjp_program,
)

MESH = Mesh.iota((2, 4), ("x", "y"))
REVERSED = Mesh((2, 4), ("x", "y"), range(7, -1, -1))
ROWS, COLS = NamedSharding(MESH, P("x")), NamedSharding(MESH, P("y"))
X = Value.placed((8, 8), ROWS)

# sin, a constraint, an inner jit with an in_sharding, a device_put; and sin of a numpy input.
INNER = Recipe((Step("neg", 0),), (1,))
CASE = Case((X, Value.numpy((8, 8))), Recipe((
    Step("sin", 0), Step("constraint", 2, COLS), Step("jit", 3, body=INNER, in_sharding=ROWS),
    Step("device_put", 4, ROWS), Step("sin", 1)), (5, 6)))

EXAMPLES = max(settings.default.max_examples // 4, 30)


def _agree(ad: AdCase) -> None:
    problems = compare_ad(ad)
    assert not problems, "\n".join(problems) + f"\ncase: {ad}"


def _kinds(program: Program) -> list[str]:
    return [eq.kind for eq in program.equations if eq.kind != "opaque"]


# --------------------------------------------------------------------------- the rewrites

@checks("AD-2")
def test_jvp_puts_each_tangent_after_its_primal_constrained_and_placed_alike():
    _agree(AdCase(CASE, "jvp"))
    program = rewrite(AdCase(CASE, "jvp"))
    (call,) = program.equations
    body = call.body
    assert _kinds(body) == ["sharding_constraint", "sharding_constraint", "jit", "device_put",
                            "device_put"]
    constraints = [eq for eq in body.equations if eq.kind == "sharding_constraint"]
    assert {eq.sharding for eq in constraints} == {COLS}
    inner = [eq for eq in body.equations if eq.kind == "jit"][0]
    assert inner.body.in_shardings == (ROWS, ROWS)   # the tangent with its primal's (AD-2)


@checks("AD-3", "AD-4", "AD-5")
def test_grad_is_the_primal_jit_then_the_transposed_one_in_reverse_order():
    _agree(AdCase(CASE, "grad"))
    program = rewrite(AdCase(CASE, "grad"))
    primal, _seed, back = [eq for eq in program.equations if eq.kind != "opaque"]
    # Two residuals (the cos of each sin), UNSPECIFIED; the inputs' cotangents come back
    # on the inputs' in_shardings (UNSPECIFIED here).
    assert primal.body.out_shardings == (UNSPECIFIED,) * 3
    assert back.body.in_shardings == (UNSPECIFIED,) * 3
    # each value placed typed over the mesh, split nowhere (its axes are Auto)
    typed = ((MESH.abstract, None),)
    assert signature(back.body) == (
        ("device_put", (None,), typed),                          # put back, no target
        ("jit", (UNSPECIFIED,), (ROWS,), (False,), (), typed * 2),   # in_sharding -> out
        ("sharding_constraint", COLS, typed))                    # constrained alike


@checks("AD-3", "AD-4")
def test_linearize_and_vjp_agree_with_jax():
    for transform in ("linearize", "vjp"):
        _agree(AdCase(CASE, transform))
    lin = linearize_program(program_of(CASE))
    assert lin.nonzero == (True, True)
    assert len(lin.primal.outputs) == 2 + 2       # the outputs, then two residuals
    vjp = vjp_program(program_of(CASE))
    assert vjp.reached == (True, True)


def test_jvp_types_the_tangents_inside_as_their_primals():
    """JAX differentiates the jit's traced body, so a tangent passed as a numpy array is
    typed inside as its primal (over the argument's mesh) and comes back read as the
    argument's sharding, ``P('x', None)``, where a numpy array passed through a plain jit
    comes back ``P('x')``."""
    mesh = Mesh.iota((8,), ("x",))
    x = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    case = Case((x,), Recipe((Step("constraint", 0, NamedSharding(mesh, P("x", None))),),
                             (1, 0)))
    _agree(AdCase(case, "jvp"))


def test_transformations_compose_jvp_of_grad():
    _agree(AdCase(CASE, "jvp_of_grad"))
    loss = loss_program(CASE)
    twice = jvp_program(grad_program(loss, (0, 1)))
    assert len(twice.outputs) == 4                # two gradients, then their tangents


def test_jvp_of_grad_through_a_single_device_constraint():
    """Found by the deep run: add_any's JVP instantiates a zero tangent (typed as its
    primal), so the gradient's tangent keeps the argument's mesh and comes back P(None)."""
    mesh = Mesh.iota((1,), ("x",))
    x = Value.placed((8,), NamedSharding(mesh, P(None)))
    u = Value.placed((8,), SingleDeviceSharding(0), committed=False)
    case = Case((x, u), Recipe((Step("constraint", 0, SingleDeviceSharding(0)),
                                Step("sin", 2)), (3, 0)))
    _agree(AdCase(case, "jvp_of_grad"))


def test_value_and_grad_returns_the_loss_then_the_gradients():
    loss = loss_program(CASE)
    both = value_and_grad_program(loss, (0, 1))
    assert [both.value_types[n].shape for n in both.outputs] == [(), (8, 8), (8, 8)]
    assert both.outputs[1:] == grad_program(loss, (0, 1)).outputs


@checks("DA-1")
def test_a_constraint_on_other_devices_is_refused_under_grad_as_without_it():
    case = Case((X,), Recipe((Step("sin", 0), Step("constraint", 1,
                                                   NamedSharding(REVERSED, P("y")))), (2,)))
    _agree(AdCase(case, "grad"))
    verdict = explain_program(rewrite(AdCase(case, "grad")))
    assert (verdict.rule, verdict.stage) == ("DA-1", "lower")
    # The cotangent's constraint, inside the transposed jit (after the primal jit, the
    # seed and its reshard), is the one the device assignment meets: JAX agrees above.
    assert verdict.path == "body[3].jit.body[1]"


@checks("FIT-1")
def test_what_tracing_refuses_is_refused_before_the_rewrite_at_its_path():
    inner = Recipe((Step("neg", 0),), (1,))
    case = Case((X,), Recipe((Step("jit", 0, body=inner,
                                   in_sharding=NamedSharding(MESH, P(None, "x", None))),), (1,)))
    _agree(AdCase(case, "vjp"))
    with pytest.raises(Rejection) as refused:
        vjp_program(program_of(case))
    assert refused.value.failure.rule == "FIT-1" and refused.value.stage == "trace"
    assert refused.value.path == "body[0].jit.body[0].jit.in_shardings[0]"
    assert run_transformed(AdCase(case, "vjp")).stage == "trace"


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
def test_a_shard_maps_jvp_is_one_shard_map_over_primals_and_tangents(axis_type):
    mesh = jax.make_mesh((8,), ("x",), axis_types=(getattr(jax.sharding.AxisType, axis_type),))
    mapped = jax.shard_map(lambda b: jax.lax.psum(jnp.sin(b), "x"), mesh=mesh,
                           in_specs=jax.P("x"), out_specs=jax.P())
    f = jax.jit(lambda a: mapped(a))
    a = jax.device_put(jnp.ones((8,)), jax.NamedSharding(mesh, jax.P("x")))
    rewritten = jvp_program(describe_program(f, a))
    jvp = jax.jit(lambda p, t: jax.jvp(f, (p,), (t,)))
    ones = jnp.ones((8,))
    assert signature(rewritten) == jaxpr_signature(
        jax.make_jaxpr(jvp)(a, ones).jaxpr.eqns[0].params["jaxpr"].jaxpr)
    (call,) = rewritten.equations
    (smap,) = [eq for eq in call.body.equations if eq.kind == "shard_map"]
    assert smap.in_specs == (P("x"), P("x")) and smap.out_specs == (P(), P())
    assert explain_program(rewritten).accepted and len(jvp(a, ones)) == 2


def _explicit_cases() -> list:
    """Three programs over Explicit meshes whose cotangents JAX refuses (found by the deep
    run), and one it accepts."""
    from shardlaw.spec import AxisType
    explicit = AxisType.Explicit
    m24 = Mesh.iota((2, 4), ("x", "y"), (explicit, explicit))
    m4 = Mesh.iota((4,), ("x",), (explicit,))
    m2 = Mesh.iota((2,), ("x",), (explicit,))
    return [
        # the transposed shard_map puts the cotangent together split along 'x' (its in
        # spec), the argument's type is not
        (MapAdCase(MapCase(m24, Value.placed((6, 8), NamedSharding(m24, P(None, None))),
                           P("x"), P(None, "x"), frozenset({"x"}), True,
                           (Op("nested", ("y",), 0, 0, tiled=False), Op("axis_index", ("x",))),
                           outer_jit=True), "vjp"), True),
        # a constraint's cotangent keeps the incoming (unsplit) one's type; the shard_map's
        # result is split by its out spec
        (MapAdCase(MapCase(m4, Value.placed((8,), NamedSharding(m4, P(None))), P(None),
                           P("x"), frozenset({"x"}), True, (Op("half"),),
                           after=NamedSharding(m4, P(None))), "vjp"), True),
        (MapAdCase(MapCase(m24, Value.placed((8, 8), NamedSharding(m24, P(None, "x"))),
                           P("y", None), P(None, "y"), frozenset({"y"}), False,
                           (Op("axis_index", ("y",)),), outer_jit=True), "grad"), True),
        # the loss's cotangent keeps the constrained value's split: accepted
        (MapAdCase(MapCase(m2, Value.placed((8, 16), NamedSharding(m2, P(None, None))), P(None),
                           P("x"), frozenset({"x"}), False, (Op("psum", ("x",)), Op("half")),
                           after=NamedSharding(m2, P(None, None))), "grad"), False)]


@checks("AD-13")
@pytest.mark.parametrize("index", range(4))
def test_a_cotangent_over_explicit_axes_is_typed_as_its_primal(index):
    from shardlaw.properties.program_ad_harness import map_rewrite

    ad, refused = _explicit_cases()[index]
    assert compare_map_ad(ad) == []
    if not refused:
        assert explain_program(map_rewrite(ad)).accepted
        return
    with pytest.raises(Rejection) as error:
        map_rewrite(ad)
    assert (error.value.failure.rule, error.value.stage) == ("AD-13", "trace")
    assert isinstance(error.value, ValueError) and "Expected cotangent type" in str(error.value)


def _map_ad(ops: tuple, transform: str, check_vma: bool = True) -> MapAdCase:
    return MapAdCase(MapCase(MESH, X, P("x"), P("x"), frozenset(), check_vma, ops), transform)


def _explicit_block(check_vma: bool):
    """A shard_map'd block on an Explicit 2x4 mesh: sin, then a psum over 'x'."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    mapped = jax.shard_map(lambda b: jax.lax.psum(jnp.sin(b), "x"), mesh=mesh,
                           in_specs=jax.P("x"), out_specs=jax.P(), check_vma=check_vma)
    a = jax.device_put(jnp.ones((8, 8)), jax.NamedSharding(mesh, jax.P("x")))
    return jax.jit(lambda v: mapped(v)), a


def _jax_shard_maps(jaxpr) -> list:
    """Every shard_map equation of a jaxpr, inner jits' included, in order."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "jit":
            out += _jax_shard_maps(eqn.params["jaxpr"].jaxpr)
        elif eqn.primitive.name == "shard_map":
            out.append(eqn)
    return out


def _spec_shard_maps(program: Program) -> list:
    out = []
    for eq in program.equations:
        if eq.kind == "jit":
            out += _spec_shard_maps(eq.body)
        elif eq.kind == "shard_map":
            out.append(eq)
    return out


@checks("AD-10", "AD-11")
@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("transform", ["linearize", "vjp", "grad"])
def test_a_shard_maps_linearization_and_transpose_are_jaxs(transform, check_vma):
    """The known shard_map returns the residual (cos of the block) before its result, split
    over the axes it varies along (check_vma: 'x') or every manual axis ('x', 'y'); the
    tangent shard_map takes it back with that spec; the transposed one takes the
    cotangent, then the residual, and returns the input's cotangent with its in spec."""
    f, a = _explicit_block(check_vma)
    program = describe_program(f, a)
    ones = jnp.ones((8, 8))
    if transform == "linearize":
        real = jax.jit(lambda p, t: jax.linearize(f, p)[1](t))
        rewritten, args = linearize_program(program).applied, (a, ones)
    elif transform == "vjp":
        real = jax.jit(lambda p, c: jax.vjp(f, p)[1](c))
        rewritten, args = vjp_program(program).applied, (a, jnp.ones((4, 8)))
    else:
        loss = jax.jit(lambda v: jnp.sum(f(v)))
        real, args = jax.jit(jax.grad(loss)), (a,)
        rewritten = grad_program(describe_program(loss, a))
    jaxpr = jax.make_jaxpr(real)(*args).jaxpr
    assert signature(rewritten) == jaxpr_signature(jaxpr.eqns[0].params["jaxpr"].jaxpr)
    stored = P("x") if check_vma else P(("x", "y"))
    known, second = _spec_shard_maps(rewritten)
    assert known.out_specs == (stored, P()) and known.in_specs == (P("x"),)
    if transform == "linearize":
        assert second.in_specs == (stored, P("x")) and second.out_specs == (P(),)
    else:
        assert second.in_specs == (P(), stored) and second.out_specs == (P("x"),)
        kinds = [eq.primitive for eq in second.body.equations]
        # unchecked: the cotangent is divided by 'y' (left out of P()) outside, and the
        # input's cotangent summed over 'y' (left out of P('x')) inside
        assert ("psum" in kinds) == (not check_vma) and ("pvary" in kinds) == check_vma
    results = jax.tree_util.tree_leaves(real(*args))
    assert explain_program(rewritten).accepted
    assert [rewritten.value_types[n].shape for n in rewritten.outputs] == [
        r.shape for r in results]


def _vjp_of_one_collective(op, check_vma: bool):
    from shardlaw.properties.program_ad_harness import map_rewrite, map_transformed

    case = MapCase(MESH, X, P("x"), P("x", "y"), frozenset(), check_vma, (op,))
    ad = MapAdCase(case, "vjp")
    assert compare_map_ad(ad) == []
    fn, args = map_transformed(ad)
    theirs = _jax_shard_maps(jax.make_jaxpr(fn)(*args).jaxpr)[-1]
    mine = _spec_shard_maps(map_rewrite(ad))[-1]
    return ([(e.primitive.name, e.params) for e in theirs.params["jaxpr"].eqns],
            [(e.primitive, dict(e.params)) for e in mine.body.equations])


@checks("AD-12")
@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("kind,transposed,changed", [
    ("psum", "psum", {}), ("all_gather", "reduce_scatter", {"scatter_dimension": 1}),
    ("psum_scatter", "all_gather", {"all_gather_dimension": 1}),
    ("ppermute", "ppermute", {"perm": ((1, 0), (2, 1), (3, 2), (0, 3))}),
    ("all_to_all", "all_to_all", {"split_axis": 1, "concat_axis": 0})])
def test_each_collective_transposes_as_in_jax(kind, transposed, changed, check_vma):
    op = Op(kind, ("y",), dim=1 if kind != "all_to_all" else 0, dim2=1,
            perm=((0, 1), (1, 2), (2, 3), (3, 0)))
    theirs, mine = _vjp_of_one_collective(op, check_vma)
    assert [p for p, _ in mine] == [p for p, _ in theirs]
    if kind == "psum" and check_vma:   # psum is pvary then psum_invariant, and back
        assert [p for p, _ in mine] == ["psum_invariant", "pvary", "psum_invariant"]
    (params,) = [q for p, q in mine if p == transposed][:1] or [None]
    for key, value in changed.items():
        assert params[key] == value
        assert [q for p, q in theirs if p == transposed][0][key] == value


@checks("AD-12")
@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_pmax_has_no_derivative_on_either_side(transform):
    from shardlaw.properties.program_ad_harness import map_rewrite

    ad = _map_ad((Op("pmax", ("y",)),), transform)
    assert compare_map_ad(ad) == []
    with pytest.raises(Rejection) as refused:
        map_rewrite(ad)
    assert refused.value.failure.rule == "AD-12" and isinstance(refused.value,
                                                                NotImplementedError)
    assert ".shard_map.body[" in str(refused.value)


EXPLICIT = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)


@pytest.mark.parametrize("split", [P("x"), P(None, "y"), P()])
def test_a_reshards_cotangent_goes_back_to_its_operands_type(split):
    """JAX reshards a reshard's cotangent to its operand's cotangent type: the operand's
    mesh and its split over Explicit axes, every dimension named."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    x = jax.device_put(jnp.ones((8, 8)), jax.NamedSharding(mesh, to_jax(split)))
    cols = jax.NamedSharding(mesh, jax.P(None, "y"))
    f = jax.jit(lambda a: jnp.sum(jnp.sin(jax.sharding.reshard(a, cols))))
    rewritten = grad_program(describe_program(f, x))
    grad = jax.jit(jax.grad(f))
    assert signature(rewritten) == jaxpr_signature(
        jax.make_jaxpr(grad)(x).jaxpr.eqns[0].params["jaxpr"].jaxpr)
    back = [eq for eq in rewritten.equations if eq.kind == "jit"][-1].body
    assert back.equations[-1].kind == "reshard"
    assert back.equations[-1].sharding.spec == P(*split, *(None,) * (2 - len(split)))
    assert explain_program(rewritten).accepted
    assert jax.typeof(grad(x)).sharding.spec == jax.typeof(x).sharding.spec


def _explicit_case(inputs, steps, outputs, transform, keep_unused=False):
    return AdCase(Case(inputs, Recipe(steps, outputs), keep_unused=keep_unused), transform)


# Found by the AD program property over Explicit meshes (issue 23: the rewrites typed what
# they create without the primal's split), each held to JAX by compare_ad, the types of
# every placed value and jit boundary included.
TYPED_CASES = {
    # a reshard of a value typed over no mesh: its cotangent is resharded to the empty mesh
    "reshard of an unplaced value": _explicit_case(
        (Value.placed((4, 8), SingleDeviceSharding(0)),) * 2,
        (Step("reshard", 1, NamedSharding(Mesh.iota((1,), ("x",), (AxisType.Explicit,)),
                                          P(None, "x"))),), (2,), "vjp"),
    # a device_put of a value typed over an all-Explicit mesh: its cotangent is put back to
    # the value's type (JAX's inferred source), which lowers only with a concrete mesh
    "device_put back to its source type": _explicit_case(
        (Value.numpy((8, 8)), Value.numpy((8, 8))),
        (Step("reshard", 1, NamedSharding(EXPLICIT, P("y", "x"))),
         Step("device_put", 2, NamedSharding(EXPLICIT, P("y", None)))), (3,), "vjp"),
    "device_put back, placed": _explicit_case(
        (Value.placed((8, 8), NamedSharding(EXPLICIT, P("x"))),),
        (Step("device_put", 0, NamedSharding(EXPLICIT, P(None, "y"))), Step("sin", 1)),
        (2,), "grad"),
    # a cotangent split over 'z' meets a residual typed over no mesh: the product keeps
    # the split
    "split through an unplaced residual": _explicit_case(
        (Value.numpy((8, 8)),),
        (Step("sin", 0), Step("device_put", 1, NamedSharding(
            Mesh.iota((2, 2, 2), ("x", "y", "z"), (AxisType.Explicit,) * 3), P("z")))),
        (2,), "grad", keep_unused=True),
    # an input typed reduced through sin: its cotangent, unreduced, is multiplied by the
    # cosine, typed reduced alike (JAX's mul takes that; AD-15 refuses only unary steps)
    "reduced through sin": _explicit_case(
        (Value.placed((8,), NamedSharding(EXPLICIT, P(None, reduced={"x", "y"}))),),
        (Step("sin", 0),), (1,), "grad"),
    # a loss typed reduced over 'x': the seed is unreduced over it, and so is every
    # cotangent of a value typed reduced
    "reduced loss": _explicit_case(
        (Value.placed((8, 8), NamedSharding(EXPLICIT, P(reduced={"x"}))),),
        (Step("constraint", 0, NamedSharding(EXPLICIT, P())),), (1, 0), "grad",
        keep_unused=True),
}


@checks("AD-5", "AD-13")
@pytest.mark.parametrize("name", sorted(TYPED_CASES))
def test_the_rewrites_type_what_they_create_as_jax_over_explicit_axes(name):
    _agree(TYPED_CASES[name])


MIXED_XY = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
XYZ = Mesh.iota((2, 2, 2), ("x", "y", "z"), (AxisType.Explicit,) * 3)

# Cotangents JAX refuses while transposing (found by the property over Explicit meshes): a
# sum's cotangent, unreduced over 'y' as the loss is reduced over it, reaching the
# operand that is not (AD-13, ValueError); the cotangent of an input summed from two
# paths, one split over 'z' and one split nowhere (AD-14, AssertionError).
REFUSED_CASES = {
    "AD-13": _explicit_case(
        (Value.placed((8,), NamedSharding(MIXED_XY, P(None))),),
        (Step("reshard", 0, NamedSharding(MIXED_XY, P("x", reduced={"y"}))),), (1, 0),
        "grad"),
    "AD-14": _explicit_case(
        (Value.numpy((8, 8)),),
        (Step("sin", 0), Step("device_put", 1, NamedSharding(XYZ, P("z")))), (2, 0),
        "grad", keep_unused=True),
    # (deep run seed 101) an input typed reduced over both axes, negated: its cotangent,
    # unreduced, goes through neg's transpose, a neg (AD-15, NotImplementedError)
    "AD-15": _explicit_case(
        (Value.placed((8,), NamedSharding(EXPLICIT, P(None, reduced={"x", "y"}))),),
        (Step("neg", 0),), (1,), "grad"),
    # (deep run seed 404) a numpy cotangent times the cosine of a value typed reduced over
    # 'x': the product, typed reduced, is reshaped to the operand's cotangent type,
    # unreduced (AD-16, ValueError)
    "AD-16": _explicit_case(
        (Value.placed((8,), SingleDeviceSharding(1)),),
        (Step("reshard", 0, NamedSharding(Mesh.iota((2,), ("x",), (AxisType.Explicit,)),
                                          P(None, reduced={"x"}))), Step("sin", 1)),
        (2,), "vjp"),
}


@checks("AD-13", "AD-14", "AD-15", "AD-16")
@pytest.mark.parametrize("rule_id", sorted(REFUSED_CASES))
def test_cotangents_jax_cannot_hand_back_or_sum_are_refused_while_tracing(rule_id):
    ad = REFUSED_CASES[rule_id]
    outcome = run_transformed(ad)
    assert outcome.stage == "trace"
    _agree(ad)
    with pytest.raises(Rejection) as refused:
        rewrite(ad)
    assert (refused.value.failure.rule, refused.value.stage) == (rule_id, "trace")
    assert isinstance(refused.value, type(outcome.error))


@checks("AD-14")
def test_cotangents_typed_alike_are_summed_over_explicit_axes():
    """sin(x) and x both returned: x's cotangent is the sum of two, both split over 'x'."""
    from shardlaw.spec.core.rules import tracing

    ad = _explicit_case((Value.placed((8, 8), NamedSharding(EXPLICIT, P("x"))),),
                        (Step("sin", 0),), (1, 0), "grad")
    _agree(ad)
    with tracing() as applied:
        program = rewrite(ad)
    assert "AD-14" in applied
    back = [eq for eq in program.equations if eq.kind == "jit"][-1].body
    (summed,) = [eq for eq in back.equations if getattr(eq, "primitive", "") == "add_any"]
    assert summed.results[0].spec == P("x")


P1 = Mesh.iota((1,), ("p",), (AxisType.Explicit,))
X1 = Mesh.iota((1,), ("x",), (AxisType.Explicit,))


@checks("PROG-3")
@pytest.mark.parametrize("unread", ["uncommitted", "committed", "nested"])
def test_an_unread_inputs_zero_gradient_beside_a_one_device_explicit_mesh(unread):
    """Deep run seed 202: the zero gradient of an input the loss does not read is typed as
    its primal (over no mesh). No input is kept, and the first sharding inside the body is
    the transposed device_put's target over an abstract mesh: JAX's re-reading over it
    fails, so the zero comes back as the compiler placed it, on the one device (PROG-3,
    OUT-3), not over the Explicit mesh of a later constraint."""
    first = Value.placed((4, 8), SingleDeviceSharding(0), committed=unread != "committed")
    steps = (Step("constraint", 0, NamedSharding(X1, P(None, None))),
             Step("constraint", 1, NamedSharding(P1, P(None, None))),
             Step("device_put", 3, NamedSharding(X1, P("x", None))))
    if unread == "nested":
        inner = Recipe((Step("constraint", 0, NamedSharding(P1, P(None, None))),), (1,))
        steps = steps[:1] + (Step("jit", 1, body=inner),) + steps[2:]
    ad = _explicit_case((first, Value.placed((4, 8), NamedSharding(P1, P("p", None)))),
                        steps, (4, 1), "grad", keep_unused=True)
    _agree(ad)
    verdict = explain_program(rewrite(ad))
    assert verdict.out_types[0].mesh is None
    assert verdict.out_shardings[0] == SingleDeviceSharding(0)


def test_an_all_to_all_leaving_a_dimension_split_over_an_automatic_axis_indivisible():
    """shard_map AD deep run seed 303 (not the AD rewrite: JAX refuses the untransformed
    function too): over an all-Explicit 2x2 mesh making only 'x' manual, a tiled
    all_to_all splitting a dimension typed split over the automatic 'y' leaves it of size
    1, which 'y' does not divide: ValueError at trace, SMAP-24."""
    mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
    case = MapCase(mesh, Value.placed((4, 8, 2), NamedSharding(mesh, P(None, "x", "y"))),
                   P(None, "x"), P(None, "x"), frozenset({"x"}), False,
                   (Op("all_to_all", ("x",), 2, 0, True), Op("all_to_all", ("x",), 0, 2, True)))
    problems = compare_map_ad(MapAdCase(case, "grad"))
    assert not problems, problems


def test_a_device_puts_cotangent_goes_back_to_its_operands_type_over_explicit_axes():
    """Over an all-Explicit mesh JAX's device_put records its operand's type as where the
    value came from, and transposed puts the cotangent there (in device memory); over a
    mesh with an Auto axis it records nothing (the cotangent is put nowhere in
    particular)."""
    explicit, mixed = (AxisType.Explicit,) * 2, (AxisType.Explicit, AxisType.Auto)
    for types, split, put in ((explicit, P(("y", "x")), P(None, "x")),
                              (mixed, P("x"), P("x", "y"))):
        mesh = Mesh.iota((2, 4), ("x", "y"), types)
        ad = _explicit_case(
            (Value.placed((8, 8), NamedSharding(mesh, split)),),
            (Step("device_put", 0, NamedSharding(mesh, put)), Step("sin", 1)), (2,), "vjp")
        _agree(ad)
        back = [eq for eq in rewrite(ad).equations if eq.kind == "jit"][-1].body
        (put,) = [eq for eq in back.equations if eq.kind == "device_put"]
        if types == mixed:
            assert put.targets == (None,)
        else:
            assert put.targets[0].spec == P(("y", "x"), None)
            assert put.targets[0].memory_kind == "device"


@pytest.mark.parametrize("transform", ["grad", "value_and_grad"])
def test_auxiliary_outputs_follow_jax(transform):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rows = jax.NamedSharding(mesh, jax.P("x"))
    f = jax.jit(lambda a: (jnp.sum(jnp.sin(jax.lax.with_sharding_constraint(a, rows))), -a))
    a = jax.device_put(jnp.ones((8, 8)), rows)
    spec = {"grad": grad_program, "value_and_grad": value_and_grad_program}[transform]
    real = jax.jit(getattr(jax, transform)(f, has_aux=True))
    rewritten = spec(describe_program(f, a), has_aux=True)
    assert signature(rewritten) == jaxpr_signature(
        jax.make_jaxpr(real)(a).jaxpr.eqns[0].params["jaxpr"].jaxpr)
    verdict, results = explain_program(rewritten), jax.tree_util.tree_leaves(real(a))
    assert verdict.accepted
    assert [rewritten.value_types[n].shape for n in rewritten.outputs] == [
        r.shape for r in results]
    # Where the spec decides a result's sharding, it is JAX's.
    for decided, result in zip(verdict.out_shardings, results):
        assert decided is UNSPECIFIED or decided == from_jax(result.sharding)


def test_grad_asks_for_a_scalar_loss():
    with pytest.raises(Rejection, match="scalar-output"):
        grad_program(Program((X,), (), (0,)))


# --------------------------------------------------------------------------- gap 5

def _reduced_loss(reads_value: bool):
    """A loss of an input placed on a reduced sharding (Explicit axes), the spec's and
    JAX's: ``sum(sin(w))`` reads its value, ``sum(w)`` does not."""
    mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    reduced = NamedSharding(mesh, P(None, None, reduced={"y"}))
    w = Value.placed((8, 8), reduced)
    equations, x = [], 0
    if reads_value:
        equations.append(Opaque((0,), (w.type,), primitive="sin", params=(("accuracy", None),)))
        x = 1
    equations.append(Opaque((x,), (Value.typed((), "float32", mesh.abstract),),
                            primitive="reduce_sum"))
    program = Program((w,), tuple(equations), (x + 1,))

    def loss(v):
        return jnp.sum(jnp.sin(v)) if reads_value else jnp.sum(v)
    data = jax.device_put(jnp.ones((8, 8)), to_jax(reduced))
    return program, reduced, loss, data


def _run(fn, *args):
    try:
        return fn(*args), None
    except Exception as error:  # noqa: BLE001 - compared below
        return None, error


@checks("AD-9")
@pytest.mark.parametrize("reads_value,keep_unused", [(False, False), (False, True),
                                                     (True, False)])
def test_a_reduced_inputs_gradient_needs_the_mesh_its_type_names(reads_value, keep_unused):
    """Gap 5: ``jax.jit(jax.grad(loss), in_shardings=reduced)``. The cotangent is typed over
    the input's Explicit mesh (unreduced where the input was reduced); a loss that does not
    read its input's value leaves the backward pass no kept input, so the program runs on
    one device and lowering refuses the 8-device type (AD-9, ValueError) — unless the jit
    keeps unused inputs, or the loss reads the value."""
    program, reduced, loss, data = _reduced_loss(reads_value)
    rewritten = dataclasses.replace(grad_program(program), in_shardings=(reduced,),
                                    keep_unused=keep_unused)
    verdict = explain_program(rewritten)
    result, error = _run(jax.jit(jax.grad(jax.jit(loss)), in_shardings=to_jax(reduced),
                                 keep_unused=keep_unused), data)
    if reads_value or keep_unused:
        assert error is None and verdict.accepted
        assert jax.typeof(result).sharding.spec.unreduced == {"y"}
        assert "AD-9" in verdict.trace
        hits.record(SOURCE, "AD-9", refused=False)
        return
    assert type(error) is ValueError and "Length of device assignment 1" in str(error)
    assert (verdict.rule, verdict.stage, verdict.error_type) == ("AD-9", "lower", "ValueError")
    assert "Length of device assignment 1 is not equal to the size of the mesh 8" in \
        verdict.message
    hits.record(SOURCE, "AD-9", refused=True)


# --------------------------------------------------------------------------- the property

@checks("DA-1", "FIT-1", "WSC-4", "PROG-2", "PROG-4")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(ad_cases())
def test_transformed_programs_agree_with_jax(ad):
    _agree(ad)


@checks("AD-9", "AD-13", "AD-14", "AD-17", "ARG-4", "DA-4")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(ad_cases(explicit=True))
def test_transformed_programs_over_explicit_meshes_agree_with_jax(ad):
    """Over meshes with Explicit axes (all of them, or mixed with Auto ones), values typed
    split and reshards among the equations: the rewrite types every value it places and
    every jit's inputs and outputs as JAX does (mesh and split), and what JAX refuses it
    refuses."""
    _agree(ad)


def test_every_rule_of_the_transformed_programs_was_seen_on_both_sides():
    """Runs last in this module: both sides of the rules the properties name, against JAX,
    on transformed programs (AD-13 to AD-16's refusals pinned above)."""
    counts = ad_hit_counts()
    missing = [(rule_id, counts.get(rule_id, (0, 0)))
               for rule_id in ("DA-1", "FIT-1", "PROG-2", "PROG-4", "AD-9", "AD-13", "AD-14",
                               "AD-15", "AD-16")
               if not all(counts.get(rule_id, (0, 0)))]
    assert not missing, f"rules not seen on both sides against JAX: {missing}"


@checks("AD-10", "AD-11", "AD-12", "AD-13", "SMAP-13", "SMAP-20")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(map_ad_cases())
# each side of AD-10..12 pinned (a stored cos, a psum transposed; a pmax refused)
@example(_map_ad((Op("sin"), Op("psum", ("y",))), "grad"))
@example(_map_ad((Op("sin"), Op("all_gather", ("y",), 1)), "vjp", check_vma=False))
@example(_map_ad((Op("pmax", ("y",)),), "linearize"))
def test_transformed_shard_map_programs_agree_with_jax(ad):
    """shard_maps with collectives under grad, jvp, linearize and vjp: the rewrite's
    placing equations and collectives, and explain_program's answer, are JAX's."""
    problems = compare_map_ad(ad)
    assert not problems, "\n".join(problems) + f"\ncase: {ad}"


def test_every_rule_of_the_transformed_shard_maps_was_seen():
    """Runs after the property above: AD-10 and AD-11 decide (no refusing side), AD-12
    refuses pmax and pmin, AD-13 a cotangent not typed as its primal; each seen against
    JAX."""
    counts = map_ad_hit_counts()
    sides = {"AD-10": (True, False), "AD-11": (True, False), "AD-12": (True, True),
             "AD-13": (True, True)}
    missing = [(rule_id, counts.get(rule_id, (0, 0))) for rule_id, (accepts, refuses)
               in sides.items() if (accepts and not counts.get(rule_id, (0, 0))[0])
               or (refuses and not counts.get(rule_id, (0, 0))[1])]
    assert not missing, f"rule sides not seen against JAX: {missing}"


def test_the_rewrites_keep_the_programs_device_count():
    """A program on chips beyond this machine's (ids up to 2**16 - 1) stays askable under
    each rewrite: the process's device count is the program's, not the default 8."""
    from shardlaw.spec import Mesh as SpecMesh, NamedSharding as SpecNamed, P as SpecP
    from shardlaw.spec import explain_program as explain
    from shardlaw.spec.program.autodiff import (
        grad_program as grad, jvp_program as jvp, linearize_program as linearize,
        vjp_program as vjp,
    )
    from shardlaw.spec.program.description import Opaque as Op, Program as Prog, Value as Val

    chips = SpecMesh.iota((256, 256), ("x", "y"))
    x = Val.placed((256, 256), SpecNamed(chips, SpecP("x")))
    loss = Prog((x,), (Op((0,), (x.type,), primitive="sin", params=(("accuracy", None),)),
                       Op((1,), (Val.typed((), mesh=chips.abstract),), primitive="reduce_sum",
                          params=(("axes", (0, 1)), ("out_sharding", None)))),
                outputs=(2,), devices=chips.size)
    for rewritten in (grad(loss), jvp(loss), linearize(loss).applied, vjp(loss).applied):
        assert rewritten.devices == chips.size
        assert explain(rewritten).num_devices == chips.size


@checks("SMAP-18")
def test_a_shard_of_one_split_over_a_non_manual_explicit_axis_is_refused():
    """Found by the shard_map AD deep run (seed 53): over an all-Explicit mesh a shard_map
    making only 'y' manual splits a dimension the argument's type splits over 'x' too; the
    shard (size 1) keeps 'x' in its type and does not split 2 ways: JAX refuses at trace
    (ValueError), as SMAP-18 does."""
    from shardlaw.spec import AxisType
    mesh = Mesh.iota((2, 2), ("x", "y"), (AxisType.Explicit,) * 2)
    case = MapCase(mesh, Value.placed((4, 8, 2), NamedSharding(mesh, P(None, "y", "x"))),
                   P(None, None, "y"), P("y", None, None), frozenset({"y"}), False,
                   (Op("axis_index", ("y",)),))
    assert compare_map_ad(MapAdCase(case, "jvp")) == []


# --------------------------------------------------------------------------- forwarding and DCE

def _jit_arities(program: Program) -> tuple:
    """Each jit's (operands, outputs, its body's jits), bodies included."""
    return tuple((len(eq.operands), len(eq.body.outputs), _jit_arities(eq.body))
                 for eq in program.equations if eq.kind == "jit")


def _jaxpr_jit_arities(jaxpr) -> tuple:
    return tuple((len(e.invars), len(e.outvars), _jaxpr_jit_arities(e.params["jaxpr"].jaxpr))
                 for e in jaxpr.eqns if e.primitive.name == "jit")


@checks("AD-3", "AD-4")
def test_linearize_forwards_an_input_through_two_jits():
    """An inner jit returning its input is forwarded, so the outer jit returns its input
    too: JAX stages the primal jit with no outputs, and the tangent passes through."""
    x = jnp.ones((8,))
    f = jax.jit(lambda v: jax.jit(lambda y: y)(v))
    lin = linearize_program(describe_program(f, x))
    jaxpr = jax.make_jaxpr(lambda p, t: jax.linearize(f, p)[1](t))(x, x).jaxpr
    assert signature(lin.applied) == jaxpr_signature(jaxpr)
    assert _jit_arities(lin.applied) == _jaxpr_jit_arities(jaxpr) == ((1, 0, ()), (1, 1, ((1, 1, ()),)))
    assert explain_program(lin.applied).accepted


@checks("AD-3", "AD-4", "AD-5", "AD-8")
@pytest.mark.parametrize("which", ["unused_tangent_input", "unused_residuals"])
def test_grad_prunes_what_the_loss_does_not_use_from_an_inner_jit(which):
    """The loss uses one output of an inner jit: JAX's dead-code elimination drops the
    other output, the residuals only its tangent reads and the inputs nothing else needs,
    in the primal jit and in the transposed one."""
    x = jnp.ones((8,))
    if which == "unused_tangent_input":
        inner = jax.jit(lambda a, b, c: (a + a, b * jnp.sin(c)))
        args, argnums = (x, x, x), (0, 1, 2)
    else:
        inner = jax.jit(lambda v: (jnp.sin(v) * v, v * 2))
        args, argnums = (x,), 0
    loss = jax.jit(lambda *a: jnp.sum(inner(*a)[1]))
    rewritten = grad_program(describe_program(loss, *args), argnums)
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums))(*args).jaxpr
    assert signature(rewritten) == jaxpr_signature(jaxpr)
    assert _jit_arities(rewritten) == _jaxpr_jit_arities(jaxpr)
    assert explain_program(rewritten).accepted


def _benchmark_step():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "bench_program.py"
    spec = importlib.util.spec_from_file_location("bench_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.step


@checks("AD-10", "AD-11", "AD-12")
def test_the_benchmark_layer_under_grad_is_jaxs():
    """The benchmark's layer (a constraint, an elementwise op, a shard_map'd block summing over 'model'
    and casting back to varying, a constraint) under grad: with check_vma JAX stages the
    sum of a varying value as psum_invariant, transposed to pvary and back; the spec's
    rewrite holds the same equations, and the benchmark's hand-written step (which
    describes the block so) is answered."""
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    both = jax.sharding.NamedSharding(mesh, jax.P("data", "model"))

    def block(v):
        return jax.lax.pcast(jax.lax.psum(jnp.sin(v), "model"), "model", to="varying")

    mapped = jax.shard_map(block, mesh=mesh, in_specs=jax.P("data", "model"),
                           out_specs=jax.P("data", "model"))

    def layer(h, w):
        # (sin for the step's tanh: the spec linearizes tanh as an opaque primitive)
        c = jnp.sin(jax.lax.with_sharding_constraint(h * w, both))
        return jax.lax.with_sharding_constraint(mapped(c), jax.sharding.NamedSharding(
            mesh, jax.P("data")))

    loss = jax.jit(lambda h, w: jnp.sum(layer(layer(h, w), w)))
    h = jax.device_put(jnp.ones((128, 256)), jax.sharding.NamedSharding(mesh, jax.P("data")))
    w = jax.device_put(jnp.ones((128, 256)), jax.sharding.NamedSharding(
        mesh, jax.P(None, "model")))
    program = describe_program(loss, h, w)
    rewritten = grad_program(program)
    jaxpr = jax.make_jaxpr(jax.grad(loss))(h, w).jaxpr
    assert signature(rewritten) == jaxpr_signature(jaxpr)
    assert explain_program(rewritten).accepted
    (described,) = {tuple(e.primitive for e in eq.body.equations)
                    for eq in program.equations if eq.kind == "shard_map"}
    assert described == ("sin", "psum_invariant", "pvary")
    step = _benchmark_step()(Mesh.iota((2, 4), ("data", "model")), 8)
    inner = [eq for eq in step.equations if eq.kind == "jit"][0].body
    blocks = {tuple(e.primitive for e in eq.body.equations)
              for eq in inner.equations if eq.kind == "shard_map"}
    assert blocks == {described}
    assert explain_program(grad_program(step)).accepted


@checks("AD-13")
@pytest.mark.parametrize("after", [None, "sin"])
def test_a_cotangent_reaching_a_shard_maps_result_keeps_its_automatic_split(after):
    """Found by the shard_map AD deep run (seed 71): a shard_map making only 'x' manual on
    an all-Explicit mesh returns a value split over 'y', which its body's types carry; a
    numpy cotangent, split nowhere, reaching that result is refused by JAX while
    transposing (ValueError); through sin first it takes the residual's split."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    a = jax.device_put(jnp.ones((8,)), jax.NamedSharding(mesh, jax.P("y")))
    mapped = jax.shard_map(jnp.sin, mesh=mesh, in_specs=jax.P(), out_specs=jax.P(None),
                           axis_names={"x"}, check_vma=False)
    f = jax.jit(mapped if after is None else lambda v: jnp.sin(mapped(v)))
    ct = jnp.ones((8,))   # typed over no mesh, as the numpy array vjp_program assumes
    real = jax.jit(lambda p, c: jax.vjp(f, p)[1](c))
    program = describe_program(f, a)
    if after is None:
        with pytest.raises(ValueError):
            jax.make_jaxpr(real)(a, ct)
        with pytest.raises(Rejection) as refused:
            vjp_program(program)
        assert refused.value.rule == "AD-13" and isinstance(refused.value, ValueError)
    else:
        jaxpr = jax.make_jaxpr(real)(a, ct).jaxpr
        rewritten = vjp_program(program).applied
        assert signature(rewritten) == jaxpr_signature(jaxpr.eqns[0].params["jaxpr"].jaxpr)
        assert explain_program(rewritten).accepted


@checks("SMAP-23")
def test_a_scatter_along_a_dimension_split_over_a_non_manual_explicit_axis():
    """Found by the shard_map AD deep run (seed 81): over an all-Explicit mesh a shard_map
    making only 'y' manual psum_scatters a value its type splits over 'x': JAX fails an
    assertion lowering the program and its jvp, as SMAP-23 refuses (AssertionError)."""
    from shardlaw.spec import AxisType
    mesh = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    case = MapCase(mesh, Value.placed((8, 8), NamedSharding(mesh, P(None, "x"))),
                   P(), P("y"), frozenset({"y"}), True, (Op("psum_scatter", ("y",), 1),))
    assert compare_map_ad(MapAdCase(case, "jvp")) == []


# The residuals JAX 0.10.2's linearization stores for each primitive (how many, in which
# order, which are the primal's own operand or result and so forwarded, and the reshard
# of a literal one over a typed mesh), held to jax.linearize and jax.vjp of each.
NONLINEAR_FUNCTIONS = {
    "tanh": jnp.tanh, "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False), "logistic": jax.nn.sigmoid,
    "exp": jnp.exp, "log": jnp.log, "cos": jnp.cos, "cube": lambda x: x ** 3,
    "sqrt": jnp.sqrt, "dot_general": lambda x: x @ x, "quotient": lambda x: x / (x + 1.0),
    "exp_then_log": lambda x: jnp.log(jnp.exp(x)),
    "summed_tanh": lambda x: jnp.sum(jnp.tanh(x)),
}


@pytest.mark.parametrize("name", sorted(NONLINEAR_FUNCTIONS))
def test_each_primitives_residuals_are_jaxs(name):
    import numpy as np
    from shardlaw.properties.program_ad_harness import compare_rewrite, run_function

    explicit = jax.make_mesh((2, 4), ("x", "y"), (jax.sharding.AxisType.Explicit,) * 2)
    jitted = jax.jit(NONLINEAR_FUNCTIONS[name])
    plain = np.full((8, 8), 0.5, np.float32)
    for x in (plain, jax.device_put(plain, jax.sharding.NamedSharding(
            explicit, jax.sharding.PartitionSpec("x")))):
        cases = [(jax.jit(lambda p, t: jax.linearize(jitted, p)[1](t)),
                  lambda: linearize_program(describe_program(jitted, x)).applied)]
        if not name.startswith("summed"):
            cases.append((jax.jit(lambda p, c: jax.vjp(jitted, p)[1](c)),
                          lambda: vjp_program(describe_program(jitted, x)).applied))
        for transformed, rewritten in cases:
            problems = compare_rewrite(rewritten, run_function(transformed, (x, plain)))
            assert not problems, problems


@checks("AD-17")
@pytest.mark.parametrize("transform", ["jvp", "linearize", "vjp", "jvp_of_grad"])
def test_a_tangent_or_cotangent_passed_typed_otherwise_than_its_primal(transform):
    """Tangents and cotangents passed as jax.Arrays: placed as their primals are, they are
    taken; replicated where the primal is typed split over Explicit axes, linearize's and
    vjp's functions refuse them (AD-17, ValueError at trace) while jvp, which types its
    tangents as its primals, takes them; on an Auto mesh any placement is taken."""
    explicit = Mesh.iota((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    for mesh in (explicit, MESH):
        case = Case((Value.placed((8, 8), NamedSharding(mesh, P("x"))),),
                    Recipe((Step("sin", 0),), (1,)))
        for passed in ("primal", "replicated"):
            ad = AdCase(case, transform, passed)
            _agree(ad)
            refused = mesh is explicit and passed == "replicated" and transform in (
                "linearize", "vjp")
            with pytest.raises(Rejection) if refused else _nothing():
                rewrite(ad)
    if transform in ("linearize", "vjp"):
        assert all(ad_hit_counts().get("AD-17", (0, 0)))


def _nothing():
    import contextlib
    return contextlib.nullcontext()


@checks("AD-15", "AD-18")
@pytest.mark.parametrize("scaled", ["right", "left", "quotient", "product", "unreduced none"])
def test_a_literal_scaling_an_unreduced_cotangent(scaled):
    """The cotangent of a value typed reduced is unreduced: scaled by a literal while
    transposing, JAX refuses (the literal is reduced over no axis: ShardingTypeError,
    AD-18), and divided by one (div has no unreduced rule: NotImplementedError, AD-15); a
    product of two such values, or a literal scaling a cotangent not unreduced, is taken."""
    import numpy as np
    from shardlaw.properties.program_ad_harness import compare_rewrite, run_function

    mesh = jax.make_mesh((2, 4), ("x", "y"), (jax.sharding.AxisType.Explicit,) * 2)
    split = jax.sharding.PartitionSpec(None, None, reduced={"y"})
    if scaled == "unreduced none":
        split = jax.sharding.PartitionSpec("x")
    data = jax.device_put(np.ones((8, 8), np.float32), jax.sharding.NamedSharding(mesh, split))
    body = {"right": lambda v: v * 2.0, "left": lambda v: 2.0 * v,
            "quotient": lambda v: v / 2.0, "product": lambda v: v * v,
            "unreduced none": lambda v: v * 2.0}[scaled]
    from shardlaw.spec.core.rules import tracing

    loss = jax.jit(lambda v: jnp.sum(body(v)))
    grad = jax.jit(jax.grad(loss))
    problems = compare_rewrite(lambda: grad_program(describe_program(loss, data)),
                               run_function(grad, (data,)))
    assert not problems, problems
    if scaled in ("right", "left", "quotient"):
        rule_id = "AD-18" if scaled != "quotient" else "AD-15"
        with pytest.raises(Rejection) as refused:
            grad_program(describe_program(loss, data))
        assert refused.value.failure.rule == rule_id
    elif scaled == "unreduced none":
        with tracing() as applied:
            grad_program(describe_program(loss, data))
        assert "AD-18" in applied


@checks("AD-13", "AD-14")
def test_a_sum_of_cotangents_refused_before_a_later_cotangents_type():
    """Two cotangents typed apart reach a value typed over no mesh (AD-14) before the
    transposed constraint hands an input a cotangent not typed as its own (AD-13): JAX
    sums each cotangent as it arrives, so it raises AD-14's AssertionError first."""
    import numpy as np
    from shardlaw.properties.program_ad_harness import compare_rewrite, run_function

    types = jax.sharding.AxisType
    spec, named = jax.sharding.PartitionSpec, jax.sharding.NamedSharding
    explicit = jax.make_mesh((2, 4), ("x", "y"), (types.Explicit,) * 2)
    mixed = jax.make_mesh((2, 4), ("x", "y"), (types.Explicit, types.Auto))

    def f(x0, x1):
        a = jnp.sin(x0)
        b = jax.lax.with_sharding_constraint(jax.device_put(x1, named(mixed, spec())),
                                             named(mixed, spec()))
        return (jax.device_put(a, named(explicit, spec("x"))),
                jax.device_put(a, named(explicit, spec(None, "y"))), b)

    jitted = jax.jit(f)
    x0 = np.ones((8, 8), np.float32)
    x1 = jax.device_put(x0, named(mixed, spec("x")))
    cts = tuple(jax.device_put(x0, s) for s in (named(explicit, spec("x")), named(
        explicit, spec(None, "y")), named(mixed, spec())))
    pulled = jax.jit(lambda p0, p1, *c: jax.vjp(jitted, p0, p1)[1](c))
    values = tuple(Value.placed((8, 8), from_jax(c.sharding)) for c in cts)
    problems = compare_rewrite(
        lambda: vjp_program(describe_program(jitted, x0, x1), values).applied,
        run_function(pulled, (x0, x1) + cts))
    assert not problems, problems
    with pytest.raises(Rejection) as refused:
        vjp_program(describe_program(jitted, x0, x1), values)
    assert refused.value.failure.rule == "AD-14"


@checks("AD-18")
def test_a_residual_not_reduced_times_an_unreduced_cotangent():
    """Deep run seed 1313: a value resharded to a reduced type inside nested jits after a
    sin; the sin's transpose multiplies the reduced value's cotangent, unreduced, by the
    cosine residual, which is not reduced: JAX refuses (ShardingTypeError), AD-18, before
    the neg's transpose that AD-15 would refuse."""
    one = Mesh.iota((1,), ("x",), (AxisType.Explicit,))
    inner = Recipe((Step("sin", 0), Step("reshard", 0, NamedSharding(
        one, P(None, reduced={"x"})))), (2,))
    middle = Recipe((Step("sin", 0), Step("jit", 0, body=inner,
                                          in_sharding=NamedSharding(one, P(None)))), (2,))
    ad = AdCase(Case((Value.numpy((8,)),), Recipe((
        Step("neg", 0), Step("jit", 0, body=middle),
        Step("constraint", 0, NamedSharding(one, P(None))), Step("sin", 1)), (4, 2)),
        (UNSPECIFIED, UNSPECIFIED), keep_unused=True), "grad")
    _agree(ad)
    with pytest.raises(Rejection) as refused:
        rewrite(ad)
    assert refused.value.failure.rule == "AD-18"

"""The rules the transformed-call path carried, on the live program path (issue 31).

AD-6, AD-7 (partial evaluation's known and unknown jits) and AD-8 (dead-code elimination)
are registered on the program rewrites of :mod:`shardlaw.spec.program.partial_eval`, and
SMAP-15 (the HLO sharding that marks a shard_map's body manual when lowered without Shardy)
on the shard_map walk of :mod:`shardlaw.spec.program.shardmap`: a program's trace records
them. Each is held to real JAX 0.10.2 here on both of its sides. The program vectors
migrated from the retired transformed-call vectors (``vectors/programs-migrated/``) replay
under the spec, and in JAX where the program-vector replayer builds them; the retired
names say what replaced them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings

import shardlaw.spec as S
from shardlaw.properties import hits
from shardlaw.properties.autodiff_harness import (
    NAME, GradCase, OutputPlan, grad_cases, rewritten, trace,
)
from shardlaw.properties.program_vectors_gen import NotReplayable, replay_program_in_jax
from shardlaw.properties.registry import checks
from shardlaw.properties.suites import examples
from shardlaw.spec import Mesh, P, tracing
from shardlaw.spec.bridge.autodiff import equation_from_jax, jit_body_of, jit_equations
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.bridge.shardmap import manual_sharding_in_jax
from shardlaw.spec.program.partial_eval import dce_program
from shardlaw.spec.program.shardmap import ShardMapDecision
from shardlaw.spec.vectors.program_vectors import load_program, program_differences

MIGRATED = sorted((Path(__file__).resolve().parent.parent / "vectors" / "programs-migrated")
                  .glob("*/*.json"))

# Where the properties below record the outcomes they saw against JAX (properties.hits)
SOURCE = "program_rewrites"


# --------------------------------------------------------------------------- AD-6 .. AD-8

# an input returned twice, once sharded and once unsharded (partial evaluation forwards the
# unsharded one): the staged known jit has two outputs, not three (a CI run drew it)
_TWICE = GradCase((2, 4), ("data", "model"), True, (None, None), (None,),
                  (OutputPlan("forward", (0,)), OutputPlan("forward", (0,)),
                   OutputPlan("product", (0,))),
                  ((None, None), None, (None, None)), (False,), (False,), "partial_eval",
                  (False, False, False), False, (), ())
# each outcome the coverage test asks for, whatever the draws: an unknown jit staged (the
# product of a differentiated input; _TWICE stages none), every output kept in the known
# jit, a pruned jit staged (one output used) and gone (none used)
_UNKNOWN = dataclasses.replace(_TWICE, differentiated=(True,))
_ALL_KEPT = dataclasses.replace(_TWICE, outputs=(OutputPlan("product", (0,)),),
                                out_specs=((None, None),), used=(True,))
_PRUNED = dataclasses.replace(_TWICE, transformation="dce", used=(False, False, True))
_GONE = dataclasses.replace(_PRUNED, used=(False, False, False))


@checks("AD-6", "AD-7", "AD-8")
@settings(max_examples=examples(25), deadline=None)
@given(grad_cases(("partial_eval", "dce")))
@example(case=_TWICE)
@example(case=_UNKNOWN)
@example(case=_ALL_KEPT)
@example(case=_PRUNED)
@example(case=_GONE)
def test_the_program_rewrites_stage_what_real_jax_stages(case):
    """dce_program and partial_eval_program of the jitted function's real body (sines,
    products, matmuls, sums, constants; Auto and Explicit meshes; donation) against
    pe.dce_jaxpr and pe.partial_eval_jaxpr_nounits of JAX 0.10.2; the rewrites' trace
    records their rules."""
    eqn, transformed = trace(case)
    found = [equation_from_jax(e) for jaxpr in transformed for e in jit_equations(jaxpr, NAME)]
    with tracing() as fired:
        staged = rewritten(case)
    assert found == staged, case
    primal = equation_from_jax(eqn)
    if case.transformation == "dce":
        assert "AD-8" in fired
        hits.record(SOURCE, "AD-8", refused=not found)   # the jit staged, or gone
        return
    assert {"AD-6", "AD-7"} <= set(fired)
    # AD-6: outputs left out of the known jit (unknown, or an input forwarded unsharded),
    # or every output kept; AD-7: an unknown jit staged, or none
    body = jit_body_of(eqn, case.differentiated, "partial_eval")
    hits.record(SOURCE, "AD-6", refused=len(found[0].out_shardings) - body.stored_residuals
                == len(primal.out_shardings))
    hits.record(SOURCE, "AD-7", refused=len(found) < 2)


def _dce_cases(count: int = 40):
    """Small jitted functions (inputs, each output forwarded, a sum of inputs or a
    constant; shardings and donation), each with the outputs a caller uses."""
    import random
    rng = random.Random(23)
    for _ in range(count):
        inputs = rng.randint(1, 3)
        outputs = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["forward", "sum", "sum", "constant"])
            if kind == "forward":
                outputs.append(("forward", rng.randrange(inputs)))
            elif kind == "sum":
                outputs.append(("sum", tuple(sorted(rng.sample(range(inputs),
                                                              rng.randint(1, inputs))))))
            else:
                outputs.append(("constant", None))
        ins = tuple(rng.choice([None, "x", "y"]) for _ in range(inputs))
        outs = tuple(rng.choice([None, None, "x"]) for _ in outputs)
        donated = tuple(rng.random() < 0.4 for _ in range(inputs))
        used = tuple(rng.random() < 0.6 for _ in outputs)
        yield inputs, tuple(outputs), ins, outs, donated, used


def _jitted(inputs, outputs, ins, outs, donated):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)

    def sharding(axis):
        return None if axis is None else jax.NamedSharding(mesh, jax.P(axis))

    def body(*xs):
        out = []
        for kind, what in outputs:
            if kind == "forward":
                out.append(xs[what])
            elif kind == "sum":
                total = xs[what[0]]
                for i in what[1:]:
                    total = total + xs[i]
                out.append(total * 2)
            else:
                out.append(jnp.zeros((8,), jnp.float32))
        return tuple(out)

    return jax.jit(body, in_shardings=tuple(map(sharding, ins)),
                   out_shardings=tuple(map(sharding, outs)),
                   donate_argnums=tuple(i for i, d in enumerate(donated) if d))


def _from_jax(shardings) -> tuple:
    return tuple(S.from_jax(s) if isinstance(s, jax.NamedSharding) else S.UNSPECIFIED
                 for s in shardings)


def test_dce_program_prunes_a_jit_as_real_jax_does():
    """AD-8 on dce_program of the jit's program against pe.dce_jaxpr of real JAX 0.10.2,
    function for function: the pruned jit's shardings and donation, or none."""
    from jax._src.interpreters import partial_eval as pe
    gone = kept = 0
    for inputs, outputs, ins, outs, donated, used in _dce_cases():
        inner = _jitted(inputs, outputs, ins, outs, donated)
        args = [jax.ShapeDtypeStruct((8,), jnp.float32)] * inputs
        closed = jax.make_jaxpr(lambda *xs: inner(*xs))(*args)
        pruned_jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, list(used))
        found = [e for e in pruned_jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
        with tracing() as fired:
            pruned, _ = dce_program(describe_program(inner, *args), used)
        assert "AD-8" in fired
        if not found:
            assert pruned is None, (outputs, used)
            gone += 1
            continue
        params = found[0].params
        assert pruned is not None, (outputs, used)
        assert pruned.in_shardings == _from_jax(params["in_shardings"])
        assert pruned.out_shardings == _from_jax(params["out_shardings"])
        assert pruned.donated == tuple(params["donated_invars"])
        kept += 1
    assert gone and kept


def test_grad_of_a_program_records_ad_8_for_the_inner_jit_it_prunes():
    """The AD rewrites prune an inner jit with dce_program: grad's trace records AD-8."""
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = jax.NamedSharding(mesh, jax.P("x"))
    inner = jax.jit(lambda a, b: (jnp.sin(a) * b, b * 2.0), in_shardings=(sharding, sharding))

    def outer(a, b):
        return inner(a, b)[0].sum()

    x = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharding)
    program = describe_program(jax.jit(outer), x, x)
    with tracing() as fired:
        S.grad_program(program)
    assert "AD-8" in fired


# --------------------------------------------------------------------------- SMAP-15

def _shard_map_program(mesh, manual, rank):
    """describe_program of jit(shard_map(identity)) over ``manual`` axes of ``mesh``, a
    replicated operand of ``rank`` dimensions."""
    jmesh = S.to_jax(mesh)
    mapped = jax.shard_map(lambda a: a, mesh=jmesh, in_specs=jax.P(), out_specs=jax.P(),
                           axis_names=set(manual), check_vma=False)
    return describe_program(jax.jit(mapped), np.ones((2,) * rank, np.float32))


@checks("SMAP-15")
@pytest.mark.parametrize("shape, names, manual, rank", [
    ((2, 4), ("x", "y"), {"x", "y"}, 1),
    ((2, 4), ("x", "y"), {"y"}, 2),
    ((2, 2, 2), ("z", "y", "x"), {"y", "x"}, 1),    # manual devices ordered by name
    ((1, 8), ("x", "y"), {"x"}, 2),                  # one device: no sharding ops
    ((8, 1), ("x", "one"), {"one"}, 0),
])
def test_a_shard_map_program_decides_the_manual_sharding_jax_lowers(shape, names, manual,
                                                                    rank):
    mesh = Mesh.iota(shape, names)
    verdict = S.explain_program(_shard_map_program(mesh, manual, rank))
    assert verdict.accepted, verdict.message
    assert "SMAP-15" in verdict.trace
    (decision,) = [r for _, r in verdict.decided if isinstance(r, ShardMapDecision)]
    theirs = manual_sharding_in_jax(mesh, frozenset(manual), rank)
    assert decision.manual_shardings == (theirs,), (decision.manual_shardings, theirs)
    hits.record(SOURCE, "SMAP-15", refused=theirs is None)   # a sharding, or none


def test_every_rule_the_old_path_carried_was_seen_on_both_sides_of_the_program_path():
    """Runs after the tests above: each outcome of AD-6 (outputs left out of the known jit,
    or none), AD-7 (an unknown jit staged, or none), AD-8 (the pruned jit staged, or gone)
    and SMAP-15 (a manual sharding, or none), seen on the program path against JAX."""
    counts = hits.counts(SOURCE)
    missing = [(rule_id, counts.get(rule_id, (0, 0)))
               for rule_id in ("AD-6", "AD-7", "AD-8", "SMAP-15")
               if not all(counts.get(rule_id, (0, 0)))]
    assert not missing, f"rule outcomes not seen against JAX: {missing}"


# --------------------------------------------------------------------------- the vectors

def _in_jax(vector) -> list[str] | None:
    """The differences of a vector replayed in real JAX (None: the program-vector replayer
    does not build it: asked until tracing, transformed by the spec first, or a primitive
    it does not build, such as a collective)."""
    try:
        return replay_program_in_jax(vector)
    except NotReplayable:
        return None


@pytest.mark.parametrize("path", MIGRATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_migrated_vector_replays_under_the_spec_and_where_built_in_jax(path):
    vector = load_program(path.read_text(encoding="utf-8"))
    assert vector.expect is not None
    assert program_differences(vector) == []
    assert _in_jax(vector) in ([], None)


def test_the_migrated_vectors_the_replayer_builds_agree_with_jax():
    """The replayer builds 32 of the 133 (the others are asked until tracing, transformed
    by the spec, or hold a collective); each of those agrees with real JAX."""
    replayed = [p for p in MIGRATED if _in_jax(load_program(p.read_text("utf-8"))) == []]
    assert len(replayed) >= 32


def test_the_migrated_set_keeps_every_old_vector_with_a_program_form():
    """133 of the 217 transformed-call vectors had a program form (docs/programs.rst lists
    the 84 without one and why)."""
    assert len(MIGRATED) == 133
    families = {p.parent.name for p in MIGRATED}
    assert families == {"autodiff", "batching", "constraint", "shardmap"}


# --------------------------------------------------------------------------- retired names

@pytest.mark.parametrize("name", ["explain_transformed", "TransformedCall", "load_transformed",
                                  "pruned_equation", "known_equation"])
def test_a_retired_name_says_what_replaced_it(name):
    with pytest.raises(AttributeError, match="retired with the transformed-call path"):
        getattr(S, name)
    from shardlaw.spec.transforms import autodiff
    if name in autodiff.RETIRED:
        with pytest.raises(AttributeError, match="partial_eval"):
            getattr(autodiff, name)

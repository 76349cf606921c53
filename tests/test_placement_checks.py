"""Refusals that depend on the compiler's placement, decided from the predicted placement
(issue 33, item 3; ``spec/program/placement_checks.py``), held to JAX 0.10.2 on 8 CPU
devices, both sides: the verdict against ``jax.jit``'s trace, lower, compile and call, and
the placement the spec predicts against the one the compiled executable reports.

* PROP-8: a result a constraint or an inner jit's out sharding places over a mesh of
  another shape than the module's main one (notes/jax-facts.md 20c). Where JAX reads the
  compiler's placement back over the result's mesh and it does not divide there, JAX
  raises IndivisibleError after compiling (OUT-2).
* PROG-11: a donated input left to the compiler, aliased by its whole shape (jax#25346).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import AxisType, NamedSharding as NS, PartitionSpec as P

from shardlaw.properties.program_harness import (
    JaxOutcome, outcome_problems, stage_in_jax, with_choices,
)
from shardlaw.properties.registry import checks
from shardlaw.spec import UNSPECIFIED, explain_program
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.placement.equivalence import hlo_equal
from shardlaw.spec.program.lowering import inside_shardings, live_parts
from shardlaw.spec.program.placement_checks import (
    compiler_placed_inputs, crossmesh_choices, main_mesh,
)
from shardlaw.spec.program.propagation import Undetermined

wsc = jax.lax.with_sharding_constraint


def _mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


def _meshes():
    return {"wide": _mesh((2, 4), ("x", "y")), "tall": _mesh((4, 2), ("a", "b")),
            "cube": _mesh((2, 2, 2), ("p", "q", "r")), "line": _mesh((8,), ("d",)),
            "flat": _mesh((4, 2, 1), ("a", "b", "c"))}


def _on(mesh, spec=P()):
    return jax.device_put(np.ones((8, 8), np.float32), NS(mesh, spec))


# name -> (jitted, args), built from the meshes; "refused": JAX raises IndivisibleError
CROSS = {
    # the input's mesh is the main one: 'a' is 'x' and half of 'y', so 'x' is kept
    "tall-a-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("a")))),
                                   (_on(m["wide"]),)),
    "tall-a-b-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("a", "b")))),
                                     (_on(m["wide"], P("x", "y")),)),
    "tall-b-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("b")))),
                                   (_on(m["wide"]),)),
    "tall-ab-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P(("a", "b"))))),
                                    (_on(m["wide"]),)),
    "wide-y-over-tall": lambda m: (jax.jit(lambda x: wsc(x * 2, NS(m["wide"], P("y")))),
                                   (_on(m["tall"]),)),
    "wide-x-over-tall": lambda m: (jax.jit(lambda x: wsc(x * 2, NS(m["wide"], P(None, "x")))),
                                   (_on(m["tall"]),)),
    # a mesh that refines the other is the main one: the placement is kept
    "cube-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["cube"], P(("r", "p"), "q")))),
                                 (_on(m["wide"]),)),
    "tall-over-line": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("b", "a")))),
                                 (_on(m["line"], P("d")),)),
    "line-over-wide": lambda m: (jax.jit(lambda x: wsc(x, NS(m["line"], P(None, "d")))),
                                 (_on(m["wide"]),)),
    # three meshes: the one of most axes is the main one, wherever it comes
    "tall-beside-cube": lambda m: (jax.jit(lambda x: (wsc(x * 2, NS(m["tall"], P("a"))),
                                                      wsc(x * 3, NS(m["cube"], P("p"))))),
                                   (_on(m["wide"]),)),
    "wide-then-tall-over-line": lambda m: (jax.jit(lambda x: (
        wsc(x, NS(m["wide"], P("x"))), wsc(x * 2, NS(m["tall"], P("a"))))), (_on(m["line"]),)),
    # a size-1 axis counts for nothing: 4x2x1 is no finer than 2x4
    "flat-a-over-wide": lambda m: (jax.jit(lambda x: wsc(x * 2, NS(m["flat"], P("a")))),
                                   (_on(m["wide"]),)),
    # no input on a mesh: the first sharding of the module's gives the main mesh
    "numpy-wide-then-tall": lambda m: (jax.jit(lambda x: (
        wsc(x * 2, NS(m["wide"], P("x"))), wsc(x, NS(m["tall"], P("a"))))),
        (np.ones((8, 8), np.float32),)),
    "numpy-tall-then-wide": lambda m: (jax.jit(lambda x: (
        wsc(x, NS(m["tall"], P("a"))), wsc(x * 2, NS(m["wide"], P("y"))))),
        (np.ones((8, 8), np.float32),)),
    "out-sharding-first": lambda m: (jax.jit(
        lambda x: (x * 2, wsc(x * 3, NS(m["wide"], P("y")))),
        out_shardings=(NS(m["tall"], P("a")), None)), (np.ones((8, 8), np.float32),)),
    # an inner jit's out sharding places its result as a constraint does
    "inner-jit-out": lambda m: (jax.jit(lambda x: jax.jit(
        lambda y: y * 2, out_shardings=NS(m["tall"], P("a", "b")))(x)), (_on(m["wide"]),)),
    # another result returned beside it: the same refusal
    "beside-another": lambda m: (jax.jit(lambda x: (x * 3, wsc(x, NS(m["tall"], P("a"))))),
                                 (_on(m["wide"]),)),
    "rank-3": lambda m: (jax.jit(lambda x: wsc(x.reshape(4, 2, 8),
                                               NS(m["tall"], P("a", "b")))),
                         (_on(m["wide"]),)),
}
REFUSED = {"tall-a-over-wide", "tall-a-b-over-wide", "flat-a-over-wide",
           "wide-then-tall-over-line", "beside-another", "rank-3"}
# the result a constraint does not place itself: left open, with the reason
OPEN = {
    "computed-after": lambda m: (jax.jit(lambda x: jnp.sin(wsc(x, NS(m["tall"], P("a"))))),
                                 (_on(m["wide"]),)),
    "reduced-after": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("a"))).sum(0)),
                                (_on(m["wide"]),)),
    "unconstrained": lambda m: (jax.jit(lambda x: wsc(x, NS(m["tall"], P("a", P.UNCONSTRAINED)))),
                                (_on(m["wide"]),)),
}


def _module_shardings(program):
    """The shardings of the device assignment in the module's order: the kept inputs', the
    out shardings, then the body's."""
    used = live_parts(program).inputs
    given = program.in_shardings or (UNSPECIFIED,) * len(program.inputs)
    ins = [g if g is not UNSPECIFIED else v.sharding if v.committed else UNSPECIFIED
           for v, g, u in zip(program.inputs, given, used) if u]
    return [*ins, *program.out_shardings, *(s.sharding for s in inside_shardings(program))]


def _both_sides(jitted, args):
    outcome = JaxOutcome()
    stage_in_jax(jitted, args, outcome)
    program = describe_program(jitted, *args)
    return outcome, program, explain_program(program)


@checks("PROP-8", "OUT-2")
@pytest.mark.parametrize("name", sorted(CROSS))
def test_a_result_placed_over_a_mesh_of_another_shape_is_decided_as_jax_decides_it(name):
    """The verdict is JAX's (a refusal after compiling with IndivisibleError, or the results'
    shardings, types and committedness), and the placement PROP-8 predicts is the one the
    executable reports, HLO for HLO."""
    outcome, program, verdict = _both_sides(*CROSS[name](_meshes()))
    assert (type(outcome.error).__name__ if outcome.error else None) == (
        "IndivisibleError" if name in REFUSED else None), outcome.error
    assert not outcome_problems(verdict, outcome)
    if not verdict.accepted:   # (the recovery of the results is located at the first)
        assert (verdict.rule, verdict.stage, verdict.jax_error) == (
            "OUT-2", "compile", "IndivisibleError")
    shardings = _module_shardings(program)
    assert main_mesh(shardings) is not None
    predicted = crossmesh_choices(program, shardings)
    placed = [k for k, hlo in enumerate(predicted) if hlo is not None]
    assert placed, "no result placed over another mesh"
    for k in placed:
        assert hlo_equal(predicted[k], outcome.compiler[k]), (k, predicted[k],
                                                              outcome.compiler[k])


@checks("PROP-8")
@pytest.mark.parametrize("name", sorted(OPEN))
def test_a_result_computed_from_a_placement_over_another_mesh_is_left_open(name):
    """Not a constraint's own result: propagation over several meshes is not predicted, and
    the verdict says why rather than guess (JAX refuses some of them after compiling)."""
    outcome, program, verdict = _both_sides(*OPEN[name](_meshes()))
    assert verdict.accepted and verdict.out_shardings == (UNSPECIFIED,)
    assert [p for p, _ in verdict.undetermined] == ["result[0]"]
    assert crossmesh_choices(program, _module_shardings(program)) == (None,)
    # with the compiler's choice given, the verdict is JAX's
    assert not outcome_problems(explain_program(with_choices(program, outcome)), outcome)


def test_one_mesh_is_no_program_over_several():
    mesh = _meshes()["wide"]
    program = describe_program(jax.jit(lambda x: wsc(x, NS(mesh, P("y")))), _on(mesh))
    assert main_mesh(_module_shardings(program)) is None


# --------------------------------------------------------------------------- PROG-11

def _donating(out, *, fn=None, in_shardings=None, committed=False):
    """A jit donating ``m`` (uncommitted, so left to the compiler, unless ``committed`` or
    given ``in_shardings``) beside ``x`` split over 'x', returning ``fn(m, x)`` under the
    out shardings ``out`` (specs over the mesh; None: left to the compiler)."""
    mesh = _mesh((2, 4), ("x", "y"))
    x = jax.device_put(np.ones((16, 16), np.float32), NS(mesh, P("x")))
    m = jnp.ones((16, 16), np.float32)
    if committed:
        m = jax.device_put(m, NS(mesh, P()))
    options = {"out_shardings": tuple(None if s is None else NS(mesh, s) for s in out)}
    if in_shardings is not None:
        options["in_shardings"] = tuple(NS(mesh, s) for s in in_shardings)
    fn = fn or (lambda m, x: (jnp.sin(x), m + x))
    return fn, options, (m, x)


DONATING = {
    # refused: aliased to a whole result, then split by the compiler
    "split-by-a-sum": dict(out=(P(), P("x"))),
    "split-by-its-result": dict(out=(P(), P(None, "y")), fn=lambda m, x: (jnp.sin(x), m * 2.0)),
    "aliased-to-the-second": dict(out=(P("y"), P()), fn=lambda m, x: (m * 2.0, jnp.sin(x))),
    "aliased-to-a-wider-split": dict(out=(P("x"), P("y")), fn=lambda m, x: (
        jnp.concatenate([x, x]), m * 3.0)),
    "other-result-left-open": dict(out=(P(), None)),
    # accepted: the compiler leaves it whole, it is given a sharding, or none is aliased
    "left-whole": dict(out=(P(), P()), fn=lambda m, x: (jnp.sin(x), m * 2.0)),
    "given-whole": dict(out=(P(), P("x")), in_shardings=(P(), P("x"))),
    "given-split": dict(out=(P(), P("x")), in_shardings=(P("x"), P("x"))),
    "committed": dict(out=(P(), P("x")), committed=True),
    "no-result-given": dict(out=(None, None)),
}
DONATION_REFUSED = {"split-by-a-sum", "split-by-its-result", "aliased-to-the-second",
                    "aliased-to-a-wider-split", "other-result-left-open"}


@checks("PROG-11")
@pytest.mark.parametrize("name", sorted(DONATING))
def test_a_donated_input_left_to_the_compiler_is_decided_as_jax_decides_it(name):
    """Refused when compiling (JaxRuntimeError, XLA's "Expected aliased input") exactly where
    JAX refuses; and the split the spec predicts for the donated input is the one the
    compiler gives it (read from the same program compiled without donating)."""
    fn, options, args = _donating(**DONATING[name])
    jitted = jax.jit(fn, donate_argnums=(0,), **options)
    outcome, program, verdict = _both_sides(jitted, args)
    if name in DONATION_REFUSED:
        assert outcome.stage == "compile" and "Expected aliased input 0" in str(outcome.error)
        assert (verdict.rule, verdict.stage, verdict.path) == ("PROG-11", "compile", "args[0]")
        assert not outcome_problems(verdict, outcome)
    else:   # (results left open for the uncommitted input, PROP-1: given as compiled)
        assert outcome.error is None, outcome.error
        assert not outcome_problems(explain_program(with_choices(program, outcome)), outcome)
    placed = compiler_placed_inputs(program)
    if 0 not in placed:   # given a sharding or committed: not the compiler's
        assert name in {"given-whole", "given-split", "committed"}
        return
    assert not isinstance(placed[0], Undetermined), placed[0]
    compiled = jax.jit(fn, **options).trace(*args).lower().compile()
    mesh = args[1].sharding.mesh
    spec = P(*(None if not a else a[0] if len(a) == 1 else a for a in placed[0]))
    assert compiled.input_shardings[0][0].is_equivalent_to(NS(mesh, spec), 2), (
        compiled.input_shardings[0][0], placed[0])


@checks("PROG-11")
def test_a_donated_input_whose_placement_is_left_open_says_so():
    """Where propagation leaves the donated input's placement open, the program is accepted
    and the verdict names the input and why (never a guess)."""
    mesh = _mesh((2, 4), ("x", "y"))
    x = jax.device_put(np.ones((16, 16), np.float32), NS(mesh, P("x")))
    m = jnp.ones((16, 16), np.float32)
    # a sort along a split dimension: the partitioner's own choice (PROP-4)
    jitted = jax.jit(lambda m, x: (jnp.sin(x), jnp.sort(m + x, axis=0)), donate_argnums=(0,),
                     out_shardings=(NS(mesh, P()), NS(mesh, P("x"))))
    verdict = explain_program(describe_program(jitted, m, x))
    assert verdict.accepted
    reasons = dict(verdict.undetermined)
    assert "args[0]" in reasons and reasons["args[0]"].startswith("[PROG-11]"), reasons


# --------------------------------------------------------------------------- the property

@st.composite
def _spec_over(draw, mesh, rank):
    """A PartitionSpec over ``mesh`` for ``rank`` dimensions: each axis on a dimension or
    on none, in a drawn order."""
    dims = [[] for _ in range(rank)]
    for name in draw(st.permutations(mesh.axis_names)):
        where = draw(st.integers(0, rank))
        if where < rank:
            dims[where].append(name)
    return P(*(None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims))


@st.composite
def _several_meshes(draw):
    """A program over two or three meshes of the 8 devices: an input (numpy, or placed over
    one mesh), one to two constraints over others, each returned (directly, or computed on
    where ``computed``), of rank 2 or 3."""
    meshes = _meshes()
    names = sorted(meshes)
    rank = draw(st.sampled_from((2, 3)))
    shape = (8, 8) if rank == 2 else (4, 2, 8)
    first = draw(st.sampled_from([None, *names]))
    spec_in = None if first is None else draw(_spec_over(meshes[first], rank).filter(
        lambda spec: all(n % int(np.prod([meshes[first].shape[a] for a in (
            () if e is None else (e,) if isinstance(e, str) else e)])) == 0
            for n, e in zip(shape, tuple(spec) + (None,) * rank))))
    constraints = [(m, draw(_spec_over(meshes[m], rank)), draw(st.booleans()))
                   for m in draw(st.lists(st.sampled_from(names), min_size=1, max_size=2))]
    return first, spec_in, shape, tuple(constraints)


def _several_program(first, spec_in, shape, constraints):
    meshes = _meshes()
    value = np.ones(shape, np.float32)
    arg = value if first is None else jax.device_put(value, NS(meshes[first], spec_in))

    def f(x):
        return tuple((jnp.sin if computed else (lambda v: v))(
            wsc(x * (k + 2), NS(meshes[m], spec))) for k, (m, spec, computed)
            in enumerate(constraints))
    return jax.jit(f), (arg,)


@checks("PROP-8", "OUT-2")
@settings(max_examples=min(settings.default.max_examples, 60), deadline=None)
@given(_several_meshes())
def test_programs_over_several_meshes_agree_with_jax(drawn):
    """Drawn constraints over meshes of the 8 devices in every pair of shapes: the verdict
    without the compiler's choices is JAX's where it places every result; the placements
    PROP-8 predicts are the compiled ones, HLO for HLO; with the compiler's choices given,
    the verdict is JAX's whatever is left open."""
    jitted, args = _several_program(*drawn)
    outcome, program, verdict = _both_sides(jitted, args)
    if not any(s is UNSPECIFIED for s in verdict.out_shardings or ()) or not verdict.accepted:
        assert not outcome_problems(verdict, outcome), (drawn, verdict)
    assert not outcome_problems(explain_program(with_choices(program, outcome)), outcome)
    predicted = crossmesh_choices(program, _module_shardings(program))
    for k, hlo in enumerate(predicted):
        if hlo is not None and outcome.compiler:
            assert hlo_equal(hlo, outcome.compiler[k]), (drawn, k, hlo, outcome.compiler[k])

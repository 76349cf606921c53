"""The transformed-call registry retires onto whole programs (issue 23, items 3 and 6).

Every stored transformed-call vector (vectors/transforms/) either has a whole-program form
— asked through the program path, it gives the old vector's expected answer (result; or
rule, exception types and path) — or stays a per-equation question with a reason. The
migrated set (vectors/programs-migrated/) is what ``shardlaw vectors migrate`` writes from
it, and each of its program vectors replays under the spec to its expected verdict.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from pathlib import Path

import pytest

from shardlaw.cli import main
from shardlaw.spec.core.rules import Rejection
from shardlaw.spec.transforms.transformed import TRANSFORMS, TransformedCall, explain_transformed
from shardlaw.spec.vectors.jit_vectors import vector_text
from shardlaw.spec.vectors.program_vectors import load_program, program_differences
from shardlaw.spec.vectors.transformed_migration import (
    PER_EQUATION, PROGRAM_FUNCTIONS, NoProgramForm, ask_program, migrate_vector,
    old_differences, program_form,
)
from shardlaw.spec.vectors.transformed_vectors import load_transformed

ROOT = Path(__file__).resolve().parent.parent / "vectors"
OLD = sorted((ROOT / "transforms").glob("*/*.json"))
MIGRATED = sorted((ROOT / "programs-migrated").glob("*/*.json"))

# The vectors whose program path answer differs from the old one, and why. Both are right
# by the old answer: real JAX refuses them with SMAP-17's check (in_specs passed to
# shard_map do not match the specs of the argument's type, every mesh axis manual and
# Explicit), which the program path's shard_map (spec/program/shardmap.py) does not make;
# it refuses later, with SMAP-19. They are not migrated.
KNOWN_DISAGREEMENTS = {"SMAP-17-reject-1": "SMAP-19", "SMAP-17-reject-2": "SMAP-19"}


def _old(path: Path):
    return load_transformed(path.read_text())


def _outcome(vector) -> tuple[str, str]:
    """("migrated", "") or ("per-equation", why)."""
    try:
        program_form(vector.call)
    except (NoProgramForm, Rejection) as why:
        return "per-equation", str(why)
    return "migrated", ""


def test_every_question_has_a_program_form_or_a_reason():
    assert set(PROGRAM_FUNCTIONS) | set(PER_EQUATION) == set(TRANSFORMS)
    assert not set(PROGRAM_FUNCTIONS) & set(PER_EQUATION)
    assert all(why.strip() for why in PER_EQUATION.values())


@pytest.mark.parametrize("path", OLD, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_old_vector_migrates_to_its_answer_or_is_listed(path):
    vector = _old(path)
    outcome, why = _outcome(vector)
    if outcome == "per-equation":
        assert why, vector.name
        if vector.call.transform not in PROGRAM_FUNCTIONS:
            assert why == PER_EQUATION[vector.call.transform]
        return
    answer = ask_program(vector.call)
    stored = ROOT / "programs-migrated" / path.parent.name / path.name
    if vector.name in KNOWN_DISAGREEMENTS:
        assert (vector.expect.rule, answer.rule) == (vector.rule,
                                                     KNOWN_DISAGREEMENTS[vector.name])
        assert not stored.exists()
        return
    assert old_differences(vector.expect, answer) == [], vector.name
    assert stored.exists(), f"{stored} is not in the migrated set"


@pytest.mark.parametrize("path", MIGRATED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_migrated_vector_replays_through_the_program_path(path):
    vector = load_program(path.read_text())
    assert vector.expect is not None
    assert program_differences(vector) == []
    old = _old(ROOT / "transforms" / path.parent.name / path.name)
    assert vector_text(migrate_vector(old)) == path.read_text()


def test_the_migrated_set_is_what_the_command_writes():
    with tempfile.TemporaryDirectory() as target:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["vectors", "migrate", str(ROOT / "transforms"), target])
        written = sorted(Path(target).glob("*/*.json"))
        text = out.getvalue()
        assert code == 1, text   # the known disagreements
        assert [p.relative_to(target) for p in written] == \
            [p.relative_to(ROOT / "programs-migrated") for p in MIGRATED]
        assert f"Migrated {len(MIGRATED)} of {len(OLD)}" in text
        assert f"{len(KNOWN_DISAGREEMENTS)} disagreement(s)" in text
        assert all(f"  - {name}: " in text for name in KNOWN_DISAGREEMENTS)
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["vectors", "migrate", str(ROOT / "transforms"), target]) == 2


def test_explain_transformed_is_deprecated_and_names_the_program_function():
    from shardlaw.spec import Mesh, NamedSharding, P
    mesh = Mesh.iota((2, 4), ("x", "y"))
    call = TransformedCall.of("vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))],
                              result_shardings=[], arg_shapes=[(4, 8)], result_ranks=[],
                              spmd_axis_name="x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdict = explain_transformed(call)
    assert any(issubclass(w.category, DeprecationWarning)
               and "vmap_program" in str(w.message) for w in caught)
    assert old_differences(verdict, ask_program(call)) == []


def test_the_forms_written_are_the_forms_announced():
    from shardlaw.spec.vectors import transformed_migration
    assert set(transformed_migration._FORMS) == set(PROGRAM_FUNCTIONS)
    assert not set(PROGRAM_FUNCTIONS) & set(PER_EQUATION)


@pytest.mark.parametrize("name", sorted(KNOWN_DISAGREEMENTS))
def test_real_jax_gives_the_old_answer_where_the_program_path_differs(name):
    from shardlaw.properties.transform_vectors_gen import replay_in_jax
    vector = _old(ROOT / "transforms" / "shardmap" / f"{name}.json")
    assert replay_in_jax(vector) == []


def _accepted_shard_maps():
    from shardlaw.spec import Mesh, P
    from shardlaw.spec.transforms.shardmap import Returned, Shaped
    mesh = Mesh.iota((2, 4), ("x", "y"))
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=(P("x"), P(None, "y")),
        out_specs=(P(), P(None, "y")), operands=(Shaped((8, 4)), Shaped((4, 8))),
        results=(Returned(0, ("x",)), Returned(1)), manual_axes=frozenset({"x", "y"}))
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=P("x"), out_specs=P("x"),
        operands=(Shaped((8,)),), results=Returned(0), manual_axes=frozenset({"x"}),
        check_vma=False)
    yield TransformedCall.of(
        "check_shard_map", mesh=mesh, in_specs=(P("x"),), out_specs=P(),
        operands=(Shaped((8,)),), results=Returned(0, ("x",)),
        manual_axes=frozenset({"x", "y"}))


@pytest.mark.parametrize("call", list(_accepted_shard_maps()))
def test_an_accepted_shard_map_reads_back_its_types(call):
    # the stored shard_map vectors are all refusals: the types read back are held here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = explain_transformed(call)
    assert old.accepted
    assert old_differences(old, ask_program(call)) == []


def _ad_calls():
    from shardlaw.spec import Mesh, NamedSharding, P
    from shardlaw.spec.core.shardings import UNSPECIFIED
    from shardlaw.spec.transforms.autodiff import JitBody, JitEquation
    mesh = Mesh.iota((2, 4), ("data", "model"))
    body = JitBody(inputs=2, dependencies=[{0, 1}, {1}, set()], forwarded=[None, 1, None],
                   residuals=0, stored_residuals=0)
    equation = JitEquation((NamedSharding(mesh, P("data")), UNSPECIFIED),
                           (NamedSharding(mesh, P()), UNSPECIFIED,
                            NamedSharding(mesh, P(None, "model"))), (False, True))
    for nonzero in ((True, False), (False, True), (True, True), (False, False)):
        yield TransformedCall.of("nonzero_outputs", jit_body=body, nonzero_tangents=nonzero)
        yield TransformedCall.of("jvp_equation", primal_equation=equation, jit_body=body,
                                 nonzero_tangents=nonzero)


@pytest.mark.parametrize("call", list(_ad_calls()))
def test_a_jvp_with_several_outputs_reads_back_its_equation(call):
    # the stored AD-1/AD-2 vectors have one input each: several, forwarded and constant
    # outputs, some tangents zero, are held here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = explain_transformed(call)
    assert old.accepted
    assert old_differences(old, ask_program(call)) == []

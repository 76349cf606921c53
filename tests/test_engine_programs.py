"""The engine on whole programs: the shardings inside a jit's body, against JAX and the spec.

``shardlaw.engine.jit`` walks the traced body (nested jits, constraints, device_puts,
shard_maps, at any depth) and holds every sharding left in it to the program's device
assignment before anything is lowered (PROG-2, DA-1): issue 23's gap class 1 — a
constraint over the devices in another order, over another mesh — is refused with the
spec's rule, at the equation's path, in JAX's class and words; so is a constraint
Shardy cannot write (WSC-8), and one that would end the process inside XLA. The properties
``test_engine_agrees_on_programs`` (compositions of inner jits, constraints and
device_puts) and ``test_engine_agrees_on_shard_mapped_programs`` (shard_maps with their
collectives) are the ``programs`` suite's
(:mod:`shardlaw.properties.suites.programs`); the pinned tests hold each case of gap 1 to
JAX and to the spec, and the walk to its cost: once per trace, never on a cache hit.
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding as JaxNamedSharding
from jax.sharding import PartitionSpec as JaxP

import shardlaw.engine as engine
from shardlaw.engine import program_body
from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    Case, Recipe, Step, arguments_of, function_of, run_in_jax, spec_verdict,
)
from shardlaw.properties.registry import checks
from shardlaw.properties.suites.programs import (
    ENGINE_SOURCE, compare_engine_program, held_values, run_in_engine,
)
from shardlaw.spec import (
    GSPMDSharding, Mesh, NamedSharding, Opaque, P, Program, ShardingConstraint,
    SingleDeviceSharding, Value, explain_program, to_jax,
)
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.core.values import AxisType

# pytest collects the suite's engine properties from this module's namespace
from shardlaw.properties.suites.programs import (  # noqa: F401
    test_engine_agrees_on_programs, test_engine_agrees_on_programs_with_refs,
    test_engine_agrees_on_shard_mapped_programs,
)

MESH = Mesh.iota((2, 4), ("x", "y"))
REVERSED = Mesh((2, 4), ("x", "y"), range(7, -1, -1))   # the same devices, in reverse
HALF = Mesh.iota((2, 2), ("x", "y"))                     # devices 0..3 only
RESHAPED = Mesh.iota((4, 2), ("a", "b"))                 # the same devices, another shape
X = Value.placed((8, 8), NamedSharding(MESH, P("x")))


def _refused(case: Case, rule: str, stage: str, path: str):
    """The engine refuses ``case`` by ``rule`` at ``stage`` and ``path``, as the spec does,
    in the class JAX raises at the same stage; returns the engine's error and JAX's."""
    assert not compare_engine_program(case)
    jax_outcome = run_in_jax(case)
    verdict = spec_verdict(case, jax_outcome)
    mine = run_in_engine(case)
    error = mine.error
    assert isinstance(error, engine.EngineRejection), error
    assert (error.rule, error.stage, error.path) == (rule, stage, path)
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, stage, path)
    assert jax_outcome.stage == stage and isinstance(error, type(jax_outcome.error))
    # JAX's own words first, then the engine's rule and path
    assert str(error).startswith(str(jax_outcome.error).strip())
    assert f"[{rule}] at {path}: " in str(error)
    return error, jax_outcome.error


def _constrained(sharding, inputs=(X,)) -> Case:
    return Case(inputs, Recipe((Step("neg", 0), Step("constraint", 1, sharding)), (2,)))


# --------------------------------------------------------------------------- gap class 1

@checks("PROG-2", "DA-1")
def test_a_constraint_over_the_devices_in_reverse_is_refused_before_lowering():
    error, theirs = _refused(_constrained(NamedSharding(REVERSED, P("y"))), "DA-1", "lower",
                             "body[1]")
    assert "incompatible devices" in str(theirs)
    assert "the sharding_constraint at body[1] is on devices [7, 6, 5, 4, 3, 2, 1, 0]" in \
        str(error)


def test_the_refusal_is_decided_before_anything_is_compiled():
    """The engine's own decision refuses (its path is one only the walk knows); nothing was
    compiled, and JAX's lowering, which would find it too, is asked only for its words."""
    reversed_mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    x = jax.device_put(np.ones((8, 8), np.float32), JaxNamedSharding(mesh, JaxP("x")))

    def f(a):
        return jax.lax.with_sharding_constraint(a * 2, JaxNamedSharding(reversed_mesh, JaxP()))

    jitted = engine.jit(f)
    explanation = jitted.explain(x)
    assert (explanation.rule, explanation.path, explanation.stage) == ("DA-1", "body[1]",
                                                                        "lower")
    assert "PROG-2" in explanation.trace
    with pytest.raises(ValueError, match=r"\[DA-1\] at body\[1\]"):
        jitted(x)
    assert jitted.cache_info().compiles == 0


@checks("PROG-2", "DA-1")
def test_a_constraint_over_another_mesh_is_refused_before_lowering():
    _refused(_constrained(NamedSharding(HALF, P("y"))), "DA-1", "lower", "body[1]")


@checks("PROG-2", "DA-1")
def test_an_inner_jits_in_sharding_on_other_devices_is_refused_at_its_path():
    inner = Recipe((Step("neg", 0),), (1,))
    case = Case((X,), Recipe((Step("jit", 0, body=inner,
                                   in_sharding=NamedSharding(REVERSED, P("x"))),), (1,)))
    _refused(case, "DA-1", "lower", "body[0].jit.in_shardings[0]")


@checks("PROG-2", "DA-1")
def test_a_constraint_two_bodies_down_is_refused_at_its_path():
    innermost = Recipe((Step("constraint", 0, NamedSharding(REVERSED, P())),), (1,))
    inner = Recipe((Step("jit", 0, body=innermost),), (1,))
    case = Case((X,), Recipe((Step("sin", 0), Step("jit", 1, body=inner)), (2,)))
    _refused(case, "DA-1", "lower", "body[1].jit.body[0].jit.body[0]")


@checks("PROG-5", "AD-9")
@pytest.mark.parametrize("types, rule", [(("Explicit", "Auto"), "PROG-5"),
                                         (("Explicit", "Explicit"), "AD-9")])
def test_a_result_left_to_a_type_over_a_mesh_of_other_size_is_refused_before_lowering(
        types, rule):
    """A reshard places nothing, so the program runs on one device; its result, left to its
    type over a mesh of eight, is refused before lowering, where JAX refuses it while
    lowering: by PROG-5 over a mixed mesh, by AD-9 over Explicit axes only."""
    mesh = Mesh.iota((2, 4), ("x", "y"), tuple(getattr(AxisType, t) for t in types))
    case = Case((Value.numpy((8, 8)),),
                Recipe((Step("reshard", 0, NamedSharding(mesh, P("x"))),), (1,)))
    error, theirs = _refused(case, rule, "lower", "result[0]")
    assert type(theirs) is ValueError
    explanation = engine.jit(function_of(case)).explain(*arguments_of(case))
    assert (explanation.rule, explanation.stage) == (rule, "lower")


@checks("PROG-2")
def test_a_body_is_walked_before_the_bodies_nested_in_it():
    inner = Recipe((Step("constraint", 0, NamedSharding(REVERSED, P())),), (1,))
    case = Case((X,), Recipe((Step("jit", 0, body=inner),
                              Step("constraint", 1, NamedSharding(HALF, P()))), (2,)))
    _refused(case, "DA-1", "lower", "body[1]")


@checks("PROG-2", "DA-1")
def test_a_device_put_to_a_sharding_on_other_devices_is_refused():
    to_sharding = Case((X,), Recipe((Step("device_put", 0, SingleDeviceSharding(3)),), (1,)))
    _refused(to_sharding, "DA-1", "lower", "body[0]")
    to_device = Case((X,), Recipe((Step("device_put", 0, 3),), (1,)))
    assert not compare_engine_program(to_device)
    assert run_in_engine(to_device).explanation.inside == ()


@checks("PROG-2")
def test_a_dead_constraint_takes_no_part_unless_the_jit_keeps_unused_inputs():
    body = Recipe((Step("constraint", 0, NamedSharding(REVERSED, P())), Step("neg", 0)), (2,))
    assert not compare_engine_program(Case((X,), body))
    assert run_in_engine(Case((X,), body)).error is None
    _refused(Case((X,), body, keep_unused=True), "DA-1", "lower", "body[0]")


@pytest.mark.parametrize("kind", ["scan", "cond"])
def test_a_constraint_in_a_scan_or_a_cond_is_walked_too(kind):
    """The bodies of any equation are walked, as JAX lists their shardings (the spec does
    not describe scans and conds yet): held to JAX's own refusal, at the branch's path."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    reversed_mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    constrained = JaxNamedSharding(reversed_mesh, JaxP())

    def looped(a):
        def step(c, _):
            return jax.lax.with_sharding_constraint(c * 2, constrained), None
        return jax.lax.scan(step, a, None, length=3)[0]

    def branched(a):
        return jax.lax.cond(a[0, 0] > 0, lambda b: jax.lax.with_sharding_constraint(
            b, constrained), lambda b: b * 2, a)

    fn, path = {"scan": (looped, "body[0].scan.body[1]"),
                "cond": (branched, "body[4].cond[1].body[0]")}[kind]
    x = jax.device_put(np.ones((8, 8), np.float32), JaxNamedSharding(mesh, JaxP("x")))
    with pytest.raises(ValueError) as theirs:
        jax.jit(fn).trace(x).lower()
    with pytest.raises(ValueError) as mine:
        engine.jit(fn).trace(x).lower()
    assert (mine.value.rule, mine.value.path) == ("DA-1", path)
    assert str(mine.value).startswith(str(theirs.value).strip())
    on_its_devices = jax.device_put(np.ones((8, 8), np.float32),
                                    JaxNamedSharding(reversed_mesh, JaxP("x")))
    assert engine.jit(fn).explain(on_its_devices).inside == ((path, constrained),)


def test_a_shard_map_over_the_devices_in_reverse_is_refused_at_its_mesh():
    reversed_mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    mapped = engine.jit(jax.shard_map(lambda a: a, mesh=reversed_mesh, in_specs=JaxP("x"),
                                      out_specs=JaxP("x")))
    argument = jax.device_put(np.ones((8, 8), np.float32), to_jax(X.sharding))
    with pytest.raises(ValueError, match="shard_map inside jit") as refused:
        mapped(argument)
    assert (refused.value.rule, refused.value.path) == ("DA-1", "body[0].shard_map.mesh")


@checks("SMAP-12", "DA-1")
def test_a_repeated_in_spec_is_refused_before_the_shard_maps_mesh_on_other_devices():
    """JAX makes shardings of a concrete mesh's in specs while it lists the shardings
    inside the body, before it compares their devices: the axis named twice is refused
    first, in the spec's rule and path (a deep run of the spec's property drew it)."""
    reversed_mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    fn = jax.shard_map(lambda a: -a, mesh=reversed_mesh, in_specs=JaxP("y", "y"),
                       out_specs=JaxP(), check_vma=False)
    argument = jax.device_put(np.ones((8, 8), np.float32), to_jax(X.sharding))
    verdict = explain_program(describe_program(jax.jit(fn), argument))
    path = "body[0].shard_map.in_specs[0]"
    assert (verdict.rule, verdict.stage, verdict.path) == ("SMAP-12", "lower", path)
    with pytest.raises(Exception) as theirs:
        jax.jit(fn).trace(argument).lower()
    with pytest.raises(type(theirs.value)) as mine:
        engine.jit(fn).trace(argument).lower()
    assert type(theirs.value).__name__ == "DuplicateSpecError"
    assert (mine.value.rule, mine.value.stage, mine.value.path) == ("SMAP-12", "lower", path)


@checks("SMAP-13")
def test_a_refusal_after_axis_index_is_located_as_jax_numbers_the_body():
    """``x + axis_index('y')`` is traced as axis_index, its cast to float32 and the add:
    the repeated axes of the psum after it are refused at body[3] of the shard_map's body
    (the jaxpr the engine walks, and the spec's verdict on the program JAX traced; a deep
    run held the engine to the recipe's built program, which has no cast, at body[2])."""
    from shardlaw.properties.program_shardmap_harness import MapCase, Op
    from shardlaw.properties.suites.programs import shard_maps

    case = MapCase(MESH, X, P("x"), P("x", "y"), frozenset(), False,
                   (Op("axis_index", ("y",)), Op("psum", ("y", "y"))))
    assert not compare_engine_program(case, shard_maps())
    error = run_in_engine(case, shard_maps()).error
    assert (error.rule, error.stage, error.path) == ("SMAP-13", "lower",
                                                     "body[0].shard_map.body[3]")


@checks("REF-3")
@pytest.mark.parametrize("out_spec, refused", [(None, True), (JaxP(), False),
                                               (JaxP(None, "x"), True)],
                         ids=["not-given", "another-size", "the-same-size"])
def test_a_donated_ref_is_refused_where_jax_makes_the_compiler_its_donor(out_spec, refused):
    """A ref split over eight devices, donated and written, beside a replicated result:
    refused when the result's sharding is not given or splits it as the ref is, accepted
    (the donation unused) when the result holds more per device, as JAX does."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    data = np.ones((4, 8), np.float32)
    x = jax.device_put(data, JaxNamedSharding(mesh, JaxP()))
    ref = jax.new_ref(jax.device_put(data, JaxNamedSharding(mesh, JaxP(None, "x"))))

    def step(a, r):
        r[...] = jnp.sin(r[...])
        return -a

    options = {"donate_argnums": 1}
    if out_spec is not None:
        options["out_shardings"] = JaxNamedSharding(mesh, out_spec)
    outcomes = []
    for jit in (jax.jit, engine.jit):
        try:
            jit(step, **options).trace(x, ref).lower().compile()
            outcomes.append(None)
        except Exception as error:  # noqa: BLE001 - compared
            outcomes.append(error)
    theirs, mine = outcomes
    assert (theirs is not None, mine is not None) == (refused, refused)
    if refused:
        assert isinstance(mine, type(theirs)) and mine.rule == "REF-3"


@checks("OUT-2", "PROG-4")
def test_the_same_devices_in_another_shape_fail_when_compiled_as_in_jax():
    """Gap 1's IndivisibleError: the constraint's mesh holds the same devices in another
    shape, so the device assignment holds; the result the compiler placed cannot be read
    back over the argument's mesh (OUT-2, when compiling), in JAX's class."""
    case = Case((Value.placed((8, 8), NamedSharding(MESH, P())),),
                Recipe((Step("constraint", 0, NamedSharding(RESHAPED, P("a"))),), (1,)))
    error, theirs = _refused(case, "OUT-2", "compile", "result[0]")
    assert type(theirs).__name__ == "IndivisibleError" and error.jax_error == "IndivisibleError"


# --------------------------------------------------------------------------- WSC-8

MESH4 = Mesh.iota((4,), ("x",))
X4 = Value.placed((8, 8), NamedSharding(MESH4, P("x")))


@checks("WSC-8")
def test_a_constraint_shardy_cannot_write_is_refused_before_lowering():
    permuted = GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]3,1,2,0}")
    error, theirs = _refused(_constrained(permuted, (X4,)), "WSC-8", "lower", "body[1]")
    assert type(theirs) is TypeError and "SdyArray" in str(theirs)
    iota = GSPMDSharding([0, 1, 2, 3], "{devices=[4,1]<=[4]}")
    assert not compare_engine_program(_constrained(iota, (X4,)))


# Run in a child process: were the engine to let it through, XLA would end the process.
_ABORTING = """
import jax
jax.config.update("jax_num_cpu_devices", 8)
import numpy as np
from shardlaw.engine import jit
from shardlaw.spec import GSPMDSharding, to_jax
one = to_jax(GSPMDSharding([0], "{devices=[1,1]<=[1]}"))
x = jax.device_put(np.ones((4, 4), np.float32), jax.devices()[0])
try:
    jit(lambda a: jax.lax.with_sharding_constraint(a * 2, one))(x)
except RuntimeError as error:
    print(type(error).__name__, error.rule, error.stage, error.path, error.jax_error)
"""


@checks("WSC-8")
def test_a_constraint_tiling_one_device_is_refused_where_jax_would_abort():
    program = Program((Value.placed((4, 4), SingleDeviceSharding(0)),), (
        Opaque((0,), (Value.typed((4, 4), "float32"),), primitive="neg"),
        ShardingConstraint((1,), sharding=GSPMDSharding([0], "{devices=[1,1]<=[1]}"))),
        outputs=(2,))
    verdict = explain_program(program)
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "WSC-8", "lower", "body[1]", "abort")
    child = subprocess.run([sys.executable, "-c", _ABORTING], capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["EngineRuntimeError", "WSC-8", "lower", "body[1]", "abort"]


# --------------------------------------------------------------------------- shard_maps

def _mapped(block, mesh_shape=(4,), names=("x",), check_vma=True):
    devices = np.array(jax.devices()[:int(np.prod(mesh_shape))]).reshape(mesh_shape)
    mesh = jax.sharding.Mesh(devices, names)
    fn = jax.shard_map(block, mesh=mesh, in_specs=JaxP(names[0]), out_specs=JaxP(names[0]),
                       check_vma=check_vma)
    x = jax.device_put(np.ones((8, 8), np.float32), JaxNamedSharding(mesh, JaxP(names[0])))
    return fn, x


@checks("SMAP-22", "SMAP-13")
@pytest.mark.parametrize("block, rule, error", [
    (lambda a: jax.lax.ppermute(a, "x", [(0, 1), (0, 2)]), "SMAP-22", ValueError),
    (lambda a: jax.lax.ppermute(a, "x", [(0, 5)]), "SMAP-22", IndexError),
    (lambda a: jax.lax.psum(a, ("y", "y")), "SMAP-13", ValueError),
], ids=["ppermute-repeats", "ppermute-out-of-range", "psum-repeats"])
def test_a_shard_maps_collectives_are_checked_before_lowering(block, rule, error):
    """What JAX finds only while lowering a shard_map's body, the engine refuses before:
    the spec's rule at the spec's path and stage, in JAX's class and words."""
    shape, names = ((2, 4), ("x", "y")) if rule == "SMAP-13" else ((4,), ("x",))
    fn, x = _mapped(block, shape, names, check_vma=rule != "SMAP-13")
    verdict = explain_program(describe_program(jax.jit(fn), x))
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, "lower",
                                                           "body[0].shard_map.body[0]")
    with pytest.raises(error) as theirs:
        jax.jit(fn).trace(x).lower()
    jitted = engine.jit(fn)
    traced = jitted.trace(x)
    with pytest.raises(error) as mine:
        traced.lower()
    assert (mine.value.rule, mine.value.stage, mine.value.path) == (
        verdict.rule, verdict.stage, verdict.path)
    assert str(mine.value).startswith(str(theirs.value).strip())
    assert jitted.cache_info().compiles == 0


# --------------------------------------------------------------------------- refs

def _ref_case(role, sharding, use="read", donated=False):
    """A program over X holding one ref (closed over or passed) placed by ``sharding``."""
    from shardlaw.properties.program_constants_harness import ConstCase, Held
    body = Recipe((Step("neg", 0),), (1,))
    return ConstCase(Case((X,), body), (Held(role, "placed", use, sharding, donated),))


def _refused_with_refs(cc, rule, stage, path):
    """As _refused, for a held-values case: the engine, the spec and JAX agree."""
    from shardlaw.properties.suites.programs import held_values
    harness = held_values()
    assert not compare_engine_program(cc, harness)
    theirs = harness.run_jax(cc)
    verdict = harness.spec(cc, theirs)
    error = run_in_engine(cc, harness).error
    assert isinstance(error, engine.EngineRejection), error
    assert (error.rule, error.stage, error.path) == (rule, stage, path)
    assert (verdict.rule, verdict.stage, verdict.path) == (rule, stage, path)
    assert theirs.stage == stage and isinstance(error, type(theirs.error))
    assert str(error).startswith(str(theirs.error).strip())
    assert f"[{rule}] at {path}: " in str(error)
    return error


@checks("REF-1", "DA-1")
@pytest.mark.parametrize("role, path", [("ref", "constants[0]"), ("ref_arg", "args[1]")])
def test_a_ref_on_other_devices_is_refused_before_lowering(role, path):
    from shardlaw.properties.suites.programs import compare_engine_constants
    cc = _ref_case(role, NamedSharding(REVERSED, P()))
    assert not compare_engine_constants(cc)   # REF-1's refusing side, pinned (and counted)
    error = _refused_with_refs(cc, "DA-1", "lower", path)
    ref = "closed-over ref constants[0]" if role == "ref" else "argument args[1]"
    assert f"the {ref}" in str(error) and "[7, 6, 5, 4, 3, 2, 1, 0]" in str(error)


@checks("REF-1")
def test_a_ref_read_and_left_dead_takes_no_part_unless_unused_inputs_are_kept():
    from shardlaw.properties.suites.programs import compare_engine_constants
    cc = _ref_case("ref", NamedSharding(REVERSED, P()), use="dead")
    assert not compare_engine_constants(cc)
    assert run_in_engine(cc, held_values()).error is None
    kept = dataclasses.replace(cc, case=dataclasses.replace(cc.case, keep_unused=True))
    _refused_with_refs(kept, "DA-1", "lower", "constants[0]")


@checks("REF-3")
def test_a_donated_ref_is_refused_before_compiling():
    cc = _ref_case("ref_arg", NamedSharding(MESH, P("x")), use="written", donated=True)
    error = _refused_with_refs(cc, "REF-3", "compile", "args[1]")
    assert error.jax_error == "JaxRuntimeError"


@checks("REF-3")
def test_a_ref_argument_written_and_not_donated_is_accepted():
    """REF-3's accepting side, pinned (the drawn cases met it in no run of the oldest
    dependencies' CI leg): the engine, the spec and JAX accept the same ref undonated."""
    from shardlaw.properties.suites.programs import compare_engine_constants
    cc = _ref_case("ref_arg", NamedSharding(MESH, P("x")), use="written")
    assert not compare_engine_constants(cc)
    assert run_in_engine(cc, held_values()).error is None


@checks("OUT-2", "REF-1")
def test_a_call_with_refs_that_jax_fails_to_compile_is_refused_by_out_2():
    """A call with a closed-over ref is compiled by JAX's jit once decided; a result the
    compiler placed that cannot be read back over the argument's mesh (here a constraint's
    8-way mesh on a dimension of 2) is refused by OUT-2 when compiling, in JAX's class, as
    the spec refuses it (found by the deep run)."""
    from shardlaw.properties.program_constants_harness import ConstCase, Held
    from shardlaw.spec import UNCONSTRAINED
    inner = Recipe((Step("device_put", 0, NamedSharding(REVERSED, P("x", None))),
                    Step("constraint", 0, NamedSharding(Mesh.iota((8,), ("x",)),
                                                        P(None, UNCONSTRAINED)))), (2,))
    body = Recipe((Step("jit", 0, body=Recipe((Step("sin", 0),), (1,))),
                   Step("jit", 2, body=inner, in_sharding=NamedSharding(MESH, P(None, "y")),
                        out_sharding=NamedSharding(MESH, P("x", "y")))), (3,))
    cc = ConstCase(Case((Value.placed((8, 8), NamedSharding(MESH, P("x", "y"))),
                         Value.numpy((8, 8))), body),
                   (Held("ref", "placed", "read", NamedSharding(MESH, P("y", None))),))
    error = _refused_with_refs(cc, "OUT-2", "compile", "result[0]")
    assert type(error).__name__ == "EngineIndivisibleError" or \
        error.jax_error == "IndivisibleError"


def test_a_call_with_a_ref_argument_is_decided_by_the_engine_and_run_by_jax():
    """The engine decides a call with a ref argument through lowering (the ref is a
    committed input on its own sharding) and JAX's jit compiles and runs it, writing the
    ref's new value back; explain says so."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    x = jax.device_put(np.ones((8, 8), np.float32), JaxNamedSharding(mesh, JaxP("x")))
    ref = jax.new_ref(jax.device_put(np.ones((8, 8), np.float32),
                                     JaxNamedSharding(mesh, JaxP())))

    def step(a, r):
        r[...] = r[...] * 3
        return a * 2

    jitted = engine.jit(step)
    for _ in range(2):
        out = jitted(x, ref)
    assert float(out[0, 0]) == 2.0 and float(ref[...][0, 0]) == 9.0
    explanation = jitted.explain(x, ref)
    assert explanation.accepted and "REF-1" in explanation.trace
    assert explanation.executable.startswith("compiled by JAX's own jit")
    assert explanation.out_shardings == (JaxNamedSharding(mesh, JaxP("x")),)
    assert jitted.cache_info().compiles == 0   # none by the engine: JAX compiled it


# Run in a child process: JAX reads the flag that hoists constants when it is imported.
_HOISTED = """
import jax
jax.config.update("jax_num_cpu_devices", 8)
from shardlaw.properties.program_constants_harness import ConstCase, Held
from shardlaw.properties.program_harness import Case, Recipe, Step
from shardlaw.properties.suites.programs import compare_engine_constants, held_values, run_in_engine
from shardlaw.spec import Mesh, NamedSharding, P, Value
mesh, reversed_mesh = Mesh.iota((2, 4), ("x", "y")), Mesh((2, 4), ("x", "y"), range(7, -1, -1))
case = Case((Value.placed((8, 8), NamedSharding(mesh, P("x"))),), Recipe((Step("neg", 0),), (1,)))
for sharding in (NamedSharding(reversed_mesh, P("y")), NamedSharding(mesh, P("y"))):
    cc = ConstCase(case, (Held("constant", "placed", "returned", sharding),), hoist=True)
    assert not compare_engine_constants(cc), compare_engine_constants(cc)
    error = run_in_engine(cc, held_values()).error
    print(type(error).__name__, getattr(error, "rule", None), getattr(error, "path", None))
"""


@checks("CONST-2", "DA-1")
def test_a_hoisted_constant_on_other_devices_is_refused_before_lowering():
    """With constants hoisted as arguments (the flag on as JAX is imported), a committed
    constant joins the device assignment after the arguments: on the devices in reverse it
    is refused by DA-1 at its path, as JAX and the spec refuse it; on theirs it runs."""
    import os
    child = subprocess.run([sys.executable, "-c", _HOISTED], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ,
                                                 JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1"))
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split("\n")[:2] == ["EngineValueError DA-1 constants[0]",
                                            "NoneType None None"]


_HOISTED_EXPLAINED = """
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import shardlaw.engine as engine
mesh = jax.make_mesh((2, 4), ("x", "y"))
c = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))
explanation = engine.jit(lambda a: a + c).explain(jnp.ones(16))
print(explanation.held == (("constants[0]", c.sharding, "hoisted constant"),))
print([line for line in str(explanation).splitlines() if line.startswith("  held")])
"""


@checks("REF-1", "CONST-2")
def test_explain_lists_the_refs_and_hoisted_constants_the_program_takes_in():
    """A closed-over ref that takes part, and a constant JAX hoists, are inputs of the
    program after the arguments: explain lists each at its path, on its sharding."""
    import os
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    ref = jax.new_ref(jax.device_put(jnp.zeros(8), JaxNamedSharding(mesh, JaxP("y"))))

    def step(a):
        ref[...] = ref[...] + a
        return a * 2

    explanation = engine.jit(step).explain(jnp.ones(8))
    assert explanation.held == (("constants[0]", ref.sharding, "ref, written back in place"),)
    assert "  held constants[0]: NamedSharding" in str(explanation)
    assert engine.jit(lambda a: a * 2).explain(jnp.ones(8)).held == ()
    child = subprocess.run([sys.executable, "-c", _HOISTED_EXPLAINED], capture_output=True,
                           text=True, timeout=300,
                           env=dict(os.environ, JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1"))
    assert child.returncode == 0, child.stderr[-2000:]
    first, second = child.stdout.split("\n")[:2]
    assert first == "True" and "(hoisted constant)" in second, child.stdout


def test_explain_of_a_refused_program_names_the_rule_the_path_and_the_stage():
    reversed_mesh = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    x = jax.device_put(np.ones((8, 8), np.float32), JaxNamedSharding(mesh, JaxP("x")))
    inner = jax.jit(lambda b: jax.lax.with_sharding_constraint(
        jnp.sin(b), JaxNamedSharding(reversed_mesh, JaxP())))
    text = str(engine.jit(lambda a: inner(a * 2)).explain(x))
    assert text.startswith("rejected by DA-1 (ValueError) at body[1].jit.body[1] when lowering")
    assert "\n  rules: " in text and "PROG-2" in text.rsplit("rules:", 1)[1]


# --------------------------------------------------------------------------- accepted

@checks("PROG-2", "PROG-3")
def test_explain_lists_the_shardings_inside_the_body():
    case = Case((Value.numpy((8, 8)),), Recipe((
        Step("constraint", 0, NamedSharding(MESH, P("x"))), Step("neg", 1),
        Step("jit", 2, body=Recipe((Step("sin", 0),), (1,)),
             out_sharding=NamedSharding(MESH, P(None, "y")))), (3,)))
    assert not compare_engine_program(case)
    explanation = engine.jit(function_of(case)).explain(*arguments_of(case))
    mesh = to_jax(MESH)
    assert explanation.inside == (
        ("body[0]", JaxNamedSharding(mesh, JaxP("x"))),
        ("body[2].jit.out_shardings[0]", JaxNamedSharding(mesh, JaxP(None, "y"))))
    assert "  inside body[0]: NamedSharding" in str(explanation)
    assert "PROG-2" in explanation.trace and "PROG-3" in explanation.trace


@checks("PROG-3")
def test_numpy_arguments_results_are_read_over_the_first_sharding_inside():
    case = Case((Value.numpy((8,)),), Recipe((Step("jit", 0, body=Recipe((Step(
        "neg", 0),), (1,)), in_sharding=NamedSharding(Mesh.iota((1,), ("p",)), P("p"))),),
        (1,)), keep_unused=True)
    for _ in range(2):   # compiled, then shared from the executable cache
        assert not compare_engine_program(case)
    (result,) = run_in_engine(case).results
    assert result.sharding == JaxNamedSharding(to_jax(Mesh.iota((1,), ("p",))), JaxP())


# --------------------------------------------------------------------------- cost

def _step():
    """A step of 15 blocks, 210 equations at the top: each an inner jit of 24 equations
    (eight constraints), then six constraints of its own."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    spec = JaxNamedSharding(mesh, JaxP("x"))

    @jax.jit
    def block(a):
        for _ in range(8):
            a = jax.lax.with_sharding_constraint(jnp.sin(a) * 2.0, spec)
        return a

    def step(a):
        for k in range(15):
            a = block(a) + k
            for _ in range(6):
                a = jax.lax.with_sharding_constraint(jnp.cos(a), spec)
        return a

    x = jax.device_put(np.ones((8, 8), np.float32), spec)
    return step, x


def test_the_walk_of_a_200_equation_body_is_cheap_and_done_once_per_trace(monkeypatch):
    step, x = _step()
    body = jax.jit(step).trace(x).jaxpr.jaxpr
    assert len(body.eqns) == 210
    timings = []
    for _ in range(20):
        start = time.perf_counter()
        found = program_body.walk_body(body, False).shardings
        timings.append(time.perf_counter() - start)
    # every constraint is listed, the top body's 90 first, then each inner jit's 8
    assert len(found) == 15 * 6 + 15 * 8
    assert [s.path for s in found[89:91]] == ["body[209]", "body[0].jit.body[2]"]
    assert statistics.median(timings) < 0.02, timings   # measured: about 1 ms
    walks = []
    walk = program_body.walk_body
    monkeypatch.setattr(program_body, "walk_body", lambda *a: walks.append(1) or walk(*a))
    jitted = engine.jit(step)
    for _ in range(3):
        jitted(x)
    assert len(walks) == 1 and jitted.cache_info().signature_misses == 1
    jitted.explain(x)   # a signature hit: nothing walked
    assert len(walks) == 1


# --------------------------------------------------------------------------- coverage

def test_the_engine_was_seen_on_both_sides_of_the_body_rules():
    """Runs last in this module: PROG-2 accepted with shardings inside and refused (DA-1 at
    a path in the body), REF-1 accepted with refs and refused (DA-1 at a ref's path), REF-3
    accepted with ref arguments and refused (a donated ref), against JAX and the spec."""
    counts = hits.counts(ENGINE_SOURCE)
    for rule_id in ("PROG-2", "REF-1", "REF-3"):
        assert all(counts.get(rule_id, (0, 0))), (rule_id, counts)
    assert counts.get("DA-1", (0, 0))[1], counts

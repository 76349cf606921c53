"""Abstract arguments (``jax.ShapeDtypeStruct``) whose own sharding does not divide them.

Nothing is placed by an abstract argument's sharding yet, so the call's description takes
it as it is (CALL-0 refuses only what ``jax.ShapeDtypeStruct`` itself refuses: a rank the
sharding does not allow, devices that do not exist) and jit decides, as JAX 0.10.2 does:

* over Explicit mesh axes the argument's type must divide, checked first thing at the call
  (FIT-2: ValueError at ``.trace``, whatever ``in_shardings`` says, used or not);
* the sharding lowering hands each kept input must divide it (FIT-3: IndivisibleError, or
  AssertionError for a GSPMD tiling of a lower rank, at ``.lower``), after the device
  assignment, so an argument on an abstract mesh alone is refused by DA-4 first, and an
  unused one, or one ``device=`` moves, is not checked;
* a concrete sharding given in ``in_shardings`` that differs from the argument's is RES-4,
  and one over an abstract mesh meets no check at all.

The pinned tests hold the six cases that found the gap; the property draws meshes of 1 to
8 devices (Auto, Explicit or mixed axes, concrete or abstract), shapes that divide or not,
NamedShardings, GSPMD tilings and one-device shardings, ``in_shardings`` given or not, a
context mesh, a second argument, unused inputs and ``keep_unused``, and holds the spec's
verdict and the engine's stages to JAX's ``.trace``/``.lower``/``.compile``: the stage, the
class, and for the engine the rule and the path.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import shardlaw.spec as S
from shardlaw.engine import jit as engine_jit
from shardlaw.properties import hits
from shardlaw.properties.registry import checks
from shardlaw.rule_index import LEFT_TO_JAX
from shardlaw.spec import (
    Arg, Call, GSPMDSharding, JitOptions, Mesh, NamedSharding, Out, P, SingleDeviceSharding,
    jit_call, to_jax,
)
from shardlaw.spec.core.values import AxisType, DeviceList

SOURCE = "abstract-arguments"
RULES = ("FIT-1", "FIT-2", "FIT-3", "RES-4", "DA-4", "AD-9")
A, E = AxisType.Auto, AxisType.Explicit
EXAMPLES = max(settings.default.max_examples // 4, 30)

# device= is deprecated in JAX 0.10.2, and drawn here on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:backend and device argument:DeprecationWarning")


# --------------------------------------------------------------------------- one case

@dataclasses.dataclass(frozen=True)
class Case:
    """One ``jax.jit(f, ...).trace(*args).lower().compile()`` with an abstract first argument."""

    sizes: tuple[int, ...]            # the mesh (axes "a", "b")
    types: tuple[AxisType, ...]
    kind: str                         # the first argument's sharding: named, gspmd, single, none
    abstract: bool                    # a NamedSharding over the mesh's abstract mesh
    spec: tuple = ()                  # its PartitionSpec entries
    tiles: str = ""                   # its GSPMD tiling
    shape: tuple[int, ...] = (8,)
    second: str = "none"              # none, array (committed, replicated), plain (no sharding)
    uses_first: bool = True
    in_sharding: str = "none"         # none, replicated, own, spec, abstract
    context: bool = False             # jax.set_mesh(the concrete mesh)
    keep_unused: bool = False
    device: bool = False              # jax.jit(..., device=0)

    @property
    def mesh(self) -> Mesh:
        return Mesh.iota(self.sizes, ("a", "b")[:len(self.sizes)], self.types)

    @property
    def count(self) -> int:
        return self.mesh.size

    def sharding(self) -> Any:
        if self.kind == "named":
            return NamedSharding(self.mesh.abstract if self.abstract else self.mesh,
                                 P(*self.spec))
        if self.kind == "gspmd":
            return GSPMDSharding(DeviceList.of_ids(range(self.count)), self.tiles)
        if self.kind == "single":
            return SingleDeviceSharding(self.count - 1)
        return None

    def leaf(self) -> Any:
        """The in_shardings leaf for the first argument (UNSPECIFIED: not given)."""
        return {"none": None, "replicated": NamedSharding(self.mesh, P()),
                "own": NamedSharding(self.mesh, P(*self.spec)), "spec": P(*self.spec),
                "abstract": NamedSharding(self.mesh.abstract, P())}[self.in_sharding]


def _spec_call(case: Case, outputs: Any) -> Call:
    args = [Arg.abstract(case.shape, "float32", case.sharding())]
    if case.second == "array":
        args.append(Arg.committed((8,), NamedSharding(case.mesh, P())))
    elif case.second == "plain":
        args.append(Arg.abstract((8,)))
    in_shardings = S.UNSPECIFIED
    if case.leaf() is not None:
        in_shardings = (case.leaf(),) + (None,) * (len(args) - 1)
    uses = (case.uses_first,) + (True,) * (len(args) - 1)
    # The compiler keeps an elementwise result where its input is: a GSPMD-tiled first
    # argument's result comes back with that tiling, which OUT-1 re-reads over a context
    # mesh (OUT-2 refuses at .compile a tiling the mesh's axes cannot express).
    count = len(jax.tree_util.tree_leaves(outputs))
    compiler = None
    if case.kind == "gspmd" and case.uses_first:
        compiler = (case.sharding().hlo,) + (None,) * (count - 1)
    return Call(args=tuple(args), outputs=outputs, uses=uses, compiler=compiler,
                options=JitOptions(in_shardings=in_shardings, keep_unused=case.keep_unused,
                                   device=0 if case.device else None),
                context_mesh=case.mesh if case.context else None, devices=8)


def _function(case: Case):
    if case.second == "none":
        return (lambda a: a * 2) if case.uses_first else (lambda a: jnp.zeros(3))
    return (lambda a, b: (a * 2, b + 1)) if case.uses_first else (lambda a, b: b + 1)


def _to_jax(case: Case, sharding: Any) -> Any:
    """``sharding`` in JAX; one over the abstract mesh is read off the concrete mesh
    (``mesh.abstract_mesh``, as users write it: it carries the devices' kind, which a
    context mesh compares)."""
    if isinstance(sharding, NamedSharding) and sharding.mesh == case.mesh.abstract:
        return jax.sharding.NamedSharding(to_jax(case.mesh).abstract_mesh,
                                          to_jax(sharding.spec))
    return to_jax(sharding)


def _jax_arguments(case: Case) -> tuple:
    sharding = case.sharding()
    first = jax.ShapeDtypeStruct(case.shape, jnp.float32,
                                 sharding=None if sharding is None else _to_jax(case, sharding))
    if case.second == "array":
        return first, jax.device_put(jnp.zeros(8), to_jax(NamedSharding(case.mesh, P())))
    if case.second == "plain":
        return first, jax.ShapeDtypeStruct((8,), jnp.float32)
    return (first,)


def _jit_options(case: Case, count: int) -> dict:
    options: dict = {"keep_unused": case.keep_unused}
    if case.device:
        options["device"] = jax.devices()[0]
    if case.leaf() is not None:
        options["in_shardings"] = (_to_jax(case, case.leaf()),) + (None,) * (count - 1)
    return options


@dataclasses.dataclass
class Outcome:
    """How one jit (JAX's or the engine's) fared: the stage that raised and what, or None."""

    stage: str | None = None
    error: BaseException | None = None
    traced: Any = None


def _run(jit: Any, case: Case) -> Outcome:
    args = _jax_arguments(case)
    outcome = Outcome()
    context = jax.set_mesh(to_jax(case.mesh)) if case.context else contextlib.nullcontext()
    with context:
        try:
            outcome.stage = "jit"
            jitted = jit(_function(case), **_jit_options(case, len(args)))
            outcome.stage = "trace"
            outcome.traced = jitted.trace(*args)
            outcome.stage = "lower"
            lowered = outcome.traced.lower()
            outcome.stage = "compile"
            lowered.compile()
            outcome.stage = None
        except Exception as error:  # noqa: BLE001 - the outcome is compared, not hidden
            outcome.error = error
    return outcome


def _outputs(case: Case, traced: Any) -> Any:
    """The results as the spec reads them: JAX's trace gives their types (the meshes they
    carry), as describe_call reads them; without a trace, their shapes alone."""
    if traced is None:
        shapes = [case.shape] if case.uses_first else []
        shapes = (shapes or [(3,)]) if case.second == "none" else shapes + [(8,)]
        outs = tuple(Out(shape) for shape in shapes)
        return outs[0] if len(outs) == 1 else outs
    meshes = []
    for aval in traced.jaxpr.out_avals:
        mesh = aval.sharding.mesh
        meshes.append(None if mesh.empty else S.from_jax(mesh))
    flat = [Out(tuple(s.shape), str(s.dtype), None, m)
            for s, m in zip(jax.tree_util.tree_leaves(traced.out_info), meshes)]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(traced.out_info), flat)


def compare(case: Case) -> list[str]:
    """Where the spec's verdict, the engine and JAX part on ``case`` (empty: they agree)."""
    real = _run(jax.jit, case)
    hits.record_jax_calls(1)
    verdict = jit_call(_spec_call(case, _outputs(case, real.traced)))
    engine = _run(engine_jit, case)
    _record(verdict)
    problems = []
    if verdict.accepted != (real.error is None):
        problems.append(f"spec {'accepts' if verdict.accepted else verdict.message}; JAX "
                        f"{'accepts' if real.error is None else repr(real.error)[:300]}")
    elif not verdict.accepted:
        assert real.error is not None
        if (verdict.stage, verdict.jax_error) != (real.stage, type(real.error).__name__):
            problems.append(f"spec refuses at {verdict.stage} with {verdict.jax_error} "
                            f"({verdict.message}); JAX at {real.stage} with {real.error!r}")
    if (engine.error is None) != (real.error is None):
        problems.append(f"engine {engine.error!r}; JAX {real.error!r}")
    elif engine.error is not None and verdict.rule in LEFT_TO_JAX:
        # JAX's own refusal stands in the engine, in JAX's class and words; the engine
        # lowers with JAX only when it compiles, so it is met at .compile (AD-9).
        if type(engine.error) is not type(real.error) or str(engine.error) != str(real.error) \
                or engine.stage not in (real.stage, "compile"):
            problems.append(f"engine {engine.error!r} at {engine.stage}; JAX "
                            f"{real.error!r} at {real.stage} (left to JAX: {verdict.rule})")
    elif engine.error is not None and not verdict.accepted:
        error = engine.error
        if not isinstance(error, type(real.error)) or engine.stage != real.stage:
            problems.append(f"engine {error!r} at {engine.stage}; JAX {real.error!r} at "
                            f"{real.stage}")
        seen = (getattr(error, "rule", None), getattr(error, "stage", None),
                getattr(error, "path", None))
        if seen != (verdict.rule, verdict.stage, verdict.path):
            problems.append(f"engine refuses by {seen}; spec by "
                            f"{(verdict.rule, verdict.stage, verdict.path)}")
    return problems


def _record(verdict: Any) -> None:
    for rule_id in RULES:
        if rule_id in verdict.trace:
            hits.record(SOURCE, rule_id, refused=verdict.rule == rule_id)


# --------------------------------------------------------------------------- drawing cases

MESHES = [(1,), (2,), (3,), (4,), (5,), (8,), (2, 2), (4, 2), (2, 4), (3, 2), (2, 3)]


@st.composite
def cases(draw: Any) -> Case:
    sizes = draw(st.sampled_from(MESHES))
    types = tuple(draw(st.sampled_from([A, E])) for _ in sizes)
    # XLA aborts the process (tile_assignment.cc, "Check failed: sub_dims") when it lowers a
    # GSPMD tiling of a single device, {devices=[1]<=[1]}, to Shardy: no exception to
    # compare, so a one-device mesh draws no GSPMD tiling.
    kinds = ["named"] * 6 + ["single", "none"] + (["gspmd"] if sizes != (1,) else [])
    kind = draw(st.sampled_from(kinds))
    rank = draw(st.integers(1, 2))
    shape = tuple(draw(st.integers(1, 12)) for _ in range(rank))
    spec: tuple = ()
    tiles = ""
    abstract = False
    if kind == "named":
        abstract = draw(st.booleans())
        axes = list(("a", "b")[:len(sizes)])
        entries = []
        for _ in range(draw(st.integers(0, rank))):
            chosen = draw(st.lists(st.sampled_from(axes), max_size=2, unique=True)) if axes \
                else []
            axes = [a for a in axes if a not in chosen]
            entries.append(None if not chosen else chosen[0] if len(chosen) == 1
                           else tuple(chosen))
        spec = tuple(entries)
    elif kind == "gspmd":
        count = 1
        for s in sizes:
            count *= s
        data = draw(st.integers(1, rank))   # the tiling's rank: the value's, or lower
        first = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
        dims = [first] + [1] * (data - 1)
        if data > 1 and draw(st.booleans()):
            dims = [1] * (data - 1) + [first]
        rest = count // first
        replicate = " last_tile_dim_replicate" if rest > 1 else ""
        dims += [rest] if rest > 1 else []
        tiles = "{devices=[" + ",".join(map(str, dims)) + f"]<=[{count}]{replicate}}}"
    second = draw(st.sampled_from(["none", "none", "array", "plain"]))
    in_sharding = "none"
    if kind == "named":
        in_sharding = draw(st.sampled_from(["none", "none", "replicated", "own", "spec",
                                            "abstract"]))
    # device= with a result typed over an all-Explicit mesh of several devices: AD-9
    device = in_sharding == "none" and draw(st.integers(0, 7)) == 0
    return Case(sizes, types, kind, abstract, spec, tiles, shape, second,
                uses_first=draw(st.booleans()),
                in_sharding=in_sharding, context=draw(st.booleans()),
                keep_unused=draw(st.booleans()), device=device)


# The six cases that found the gap, and one example per side of each rule this file holds.
AUTO, EXPLICIT, MIXED = (A, A), (E, E), (E, A)
SIX = [  # (id, case, (rule, stage, JAX's class) or None: accepted)
    ("auto-concrete", Case((4, 2), AUTO, "named", False, ("a",), shape=(6, 4)),
     ("FIT-3", "lower", "IndivisibleError")),
    ("auto-abstract", Case((4, 2), AUTO, "named", True, ("a",), shape=(6, 4)),
     ("DA-4", "lower", "ValueError")),
    ("explicit-concrete", Case((4, 2), EXPLICIT, "named", False, ("a",), shape=(6, 4)),
     ("FIT-2", "trace", "ValueError")),
    ("explicit-abstract", Case((4, 2), EXPLICIT, "named", True, ("a",), shape=(6, 4)),
     ("FIT-2", "trace", "ValueError")),
    ("auto-concrete-in_shardings-differ", Case((4, 2), AUTO, "named", False, ("a",),
                                               shape=(6, 4), in_sharding="replicated"),
     ("RES-4", "lower", "ValueError")),
    # No check meets a sharding over an abstract mesh when in_shardings gives another.
    ("auto-abstract-in_shardings-differ", Case((4, 2), AUTO, "named", True, ("a",),
                                               shape=(6, 4), in_sharding="replicated"), None),
]
SIDES = [
    Case((4, 2), MIXED, "named", False, ("a", "b"), shape=(8, 3)),             # FIT-2 ok, FIT-3
    Case((4, 2), AUTO, "named", False, ("a",), shape=(8, 4)),                  # all accept
    Case((4, 2), AUTO, "named", False, ("a",), shape=(6, 4), in_sharding="own"),   # FIT-1
    Case((4, 2), AUTO, "named", True, ("a",), shape=(6, 4), context=True),     # FIT-3
    Case((4, 2), AUTO, "named", False, ("a",), shape=(6, 4), second="array",
         uses_first=False),                                                    # unused: ok
    Case((4,), (A,), "gspmd", False, tiles="{devices=[4,1]<=[4]}", shape=(8, 4)),
    Case((4,), (A,), "gspmd", False, tiles="{devices=[4]<=[4]}", shape=(8, 3)),  # tiles
    Case((4,), (A,), "gspmd", False, tiles="{devices=[2,2]<=[4] last_tile_dim_replicate}",
         shape=(6, 4)),                                                        # tiles
    # A tiling listed device by device (EXE-4) is divided first: FIT-3 refuses it.
    Case((4,), (A,), "gspmd", False, tiles="{devices=[4,1]0,1,2,3}", shape=(6, 4)),
    Case((4,), (A,), "gspmd", False, tiles="{devices=[2,2]0,1,2,3 last_tile_dim_replicate}",
         shape=(3,)),
    Case((4, 2), AUTO, "named", False, ("a",), shape=(6, 4), device=True),     # moved: ok
]


# --------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("case, expected", [(c, e) for _, c, e in SIX],
                         ids=[name for name, _, _ in SIX])
def test_the_six_cases_that_found_the_gap(case, expected):
    real = _run(jax.jit, case)
    verdict = jit_call(_spec_call(case, _outputs(case, real.traced)))
    if expected is None:
        assert real.error is None and verdict.accepted, (real.error, verdict.message)
    else:
        rule_id, stage, jax_class = expected
        assert (real.stage, type(real.error).__name__) == (stage, jax_class), real.error
        path = None if rule_id == "DA-4" else "args[0]"   # DA-4 is about the whole call
        assert (verdict.rule, verdict.stage, verdict.jax_error, verdict.path) == (
            rule_id, stage, jax_class, path), verdict.message
    assert not compare(case)


@pytest.mark.parametrize("types, rule_id", [(AUTO, "FIT-3"), (EXPLICIT, "FIT-2")])
def test_the_engine_explains_the_refusal(types, rule_id):
    case = Case((4, 2), types, "named", False, ("a",), shape=(6, 4))
    explanation = engine_jit(_function(case)).explain(*_jax_arguments(case))
    assert not explanation.accepted and explanation.rule == rule_id, explanation
    assert f"[{rule_id}] at args[0]" in str(explanation)


def test_the_description_refuses_only_what_no_shape_dtype_struct_can_be():
    mesh = Mesh.iota((4, 2), ("a", "b"))
    # The spec longer than the rank: JAX's ShapeDtypeStruct refuses to exist.
    with pytest.raises(ValueError):
        jax.ShapeDtypeStruct((8,), jnp.float32, sharding=to_jax(NamedSharding(mesh, P("a", "b"))))
    with pytest.raises(S.Rejection) as refused:
        Arg.abstract((8,), "float32", NamedSharding(mesh, P("a", "b")))
    assert refused.value.failure.rule == "CALL-0"
    # Dividing is jit's question, not the description's.
    assert Arg.abstract((6, 4), "float32", NamedSharding(mesh, P("a"))).shape == (6, 4)
    # An array that exists still fits its sharding.
    with pytest.raises(S.Rejection):
        Arg.committed((6, 4), NamedSharding(mesh, P("a")))


def test_a_whole_program_of_abstract_values_is_refused_alike():
    from shardlaw.spec.program.description import Program, Value
    from shardlaw.spec.program.explain import explain_program

    for types, until, expected in [(AUTO, "trace", None), (AUTO, "run", "FIT-3"),
                                   (EXPLICIT, "trace", "FIT-2")]:
        mesh = Mesh.iota((4, 2), ("a", "b"), types)
        x = Value.shape_dtype((6, 4), sharding=NamedSharding(mesh, P("a")))
        verdict = explain_program(Program((x,), (), outputs=(0,)), until=until)
        assert verdict.rule == expected, (types, until, verdict)


@pytest.mark.parametrize("case", SIDES)
def test_each_rule_on_each_side(case):
    problems = compare(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


@checks("FIT-1", "FIT-2", "FIT-3", "RES-4", "DA-4", "AD-9")
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
@example(SIX[0][1])
@example(SIX[2][1])
@example(Case((4,), (A,), "gspmd", False, (), "{devices=[2,2]<=[4] last_tile_dim_replicate}",
              (2,), context=True))   # OUT-2 at .compile: a CI run drew it
def test_abstract_arguments_agree_with_jax(case):
    problems = compare(case)
    assert not problems, "\n".join(problems) + f"\ncase: {case}"


@checks("AD-9")
@pytest.mark.parametrize("sizes, types, refused", [((2,), (E,), True), ((4, 2), EXPLICIT, True),
                                                   ((4, 2), MIXED, False), ((1,), (E,), False)])
def test_device_option_under_an_explicit_mesh(sizes, types, refused):
    """``device=`` places the program on one device; a result typed over an all-Explicit
    mesh of several devices is then refused at lowering (AD-9, ValueError), one over a
    mesh with an Auto axis, or of one device, is not."""
    case = Case(sizes, types, "named", False, (), shape=(1,), second="array",
                uses_first=False, device=True)
    real = _run(jax.jit, case)
    verdict = jit_call(_spec_call(case, _outputs(case, real.traced)))
    problems = compare(case)
    assert not problems, "\n".join(problems)
    if refused:
        assert (real.stage, type(real.error)) == ("lower", ValueError), real.error
        assert (verdict.rule, verdict.stage, verdict.path) == ("AD-9", "lower", "result")
        assert "Length of device assignment 1 is not equal to the size of the mesh" in \
            verdict.message
    else:
        assert real.error is None and verdict.accepted, verdict.message


def test_every_rule_was_seen_on_both_sides():
    seen = hits.counts(SOURCE)
    missing = [r for r in RULES if not all(seen.get(r, (0, 0)))]
    assert not missing, f"not seen on both sides: {missing} ({seen})"

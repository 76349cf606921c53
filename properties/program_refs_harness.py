"""Mutable refs under vmap, under jvp/linearize/vjp/grad and in shard_map bodies, against
real JAX, program for program (REF-4 .. REF-8, with REF-1, REF-2 and DA-1 of the answer).

A :class:`RefCase` is a small program over an argument ``x`` (8x8 float32, on a drawn
sharding) and a ref (``jax.new_ref`` of a value on a drawn sharding), passed as an argument
or closed over, used one way (:data:`USES`): read (``r[...]``), written with a function of
itself (``r[...] = sin(r[...])``), or written with ``sin(x)``; then one transformation
(:data:`TRANSFORMS`). The spec's side is its rewrite of the hand-built
:class:`~shardlaw.spec.Program` (``vmap_program``, ``grad_program``, ``jvp_program``,
``linearize_program(...).applied``, ``vjp_program(...).applied``; a ``shard_map`` equation
for the shard_map cases) and :func:`~shardlaw.spec.explain_program` of it; JAX's side is
``jax.jit`` of the transformed function, traced, lowered, compiled and called
(:func:`~shardlaw.properties.program_harness.stage_in_jax`), and the lowered program's
aliased parameters counted. :func:`compare_refs` gives every disagreement: a refusal at
another stage or of another class, or other results (shardings, committedness, types,
device assignment), or another number of aliased ref updates than REF-2's. Rule sides are
recorded under :data:`SOURCE`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_constants_harness import with_compiler
from shardlaw.properties.program_harness import JaxOutcome, outcome_problems, stage_in_jax
from shardlaw.spec import (
    Mesh, NamedSharding, P, Rejection, SingleDeviceSharding, explain_program, to_jax, tracing,
)
from shardlaw.spec.placement.blocks import shard_shape
from shardlaw.spec.program.autodiff import (
    grad_program, jvp_program, linearize_program, vjp_program,
)
from shardlaw.spec.program.batching import batched_input, vmap_program
from shardlaw.spec.program.description import Const, Opaque, Program, ShardMap, Value

__all__ = ["RefCase", "TRANSFORMS", "USES", "SOURCE", "RULES", "ref_cases", "spec_program",
           "run_refs_in_jax", "compare_refs", "ref_hit_counts", "MESH"]

SOURCE = "programs-refs"
RULES = ("REF-4", "REF-5", "REF-6", "REF-7", "REF-8")
TRANSFORMS = ("vmap", "grad", "jvp", "linearize", "vjp", "shard_map")
USES = ("read", "write_own", "write_x")
MESH = Mesh.iota((2, 4), ("x", "y"))
SHAPE = (8, 8)
BATCH = 2
IDX = (("tree", "PyTreeDef(())"),)
SIN = (("accuracy", None),)
SUM = (("axes", (0, 1)), ("out_sharding", None))


def ref_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, refusing side) over the cases compared so far."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class RefCase:
    """One program with a ref under one transformation. ``x_sharding``, ``ref_sharding``:
    where the argument and the ref's value are put (an example's, under vmap); ``ref_axis``:
    vmap's in_axes for a ref argument; ``x_spec``, ``ref_spec``, ``check_vma``: the
    shard_map's in specs (the ref's global shape then makes its shard the argument's)."""

    transform: str
    role: str                 # "arg" (passed after x) or "closed" (closed over)
    use: str
    x_sharding: Any
    ref_sharding: Any
    ref_axis: int | None = 0
    x_spec: Any = P()
    ref_spec: Any = P()
    check_vma: bool = True

    @property
    def ref_shape(self) -> tuple[int, ...]:
        if self.transform != "shard_map" or (self.use != "write_x" and self.role == "arg"):
            return SHAPE
        shard = shard_shape(NamedSharding(MESH, self.x_spec), SHAPE)
        if self.role == "closed":   # the body's whole ref, written with its own shard
            return tuple(shard)
        ways = 2 if self.ref_spec == P("x") else 1
        return (shard[0] * ways,) + tuple(shard[1:])


# --------------------------------------------------------------------------- the spec side

def _uses(use: str, ref: int, x: int, first: int, t: Value) -> tuple[list, int | None]:
    """The equations using the ref (numbered from ``first``) and the value a read gives."""
    if use == "read":
        return [Opaque((ref,), (t,), primitive="get", params=IDX)], first
    if use == "write_own":
        return [Opaque((ref,), (t,), primitive="get", params=IDX),
                Opaque((first,), (t,), primitive="sin", params=SIN),
                Opaque((ref, first + 1), (t,), primitive="swap", params=IDX)], None
    return [Opaque((ref, x), (t,), primitive="swap", params=IDX)], None


def _example(rc: RefCase) -> Program:
    """The jitted function on one example (vmap and AD): ``y = sin(x)``, the ref's use,
    and its results — ``y`` (and a read) under vmap, ``y * read`` under AD (summed under
    grad)."""
    x = Value.placed(SHAPE, rc.x_sharding)
    ref = Value.placed(SHAPE, rc.ref_sharding)
    t = x.type
    eqs = [Opaque((0,), (t,), primitive="sin", params=SIN)]     # y: value 2
    more, read = _uses(rc.use, 1, 2, 3, t)
    eqs += more
    outputs = [2]
    if rc.transform == "vmap":
        outputs += [read] if read is not None else []
    elif read is not None:
        eqs.append(Opaque((2, read), (t,), primitive="mul"))
        outputs = [2 + len(eqs) - 1]
    if rc.transform == "grad":
        eqs.append(Opaque((outputs[0],), (Value.typed((), "float32"),),
                          primitive="reduce_sum", params=SUM))
        outputs = [2 + len(eqs) - 1]
    if rc.role == "arg":
        return Program((x, ref), tuple(eqs), tuple(outputs), refs=(False, True))
    return Program((x,), tuple(eqs), tuple(outputs), consts=(Const(ref, ref=True),))


def _per_shard(shape: tuple, spec: Any, check_vma: bool) -> Value:
    split = NamedSharding(MESH, spec)
    varying = frozenset(a for e in spec if e is not None for a in (
        e if isinstance(e, tuple) else (e,))) if check_vma else frozenset()
    return Value.typed(tuple(shard_shape(split, shape)), mesh=MESH.abstract, varying=varying)


def _shard_map_program(rc: RefCase) -> Program:
    """``jax.jit`` of a shard_map whose body is ``sin(x)`` and the ref's use: the ref an
    operand with its in spec, or closed over by the body."""
    x = Value.placed(SHAPE, rc.x_sharding)
    ref = Value.placed(rc.ref_shape, rc.ref_sharding)
    xs = _per_shard(SHAPE, rc.x_spec, rc.check_vma)
    closed = rc.role == "closed"
    # a closed-over ref is read whole, unvarying (JAX refuses it before typing a use)
    rs = _per_shard(rc.ref_shape, P(), False) if closed else _per_shard(
        rc.ref_shape, rc.ref_spec, rc.check_vma)
    inputs = (xs,) if closed else (xs, rs)
    first = len(inputs) + closed
    eqs = [Opaque((0,), (xs,), primitive="sin", params=SIN)]
    more, read = _uses(rc.use, 1, first, first + 1, rs)
    eqs += more
    outputs = (first,) + ((read,) if read is not None else ())
    body = Program(inputs, tuple(eqs), outputs,
                   consts=(Const(ref, ref=True),) if closed else ())
    out_specs = (rc.x_spec,) + ((rc.ref_spec,) if read is not None else ())
    ways = 2 if rc.ref_spec == P("x") else 1   # a read put together by the ref's spec
    read_shape = (rs.shape[0] * ways,) + tuple(rs.shape[1:])
    results = (Value.typed(SHAPE),) + ((Value.typed(read_shape),) if read is not None else ())
    call = ShardMap((0,) if closed else (0, 1), results, body=body, mesh=MESH,
                    in_specs=(rc.x_spec,) if closed else (rc.x_spec, rc.ref_spec),
                    out_specs=out_specs, check_vma=rc.check_vma)
    count = 1 if closed else 2
    outputs = tuple(range(count, count + len(results)))
    if closed:
        return Program((x,), (call,), outputs)
    return Program((x, ref), (call,), outputs, refs=(False, True))


def spec_program(rc: RefCase) -> Program:
    """The spec's rewrite of the case's program (a Rejection where the rewrite refuses)."""
    if rc.transform == "shard_map":
        return _shard_map_program(rc)
    program = _example(rc)
    if rc.transform == "vmap":
        axes = (0, rc.ref_axis) if rc.role == "arg" else (0,)
        return vmap_program(program, in_axes=axes, axis_size=BATCH)
    if rc.transform == "grad":
        return grad_program(program, 0)
    if rc.transform == "jvp":
        return jvp_program(program)
    if rc.transform == "linearize":
        return linearize_program(program).applied
    applied = vjp_program(program).applied
    # JAX's vjp is of the function of x alone (the ref passed in): x's cotangent only
    return dataclasses.replace(applied, outputs=applied.outputs[:1], out_shardings=())


# --------------------------------------------------------------------------- the JAX side

@dataclasses.dataclass
class RefOutcome(JaxOutcome):
    aliased: int | None = None   # the lowered program's parameters aliased to results


def _made(rc: RefCase) -> tuple[Any, Any]:
    """x and the ref, made afresh (a call writes the ref); under vmap, batched."""
    import jax
    import numpy as np

    def data(shape: tuple) -> Any:
        return np.linspace(0.5, 1.5, int(np.prod(shape)), dtype=np.float32).reshape(shape)

    x_value, ref_value = Value.placed(SHAPE, rc.x_sharding), Value.placed(
        rc.ref_shape, rc.ref_sharding)
    ref_axis = rc.ref_axis if rc.role == "arg" else None
    if rc.transform == "vmap":
        x_value = batched_input(x_value, 0, BATCH)
        ref_value = batched_input(ref_value, ref_axis, BATCH)
    x = jax.device_put(data(x_value.shape), to_jax(x_value.sharding))
    ref = jax.new_ref(jax.device_put(data(ref_value.shape), to_jax(ref_value.sharding)))
    return x, ref


def _body(rc: RefCase, ref_of: Any) -> Any:
    """The function's body: ``sin(x)`` and the ref's use; ``ref_of(args)`` the ref."""
    import jax.numpy as jnp

    def body(*args: Any) -> tuple:
        r = ref_of(args)
        y = jnp.sin(args[0])
        if rc.use == "read":
            v = r[...]
            if rc.transform in ("vmap", "shard_map"):
                return (y, v)
            z = y * v
            return jnp.sum(z) if rc.transform == "grad" else (z,)
        if rc.use == "write_own":
            r[...] = jnp.sin(r[...])
        else:
            r[...] = y
        return jnp.sum(y) if rc.transform == "grad" else (y,)
    return body


def transformed(rc: RefCase) -> tuple[Any, tuple]:
    """The real transformed function (jitted) and its arguments."""
    import jax
    import numpy as np

    x, ref = _made(rc)
    arg = rc.role == "arg"
    body = _body(rc, (lambda a: a[1]) if arg else (lambda a: ref))
    args = (x, ref) if arg else (x,)
    if rc.transform == "shard_map":
        specs = (rc.x_spec, rc.ref_spec) if arg else (rc.x_spec,)
        outs = (rc.x_spec, rc.ref_spec) if rc.use == "read" else (rc.x_spec,)
        mapped = jax.shard_map(body, mesh=to_jax(MESH), in_specs=tuple(map(to_jax, specs)),
                               out_specs=tuple(map(to_jax, outs)),
                               check_vma=rc.check_vma)
        return jax.jit(mapped), args
    jitted = jax.jit(body)
    if rc.transform == "vmap":
        axes = (0, rc.ref_axis) if arg else 0
        return jax.jit(jax.vmap(jitted, in_axes=axes)), args
    if rc.transform == "grad":
        return jax.jit(jax.grad(jitted)), args
    of_x = (lambda r: lambda a: jitted(a, r)) if arg else (lambda r: jitted)
    ones = np.ones(SHAPE, np.float32)
    if rc.transform == "jvp":
        return jax.jit(lambda *a: jax.jvp(of_x(a[1] if arg else None), (a[0],),
                                          (a[-1],))), args + (ones,)
    if rc.transform == "linearize":
        return jax.jit(lambda *a: jax.linearize(of_x(a[1] if arg else None), a[0])[1](
            a[-1])), args + (ones,)
    return jax.jit(lambda *a: jax.vjp(of_x(a[1] if arg else None), a[0])[1](
        (a[-1],))), args + (ones,)


def run_refs_in_jax(rc: RefCase) -> RefOutcome:
    """Trace, lower, compile and call the transformed function."""
    outcome = RefOutcome()
    hits.record_jax_calls(1)
    fun, args = transformed(rc)

    def seen(stage: str, what: Any) -> None:
        if stage == "lower":
            outcome.aliased = what.as_text().count("tf.aliasing_output")

    stage_in_jax(fun, args, outcome, after=seen)
    return outcome


# --------------------------------------------------------------------------- comparing

def _same_refusal(verdict_stage: Any, names: set, outcome: JaxOutcome) -> bool:
    theirs = {c.__name__ for c in type(outcome.error).__mro__}
    return verdict_stage == outcome.stage and bool(names & theirs)


def compare_refs(rc: RefCase, outcome: RefOutcome | None = None) -> list[str]:
    """Every disagreement between the spec and JAX on ``rc`` (empty: they agree)."""
    outcome = outcome if outcome is not None else run_refs_in_jax(rc)
    with tracing() as applied:
        try:
            program = spec_program(rc)
        except Rejection as error:
            failure = error.failure
            if outcome.error is None:
                return [f"JAX accepts; the spec's rewrite refuses: {error}"]
            if not _same_refusal(error.stage, {failure.jax_error,
                                               failure.error_type.__name__}, outcome):
                return [f"JAX refused at {outcome.stage} with "
                        f"{type(outcome.error).__name__}: {outcome.error}; the spec's "
                        f"rewrite at {error.stage}: {error}"]
            _record(rc, [failure.rule], refused=failure.rule)
            return []
    verdict = explain_program(with_compiler(program, outcome))
    problems = outcome_problems(verdict, outcome, lambda v, o: _same_refusal(
        v.stage, {v.jax_error, v.error_type}, o))
    if not problems and verdict.accepted and outcome.aliased != len(verdict.ref_updates):
        problems.append(f"aliased ref updates: spec {verdict.ref_updates}, JAX aliases "
                        f"{outcome.aliased} parameter(s)")
    if not problems:
        _record(rc, list(applied) + list(verdict.trace),
                refused=None if verdict.accepted else verdict.rule)
    return problems


def _record(rc: RefCase, fired: list[str], refused: str | None) -> None:
    """The sides each rule was seen on, for a case the spec and JAX agree on: a REF rule
    applied and passed, or the one that refused; DA-1 and REF-1/REF-2 as they fired."""
    for rule_id in dict.fromkeys(fired):
        if rule_id in RULES or rule_id in ("DA-1", "REF-1", "REF-2", "REF-3"):
            hits.record(SOURCE, rule_id, refused=rule_id == refused)


# --------------------------------------------------------------------------- drawing

def _shardings(rank: int = 2) -> Any:
    return st.sampled_from([NamedSharding(MESH, P()), NamedSharding(MESH, P("x")),
                            NamedSharding(MESH, P("y", "x")), SingleDeviceSharding(0),
                            SingleDeviceSharding(3)])


@st.composite
def ref_cases(draw: Any, transforms: tuple[str, ...] = TRANSFORMS) -> RefCase:
    """A drawn case: the transformation, the ref's role and use, the placements; under
    vmap the ref's in_axes (0, 1 or None), in a shard_map its in spec and check_vma."""
    transform = draw(st.sampled_from(transforms))
    role = draw(st.sampled_from(["arg", "arg", "closed"]))
    use = draw(st.sampled_from(USES))
    x_sharding = draw(_shardings())
    ref_sharding = draw(_shardings())
    case = RefCase(transform, role, use, x_sharding, ref_sharding)
    if transform == "vmap" and role == "arg":
        case = dataclasses.replace(case, ref_axis=draw(st.sampled_from([0, 1, None])))
    if transform == "shard_map":
        x_spec = draw(st.sampled_from([P(), P("x")]))
        ref_spec = draw(st.sampled_from([P(), P("x")]))
        # the arrays sit on the shard_map's mesh (a ref elsewhere: DA-1), split or not
        x_sharding = NamedSharding(MESH, draw(st.sampled_from([P(), x_spec])))
        case = dataclasses.replace(case, x_spec=x_spec, ref_spec=ref_spec,
                                   x_sharding=x_sharding,
                                   check_vma=draw(st.booleans()))
    return case

"""Program vectors from drawn programs and real JAX: writing them, and replaying them in JAX.

:func:`generate_program_vectors` draws programs with
:func:`~shardlaw.properties.program_harness.program_cases`, holds each to real JAX with
:func:`~shardlaw.properties.program_harness.compare_program`, and writes the ones on which
JAX and the spec agree as program vectors (:mod:`shardlaw.spec.vectors.program_vectors`),
until each rule the programs reach has ``per_rule`` vectors on each of its sides.

:func:`program_in_jax` builds, from a :class:`~shardlaw.spec.Program` alone, the JAX
function it describes and arguments for it — so a vector replays in JAX without the
harness that drew it (:func:`replay_program_in_jax`). It builds the equation kinds and the
elementwise primitives of ``jax.lax`` by name; a program with anything else is not
replayable in JAX (:class:`NotReplayable`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    with_choices, compare_program, program_cases, program_of, run_in_jax,
)
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax, placement_equivalent, to_jax
from shardlaw.spec.program.description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap,
)
from shardlaw.spec.program.explain import ProgramVerdict
from shardlaw.spec.vectors.program_vectors import (
    ProgramVector, dump_program, program_differences,
)

__all__ = ["NotReplayable", "program_in_jax", "replay_program_in_jax",
           "generate_program_vectors", "PROGRAM_DIRECTORY"]

# Where the program vectors live under a vectors directory.
PROGRAM_DIRECTORY = "programs"

# The primitives built by their jax.lax function of the same name, one operand each.
UNARY = ("neg", "sin", "cos", "tanh", "exp", "abs", "sign", "floor", "ceil", "sqrt", "tan")
BINARY = ("add", "sub", "mul", "max", "min", "div")


class NotReplayable(Exception):
    """A program this module cannot build in JAX."""


def _opaque(eq: Opaque, operands: list) -> Any:
    import jax

    if eq.primitive in UNARY and len(operands) == 1:
        return getattr(jax.lax, eq.primitive)(operands[0])
    if eq.primitive in BINARY and len(operands) == 2:
        return getattr(jax.lax, eq.primitive)(*operands)
    raise NotReplayable(f"the primitive {eq.primitive!r} is not built in JAX by the replayer "
                        f"(it builds {', '.join(UNARY + BINARY)})")


def _run_body(program: Program, values: list) -> tuple:
    """The body's outputs, each equation built in JAX in turn (inside a trace)."""
    import jax

    values = list(values)
    for eq in program.equations:
        operands = [values[n] for n in eq.operands]
        if isinstance(eq, Jit):
            out = jax.jit(_function(eq.body), **_options(eq.body))(*operands)
        elif isinstance(eq, ShardingConstraint):
            out = (jax.lax.with_sharding_constraint(operands[0], to_jax(eq.sharding)),)
        elif isinstance(eq, DevicePut):
            out = tuple(jax.device_put(x, None if t is None else _device(t))
                        for x, t in zip(operands, eq.targets))
        elif isinstance(eq, Reshard):
            out = (jax.sharding.reshard(operands[0], to_jax(eq.sharding)),)
        elif isinstance(eq, ShardMap):
            out = jax.shard_map(_function(eq.body), mesh=to_jax(eq.mesh),
                                in_specs=tuple(to_jax(s) for s in eq.in_specs),
                                out_specs=tuple(to_jax(s) for s in eq.out_specs),
                                axis_names=set(eq.manual_axes), check_vma=eq.check_vma)(*operands)
        elif isinstance(eq, Opaque):
            out = (_opaque(eq, operands),)
        else:
            raise NotReplayable(f"a {type(eq).__name__} equation is not built in JAX by the "
                                f"replayer")
        values += list(out) if isinstance(out, (tuple, list)) else [out]
    return tuple(values[n] for n in program.outputs)


def _device(target: Any) -> Any:
    import jax
    return jax.devices()[target] if type(target) is int else to_jax(target)


def _function(program: Program) -> Callable[..., tuple]:
    if program.consts:
        raise NotReplayable("a program with closed-over constants is not built in JAX by the "
                            "replayer")
    return lambda *args: _run_body(program, list(args))


def _options(program: Program) -> dict:
    def tree(shardings: tuple) -> Any:
        if all(s is UNSPECIFIED for s in shardings):
            return None
        return tuple(None if s is UNSPECIFIED else to_jax(s) for s in shardings)
    options: dict[str, Any] = {"keep_unused": program.keep_unused,
                               "donate_argnums": tuple(i for i, d in enumerate(program.donated)
                                                       if d)}
    for name in ("in_shardings", "out_shardings"):
        given = tree(getattr(program, name))
        if given is not None:
            options[name] = given
    return options


def _argument(value: Any) -> Any:
    """A real argument for one input: a ShapeDtypeStruct, a Python scalar, a numpy array, a
    committed array placed with device_put, or an uncommitted one made by jnp on the
    device its sharding names (one device only)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if value.abstract:
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=None if
                                    value.sharding is None else to_jax(value.sharding))
    if value.sharding is None:
        return 1.0 if value.weak_type else np.ones(value.shape, value.dtype)
    data = np.ones(value.shape, value.dtype)
    if value.committed:
        return jax.device_put(data, to_jax(value.sharding))
    devices = to_jax(value.sharding).device_set
    if len(devices) != 1:
        raise NotReplayable("an uncommitted argument on several devices is not built by the "
                            "replayer")
    with jax.default_device(next(iter(devices))):
        return jnp.asarray(data)


def program_in_jax(program: Program) -> tuple[Callable[..., Any], tuple]:
    """The jitted JAX function ``program`` describes, and arguments for it."""
    import jax
    return jax.jit(_function(program), **_options(program)), tuple(
        _argument(v) for v in program.inputs)


def replay_program_in_jax(vector: ProgramVector) -> list[str]:
    """How JAX's outcome on the vector's program differs from its expected verdict (the
    vector's transformations are the spec's, so a transformed vector is not replayed)."""
    import jax

    if vector.transforms:
        raise NotReplayable("the transformations a vector asks for are applied by the spec; "
                            "JAX is asked about the program as written only")
    if vector.until != "run":
        raise NotReplayable("a vector asked until tracing is replayed against the spec only")
    jitted, args = program_in_jax(vector.program)
    expect = vector.expect or {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            results = jitted(*args)
        except NotReplayable:   # met while JAX traced the program: not a refusal of JAX's
            raise
        except Exception as error:  # noqa: BLE001 - compared with the expected refusal
            if expect.get("accepted", True):
                return [f"JAX refused with {type(error).__name__}: {error}; the vector "
                        f"expects it accepted"]
            names = {expect.get("jax_error"), expect.get("error_type")}
            if not ({k.__name__ for k in type(error).__mro__} & names):
                return [f"JAX refused with {type(error).__name__}: {error}; the vector "
                        f"expects {expect.get('jax_error')} by {expect.get('rule')}"]
            return []
    if not expect.get("accepted", True):
        return [f"JAX accepted; the vector expects a refusal by {expect.get('rule')}"]
    results = jax.tree_util.tree_leaves(results)
    problems = []
    for k, (result, wanted) in enumerate(zip(results, expect.get("out_shardings") or ())):
        if wanted is not UNSPECIFIED and not _same_place(from_jax(result.sharding), wanted,
                                                         tuple(result.shape)):
            problems.append(f"result {k}: JAX placed it on {from_jax(result.sharding)!r}, the "
                            f"vector expects {wanted!r}")
    return problems


def _same_place(a: Any, b: Any, shape: tuple) -> bool:
    return placement_equivalent(a, b, shape)


# --------------------------------------------------------------------------- generating

def generate_program_vectors(directory: str | Path, per_rule: int = 2, *, seed: int = 0,
                             budget: int = 300) -> dict[tuple[str, str], int]:
    """Write program vectors under ``directory/programs/RULE/``: up to ``per_rule`` for each
    side of each rule the drawn programs reach, from at most ``budget`` drawn programs on
    which JAX and the spec agree. Returns the count written per (rule, side)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    root = Path(directory) / PROGRAM_DIRECTORY
    written: dict[tuple[str, str], int] = {}
    seen: set[str] = set()

    def consume(case: Any) -> None:
        if compare_program(case):  # JAX and the spec disagree: not a vector
            return
        program = with_choices(program_of(case), run_in_jax(case))
        verdict = explain_program(program)
        for rule_id, side in _sides(verdict):
            if written.get((rule_id, side), 0) >= per_rule:
                continue
            vector = dump_program(program, verdict, rule=rule_id, side=side)
            text = json.dumps(vector, sort_keys=True)
            if text in seen:
                return
            seen.add(text)
            n = written.get((rule_id, side), 0) + 1
            written[(rule_id, side)] = n
            target = root / rule_id / f"{side}-{n}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(vector, indent=1) + "\n", encoding="utf-8")
            return

    @hypothesis_seed(seed)
    @settings(max_examples=budget, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(program_cases(bodies=False))   # (the vectors do not hold bodies of issue 32 yet)
    def draw(case: Any) -> None:
        consume(case)

    with hits.kept():
        draw()
    return written


def _sides(verdict: ProgramVerdict) -> list[tuple[str, str]]:
    """The (rule, side) labels a verdict may carry: the refusing rule's reject side, or
    the accept side of each rule that fired (the PROG rules' and the jit pipeline's)."""
    if not verdict.accepted:
        return [(verdict.rule, "reject")]
    return [(rule_id, "accept") for rule_id in verdict.trace]


def replay_all(directory: str | Path) -> dict[str, list[str]]:
    """Every program vector under ``directory`` replayed against the spec: file ->
    differences (empty: conforms)."""
    from shardlaw.spec.vectors.program_vectors import load_program
    return {str(path): program_differences(load_program(path.read_text(encoding="utf-8")))
            for path in sorted(Path(directory).rglob("*.json"))}


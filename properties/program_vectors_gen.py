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

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    Case, JaxOutcome, arguments_of, compare_program, outcome_problems, predicted_problems,
    program_cases, program_of, run_body, run_in_jax, stage_in_jax, top_options, with_choices,
)
from shardlaw.spec import UNSPECIFIED, explain_program, from_jax, placement_equivalent, to_jax
from shardlaw.spec.program.control_flow import Cond, CustomJvp, CustomVjp, Remat, Scan, While
from shardlaw.spec.program.description import (
    DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap,
)
from shardlaw.spec.program.explain import ProgramVerdict
from shardlaw.spec.vectors.program_vectors import (
    ProgramVector, dump_program, program_differences,
)

__all__ = ["NotReplayable", "program_in_jax", "replay_program_in_jax",
           "generate_program_vectors", "PROGRAM_DIRECTORY", "FLOW_DIRECTORY", "FLOW_KINDS",
           "FLOW_EQUATION", "FlowCase", "flow_cases", "equation_kinds", "flow_function",
           "flow_options", "compare_flow",
           "generate_flow_vectors"]

# Where the program vectors live under a vectors directory.
PROGRAM_DIRECTORY = "programs"

# The equations of issue 32 the replayer builds over their bodies.
FLOW_EQUATIONS = (Scan, While, Cond, Remat, CustomJvp, CustomVjp)

# The primitives built by their jax.lax function of the same name, one operand each.
UNARY = ("neg", "sin", "cos", "tanh", "exp", "abs", "sign", "floor", "ceil", "sqrt", "tan")
BINARY = ("add", "sub", "mul", "max", "min", "div")
# The primitives bound by name with their described parameters (jax.extend), with how many
# operands each takes: one described with fewer had a literal operand, which a description
# does not hold (not replayable).
BOUND = {"reduce_sum": 1, "gt": 2, "lt": 2, "ge": 2, "le": 2, "convert_element_type": 1}


class NotReplayable(Exception):
    """A program this module cannot build in JAX."""


def _opaque(eq: Opaque, operands: list) -> Any:
    import jax

    if eq.primitive in UNARY and len(operands) == 1:
        return getattr(jax.lax, eq.primitive)(operands[0])
    if eq.primitive in BINARY and len(operands) == 2:
        return getattr(jax.lax, eq.primitive)(*operands)
    if BOUND.get(eq.primitive) == len(operands):
        import numpy as np
        from jax.extend.core import primitives
        params = {k: np.dtype(v) if k == "new_dtype" else v for k, v in eq.params}
        return getattr(primitives, f"{eq.primitive}_p").bind(*operands, **params)
    raise NotReplayable(f"the primitive {eq.primitive!r} over {len(operands)} operand(s) is "
                        f"not built in JAX by the replayer (it builds "
                        f"{', '.join(UNARY + BINARY + tuple(BOUND))}, with all their operands)")


def _run_body(program: Program, values: list) -> tuple:
    """The body's outputs, each equation built in JAX in turn (inside a trace)."""
    import jax

    values = list(values)
    for eq in program.equations:
        operands = [values[n] for n in eq.operands]
        if isinstance(eq, FLOW_EQUATIONS):   # (remat and the custom calls are Jits too)
            out = _flow(eq, operands)
        elif isinstance(eq, Jit):
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


def _flow(eq: Any, operands: list) -> Any:
    """A control-flow, remat or custom-derivative equation built in JAX over its bodies
    (a custom function's rules are stand-ins: JAX calls them only under AD, and a vector is
    replayed in JAX as written)."""
    import jax

    if isinstance(eq, Scan):
        c, k = eq.num_consts, eq.num_consts + eq.num_carry
        body, consts = _function(eq.body), operands[:c]

        def step(carry: tuple, xs: tuple) -> tuple:
            out = body(*consts, *carry, *xs)
            return out[:eq.num_carry], out[eq.num_carry:]
        carry, ys = jax.lax.scan(step, tuple(operands[c:k]), tuple(operands[k:]),
                                 length=eq.length, reverse=eq.reverse)
        return (*carry, *ys)
    if isinstance(eq, While):
        cc, bc = eq.cond_consts, eq.body_consts
        cond, body = _function(eq.cond), _function(eq.body_fun)
        c_consts, b_consts = operands[:cc], operands[cc:cc + bc]
        return jax.lax.while_loop(lambda carry: cond(*c_consts, *carry)[0],
                                  lambda carry: body(*b_consts, *carry),
                                  tuple(operands[cc + bc:]))
    if isinstance(eq, Cond):
        return jax.lax.switch(operands[0], [_function(b) for b in eq.branches], *operands[1:])
    primal = _function(eq.body)
    if isinstance(eq, Remat):
        return jax.checkpoint(primal, prevent_cse=eq.prevent_cse,
                              policy=_policy(eq.policy))(*operands)
    if isinstance(eq, CustomJvp):
        called = jax.custom_jvp(primal)
        called.defjvp(lambda primals, tangents: jax.jvp(primal, primals, tangents))
        return called(*operands)
    called = jax.custom_vjp(primal)
    called.defvjp(lambda *primals: (primal(*primals), primals),
                  lambda primals, cotangents: jax.vjp(primal, *primals)[1](cotangents))
    return called(*operands)


def _policy(policy: Any) -> Any:
    """The jax.checkpoint policy a remat's ``policy`` names (None: JAX's default)."""
    import jax

    if policy is None:
        return None
    if policy.startswith("save_from_both_policies(") and policy.endswith(")"):
        inner, depth = policy[len("save_from_both_policies("):-1], 0
        for k, c in enumerate(inner):
            depth += (c == "(") - (c == ")")
            if inner[k:k + 2] == ", " and depth == 0:
                return jax.checkpoint_policies.save_from_both_policies(
                    _policy(inner[:k]), _policy(inner[k + 2:]))
    if policy.startswith("save_only_these_names("):
        names = policy[len("save_only_these_names("):-1]
        return jax.checkpoint_policies.save_only_these_names(*names.split(", "))
    if policy.startswith("save_any_names_but_these("):
        names = policy[len("save_any_names_but_these("):-1]
        return jax.checkpoint_policies.save_any_names_but_these(*names.split(", "))
    if policy.startswith("<"):
        raise NotReplayable(f"the remat policy {policy} is not built in JAX by the replayer")
    return getattr(jax.checkpoint_policies, policy)


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



# --------------------------------------------------------------------------- control flow

# Where the control-flow program vectors live under a vectors directory (one folder a kind).
FLOW_DIRECTORY = "programs-flow"

# The kinds a drawn body is run inside (issue 32): JAX's functions that trace to a scan, a
# while, a cond, a remat2 and a custom_jvp_call or custom_vjp_call equation.
FLOW_KINDS = ("scan", "fori_loop", "while_loop", "cond", "switch", "checkpoint", "custom_jvp",
              "custom_vjp")

# The equation each kind's function traces to (fori_loop's is a scan: its bounds are static).
FLOW_EQUATION = {"scan": Scan, "fori_loop": Scan, "while_loop": While, "cond": Cond,
                 "switch": Cond, "checkpoint": Remat, "custom_jvp": CustomJvp,
                 "custom_vjp": CustomVjp}

# The kinds whose function returns the body's results as they are (the top-level jit's
# out_shardings drawn for them stay).
SAME_RESULTS = ("cond", "switch", "checkpoint", "custom_jvp", "custom_vjp")


@dataclasses.dataclass(frozen=True)
class FlowCase:
    """A drawn program (:class:`~shardlaw.properties.program_harness.Case`) whose whole
    body runs inside one of :data:`FLOW_KINDS`: constraints, device_puts, elementwise
    operations and nested jits with their shardings inside a loop's body, a branch, a remat
    or a custom-derivative function."""

    kind: str
    case: Case


def _inside(kind: str, body: Callable[..., tuple], args: tuple, count: int) -> Any:
    """``body`` over ``args`` run inside ``kind``: a loop carries the first argument (the
    others closed over) through the body's first result, a scan stacking its last; a
    branching kind takes the body as one branch and negations (a sine) as the others, one
    for each of the body's ``count`` results (the body is not called outside the branch);
    the predicates are read off the data without literals (a description holds none)."""
    import jax
    import jax.numpy as jnp

    first, rest = args[0], args[1:]
    if kind == "scan":
        return jax.lax.scan(lambda c, _: ((out := body(c, *rest))[0], out[-1]), first, None,
                            length=2)
    if kind == "fori_loop":
        return jax.lax.fori_loop(0, 2, lambda i, c: body(c, *rest)[0], first)
    if kind == "while_loop":   # twice, by a counter stepping by the sum of the data
        s = jnp.sum(first)
        return jax.lax.while_loop(lambda c: c[1] < s + s,
                                  lambda c: (body(c[0], *rest)[0], c[1] + s), (first, s - s))[0]
    if kind in ("cond", "switch"):
        others = [lambda *a: (jnp.negative(a[0]),) * count,
                  lambda *a: (jnp.sin(a[0]),) * count][:1 if kind == "cond" else 2]
        taken = jnp.sum(first) > jnp.sum(jnp.negative(first))
        if kind == "cond":
            return jax.lax.cond(taken, body, others[0], *args)
        return jax.lax.switch(taken.astype(jnp.int32), [others[0], body, others[1]], *args)
    if kind == "checkpoint":
        return jax.checkpoint(body)(*args)
    if kind == "custom_jvp":
        called = jax.custom_jvp(body)
        called.defjvp(lambda primals, tangents: jax.jvp(body, primals, tangents))
        return called(*args)
    called = jax.custom_vjp(body)
    called.defvjp(lambda *primals: (body(*primals), primals),
                  lambda primals, cotangents: jax.vjp(body, *primals)[1](cotangents))
    return called(*args)


def flow_function(flow: FlowCase) -> Callable[..., Any]:
    """The real function a flow case describes (not yet jitted)."""
    recipe = flow.case.body
    return lambda *args: _inside(flow.kind, lambda *a: tuple(run_body(recipe, list(a))), args,
                                 len(recipe.outputs))


def flow_options(flow: FlowCase) -> dict:
    """The top-level jit's options (out_shardings only where the results are the body's)."""
    case = flow.case
    if flow.kind not in SAME_RESULTS:
        case = dataclasses.replace(case, out_shardings=())
    return top_options(case)


@st.composite
def flow_cases(draw: Any) -> FlowCase:
    """A drawn program run inside a drawn control-flow kind."""
    return FlowCase(draw(st.sampled_from(FLOW_KINDS)), draw(program_cases(bodies=False)))


def compare_flow(flow: FlowCase) -> tuple[Program | None, list[str]]:
    """The program ``describe_program`` reads off JAX's trace of the flow case (with the
    compiler's choices JAX made) and every disagreement between the spec's verdict on it
    and JAX's outcome (trace, lower, compile, run); None where it is not described."""
    import jax
    from shardlaw.spec.bridge.program import describe_program

    hits.record_jax_calls(1)
    args = arguments_of(flow.case)
    outcome = JaxOutcome()
    stage_in_jax(jax.jit(flow_function(flow), **flow_options(flow)), args, outcome)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            described = describe_program(jax.jit(flow_function(flow), **flow_options(flow)),
                                         *args)
    except Exception as error:  # noqa: BLE001 - not described: no vector
        return None, [f"not described: {type(error).__name__}: {error}"]
    if FLOW_EQUATION[flow.kind] not in equation_kinds(described):
        # (a body JAX refuses while tracing it is described up to the refused call)
        return None, [f"not described as a {flow.kind}: refused while tracing its body"]
    program = with_choices(described, outcome)
    problems = outcome_problems(explain_program(program), outcome)
    problems += predicted_problems(explain_program(described), outcome)
    return program, problems


def equation_kinds(program: Program) -> set[type]:
    """The classes of the equations of ``program``, its bodies' included."""
    out: set[type] = set()
    for eq in program.equations:
        out.add(type(eq))
        if eq.body is not None:
            out |= equation_kinds(eq.body)
    return out


def generate_flow_vectors(directory: str | Path, per_rule: int = 1, *, seed: int = 0,
                          budget: int = 700) -> dict[tuple[str, str, str], int]:
    """Write control-flow program vectors under ``directory/programs-flow/KIND/``: for each
    kind, the refusing side of each rule its drawn programs reach and the accepting side of
    each of :data:`FLOW_ACCEPTS`, the ``per_rule`` shortest vectors of each (the first
    drawn among equals), from ``budget`` drawn programs, those on which JAX and the spec
    agree. Returns the count written per (kind, rule, side)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    root = Path(directory) / FLOW_DIRECTORY
    found: dict[tuple[str, str, str], list[tuple[int, int, Program, ProgramVerdict]]] = {}

    def consume(flow: FlowCase) -> None:
        program, problems = compare_flow(flow)
        if program is None or problems:
            return
        verdict = explain_program(program)
        size = len(json.dumps(dump_program(program, verdict)))
        for rule_id, side in _sides(verdict):
            if side == "accept" and rule_id not in FLOW_ACCEPTS:
                continue
            kept = found.setdefault((flow.kind, rule_id, side), [])
            kept.append((size, len(kept), program, verdict))
            kept.sort(key=lambda k: k[:2])
            del kept[per_rule:]

    @hypothesis_seed(seed)
    @settings(max_examples=budget, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(flow_cases())
    def draw(flow: FlowCase) -> None:
        consume(flow)

    with hits.kept():
        draw()
    for (kind, rule_id, side), kept in sorted(found.items()):
        for n, (_, _, program, verdict) in enumerate(kept, 1):
            vector = dump_program(program, verdict, name=f"{kind}-{rule_id}-{side}-{n}",
                                  rule=rule_id, side=side,
                                  description=f"a drawn body inside {FLOW_TEXT[kind]}")
            target = root / kind / f"{rule_id}-{side}-{n}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(vector, indent=1) + "\n", encoding="utf-8")
    return {key: len(kept) for key, kept in found.items()}


# The rules whose accepting side a flow vector is written for (every refusing side is):
# those that decide the shardings inside a body.
FLOW_ACCEPTS = ("DA-1", "FIT-1", "WSC-4", "LOOP-1")

# How a flow vector's description names its kind.
FLOW_TEXT = {"scan": "jax.lax.scan (2 iterations, the last result stacked)",
             "fori_loop": "jax.lax.fori_loop (2 iterations)",
             "while_loop": "jax.lax.while_loop (2 iterations)",
             "cond": "jax.lax.cond (the other branch a negation)",
             "switch": "jax.lax.switch (the other branches a negation and a sine)",
             "checkpoint": "jax.checkpoint", "custom_jvp": "a jax.custom_jvp function",
             "custom_vjp": "a jax.custom_vjp function"}

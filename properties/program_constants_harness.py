"""Closed-over constants and mutable refs of whole programs against real JAX, program for
program (CONST-1, CONST-2, REF-1..3).

A :class:`ConstCase` is a drawn program of :mod:`shardlaw.properties.program_harness` (its
:class:`~shardlaw.properties.program_harness.Case`, whose recipe the body runs first) and
values it holds besides its arguments: closed-over constants (numpy arrays, committed and
uncommitted ``jax.Array``), refs (``jax.new_ref``) it closes over and refs passed to it as
arguments, each used one way (:data:`USES`) after the recipe's body — ``sin`` of a
constant returned or left dead, a ref read and returned, read and left dead, or written
(``r[...] = sin(r[...])``). :func:`constants_program_of` gives its
:class:`~shardlaw.spec.Program`, :func:`run_constants_in_jax` what ``jax.jit`` does with
the real function (every stage; the lowered program's aliased parameters;
``describe_program`` of it), :func:`compare_constants` every disagreement, recording each
rule's sides under :data:`SOURCE`.

JAX reads the flag that hoists constants as arguments when it is imported, so a case with
``hoist=True`` runs in a worker process started with the flag on
(:class:`HoistingWorker`, ``python -m shardlaw.properties.program_constants_harness``),
``describe_program`` of the real function included.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
import subprocess
import sys
from typing import Any

from hypothesis import strategies as st

from shardlaw.properties import hits
from shardlaw.properties.program_harness import (
    Case, compare_results, input_on, program_meshes, run_body, sharding_on, steps_on, FACTORS,
    JaxOutcome, SHAPES, program_of, stage_in_jax, top_options, arguments_of, primal_only,
)
from shardlaw.spec import UNSPECIFIED, SingleDeviceSharding, explain_program, to_jax
from shardlaw.spec.program.description import Const, Opaque, Program, Value

__all__ = ["Held", "ConstCase", "USES", "constants_program_of", "constants_function_of",
           "run_constants_in_jax", "compare_constants", "constant_cases", "SOURCE",
           "constant_hit_counts", "HoistingWorker", "RULES"]

SOURCE = "programs-constants"
RULES = ("CONST-1", "CONST-2", "REF-1", "REF-2", "REF-3")

# How a held value is used after the recipe's body: a constant's sin returned or dead; a
# ref read and returned, read and dead, or written with the sin of what it holds.
USES = {"constant": ("returned", "dead"), "ref": ("read", "dead", "written")}
SIN = (("accuracy", None),)
INDEXED = (("tree", "PyTreeDef(())"),)   # r[...]: the get/swap parameters jax 0.10.2 gives


def constant_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting side, other side) over the cases compared so far."""
    return hits.counts(SOURCE)


@dataclasses.dataclass(frozen=True)
class Held:
    """A value the program holds besides its recipe's arguments: ``role`` is
    ``constant``, ``ref`` (closed over) or ``ref_arg`` (passed last); ``source`` how it is
    made — ``numpy``, ``uncommitted`` (jnp) or ``placed`` (device_put to ``sharding``);
    ``use`` one of :data:`USES`; ``donated`` (a ref argument only)."""

    role: str
    source: str
    use: str
    sharding: Any = None
    donated: bool = False

    def value(self, shape: tuple[int, ...]) -> Value:
        """Its spec value: a ref is committed wherever it lands (device 0 unless placed)."""
        if self.source == "numpy" and self.role == "constant":
            return Value.numpy(shape)
        if self.source == "placed":
            return Value.placed(shape, self.sharding)
        committed = self.role != "constant"
        return Value.placed(shape, SingleDeviceSharding(0), committed=committed)


@dataclasses.dataclass(frozen=True)
class ConstCase:
    """A recipe's program with held values, and whether JAX hoists constants."""

    case: Case
    held: tuple[Held, ...]
    hoist: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.case.inputs[0].shape

    def order(self) -> tuple[list[int], list[int]]:
        """The held values in the order the description numbers them: the ref arguments
        (inputs after the recipe's), then the closed-over refs and then the constants."""
        args = [k for k, h in enumerate(self.held) if h.role == "ref_arg"]
        consts = [k for k, h in enumerate(self.held) if h.role == "ref"] + \
            [k for k, h in enumerate(self.held) if h.role == "constant"]
        return args, consts


# --------------------------------------------------------------------------- the spec side

def _uses(h: Held, number: int, first: int, t: Value) -> tuple[list, list[int]]:
    """The equations using held value ``number`` (results numbered from ``first``) and the
    numbers of those returned."""
    if h.role == "constant":
        return [Opaque((number,), (t,), primitive="sin", params=SIN)], \
            ([first] if h.use == "returned" else [])
    read = Opaque((number,), (t,), primitive="get", params=INDEXED)
    if h.use != "written":
        return [read], ([first] if h.use == "read" else [])
    return [read, Opaque((first,), (t,), primitive="sin", params=SIN),
            Opaque((number, first + 1), (t,), primitive="swap", params=INDEXED)], []


def constants_program_of(cc: ConstCase) -> Program:
    """The case's Program: the recipe's, its values renumbered past the ref arguments and
    the constants, then the held values' equations (in the order the function runs them)
    and their returned results."""
    base, shape = program_of(cc.case), cc.shape
    args, consts = cc.order()
    n_in, shift = len(base.inputs), len(args) + len(consts)

    def moved(n: int) -> int:
        return n if n < n_in else n + shift

    equations = [dataclasses.replace(eq, operands=tuple(map(moved, eq.operands)))
                 for eq in base.equations]
    outputs = [moved(n) for n in base.outputs]
    number_of = {k: n_in + i for i, k in enumerate(args + consts)}
    first = n_in + shift + sum(len(eq.results) for eq in equations)
    for k, h in enumerate(cc.held):
        t = h.value(shape).type
        more, returned = _uses(h, number_of[k], first, t)
        equations += more
        outputs += returned
        first += len(more)
    extra = len(outputs) - len(base.outputs)
    return Program(
        base.inputs + tuple(cc.held[k].value(shape) for k in args), tuple(equations),
        tuple(outputs), tuple(Const(cc.held[k].value(shape), cc.held[k].role == "ref")
                              for k in consts),
        out_shardings=base.out_shardings + (UNSPECIFIED,) * extra if base.out_shardings
        else (), keep_unused=base.keep_unused,
        refs=(False,) * n_in + (True,) * len(args),
        donated=(False,) * n_in + tuple(cc.held[k].donated for k in args),
        hoist_constants=cc.hoist)


# --------------------------------------------------------------------------- the JAX side

def _made(h: Held, shape: tuple[int, ...]) -> Any:
    import jax
    import jax.numpy as jnp
    import numpy as np

    data = np.linspace(0.5, 1.5, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    value: Any = {"numpy": lambda: data, "uncommitted": lambda: jnp.asarray(data),
                  "placed": lambda: jax.device_put(data, to_jax(h.sharding))}[h.source]()
    return value if h.role == "constant" else jax.new_ref(value)


def constants_function_of(cc: ConstCase) -> tuple[Any, tuple, dict]:
    """The real function (not yet jitted), its arguments and the top-level jit's options;
    the held values are made afresh (a ref is written by a call)."""
    import jax.numpy as jnp

    made = [_made(h, cc.shape) for h in cc.held]
    n_in = len(cc.case.inputs)

    def program(*args: Any) -> tuple:
        outs = list(run_body(cc.case.body, list(args[:n_in])))
        passed = iter(args[n_in:])
        for h, value in zip(cc.held, made):
            value = next(passed) if h.role == "ref_arg" else value
            if h.role == "constant":
                y = jnp.sin(value)
                outs += [y] if h.use == "returned" else []
            elif h.use == "written":
                value[...] = jnp.sin(value[...])
            else:
                y = value[...]
                outs += [y] if h.use == "read" else []
        return tuple(outs)

    args = arguments_of(cc.case) + tuple(m for h, m in zip(cc.held, made) if h.role == "ref_arg")
    extra = len(constants_program_of(cc).outputs) - len(cc.case.body.outputs)
    case = cc.case
    if case.out_shardings:
        case = dataclasses.replace(case, out_shardings=case.out_shardings
                                   + (UNSPECIFIED,) * extra)
    options = top_options(case)
    donated = [n_in + i for i, h in enumerate(h for h in cc.held if h.role == "ref_arg")
               if h.donated]
    if donated:
        options["donate_argnums"] = tuple(donated)
    return program, args, options


@dataclasses.dataclass
class Observed:
    """What JAX did, in plain values (it crosses from the hoisting worker): as
    :class:`~shardlaw.properties.program_harness.JaxOutcome`, the error as its class names
    and words, and how many parameters the lowered program aliases to results."""

    outcome: JaxOutcome
    error_names: tuple[str, ...] = ()
    error_text: str = ""
    aliased: int | None = None


def run_constants_in_jax(cc: ConstCase, describe: bool = True) -> Observed:
    """Trace, lower, compile and run ``jax.jit`` of the case's function."""
    import jax

    from shardlaw.spec.bridge.program import describe_program

    hits.record_jax_calls(1)
    observed = Observed(JaxOutcome())
    outcome = observed.outcome
    fun, args, options = constants_function_of(cc)
    jitted = jax.jit(fun, **options)

    def seen(stage: str, what: Any) -> None:
        if stage == "trace" and describe:
            outcome.described = describe_program(jitted, *args)
        if stage == "lower":
            observed.aliased = what.as_text().count("tf.aliasing_output")

    error = stage_in_jax(jitted, args, outcome, after=seen)
    if error is not None:
        outcome.error = None   # it crosses from the hoisting worker as its names and words
        observed.error_names = tuple(c.__name__ for c in type(error).__mro__)
        observed.error_text = str(error)
    return observed


# --------------------------------------------------------------------------- comparing

def with_compiler(program: Program, outcome: JaxOutcome) -> Program:
    """The program with the compiler's placements JAX reported, where the spec leaves them
    to it: of its own results (a ref's update adds results after them), and of the
    executable's inputs — the hoisted constants, the kept arguments, the closed-over refs."""
    from shardlaw.spec.program.constants import hoisted_constants, ref_inputs
    from shardlaw.spec.program.lowering import live_parts

    changes: dict[str, Any] = {}
    if outcome.compiler is not None:
        changes["compiler"] = tuple(outcome.compiler[:len(program.outputs)])
    front = len(hoisted_constants(program)) if program.hoist_constants else 0
    closed = [p for p, _ in ref_inputs(program) if not p.startswith("args[")]
    kept = [i for i, used in enumerate(live_parts(program).inputs)
            if used or program.keep_unused]
    taken = outcome.compiler_in
    if taken is not None and len(taken) == front + len(kept) + len(closed):
        choices: list[Any] = [None] * len(program.inputs)
        for i, choice in zip(kept, taken[front:]):
            choices[i] = choice
        changes["compiler_in"] = tuple(choices)
        changes["compiler_consts"] = tuple(taken[:front])
    return dataclasses.replace(program, **changes)


def compare_constants(cc: ConstCase, observed: Observed | None = None) -> list[str]:
    """Every disagreement between the spec and JAX on ``cc`` (empty: they agree)."""
    program = constants_program_of(cc)
    observed = observed or run_constants_in_jax(cc)
    outcome = observed.outcome
    verdict = explain_program(with_compiler(program, outcome))
    problems = []
    if outcome.described is not None and primal_only(outcome.described) != program:
        problems.append(f"describe_program gives {outcome.described!r}, the case {program!r}")
    if outcome.stage is not None:
        said = f"JAX refused at {outcome.stage} with {observed.error_names[0]}: " \
               f"{observed.error_text[:400]}"
        if verdict.accepted:
            problems.append(f"{said}; the spec accepts")
        elif verdict.stage != outcome.stage or not (
                {verdict.jax_error, verdict.error_type} & set(observed.error_names)):
            problems.append(f"{said}; the spec at {verdict.stage} with {verdict.jax_error}: "
                            f"{verdict.message}")
    elif not verdict.accepted:
        problems.append(f"JAX accepts; the spec refuses: {verdict.message}")
    else:
        problems += compare_results(verdict, outcome)
        if observed.aliased != len(verdict.ref_updates):
            problems.append(f"aliased ref updates: spec {verdict.ref_updates}, JAX aliases "
                            f"{observed.aliased} parameter(s)")
    if not problems:
        _record(cc, program, verdict)
    return problems


def _record(cc: ConstCase, program: Program, verdict: Any) -> None:
    """The sides each rule was seen on, for a case the spec and JAX agree on."""
    for rule_id in verdict.trace:
        if rule_id not in RULES:
            hits.record(SOURCE, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)
    from shardlaw.spec.program.constants import hoisted_constants, ref_inputs

    hoisted = {path for path, _ in hoisted_constants(program)}
    count = sum(1 for c in program.consts if not c.ref)
    # CONST-1's two outcomes: hoisted, or embedded; CONST-2's: on its sharding, or open.
    hits.record(SOURCE, "CONST-1", refused=False, count=len(hoisted))
    hits.record(SOURCE, "CONST-1", refused=True, count=count - len(hoisted))
    for path, const in hoisted_constants(program):
        hits.record(SOURCE, "CONST-2", refused=not const.value.committed)
    taking_part = dict(ref_inputs(program)) if any(program.refs) or any(
        c.ref for c in program.consts) else {}
    refs = sum(program.refs) + sum(c.ref for c in program.consts)
    # REF-1's: a ref that takes part, or one dropped; REF-2's: written, or only read.
    hits.record(SOURCE, "REF-1", refused=False, count=len(taking_part))
    hits.record(SOURCE, "REF-1", refused=True, count=refs - len(taking_part))
    if verdict.accepted:
        for h in cc.held:
            if h.role != "constant" and h.use != "dead":
                hits.record(SOURCE, "REF-2", refused=h.use == "read")
    donated = [h for h in cc.held if h.role == "ref_arg" and h.donated]
    if donated:
        hits.record(SOURCE, "REF-3", refused=verdict.rule == "REF-3")


# --------------------------------------------------------------------------- drawing

@st.composite
def _held(draw: Any, meshes: Any, rank: int, hoist: bool) -> Held:
    role = draw(st.sampled_from(["constant", "constant", "ref", "ref_arg"]))
    source = draw(st.sampled_from(["placed", "placed", "numpy", "uncommitted"]))
    sharding = None
    if source == "placed":
        sharding = draw(sharding_on(meshes, rank))
    use = draw(st.sampled_from(USES["constant" if role == "constant" else "ref"]))
    donated = role == "ref_arg" and draw(st.integers(0, 2)) == 0
    return Held(role, source, use, sharding, donated)


def _fits(h: Held, shape: tuple[int, ...]) -> bool:
    """Whether a held value can exist: its sharding divides its shape."""
    try:
        h.value(shape)
    except Exception:  # noqa: BLE001 - a drawn sharding that does not divide the shape
        return False
    return True


@st.composite
def constant_cases(draw: Any, hoist: bool = False) -> ConstCase:
    """A drawn program with 1 to 3 held values: 1 to 8 devices, one or two arguments, 0 to
    3 recipe equations (the recipe strategies of program_harness)."""
    n = draw(st.sampled_from([1, 2, 4, 8]))
    meshes = program_meshes(n, draw(st.sampled_from(FACTORS[n])))
    shape = draw(st.sampled_from(SHAPES))
    inputs = tuple(draw(input_on(meshes, shape)) for _ in range(draw(st.integers(1, 2))))
    steps = draw(steps_on(meshes, len(shape), len(inputs), draw(st.integers(0, 3)), 1))
    last = len(inputs) + len(steps) - 1
    recipe = draw(st.sampled_from([(last,), (last, 0)]))
    out_shardings: tuple = ()
    if draw(st.integers(0, 5)) == 0:
        out_shardings = tuple(
            draw(st.one_of(st.just(UNSPECIFIED), sharding_on(meshes, len(shape))))
            for _ in recipe)
    from shardlaw.properties.program_harness import Recipe

    case = Case(inputs, Recipe(steps, recipe), out_shardings,
                keep_unused=draw(st.integers(0, 5)) == 0)
    held = [draw(_held(meshes, len(shape), hoist)) for _ in range(draw(st.integers(1, 3)))]
    held = tuple(h if _fits(h, shape) else dataclasses.replace(h, source="numpy", sharding=None)
                 for h in held)
    return ConstCase(case, held, hoist)


# --------------------------------------------------------------------------- hoisting

class HoistingWorker:
    """A process that runs cases under ``jax.jit`` with constants hoisted as arguments
    (``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` when it imports JAX); one case at a time."""

    def __init__(self) -> None:
        import os

        env = dict(os.environ, JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shardlaw.properties.program_constants_harness"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def run(self, cc: ConstCase) -> Observed:
        assert cc.hoist
        _send(self.process.stdin, cc)
        observed = _receive(self.process.stdout)
        hits.record_jax_calls(1)
        return observed

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _send(stream: Any, value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the hoisting worker ended")
    return pickle.loads(stream.read(struct.unpack("<Q", head)[0]))


def _serve() -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", 8)
    from jax._src.interpreters import mlir

    assert mlir.LoweringParameters().hoist_constants_as_args, "start with the flag on"
    while True:
        try:
            cc = _receive(sys.stdin.buffer)
        except EOFError:
            return
        _send(sys.stdout.buffer, run_constants_in_jax(cc))


if __name__ == "__main__":
    # through the module's own name, so what it sends unpickles as this module's classes
    from shardlaw.properties.program_constants_harness import _serve as serve
    serve()

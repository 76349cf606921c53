"""Differentiating through a jit call: the jit equations JVP, linearization and transpose stage.

``jax.grad`` of a function that calls a jitted function does not see through the call: it
asks the jit primitive's own rules to differentiate it, and each rule stages a new ``jit``
equation whose ``in_shardings``, ``out_shardings`` and ``donated_invars`` are built from the
original's. This module says what they are.

Two values describe a question. A :class:`JitEquation` holds the sharding parameters of
the equation being differentiated: one sharding (or :data:`UNSPECIFIED`) per input and per
output, and whether each input is donated. A :class:`JitBody` holds the facts about the
traced function that differentiation needs and that no sharding decides: which inputs each
output depends on, which outputs return an input unchanged, and how many residuals the
linearization saves (JAX's ``ad.linearize_jaxpr`` counts them; a sharding never changes
the count).

The rules, in the order ``jax.grad`` meets them:

* AD-0: the description is well-formed;
* AD-1: an output's tangent is a symbolic zero unless it depends on an input whose tangent
  is not;
* AD-2: the JVP equation (``jax.jvp``): primals, then the non-zero tangents, each with its
  primal's sharding and donation;
* AD-3: the primal equation of a linearization (``jax.linearize``, ``jax.vjp``,
  ``jax.grad``): the primal outputs, without those that only forward an input, then the
  residuals, unspecified;
* AD-4: the tangent equation (the linear function ``jax.linearize`` returns);
* AD-5: the transposed equation (the backward pass of ``jax.vjp`` and ``jax.grad``);
* AD-6 to AD-8, partial evaluation and dead-code elimination of a jit, are rewrites of
  the jit's whole program: :mod:`shardlaw.spec.program.partial_eval` (``known_program``,
  ``unknown_program``, ``dce_program``). Their per-equation forms (``known_equation``,
  ``unknown_equation``, ``partially_evaluated``, ``pruned_equation``) were retired with
  the transformed-call path (issue 31, docs/programs.rst); asking for one names its
  replacement.

Layouts are not modelled: every equation here has default layouts (an output given a layout
is kept as one given a sharding would be).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import IllFormedParameter, Failure, reject, require, rule
from ..core.shardings import UNSPECIFIED, NamedSharding, Sharding  # noqa: F401 - NamedSharding: examples
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = [
    "JitEquation", "JitBody", "nonzero_outputs", "jvp_equation",
    "linearized_primal", "linearized_tangent", "linearized_equations", "transposed_equation",
    "check_result_mesh", "all_explicit",
]

# A description longer than this is refused (AD-0): no jit equation has so many operands.
MAX_OPERANDS = 100_000


# --------------------------------------------------------------------------- AD-0

@dataclasses.dataclass(frozen=True)
class IllFormed(IllFormedParameter, rule="AD-0"):
    pass


@dataclasses.dataclass(frozen=True)
class Inconsistent(Failure, rule="AD-0"):
    template = "{parameter} {problem}"
    parameter: str
    problem: str


def _is_sharding(value: Any) -> bool:
    return value is UNSPECIFIED or isinstance(value, Sharding)


def _sequence(value: Any, parameter: str, expected: str) -> tuple:
    """``value`` as a tuple if it is a tuple or a list of at most MAX_OPERANDS entries."""
    if not isinstance(value, (tuple, list)) or len(value) > MAX_OPERANDS:
        raise reject(IllFormed(parameter, expected, value))
    return tuple(value)


def _booleans(value: Any, parameter: str, count: int | None = None) -> tuple[bool, ...]:
    expected = "a tuple of booleans" if count is None else \
        f"a tuple of {count} boolean{'' if count == 1 else 's'}"
    entries = _sequence(value, parameter, expected)
    require(all(type(x) is bool for x in entries), lambda: IllFormed(parameter, expected, value))
    require(count is None or len(entries) == count, lambda: IllFormed(parameter, expected, value))
    return entries


def _count(value: Any, parameter: str, most: int = MAX_OPERANDS) -> int:
    require(type(value) is int and 0 <= value <= most,
            lambda: IllFormed(parameter, f"an integer from 0 to {most}", value))
    return value


def _index_set(value: Any, parameter: str, count: int, what: str = "input"
               ) -> frozenset[int]:
    expected = (f"a set of {what} positions from 0 to {count - 1}" if count else
                f"an empty set (there is no {what})")
    if not isinstance(value, (tuple, list, set, frozenset)) or len(value) > MAX_OPERANDS:
        raise reject(IllFormed(parameter, expected, value))
    require(all(type(i) is int and 0 <= i < count for i in value),
            lambda: IllFormed(parameter, expected, value))
    return frozenset(value)


@rule("AD-0", mirrors="(input checking; JAX builds these parameters itself)")
def check_shardings(value: Any, parameter: str) -> tuple:
    """A description of a differentiated jit equation holds one sharding or UNSPECIFIED per operand, one boolean per flag, and positions and counts within the equation's operands.

    >>> check_shardings((UNSPECIFIED, "x"), "in_shardings")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [AD-0]: in_shardings must be a tuple of shardings or UNSPECIFIED, got (UNSPECIFIED, 'x')
    >>> JitBody(inputs=2, dependencies=[{0}, {2}])
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [AD-0]: dependencies[1] must be a set of input positions from 0 to 1, got {2}
    """
    expected = "a tuple of shardings or UNSPECIFIED"
    entries = _sequence(value, parameter, expected)
    require(all(_is_sharding(s) for s in entries), lambda: IllFormed(parameter, expected, value))
    return entries


def _check_pair(equation: Any, body: Any) -> None:
    """The equation and the body describe the same call (AD-0)."""
    require(isinstance(equation, JitEquation),
            lambda: IllFormed("primal_equation", "a JitEquation", equation))
    require(isinstance(body, JitBody), lambda: IllFormed("jit_body", "a JitBody", body))
    ins, outs = len(equation.in_shardings), len(equation.out_shardings)
    require(ins == body.inputs and outs == len(body.dependencies), lambda: Inconsistent(
        "jit_body", f"describes {body.inputs} inputs and {len(body.dependencies)} outputs, "
                    f"but the equation has {ins} inputs and {outs} outputs"))


def _check_facts(equation: Any, body: Any, flags: Any, name: str = "nonzero_tangents"
                 ) -> tuple[bool, ...]:
    """The equation and the body describe the same call; one flag per input (AD-0)."""
    _check_pair(equation, body)
    return _booleans(flags, name, body.inputs)


# --------------------------------------------------------------------------- values

@dataclasses.dataclass(frozen=True, init=False)
class JitEquation:
    """The sharding parameters of one ``jit`` equation of a jaxpr: ``in_shardings``,
    ``out_shardings`` (a sharding or UNSPECIFIED each) and ``donated_invars``.

    >>> JitEquation((UNSPECIFIED,), (UNSPECIFIED, UNSPECIFIED))
    JitEquation(in_shardings=(UNSPECIFIED,), out_shardings=(UNSPECIFIED, UNSPECIFIED), donated_invars=(False,))
    """

    in_shardings: tuple
    out_shardings: tuple
    donated_invars: tuple[bool, ...]

    def __init__(self, in_shardings: Any, out_shardings: Any,
                 donated_invars: Any = None) -> None:
        ins = check_shardings(in_shardings, "in_shardings")
        outs = check_shardings(out_shardings, "out_shardings")
        donated = (False,) * len(ins) if donated_invars is None else \
            _booleans(donated_invars, "donated_invars", len(ins))
        object.__setattr__(self, "in_shardings", ins)
        object.__setattr__(self, "out_shardings", outs)
        object.__setattr__(self, "donated_invars", donated)


@dataclasses.dataclass(frozen=True, init=False)
class JitBody:
    """What differentiation needs to know of a jitted function's body, besides shardings.

    ``dependencies[j]``: the inputs output ``j`` is computed from (AD-1 takes every path as
    differentiable, as in float arithmetic; an integer path would make JAX's tangent a
    zero where this model does not); ``forwarded[j]``:
    the input output ``j`` returns unchanged (None: it computes something); ``residuals``:
    how many residuals the tangent equation takes; ``stored_residuals``: how many of them
    the primal equation computes and returns (the others are inputs or primal outputs);
    ``residual_uses[j]``: the residuals (positions below ``residuals``) that the tangent of
    output ``j`` reads (default: all of them).

    >>> JitBody(inputs=2, dependencies=[{0, 1}, {1}], forwarded=[None, 1], residuals=2,
    ...         stored_residuals=1).forwarded
    (None, 1)
    """

    inputs: int
    dependencies: tuple[frozenset[int], ...]
    forwarded: tuple[int | None, ...]
    residuals: int
    stored_residuals: int
    residual_uses: tuple[frozenset[int], ...]

    def __init__(self, inputs: Any, dependencies: Any, forwarded: Any = None,
                 residuals: Any = 0, stored_residuals: Any = 0,
                 residual_uses: Any = None) -> None:
        inputs = _count(inputs, "inputs")
        entries = _sequence(dependencies, "dependencies", "a tuple of sets, one per output")
        deps = tuple(_index_set(d, f"dependencies[{j}]", inputs) for j, d in enumerate(entries))
        forwards = _forwards(forwarded, deps, inputs)
        residuals = _count(residuals, "residuals")
        stored = _count(stored_residuals, "stored_residuals", residuals)
        uses = _residual_uses(residual_uses, len(deps), residuals)
        for name, value in (("inputs", inputs), ("dependencies", deps), ("forwarded", forwards),
                            ("residuals", residuals), ("stored_residuals", stored),
                            ("residual_uses", uses)):
            object.__setattr__(self, name, value)


def _residual_uses(residual_uses: Any, outputs: int, residuals: int
                   ) -> tuple[frozenset[int], ...]:
    """One set of residual positions per output (AD-0); None: every output reads them all."""
    if residual_uses is None:
        return (frozenset(range(residuals)),) * outputs
    entries = _sequence(residual_uses, "residual_uses", f"a tuple of {outputs} sets")
    require(len(entries) == outputs,
            lambda: IllFormed("residual_uses", f"a tuple of {outputs} sets", residual_uses))
    return tuple(_index_set(u, f"residual_uses[{j}]", residuals, "residual")
                 for j, u in enumerate(entries))


def _forwards(forwarded: Any, deps: tuple[frozenset[int], ...], inputs: int
              ) -> tuple[int | None, ...]:
    """One entry per output: None, or the input it returns, on which alone it depends (AD-0)."""
    if forwarded is None:
        return (None,) * len(deps)
    expected = f"a tuple of {len(deps)} input positions or None"
    entries = _sequence(forwarded, "forwarded", expected)
    require(len(entries) == len(deps), lambda: IllFormed("forwarded", expected, forwarded))
    for j, i in enumerate(entries):
        require(i is None or (type(i) is int and 0 <= i < inputs),
                lambda: IllFormed("forwarded", expected, forwarded))
        require(i is None or deps[j] == {i}, lambda j=j, i=i: Inconsistent(
            f"forwarded[{j}]", f"says output {j} returns input {i}, so it depends on input "
                               f"{i} alone, but dependencies[{j}] is {set(deps[j]) or '{}'}"))
    return entries


@dataclasses.dataclass(frozen=True)
class Linearized:
    """The equations a linearization stages: the primal one, and the tangent one (None when
    no input has a non-zero tangent: JAX then leaves the call as it is)."""

    primal: JitEquation
    tangent: JitEquation | None


def _keep(values: tuple, flags: tuple[bool, ...]) -> tuple:
    return tuple(v for v, keep in zip(values, flags) if keep)


def _received(jit_body: JitBody, nonzero_tangents: tuple[bool, ...],
              cotangent_outputs: tuple[bool, ...]) -> tuple[bool, ...]:
    """The outputs whose tangent is not zero and whose cotangent is used."""
    return tuple(nz and used for nz, used in
                 zip(nonzero_outputs(jit_body, nonzero_tangents), cotangent_outputs))


# --------------------------------------------------------------------------- AD-1

@rule("AD-1", mirrors="jax._src.interpreters.ad.jvp_jaxpr")
def nonzero_outputs(jit_body: JitBody, nonzero_tangents: Any) -> tuple[bool, ...]:
    """An output's tangent is a symbolic zero unless the output depends on an input whose tangent is not.

    >>> body = JitBody(inputs=2, dependencies=[{0}, {1}, {0, 1}])
    >>> nonzero_outputs(body, (True, False))
    (True, False, True)
    """
    require(isinstance(jit_body, JitBody), lambda: IllFormed("jit_body", "a JitBody", jit_body))
    nonzero = _booleans(nonzero_tangents, "nonzero_tangents", jit_body.inputs)
    moving = {i for i, nz in enumerate(nonzero) if nz}
    return tuple(bool(deps & moving) for deps in jit_body.dependencies)


# --------------------------------------------------------------------------- AD-2

@rule("AD-2", mirrors="jax._src.pjit._pjit_jvp")
def jvp_equation(primal_equation: JitEquation, jit_body: JitBody, nonzero_tangents: Any
                 ) -> JitEquation:
    """The JVP of a jit equation takes the primals, then each non-zero tangent with its primal's sharding and donation, and returns the primal outputs, then each non-zero output tangent with its output's sharding.

    >>> mesh = Mesh.iota((2, 4), ("data", "model"))
    >>> rows, cols = NamedSharding(mesh, P("data")), NamedSharding(mesh, P(None, "model"))
    >>> eqn = JitEquation((rows, cols), (NamedSharding(mesh, P()),), (False, True))
    >>> jvp_equation(eqn, JitBody(inputs=2, dependencies=[{0, 1}]), (False, True))
    JitEquation(in_shardings=(NamedSharding(Mesh({'data': 2, 'model': 4}), P('data')), NamedSharding(Mesh({'data': 2, 'model': 4}), P(None, 'model')), NamedSharding(Mesh({'data': 2, 'model': 4}), P(None, 'model'))), out_shardings=(NamedSharding(Mesh({'data': 2, 'model': 4}), P()), NamedSharding(Mesh({'data': 2, 'model': 4}), P())), donated_invars=(False, True, True))

    With no non-zero tangent JAX does not differentiate the call: the equation stays as it is.
    """
    nonzero = _check_facts(primal_equation, jit_body, nonzero_tangents)
    if not any(nonzero):
        return primal_equation
    moving_out = nonzero_outputs(jit_body, nonzero)
    eqn = primal_equation
    return JitEquation(eqn.in_shardings + _keep(eqn.in_shardings, nonzero),
                       eqn.out_shardings + _keep(eqn.out_shardings, moving_out),
                       eqn.donated_invars + _keep(eqn.donated_invars, nonzero))


# --------------------------------------------------------------------------- AD-3

@rule("AD-3", mirrors="jax._src.pjit._pjit_linearize; jax._src.pjit._pjit_partial_eval")
def linearized_primal(primal_equation: JitEquation, jit_body: JitBody, nonzero_tangents: Any
                      ) -> JitEquation:
    """Linearizing a jit equation stages it again with its inputs, shardings and donation, minus each output that returns an input and has no out_sharding, plus one UNSPECIFIED output per stored residual.

    >>> mesh = Mesh.iota((2, 4), ("data", "model"))
    >>> rows = NamedSharding(mesh, P("data"))
    >>> eqn = JitEquation((rows, rows), (NamedSharding(mesh, P()), UNSPECIFIED, rows))
    >>> body = JitBody(inputs=2, dependencies=[{0}, {1}, {1}], forwarded=[None, 1, 1],
    ...                residuals=2, stored_residuals=1)
    >>> linearized_primal(eqn, body, (True, True)).out_shardings
    (NamedSharding(Mesh({'data': 2, 'model': 4}), P()), NamedSharding(Mesh({'data': 2, 'model': 4}), P('data')), UNSPECIFIED)

    Output 1 returns input 1 and has no out_sharding: the caller takes the input itself.
    Output 2 returns it too, but its out_sharding asks for a placement: it stays.
    """
    nonzero = _check_facts(primal_equation, jit_body, nonzero_tangents)
    if not any(nonzero):
        return primal_equation
    eqn = primal_equation
    kept = tuple(not (i is not None and s is UNSPECIFIED)
                 for i, s in zip(jit_body.forwarded, eqn.out_shardings))
    return JitEquation(eqn.in_shardings,
                       _keep(eqn.out_shardings, kept) + (UNSPECIFIED,) * jit_body.stored_residuals,
                       eqn.donated_invars)


# --------------------------------------------------------------------------- AD-4

@rule("AD-4", mirrors="jax._src.pjit._pjit_linearize.tangent_fun; jax._src.pjit.dce_jaxpr_pjit_rule")
def linearized_tangent(primal_equation: JitEquation, jit_body: JitBody, nonzero_tangents: Any
                       ) -> JitEquation | None:
    """The tangent equation of a linearized jit call takes the residuals it reads (UNSPECIFIED, not donated), then each tangent it reads with its primal's sharding and donation, and returns the non-zero output tangents with their outputs' shardings.

    It reads the tangent of an input that is not zero and on which a non-zero output
    depends (dead-code elimination drops the others); with no non-zero output there is no
    tangent equation (None).

    >>> mesh = Mesh.iota((2, 4), ("data", "model"))
    >>> rows = NamedSharding(mesh, P("data"))
    >>> eqn = JitEquation((rows, UNSPECIFIED), (NamedSharding(mesh, P()), rows), (True, False))
    >>> body = JitBody(inputs=2, dependencies=[{0}, {1}], residuals=1, stored_residuals=1)
    >>> tangent = linearized_tangent(eqn, body, (True, False))
    >>> tangent.in_shardings, tangent.donated_invars
    ((UNSPECIFIED, NamedSharding(Mesh({'data': 2, 'model': 4}), P('data'))), (False, True))
    >>> tangent.out_shardings
    (NamedSharding(Mesh({'data': 2, 'model': 4}), P()),)
    """
    nonzero = _check_facts(primal_equation, jit_body, nonzero_tangents)
    moving_out = nonzero_outputs(jit_body, nonzero)
    if not any(moving_out):
        return None
    eqn = primal_equation
    read, reached = _reads(jit_body, nonzero, moving_out)
    return JitEquation((UNSPECIFIED,) * read + _keep(eqn.in_shardings, reached),
                       _keep(eqn.out_shardings, moving_out),
                       (False,) * read + _keep(eqn.donated_invars, reached))


def _reads(jit_body: JitBody, nonzero: tuple[bool, ...], outputs: tuple[bool, ...]
           ) -> tuple[int, tuple[bool, ...]]:
    """How many residuals the tangents of ``outputs`` read, and which input tangents."""
    chosen = [j for j, flag in enumerate(outputs) if flag]
    residuals = set().union(*(jit_body.residual_uses[j] for j in chosen))
    inputs = set().union(*(jit_body.dependencies[j] for j in chosen))
    return len(residuals), tuple(nz and i in inputs for i, nz in enumerate(nonzero))


def linearized_equations(primal_equation: JitEquation, jit_body: JitBody,
                         nonzero_tangents: Any) -> Linearized:
    """Both equations of a linearization: the primal one (AD-3) and the tangent one (AD-4).

    >>> eqn = JitEquation((UNSPECIFIED,), (UNSPECIFIED,))
    >>> linearized_equations(eqn, JitBody(inputs=1, dependencies=[{0}]), (True,)).tangent
    JitEquation(in_shardings=(UNSPECIFIED,), out_shardings=(UNSPECIFIED,), donated_invars=(False,))
    """
    return Linearized(linearized_primal(primal_equation, jit_body, nonzero_tangents),
                      linearized_tangent(primal_equation, jit_body, nonzero_tangents))


# --------------------------------------------------------------------------- AD-5

@rule("AD-5", mirrors="jax._src.pjit._pjit_transpose_fancy; jax._src.pjit.dce_jaxpr_pjit_rule")
def transposed_equation(primal_equation: JitEquation, jit_body: JitBody, nonzero_tangents: Any,
                        cotangent_outputs: Any) -> JitEquation | None:
    """The transposed jit equation takes the residuals its cotangents need (UNSPECIFIED), then each used output cotangent with its output's sharding, and returns each reached input's cotangent with its in_sharding; nothing is donated.

    A used output is one whose cotangent the caller passes (``jax.vjp``) or reads
    (``jax.grad``: the outputs the loss uses); an input is reached when a used output with
    a non-zero tangent depends on it and its own tangent is not zero. With no such output no
    transposed equation is staged (None).

    >>> mesh = Mesh.iota((2, 4), ("data", "model"))
    >>> rows, cols = NamedSharding(mesh, P("data")), NamedSharding(mesh, P(None, "model"))
    >>> eqn = JitEquation((rows, cols), (NamedSharding(mesh, P()), cols), (True, False))
    >>> body = JitBody(inputs=2, dependencies=[{0}, {1}], residuals=1, stored_residuals=1,
    ...                residual_uses=[{0}, set()])
    >>> back = transposed_equation(eqn, body, (True, True), (True, False))
    >>> back.in_shardings
    (UNSPECIFIED, NamedSharding(Mesh({'data': 2, 'model': 4}), P()))
    >>> back.out_shardings, back.donated_invars
    ((NamedSharding(Mesh({'data': 2, 'model': 4}), P('data')),), (False, False))
    """
    nonzero = _check_facts(primal_equation, jit_body, nonzero_tangents)
    used = _booleans(cotangent_outputs, "cotangent_outputs", len(jit_body.dependencies))
    received = _received(jit_body, nonzero, used)
    if not any(received):
        return None
    eqn = primal_equation
    read, reached = _reads(jit_body, nonzero, received)
    ins = (UNSPECIFIED,) * read + _keep(eqn.out_shardings, received)
    return JitEquation(ins, _keep(eqn.in_shardings, reached), (False,) * len(ins))


# --------------------------------------------------------------------------- AD-9

# AD-9 is JAX's check of the out avals' meshes against the device assignment: any jit call
# meets it (a gradient found it first), so it is decided in the jit layer, where the jit
# pipeline's lowering stage asks it, and named here for the gradients that meet it.
from ..jit.assignment import MeshOfOtherSize, all_explicit, check_result_mesh  # noqa: E402,F401


# The per-equation forms of AD-6 to AD-8, retired (issue 31): name -> what answers instead.
RETIRED: dict[str, str] = {
    "known_equation": "shardlaw.spec.program.partial_eval.known_program (AD-6), through "
                      "partial_eval_program",
    "unknown_equation": "shardlaw.spec.program.partial_eval.unknown_program (AD-7), through "
                        "partial_eval_program",
    "partially_evaluated": "shardlaw.spec.program.partial_eval.partial_eval_program",
    "PartiallyEvaluated": "shardlaw.spec.program.partial_eval.PartiallyEvaluatedProgram",
    "pruned_equation": "shardlaw.spec.program.partial_eval.dce_program (AD-8)",
}


def __getattr__(name: str) -> Any:
    if name in RETIRED:
        raise AttributeError(f"{__name__}.{name} was retired with the transformed-call path "
                             f"(issue 31): use {RETIRED[name]} on the jit's Program "
                             f"(docs/programs.rst)", name=name, obj=None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

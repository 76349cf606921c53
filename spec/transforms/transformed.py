"""One front door for calls under transformations: what JAX builds, and which rules decided.

``jit_call`` answers for a plain jit call. Under ``vmap``, ``grad``/``jvp``/``linearize``,
``with_sharding_constraint``, ``shard_map`` or argument placement the spec answers with one
function per question (:mod:`~shardlaw.spec.transforms.batching`, :mod:`~shardlaw.spec.transforms.autodiff`,
:mod:`~shardlaw.spec.transforms.constraint`, :mod:`~shardlaw.spec.transforms.shardmap`,
:mod:`~shardlaw.spec.transforms.arguments`). A :class:`TransformedCall` names one of them
(:data:`TRANSFORMS`) and its keyword arguments; :func:`explain_transformed` asks it and
returns a :class:`TransformedVerdict`: the answer, or the rejection with its rule, path and
words, and in both cases the trace of the rules that fired, in order.

The JAX bridge (``shardlaw.spec.bridge.transforms``) builds a :class:`TransformedCall`
from real JAX objects, as ``describe_call`` builds a :class:`~shardlaw.spec.jit.call.Call`;
test vectors (``vectors/transforms/``) store one with its verdict.

Deprecated (issue 23): the registry and :func:`explain_transformed` retire onto whole
programs. A question with a whole-program form (:data:`PROGRAM_FORMS`) is asked by
describing the program (:class:`~shardlaw.spec.program.description.Program`), applying the
program transformation named there (``vmap_program``, ...) and asking
:func:`~shardlaw.spec.program.explain.explain_program`;
:mod:`shardlaw.spec.vectors.transformed_migration` writes a :class:`TransformedCall` so
(``ask_program``) and ``shardlaw vectors migrate`` its stored vectors; ``explain_transformed``
answers such a question through it (a thin layer: the program path is handed down in
:data:`PROGRAM_PATH`, this layer being below it), but for those in
:data:`ANSWERED_PER_EQUATION` (none now). The other questions stay, called directly by
their function.
Calling :func:`explain_transformed` warns (DeprecationWarning) and names what to use
instead; ``TRANSFORMS`` stays importable for its users.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, Callable, Mapping

from . import arguments
from . import autodiff
from . import batching
from . import constraint
from . import shardmap
from ..jit.call import check_call
from ..core.rules import Rejection, explain, tracing

__all__ = ["TRANSFORMS", "PROGRAM_FORMS", "PROGRAM_PATH", "ANSWERED_PER_EQUATION",
           "TransformedCall", "TransformedVerdict", "explain_transformed"]

# The questions a transformed call may ask: name -> the spec function that answers it.
TRANSFORMS: dict[str, Callable[..., Any]] = {
    function.__name__: function for function in (
        batching.vmap_jit, batching.batch_sharding,
        autodiff.nonzero_outputs, autodiff.jvp_equation, autodiff.linearized_primal,
        autodiff.linearized_tangent, autodiff.linearized_equations,
        autodiff.transposed_equation, autodiff.known_equation, autodiff.unknown_equation,
        autodiff.partially_evaluated, autodiff.pruned_equation,
        constraint.with_sharding_constraint, constraint.batch_constraint,
        constraint.lower_constraints, constraint.constrained_result,
        shardmap.check_shard_map, shardmap.manual_axes_of, shardmap.per_shard_shape,
        shardmap.unshard_shape, shardmap.replica_groups, shardmap.collective_groups,
        shardmap.manual_sharding,
        arguments.place_argument,
    )
}

# The questions with a whole-program form: name -> the program function to use instead
# (with explain_program; shardlaw.spec.vectors.transformed_migration asks them so).
PROGRAM_FORMS: dict[str, str] = {
    "vmap_jit": "shardlaw.spec.program.batching.vmap_program",
    "with_sharding_constraint": "a ShardingConstraint equation per constrained value",
    "constrained_result": "a ShardingConstraint equation whose result the program returns",
    "lower_constraints": "a ShardingConstraint equation per constraint, its results returned",
    "check_shard_map": "a ShardMap equation (its body's collectives as equations)",
    "jvp_equation": "shardlaw.spec.program.autodiff.jvp_program",
    "nonzero_outputs": "shardlaw.spec.program.autodiff.jvp_program",
    "batch_constraint": "shardlaw.spec.program.batching.vmap_program",
    "collective_groups": "a ShardMap equation whose body holds the collective "
                         "(ProgramVerdict.decided: its groups)",
    "replica_groups": "a ShardMap equation over the abstract mesh whose body holds the "
                      "collective (ProgramVerdict.decided: its groups)",
    "manual_axes_of": "a ShardMap equation (ProgramVerdict.decided: its manual axes)",
    "per_shard_shape": "a ShardMap equation (ProgramVerdict.decided: its body's input types)",
    "unshard_shape": "a ShardMap equation (its result's type)",
    "pruned_equation": "shardlaw.spec.program.partial_eval.dce_program",
    "linearized_equations": "shardlaw.spec.program.autodiff.linearize_program",
    "linearized_primal": "shardlaw.spec.program.autodiff.linearize_program",
    "linearized_tangent": "shardlaw.spec.program.autodiff.linearize_program",
    "transposed_equation": "shardlaw.spec.program.autodiff.vjp_program",
    "partially_evaluated": "shardlaw.spec.program.partial_eval.partial_eval_program",
    "known_equation": "shardlaw.spec.program.partial_eval.partial_eval_program",
    "unknown_equation": "shardlaw.spec.program.partial_eval.partial_eval_program",
}


def _parameters(transform: str) -> tuple[frozenset[str], frozenset[str]]:
    """The keyword parameters of a transform's function, and those without a default."""
    parameters = inspect.signature(TRANSFORMS[transform]).parameters.values()
    named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return (frozenset(p.name for p in named),
            frozenset(p.name for p in named if p.default is p.empty))


@dataclasses.dataclass(frozen=True)
class TransformedCall:
    """A question about a transformed call: the spec function ``transform`` (a key of
    :data:`TRANSFORMS`) and its keyword ``arguments`` (name, value pairs, in order).

    >>> from shardlaw.spec import Mesh, P, NamedSharding
    >>> question = TransformedCall.of("batch_sharding",
    ...     sharding=NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("y")), batch_axis=0, rank=1)
    >>> question.transform, [name for name, _ in question.arguments]
    ('batch_sharding', ['sharding', 'batch_axis', 'rank'])
    """

    transform: str
    arguments: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_call(isinstance(self.transform, str) and self.transform in TRANSFORMS,
                   "a transformed call's transform", f"one of {sorted(TRANSFORMS)}",
                   self.transform)
        pairs = self.arguments
        check_call(isinstance(pairs, tuple)
                   and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                           for p in pairs),
                   "a transformed call's arguments", "a tuple of (name, value) pairs",
                   pairs)
        names = [name for name, _ in pairs]
        check_call(len(set(names)) == len(names), "a transformed call's arguments",
                   "named once each", names)
        known, required = _parameters(self.transform)
        check_call(set(names) <= known, f"the arguments of {self.transform}",
                   f"among its parameters {sorted(known)}", names)
        check_call(required <= set(names), f"the arguments of {self.transform}",
                   f"given with its required parameters {sorted(required)}", names)

    @classmethod
    def of(cls, transform: str, **arguments: Any) -> "TransformedCall":
        """The question ``transform(**arguments)``."""
        return cls(transform, tuple(arguments.items()))

    @property
    def keywords(self) -> Mapping[str, Any]:
        """The arguments as a dictionary."""
        return dict(self.arguments)


@dataclasses.dataclass(frozen=True)
class TransformedVerdict:
    """The spec's answer to a :class:`TransformedCall`.

    Accepted: ``result``, what the transform's function returns. Rejected: ``rule``,
    ``error_type`` (the built-in exception type JAX raises), ``jax_error`` (JAX's own class
    name), ``message`` and ``path``. Both: ``trace``, the IDs of the rules that fired, in
    order (checks of the description itself are left out, as in a jit call's trace).
    """

    accepted: bool
    trace: tuple[str, ...] = ()
    result: Any = None
    rule: str | None = None
    error_type: str | None = None
    jax_error: str | None = None
    message: str | None = None
    path: str | None = None


def explain_transformed(call: TransformedCall) -> TransformedVerdict:
    """What the spec answers to ``call``, with the trace of the rules that fired.

    A thin layer over the program path: where the question has a program form
    (:data:`PROGRAM_FORMS`) and its own argument checks pass, the answer is the program
    path's (``shardlaw.spec.vectors.transformed_migration.ask_program``: the question's
    program, rewritten and explained); the per-equation function still checks the
    arguments first (its refusal is the answer: the program path gives the same on every
    stored vector) and gives the trace, the per-equation rules that fired. Questions
    without a program form are answered by their function.

    >>> from shardlaw.spec import Mesh, P, NamedSharding
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> verdict = explain_transformed(TransformedCall.of(
    ...     "vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))], result_shardings=[],
    ...     arg_shapes=[(3, 8)], result_ranks=[], spmd_axis_name="x"))
    >>> verdict.accepted, verdict.result.in_shardings
    (True, (NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', 'y')),))
    >>> "BAT-3" in verdict.trace
    True
    >>> refused = explain_transformed(TransformedCall.of(
    ...     "vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))], result_shardings=[],
    ...     arg_shapes=[(3, 8)], result_ranks=[], spmd_axis_name="y"))
    >>> refused.accepted, refused.rule, refused.trace[-1]
    (False, 'BAT-4', 'BAT-4')
    """
    check_call(isinstance(call, TransformedCall), "the transformed call",
               "a TransformedCall", call)
    instead = PROGRAM_FORMS.get(call.transform)
    warnings.warn(f"explain_transformed({call.transform!r}) is deprecated: "
                  + (f"describe the program (shardlaw.spec.program.description.Program) "
                     f"with {instead} and ask shardlaw.spec.explain_program" if instead else
                     "this per-equation question stays, but the registry retires; call "
                     f"shardlaw.spec.transforms."
                     f"{TRANSFORMS[call.transform].__module__.rpartition('.')[2]}."
                     f"{call.transform} directly") + " (docs/transformed-calls.rst)",
                  DeprecationWarning, stacklevel=2)
    function = TRANSFORMS[call.transform]
    with tracing() as fired:
        try:
            result = function(**call.keywords)
        except Rejection as refusal:
            failure = refusal.failure
            return TransformedVerdict(
                accepted=False, trace=tuple(fired), rule=failure.rule,
                error_type=failure.error_type.__name__,
                jax_error=getattr(failure, "jax_error", None) or failure.error_type.__name__,
                message=explain(failure, refusal.path), path=refusal.path)
    answer = _program_answer(call)
    if answer is not None:
        # The program path's answer, with the trace of the per-equation rules (what the
        # transformed-call vectors record and their rule coverage reads)
        return dataclasses.replace(answer, trace=tuple(fired))
    return TransformedVerdict(accepted=True, trace=tuple(fired), result=result)


# The program path's answer to a call (None where its question has no program form):
# ``ask_program`` of shardlaw.spec.vectors.transformed_migration, a layer above this one,
# which puts it here when it is imported (``shardlaw.spec`` imports it).
PROGRAM_PATH: list[Callable[[TransformedCall], TransformedVerdict | None]] = []


# The questions with a program form whose answer still comes from their function, and
# why (none now: vmap_jit's program form asks the batched jit as an equation of the
# program vmapped, unchecked as JAX binds it, so an uneven batch or a nested vmap over an
# Explicit mesh is answered as JAX and the function answer it).
ANSWERED_PER_EQUATION: dict[str, str] = {}


def _program_answer(call: TransformedCall) -> TransformedVerdict | None:
    """The answer of the program path to a call the per-equation function accepted,
    where the question has a program form (None: none)."""
    if (call.transform not in PROGRAM_FORMS or call.transform in ANSWERED_PER_EQUATION
            or not PROGRAM_PATH):
        return None
    return PROGRAM_PATH[0](call)

"""``jax.jvp``, ``jax.linearize`` and ``jax.vjp``/``jax.grad`` of a whole program, as rewrites of its :class:`~shardlaw.spec.program.description.Program` (issue 23).

A :class:`~shardlaw.spec.program.description.Program` describes a jitted function called on
its inputs (``jitted = jax.jit(f, ...)``). Each function here returns the Program that
``jax.jit`` of the transformed call amounts to in jax 0.10.2, built by rewriting every
equation of the body by the AD and WSC rules, never read from JAX's trace:

* :func:`jvp_program` — ``jax.jit(lambda primals, tangents: jax.jvp(jitted, primals,
  tangents))``: one ``jit`` equation, the JVP of ``jitted`` (AD-2), whose body holds each
  equation followed by its tangent (a constraint's tangent constrained alike, a
  device_put's put alike, an inner jit's JVP, recursively);
* :func:`linearize_program` — the primal call (AD-3: primal outputs and the residuals it
  stores) and the tangent call (AD-4), and the two applied one after the other, which is
  ``jax.jit(lambda primals, tangents: jax.linearize(jitted, *primals)[1](*tangents))``;
* :func:`vjp_program` — the primal call and the transposed call (AD-5): the tangent body
  transposed equation by equation in reverse order (a constraint's cotangent constrained
  alike, a device_put's cotangent put back with no target, an inner tangent jit
  transposed recursively, fan-out summed with ``add_any``);
* :func:`grad_program` — ``jax.jit(jax.grad(jitted, argnums, has_aux))``: the VJP seeded
  with a one for the scalar first output; :func:`value_and_grad_program` returns the
  loss too.

The jit and device_put equations a rewrite stages are marked unchecked: JAX's AD rules
bind them directly, and what tracing checks (FIT-1, ARG-4) it checked on the untransformed
program, which each function traces first. Each returns a Program again, so
transformations compose (``grad_program`` of a
``jvp_program``). The primitives an :class:`Opaque` equation names are differentiated by a
small table (:data:`LINEAR`, :data:`NONLINEAR`); any other primitive's linearization and
transpose are opaque equations too (``linearized_<name>``, ``transposed_<name>``) whose
types follow from the operands'. A ``reshard``'s cotangent is resharded back to its
operand's type. A ``shard_map``'s JVP is one shard_map over primals and tangents, its
body differentiated per shard. A remat (``jax.checkpoint``) is linearized as JAX's
``remat_partial_eval`` leaves it: its primal in line with what its policy saves (AD-21,
AD-22), and a differentiated remat that recomputes the rest of what its tangents need. Linearized, a shard_map becomes two
(:mod:`~shardlaw.spec.program.shardmap_autodiff`): the known one returns the residuals it
stores (AD-10's specs) before its primal outputs, the tangent one takes them, then the
tangents; transposed, it becomes one shard_map taking the cotangents, then the residuals
(AD-11), its body transposed equation by equation, each collective by AD-12 (pmax and
pmin, which have no derivative, are refused with NotImplementedError). Dead code goes as
JAX's DCE drops it: an inner jit of which a body uses some results keeps those, the
residuals their tangents read and the inputs they need (AD-8). A shard_map repeated in a
body (one form over operands of the same types) is linearized and transposed once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import reject, staged
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import PartitionSpec
from ..transforms.autodiff import (
    CALLBACKS, JitBody, JitEquation, check_callback_tangent, check_grad_input, jvp_equation,
    linearized_primal, linearized_tangent,
)
from .description import Jit, Program, Reshard, ShardMap, Value, check_program
from .control_flow import Remat  # noqa: I001  (after description, which it builds on)
from .ad_bodies import (
    FLOATS, LINEAR, NONLINEAR, NotScalar, BodyBuilder, DirectTangents, TangentTape, inline_body, jit_facts,
    map_manual_axes, jit_options_of, put_together_spec, axis_sizes_of, record_tangent, traced_body, check_passed_type,
    cotangent_type, dependencies, differentiable, inline_consts, inline_literals, literal_consts,
)
from .explain import trace_body
from .lowering import equation_path
from .partial_eval import (
    dce_program, known_by_policy, policy_decides, policy_read, recompute_by_policy,
    split_by_policy, stored_type,
    with_reduced_precision,
)
from .primitives import JVP_BODIES, LINEARIZE_BODIES, entry_of
from .refs import check_tangent_not_written, tangent_inputs, with_refs, writes_ref
from .shardmap_autodiff import residual_spec
from .transpose import transpose_body

__all__ = ["jvp_program", "linearize_program", "vjp_program", "grad_program",
           "value_and_grad_program", "LinearizedProgram", "VjpProgram", "LINEAR",
           "NONLINEAR", "differentiable"]

# --------------------------------------------------------------------------- JVP

def _jvp_body(program: Program, nonzero: tuple[bool, ...], prefix: str,
              tangent_types: tuple[Value, ...]) -> tuple[Program, tuple[bool, ...]]:
    """The JVP of a body: its inputs, then the nonzero tangents (of ``tangent_types``);
    its outputs, then their nonzero tangents. Each equation is followed by its tangent."""
    from .custom_rules import rule_consts   # (it builds on this module)

    # (then the constants its custom_jvp rules close over, inlined here)
    body = BodyBuilder(tuple(v.type for v in program.inputs) + tangent_types,
                       program.consts + rule_consts(program))
    ins, moving = len(program.inputs), len(tangent_types)
    # Inputs first, then the tangents, then the constants (which have no tangent).
    number = list(range(ins)) + [ins + moving + c for c in range(len(program.consts))]
    given = iter(range(ins, ins + moving))
    tangents: list = [next(given) if nz else None for nz in nonzero]
    tangents += [None] * len(program.consts)
    tape = DirectTangents(body)
    for k, eq in enumerate(program.equations):
        path = equation_path(prefix, k)
        operands = tuple(number[n] for n in eq.operands)
        in_tangents = [tangents[n] for n in eq.operands]
        entry = entry_of(eq)
        if entry.bodies:   # (its rule in the primitive table emits primal and tangent)
            outs, touts = JVP_BODIES.of(entry)(eq, body, operands, in_tangents, path)
        else:
            check_tangent_not_written(eq, in_tangents, path, "jvp")   # REF-6
            outs = body.emit(eq.renumbered(operands))
            touts = record_tangent(eq, tape, operands, in_tangents, path, "jvp", outs)
        number.extend(outs)
        tangents.extend(touts)
    out_tangents = [tangents[n] for n in program.outputs]
    flags = tuple(t is not None for t in out_tangents)
    outputs = tuple(number[n] for n in program.outputs) + \
        tuple(t for t in out_tangents if t is not None)
    return body.program(outputs), flags


@JVP_BODIES.register("jit")
def _jvp_jit(eq: Jit, body: BodyBuilder, operands: tuple[int, ...], moving: list, path: str
             ) -> tuple[tuple[int, ...], list]:
    """An inner jit's JVP (AD-2): one jit equation over the primals and nonzero tangents."""
    inner = eq.body
    nonzero = tuple(t is not None for t in moving)
    if not any(nonzero):
        return body.emit(eq.renumbered(operands)), [None] * len(eq.body.outputs)
    # JAX differentiates the jit's traced body: its tangents are typed as its primals are,
    # whatever the tangents passed in are (ad.jvp_jaxpr).
    jvp_body, flags = _jvp_body(inner, nonzero, f"{path}.jit.", tuple(
        v.type for v, nz in zip(inner.inputs, nonzero) if nz))
    equation, facts = jit_facts(inner, 0, 0)
    staged = jvp_equation(equation, facts, nonzero)
    options = dict(jit_options_of(inner), in_shardings=staged.in_shardings,
                   out_shardings=staged.out_shardings, donated=staged.donated_invars)
    jvp_body = dataclasses.replace(jvp_body, **options)
    given = tuple(t for t in moving if t is not None)
    # (a remat's JVP is a remat of the JVP of its body, as JAX's remat_jvp binds it)
    made = Remat(operands + given, body=jvp_body, name=eq.name, checked=False,
                 prevent_cse=eq.prevent_cse, differentiated=eq.differentiated,
                 policy=eq.policy, policy_unread=eq.policy_unread) \
        if type(eq) is Remat else Jit(operands + given, body=jvp_body, name=eq.name,
                                      checked=False)
    outs = body.emit(made)
    primal, tangent = outs[:len(eq.body.outputs)], iter(outs[len(eq.body.outputs):])
    return primal, [next(tangent) if f else None for f in flags]


@JVP_BODIES.register("shard_map")
def _jvp_shard_map(eq: ShardMap, body: BodyBuilder, operands: tuple[int, ...], moving: list,
                   path: str) -> tuple[tuple[int, ...], list]:
    """A shard_map's JVP: one shard_map over the primals and the nonzero tangents, each
    tangent with its primal's spec, returning the primal results, then the nonzero result
    tangents with their results' specs; its body differentiated per shard."""
    nonzero = tuple(t is not None for t in moving)
    if not any(nonzero):
        return body.emit(eq.renumbered(operands)), [None] * len(eq.results)
    inner = eq.body
    jvp_body, flags = _jvp_body(inner, nonzero, f"{path}.shard_map.", tuple(
        v.type for v, nz in zip(inner.inputs, nonzero) if nz))
    given = tuple(t for t in moving if t is not None)
    keep = [j for j, f in enumerate(flags) if f]
    outs = body.emit(dataclasses.replace(
        eq, operands=operands + given, body=jvp_body,
        in_specs=eq.in_specs + tuple(s for s, nz in zip(eq.in_specs, nonzero) if nz),
        out_specs=eq.out_specs + tuple(eq.out_specs[j] for j in keep),
        results=eq.results + tuple(eq.results[j] for j in keep), checked=False))
    primal, tangent = outs[:len(eq.results)], iter(outs[len(eq.results):])
    return primal, [next(tangent) if f else None for f in flags]


# --------------------------------------------------------------------------- linearization

@dataclasses.dataclass(frozen=True)
class _Linearized:
    """A body linearized: ``primal`` returns its outputs then every residual; ``tangent``
    takes the residuals then the nonzero input tangents and returns the nonzero output
    tangents (``flags``)."""

    primal: Program
    tangent: Program
    flags: tuple[bool, ...]
    residuals: int


def _linearize_body(program: Program, nonzero: tuple[bool, ...], prefix: str,
                    transform: str) -> _Linearized:
    """Each equation's primal into the primal body and its tangent onto the tape."""
    from .custom_rules import rule_consts   # (it builds on this module)

    # (then the constants its custom_jvp rules close over, inlined here)
    primal = BodyBuilder(tuple(v.type for v in program.inputs),
                         program.consts + rule_consts(program))
    tape = TangentTape(primal)
    tangents: list = [tape.tangent_input(v.type) if nz else None
                      for v, nz in zip(program.inputs, nonzero)]
    tangents += [None] * len(program.consts)
    number = list(range(len(program.inputs) + len(program.consts)))
    for k, eq in enumerate(program.equations):
        path = equation_path(prefix, k)
        operands = tuple(number[n] for n in eq.operands)
        in_tangents = [tangents[n] for n in eq.operands]
        entry = entry_of(eq)
        if entry.bodies:   # (its rule in the primitive table emits primal and tangent)
            outs, touts = LINEARIZE_BODIES.of(entry)(eq, tape, operands, in_tangents, path, transform)
        else:
            check_tangent_not_written(eq, in_tangents, path, transform)   # REF-6
            outs = primal.emit(eq.renumbered(operands))
            touts = record_tangent(eq, tape, operands, in_tangents, path, transform, outs)
        number.extend(outs)
        tangents.extend(touts)
    out_tangents = [tangents[n] for n in program.outputs]
    flags = tuple(t is not None for t in out_tangents)
    tangent = tape.tangent([t for t in out_tangents if t is not None])
    # JAX traces the tangent body dropping dead equations, so a residual only they read
    # is not one; then it drops the primal body's dead equations.
    _, live = _live_equations(tangent)
    used = [r in live for r in range(len(tape.residuals))]
    tangent = _pruned(tangent, used + [True] * len(tape.inputs))
    residuals = tuple(n for n, u in zip(tape.residuals, used) if u)
    outputs = tuple(number[n] for n in program.outputs) + residuals
    return _Linearized(_pruned(primal.program(outputs)), tangent, flags, len(residuals))


def _pruned_to_used(eq: Any) -> bool:
    """Whether dead-code elimination prunes ``eq`` to its used results and the inputs they
    read (an inner jit, AD-8) rather than keeping it whole (its entry's ``pruning``)."""
    return entry_of(eq).pruning == "jit"


def _live_equations(program: Program) -> tuple[list[bool], frozenset[int]]:
    """Which equations the outputs need, and the values they read; found once per program
    (a linearization asks it of one tangent body several times)."""
    return program.derived_once("live equations", lambda: _live_found(program))


def _live_found(program: Program) -> tuple[tuple[bool, ...], frozenset[int]]:
    keep, live = _find_live(program)
    return tuple(keep), frozenset(live)


def _find_live(program: Program) -> tuple[list[bool], set[int]]:
    live, numbers = set(program.outputs), program.result_numbers()
    keep = [False] * len(program.equations)
    equations = program.equations
    for k in reversed(range(len(equations))):
        made, eq = numbers[k], equations[k]
        if live.isdisjoint(made) and not writes_ref(eq):   # a ref's write is an effect: kept
            continue
        keep[k] = True
        if not live.issuperset(made) and _pruned_to_used(eq) and not writes_ref(eq):
            used = [n in live for n in made]
            # a jit pruned to its used results reads only the inputs they depend on
            reads = frozenset().union(*(d for d, u in zip(dependencies(eq.body), used) if u))
            live.update(eq.operands[i] for i in reads)
        else:
            live.update(eq.operands)
    return keep, live


def _pruned(program: Program, inputs: list[bool] | None = None) -> Program:
    """A body without options, its dead equations dropped, and the inputs not in
    ``inputs`` (which nothing live reads)."""
    keep, live = _live_equations(program)
    inputs = [True] * len(program.inputs) if inputs is None else inputs
    check_program(all(k or i not in live for i, k in enumerate(inputs)),
                  "the inputs a transformation drops", "inputs no live equation reads",
                  inputs)
    numbers = program.result_numbers()
    if all(keep) and all(inputs) and not any(
            not live.issuperset(made) and _pruned_to_used(eq)
            for eq, made in zip(program.equations, numbers)):
        return program   # nothing to drop
    body = BodyBuilder(tuple(v for v, k in zip(program.inputs, inputs) if k), program.consts)
    kept = [i for i, k in enumerate(inputs) if k]
    number = {i: j for j, i in enumerate(kept)}
    number.update({len(program.inputs) + c: len(kept) + c for c in range(len(program.consts))})
    for eq, made, alive in zip(program.equations, numbers, keep):
        if not alive:
            continue
        used = tuple(n in live for n in made)
        if not all(used) and _pruned_to_used(eq):
            # An inner jit keeps only its used results and the inputs they read, each
            # with its sharding and donation (AD-8, JAX's DCE rule for jit).
            inner, used_in = dce_program(eq.body, used)
            outs = iter(body.emit(Jit(tuple(number[n] for n, u in zip(
                eq.operands, used_in) if u), body=inner, name=eq.name, checked=False)))
            number.update((n, next(outs)) for n, u in zip(made, used) if u)
        else:
            outs = body.emit(eq.renumbered(tuple(number[n] for n in eq.operands)))
            number.update(zip(made, outs))
    return body.program(tuple(number[n] for n in program.outputs))


def _forwarding(lin: _Linearized, body: Program) -> tuple[list, list]:
    """Which outputs of the linearized primal the jit still returns (JAX forwards an
    output that is an input and has no out_sharding, a residual that is an input, and a
    residual that is a primal output): per primal output and per residual, ``("in", i)``,
    ``("out", j)`` or ``("kept", None)``."""
    count, outs = len(body.inputs), len(body.outputs)
    numbers = lin.primal.outputs
    primal = [("in", n) if n < count and s is UNSPECIFIED else ("kept", None)
              for n, s in zip(numbers[:outs], body.out_shardings)]
    kept_outputs = {n: j for j, (n, f) in enumerate(zip(numbers[:outs], primal))
                    if f[0] == "kept"}
    residuals = []
    for n in numbers[outs:]:
        if n < count:
            residuals.append(("in", n))
        elif n in kept_outputs:
            residuals.append(("out", kept_outputs[n]))
        else:
            residuals.append(("kept", None))
    return primal, residuals


@LINEARIZE_BODIES.register("jit")
def _linearize_jit(eq: Jit, tape: TangentTape, operands: tuple[int, ...], moving: list,
                   path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """An inner jit linearized: the primal jit (AD-3) into the primal body, the tangent
    jit (AD-4) onto the tape."""
    inner = eq.body
    nonzero = tuple(t is not None for t in moving)
    if not any(nonzero):
        outs = tape.primal.emit(eq.renumbered(operands))
        return outs, [None] * len(eq.body.outputs)
    if type(eq) is Remat:
        return _linearize_remat(eq, tape, operands, moving, path, transform)
    lin = _linearize_body(inner, nonzero, f"{path}.jit.", transform)
    primal_fwd, residual_fwd = _forwarding(lin, inner)
    stored = sum(1 for f in residual_fwd if f[0] == "kept")
    equation, facts = jit_facts(inner, lin.residuals, stored,
                                lin.primal.outputs[:len(inner.outputs)])
    staged = linearized_primal(equation, facts, nonzero)
    returned = tuple(n for n, f in zip(lin.primal.outputs, primal_fwd + residual_fwd)
                     if f[0] == "kept")
    body = dataclasses.replace(lin.primal, outputs=returned, **dict(
        jit_options_of(inner), out_shardings=staged.out_shardings))
    results = iter(tape.primal.emit(Jit(operands, body=body, name=eq.name, checked=False)))
    kept = [next(results) if f[0] == "kept" else None for f in primal_fwd]
    primal = [operands[f[1]] if f[0] == "in" else n for f, n in zip(primal_fwd, kept)]
    residual_numbers = [operands[f[1]] if f[0] == "in" else primal[f[1]] if f[0] == "out"
                        else next(results) for f in residual_fwd]
    if not any(lin.flags):
        return tuple(primal), [None] * len(eq.body.outputs)
    tangent_body, reads = _tangent_call(inner, lin, equation, facts, nonzero)
    refs = tuple(tape.residual(n) for n in residual_numbers) + tuple(
        t for t, read in zip((t for t in moving if t is not None), reads) if read)
    touts = iter(tape.emit(Jit(tuple(range(len(refs))), body=tangent_body, name=eq.name,
                               checked=False), refs))
    return tuple(primal), [next(touts) if f else None for f in lin.flags]


def _linearize_remat(eq: Remat, tape: TangentTape, operands: tuple[int, ...], moving: list,
                     path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A remat linearized as JAX's ``remat_partial_eval`` leaves its JVP: under a policy
    the spec reads over a body holding no bodies but inner jits and no constants but
    scalar literals, as its policy splits it (AD-21, AD-22); under JAX's default (nothing
    saved), and recomputing everything (``policy_unread``) under any other policy or body
    (an offloading policy, a user's whose table misses an equation, a loop, a cond, a
    shard_map inside), its primal in line, nothing stored but its operands,
    onto the tape a remat (``differentiated``) over the operands and tangents it reads,
    which recomputes what the tangents need, then the tangents."""
    inner = eq.body
    nonzero = tuple(t is not None for t in moving)
    lin = _linearize_body(inner, nonzero, f"{path}.jit.", transform)
    if eq.policy is not None and policy_read(eq.policy) and literal_consts(lin.primal) \
            and _jits_only(lin.primal) and policy_decides(eq.policy, lin.primal):
        return _linearize_by_policy(eq, tape, operands, moving, lin)
    primal = inline_literals(tape.primal, _pruned(inner), operands)
    if not any(lin.flags):
        return primal, [None] * len(inner.outputs)
    given = [t for t in moving if t is not None]
    staged = BodyBuilder(tuple(v.type for v in inner.inputs) + tuple(
        tape.type_of(t) for t in given), lin.primal.consts)
    count = len(inner.inputs)
    ran = inline_consts(staged, lin.primal, tuple(range(count)))
    touts = inline_body(staged, lin.tangent, ran[len(inner.outputs):] + tuple(
        range(count, count + len(given))))
    body = staged.program(touts)
    _, live = _live_equations(body)
    reads = [i in live for i in range(len(body.inputs))]
    body = _pruned(body, reads)
    refs = tuple(tape.residual(n) for n, r in zip(operands, reads) if r) + tuple(
        t for t, r in zip(given, reads[count:]) if r)
    made = iter(tape.emit(Remat(tuple(range(len(refs))), body=body, name=eq.name,
                                checked=False, prevent_cse=eq.prevent_cse,
                                differentiated=True, policy=eq.policy,
                                policy_unread=eq.policy is not None), refs))
    return primal, [next(made) if f else None for f in lin.flags]


def _jits_only(program: Program) -> bool:
    """Whether every body ``program`` holds is an inner jit's, and theirs likewise (the
    bodies the spec splits by a remat's policy as JAX does)."""
    return all(type(e) is Jit and _jits_only(e.body) if e.body is not None
               else not entry_of(e).bodies for e in program.equations)


def _linearize_by_policy(eq: Remat, tape: TangentTape, operands: tuple[int, ...],
                         moving: list, lin: Any) -> tuple[tuple[int, ...], list]:
    """A remat linearized as its policy splits it (AD-22): the primal and the values it
    stores computed in line in the primal body (each stored value another equation reads
    pinned by ``reduce_precision``, as JAX's); onto the tape a remat (``differentiated``)
    over the stored values, then the operands and the tangents it reads, which
    recomputes the rest of what its tangents need."""
    count, inputs = len(eq.body.outputs), len(eq.body.inputs)
    residuals = lin.primal.outputs[count:]
    split = split_by_policy(lin.primal, residuals, eq.policy)
    known, _ = known_by_policy(dataclasses.replace(
        lin.primal, outputs=lin.primal.outputs[:count], out_shardings=()), split)
    known = _pruned(dataclasses.replace(known, out_shardings=(UNSPECIFIED,) * len(
        known.outputs)))
    ran = inline_literals(tape.primal, with_reduced_precision(known, len(split.stored)),
                          operands)
    primal, stored = ran[:count], ran[count:]
    if not any(lin.flags):
        return primal, [None] * count
    given = [t for t in moving if t is not None]
    staged = BodyBuilder(tuple(stored_type(lin.primal, key) for key in split.stored) + tuple(
        v.type for v in eq.body.inputs) + tuple(tape.type_of(t) for t in given),
        lin.primal.consts)
    number: dict = {key: j for j, key in enumerate(split.stored)}
    number.update((i, len(split.stored) + i) for i in range(inputs))
    number.update((inputs + c, len(staged.inputs) + c) for c in range(len(lin.primal.consts)))
    # (what the policy does not save recomputed, an inner jit split as JAX splits it)
    recompute_by_policy(lin.primal, split, staged, number)
    first = len(split.stored) + inputs
    touts = inline_body(staged, lin.tangent, tuple(number[n] for n in residuals) + tuple(
        range(first, first + len(given))))
    body = staged.program(touts)
    _, live = _live_equations(body)
    reads = [i in live for i in range(len(body.inputs))]
    body = _pruned(body, reads)
    refs = tuple(tape.residual(n) for n, r in zip(stored + operands, reads) if r) + tuple(
        t for t, r in zip(given, reads[first:]) if r)
    made = iter(tape.emit(Remat(tuple(range(len(refs))), body=body, name=eq.name,
                                checked=False, prevent_cse=eq.prevent_cse,
                                differentiated=True, policy=eq.policy), refs))
    return primal, [next(made) if f else None for f in lin.flags]


def _unsharded(value: Value, eq: ShardMap, spec: PartitionSpec, sizes: dict[str, int]
               ) -> Value:
    """A per-shard value put together by ``spec`` (a residual's global type): over the
    mesh the shard_map's results are typed over, split as ``spec`` says over its Explicit
    axes."""
    shape = list(value.shape)
    for d, entry in enumerate(spec):
        for n in (entry if isinstance(entry, tuple) else (entry,) if entry else ()):
            shape[d] *= sizes[n]
    mesh = eq.results[0].mesh if eq.results else None
    split = None if mesh is None else put_together_spec(value, eq, spec, map_manual_axes(eq))
    return Value(tuple(shape), value.dtype, False, mesh, spec=split)


@dataclasses.dataclass(frozen=True)
class _SplitShardMap:
    """A shard_map linearized, apart from its operands' numbers: the known shard_map
    (returning ``stored`` residuals, then the primal outputs), where each residual the
    tangent shard_map takes comes from (``forwarded``), which nonzero tangents it reads,
    and which outputs have a nonzero tangent (``flags``); ``tangent`` None when none."""

    known: ShardMap
    stored: int
    forwarded: tuple
    tangent: ShardMap | None
    reads: tuple[bool, ...]
    flags: tuple[bool, ...]


@LINEARIZE_BODIES.register("shard_map")
def _linearize_shard_map(eq: ShardMap, tape: TangentTape, operands: tuple[int, ...], moving: list,
                         path: str, transform: str) -> tuple[tuple[int, ...], list]:
    """A shard_map linearized (AD-10): the known shard_map, returning the residuals it
    stores (split by AD-10's spec) before its primal outputs, into the primal body; the
    tangent shard_map over the residuals and the tangents it reads onto the tape. Like
    every shard_map the AD rewrites stage, both are unchecked (``checked`` False): JAX
    binds them itself, and checks a shard_map's specs against its operands only when the
    user calls it (on the untransformed program, traced first). A repeated shard_map (one
    form over operands of the same types) is split once per body."""
    nonzero = tuple(t is not None for t in moving)
    if not any(nonzero):
        outs = tape.primal.emit(eq.renumbered(operands))
        return outs, [None] * len(eq.results)
    key = (eq.form, tuple(tape.primal.types[n] for n in operands), nonzero)
    split = tape.primal.once(key, lambda: _split_shard_map(eq, nonzero, path, transform))
    results = tape.primal.emit(split.known.renumbered(operands))
    stored, primal = iter(results[:split.stored]), results[split.stored:]
    if split.tangent is None:
        return primal, [None] * len(eq.results)
    refs = [operands[f[1]] if f[0] == "in" else primal[f[1]] if f[0] == "out"
            else next(stored) for f in split.forwarded]
    given = [t for t in moving if t is not None]
    chosen = [t for t, read in zip(given, split.reads) if read]
    touts = iter(tape.emit(split.tangent, tuple(tape.residual(n) for n in refs)
                           + tuple(chosen)))
    return primal, [next(touts) if f else None for f in split.flags]


def _split_shard_map(eq: ShardMap, nonzero: tuple[bool, ...], path: str, transform: str
                     ) -> _SplitShardMap:
    """The known and the tangent shard_map of ``eq`` (its operands' numbers kept)."""
    inner, sizes, manual = eq.body, axis_sizes_of(eq), map_manual_axes(eq)
    lin = _linearize_body(inner, nonzero, f"{path}.shard_map.", transform)
    count = len(inner.outputs)
    outs, residuals = lin.primal.outputs[:count], lin.primal.outputs[count:]
    # A residual that is a body input or a primal output is forwarded, not returned.
    forwarded = tuple(("in", r) if r < len(inner.inputs) else ("out", outs.index(r))
                      if r in outs else ("kept", None) for r in residuals)
    known = BodyBuilder(lin.primal.inputs, lin.primal.consts)
    made = inline_consts(known, lin.primal, tuple(range(len(lin.primal.inputs))))
    stored, stored_specs, stored_types = [], [], []
    for r, f in zip(made[count:], forwarded):
        if f[0] != "kept":
            continue
        value = known.types[r]
        if value.shape == ():   # a scalar residual gets a first dimension of 1
            (r,) = known.opaque("broadcast_in_dim", (r,), (dataclasses.replace(
                value, shape=(1,)),))
        spec = residual_spec(eq.mesh.axis_names, manual, eq.check_vma, known.types[r].varying)
        stored.append(r)
        stored_specs.append(spec)
        stored_types.append(_unsharded(known.types[r], eq, spec, sizes))
    primal_eq = dataclasses.replace(
        eq, body=known.program(tuple(stored) + made[:count]),
        out_specs=tuple(stored_specs) + eq.out_specs,
        results=tuple(stored_types) + eq.results, checked=False)
    if not any(lin.flags):
        return _SplitShardMap(primal_eq, len(stored), forwarded, None, (), lin.flags)
    kept = iter(stored_specs)
    specs = [eq.in_specs[f[1]] if f[0] == "in" else eq.out_specs[f[1]] if f[0] == "out"
             else next(kept) for f in forwarded]
    tangent, reads = _tangent_shard_map_body(lin, list(forwarded))
    chosen = [spec for spec, nz in zip(eq.in_specs, nonzero) if nz]
    chosen = [spec for spec, read in zip(chosen, reads) if read]
    keep = [j for j, f in enumerate(lin.flags) if f]
    tangent_eq = dataclasses.replace(
        eq, operands=tuple(range(len(specs) + len(chosen))), body=tangent,
        in_specs=tuple(specs) + tuple(chosen),
        out_specs=tuple(eq.out_specs[j] for j in keep),
        results=tuple(eq.results[j] for j in keep), checked=False)
    return _SplitShardMap(primal_eq, len(stored), forwarded, tangent_eq, tuple(reads),
                          lin.flags)


def _tangent_shard_map_body(lin: _Linearized, forwarded: list) -> tuple[Program, list[bool]]:
    """The tangent shard_map's body: its residuals (a stored scalar one shaped (1,), its
    dimension dropped first), then the tangents it reads (shard_map's dead-code
    elimination drops the others)."""
    tangent = lin.tangent
    count = lin.residuals
    _, live = _live_equations(tangent)
    moving = len(tangent.inputs) - count
    reads = [count + j in live for j in range(moving)]
    tangent = _pruned(tangent, [True] * count + reads)
    inputs = []
    for value, f in zip(tangent.inputs[:count], forwarded):
        promoted = f[0] == "kept" and value.shape == ()
        inputs.append(dataclasses.replace(value, shape=(1,)) if promoted else value)
    body = BodyBuilder(tuple(inputs) + tangent.inputs[count:], tangent.consts)
    numbers = []
    for k, (value, f) in enumerate(zip(tangent.inputs[:count], forwarded)):
        if f[0] == "kept" and value.shape == ():
            numbers.append(body.opaque("reshape", (k,), (value,))[0])
        else:
            numbers.append(k)
    numbers += range(count, len(tangent.inputs))
    out = inline_consts(body, tangent, tuple(numbers))
    return body.program(out), reads


def _tangent_call(inner: Program, lin: _Linearized, equation: JitEquation, facts: JitBody,
                  nonzero: tuple[bool, ...]) -> tuple[Program, list[bool]]:
    """The tangent jit's body with its options (AD-4), and which nonzero tangents it reads:
    dead-code elimination drops the others, ``keep_unused`` or not, as JAX traces the
    tangent body."""
    count = lin.residuals
    _, live = _live_equations(lin.tangent)
    moving = len(lin.tangent.inputs) - count
    reads = [count + j in live for j in range(moving)]
    tangent = _pruned(lin.tangent, [True] * count + reads)
    # (a tangent the body never reads, as a predicate's through a comparison whose tangent
    # is zero, is no input of the tangent jit, though an output depends on its value)
    read = iter(reads)
    staged = linearized_tangent(equation, facts, tuple(nz and next(read) for nz in nonzero))
    assert staged is not None
    check_program(len(staged.in_shardings) == len(tangent.inputs),
                  "the inputs of a tangent jit", f"one per residual and tangent read "
                  f"({len(tangent.inputs)})", staged.in_shardings)
    return dataclasses.replace(tangent, in_shardings=staged.in_shardings,
                               out_shardings=staged.out_shardings,
                               donated=staged.donated_invars, keep_unused=inner.keep_unused,
                               context_mesh=inner.context_mesh), reads


# --------------------------------------------------------------------------- the programs

@dataclasses.dataclass(frozen=True)
class LinearizedProgram:
    """``jax.linearize`` of a program: ``primal`` returns the outputs, then the residuals;
    ``tangent`` takes the residuals, then the tangents, and returns the nonzero output
    tangents (``nonzero``); ``applied`` is the two in one program, taking the inputs and
    the tangents."""

    primal: Program
    tangent: Program
    applied: Program
    nonzero: tuple[bool, ...]


@dataclasses.dataclass(frozen=True)
class VjpProgram:
    """``jax.vjp`` of a program: ``primal`` returns the outputs, then the residuals;
    ``backward`` takes the residuals, then a cotangent per nonzero output, and returns the
    cotangent of each input it reaches (``reached``); ``applied`` is the two in one
    program, taking the inputs and the cotangents and returning every input's cotangent
    (a zero where none reaches it)."""

    primal: Program
    backward: Program
    applied: Program
    reached: tuple[bool, ...]


def _called(program: Program) -> tuple[BodyBuilder, Jit]:
    """The top-level body calling the jitted function once, and that call's equation."""
    check_program(isinstance(program, Program), "the program transformed", "a Program",
                  program)
    top = BodyBuilder(program.inputs)
    call = Jit(tuple(range(len(program.inputs))), body=traced_body(program), name="jitted")
    # A transformation traces the function first: what tracing refuses (FIT-1, the WSC
    # rules, ARG-4) is refused before any rewrite, located in the untransformed program.
    trace_body(Program(program.inputs, (call,), call.body.outputs and tuple(
        range(len(program.inputs), len(program.inputs) + len(call.body.outputs)))),
        program.context_mesh)
    return top, call


def _extra_inputs(values: Any, like: tuple[Value, ...], what: str) -> tuple[Value, ...]:
    """The tangents or cotangents passed in: numpy arrays of the primals' types unless
    given."""
    if values is None:
        return tuple(Value.numpy(v.shape, v.dtype) for v in like)
    values = tuple(values)
    check_program(len(values) == len(like) and all(
        isinstance(v, Value) and (v.shape, v.dtype) == (w.shape, w.dtype)
        for v, w in zip(values, like)), what, f"{len(like)} Values of the types "
        f"{[(w.dtype, w.shape) for w in like]}", values)
    return values


def _zeros(body: BodyBuilder, value: Value) -> int:
    """A zero cotangent or tangent, made where it is needed."""
    return body.opaque("broadcast_in_dim", (), (value.type,))[0]


def jvp_program(program: Program, tangents: Any = None) -> Program:
    """The program ``jax.jit(lambda p, t: jax.jvp(jitted, p, t))`` amounts to: one jit
    equation, ``jitted``'s JVP (AD-2), over the inputs and their tangents (``tangents``:
    Values, one per differentiable input; numpy arrays when None); its outputs, then their
    tangents (a zero where an output's tangent is a symbolic zero)."""
    top, call = _called(program)
    nonzero = tangent_inputs(program, differentiable)   # a ref takes none (REF-6)
    check_callbacks(program, nonzero)
    given = _extra_inputs(tangents, tuple(v for v, nz in zip(program.inputs, nonzero)
                                          if nz), "the tangents")
    body = BodyBuilder(program.inputs + given)
    del top
    moving = iter(range(len(program.inputs), len(program.inputs) + len(given)))
    outs, touts = _jvp_jit(call, body, call.operands,
                           [next(moving) if nz else None for nz in nonzero], "body[0]")
    types = [call.body.value_types[n] for n in call.body.outputs]
    touts = [t if t is not None else _zeros(body, v) for t, v in zip(touts, types)]
    return with_refs(body.program(tuple(outs) + tuple(touts), devices=program.devices),
                     program)


def _linearized_call(program: Program, nonzero: tuple[bool, ...], transform: str
                     ) -> tuple[TangentTape, tuple[int, ...], list]:
    top, call = _called(program)
    tape = TangentTape(top)
    moving = [tape.tangent_input(v.type) if nz else None
              for v, nz in zip(program.inputs, nonzero)]
    outs, touts = _linearize_jit(call, tape, call.operands, moving, "body[0]", transform)
    return tape, outs, touts


def linearize_program(program: Program, tangents: Any = None) -> LinearizedProgram:
    """``jax.linearize`` of the jitted program: the primal jit (AD-3) and the tangent jit
    (AD-4) built by linearizing every equation of its body, recursively."""
    check_program(isinstance(program, Program), "the program linearize is asked about",
                  "a Program", program)
    nonzero = tangent_inputs(program, differentiable)   # a ref takes none (REF-6)
    check_callbacks(program, nonzero)
    tape, outs, touts = _linearized_call(program, nonzero, "linearize")
    flags = tuple(t is not None for t in touts)
    primal = tape.primal.program(tuple(outs) + tuple(tape.residuals))
    tangent = tape.tangent([t for t in touts if t is not None])
    primals = tuple(v for v, nz in zip(program.inputs, nonzero) if nz)
    given = _extra_inputs(tangents, primals, "the tangents")
    for k, (value, passed) in enumerate(zip(primals, given)):
        check_passed_type(value.type, passed.type, "tangent", f"tangents[{k}]")
    residuals = tuple(tape.primal.types[n] for n in tape.residuals)
    tangent = dataclasses.replace(tangent, inputs=residuals + given)
    applied = BodyBuilder(program.inputs + given)
    ran = inline_body(applied, traced_body(primal), tuple(range(len(program.inputs))))
    start = len(program.inputs)
    tout = inline_body(applied, traced_body(tangent), ran[len(outs):] + tuple(
        range(start, start + len(given))))
    return LinearizedProgram(primal, tangent, with_refs(
        applied.program(tout, devices=program.devices), program), flags)


def _backward(tape: TangentTape, touts: list, given: tuple
              ) -> tuple[Program, tuple[bool, ...]]:
    """The tangent call transposed: the residuals, then the cotangents ``given`` (their
    types; None: no cotangent for that output)."""
    tangent = tape.tangent([t for t in touts if t is not None])
    linear = (False,) * len(tape.residuals) + (True,) * len(tape.inputs)
    return transpose_body(tangent, linear, given, "")


def vjp_program(program: Program, cotangents: Any = None) -> VjpProgram:
    """``jax.vjp`` of the jitted program: the primal jit (AD-3) and the transposed tangent
    jit (AD-5), every equation of the body transposed in reverse order, recursively; a
    cotangent per output whose tangent is not a symbolic zero (``cotangents``: Values,
    numpy arrays when None)."""
    check_program(isinstance(program, Program), "the program vjp is asked about",
                  "a Program", program)
    nonzero = tangent_inputs(program, differentiable)   # a ref takes none (REF-6)
    check_callbacks(program, nonzero)
    tape, outs, touts = _linearized_call(program, nonzero, "vjp")
    flags = tuple(t is not None for t in touts)
    out_types = tuple(tape.primal.types[n] for n, f in zip(outs, flags) if f)
    given = _extra_inputs(cotangents, out_types, "the cotangents")
    for k, (out, passed) in enumerate(zip(out_types, given)):
        check_passed_type(cotangent_type(out), passed.type, "cotangent", f"cotangents[{k}]")
    backward, reached = _backward(tape, touts, tuple(v.type for v in given))
    residuals = tuple(tape.primal.types[n] for n in tape.residuals)
    backward = dataclasses.replace(backward, inputs=residuals + given)
    primal = tape.primal.program(tuple(outs) + tuple(tape.residuals))
    applied = BodyBuilder(program.inputs + given)
    ran = inline_body(applied, traced_body(primal), tuple(range(len(program.inputs))))
    start = len(program.inputs)
    cts = inline_body(applied, traced_body(backward), ran[len(outs):] + tuple(
        range(start, start + len(given))))
    outputs = _every_input(applied, program, nonzero, reached, cts)
    return VjpProgram(primal, backward, with_refs(
        applied.program(outputs, devices=program.devices), program),
                      reached)


def _every_input(body: BodyBuilder, program: Program, nonzero: tuple[bool, ...],
                 reached: tuple[bool, ...], cts: tuple[int, ...]) -> tuple[int, ...]:
    """A cotangent per input: the one computed, else a zero."""
    found = iter(cts)
    marks = iter(reached)
    out = []
    for v, nz in zip(program.inputs, nonzero):
        out.append(next(found) if nz and next(marks) else _zeros(body, cotangent_type(v)))
    return tuple(out)


def check_callbacks(program: Program, nonzero: tuple[bool, ...], prefix: str = ""
                    ) -> tuple[bool, ...]:
    """AD-20 over the body, nested jits' and shard_maps' too, as JAX's JVP meets its
    equations: a callback taking a value that carries a tangent (one computed from an
    input in ``nonzero`` through floats, not through ``stop_gradient``) is refused. Which
    outputs carry a tangent, per output."""
    carries = list(nonzero) + [False] * len(program.consts)
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        moving = tuple(carries[n] for n in eq.operands)
        path = f"{prefix}body[{k}]"
        if type(eq) is Jit:
            out = check_callbacks(eq.body, moving, f"{path}.jit.")
        elif type(eq) is ShardMap:
            out = check_callbacks(eq.body, moving, f"{path}.shard_map.")
        else:
            primitive = getattr(eq, "primitive", eq.kind)
            if primitive in CALLBACKS:
                with staged("trace"):
                    check_callback_tangent(primitive, any(moving), path)
            out = (any(moving) and primitive != "stop_gradient",) * len(numbers)
        carries += [c and differentiable(program.value_types[n]) for c, n in zip(out, numbers)]
    return tuple(carries[n] for n in program.outputs)


def _check_inputs(program: Program, numbers: tuple[int, ...]) -> None:
    """AD-19: grad's inputs among argnums are real or complex, as jit traces them (a ref
    is left to its own rules, REF-6)."""
    refs = program.refs or (False,) * len(program.inputs)
    for i in numbers:
        if not refs[i]:
            with staged("trace"):
                check_grad_input(program.inputs[i].type.dtype, program.input_paths[i]
                                 if program.input_paths else f"args[{i}]")


def _check_scalar(program: Program) -> None:
    """grad's function returns a real scalar first (JAX's TypeError once it has traced it:
    what tracing refuses is refused first, as a program described from a refusal is)."""
    value = program.value_types[program.outputs[0]] if program.outputs else None
    if value is None or value.shape != () or value.dtype not in FLOATS[:4]:
        _called(program)
        with staged("trace"):
            raise reject(NotScalar(0, value))


def _argnums(argnums: Any, count: int) -> tuple[int, ...]:
    """The input positions of ``argnums``: an empty tuple is an argument that holds no
    array (``jax.grad`` of a function whose first argument is an empty pytree: no
    gradient, the function traced all the same)."""
    numbers = (argnums,) if type(argnums) is int else tuple(argnums)
    check_program(all(type(i) is int and 0 <= i < count for i in numbers),
                  "argnums", f"input positions from 0 to {count - 1}", argnums)
    return numbers


def _seed(body: BodyBuilder, loss: Value) -> tuple[int]:
    """grad's one for the loss: a constant, resharded to the loss's cotangent type when
    its type has a mesh (JAX reshards the literal ``1.0`` to it: the loss's mesh, its
    reduced axes unreduced and its unreduced axes reduced)."""
    (one,) = body.opaque("broadcast_in_dim", (), (Value.typed((), loss.dtype),))
    if loss.mesh is None:
        return (one,)
    split = PartitionSpec() if loss.spec is None else loss.spec
    return body.emit(Reshard((one,), sharding=NamedSharding(loss.mesh, PartitionSpec(
        unreduced=split.reduced, reduced=split.unreduced))))


def value_and_grad_program(program: Program, argnums: Any = 0, has_aux: bool = False
                           ) -> Program:
    """``jax.jit(jax.value_and_grad(jitted, argnums, has_aux))``: the first output (and the
    others, with ``has_aux``), then the gradient of each input in ``argnums``; the
    backward pass seeded with a one for the first output, the other outputs' cotangents
    zero."""
    check_program(isinstance(program, Program), "the program value_and_grad is asked about",
                  "a Program", program)
    numbers = _argnums(argnums, len(program.inputs))
    _check_inputs(program, numbers)
    check_program(has_aux or len(program.outputs) == 1, "the outputs of grad's function",
                  "one scalar (or has_aux=True)", program.outputs)
    nonzero = tuple(i in numbers and t for i, t in
                    enumerate(tangent_inputs(program, differentiable)))
    check_callbacks(program, nonzero)
    _check_scalar(program)
    tape, outs, touts = _linearized_call(program, nonzero, "grad")
    flags = tuple(t is not None for t in touts)
    residuals = tuple(tape.primal.types[n] for n in tape.residuals)
    primal = tape.primal.program(tuple(outs) + tuple(tape.residuals))
    top = BodyBuilder(program.inputs)
    ran = inline_body(top, traced_body(primal), tuple(range(len(program.inputs))))
    # (the seed is made whether or not the loss depends on argnums)
    seed = _seed(top, tape.primal.types[outs[0]])
    if not flags[0]:   # the loss does not depend on argnums: every gradient is a zero
        every = _every_input(top, program, nonzero, (False,) * sum(nonzero), ())
    else:
        given = tuple(top.types[seed[0]] if j == 0 else None
                      for j, f in enumerate(flags) if f)
        backward, reached = _backward(tape, touts, given)
        backward = dataclasses.replace(backward, inputs=residuals + (top.types[seed[0]],))
        cts = inline_body(top, traced_body(backward), ran[len(outs):] + seed)
        every = _every_input(top, program, nonzero, reached, cts)
    grads = tuple(every[i] for i in numbers)
    return with_refs(top.program(ran[:len(outs)] + grads, devices=program.devices), program)


def grad_program(program: Program, argnums: Any = 0, has_aux: bool = False) -> Program:
    """``jax.jit(jax.grad(jitted, argnums, has_aux))``: the gradient of each input in
    ``argnums`` (then the auxiliary outputs, with ``has_aux``)."""
    full = value_and_grad_program(program, argnums, has_aux)
    values = len(program.outputs) if has_aux else 1
    grads = full.outputs[values:]
    aux = full.outputs[1:values]
    return dataclasses.replace(full, outputs=grads + aux, out_shardings=())


# Doors for the rules of the control-flow kinds (control_flow_ad.py): a body's JVP and its
# linearization, as an inner jit's rules use them.
jvp_body = _jvp_body
linearize_body = _linearize_body

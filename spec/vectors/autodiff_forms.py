"""The program forms of the transformed-call questions about autodiff (the registry's retirement path).

Each function takes a :class:`~shardlaw.spec.transforms.transformed.TransformedCall` of one
of the per-equation AD questions (``jvp_equation``, ``nonzero_outputs``,
``pruned_equation``, ``partially_evaluated``, ``known_equation``, ``unknown_equation``,
``linearized_*``, ``transposed_equation``) and writes it as a
:class:`~shardlaw.spec.vectors.program_form.ProgramForm`: the jitted function its
:class:`~shardlaw.spec.transforms.autodiff.JitBody` summarises, as a stand-in
:class:`~shardlaw.spec.program.description.Program`, the program rewrite that asks the same
question, and how the old answer is read back. :data:`AUTODIFF_FORMS` lists them by
question; :mod:`~shardlaw.spec.vectors.transformed_migration` says what each is.
"""

from __future__ import annotations

import dataclasses

from ..core.rules import Rejection
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..program.autodiff import linearize_program, vjp_program
from ..program.description import Jit, Opaque, Program, Value
from ..program.explain import ProgramVerdict
from ..program.partial_eval import PartiallyEvaluatedProgram, dce_program, partial_eval_program
from ..transforms import autodiff
from ..transforms.autodiff import JitBody, JitEquation, Linearized, PartiallyEvaluated
from ..transforms.transformed import TransformedCall
from .program_form import NoProgramForm, ProgramForm

__all__ = ["AUTODIFF_FORMS"]

# --------------------------------------------------------------------------- autodiff

def _rank(equation: JitEquation) -> int:
    """A rank every NamedSharding of the equation fits (the values' shapes are not given)."""
    specs = [len(s.spec) for s in (*equation.in_shardings, *equation.out_shardings)
             if isinstance(s, NamedSharding)]
    return max(specs, default=0)


def _jitted(equation: JitEquation, body: JitBody, nonzero: tuple[bool, ...]) -> Program:
    """The jitted function a JitBody summarises: one input per primal (float32 where its
    tangent is non-zero, int32 — not differentiable — where it is a zero), each output
    its forwarded input, an ``add`` of the inputs it depends on, or a constant."""
    shape = (8,) * _rank(equation)
    inputs = tuple(Value.numpy(shape, "float32" if nz else "int32") for nz in nonzero)
    equations, outputs = [], []
    for j, (deps, forwarded) in enumerate(zip(body.dependencies, body.forwarded)):
        if forwarded is not None:
            outputs.append(forwarded)
            continue
        deps = sorted(deps)
        dtype = "float32" if any(nonzero[i] for i in deps) or not deps else "int32"
        if deps:
            operands = tuple(deps) if len(deps) > 1 else (deps[0], deps[0])
            equations.append(Opaque(operands, (Value.typed(shape, dtype),), primitive="add"))
        else:
            equations.append(Opaque((), (Value.typed(shape, dtype),), primitive="iota",
                                    params=(("dimension", 0), ("shape", shape))))
        outputs.append(len(inputs) + len(equations) - 1)
    try:
        return Program(inputs, tuple(equations), tuple(outputs),
                       in_shardings=equation.in_shardings,
                       out_shardings=equation.out_shardings,
                       donated=equation.donated_invars)
    except Rejection as error:
        raise NoProgramForm(f"the jit equation is not a program description: {error}") \
            from None


def _jvp_equation_form(call: TransformedCall) -> ProgramForm:
    """The jitted function under ``jvp_program``; the answer is the JVP's jit equation."""
    k = call.keywords
    equation, body = k["primal_equation"], k["jit_body"]
    nonzero = autodiff._check_facts(equation, body, k["nonzero_tangents"])
    if any(len(deps) > 2 for deps in body.dependencies):
        raise NoProgramForm("an output depends on more than two inputs: add takes two")
    program = _jitted(equation, body, nonzero)

    def read(rewritten: Program, verdict: ProgramVerdict) -> JitEquation:
        jit = next(e for e in rewritten.equations if isinstance(e, Jit))
        count = len(jit.body.inputs)
        return JitEquation(jit.body.in_shardings or (UNSPECIFIED,) * count,
                           jit.body.out_shardings or (UNSPECIFIED,) * len(jit.body.outputs),
                           jit.body.donated or (False,) * count)

    return ProgramForm(program, (("jvp", ()),), "trace", read)


def _nonzero_outputs_form(call: TransformedCall) -> ProgramForm:
    """The jitted function under ``jvp_program``: an output's tangent is nonzero where the
    JVP's jit computes it, a zero where the rewrite makes one outside (a broadcast)."""
    body = call.keywords["jit_body"]
    if not isinstance(body, JitBody):
        raise NoProgramForm("jit_body is not a JitBody")
    nonzero = autodiff._booleans(call.keywords["nonzero_tangents"], "nonzero_tangents",
                                 body.inputs)
    count = len(body.dependencies)
    equation = JitEquation((UNSPECIFIED,) * body.inputs, (UNSPECIFIED,) * count)
    if any(len(deps) > 2 for deps in body.dependencies):
        raise NoProgramForm("an output depends on more than two inputs: add takes two")
    program = _jitted(equation, body, nonzero)

    def read(rewritten: Program, verdict: ProgramVerdict) -> tuple[bool, ...]:
        tangents = rewritten.outputs[count:]
        return tuple(isinstance(rewritten.equations[found[0]], Jit)
                     for found in map(rewritten.producer, tangents))

    return ProgramForm(program, (("jvp", ()),), "trace", read)


def _pruned_equation_form(call: TransformedCall) -> ProgramForm:
    """A jit calling the jitted function its JitBody summarises, its outputs the inner
    jit's, pruned by ``dce_program`` to the used ones (AD-8's rule for the inner jit);
    the answer is the pruned inner jit equation (None: it went)."""
    k = call.keywords
    equation, body = k["primal_equation"], k["jit_body"]
    autodiff._check_pair(equation, body)
    used = autodiff._booleans(k["used_outputs"], "used_outputs", len(body.dependencies))
    inner = _jitted(equation, body, (True,) * body.inputs)
    count = len(inner.inputs)
    outer = Program(tuple(v.type for v in inner.inputs),
                    (Jit(tuple(range(count)), body=inner),),
                    tuple(range(count, count + len(inner.outputs))))
    pruned, _ = dce_program(outer, used)
    program = pruned if pruned is not None else Program(outer.inputs)

    def read(rewritten: Program, verdict: ProgramVerdict) -> JitEquation | None:
        jit = next((e for e in rewritten.equations if isinstance(e, Jit)), None)
        if jit is None:
            return None
        return JitEquation(jit.body.in_shardings, jit.body.out_shardings, jit.body.donated)

    return ProgramForm(program, (), "trace", read)


def _split_stand_in(equation: JitEquation, body: JitBody, unknown: tuple[bool, ...]
                    ) -> Program:
    """The jitted function a JitBody summarises, written so that partial evaluation with
    ``unknown`` inputs passes exactly its residuals: ``stored_residuals`` values computed
    from the known inputs (a ``sin`` of one, or an ``iota``) and the rest known inputs, all
    read by the first unknown output computed (a ``mul`` of its unknown inputs and them);
    a known output is forwarded, an ``add`` of its inputs or an ``iota``, an unknown one
    forwarded or a ``mul`` of its unknown inputs only."""
    shape = (8,) * _rank(equation)
    count = body.inputs
    known_inputs = [i for i in range(count) if not unknown[i]]
    unknown_out = autodiff.nonzero_outputs(body, unknown)
    passed = body.residuals - body.stored_residuals
    if passed > len(known_inputs):
        raise NoProgramForm(f"{passed} residuals passed on as they are but {len(known_inputs)} "
                            "known inputs: a residual that is a known output is not written")
    computed = [j for j, (u, f) in enumerate(zip(unknown_out, body.forwarded))
                if u and f is None]
    if body.residuals and not computed:
        raise NoProgramForm("residuals, but no unknown output computed to read them")
    value = Value.typed(shape)
    equations: list = []

    def made(operands: tuple, primitive: str, params: tuple = ()) -> int:
        equations.append(Opaque(operands, (value,), primitive=primitive, params=params))
        return count + len(equations) - 1

    iota = (("dimension", 0), ("shape", shape))
    residuals = [made((known_inputs[r % len(known_inputs)],), "sin") if known_inputs
                 else made((), "iota", iota) for r in range(body.stored_residuals)]
    residuals += known_inputs[:passed]
    outputs = []
    for j, (deps, forwarded) in enumerate(zip(body.dependencies, body.forwarded)):
        if forwarded is not None:
            outputs.append(forwarded)
        elif unknown_out[j]:
            reads = tuple(sorted(d for d in deps if unknown[d]))
            if j == computed[0]:
                reads += tuple(residuals)
            outputs.append(made(reads, "mul"))
        elif deps:
            outputs.append(made(tuple(sorted(deps)), "add"))
        else:
            outputs.append(made((), "iota", iota))
    try:
        return Program(tuple(Value.numpy(shape) for _ in range(count)), tuple(equations),
                       tuple(outputs), in_shardings=equation.in_shardings,
                       out_shardings=equation.out_shardings, donated=equation.donated_invars)
    except Rejection as error:
        raise NoProgramForm(f"the jit equation is not a program description: {error}") \
            from None


def _staged(program: Program, split: PartiallyEvaluatedProgram, unknown: tuple[bool, ...]
            ) -> Program:
    """A program calling the jit ``program`` is, as partial evaluation stages it: the known
    jit on the known inputs, then the unknown jit on the unknown inputs and the
    residuals (a known input passed on, else the known jit's result)."""
    count = len(program.inputs)
    unknown_in = [i for i in range(count) if unknown[i]]
    known_in = [i for i in range(count) if not unknown[i]]
    known = split.known
    first = count
    results = {}   # value number in ``program`` -> number in the staged program
    # the known jit's outputs: each known output but an input forwarded unsharded (by
    # position: a value may be returned twice, with different out_shardings), then the
    # residuals it computes
    primal = [j for j, (n, u) in enumerate(zip(program.outputs, split.unknown_outputs))
              if not u and not (n < count and program.out_shardings[j] is UNSPECIFIED)]
    returned = [program.outputs[j] for j in primal]
    stored = [n for n in split.residuals if n >= count and n not in returned]
    for k, n in enumerate(returned + stored):
        results.setdefault(n, first + k)
    at = {j: first + k for k, j in enumerate(primal)}
    equations = [Jit(tuple(known_in), body=known)]
    outputs = []
    if split.unknown is not None:
        operands = tuple(unknown_in) + tuple(n if n < count else results[n]
                                             for n in split.residuals)
        equations.append(Jit(operands, body=split.unknown))
    after = first + len(known.outputs)
    unknown_count = 0
    for j, (n, u) in enumerate(zip(program.outputs, split.unknown_outputs)):
        if u:
            outputs.append(after + unknown_count)
            unknown_count += 1
        else:
            outputs.append(at.get(j, n))
    return Program(tuple(v.type for v in program.inputs), tuple(equations), tuple(outputs))


def _partially_evaluated_form(call: TransformedCall) -> ProgramForm:
    """The jitted function its JitBody summarises (:func:`_split_stand_in`), split by
    ``partial_eval_program`` and staged as JAX stages it (a known jit, then an unknown
    one); the answer is the two jit equations."""
    k = call.keywords
    equation, body = k["primal_equation"], k["jit_body"]
    unknown = autodiff._check_facts(equation, body, k["unknown_inputs"], "unknown_inputs")
    program = _split_stand_in(equation, body, unknown)
    staged = _staged(program, partial_eval_program(program, unknown), unknown)

    def read(rewritten: Program, verdict: ProgramVerdict) -> PartiallyEvaluated:
        jits = [e for e in rewritten.equations if isinstance(e, Jit)]
        both = [JitEquation(j.body.in_shardings, j.body.out_shardings, j.body.donated)
                for j in jits]
        return PartiallyEvaluated(both[0], both[1] if len(both) > 1 else None)

    return ProgramForm(staged, (), "trace", read)


def _known_equation_form(call: TransformedCall) -> ProgramForm:
    form = _partially_evaluated_form(call)
    return dataclasses.replace(form, read=lambda p, v: form.read(p, v).known)


def _unknown_equation_form(call: TransformedCall) -> ProgramForm:
    form = _partially_evaluated_form(call)
    return dataclasses.replace(form, read=lambda p, v: form.read(p, v).unknown)


def _linear_stand_in(equation: JitEquation, body: JitBody, nonzero: tuple[bool, ...]
                     ) -> Program:
    """The jitted function a JitBody summarises, written so that linearizing it saves
    exactly its residuals: residual ``r`` is an ``iota`` the body computes (the first
    ``stored_residuals``) or an input whose tangent is a zero (the others), and the tangent
    of output ``j`` reads those of ``residual_uses[j]``: the output is a sum (``add``) of
    the inputs it depends on, multiplied (``mul``) by each residual it reads; an output
    is forwarded, or an ``iota`` when it depends on nothing."""
    shape = (8,) * _rank(equation)
    count = body.inputs
    moving = autodiff.nonzero_outputs(body, nonzero)
    uses = [u if m else frozenset() for u, m in zip(body.residual_uses, moving)]
    if set().union(*uses, set()) != set(range(body.residuals)):
        raise NoProgramForm("a residual no non-zero output tangent reads: no stand-in "
                            "body saves it")
    still = [i for i in range(count) if not nonzero[i]]
    passed = body.residuals - body.stored_residuals
    if passed > len(still):
        raise NoProgramForm(f"{passed} residuals passed on as they are but {len(still)} "
                            "inputs with a zero tangent: a residual that is a primal output "
                            "is not written")
    inputs = tuple(Value.numpy(shape, "float32" if nz else "int32") for nz in nonzero)
    equations: list = []

    def made(operands: tuple, primitive: str, dtype: str = "float32", params: tuple = ()
             ) -> int:
        equations.append(Opaque(operands, (Value.typed(shape, dtype),), primitive=primitive,
                                params=params))
        return count + len(equations) - 1

    iota = (("dimension", 0), ("shape", shape))
    residuals = [made((), "iota", "float32", iota) for _ in range(body.stored_residuals)]
    residuals += still[:passed]
    outputs = []
    for j, (deps, forwarded) in enumerate(zip(body.dependencies, body.forwarded)):
        if forwarded is not None:
            outputs.append(forwarded)
            continue
        if not deps:
            outputs.append(made((), "iota", "float32", iota))
            continue
        order = sorted(deps)
        dtype = "float32" if any(nonzero[d] for d in order) else "int32"
        value = made((order[0], order[0]), "add", dtype)
        for d in order[1:]:
            value = made((value, d), "add", dtype)
        for r in sorted(uses[j]):
            value = made((value, residuals[r]), "mul", dtype)
        outputs.append(value)
    try:
        inner = Program(inputs, tuple(equations), tuple(outputs),
                        in_shardings=equation.in_shardings,
                        out_shardings=equation.out_shardings, donated=equation.donated_invars)
    except Rejection as error:
        raise NoProgramForm(f"the jit equation is not a program description: {error}") \
            from None
    return inner


def _stand_in_jits(program: Program) -> list[JitEquation]:
    """The jit equations of the function a rewrite is asked of (it names them
    ``jitted``), anywhere in ``program``, in order."""
    found = []
    for eq in program.equations:
        if isinstance(eq, Jit) and eq.name == "jitted":
            body = eq.body
            found.append(JitEquation(body.in_shardings or (UNSPECIFIED,) * len(body.inputs),
                                     body.out_shardings or (UNSPECIFIED,) * len(body.outputs),
                                     body.donated or (False,) * len(body.inputs)))
        elif eq.body is not None:
            found += _stand_in_jits(eq.body)
    return found


def _linearized_form(call: TransformedCall) -> ProgramForm:
    """The stand-in body (:func:`_linear_stand_in`) under ``linearize_program``; the
    program stored is the rewrite applied (the primal and the tangent call one after the
    other) and the answer its two jit equations."""
    k = call.keywords
    equation, body = k["primal_equation"], k["jit_body"]
    nonzero = autodiff._check_facts(equation, body, k["nonzero_tangents"])
    program = linearize_program(_linear_stand_in(equation, body, nonzero)).applied

    def read(rewritten: Program, verdict: ProgramVerdict) -> Linearized:
        found = _stand_in_jits(rewritten)
        return Linearized(found[0], found[1] if len(found) > 1 else None)

    return ProgramForm(program, (), "trace", read)


def _linearized_primal_form(call: TransformedCall) -> ProgramForm:
    form = _linearized_form(call)
    return dataclasses.replace(form, read=lambda p, v: form.read(p, v).primal)


def _linearized_tangent_form(call: TransformedCall) -> ProgramForm:
    form = _linearized_form(call)
    return dataclasses.replace(form, read=lambda p, v: form.read(p, v).tangent)


def _used_only(equation: JitEquation, body: JitBody, nonzero: tuple[bool, ...],
               used: tuple[bool, ...]) -> tuple[JitEquation, JitBody]:
    """The jit equation and facts of the function returning only the ``used`` outputs
    (those whose cotangent comes), with the residuals their tangents read: what the
    transposed equation depends on. (A caller dropping the other outputs would be the
    plainer stand-in, but the program path keeps an inner jit's outputs its caller does
    not use, with their residuals, where JAX prunes them.)"""
    if all(used):
        return equation, body
    moving = autodiff.nonzero_outputs(body, nonzero)
    keep = [j for j, u in enumerate(used) if u]
    read = sorted(set().union(*(body.residual_uses[j] for j in keep if moving[j]), set()))
    position = {r: n for n, r in enumerate(read)}
    uses = [frozenset(position[r] for r in body.residual_uses[j]) if moving[j]
            else frozenset() for j in keep]
    facts = JitBody(body.inputs, [body.dependencies[j] for j in keep],
                    [body.forwarded[j] for j in keep], len(read), len(read), uses)
    return JitEquation(equation.in_shardings, tuple(equation.out_shardings[j] for j in keep),
                       equation.donated_invars), facts


def _transposed_form(call: TransformedCall) -> ProgramForm:
    """The stand-in body of the used outputs (:func:`_used_only`) under ``vjp_program``:
    the answer is its transposed jit (None where none is staged)."""
    k = call.keywords
    equation, body = k["primal_equation"], k["jit_body"]
    nonzero = autodiff._check_facts(equation, body, k["nonzero_tangents"])
    used = autodiff._booleans(k["cotangent_outputs"], "cotangent_outputs",
                              len(body.dependencies))
    program = vjp_program(_linear_stand_in(*_used_only(equation, body, nonzero, used),
                                           nonzero)).applied

    def read(rewritten: Program, verdict: ProgramVerdict) -> JitEquation | None:
        found = _stand_in_jits(rewritten)
        return found[1] if len(found) > 1 else None

    return ProgramForm(program, (), "trace", read)


# The autodiff questions with a program form, and the function that writes it.
AUTODIFF_FORMS = {
    "jvp_equation": _jvp_equation_form,
    "nonzero_outputs": _nonzero_outputs_form,
    "pruned_equation": _pruned_equation_form,
    "linearized_equations": _linearized_form,
    "linearized_primal": _linearized_primal_form,
    "linearized_tangent": _linearized_tangent_form,
    "transposed_equation": _transposed_form,
    "partially_evaluated": _partially_evaluated_form,
    "known_equation": _known_equation_form,
    "unknown_equation": _unknown_equation_form,
}

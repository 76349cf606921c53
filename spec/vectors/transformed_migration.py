"""The transformed-call questions asked of whole programs: the registry's retirement path.

A :class:`~shardlaw.spec.transforms.transformed.TransformedCall` asks one per-equation spec
function (``TRANSFORMS``, deprecated). Where the question has a whole-program form,
:func:`program_form` writes it as a :class:`~shardlaw.spec.program.description.Program`
with the transformations the spec applies to it (``vmap_program`` ...) and says how to read
the old answer back from the rewritten program and its
:class:`~shardlaw.spec.program.explain.ProgramVerdict`; :func:`ask_program` asks the
program path and answers with a :class:`~shardlaw.spec.transforms.transformed.TransformedVerdict`
(its result read back; a refusal's rule, exception types and path; the trace is the program
path's own, which names other rules than the per-equation function's); and
:func:`migrate_vector` writes a stored transformed-call vector as a program vector
(:mod:`~shardlaw.spec.vectors.program_vectors`), its expected verdict the program path's.

Questions with a program form:

* ``vmap_jit`` — a Program whose body is the jit call of one example, an equation (its
  in/out shardings, a result per ``result_ranks`` made where ``result_axes`` puts its batch
  axis), unchecked (the question is about the batched equation: JAX checked the jit's
  shardings on the example), under ``vmap_program`` with ``out_axes`` at the results'
  batch axes (so vmap moves nothing after the call); the answer is the batched jit
  equation's in/out shardings (:class:`~shardlaw.spec.transforms.batching.BatchedJit`).
  The jit is an equation of the program, not the program's own call: JAX binds the
  batched equation without the checks ``jax.jit`` makes of its options and arguments, so
  a batch the spmd axes split unevenly, a sharding of more dimensions than the example,
  or a batch dimension left UNCONSTRAINED on an abstract mesh (BAT-2) is traced (the
  program's own call would be refused at the call, FIT-1 or JIT-2).
* ``with_sharding_constraint`` — with_sharding_constraint's own argument checks (WSC-0 ..
  WSC-3: the shardings tree and its leaves, resolved) first, then a Program with one input
  and one ``ShardingConstraint`` per leaf, traced; the answer is each equation's
  :class:`~shardlaw.spec.transforms.constraint.Constraint` (whether it leaves an equation:
  not under an all-Explicit context mesh).
* ``constrained_result`` — a Program returning one constrained value, run; the answer is
  the result's sharding (None where the compiler chooses).
* ``batch_constraint`` — that Program under ``vmap_program`` with the batch axis at
  ``batch_dim``; the answer is the batched constraint equation.
* ``lower_constraints`` — a Program returning every constrained value, run; the answer is
  its device assignment's ids.
* ``check_shard_map`` — check_shard_map's own argument checks (SMAP-0, SMAP-1, SMAP-2, the
  spec trees SMAP-5 and SMAP-6) first, then a Program of one ``ShardMap`` equation over
  the argument leaves whose body is what the registry models (each result an argument's
  shard, summed with a ``psum`` equation or not), run; the answer is read from the
  verdict's decided record of the shard_map (its manual axes, per-shard types) and the
  equation's result shapes; an operand typed over Explicit axes is a
  ``jax.ShapeDtypeStruct`` on that split (its type carries it). Arguments passed whole or
  typed over Explicit axes the shard_map leaves automatic (SMAP-18 types them inside),
  in_specs read off the types, and an accepted shard_map over a mesh with Explicit axes
  are not described. A refusal's path is the old one: None, or the result a psum belongs to.
* ``jvp_equation`` — the jitted function its JitBody summarises (an input per primal,
  float32 where its tangent is non-zero and int32 where it is a zero; each output its
  forwarded input, an ``add`` of the inputs it depends on, or a constant) under
  ``jvp_program``; the answer is the JVP's jit equation.
* ``nonzero_outputs`` — the same under ``jvp_program``; an output's tangent is nonzero
  where the JVP's jit computes it (a zero is made outside it).

* ``collective_groups``, ``replica_groups``, ``manual_axes_of``, ``per_shard_shape``,
  ``unshard_shape`` — a jit of one shard_map (check_vma off) over the mesh, its body a
  ``psum`` over the collective's axes or its input returned, traced; the answer is read
  from the verdict's decided records (the psum's groups, the shard_map's manual axes and
  body input types) or the shard_map's result type.
* ``pruned_equation`` — a jit calling the jitted function its JitBody summarises, pruned
  by :func:`~shardlaw.spec.program.partial_eval.dce_program`; the answer is the pruned
  inner jit equation (None: it went).
* ``partially_evaluated``, ``known_equation``, ``unknown_equation`` — a stand-in body
  whose partial evaluation passes exactly the JitBody's residuals, split by
  :func:`~shardlaw.spec.program.partial_eval.partial_eval_program` and staged as JAX
  stages it (the known jit, then the unknown one on the residuals).
* ``linearized_equations``, ``linearized_primal``, ``linearized_tangent``,
  ``transposed_equation`` — a stand-in body whose linearization saves exactly the
  JitBody's residuals (computed ones first, then inputs with a zero tangent), each output's
  tangent reading those its ``residual_uses`` names, under ``linearize_program`` or (the
  outputs whose cotangent comes only) ``vjp_program``; the answer is the rewrite's jit
  equations.

The program a form stores is the rewrite applied (``applied`` for linearize and vjp, the
staged known and unknown jits, the pruned call): the program vector replays it through
``explain_program``. The forms of the AD questions are written in
:mod:`~shardlaw.spec.vectors.autodiff_forms`. The others are listed in :data:`PER_EQUATION` with the reason they
stay per-equation questions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..core.rules import Rejection, explain, tracing
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec as P
from ..jit.call import Arg
from ..program.description import Jit, Opaque, Program, ShardingConstraint, ShardMap, Value
from ..program.explain import ProgramVerdict, explain_program
from ..core.pytree import leaves_with_paths, show_path
from ..program.shardmap import GROUPS_LISTED_UP_TO, Manual
from ..transforms import (
    batching, constraint, shardmap, shardmap_parameters, shardmap_specs,
)
from ..transforms.shardmap_parameters import ShardMapTypes
from ..transforms.autodiff import all_explicit
from ..transforms.constraint import Constraint
from ..transforms.batching import BatchedJit, check_vmap_parameters
from ..transforms import transformed
from ..transforms.transformed import PROGRAM_FORMS, TransformedCall, TransformedVerdict
from .autodiff_forms import AUTODIFF_FORMS
from .program_form import NoProgramForm, ProgramForm
from .program_vectors import ProgramVector, dump_program, replay_program
from .transformed_vectors import TransformedVector

__all__ = ["PER_EQUATION", "PROGRAM_FUNCTIONS", "ProgramForm", "NoProgramForm",
           "program_form", "ask_program", "migrate_vector", "old_differences"]

# The program function to use instead of each question that has a program form.
PROGRAM_FUNCTIONS: dict[str, str] = PROGRAM_FORMS

# The questions that stay per-equation, and why.
PER_EQUATION: dict[str, str] = {
    "batch_sharding": "one sharding batched at one axis: a fact of a single sharding, "
                      "asked inside vmap_jit's program form",
    "manual_sharding": "SMAP-15's HLO sharding of a shard around a shard_map's body in the "
                       "lowered module: a ProgramVerdict holds no HLO sharding of a "
                       "shard_map (the program path's lowering records none)",
    "place_argument": "what a value that is not yet a jax.Array becomes when placed: a "
                      "program's input is a Value already typed (float64 canonicalised, an "
                      "int's range, float0 and Python scalars' weak types are decided "
                      "before any program) and a ProgramVerdict holds no device's box",
}




# --------------------------------------------------------------------------- vmap_jit

def _example_shape(shape: tuple[int, ...], axis: int | None) -> tuple[int, ...]:
    return shape if axis is None else shape[:axis] + shape[axis + 1:]


def _result_equation(rank: int, axis: int | None, examples: list[tuple[int, ...]],
                     axes: tuple[int | None, ...], j: int) -> Opaque:
    """An equation making result ``j`` of rank ``rank`` whose batch axis vmap puts at
    ``axis`` (None: unbatched): a constant (an ``iota``), an elementwise ``copy`` of an
    argument batched at that axis, or a ``broadcast_in_dim`` of a batched argument (its
    batch axis first)."""
    if axis is None:
        shape = (8,) * rank
        return Opaque((), (Value.typed(shape),), primitive="iota",
                      params=(("dimension", 0), ("shape", shape)))
    for i, (shape, a) in enumerate(zip(examples, axes)):
        if a == axis and len(shape) == rank:
            return Opaque((i,), (Value.typed(shape),), primitive="copy")
    if axis == 0:
        for i, (shape, a) in enumerate(zip(examples, axes)):
            if a is not None and len(shape) <= rank:
                out = (8,) * (rank - len(shape)) + shape
                kept = tuple(range(rank - len(shape), rank))
                return Opaque((i,), (Value.typed(out),), primitive="broadcast_in_dim",
                              params=(("broadcast_dimensions", kept), ("sharding", None),
                                      ("shape", out)))
    raise NoProgramForm(f"result {j} has its batch axis at {axis}, where no described "
                        f"primitive of one example puts it (no argument of rank {rank} "
                        f"batched there)")


def _vmap_jit_form(call: TransformedCall) -> ProgramForm:
    k = {"in_axes": 0, "result_axes": 0, "axis_size": None, "spmd_axis_name": None,
         "context_mesh": None, "arg_specs": None, **call.keywords}
    shapes, axes, size = check_vmap_parameters(k["arg_shapes"], k["in_axes"], k["axis_size"])
    specs = batching._arg_specs(k["arg_specs"], shapes)
    if any(any(dim) for spec in specs for dim in spec):
        raise NoProgramForm("arguments split over Explicit mesh axes (BAT-9): "
                            "vmap_program does not describe them")
    if any(spec is not None and (spec.unreduced or spec.reduced) for spec in k["arg_specs"] or ()):
        raise NoProgramForm("arguments typed with unreduced or reduced axes (BAT-10): "
                            "the example's inputs are not typed")
    ranks = k["result_ranks"]
    if not isinstance(ranks, (tuple, list)) or not all(type(r) is int for r in ranks):
        raise NoProgramForm("result_ranks is not a list of ranks: no example to write")
    batching._spmd_names(k["spmd_axis_name"])
    ins = batching._leaves(k["arg_shardings"], len(shapes), "arg_shardings")
    outs = batching._leaves(k["result_shardings"], len(ranks), "result_shardings")
    result_axes = batching._result_axes(k["result_axes"], tuple(ranks))
    context = batching._context(k["context_mesh"])
    examples = [_example_shape(s, a) for s, a in zip(shapes, axes)]
    equations = tuple(_result_equation(r, a, examples, axes, j)
                      for j, (r, a) in enumerate(zip(ranks, result_axes)))
    count = len(examples)
    inputs = tuple(Value.numpy(s) for s in examples)
    outputs = tuple(range(count, count + len(equations)))
    try:
        jitted = Program(tuple(v.type for v in inputs), equations, outputs, in_shardings=ins,
                         out_shardings=outs, context_mesh=context)
        # the function vmap is applied to calls the jit (an equation JAX checked on the
        # example; batched, it is bound unchecked)
        program = Program(inputs, (Jit(tuple(range(count)), body=jitted, checked=False),),
                          outputs, context_mesh=context, checked=False)
    except Rejection as error:
        raise NoProgramForm(f"the jit call is not a program description: {error}") from None
    arguments = (("in_axes", axes), ("out_axes", result_axes), ("axis_size", size),
                 ("spmd_axis_name", k["spmd_axis_name"]))

    def read(rewritten: Program, verdict: ProgramVerdict) -> BatchedJit:
        batched = next(eq for eq in rewritten.equations if isinstance(eq, Jit)).body
        return BatchedJit(tuple(batched.in_shardings) or (UNSPECIFIED,) * count,
                          tuple(batched.out_shardings), size)

    return ProgramForm(program, (("vmap", arguments),), "trace", read,
                       (("body[0].jit.in_shardings", "arg_shardings"),
                        ("body[0].jit.out_shardings", "result_shardings")))


# --------------------------------------------------------------------------- constraints

def _value_of(arg: Arg) -> Value:
    """A numpy array's or a Python scalar's Value (the values a constraint is asked on)."""
    if arg.kind == "scalar":
        return Value((), arg.dtype, True)
    if arg.kind != "numpy":
        raise NoProgramForm(f"a constrained value of kind {arg.kind!r}: the constraint "
                            "questions hold numpy arrays and scalars only")
    return Value.numpy(arg.shape, arg.dtype)


def _leaves_equation(sharding: Any, context: Mesh | None) -> bool:
    """Whether a constraint leaves an equation: not a NamedSharding's under a context mesh
    whose axes are all Explicit (JAX asserts it then, WSC-5)."""
    return not (isinstance(sharding, NamedSharding) and all_explicit(context))


def _constraint_program(values: list[Value], shardings: list[Any],
                        unconstrained: list[Any], context: Mesh | None) -> Program:
    count = len(values)
    equations = tuple(ShardingConstraint((i,), sharding=s, unconstrained_dims=u)
                      for i, (s, u) in enumerate(zip(shardings, unconstrained)))
    return Program(tuple(values), equations, tuple(range(count, 2 * count)),
                   context_mesh=context)


def _with_sharding_constraint_form(call: TransformedCall) -> ProgramForm:
    """The constrained function's program: one input per leaf, a constraint equation on
    each (with_sharding_constraint's own argument checks, WSC-0 .. WSC-3, run first: they
    refuse before any equation exists)."""
    k = {"context_mesh": None, **call.keywords}
    values, shardings, context = k["values"], k["shardings"], k["context_mesh"]
    constraint._check_inputs(values, shardings, context)
    constraint.check_constraint_leaves(shardings)
    resolved = constraint._resolved(values, shardings, context)
    program = _constraint_program([_value_of(v) for _, v, _ in resolved],
                                  [s for _, _, s in resolved], [None] * len(resolved),
                                  context)

    def read(rewritten: Program, verdict: ProgramVerdict) -> list[Constraint]:
        return [Constraint(path, value.shape, eq.sharding, eq.unconstrained_dims,
                           _leaves_equation(eq.sharding, context), context)
                for (path, value, _), eq in zip(resolved, rewritten.equations)]

    paths = tuple((f"body[{i}]", path) for i, (path, _, _) in enumerate(resolved))
    return ProgramForm(program, (), "trace", read, paths)


def _one_constraint(c: Constraint) -> Program:
    if not c.equation:
        raise NoProgramForm("the constraint left no equation (an all-Explicit context "
                            "mesh): there is nothing in the program to ask about")
    return _constraint_program([Value.numpy(c.shape)], [c.sharding],
                               [c.unconstrained_dims], c.context_mesh)


def _constrained_result_form(call: TransformedCall) -> ProgramForm:
    """A jit returning the constrained value: the result's sharding as it comes back."""
    c = call.keywords["constraint"]
    program = _one_constraint(c)

    def read(rewritten: Program, verdict: ProgramVerdict) -> Any:
        s = verdict.out_shardings[0]
        return None if s is UNSPECIFIED else s

    return ProgramForm(program, (), "run", read, (("body[0]", c.path),))


def _batch_constraint_form(call: TransformedCall) -> ProgramForm:
    """The constraint's program under vmap with its batch axis at ``batch_dim``: the
    batched constraint equation, read back."""
    k = {"spmd_axis_name": None, **call.keywords}
    c, dim = k["constraint"], k["batch_dim"]
    program = _one_constraint(c)
    if type(dim) is not int or not 0 <= dim <= len(c.shape):
        raise NoProgramForm(f"batch_dim {dim!r} is not an axis of the batched value")
    arguments = (("in_axes", (dim,)), ("out_axes", (dim,)), ("axis_size", 8),
                 ("spmd_axis_name", k["spmd_axis_name"]))

    def read(rewritten: Program, verdict: ProgramVerdict) -> Constraint:
        eq = next(e for e in rewritten.equations if isinstance(e, ShardingConstraint))
        return Constraint(c.path, c.shape, eq.sharding, eq.unconstrained_dims,
                          c.equation, c.context_mesh)

    return ProgramForm(program, (("vmap", arguments),), "trace", read, (("body[0]", c.path),))


def _lower_constraints_form(call: TransformedCall) -> ProgramForm:
    """A jit of the constrained function returning every constrained value: the device
    ids of its one device assignment."""
    given = call.keywords["constraints"]
    if not isinstance(given, (list, tuple)) or not all(isinstance(c, Constraint)
                                                       for c in given):
        raise NoProgramForm("the constraints are not a list of Constraint values")
    contexts = {c.context_mesh for c in given}
    if len(contexts) > 1:
        raise NoProgramForm("the constraints are under different context meshes: no one "
                            "program holds them")
    kept = [c for c in given if c.equation]
    program = _constraint_program([Value.numpy(c.shape) for c in kept],
                                  [c.sharding for c in kept],
                                  [c.unconstrained_dims for c in kept], next(iter(contexts),
                                                                             None))

    def read(rewritten: Program, verdict: ProgramVerdict) -> tuple[int, ...]:
        return tuple(verdict.device_assignment or ())

    return ProgramForm(program, (), "run", read,
                       tuple((f"body[{i}]", c.path) for i, c in enumerate(kept)))




# --------------------------------------------------------------------------- shard_map

def _tried(function: Callable[..., Any], fallback: Any, *args: Any) -> Any:
    """``function(*args)``, or ``fallback`` where a rule refuses: the program path then
    refuses at that rule itself, before it compares the types given with its own."""
    try:
        return function(*args)
    except Rejection:
        return fallback


def _shard_map_body(mesh: Any, manual: frozenset[str], check_vma: bool, flat_in: list,
                    leaves: list, returned: list) -> Program:
    """The body as the registry models it: each result is an argument's shard, summed
    with a ``psum`` over the axes given (none: returned as it is)."""
    inner = Manual(mesh, manual, check_vma).inner_mesh
    inputs = []
    for spec, leaf in zip(flat_in, leaves):
        shape = _tried(shardmap.per_shard_shape, leaf.shape, mesh, spec, leaf.shape, manual)
        axes = frozenset(a for e in spec for a in ((e,) if isinstance(e, str) else e or ()))
        inputs.append(Value.typed(shape, mesh=inner, varying=axes if check_vma else frozenset()))
    equations, outputs = [], []
    for r in returned:
        if not r.summed:
            outputs.append(r.operand)
            continue
        source = inputs[r.operand]
        varying = source.varying - frozenset(r.summed)
        equations.append(Opaque((r.operand,), (dataclasses.replace(source, varying=varying),),
                                primitive="psum", params=(("axes", tuple(r.summed)),)))
        outputs.append(len(inputs) + len(equations) - 1)
    return Program(tuple(inputs), tuple(equations), tuple(outputs))


def _typed_axes(spec: Any) -> frozenset[str]:
    """The mesh axes a type's spec names (none: None)."""
    entries = () if spec is None else spec.partitions
    return frozenset(a for e in entries for a in ((e,) if isinstance(e, str) else e or ()))


def _operand(mesh: Any, leaf: Any) -> Value:
    """A shard_map's operand: a numpy array, or one typed over the mesh's Explicit axes
    (a ``jax.ShapeDtypeStruct`` on that split: its type carries it, Value.spec)."""
    if leaf.spec is None:
        return Value.numpy(leaf.shape)
    return Value.shape_dtype(leaf.shape, sharding=NamedSharding(mesh, leaf.spec))


def _check_shard_map_form(call: TransformedCall) -> ProgramForm:
    """A jit of one shard_map equation over the argument leaves, its body as the registry
    models it; check_shard_map's own argument checks (SMAP-0, SMAP-1, SMAP-2 and the
    spec trees, SMAP-5 and SMAP-6) first."""
    k = {"manual_axes": frozenset(), "check_vma": True, **call.keywords}
    mesh, in_specs, out_specs = k["mesh"], k["in_specs"], k["out_specs"]
    operands, check_vma = shardmap_parameters.check_parameters(
        mesh, in_specs, out_specs, k["operands"], k["results"], k["check_vma"])
    manual = shardmap.manual_axes_of(mesh, k["manual_axes"])
    if in_specs is None or in_specs is shardmap_parameters.INFER:
        raise NoProgramForm("in_specs read off the types or passed whole: a ShardMap "
                            "equation holds one spec per operand")
    for which, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        shardmap_specs.check_spec_leaves(specs, which)
    flat_in = shardmap_specs.match_in_specs(in_specs, operands)
    leaves = [leaf for _, leaf in leaves_with_paths(operands)]
    if any(spec is None for spec in flat_in):
        raise NoProgramForm("an argument passed whole: not described by a ShardMap equation")
    if any(_typed_axes(leaf.spec) - manual for leaf in leaves):
        raise NoProgramForm("an argument typed over Explicit axes the shard_map leaves "
                            "automatic: its type inside keeps them (SMAP-18), which the "
                            "program path's shard_map body types do not carry")
    returned = [leaf for _, leaf in leaves_with_paths(k["results"])]
    result_paths = [show_path(("results", *p)) for p, _ in leaves_with_paths(k["results"])]
    flat_out = shardmap_specs.match_out_specs(out_specs, k["results"])
    body = _shard_map_body(mesh, manual, check_vma, flat_in, leaves, returned)
    results = tuple(Value.typed(_tried(shardmap.unshard_shape, body.value_types[n].shape, mesh,
                                       spec, body.value_types[n].shape, manual))
                    for spec, n in zip(flat_out, body.outputs))
    count = len(leaves)
    equation = ShardMap(tuple(range(count)), results, body=body, mesh=mesh,
                        in_specs=tuple(flat_in), out_specs=tuple(flat_out),
                        manual_axes=manual, check_vma=check_vma)
    program = Program(tuple(_operand(mesh, leaf) for leaf in leaves), (equation,),
                      tuple(range(count, count + len(results))))

    def read(rewritten: Program, verdict: ProgramVerdict) -> ShardMapTypes:
        if AxisType.Explicit in mesh.axis_types:
            raise NoProgramForm("an accepted shard_map over a mesh with Explicit axes: the "
                                "Explicit splits of its types (SMAP-18) are not read back "
                                "from a program")
        decision = dict(verdict.decided)["body[0]"]
        unsplit = tuple(tuple((None,) * len(t.shape) for t in types)
                        for types in (decision.in_types, results))
        return ShardMapTypes(
            frozenset(decision.manual_axes), tuple(flat_in),
            tuple(t.shape for t in decision.in_types),
            tuple(t.varying for t in decision.in_types), tuple(flat_out),
            tuple(t.shape for t in decision.out_types),
            tuple(t.varying for t in decision.out_types), tuple(v.shape for v in results),
            *unsplit)

    sums = [p for p, r in zip(result_paths, returned) if r.summed]
    paths = (*((f"body[0].shard_map.body[{i}]", p) for i, p in enumerate(sums)),
             ("body[0]", None))
    return ProgramForm(program, (), "run", read, paths)


# --------------------------------------------------------------------------- shard_map facts

def _one_shard_map(mesh: Any, manual_axes: Any, shape: tuple, in_spec: Any, out_spec: Any,
                   result: tuple, collective: tuple | None = None) -> Program:
    """A jit of one shard_map (check_vma off) over ``mesh``: one operand of ``shape`` taken
    by ``in_spec``; its body returns its input, or the result of ``collective``
    (primitive, axes) on it; the shard_map's result of shape ``result`` by ``out_spec``."""
    if not isinstance(mesh, (Mesh, AbstractMesh)):
        raise NoProgramForm(f"the mesh is not a Mesh or an AbstractMesh: {mesh!r}")
    if AxisType.Explicit in mesh.axis_types:
        raise NoProgramForm("a mesh with Explicit axes: the operand's type would carry "
                            "its split (SMAP-17), which the fact leaves out")
    manual = shardmap.manual_axes_of(mesh, manual_axes)
    inner = Manual(mesh, manual, False).inner_mesh
    shard = _tried(shardmap.per_shard_shape, shape, mesh, in_spec, shape, manual)
    body_input = Value.typed(shard, mesh=inner)
    equations: tuple = ()
    if collective is not None:
        primitive, axes = collective
        equations = (Opaque((0,), (body_input,), primitive=primitive,
                            params=(("axes", axes),)),)
    body = Program((body_input,), equations, (len(equations),))
    equation = ShardMap((0,), (Value.typed(result),), body=body, mesh=mesh,
                        in_specs=(in_spec,), out_specs=(out_spec,), manual_axes=manual,
                        check_vma=False)
    return Program((Value.numpy(shape),), (equation,), (1,))


def _decision(verdict: ProgramVerdict, path: str = "body[0]") -> Any:
    return dict(verdict.decided)[path]


def _axes_tuple(axes: Any) -> tuple:
    if isinstance(axes, str):
        return (axes,)
    if isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes):
        return tuple(axes)
    raise NoProgramForm(f"collective_axes {axes!r} is not an axis name or a tuple of them")


def _groups_form(call: TransformedCall, concrete: bool) -> ProgramForm:
    """A shard_map whose body is one psum over the collective's axes: its groups as the
    verdict's record of the psum holds them (device ids over a concrete mesh, mesh
    positions over its abstract mesh)."""
    k = {"manual_axes": frozenset(), **call.keywords}
    mesh = k["mesh"]
    if concrete and not isinstance(mesh, Mesh):
        raise NoProgramForm("collective groups are device ids: a Mesh with devices is "
                            "needed (an AbstractMesh has none)")
    if not concrete and isinstance(mesh, Mesh):
        mesh = mesh.abstract
    if isinstance(mesh, (Mesh, AbstractMesh)) and mesh.size > GROUPS_LISTED_UP_TO:
        raise NoProgramForm(f"a mesh of {mesh.size} devices: a program's verdict lists "
                            f"groups up to {GROUPS_LISTED_UP_TO} devices")
    program = _one_shard_map(mesh, k["manual_axes"], (), P(), P(), (),
                             ("psum", _axes_tuple(k["collective_axes"])))

    def read(rewritten: Program, verdict: ProgramVerdict) -> tuple:
        return _decision(verdict, "body[0].shard_map.body[0]").groups

    return ProgramForm(program, (), "trace", read, (("body[0]", None),))


def _collective_groups_form(call: TransformedCall) -> ProgramForm:
    return _groups_form(call, concrete=True)


def _replica_groups_form(call: TransformedCall) -> ProgramForm:
    return _groups_form(call, concrete=False)


def _manual_axes_of_form(call: TransformedCall) -> ProgramForm:
    """A shard_map returning its input: the manual axes its record holds."""
    mesh, manual = call.keywords["mesh"], call.keywords["manual_axes"]
    program = _one_shard_map(mesh, manual, (), P(), P(), ())

    def read(rewritten: Program, verdict: ProgramVerdict) -> frozenset:
        return frozenset(_decision(verdict).manual_axes)

    return ProgramForm(program, (), "trace", read, (("body[0]", None),))


def _shape_of(value: Any, what: str) -> tuple:
    if not isinstance(value, (tuple, list)) or not all(type(d) is int for d in value):
        raise NoProgramForm(f"{what} {value!r} is not a shape")
    return tuple(value)


def _per_shard_shape_form(call: TransformedCall) -> ProgramForm:
    """A shard_map taking the value by the spec and returning its shard whole (out spec
    ``P()``): the body input's type in the record."""
    k = {"manual_axes": frozenset(), **call.keywords}
    shape = _shape_of(k["shape"], "shape")
    mesh, spec = k["mesh"], k["spec"]
    manual = _tried(shardmap.manual_axes_of, frozenset(), mesh, k["manual_axes"])
    shard = _tried(shardmap.per_shard_shape, shape, mesh, spec, shape, manual)
    program = _one_shard_map(mesh, k["manual_axes"], shape, spec, P(), shard)

    def read(rewritten: Program, verdict: ProgramVerdict) -> tuple:
        return _decision(verdict).in_types[0].shape

    return ProgramForm(program, (), "trace", read, (("body[0]", None),))


def _unshard_shape_form(call: TransformedCall) -> ProgramForm:
    """A shard_map taking the value whole (in spec ``P()``) and putting its result
    together by the spec: the shard_map's result type, which the program path holds to
    SMAP-10."""
    k = {"manual_axes": frozenset(), **call.keywords}
    shape = _shape_of(k["shape"], "shape")
    mesh, spec = k["mesh"], k["spec"]
    manual = _tried(shardmap.manual_axes_of, frozenset(), mesh, k["manual_axes"])
    whole = _tried(shardmap.unshard_shape, shape, mesh, spec, shape, manual)
    program = _one_shard_map(mesh, k["manual_axes"], shape, P(), spec, whole)

    def read(rewritten: Program, verdict: ProgramVerdict) -> tuple:
        return rewritten.value_types[rewritten.outputs[0]].shape

    return ProgramForm(program, (), "trace", read, (("body[0]", None),))


_FORMS: dict[str, Callable[[TransformedCall], ProgramForm]] = {
    "vmap_jit": _vmap_jit_form,
    "with_sharding_constraint": _with_sharding_constraint_form,
    "constrained_result": _constrained_result_form,
    "batch_constraint": _batch_constraint_form,
    "lower_constraints": _lower_constraints_form,
    "check_shard_map": _check_shard_map_form,
    **AUTODIFF_FORMS,
    "collective_groups": _collective_groups_form,
    "replica_groups": _replica_groups_form,
    "manual_axes_of": _manual_axes_of_form,
    "per_shard_shape": _per_shard_shape_form,
    "unshard_shape": _unshard_shape_form,
}


def program_form(call: TransformedCall) -> ProgramForm:
    """The program form of ``call``'s question; :class:`NoProgramForm` (with the reason)
    where it has none, a :class:`~shardlaw.spec.core.rules.Rejection` where the call's
    own parameters are refused before any program exists (as vmap refuses them, BAT-0)."""
    if call.transform not in _FORMS:
        raise NoProgramForm(PER_EQUATION.get(call.transform, "no program form"))
    return _FORMS[call.transform](call)


def _transformed(form: ProgramForm) -> Program:
    from .program_vectors import _transformation
    program = form.program
    for name, arguments in form.transforms:
        program = _transformation(name)(program, **dict(arguments))
    return program


def _refusal(error: Rejection, trace: list[str], form: ProgramForm | None
             ) -> TransformedVerdict:
    failure = error.failure
    path = error.path if form is None else form.old_path(error.path)
    return TransformedVerdict(
        accepted=False, trace=tuple(trace), rule=failure.rule,
        error_type=failure.error_type.__name__,
        jax_error=getattr(failure, "jax_error", None) or failure.error_type.__name__,
        message=explain(failure, path), path=path)


def ask_program(call: TransformedCall) -> TransformedVerdict:
    """The answer to ``call`` asked through the program path: its program form
    transformed and explained, the old result read back (NoProgramForm where it has
    none).

    >>> from shardlaw.spec import Mesh, P, NamedSharding
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> verdict = ask_program(TransformedCall.of(
    ...     "vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))], result_shardings=[],
    ...     arg_shapes=[(4, 8)], result_ranks=[], spmd_axis_name="x"))
    >>> verdict.accepted, verdict.result.in_shardings
    (True, (NamedSharding(Mesh({'x': 2, 'y': 4}), P('x', 'y')),))
    >>> ask_program(TransformedCall.of(
    ...     "vmap_jit", arg_shardings=[NamedSharding(mesh, P("y"))], result_shardings=[],
    ...     arg_shapes=[(4, 8)], result_ranks=[], spmd_axis_name="y")).rule
    'BAT-4'
    """
    form = None
    with tracing() as fired:
        try:
            form = program_form(call)
            rewritten = _transformed(form)
        except Rejection as error:
            return _refusal(error, list(fired), form)
    verdict = explain_program(rewritten, until=form.until)
    if not verdict.accepted:
        return TransformedVerdict(False, tuple(fired) + verdict.trace, rule=verdict.rule,
                                  error_type=verdict.error_type, jax_error=verdict.jax_error,
                                  message=verdict.message, path=form.old_path(verdict.path))
    return TransformedVerdict(True, tuple(fired) + verdict.trace,
                              result=form.read(rewritten, verdict))


def migrate_vector(vector: TransformedVector) -> dict:
    """The program vector of a stored transformed-call vector: its program form, its
    transformations, and the program path's verdict as the expected one (named as the old
    vector is, labelled with its rule and ``from-<its side>``). NoProgramForm where the
    question has none; a Rejection where its parameters are refused before any program
    exists."""
    form = program_form(vector.call)
    question = ProgramVector(form.program, form.transforms, form.until)
    verdict = replay_program(question)
    described = (f"migrated from the transformed-call vector {vector.name} "
                 f"({vector.call.transform})")
    return dump_program(form.program, verdict, transforms=form.transforms, until=form.until,
                        name=vector.name, rule=vector.rule, side=f"from-{vector.side}",
                        description=described)


def old_differences(expected: TransformedVerdict, actual: TransformedVerdict) -> list[str]:
    """How the program path's answer ``actual`` differs from a per-equation verdict
    ``expected`` (empty: the same answer): accepted, the result; refused, the rule, the
    exception types and the path. The traces are not compared: the program path fires
    its own rules (the program's checks, the stages of ``explain_program``).

    >>> refused = TransformedVerdict(False, ("BAT-4",), rule="BAT-4", error_type="Exception",
    ...                              jax_error="DuplicateSpecError", path="arg_shardings[0]")
    >>> old_differences(refused, dataclasses.replace(refused, trace=("PROG-1", "BAT-4")))
    []
    >>> old_differences(refused, TransformedVerdict(True, result=None))
    ['expected a refusal by BAT-4, the program path accepts']
    """
    if expected.accepted != actual.accepted:
        return [f"expected a refusal by {expected.rule}, the program path accepts"
                if actual.accepted else f"expected acceptance, the program path refuses "
                f"with {actual.rule} at {actual.path}: {actual.message}"]
    names = ("result",) if expected.accepted else ("rule", "error_type", "jax_error", "path")
    return [f"{n}: expected {getattr(expected, n)!r}, the program path gives "
            f"{getattr(actual, n)!r}" for n in names
            if getattr(expected, n) != getattr(actual, n)]


def _answer(call: TransformedCall) -> TransformedVerdict | None:
    """``ask_program``'s answer, None where the question has no program form."""
    try:
        return ask_program(call)
    except NoProgramForm:
        return None


# explain_transformed answers through the program path (a layer below cannot import it)
transformed.PROGRAM_PATH[:] = [_answer]

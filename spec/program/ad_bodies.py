"""The parts of the AD rewrites of whole programs that every rewrite uses (issue 23).

:mod:`~shardlaw.spec.program.autodiff` rewrites a
:class:`~shardlaw.spec.program.description.Program` under ``jax.jvp``, ``jax.linearize``
and ``jax.vjp``; this module holds what its rewrites share: the tables of primitives they
differentiate (:data:`LINEAR`, :data:`NONLINEAR`), the refusals (AD-0), a body being written
(``BodyBuilder``), the facts of a body (which inputs each output depends on), the tangent of
one equation (``DirectTangents`` for a JVP, ``TangentTape`` for a linearization that stores
residuals), and the types JAX gives what the rewrites create: a tangent its primal's type,
a cotangent its primal's cotangent type (:func:`cotangent_type`), a transposed reshard's or
device_put's target read from its operand's type.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from ..core.rules import Failure, reject, rule, staged
from ..core.shardings import NamedSharding
from ..core.values import AbstractMesh, AxisType, PartitionSpec
from ..transforms.autodiff import JitBody, JitEquation
from .description import (
    MAX_DEPTH, DevicePut, Equation, Opaque, Program, Reshard, ShardingConstraint,
    ShardMap, Value, check_program, mark_typed, remember_typing, type_spec, typed_against,
)
from .primitives import TANGENTS, Kind, entry_of, entry_of_name, names_where
from .shardmap_autodiff import (
    check_summed_types, cotangent_spec, transposed_collective,
)

P = PartitionSpec  # the name the examples use

__all__ = ["LINEAR", "NONLINEAR", "differentiable", "dependencies", "cotangent_type", "inline_consts"]

# Read from the primitive table: the primitives whose tangent is the same primitive applied
# to the operands' tangents; the nonlinear ones of one operand with a known derivative (name
# -> the residuals JAX's linearization stores for it, in the order its tangent reads them:
# ``operand`` and ``result`` are the primal's own values, any other is computed from them
# in the primal body, typed as the result; ``one_minus_result``: one, resharded to the
# result's mesh, minus the result); the products (linear in each operand).
LINEAR = names_where(jvp=("linear", "sum", "add_any"))
NONLINEAR = {name: entry_of_name(name).residuals for name in names_where(jvp="nonlinear")}
BILINEAR = names_where(jvp="bilinear")

# The mesh of a type over no mesh (JAX's empty abstract mesh).
NO_MESH = AbstractMesh((), ())

FLOATS = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


def differentiable(value: Value) -> bool:
    """Whether a value has a tangent that is not a symbolic zero (a float or complex)."""
    return value.dtype in FLOATS


# --------------------------------------------------------------------------- refusals

@dataclasses.dataclass(frozen=True)
class NotRewritten(Failure, rule="AD-0", error=TypeError):
    template = "{what} at {path} is not rewritten by {transform} yet: {why}"
    hint = "Ask explain_program about the untransformed program, or leave this equation out."
    what: str
    path: str
    transform: str
    why: str


@dataclasses.dataclass(frozen=True)
class NotScalar(Failure, rule="AD-0", error=TypeError,
                jax_error="Gradient only defined for scalar-output functions."):
    template = ("grad requires output {output} to be a real scalar; it is {value!r} "
                "(Gradient only defined for scalar-output functions)")
    output: int
    value: Any


@dataclasses.dataclass(frozen=True)
class PassedType(Failure, rule="AD-17", error=ValueError):
    template = ("the {what} passed for {path} is typed {got}, its primal's {what} type is "
                "{expected}: {function} takes only values of that type over Explicit axes")
    hint = ("Put the value on its primal's sharding (jax.device_put or "
            "jax.sharding.reshard) before passing it, or pass a numpy array.")
    what: str
    path: str
    got: str
    expected: str
    function: str


@rule("AD-17", mirrors="jax._src.api._lift_linearized; jax._src.api._vjp_check_ct_avals; "
                       "jax._src.core.typecompat")
def check_passed_type(expected: Value, got: Value, what: str, path: str) -> None:
    """A tangent passed to linearize's function, or a cotangent to vjp's, where it and its primal are both typed over meshes one of which has an Explicit axis, has the primal's mesh and split; else ValueError at trace.

    ``expected`` is the primal's tangent type (an input's, for ``linearize``) or cotangent
    type (an output's, for ``vjp``); a value typed over no mesh (a numpy array, a value
    on one device) or over Auto axes only is taken as any. ``jax.jvp`` takes any: the jit
    it differentiates types its tangents as its primals.

    >>> mesh = AbstractMesh((4,), ("x",), (AxisType.Explicit,))
    >>> check_passed_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,)), "tangent", "t[0]")
    >>> check_passed_type(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh),
    ...                   "tangent", "t[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [AD-17]: the tangent passed for t[0] is typed float32[8] over ('x',), its primal's tangent type is float32[8] over ('x',) split P('x'): linearize's function takes only values of that type over Explicit axes. Put the value on its primal's sharding (jax.device_put or jax.sharding.reshard) before passing it, or pass a numpy array.
    """
    if expected.mesh is None or got.mesh is None or not (
            _any_explicit(expected.mesh) or _any_explicit(got.mesh)):
        return
    if (expected.mesh, expected.spec) != (got.mesh, got.spec):
        function = "linearize's function" if what == "tangent" else "vjp's function"
        with staged("trace"):
            raise reject(PassedType(what, path, _typed(got), _typed(expected), function))


def _any_explicit(mesh: AbstractMesh) -> bool:
    return AxisType.Explicit in mesh.axis_types


def _typed(value: Value) -> str:
    mesh = f" over {value.mesh.axis_names}" if value.mesh is not None else ""
    split = f" split {value.spec}" if value.spec is not None else ""
    return f"{value.dtype}{list(value.shape)}{mesh}{split}"


# --------------------------------------------------------------------------- building bodies

class BodyBuilder:
    """A body under construction: its input types, its equations, the types by number."""

    def __init__(self, inputs: tuple[Value, ...], consts: tuple = ()) -> None:
        self.inputs = tuple(inputs)
        self.consts = tuple(consts)
        self.equations: list[Equation] = []
        self.types: list[Value] = [v.type for v in inputs] + [c.value.type for c in consts]
        self.rewritten: dict = {}
        self.depth = 0            # how deep the bodies of its equations nest
        self.all_typed = True     # every equation typed as it was emitted

    def once(self, key: tuple, rewrite: Callable[[], Any]) -> Any:
        """``rewrite()``, or what it gave for an equal ``key`` in this body before (a layer
        repeated: an equation of one form over operands of the same types is rewritten
        alike)."""
        if key not in self.rewritten:
            self.rewritten[key] = rewrite()
        return self.rewritten[key]

    def emit(self, eq: Equation) -> tuple[int, ...]:
        """Append ``eq`` (its results typed by PROG-1 where left out); its result numbers."""
        types = self.types
        try:
            operands = tuple([types[n] for n in eq.operands])
        except IndexError:
            if eq.results is None:
                raise
            operands = None   # (refused when the body is built, PROG-0)
        if operands is None:
            self.all_typed = False
        elif typed_against(eq) != operands:
            eq = self.typed(eq, operands)
        inner = eq.__dict__.get("body")   # (a jit's or a shard_map's)
        if inner is not None and inner.depth > self.depth:
            self.depth = inner.depth
        start = len(types)
        self.equations.append(eq)
        types.extend(eq.results)
        return tuple(range(start, len(types)))

    def typed(self, eq: Equation, operands: tuple[Value, ...]) -> Equation:
        """``eq`` checked against its operands' types and its results typed by PROG-1 where
        left out, marked typed against them, as the program built of this body types it:
        the body is then not typed twice."""
        if not _typing_rule(eq):   # (an opaque equation, a shard_map: as given)
            derived = None
        elif eq.body is not None:
            # (a body built fresh by the rewrite, met once: a key would hash all of it)
            derived = _checked_types(eq, operands)
        else:   # once per form and operand types in this body
            derived = self.once(("typed", eq.form, operands),
                                lambda: _checked_types(eq, operands))
        if eq.results is None:
            eq = eq.renumbered(eq.operands, derived)
        elif derived is not None:
            self.all_typed = False
            return eq   # (results given where PROG-1 types them: compared when built)
        mark_typed(eq, operands)
        return eq

    def opaque(self, primitive: str, operands: tuple[int, ...], results: tuple[Value, ...],
               params: tuple = ()) -> tuple[int, ...]:
        return self.emit(Opaque(operands, tuple(r.type for r in results),
                                primitive=primitive, params=params))

    def joined(self, result: Value, operands: tuple[Value, ...]) -> Value:
        """:func:`_joined` of ``result`` over ``operands``, once per their types in this body
        (each layer of a model transposes alike)."""
        return self.once(("joined", result, operands), lambda: _joined(result, list(operands)))

    def add_all(self, numbers: list[int], path: str = "") -> int:
        """The sum of cotangents (``add_any``) reaching the value at ``path``, one number
        when there is one; each pair typed alike over Explicit axes (AD-14)."""
        total = numbers[0]
        for n in numbers[1:]:
            with staged("trace"):
                check_summed_types(self.types[total], self.types[n], path)
            (total,) = self.opaque("add_any", (total, n), (self.types[total],))
        return total

    def program(self, outputs: tuple[int, ...], **options: Any) -> Program:
        """The program of this body; its equations, each typed as it was emitted, are not
        typed again (PROG-0's checks of their nesting made here)."""
        equations = tuple(self.equations)
        if self.all_typed and self.depth < MAX_DEPTH:
            given = len(self.inputs) + len(self.consts)
            remember_typing(equations, tuple(self.types[:given]), tuple(self.types),
                            self.depth + 1)
        return Program(self.inputs, equations, tuple(outputs), self.consts, **options)


def _typing_rule(eq: Equation) -> bool:
    """Whether ``eq`` has checks of its operands' types or results typed by PROG-1 (its
    entry in the primitive table names a typing rule; else typing it only reads its
    results)."""
    return entry_of(eq).typing is not None or _checks_operands(type(eq))


@functools.cache
def _checks_operands(kind: type) -> bool:
    return kind.check is not Equation.check


def _checked_types(eq: Equation, operands: tuple[Value, ...]) -> tuple[Value, ...] | None:
    """What typing ``eq`` over ``operands`` gives: its checks made (PROG-0), its results'
    types by PROG-1 (None: given)."""
    eq.check(operands)
    return eq.derived(operands)


def inline_body(into: BodyBuilder, program: Program, operands: tuple[int, ...]) -> tuple[int, ...]:
    """Emit ``program``'s equations into ``into`` with its inputs bound to ``operands``;
    the numbers its outputs get. A body holding closed-over constants (a literal a
    shard_map's body passes to a jitted helper) is given them after its inputs
    (:func:`inline_consts`)."""
    check_program(not program.consts or len(operands) == len(program.inputs) + len(
        program.consts), "a body inlined by a transformation", "a body without closed-over "
        "constants, or given them after its inputs", program.consts)
    number = list(operands)
    for eq in program.equations:
        moved = eq.renumbered(tuple(number[n] for n in eq.operands))
        number.extend(into.emit(moved))
    return tuple(number[n] for n in program.outputs)


def literal_consts(program: Program) -> bool:
    """Whether every constant ``program`` closes over is a scalar literal (a numpy scalar:
    not a ref, typed over no mesh, uncommitted), as the description reads a literal
    operand of a loop, a jit or a reshard."""
    return all(not c.ref and c.value.shape == () and c.value.mesh is None
               and not c.value.committed for c in program.consts)


def inline_literals(into: BodyBuilder, program: Program, operands: tuple[int, ...]
                    ) -> tuple[int, ...]:
    """:func:`inline_body` of ``program`` whose constants are scalar literals, each written
    as a literal where it is inlined (a ``broadcast_in_dim`` of nothing), as JAX writes a
    literal where it is read: a remat's body inlined into the primal of its gradient."""
    check_program(literal_consts(program), "a remat's body inlined by a transformation",
                  "a body whose closed-over constants are scalar literals", program.consts)
    return inline_body(into, program, tuple(operands) + tuple(
        into.opaque("broadcast_in_dim", (), (c.value.type,))[0] for c in program.consts))


def inline_consts(into: BodyBuilder, program: Program, operands: tuple[int, ...]
                  ) -> tuple[int, ...]:
    """:func:`inline_body` of ``program`` into a body built with its constants (``into``'s
    constants, numbered after ``into``'s inputs, are ``program``'s)."""
    first = len(into.inputs)
    return inline_body(into, program, tuple(operands) + tuple(
        range(first, first + len(program.consts))))


def jit_options_of(program: Program) -> dict:
    """A body's jit options, to stage it again."""
    return dict(in_shardings=program.in_shardings, out_shardings=program.out_shardings,
                donated=program.donated, keep_unused=program.keep_unused,
                context_mesh=program.context_mesh)


def traced_body(program: Program) -> Program:
    """``program`` as the body of a jit equation: its inputs' types only."""
    return dataclasses.replace(program, inputs=tuple(v.type for v in program.inputs),
                               compiler=None, compiler_in=None)


# --------------------------------------------------------------------------- body facts

def dependencies(program: Program) -> tuple[frozenset[int], ...]:
    """Per output: the inputs it is computed from (an inner jit's outputs by its own body's
    dependencies, any other equation's from all its operands); found once per program (a
    rewrite asks about one body several times)."""
    return program.derived_once("dependencies", lambda: _dependencies(program))


def _dependencies(program: Program) -> tuple[frozenset[int], ...]:
    deps: list[frozenset[int]] = [frozenset({i}) for i in range(len(program.inputs))]
    deps += [frozenset()] * len(program.consts)
    for eq in program.equations:
        operands = eq.operands
        if entry_of(eq).kind is Kind.CALL:   # (by its body's dependencies)
            inner = dependencies(eq.body)
            deps += [frozenset().union(*[deps[operands[i]] for i in d]) for d in inner]
        else:
            union = deps[operands[0]] if len(operands) == 1 else frozenset().union(
                *[deps[n] for n in operands])
            deps += [union] * len(eq.results)
    return tuple(deps[n] for n in program.outputs)


def jit_facts(body: Program, residuals: int, stored: int, outputs: tuple[int, ...] = ()
              ) -> tuple[JitEquation, JitBody]:
    """The AD rules' description of a jit equation over ``body``; an output returns an
    input unchanged as ``outputs`` (the linearized body's, where an inner jit's forwarded
    output became its input) or else ``body``'s own outputs say."""
    count = len(body.inputs)
    forwarded = tuple(n if n < count else None for n in outputs or body.outputs)
    return (JitEquation(body.in_shardings, body.out_shardings, body.donated),
            JitBody(count, dependencies(body), forwarded, residuals, stored))


# --------------------------------------------------------------------------- tangents

class DirectTangents:
    """Where a JVP puts tangents: into the same body as the primals."""

    def __init__(self, body: BodyBuilder) -> None:
        self.primal = body

    def residual(self, number: int) -> int:
        return number

    def type_of(self, ref: int) -> Value:
        return self.primal.types[ref]

    def emit(self, eq: Equation, refs: tuple) -> tuple:
        # (typed as given, else by PROG-1)
        return self.primal.emit(dataclasses.replace(eq, operands=tuple(refs)))


class TangentTape:
    """Where a linearization puts tangents: a separate tangent body, recorded with
    symbolic operands (``("r", k)`` residual k, ``("t", j)`` tangent input j, ``("v", m)``
    result m of a recorded equation) and built once the residuals are known."""

    def __init__(self, primal: BodyBuilder) -> None:
        self.primal = primal
        self.residuals: list[int] = []
        self.stored: dict[int, tuple] = {}   # residual number -> its reference
        self.inputs: list[Value] = []
        self.ops: list[tuple[Equation, tuple]] = []
        self.count = 0
        self.types: dict[tuple, Value] = {}

    def tangent_input(self, value: Value) -> tuple:
        self.inputs.append(value)
        ref = ("t", len(self.inputs) - 1)
        self.types[ref] = value.type
        return ref

    def residual(self, number: int) -> tuple:
        ref = self.stored.get(number)
        if ref is None:   # stored once, in the order the tangents first read them
            ref = self.stored[number] = ("r", len(self.residuals))
            self.residuals.append(number)
            self.types[ref] = self.primal.types[number]
        return ref

    def type_of(self, ref: tuple) -> Value:
        return self.types[ref]

    def emit(self, eq: Equation, refs: tuple) -> tuple:
        call = entry_of(eq).kind is Kind.CALL
        if not call:
            # typed now, once per form and operand types, and recorded typed
            eq = self.primal.typed(eq, tuple([self.types[r] for r in refs]))
        self.ops.append((eq, tuple(refs)))
        # (an inner jit is recorded untyped: its results are its body's)
        results = tuple(eq.body.value_types[n] for n in eq.body.outputs) if call \
            else eq.results
        start, self.count = self.count, self.count + len(results)
        made = tuple(("v", m) for m in range(start, self.count))
        self.types.update(zip(made, results))
        return made

    def tangent(self, outputs: list, **options: Any) -> Program:
        """The tangent body: the residuals' types, then the tangent inputs."""
        residual_types = tuple(self.primal.types[n] for n in self.residuals)
        body = BodyBuilder(residual_types + tuple(v.type for v in self.inputs))
        # each reference's number in the body: residuals, tangent inputs, then results
        number = {("r", k): k for k in range(len(residual_types))}
        number.update((("t", j), len(residual_types) + j) for j in range(len(self.inputs)))
        count = 0
        for eq, refs in self.ops:
            # (an inner jit was recorded untyped: its results are typed here)
            outs = body.emit(eq.renumbered(tuple([number[r] for r in refs])))
            number.update(zip([("v", m) for m in range(count, count + len(outs))], outs))
            count += len(outs)
        return body.program(tuple([number[r] for r in outputs]), **options)


def record_tangent(eq: Equation, tape: Any, operands: tuple[int, ...], moving: list,
                   path: str, transform: str, results: tuple[int, ...] = ()) -> list:
    """Record the tangent of one equation whose primal is emitted (its results numbered
    ``results`` in the primal body), by its rule in the primitive table (:data:`TANGENTS`);
    per result, its tangent (None: a symbolic zero, as for an integer or bool result, whose
    tangent JAX types float0: ``argsort``'s indices)."""
    if all(t is None for t in moving):
        return [None] * len(eq.results)
    tangent = TANGENTS.of(entry_of(eq))
    if tangent is None:
        raise reject(NotRewritten(f"a {eq.kind} equation", path, transform,
                                  "its tangent rule is not described"))
    made = tangent(eq, tape, operands, moving, path, results)
    return [t if differentiable(r) else None for t, r in zip(made, eq.results)]


@TANGENTS.register("sharding_constraint")
def _constraint_tangent(eq: ShardingConstraint, tape: Any, operands: tuple[int, ...],
                        moving: list, path: str, results: tuple[int, ...]) -> list:
    # JAX's JVP of the constraint binds it on the tangent, without
    # with_sharding_constraint's own checks (unconstrained dimensions, fit, axes).
    return list(tape.emit(dataclasses.replace(eq, results=None, checked=False),
                          (moving[0],)))


@TANGENTS.register("reshard")
def _reshard_tangent(eq: Reshard, tape: Any, operands: tuple[int, ...], moving: list,
                     path: str, results: tuple[int, ...]) -> list:
    # (a reshard to the empty mesh, a transposed one's, types its result over none)
    empty = not eq.sharding.mesh.axis_names
    return list(tape.emit(dataclasses.replace(eq, results=eq.results if empty else None),
                          (moving[0],)))


@TANGENTS.register("device_put")
def _device_put_tangent(eq: DevicePut, tape: Any, operands: tuple[int, ...], moving: list,
                        path: str, results: tuple[int, ...]) -> list:
    keep = [k for k, t in enumerate(moving) if t is not None]
    out = tape.emit(DevicePut(tuple(range(len(keep))), targets=tuple(
        eq.targets[k] for k in keep), checked=False), tuple(moving[k] for k in keep))
    placed = dict(zip(keep, out))
    return [placed.get(k) for k in range(len(eq.results))]


@TANGENTS.register("no_derivative")
def _no_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list, path: str,
                results: tuple[int, ...]) -> list:
    """A collective JAX gives no differentiation rule (pmax, pmin): AD-12 refuses a
    non-zero tangent reaching it."""
    with staged("trace"):
        transposed_collective(eq.primitive, dict(eq.params), path)
    return _opaque_tangent(eq, tape, operands, moving, results)


def _opaque(name: str, results: tuple[Value, ...], params: tuple = (), count: int = 0
            ) -> Opaque:
    return Opaque(tuple(range(count)), tuple(r.type for r in results), primitive=name,
                  params=params)


def cotangent_type(value: Value) -> Value:
    """The type of a value's cotangent (JAX's ``to_ct_aval``): the value's type with its
    reduced axes unreduced and its unreduced axes reduced (:func:`cotangent_spec`)."""
    value = value.type
    split = value.spec
    if split is None or not (split.reduced or split.unreduced):
        return value
    return dataclasses.replace(value, spec=cotangent_spec(split))


def put_back_to(operand: Value) -> NamedSharding | None:
    """Where a device_put's cotangent is put: where its operand came from, which JAX
    reads from the operand's type only when that type's mesh is Explicit in every axis
    (its sharding type, in device memory); else nowhere in particular (None)."""
    mesh = operand.mesh
    if mesh is None or not mesh.axis_types or any(
            t.name != "Explicit" for t in mesh.axis_types):
        return None
    return dataclasses.replace(type_sharding(operand), memory_kind="device")


def type_sharding(value: Value) -> NamedSharding:
    """The sharding a value's type is (JAX's ``aval.sharding``): over its mesh, or the
    empty mesh, its split over Explicit axes with an entry per dimension."""
    mesh = value.mesh if value.mesh is not None else NO_MESH
    split = PartitionSpec() if value.spec is None else value.spec
    entries = tuple(split) + (None,) * (len(value.shape) - len(split))
    return NamedSharding(mesh, PartitionSpec(*entries, unreduced=split.unreduced,
                                             reduced=split.reduced))


def _joined(result: Value, operands: list[Value]) -> Value:
    """A primitive's result typed over its operands' mesh where they agree (JAX's Auto
    types), over none where they do not; split over Explicit axes as ``result`` is over
    that mesh, else as the operands over it are."""
    meshes = {v.mesh for v in operands} - {None}
    mesh = meshes.pop() if len(meshes) == 1 else None
    # Split over Explicit axes as the result's own type is when it is over that mesh,
    # else as the operands over that mesh are (JAX's elementwise rule leaves out an
    # operand typed over no mesh: a cotangent keeps its split through a residual's)
    if mesh is None or mesh == result.mesh:
        split = result.spec if mesh is not None else None
    else:
        split = next(v.spec for v in operands if v.mesh == mesh)
    return Value(result.shape, result.dtype, result.weak_type, mesh, result.varying,
                 spec=split)


def product_type(factors: list[Value]) -> Value:
    """The type of a product, before JAX's transpose reshapes it: over the mesh its
    factors agree on (over none where they do not), each dimension split as the factors
    that split it split it (JAX's broadcasting rule), unreduced as a factor typed
    unreduced is and reduced as the others are, less those axes (``mul``'s rule)."""
    meshes = {v.mesh for v in factors} - {None}
    if len(meshes) != 1:
        return Value(factors[0].shape, factors[0].dtype)
    mesh = meshes.pop()
    first = next(v for v in factors if v.mesh == mesh)
    splits = [v.spec for v in factors if v.mesh is not None and v.spec is not None]
    entries = []
    for d in range(len(first.shape)):
        named = [split[d] for split in splits if d < len(split) and split[d] is not None]
        entries.append(named[0] if named else None)
    unreduced = frozenset().union(*(split.unreduced for split in splits))
    reduced = frozenset().union(*(split.reduced for split in splits)) - unreduced
    return dataclasses.replace(first, spec=type_spec(NamedSharding(mesh, PartitionSpec(
        *entries, unreduced=unreduced, reduced=reduced))))


def _opaque_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                    results: tuple[int, ...] = ()) -> list:
    """A primitive whose tangent is not known: an opaque ``linearized_<name>`` of its
    operands (residuals) and its nonzero tangents."""
    given = tuple(t for t in moving if t is not None)
    residuals = tuple(tape.residual(n) for n in operands)
    return list(tape.emit(_opaque(f"linearized_{eq.primitive}", eq.results,
                                  eq.params, len(residuals) + len(given)),
                          residuals + given))


TANGENTS.register("opaque")(lambda eq, tape, operands, moving, path, results:
                            _opaque_tangent(eq, tape, operands, moving, results))

# A primitive whose results JAX gives a zero tangent (a comparison, argmax, iota).
TANGENTS.register("zero")(lambda eq, tape, operands, moving, path, results:
                          [None] * len(eq.results))

# A primitive whose tangent is its operand's tangent unchanged (checkpoint_name's ``name``:
# JAX names the primal only).
TANGENTS.register("forwarded")(lambda eq, tape, operands, moving, path, results:
                               list(moving))


@TANGENTS.register("linear")
def _linear_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                    path: str = "", results: tuple[int, ...] = ()) -> list:
    """A linear primitive: the same primitive applied to the tangents (a tangent has its
    primal's type, JAX's tangent avals, the mesh included)."""
    return list(tape.emit(_opaque(eq.primitive, eq.results, eq.params, len(moving)),
                          tuple(moving)))


@TANGENTS.register("sum")
def _sum_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                 path: str, results: tuple[int, ...]) -> list:
    """``add``/``sub``: linear; a zero tangent of an operand dropped (``sub``'s second
    operand's tangent negated)."""
    if None not in moving:
        return _linear_tangent(eq, tape, operands, moving)
    (k,) = [k for k, t in enumerate(moving) if t is not None]
    given = moving[k]
    if eq.primitive == "sub" and k == 1:
        (given,) = tape.emit(_opaque("neg", (tape.type_of(given),), count=1), (given,))
    result = tape.primal.types[results[0]] if results else eq.results[0]
    return [broadcast_tangent(tape, given, result)]


def broadcast_tangent(tape: Any, tangent: Any, result: Value) -> Any:
    """One operand's tangent of ``add``/``sub`` brought to the result's type, as JAX's
    JVP brings it (``_maybe_broadcast``): itself where shape and sharding type agree;
    resharded where only the sharding type differs; else broadcast (a size-1 dimension
    squeezed out by a reshape first)."""
    got = tape.type_of(tangent)
    if got.shape == result.shape and type_sharding(got) == type_sharding(result):
        return tangent
    if got.shape == result.shape:   # (broadcast_in_dim binds a reshard here)
        empty = result.mesh is None
        return tape.emit(Reshard((0,), sharding=type_sharding(result), results=(
            result.type,) if empty else None), (tangent,))[0]
    if got.shape:
        kept = tuple(i for i, (a, b) in enumerate(zip(got.shape, result.shape)) if a == b)
        squeezed = tuple(got.shape[i] for i in kept)
        if squeezed != got.shape:
            entries = tuple(got.spec or ()) + (None,) * len(got.shape)
            split = None if got.spec is None else PartitionSpec(
                *(entries[i] for i in kept), unreduced=got.spec.unreduced,
                reduced=got.spec.reduced)
            (tangent,) = tape.emit(_opaque("reshape", (dataclasses.replace(
                got.type, shape=squeezed, spec=split),), (
                ("dimensions", None), ("new_sizes", squeezed), ("sharding", None)), 1),
                (tangent,))
    else:
        kept = ()
    return tape.emit(_opaque("broadcast_in_dim", (result.type,), (
        ("broadcast_dimensions", kept), ("shape", tuple(result.shape)),
        ("sharding", None)), 1), (tangent,))[0]


@TANGENTS.register("add_any")
def _add_any_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                     path: str, results: tuple[int, ...]) -> list:
    """add_any's JVP is linear_jvp's: a zero tangent is instantiated (typed as its
    primal), and the sum is typed as its first operand."""
    if None in moving:
        moving = [t if t is not None else tape.emit(_opaque(
            "broadcast_in_dim", (tape.primal.types[n],)), ())[0]
            for t, n in zip(moving, operands)]
    return _linear_tangent(eq, tape, operands, moving)


@TANGENTS.register("bilinear")
def _bilinear_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                      path: str, results: tuple[int, ...]) -> list:
    """A product (``mul``, ``dot_general``): the product rule; a product with a literal,
    which the description leaves out of the operands, is linear in its one operand."""
    if len(operands) == 2:
        return _product_tangent(eq, tape, operands, moving)
    if eq.primitive == "mul" and len(operands) == 1:
        return _linear_tangent(eq, tape, operands, moving)
    return _opaque_tangent(eq, tape, operands, moving, results)


@TANGENTS.register("quotient")
def _div_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list, path: str,
                 results: tuple[int, ...]) -> list:
    """``div``: the quotient rule; a quotient by a literal is linear in its one operand."""
    if len(operands) == 2:
        return _quotient_tangent(eq, tape, operands, moving)
    if len(operands) == 1:
        return _linear_tangent(eq, tape, operands, moving)
    return _opaque_tangent(eq, tape, operands, moving, results)


@TANGENTS.register("nonlinear")
def _nonlinear_rule(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list,
                    path: str, results: tuple[int, ...]) -> list:
    """A nonlinear primitive of one operand: its tangent by the residuals its entry in the
    primitive table names."""
    if len(operands) == 1 and len(results) == 1:
        return _nonlinear_tangent(eq, tape, operands[0], moving[0], results[0])
    return _opaque_tangent(eq, tape, operands, moving, results)


def _product_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list) -> list:
    """The product rule: each nonzero tangent taken with the other operand, a residual
    (the first operand's term first), the two terms summed with ``add_any``."""
    results = eq.results
    terms = []
    for k, t in enumerate(moving):
        if t is None:
            continue
        other = tape.residual(operands[1 - k])
        pair = (t, other) if k == 0 or eq.primitive == "mul" else (other, t)
        terms.append(tape.emit(_opaque(eq.primitive, results, eq.params, 2), pair)[0])
    if len(terms) == 2:
        terms = list(tape.emit(_opaque("add_any", results, count=2), tuple(terms)))
    return terms


def _quotient_tangent(eq: Opaque, tape: Any, operands: tuple[int, ...], moving: list) -> list:
    """``x / y``: the numerator's tangent divided by ``y``; the denominator's times ``x``
    and times ``y ** -2``, computed in the primal body (residuals in that order)."""
    results = eq.results
    terms = []
    if moving[0] is not None:
        terms.append(tape.emit(_opaque("div", results, count=2),
                               (moving[0], tape.residual(operands[1])))[0])
    if moving[1] is not None:
        (negated,) = tape.emit(_opaque("neg", results, count=1), (moving[1],))
        (scaled,) = tape.emit(_opaque("mul", results, count=2),
                              (negated, tape.residual(operands[0])))
        (power,) = tape.primal.opaque("integer_pow", (operands[1],),
                                      (tape.primal.types[operands[1]],), (("y", -2),))
        terms += tape.emit(_opaque("mul", results, count=2), (scaled, tape.residual(power)))
    if len(terms) == 2:
        terms = list(tape.emit(_opaque("add_any", results, count=2), tuple(terms)))
    return terms


def _one(body: BodyBuilder, like: Value) -> int:
    """The literal one JAX's derivative rules subtract from (``_one``): a scalar, resharded
    to the mesh of ``like``'s type when it has one."""
    literal = body.once(("literal one", like.dtype), lambda: Opaque(
        (), (Value.typed((), like.dtype),), primitive="broadcast_in_dim"))
    (one,) = body.emit(literal.renumbered(()))
    if like.mesh is None:
        return one
    # (each made once per body: a layer repeats them)
    reshard = body.once(("one resharded", like.mesh), lambda: Reshard(
        (0,), sharding=_replicated(like.mesh)))
    return body.emit(reshard.renumbered((one,)))[0]


@functools.lru_cache(maxsize=64)
def _replicated(mesh: AbstractMesh) -> NamedSharding:
    """The scalar's sharding over ``mesh`` (made once per mesh: a layer repeats it)."""
    return NamedSharding(mesh, PartitionSpec())


def _residual_value(kind: str, eq: Opaque, body: BodyBuilder, operand: int, result: int) -> int:
    """One residual a :data:`NONLINEAR` primitive's linearization stores: its number in
    the primal body, computed there unless it is the operand or the result."""
    typed = eq.results
    if kind == "operand":
        return operand
    if kind == "result":
        return result
    if kind in ("cos", "sin"):
        return body.opaque(kind, (operand,), typed)[0]
    if kind == "power_slope":   # y * x ** (y - 1)
        y = dict(eq.params).get("y", 2)
        (power,) = body.opaque("integer_pow", (operand,), typed, (("y", y - 1),))
        return body.opaque("mul", (power,), typed)[0]
    if kind == "sqrt_slope":    # 0.5 / sqrt(x)
        return body.opaque("div", (result,), typed)[0]
    (complement,) = body.opaque("sub", (_one(body, typed[0]), result), typed)
    if kind == "one_minus_result":
        return complement
    return body.opaque("mul", (result, complement), typed)[0]   # logistic_slope


def _nonlinear_tangent(eq: Opaque, tape: Any, operand: int, moving: Any, result: int
                       ) -> list:
    """A :data:`NONLINEAR` primitive's tangent: the operand's tangent times its residuals
    (``tanh``: ``(t + t * result) * (1 - result)``; ``log``: ``t / x``)."""
    results = eq.results
    if eq.primitive == "integer_pow" and dict(eq.params).get("y") == 0:
        return list(tape.emit(_opaque("broadcast_in_dim", results), ()))  # zeros, no residual
    stored = [tape.residual(_residual_value(kind, eq, tape.primal, operand, result))
              for kind in entry_of(eq).residuals]
    if eq.primitive == "tanh":
        (scaled,) = tape.emit(_opaque("mul", results, count=2), (moving, stored[0]))
        (moving,) = tape.emit(_opaque("add", results, count=2), (moving, scaled))
        stored = stored[1:]
    combine = "div" if eq.primitive == "log" else "mul"
    (out,) = tape.emit(_opaque(combine, results, count=2), (moving, stored[0]))
    if eq.primitive == "cos":
        (out,) = tape.emit(_opaque("neg", results, count=1), (out,))
    return [out]


# ------------------------------------------------- what a shard_map's rewrites share

def map_manual_axes(eq: ShardMap) -> frozenset[str]:
    """The axes a shard_map makes manual (all its mesh's when it names none)."""
    return eq.manual_axes or frozenset(eq.mesh.axis_names)


def axis_sizes_of(eq: ShardMap) -> dict[str, int]:
    """The size of each axis of a shard_map's mesh, by name."""
    return dict(zip(eq.mesh.axis_names, eq.mesh.axis_sizes))


def put_together_spec(shard: Value, eq: ShardMap, spec: PartitionSpec, manual: frozenset[str]
                      ) -> PartitionSpec | None:
    """The split over Explicit axes of a value put together from per-shard values of type
    ``shard`` by ``spec`` (JAX's ``unshard_aval``): per dimension, the axes ``spec`` names,
    then those the shard's type splits it over that the shard_map leaves automatic."""
    kept = [] if shard.spec is None else list(shard.spec)
    entries = []
    for d in range(len(shard.shape)):
        given = kept[d] if d < len(kept) else None
        others = tuple(n for n in ((given,) if isinstance(given, str) else given or ())
                       if n not in manual)
        entry = spec[d] if d < len(spec) else None
        names = ((entry,) if isinstance(entry, str) else tuple(entry or ())) + others
        entries.append(None if not names else names[0] if len(names) == 1 else names)
    return type_spec(NamedSharding(eq.mesh, PartitionSpec(*entries)))

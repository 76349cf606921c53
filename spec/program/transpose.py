"""The transpose of a linear body (``jax.vjp``'s backward pass over a whole program).

:func:`~shardlaw.spec.program.autodiff.vjp_program` and
:func:`~shardlaw.spec.program.autodiff.grad_program` linearize a program, then transpose
its tangent half here: equation by equation in reverse order, each nested jit into a
transposed jit, each shard_map into the shard_map AD-11 stages, each collective by AD-12,
every cotangent typed and checked as JAX's backward pass checks it (AD-13 to AD-16).
"""

from __future__ import annotations

import dataclasses

from ..core.rules import reject, staged
from ..core.values import PartitionSpec
from ..transforms.autodiff import JitBody, JitEquation, transposed_equation
from .ad_bodies import (
    NotRewritten, BodyBuilder, inline_body, inline_consts, map_manual_axes, product_type,
    put_back_to, put_together_spec, axis_sizes_of, type_sharding, cotangent_type, dependencies,
)
from .description import (
    DevicePut, Equation, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
    check_program,
)
from .control_flow import Remat  # noqa: I001  (after description, which it builds on)
from .lowering import equation_path
from .primitives import TRANSPOSES, entry_of
from .shardmap_autodiff import (
    check_cotangent_type, check_literal_product, check_product_cotangent,
    check_unreduced_operand, cotangent_spec,
    divisor, transposed_collective, unmentioned_axes,
)


def _linear_values(program: Program, linear: tuple[bool, ...]) -> list[bool]:
    """Per value: whether it is computed from a linear input."""
    flags = list(linear) + [False] * len(program.consts)
    for eq in program.equations:
        flags += [any(flags[n] for n in eq.operands)] * len(eq.results)
    return flags


def transpose_body(program: Program, linear: tuple[bool, ...], given: tuple,
                   prefix: str) -> tuple[Program, tuple[bool, ...]]:
    """A linear body transposed: it takes its nonlinear inputs (the residuals), then a
    cotangent per output ``given`` one (its type; None: none), and returns the cotangent
    of each linear input one reaches (the flags). Nonlinear equations run first, then the
    linear ones in reverse order; cotangents that meet are summed (``add_any``)."""
    flags = _linear_values(program, linear)
    nonlinear = [i for i, lin in enumerate(linear) if not lin]
    cotangent_types = tuple(g.type for g in given if g is not None)
    from .custom_rules import rule_consts   # (it builds on this module)

    # (then the constants the bwd of its custom_lin equations close over, inlined here)
    body = BodyBuilder(tuple(program.inputs[i].type for i in nonlinear) + cotangent_types,
                       program.consts + rule_consts(program))
    number: dict[int, int] = {i: k for k, i in enumerate(nonlinear)}
    number.update((len(program.inputs) + c, len(body.inputs) + c)   # its constants
                  for c in range(len(program.consts)))
    cts: dict[int, int] = {}   # per value, the sum of the cotangents that reached it so far

    def accumulate(value: int, ct: int, path: str) -> None:
        # As JAX accumulates: each cotangent summed with those before it as it arrives
        # (AD-14), after the check of its type (AD-13) where one is made.
        cts[value] = body.add_all([cts[value], ct], path) if value in cts else ct

    seeds = iter(range(len(nonlinear), len(nonlinear) + len(cotangent_types)))
    for n, g in zip(program.outputs, given):
        if g is not None:
            accumulate(n, next(seeds), f"{prefix}output")
    numbers = program.result_numbers()
    for eq, made in zip(program.equations, numbers):
        if not flags[made[0]] if made else True:
            outs = body.emit(eq.renumbered(tuple(number[n] for n in eq.operands)))
            number.update(zip(made, outs))
    for k in reversed(range(len(program.equations))):
        eq, made = program.equations[k], numbers[k]
        received = [cts.get(n) for n in made]
        if not made or not flags[made[0]] or all(r is None for r in received):
            continue
        path = equation_path(prefix, k)
        for operand, ct in _transpose_eq(eq, body, received, flags, number, path,
                                         program.value_types):
            # JAX checks each cotangent it hands to a value against the value's
            # cotangent type (AD-13)
            with staged("trace"):
                check_cotangent_type(cotangent_type(program.value_types[operand]),
                                     body.types[ct], path)
            accumulate(operand, ct, path)
    outputs, reached = [], []
    for i, lin in enumerate(linear):
        if lin:
            reached.append(i in cts)
            if i in cts:
                outputs.append(cts[i])
    return body.program(tuple(outputs)), tuple(reached)


def _transpose_eq(eq: Equation, body: BodyBuilder, incoming: list, flags: list[bool],
                  number: dict[int, int], path: str, types: tuple[Value, ...]
                  ) -> list[tuple[int, int]]:
    """One linear equation transposed by its rule in the primitive table
    (:data:`TRANSPOSES`): (operand, cotangent) for each linear operand."""
    transpose = TRANSPOSES.of(entry_of(eq))
    if transpose is None:
        raise reject(NotRewritten(f"a {eq.kind} equation", path, "transpose",
                                  "its transpose rule is not described"))
    return transpose(eq, body, incoming, flags, number, path, types)


@TRANSPOSES.register("sharding_constraint")
def _transpose_constraint(eq: ShardingConstraint, body: BodyBuilder, incoming: list,
                          flags: list[bool], number: dict[int, int], path: str,
                          types: tuple[Value, ...]) -> list[tuple[int, int]]:
    # bound on the cotangent as JAX's transpose rule binds it: without
    # with_sharding_constraint's own checks (WSC-10's split kept is still typing's)
    (ct,) = body.emit(dataclasses.replace(eq, operands=(incoming[0],), results=None,
                                          checked=False))
    return [(eq.operands[0], ct)]


@TRANSPOSES.register("device_put")
def _transpose_device_put(eq: DevicePut, body: BodyBuilder, incoming: list, flags: list[bool],
                          number: dict[int, int], path: str, types: tuple[Value, ...]
                          ) -> list[tuple[int, int]]:
    out = []
    for k, n in _linear_operands(eq, flags):
        if incoming[k] is not None:
            (ct,) = body.emit(DevicePut((incoming[k],), targets=(
                put_back_to(types[n]),), checked=False))
            out.append((n, ct))
    return out


@TRANSPOSES.register("reshard")
def _transpose_reshard(eq: Reshard, body: BodyBuilder, incoming: list, flags: list[bool],
                       number: dict[int, int], path: str, types: tuple[Value, ...]
                       ) -> list[tuple[int, int]]:
    # The cotangent goes back to the operand's cotangent type, as JAX reshards it
    # to that sharding type: its mesh (the empty one where the type has none) and
    # its split over Explicit axes, every dimension named.
    operand = cotangent_type(types[eq.operands[0]])
    (ct,) = body.emit(Reshard((incoming[0],), sharding=type_sharding(operand),
                              results=(operand,)))
    return [(eq.operands[0], ct)]


def _linear_operands(eq: Equation, flags: list[bool]) -> list[tuple[int, int]]:
    """(position, value number) of each operand computed from a linear input."""
    return [(k, n) for k, n in enumerate(eq.operands) if flags[n]]


@TRANSPOSES.register("sum", "sub", "same", "collective", "swap", "opaque")
def _transpose_primitive(eq: Opaque, body: BodyBuilder, incoming: list, flags: list[bool],
                         number: dict[int, int], path: str, types: tuple[Value, ...]
                         ) -> list[tuple[int, int]]:
    return _transpose_opaque(eq, body, incoming, _linear_operands(eq, flags), number,
                             types, path)


def _transpose_opaque(eq: Opaque, body: BodyBuilder, incoming: list, linear_ops: list,
                      number: dict[int, int], types: tuple[Value, ...], path: str = ""
                      ) -> list[tuple[int, int]]:
    """A linear primitive transposed: ``neg`` to ``neg``, ``reduce_sum`` and
    ``broadcast_in_dim`` to each other, sums to each operand, ``mul`` by a residual to
    ``mul``; any other primitive to ``transposed_<name>``. Each cotangent has its
    operand's cotangent type."""
    name, rule = eq.primitive, entry_of(eq).transpose
    present = tuple(c for c in incoming if c is not None)   # (a result without a tangent)
    ct = present[0]
    out = []
    for k, n in linear_ops:
        others = tuple(number[m] for j, m in enumerate(eq.operands) if j != k and m in number)
        # (typed as the operand's cotangent, over the mesh the operands agree on)
        result = (body.joined(cotangent_type(types[n]), tuple(
            [body.types[c] for c in (ct,) + others])),)
        if name == "neg" or name == "sub" and k == 1:
            with staged("trace"):   # a unary primitive takes no unreduced cotangent
                check_unreduced_operand("neg", body.types[ct], path)
        if name == "div":
            with staged("trace"):   # a quotient: div takes no unreduced operand either
                check_unreduced_operand("div", body.types[ct], path)
        if name == "mul" and len(eq.operands) <= 2:
            with staged("trace"):   # the other factor reduced as the cotangent is unreduced
                check_literal_product(body.types[ct], body.types[others[0]] if others
                                      else None, path)
        if name == "mul" and others and result[0].spec is not None and \
                result[0].spec.unreduced:
            with staged("trace"):   # reshaped to an unreduced type where typed otherwise
                check_product_cotangent(product_type([body.types[c] for c in (ct,) + others]),
                                        result[0], path)
        if rule == "sum":
            out.append((n, unbroadcast(body, ct, types[n], retyped=name != "add_any")))
        elif rule == "sub":
            negated = ct if k == 0 else body.opaque("neg", (ct,), (body.types[ct],))[0]
            out.append((n, unbroadcast(body, negated, types[n], retyped=True)))
        elif rule == "same":
            spread = result if body.types[ct].shape == types[n].shape else (
                body.joined(dataclasses.replace(result[0], shape=body.types[ct].shape),
                            tuple(body.types[c] for c in (ct,) + others)),)
            made = body.opaque(name, (ct,) + others, spread, eq.params)[0]
            out.append((n, unbroadcast(body, made, types[n], retyped=name == "mul")))
        elif rule == "collective":
            # A collective's cotangent has its operand's per-shard type (AD-12).
            mesh = types[n].mesh
            swapped, params = transposed_collective(name, dict(eq.params), axis_order=(
                mesh.axis_names if mesh is not None else None))
            out.append((n, body.opaque(swapped, (ct,), (types[n],), params)[0]))
        elif rule == "swap":
            # The cotangent has its operand's shape, over the mesh the operand's type and
            # the incoming cotangent's agree on (seen on JAX's transposes).
            swapped = "broadcast_in_dim" if name == "reduce_sum" else "reduce_sum"
            typed = body.joined(cotangent_type(types[n]), (types[n], body.types[ct]))
            typed = dataclasses.replace(typed, shape=summed_shape(
                eq, types[n], body.types[ct]))
            out.append((n, body.opaque(swapped, (ct,), (typed,))[0]))
        else:
            out.append((n, body.opaque(f"transposed_{name}", present + others, result,
                                       eq.params)[0]))
    return out


def summed_shape(eq: Opaque, operand: Value, ct: Value) -> tuple[int, ...]:
    """The shape of a broadcast's cotangent summed back as JAX's transpose sums it: the
    cotangent summed over every dimension the operand's dimensions do not land on, a
    size-1 operand dimension counting as broadcast only where it is unsplit (one split over
    an axis of size 1 keeps the cotangent's size there, and AD-13 then refuses it); the
    operand's shape for any other equation (a reduction's transpose broadcasts to it)."""
    dimensions = dict(eq.params).get("broadcast_dimensions") \
        if eq.primitive == "broadcast_in_dim" else None
    if dimensions is None or len(dimensions) != len(operand.shape):
        return operand.shape
    spec = tuple(operand.spec or ()) if operand.mesh is not None else ()
    entries = spec + (None,) * (len(operand.shape) - len(spec))
    return tuple(1 if size == 1 and entry is None else ct.shape[d]
                 for size, entry, d in zip(operand.shape, entries, dimensions))


def unbroadcast(body: BodyBuilder, ct: int, operand: Value, retyped: bool = False) -> int:
    """A broadcasting primitive's cotangent brought back to its operand's shape (JAX's
    transpose of an implicit broadcast): summed over every dimension where the operand
    is a scalar, else over the dimensions where the operand has size 1 and the cotangent
    does not, then reshaped to the operand's shape; where the shapes agree, ``ct`` itself,
    or (``retyped``: add's, sub's and mul's transpose, ``_unbroadcast``) reshaped to the
    operand's sharding type where it has a mesh and the cotangent's type differs."""
    got, want = body.types[ct], cotangent_type(operand)
    if got.shape == want.shape:
        if not retyped or want.mesh is None or type_sharding(got) == type_sharding(want):
            return ct
        # (shaped alike, typed apart: reshaped to the operand's sharding type; JAX drops
        # an out_sharding over no mesh, and leaves the cotangent as it is there). The
        # reshape keeps the cotangent's unreduced and reduced axes: AD-13 then meets them.
        # A cotangent over no mesh stays over none (reshape's rule types its result so).
        kept = got.spec if got.spec is not None and (got.spec.unreduced or got.spec.reduced) \
            else None
        typed = got.type if got.mesh is None else want if kept is None else \
            dataclasses.replace(want, spec=PartitionSpec(
                *(want.spec or ()), unreduced=kept.unreduced, reduced=kept.reduced))
        return body.opaque("reshape", (ct,), (typed,), (
            ("dimensions", None), ("new_sizes", tuple(want.shape)),
            ("sharding", type_sharding(want))))[0]
    check_program(not want.shape or len(want.shape) == len(got.shape),
                  "the operand of a broadcasting primitive",
                  f"a scalar or of the cotangent's rank ({len(got.shape)})", want.shape)
    axes = tuple(range(len(got.shape))) if not want.shape else tuple(
        i for i, (a, b) in enumerate(zip(want.shape, got.shape)) if a != b)
    kept = tuple(i for i in range(len(got.shape)) if i not in axes)
    entries = (tuple(got.spec) if got.spec is not None else ()) + (None,) * len(got.shape)
    summed = dataclasses.replace(got.type, shape=tuple(got.shape[i] for i in kept),
                                 spec=None if got.spec is None else PartitionSpec(
                                     *(entries[i] for i in kept)))
    (ct,) = body.opaque("reduce_sum", (ct,), (summed,), (("axes", axes),
                                                         ("out_sharding", None)))
    if not want.shape:
        return ct
    typed = body.joined(want, (body.types[ct],))
    return body.opaque("reshape", (ct,), (typed,), (
        ("dimensions", None), ("new_sizes", tuple(want.shape)), ("sharding", None)))[0]


@TRANSPOSES.register("jit")
def _transpose_jit(eq: Jit, body: BodyBuilder, incoming: list, flags: list[bool],
                   number: dict[int, int], path: str, types: tuple[Value, ...] = ()
                   ) -> list[tuple[int, int]]:
    """A linear inner jit transposed (AD-5): its nonlinear operands (residuals,
    UNSPECIFIED) and the cotangents it receives in, each reached linear operand's
    cotangent out with its in_sharding; nothing donated."""
    inner = eq.body
    linear = tuple(flags[n] for n in eq.operands)
    given = tuple(ct is not None for ct in incoming)
    transposed, reached = transpose_body(inner, linear, tuple(
        None if ct is None else body.types[ct] for ct in incoming), f"{path}.jit.")
    lin_in = [i for i, lin in enumerate(linear) if lin]
    equation = JitEquation(tuple(inner.in_shardings[i] for i in lin_in), inner.out_shardings)
    deps = tuple(frozenset(lin_in.index(i) for i in d if linear[i])
                 for d in dependencies(inner))
    facts = JitBody(len(lin_in), deps, None, len(linear) - len(lin_in), 0)
    staged = transposed_equation(equation, facts, (True,) * len(lin_in), given)
    if staged is None:
        return []
    check_program(len(staged.out_shardings) == sum(reached),
                  f"the cotangents the transposed jit at {path} returns",
                  f"one per linear input reached ({sum(reached)})", staged.out_shardings)
    transposed = dataclasses.replace(
        transposed, in_shardings=staged.in_shardings, out_shardings=staged.out_shardings,
        donated=staged.donated_invars, keep_unused=inner.keep_unused,
        context_mesh=inner.context_mesh)
    operands = tuple(number[n] for n, lin in zip(eq.operands, linear) if not lin) + \
        tuple(ct for ct in incoming if ct is not None)
    # (a remat's transpose is a remat again: JAX's recomputes its nonlinear part)
    made = Remat(operands, body=transposed, name=eq.name, checked=False, prevent_cse=(
        eq.prevent_cse), differentiated=True, policy=eq.policy,
        policy_unread=eq.policy_unread) if type(eq) is Remat else \
        Jit(operands, body=transposed, name=eq.name, checked=False)
    outs = iter(body.emit(made))
    return [(eq.operands[i], next(outs)) for i, r in zip(lin_in, reached) if r]


def _cotangent_result(operand: Value, eq: ShardMap, spec: PartitionSpec,
                      manual: frozenset[str]) -> Value:
    """The type of a transposed shard_map's result: its operand's, split over the mesh's
    Explicit axes as the in spec puts the cotangent together (the manual axes), and as the
    operand's type is over the others (JAX's ``unshard_aval``)."""
    value = operand.type
    if value.mesh is None or not any(t.name == "Explicit" for t in value.mesh.axis_types):
        return value
    return dataclasses.replace(value, spec=put_together_spec(value, eq, spec, manual))


def _automatic_split(result: Value, ct: Value, manual: frozenset[str]
                     ) -> tuple[Value, Value] | None:
    """A shard_map result's type and its cotangent's, split only over the Explicit axes
    the shard_map leaves automatic, which the transposed body's per-shard types carry (a
    cotangent typed over no mesh is split nowhere); None where there are no such axes."""
    mesh = result.mesh
    explicit = set() if mesh is None or result.spec is None else {
        n for n, t in zip(mesh.axis_names, mesh.axis_types)
        if t.name == "Explicit" and n not in manual}
    if not explicit:
        return None

    def kept(spec: PartitionSpec | None) -> PartitionSpec:
        entries = []
        for d in range(len(result.shape)):
            entry = spec[d] if spec is not None and d < len(spec) else None
            names = tuple(n for n in ((entry,) if isinstance(entry, str) else entry or ())
                          if n in explicit)
            entries.append(None if not names else names[0] if len(names) == 1 else names)
        return PartitionSpec(*entries)

    got = ct.spec if ct.mesh == mesh else None
    return (Value(result.shape, result.dtype, False, mesh, spec=kept(result.spec)),
            Value(ct.shape, ct.dtype, False, mesh, spec=kept(got)))


@TRANSPOSES.register("shard_map")
def _transpose_shard_map(eq: ShardMap, body: BodyBuilder, incoming: list, flags: list[bool],
                         number: dict[int, int], path: str, types: tuple[Value, ...]
                         ) -> list[tuple[int, int]]:
    """A linear shard_map transposed (AD-11): one shard_map taking the non-zero cotangents
    with their outputs' specs, then its residuals with their in specs, and returning each
    reached linear operand's cotangent with its in spec; its body the body transposed.
    Unchecked, a cotangent is divided by the manual axes its out spec leaves out before,
    and each input's cotangent summed (psum) over those its in spec leaves out after. A
    repeated shard_map (one form, operands of the same types) is transposed once per body."""
    sizes, manual = axis_sizes_of(eq), map_manual_axes(eq)
    if eq.check_vma and any(s.unreduced or s.reduced for s in eq.in_specs + eq.out_specs):
        raise reject(NotRewritten(f"a {eq.kind} equation", path, "transpose", (
            "its specs name unreduced or reduced axes, so its cotangents are typed unreduced "
            "along its manual axes inside, which the spec does not type yet")))
    linear = tuple(flags[n] for n in eq.operands)
    cts = []
    for j, ct in enumerate(incoming):
        if ct is None:
            continue
        split = _automatic_split(eq.results[j], body.types[ct], manual)
        if split is not None:
            with staged("trace"):
                check_cotangent_type(*split, path)
        left_out = unmentioned_axes(eq.mesh.axis_names, manual,
                                    cotangent_spec(eq.out_specs[j]))
        if not eq.check_vma and divisor(sizes, left_out) != 1:
            (ct,) = body.opaque("div", (ct,), (body.types[ct],))
        cts.append(ct)
    present = tuple(ct is not None for ct in incoming)
    key = (eq.form, tuple(types[n] for n in eq.operands), linear, present)
    transposed, chosen = body.once(key, lambda: _transposed_shard_map(
        eq, linear, present, path, types))
    if transposed is None:
        return []
    nonlinear = tuple(number[n] for n, lin in zip(eq.operands, linear) if not lin)
    made = body.emit(transposed.renumbered(tuple(cts) + nonlinear))
    return [(eq.operands[i], m) for i, m in zip(chosen, made)]


def _transposed_shard_map(eq: ShardMap, linear: tuple[bool, ...], present: tuple[bool, ...],
                          path: str, types: tuple[Value, ...]
                          ) -> tuple[ShardMap | None, list[int]]:
    """The transposed shard_map of ``eq`` (its operands the cotangents, then the
    residuals, numbered from 0) and the linear operands whose cotangents it returns; None
    where it returns none."""
    inner, manual = eq.body, map_manual_axes(eq)
    axes = eq.mesh.axis_names
    ct_specs, given = [], []
    for j, here in enumerate(present):
        if not here:
            given.append(None)
            continue
        spec = cotangent_spec(eq.out_specs[j])
        ct_specs.append(spec)
        value = inner.value_types[inner.outputs[j]]
        varying = frozenset(n for entry in spec for n in (
            entry if isinstance(entry, tuple) else (entry,) if entry else ()))
        given.append(dataclasses.replace(
            value, varying=(value.varying - manual) | varying if eq.check_vma
            else value.varying - manual))
    transposed, reached = transpose_body(inner, linear, tuple(given), f"{path}.shard_map.")
    # JAX's transposed body takes the cotangents first, then the residuals.
    residuals = sum(1 for lin in linear if not lin)
    order = tuple(range(residuals, residuals + len(ct_specs))) + tuple(range(residuals))
    shards = BodyBuilder(tuple(transposed.inputs[k] for k in order), transposed.consts)
    inside = dict(zip(order, range(len(order))))
    outs = list(inline_consts(shards, transposed, tuple(inside[k] for k in range(len(order)))))
    lin_in = [i for i, lin in enumerate(linear) if lin]
    chosen = [i for i, r in zip(lin_in, reached) if r]
    if not chosen:
        return None, []
    if not eq.check_vma:
        for k, i in enumerate(chosen):
            left_out = unmentioned_axes(axes, manual, cotangent_spec(eq.in_specs[i]))
            if left_out:
                (outs[k],) = shards.opaque("psum", (outs[k],), (shards.types[outs[k]],), (
                    ("axes", left_out), ("axis_index_groups", None)))
    nonlinear = [i for i, lin in enumerate(linear) if not lin]
    transposed_eq = dataclasses.replace(
        eq, operands=tuple(range(len(ct_specs) + len(nonlinear))),
        body=shards.program(tuple(outs)),
        in_specs=tuple(ct_specs) + tuple(eq.in_specs[i] for i in nonlinear),
        out_specs=tuple(cotangent_spec(eq.in_specs[i]) for i in chosen),
        results=tuple(_cotangent_result(types[eq.operands[i]], eq, cotangent_spec(
            eq.in_specs[i]), manual) for i in chosen), checked=False)
    return transposed_eq, chosen


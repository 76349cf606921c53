"""Closed-over constants and mutable refs of a whole program (CONST-1, CONST-2, REF-1..3).

What ``jax.jit`` (jax 0.10.2) does with the values a function closed over, and with the
mutable refs (``jax.new_ref``) it takes or closes over, established on 8 CPU devices:

* a closed-over constant is embedded in the compiled program, unless JAX hoists constants
  as arguments — off by default; on when ``jax_use_simplified_jaxpr_constants`` is on as
  JAX is imported (``Program.hoist_constants``) — and then only arrays of rank 1 or more
  and more than 32 bytes that live equations use (CONST-1); a hoisted committed
  ``jax.Array`` joins the device assignment after the arguments, anything else hoisted
  enters with its sharding left open (CONST-2);
* a mutable ref is always committed: passed as an argument it is an input where it is
  passed, closed over it is an input after the arguments, when a live equation uses it
  (REF-1); its new value comes back aliased to its buffer on its own sharding (REF-2), so
  a donated ref is refused where JAX would make the compiler its donor as well (REF-3).

A constant's path is ``constants[k]`` (``body[2].jit.constants[0]`` in a nested body); a
ref argument's is its argument's, ``args[i]``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterator

from ..core.rules import Failure, reject, rule
from ..core.shardings import UNSPECIFIED, NamedSharding, SingleDeviceSharding
from ..core.values import UNCONSTRAINED, Mesh, PartitionSpec
from ..placement.blocks import shard_shape
from .description import Const, Opaque, Program, Value
from .lowering import Live, equation_path, live_parts

P = PartitionSpec  # the name the examples use

__all__ = ["EMBEDDED_MAX_BYTES", "constant_bytes", "hoisted_constants", "constant_sharding",
           "ref_inputs", "ref_updates", "check_refs_not_donated", "held_inputs", "DonatedRef"]

# jax_embedded_constants_max_bytes at its default: a constant this small or smaller stays
# embedded in the program even when constants are hoisted.
EMBEDDED_MAX_BYTES = 32


def constant_bytes(value: Value) -> int:
    """How many bytes a constant holds: its elements times its dtype's size.

    >>> constant_bytes(Value.numpy((3, 3))), constant_bytes(Value.numpy((4,), "bool"))
    (36, 4)
    """
    bits = re.search(r"\d+$", value.dtype)
    size = int(bits.group()) // 8 if bits else 1   # bool: one byte
    return math.prod(value.shape) * size


def _path(prefix: str, k: int) -> str:
    return f"{prefix}constants[{k}]"


def _bodies(program: Program, live: Live, prefix: str
            ) -> Iterator[tuple[Program, Live, str]]:
    """The program and every live body nested in it, with its liveness and path prefix."""
    yield program, live, prefix
    for k, eq in enumerate(program.equations):
        if live.equations[k] and eq.body is not None and k in live.bodies:
            yield from _bodies(eq.body, live.bodies[k], f"{equation_path(prefix, k)}.{eq.kind}.")


# --------------------------------------------------------------------------- CONST-1

@rule("CONST-1", mirrors="jax._src.core.jaxpr_const_args, is_hoistable; "
                         "pxla.lower_sharding_computation (hoist_constants_as_args)")
def hoisted_constants(program: Program) -> tuple[tuple[str, Const], ...]:
    """A closed-over constant is embedded in the program and takes no part in its device assignment, unless JAX hoists constants and it is a live array of rank 1 or more and over 32 bytes: then it is an argument.

    JAX hoists constants only when ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`` is set before it
    is imported (off by default in jax 0.10.2). Bodies nested in live equations hoist theirs too; a closed-over ref is not a constant
    (REF-1). Returns (path, constant) in JAX's order: those the body returns, then equation
    by equation those it takes and those of the bodies nested in it.

    >>> mesh = Mesh((2, 4), ("x", "y"), range(7, -1, -1))
    >>> c = Const(Value.placed((8, 8), NamedSharding(mesh, P())))
    >>> uses_it = Program((Value.numpy((8, 8)),), outputs=(1,), consts=(c,))
    >>> hoisted_constants(uses_it)
    ()
    >>> [path for path, _ in hoisted_constants(
    ...     dataclasses.replace(uses_it, hoist_constants=True))]
    ['constants[0]']
    >>> tiny = Const(Value.numpy((2, 2)))    # 16 bytes: embedded all the same
    >>> hoisted_constants(Program(outputs=(0,), consts=(tiny,), hoist_constants=True))
    ()
    """
    if not program.hoist_constants:
        return ()
    return tuple(_hoisted_in(program, live_parts(program, everything=program.keep_unused), ""))


def _hoisted_in(body: Program, live: Live, prefix: str) -> Iterator[tuple[str, Const]]:
    """CONST-1 over one body and the live bodies nested in it, in JAX's order."""
    first, seen = len(body.inputs), set()

    def taken(numbers: Any) -> Iterator[tuple[str, Const]]:
        for n in numbers:
            k = n - first
            if 0 <= k < len(body.consts) and k not in seen:
                seen.add(k)
                value = body.consts[k].value
                if not body.consts[k].ref and value.shape and \
                        constant_bytes(value) > EMBEDDED_MAX_BYTES:
                    yield _path(prefix, k), body.consts[k]

    yield from taken(n for n, used in zip(body.outputs, live.outputs) if used)
    for k, eq in enumerate(body.equations):
        if live.equations[k]:
            yield from taken(eq.operands)
            if eq.body is not None and k in live.bodies:
                yield from _hoisted_in(eq.body, live.bodies[k],
                                       f"{equation_path(prefix, k)}.{eq.kind}.")


# --------------------------------------------------------------------------- CONST-2

@rule("CONST-2", mirrors="jax._src.pjit.const_args_shardings; "
                         "pxla._get_and_check_device_assignment (CONST_SHARDING)")
def constant_sharding(const: Const) -> Any:
    """A hoisted committed jax.Array enters the program on its own sharding, joining the device assignment after the arguments and committing the results; a hoisted numpy or uncommitted array is left open; none is donated.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> constant_sharding(Const(Value.placed((8, 8), NamedSharding(mesh, P("y")))))
    NamedSharding(Mesh({'x': 2, 'y': 4}), P('y'))
    >>> constant_sharding(Const(Value.placed((8, 8), SingleDeviceSharding(0),
    ...                                      committed=False)))
    UNSPECIFIED
    """
    return const.value.sharding if const.value.committed else UNSPECIFIED


# --------------------------------------------------------------------------- REF-1

@rule("REF-1", mirrors="jax._src.interpreters.pxla._discharge_refs_jaxpr, "
                       "_move_mutable_consts; pjit.finalize_arg_sharding")
def ref_inputs(program: Program) -> tuple[tuple[str, Any], ...]:
    """A mutable ref is a committed input on its own sharding: passed as an argument, where it is passed (kept or dropped as any argument); closed over, right after the arguments when a live equation reads or writes it.

    ``jax.new_ref`` commits what it is given (a numpy array, an uncommitted array: to the
    default device). Returns the (path, sharding) of every ref that takes part, the
    arguments first. Writing a ref is an effect: dead-code elimination keeps the write.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> ref = Value.placed((8, 8), NamedSharding(mesh, P("y")))
    >>> read = Opaque((1,), (ref.type,), primitive="get")
    >>> ref_inputs(Program((Value.numpy((8, 8)),), (read,), outputs=(2,),
    ...                    consts=(Const(ref, ref=True),)))
    (('constants[0]', NamedSharding(Mesh({'x': 2, 'y': 4}), P('y'))),)
    >>> ref_inputs(Program((Value.numpy((8, 8)),), (read,), outputs=(0,),
    ...                    consts=(Const(ref, ref=True),)))
    ()
    """
    live = live_parts(program, everything=program.keep_unused)
    kept = [program.keep_unused or used for used in live.inputs]
    found = [(f"args[{i}]", value.sharding) for i, (value, ref, keep) in
             enumerate(zip(program.inputs, program.refs, kept)) if ref and keep]
    for body, body_live, prefix in _bodies(program, live, ""):
        found += [(_path(prefix, k), const.value.sharding) for k, (const, used)
                  in enumerate(zip(body.consts, body_live.consts)) if const.ref and used]
    return tuple(found)


# --------------------------------------------------------------------------- REF-2

@rule("REF-2", mirrors="jax._src.interpreters.pxla._discharge_refs (MutationData, "
                       "input_output_aliases)")
def ref_updates(refs: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """Every ref that takes part gets its new value back as an extra result of the compiled program, aliased to the ref's own buffer and on its sharding, so the ref keeps the sharding it had.

    >>> ref_updates((("args[1]", SingleDeviceSharding(3)),))
    (('args[1]', SingleDeviceSharding(Device(3))),)
    """
    return tuple((path, sharding) for path, sharding in refs)


# --------------------------------------------------------------------------- REF-3

@dataclasses.dataclass(frozen=True)
class DonatedRef(Failure, rule="REF-3", error=RuntimeError, jax_error="JaxRuntimeError"):
    template = ("{path} is a mutable ref, so its buffer is already aliased with its new "
                "value and cannot be added as a buffer donor for any result as well")
    hint = "Do not donate a ref: its updates are written back in place already."
    path: str


@rule("REF-3", mirrors="jax._src.interpreters.mlir._set_up_aliases (a donated input the "
                       "compiler is made a donor of), XLA's check of a parameter aliased and "
                       "donated, as jax 0.10.2 compiles a donated ref")
def check_refs_not_donated(program: Program, refs: tuple[tuple[str, Any], ...],
                           results: tuple[tuple[Any, Any], ...] = (), devices: int = 1,
                           kept: tuple[int, ...] | None = None) -> None:
    """A donated ref argument taking part is refused when compiling if the compiler is made its donor: on several devices when a result's sharding is not given, else when an unaliased result has its per-device size.

    ``refs``: the refs that take part (REF-1); ``results``: the function's results, each
    (its type, its sharding: UNSPECIFIED where none is given), the refs' new values being
    aliased already (REF-2); ``devices``: the device assignment's size; ``kept``: the
    arguments the program keeps (None: all). The donated arguments take the results in
    order: those not refs first the first result of their per-device shape and dtype
    (aliased), then each one left, refs too, the first result left of its per-device
    element count — a ref given one is a donor, refused. A donated ref the program drops
    as unused is no donor at all.

    >>> ref = Value.placed((8,), SingleDeviceSharding(0))
    >>> program = Program((ref,), outputs=(0,), refs=(True,), donated=(True,))
    >>> check_refs_not_donated(program, ref_inputs(program), ((ref.type, UNSPECIFIED),))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [REF-3] at args[0]: args[0] is a mutable ref, so its buffer is already aliased with its new value and cannot be added as a buffer donor for any result as well. Do not donate a ref: its updates are written back in place already.
    >>> check_refs_not_donated(program, ref_inputs(program), ((Value.numpy((4,)), UNSPECIFIED),))
    """
    taking_part = {path for path, _ in refs}
    donated = [i for i, d in enumerate(program.donated) if d and (kept is None or i in kept)]
    if not any(program.refs[i] and f"args[{i}]" in taking_part for i in donated):
        return
    if devices > 1 and not all(_given(s) for _, s in results):
        first = next(i for i in donated if program.refs[i] and f"args[{i}]" in taking_part)
        raise reject(DonatedRef(f"args[{first}]"), f"args[{first}]")
    left = [(_per_device(value.shape, s, devices), value.dtype) for value, s in results]
    unmatched = []
    for i in donated:   # the others aliased to a result of their per-device type first
        arg = program.inputs[i]
        piece = (_per_device(arg.shape, arg.sharding, devices), arg.dtype)
        if not program.refs[i] and piece in left:
            left.remove(piece)
        elif not program.refs[i] or f"args[{i}]" in taking_part:
            unmatched.append(i)
    sizes = [math.prod(shape) for shape, _ in left]
    for i in unmatched:   # then each left the first result of its per-device size
        arg = program.inputs[i]
        size = math.prod(_per_device(arg.shape, arg.sharding, devices))
        if size in sizes:
            sizes.remove(size)
            if program.refs[i]:
                raise reject(DonatedRef(f"args[{i}]"), f"args[{i}]")


def _given(sharding: Any) -> bool:
    """Whether a result's sharding is given (not left to the compiler, no UNCONSTRAINED)."""
    if sharding is UNSPECIFIED:
        return False
    return not (isinstance(sharding, NamedSharding)
                and any(e is UNCONSTRAINED for e in sharding.spec))


def _per_device(shape: tuple[int, ...], sharding: Any, devices: int) -> tuple[int, ...]:
    """The shape each device holds of a value on ``sharding`` (all of it on one device)."""
    if devices == 1 or not _given(sharding) or sharding is None:
        return tuple(shape)
    return tuple(shard_shape(sharding, shape))


# --------------------------------------------------------------------------- together

def _closed_over(program: Program) -> tuple[bool, bool]:
    """Whether the program, its nested bodies included, holds refs, and constants."""
    refs, consts = any(program.refs), False
    for c in program.consts:
        refs, consts = refs or c.ref, consts or not c.ref
    for eq in program.equations:
        if eq.body is not None:
            inner = _closed_over(eq.body)
            refs, consts = refs or inner[0], consts or inner[1]
    return refs, consts


def held_inputs(program: Program) -> tuple[tuple, tuple, tuple, tuple]:
    """The inputs the closed-over values add to the compiled program, each as (path, what,
    value): the hoisted constants (CONST-1, CONST-2), which the executable takes before
    the arguments, and the closed-over refs that take part (REF-1), which it takes after
    them; then the hoisted constants' (path, sharding) and the refs' updates (REF-2). JAX
    checks the device assignment in another order — the arguments, the refs, then the
    constants. The rules take part only in a program that has refs, or constants that JAX
    hoists."""
    has_refs, has_consts = _closed_over(program)
    refs = ref_inputs(program) if has_refs else ()
    back = tuple((path, "closed-over ref", _held_at(program, path))
                 for path, _ in refs if not path.startswith("args["))
    found = hoisted_constants(program) if has_consts and program.hoist_constants else ()
    hoisted = tuple((path, constant_sharding(const)) for path, const in found)
    front = tuple((path, "closed-over constant", const.value) for path, const in found)
    return front, back, hoisted, ref_updates(refs) if refs else ()


def _held_at(program: Program, path: str) -> Value:
    """The value of the closed-over constant or ref at ``path``."""
    for body, _, prefix in _bodies(program, live_parts(program, everything=True), ""):
        for k, const in enumerate(body.consts):
            if _path(prefix, k) == path:
                return const.value
    raise KeyError(path)

"""What lowering and compiling a program read from its body (PROG-2, PROG-4).

Lowering a jit first drops the body's dead equations, unless the jit keeps unused inputs
(:func:`live_parts`); the shardings that remain inside the body then take part in the one
device assignment (PROG-2, :func:`inside_shardings`). After compiling, a result that a
constraint or an inner jit placed comes back so placed when the whole program is over one
mesh (PROG-4, :func:`placed_results`); any other result is placed as the compiler chooses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

from ..core.hlo import HloSharding
from ..core.rules import Rejection, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, Mesh, PartitionSpec
from ..jit.assignment import Source
from ..placement.blocks import shard_shape, to_hlo
from ..transforms.constraint import Constraint, constrained_result
from .description import (
    DevicePut, Jit, Program, ShardingConstraint, ShardMap,
)
from .primitives import ASSIGNMENT, entry_of, names_where

P = PartitionSpec  # the name the examples use

__all__ = ["Live", "live_parts", "lowered_live", "inside_shardings", "placed_results",
           "equation_path", "result_placer"]

SHARDINGS = (NamedSharding, SingleDeviceSharding, GSPMDSharding)

# The primitives that write a mutable ref: an effect, so dead-code elimination keeps them
# whether their results are used or not (read from the primitive table).
REF_WRITES = names_where(effect="writes ref")


def equation_path(prefix: str, index: int) -> str:
    """The path of equation ``index`` of the body at ``prefix``: ``body[3]``,
    ``body[3].jit.body[1]``."""
    return f"{prefix}body[{index}]"


def _nested(path: str, eq: Any) -> str:
    """The prefix of the body nested in the equation at ``path``."""
    return f"{path}.{eq.kind}."


# --------------------------------------------------------------------------- dead code

@dataclasses.dataclass(frozen=True, eq=False)
class Live:
    """Which parts of a body are left after dead-code elimination: per equation, per input,
    per output and per closed-over constant; and the same for the body of each live jit or
    shard_map equation."""

    equations: tuple[bool, ...]
    inputs: tuple[bool, ...]
    outputs: tuple[bool, ...]
    bodies: dict[int, "Live"]
    consts: tuple[bool, ...] = ()

    @property
    def signature(self) -> tuple:
        """What lives, as a value: two bodies alike in it have the same parts left."""
        return (self.equations, self.inputs, self.outputs, self.consts,
                tuple((k, body.signature) for k, body in sorted(self.bodies.items())))


def writes_ref(eq: Any) -> bool:
    """Whether an equation writes a mutable ref, itself or in a body nested in it."""
    if entry_of(eq).effect == "writes ref":
        return True
    return eq.body is not None and any(writes_ref(inner) for inner in eq.body.equations)


def live_parts(program: Program, used_outputs: Sequence[bool] | None = None, *,
               everything: bool = False) -> Live:
    """What dead-code elimination leaves of ``program``'s body when ``used_outputs`` of its
    results are used (None: all): an equation lives when one of its results is used; an
    inner jit or shard_map keeps the inputs and results of its body that are used, whatever
    the inner jit's ``keep_unused`` says; an equation that writes a mutable ref (``swap``,
    ``addupdate``), or holds a body that does, always lives. ``everything``: nothing is
    dropped (the jit asked about keeps unused inputs, so JAX runs no elimination at all)."""
    outputs = tuple(used_outputs) if used_outputs is not None else (True,) * len(
        program.outputs)
    return _live(program, outputs, everything, {})


def _live(program: Program, outputs: tuple[bool, ...], everything: bool, seen: dict) -> Live:
    """:func:`live_parts`; ``seen``: the parts found of each body nested so far, by the
    body and its used outputs (a step's layers hold one shard_map body each: one answer)."""
    known = seen.get((id(program), outputs))
    if known is not None and known[0] is program:
        return known[1]
    if everything:
        live = Live((True,) * len(program.equations), (True,) * len(program.inputs),
                    outputs, {k: _live(eq.body, (True,) * len(eq.body.outputs), True, seen)
                              for k, eq in enumerate(program.equations)
                              if eq.body is not None},
                    (True,) * len(program.consts))
        seen[id(program), outputs] = (program, live)
        return live
    used = [False] * len(program.value_types)
    for n, u in zip(program.outputs, outputs):
        used[n] = used[n] or u
    equations = [False] * len(program.equations)
    bodies: dict[int, Live] = {}
    end = len(program.value_types)   # one past the numbers of equation k's results
    for k in reversed(range(len(program.equations))):
        eq = program.equations[k]
        start = end - len(eq.results)
        wanted, end = tuple(used[start:end]), start
        if not any(wanted) and not writes_ref(eq):
            continue
        equations[k] = True
        if eq.body is None:
            for n in eq.operands:
                used[n] = True
            continue
        inner = _live(eq.body, eq.used_in_body(wanted), getattr(eq, "keeps_body", False),
                      seen)   # (a while loop's: control_flow.py)
        bodies[k] = inner
        keeps = getattr(eq, "keeps_operands", False)   # (a custom call's: control_flow.py)
        held = getattr(eq, "kept_operands", None)      # (a scan's used carries)
        held = held(wanted) if held is not None else (False,) * len(eq.operands)
        for n, u, h in zip(eq.operands, inner.inputs, held):
            used[n] = used[n] or u or keeps or h
    inputs = len(program.inputs)
    live = Live(tuple(equations), tuple(used[:inputs]), outputs, bodies,
                tuple(used[inputs:inputs + len(program.consts)]))
    seen[id(program), outputs] = (program, live)
    return live


def lowered_live(program: Program) -> Live:
    """What lowering keeps of ``program``'s body: everything when the jit keeps unused
    inputs, else what dead-code elimination leaves with all its results used."""
    return live_parts(program, everything=program.keep_unused)


# --------------------------------------------------------------------------- PROG-2

def _equation_shardings(eq: Any, live: Live | None, path: str, whole: dict
                        ) -> Iterator[Source]:
    """The shardings of one live equation that join the device assignment, with where
    they come from, by its rule in the primitive table (:data:`ASSIGNMENT`). ``whole``:
    the replicated NamedSharding of each concrete shard_map mesh met so far in the
    listing (a step repeats one mesh in every layer: built once)."""
    named = ASSIGNMENT.of(entry_of(eq))
    if named is not None:
        yield from named(eq, live, path, whole)


@ASSIGNMENT.register("sharding_constraint")
def _constraint_sharding(eq: ShardingConstraint, live: Live | None, path: str, whole: dict
                         ) -> Iterator[Source]:
    s = eq.sharding
    if not (isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh)):
        yield Source(s, f"sharding_constraint at {path}", path)


@ASSIGNMENT.register("device_put")
def _device_put_shardings(eq: DevicePut, live: Live | None, path: str, whole: dict
                          ) -> Iterator[Source]:
    for target in eq.targets:
        if isinstance(target, SHARDINGS):
            yield Source(target, f"device_put at {path}", path)


@ASSIGNMENT.register("jit")
def _jit_shardings(eq: Jit, live: Live | None, path: str, whole: dict) -> Iterator[Source]:
    assert live is not None
    body = eq.body
    for name, shardings, kept in (("in_shardings", body.in_shardings, live.inputs),
                                  ("out_shardings", body.out_shardings, live.outputs)):
        for i, (s, used) in enumerate(zip(shardings, kept)):
            if used and s is not UNSPECIFIED:
                where = f"{path}.jit.{name}[{i}]"
                yield Source(s, f"{name}[{i}] of the jit at {path}", where)


@ASSIGNMENT.register("shard_map")
def _shard_map_mesh(eq: ShardMap, live: Live | None, path: str, whole: dict
                    ) -> Iterator[Source]:
    if isinstance(eq.mesh, Mesh):
        if eq.mesh not in whole:
            whole[eq.mesh] = NamedSharding(eq.mesh, P())
        yield Source(whole[eq.mesh], f"mesh of the shard_map at {path}",
                     f"{path}.shard_map.mesh")


def _listed(program: Program, live: Live, prefix: str, whole: dict) -> list[Source]:
    """The body's own equations first, then the bodies nested in them, in order."""
    out: list[Source] = []
    for k, eq in enumerate(program.equations):
        # (an equation that names no sharding is passed over at once)
        if live.equations[k] and entry_of(eq).assignment is not None:
            out.extend(_equation_shardings(eq, live.bodies.get(k), equation_path(prefix, k),
                                           whole))
    for k, eq in enumerate(program.equations):
        if live.equations[k] and eq.body is not None:
            path = equation_path(prefix, k)
            out.extend(_listed(eq.body, live.bodies[k], _nested(path, eq), whole))
    return out


@rule("PROG-2", mirrors="jax._src.interpreters.pxla.lower_sharding_computation; "
                        "jax._src.dispatch.get_intermediate_shardings")
def inside_shardings(program: Program, live: Live | None = None) -> tuple[Source, ...]:
    """Unless the jit keeps unused inputs, dead equations are dropped first; every sharding left inside its body — constraints', device_puts', inner jits' given shardings, concrete shard_map meshes' — then joins the device assignment and the results' committedness.

    They are listed body by body — a body's own equations in order, then the bodies nested
    in them — and come after the kept inputs' and the results' shardings (DA-1, DA-2,
    EXE-2). A constraint over an abstract mesh, a device_put to a device or to nowhere, and
    an inner jit's shardings of inputs and results nothing uses take no part.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> x = Value.numpy((8, 8))
    >>> constrain = ShardingConstraint((0,), sharding=NamedSharding(mesh, P("x")))
    >>> [s.what for s in inside_shardings(Program((x,), (constrain,), outputs=(1,)))]
    ['sharding_constraint at body[0]']
    >>> inside_shardings(Program((x,), (constrain,), outputs=(0,)))
    ()

    ``live``: what :func:`lowered_live` gives for ``program``, when the caller has it.
    """
    if live is None:
        live = lowered_live(program)
    return tuple(_listed(program, live, "", {}))


# --------------------------------------------------------------------------- PROG-4

def _placer(program: Program, output: int, prefix: str
            ) -> tuple[str, Any, tuple[int, ...]] | None:
    """(path, sharding, shape) of what places ``program``'s output ``output``: a constraint
    that returns it, or an inner jit's out_sharding — following an inner jit's result left
    open into its body; None for anything else."""
    number = program.outputs[output]
    found = program.producer(number)
    while found is not None:
        k, result = found
        eq, path = program.equations[k], equation_path(prefix, k)
        shape = program.value_types[number].shape
        name = entry_of(eq).name
        if name == "sharding_constraint":
            # dimensions left to the compiler are filled from what flows in: not modelled
            return None if eq.unconstrained_dims else (path, eq, shape)
        if name != "jit":
            return None
        given = eq.body.out_shardings[result]
        if given is not UNSPECIFIED:
            return f"{path}.jit.out_shardings[{result}]", given, shape
        program, prefix = eq.body, _nested(path, eq)
        number = program.outputs[result]
        found = program.producer(number)
    return None


result_placer = _placer   # (PROP-8 reads it over several meshes)


def _divides(sharding: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``sharding`` splits ``shape`` evenly (an inner jit's out_sharding always
    does when the user's call is traced; one a batching rule gave may not)."""
    try:
        shard_shape(sharding, shape)
    except Rejection:
        return False
    return True


def _one_mesh(shardings: Sequence[Any]) -> bool:
    """Every sharding is a NamedSharding over one concrete mesh."""
    given = [s for s in shardings if s is not UNSPECIFIED]
    return all(isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh)
               and s.mesh == given[0].mesh for s in given)


@rule("PROG-4", mirrors="XLA's sharding propagation as jax 0.10.2 reports it "
                        "(pxla._maybe_get_and_check_out_shardings)")
def placed_results(program: Program, assignment_shardings: Sequence[Any]
                   ) -> tuple[tuple[HloSharding | None, str | None], ...]:
    """A result returned by a sharding_constraint without UNCONSTRAINED dimensions is placed as WSC-9 says, and one an inner jit returns under an out_sharding is placed by it, when the device assignment's shardings are NamedShardings over one mesh.

    Any other result — computed by other equations, placed by a device_put (which places
    nothing inside jit), constrained with dimensions the compiler fills from the values
    that flow in, or in a program whose shardings are over several meshes — is placed as
    the compiler chooses; the spec does not model XLA's propagation. Returns, per output,
    the HLO sharding and the path of the equation that placed it, or (None, None).

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> s = NamedSharding(mesh, P("y"))
    >>> program = Program((Value.numpy((8, 8)),),
    ...                   (ShardingConstraint((0,), sharding=s),), outputs=(1,))
    >>> placed_results(program, [s])
    ((Tiled({devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}), 'body[0]'),)
    >>> placed_results(program, [s, NamedSharding(Mesh.iota((4, 2), ("a", "b")), P())])
    ((None, None),)
    """
    one_mesh = _one_mesh(assignment_shardings)
    out: list[tuple[HloSharding | None, str | None]] = []
    for j, given in enumerate(program.out_shardings):
        # a result split over Explicit axes in its type is placed by the type as well: the
        # compiler's to combine (PROG-5), not the constraint's or the inner jit's alone
        split = program.value_types[program.outputs[j]].spec is not None
        found = _placer(program, j, "") if one_mesh and given is UNSPECIFIED and not split \
            else None
        if found is None:
            out.append((None, None))
            continue
        path, placer, shape = found
        if isinstance(placer, ShardingConstraint):
            context = program.context_mesh if isinstance(program.context_mesh, Mesh) else None
            if not placer.sharding.is_concrete and context is None:
                out.append((None, None))
                continue
            placer = constrained_result(Constraint(
                path, shape, placer.sharding, placer.unconstrained_dims, True, context))
        elif not _divides(placer, shape):
            placer = None   # an out_sharding vmap's batching left uneven: the compiler's
        out.append((None, None) if placer is None else (to_hlo(placer, len(shape)), path))
    return tuple(out)

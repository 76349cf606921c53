"""A program's results as JAX spells them, without devices (issue 33): the splits
propagation predicts (:mod:`~shardlaw.spec.program.propagation`) written as the
NamedShardings jit returns, over the program's own mesh — concrete, or abstract of any size.

On a concrete mesh :func:`~shardlaw.spec.explain_program` spells them itself, reading the
predicted placement through OUT-1 and OUT-2 as the executable's; over an abstract mesh
there is no executable, and :func:`predicted_out_shardings` gives what a concrete mesh of
the same shape would return, over the abstract mesh. Nothing enumerates devices.

>>> from shardlaw.spec import AbstractMesh, NamedSharding, P
>>> from shardlaw.spec.program.description import Opaque, Program, Value
>>> mesh = AbstractMesh((256, 256), ("data", "model"))
>>> x = Value.shape_dtype((1024, 512), sharding=NamedSharding(mesh, P("data", None)))
>>> w = Value.shape_dtype((512, 2048), sharding=NamedSharding(mesh, P(None, "model")))
>>> dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((1024, 2048)),),
...              params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
>>> total = Opaque((2,), primitive="reduce_sum", results=(Value.typed((2048,)),),
...                params=(("axes", (0,)),))
>>> predicted_out_shardings(Program((x, w), (dot, total), outputs=(2, 3)))
(NamedSharding(AbstractMesh({'data': 256, 'model': 256}), P('data', 'model')), NamedSharding(AbstractMesh({'data': 256, 'model': 256}), P('model')))
"""

from __future__ import annotations

from typing import Any

from ..core.rules import rule
from ..core.shardings import UNCONSTRAINED, UNSPECIFIED, NamedSharding
from ..core.values import AbstractMesh, AxisType, PartitionSpec  # noqa: F401 (the examples)
from .description import Program
from .lowering import live_parts
from .propagation import Undetermined, placed_pin, predicted_results, propagation_mesh

__all__ = ["predicted_out_shardings", "spelled", "open_reasons", "traced_placements"]


@rule("PROP-7", mirrors="jax._src.interpreters.pxla.maybe_recover_user_shardings; "
                        "jax._src.pjit._maybe_get_and_check_out_shardings")
def predicted_out_shardings(program: Program) -> tuple:
    """Each result comes back as a concrete mesh of the program's mesh's shape returns it, over the program's own mesh: an out sharding as written, else its predicted split spelled as OUT-1 and OUT-2 spell the compiler's placement.

    UNSPECIFIED where propagation does not determine the split (:func:`open_reasons` says
    why). Over Auto axes only the result takes the first kept input's sharding when it has
    its rank and places alike; beside Explicit axes, its type's, in full; else the split is
    read back, trailing unsplit dimensions dropped.

    >>> from shardlaw.spec import NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = AbstractMesh((1024, 64), ("data", "model"))
    >>> x = Value.shape_dtype((2048, 128), sharding=NamedSharding(mesh, P("data", "model")))
    >>> neg = Opaque((0,), primitive="neg", results=(Value.typed((2048, 128)),))
    >>> total = Opaque((1,), primitive="reduce_sum", results=(Value.typed((2048,)),),
    ...                params=(("axes", (1,)),))
    >>> [s.spec for s in predicted_out_shardings(Program((x,), (neg, total), outputs=(1, 2)))]
    [P('data', 'model'), P('data')]
    """
    mesh = propagation_mesh(program)
    if isinstance(mesh, Undetermined) or _elsewhere(program, mesh):   # (PROP-12)
        return (UNSPECIFIED,) * len(program.outputs)
    types = program.value_types
    given = program.out_shardings or (UNSPECIFIED,) * len(program.outputs)
    closed = [g is not UNSPECIFIED and not any(placed_pin(g, mesh, len(types[n].shape))[1])
              for n, g in zip(program.outputs, given)]
    if all(closed) or AxisType.Auto not in mesh.axis_types:
        found = tuple(((),) * len(types[n].shape) for n in program.outputs)
    else:
        found = predicted_results(program)
        if isinstance(found, Undetermined):
            return tuple(g if c else UNSPECIFIED for g, c in zip(given, closed))
    origin = _first_kept_input(program)
    return tuple(spelled(split, types[n], out, origin, mesh)
                 for split, n, out in zip(found, program.outputs, given))


def open_reasons(program: Program) -> tuple:
    """(output index, reason) of each result :func:`predicted_out_shardings` leaves open."""
    mesh = propagation_mesh(program)
    found = mesh if isinstance(mesh, Undetermined) else Undetermined("PROP-12", (
        "a placement over another mesh: JAX spells a result over the mesh it reached it "
        "from")) if _elsewhere(program, mesh) else predicted_results(program)
    return tuple((k, str(found)) for k, s in enumerate(predicted_out_shardings(program))
                 if s is UNSPECIFIED)


def traced_placements(program: Program, traced: tuple, paths: tuple
                      ) -> tuple[tuple, tuple] | None:
    """Over an abstract mesh (no later stage to ask): the results' shardings ``traced``
    (as jit's options give them), each one they leave open as PROP-7 predicts it, and the
    (path, reason) of each still open; None over a concrete mesh (lowering places them)."""
    mesh = propagation_mesh(program)
    if not isinstance(mesh, AbstractMesh) or UNSPECIFIED not in traced:
        return None
    predicted = predicted_out_shardings(program)
    out = tuple(p if s is UNSPECIFIED else s for s, p in zip(traced, predicted))
    why = dict(open_reasons(program)) if UNSPECIFIED in out else {}
    return out, tuple((path, why.get(k, "propagation left it open"))
                      for k, (path, s) in enumerate(zip(paths, out)) if s is UNSPECIFIED)


def spelled(split: tuple, value: Any, given: Any, origin: Any, mesh: Any) -> Any:
    """One result's NamedSharding: ``split`` its predicted split, ``value`` its type,
    ``given`` its out sharding (UNSPECIFIED: none), ``origin`` the first kept input's
    sharding (None: no input kept)."""
    rank = len(value.shape)
    if given is not UNSPECIFIED:
        pin = placed_pin(given, mesh, rank)
        if not any(pin[1]):
            return given   # as written
        return _typed_or_read(split, _kept(given.spec, _explicit(mesh), rank), mesh)
    explicit = _explicit(mesh)
    if AxisType.Auto not in mesh.axis_types:   # its type's sharding, in full
        return NamedSharding(mesh, PartitionSpec(*_kept(value.spec or PartitionSpec(),
                                                        explicit, rank)))
    if explicit:
        spec = value.spec or PartitionSpec()
        return _typed_or_read(split, _kept(spec, explicit, rank), mesh)
    if origin is not None and len(origin[1].shape) == rank and value.mesh in (
            None, origin[0].mesh.abstract) and placed_pin(origin[0], mesh, rank) == (
            split, (False,) * rank) and value.mesh is not None:
        return origin[0]
    return _read_back(split, mesh)


def _explicit(mesh: Any) -> frozenset:
    return frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types)
                     if t is AxisType.Explicit)


def _kept(spec: PartitionSpec, explicit: frozenset, rank: int) -> tuple:
    """A spec's entries on ``explicit`` axes only, one per dimension (UNCONSTRAINED and
    other axes left out)."""
    entries = tuple(spec) + (None,) * rank
    out = []
    for e in entries[:rank]:
        axes = () if e is None or e is UNCONSTRAINED else (e,) if isinstance(e, str) else e
        axes = tuple(a for a in axes if a in explicit)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return tuple(out)


def _typed_or_read(split: tuple, entries: tuple, mesh: Any) -> NamedSharding:
    """The type's sharding in full when the predicted split places as it does, else the
    split read back (section 18 of notes/jax-facts.md)."""
    typed = NamedSharding(mesh, PartitionSpec(*entries))
    if placed_pin(typed, mesh, len(entries)) == (split, (False,) * len(entries)):
        return typed
    return _read_back(split, mesh)


def _read_back(split: tuple, mesh: Any) -> NamedSharding:
    """A split as OUT-2 reads a placement back: trailing unsplit dimensions dropped."""
    entries = [None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
               for axes in split]
    while entries and entries[-1] is None:
        entries.pop()
    return NamedSharding(mesh, PartitionSpec(*entries))


def _first_kept_input(program: Program) -> tuple | None:
    """(sharding, type) of the first input the executable keeps (OUT-1's first
    NamedSharding among the inputs as recovered), or None."""
    used = program.derived_once("live parts", lambda: live_parts(program)).inputs
    for k, value in enumerate(program.inputs):
        if used[k] or program.keep_unused:
            given = program.in_shardings[k] if program.in_shardings else UNSPECIFIED
            sharding = given if given is not UNSPECIFIED else value.sharding
            return (sharding, value) if isinstance(sharding, NamedSharding) else None
    return None


from .propagation_meshes import placed_elsewhere as _elsewhere  # noqa: E402

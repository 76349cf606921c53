"""A cond's branches returning results on different shardings before the partitioner runs
(PROP-24).

JAX 0.10.2 writes two kinds of sharding into the module it hands to XLA before Shardy
propagates anything: a ``with_sharding_constraint``'s, and, over a mesh some of whose axes
are Explicit (neither all Auto nor all Manual), each value's type, on the result of every
operation whose lowering writes it (``mlir.lower_with_sharding_in_types``: the elementwise
operations, ``convert_element_type``, ``dot_general``, the reshapes, reductions, slices,
``reshard``, a ``cond``'s own results, ...). The open dimensions of either are replicated
in the HLO sharding. XLA's verifier, run as compiling starts, requires every branch of a
conditional whose result carries a sharding to carry the same one; a branch returning
its input, or a value of an operation that writes no sharding, carries none.

Seen (mesh ``(2, 4)``, ``'x'`` Auto, ``'y'`` Explicit): ``cond(p, lambda t, u:
wsc(sin(t) + u, P('x')), lambda t, u: t * u, x, w)`` — the second branch's ``t * u`` is
written on its type (replicated), the first's on ``P('x')``: JaxRuntimeError (INTERNAL,
"Inconsistent conditional sharding among instructions"). Over an all-Auto mesh the
product carries no sharding and it compiles; both branches constrained to ``P('x')``, or
the constraint ``P()`` or UNCONSTRAINED, or the second branch returning ``t`` itself, it
compiles; two branches constrained differently fail over any mesh.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.values import UNCONSTRAINED, AxisType
from .description import Program
from .lowering import lowered_live
from .primitives import Kind, entry_of_name

__all__ = ["BranchShardingsApart", "check_branch_shardings", "open_branch_shardings",
           "holds_kept_cond", "WRITES_ITS_TYPE", "types_written"]

# The primitives besides the elementwise ones whose lowering writes the result's type
# (read from jax 0.10.2's lowering rules).
WRITES_ITS_TYPE = frozenset((
    "convert_element_type", "bitcast_convert_type", "integer_pow", "dot_general",
    "broadcast_in_dim", "tile", "concatenate", "pad", "squeeze", "reshape", "rev",
    "transpose", "select_n", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
    "reduce_and", "reduce_or", "reduce_xor", "reduce_precision", "sort", "top_k", "iota",
    "split", "slice", "dynamic_slice", "dynamic_update_slice", "optimization_barrier"))

_OPEN = "open"     # a sharding is written, but which one is not read here


@dataclasses.dataclass(frozen=True)
class BranchShardingsApart(Failure, rule="PROP-24", error=RuntimeError,
                           jax_error="JaxRuntimeError"):
    template = ("result {index} of the cond at {path} is returned by its branches on "
                "shardings written before the partitioner runs (a constraint's, or the "
                "type's over a mesh with Explicit axes) that differ, {splits} per branch "
                "(None: none written), and XLA's verifier refuses a conditional whose "
                "branches' results carry different shardings (INTERNAL: Inconsistent "
                "conditional sharding among instructions)")
    hint = ("Constrain that result alike in every branch (with_sharding_constraint on one "
            "sharding), or constrain the cond's result after it instead")
    path: str
    index: int
    splits: tuple


@rule("PROP-24", mirrors="xla: HloVerifier's check of a conditional's branch shardings; "
                         "jax._src.interpreters.mlir.lower_with_sharding_in_types")
def check_branch_shardings(program: Program) -> None:
    """Compiling refuses a cond two of whose branches return one of its results on different shardings written before propagation (a constraint's, or an Explicit mesh's type).

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, ShardingConstraint, Value
    >>> from shardlaw.spec.program.control_flow import Cond
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> t = Value.typed((8,))
    >>> def branch(spec):
    ...     return Program((t,), (Opaque((0,), primitive="sin", results=(t,)),
    ...                           ShardingConstraint((1,), sharding=NamedSharding(mesh, spec))),
    ...                    outputs=(2,))
    >>> def program(a, b):
    ...     return Program((Value.typed((), "int32"), t), (Cond((0, 1), results=(t,),
    ...                    branches=(branch(a), branch(b))),), outputs=(2,))
    >>> check_branch_shardings(program(P("x"), P("x")))
    >>> check_branch_shardings(program(P("x"), P()))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionRuntimeError: [PROP-24] at body[0]: result 0 of the cond at body[0] is returned by its branches on shardings written before the partitioner runs (a constraint's, or the type's over a mesh with Explicit axes) that differ, ((('x',),), ()) per branch (None: none written), and XLA's verifier refuses a conditional whose branches' results carry different shardings (INTERNAL: Inconsistent conditional sharding among instructions). Constrain that result alike in every branch (with_sharding_constraint on one sharding), or constrain the cond's result after it instead.
    """
    for path, eq in _live_conds(program):
        for index, written in enumerate(_written(eq)):
            known = [w for w in written if w is not None and w is not _OPEN]
            if len(set(known)) > 1:
                raise reject(BranchShardingsApart(path, index, tuple(written)), path)


def open_branch_shardings(program: Program) -> tuple:
    """(path, reason) of each cond result two or more of whose branches write a sharding
    before propagation, one of them one not read here (a constraint merged with its
    operand's Explicit type, an operation whose lowering is not known to write its type):
    whether XLA's verifier refuses it is not decided (PROP-24)."""
    out = []
    for path, eq in _live_conds(program):
        for index, written in enumerate(_written(eq)):
            if _OPEN in written and sum(w is not None for w in written) > 1:
                out.append((path, f"[PROP-24] result {index} of the cond at {path}: a branch "
                           "returns it on a sharding written before propagation that is not "
                           "read here, so whether XLA's verifier refuses the cond is not "
                           "decided"))
    return tuple(out)


def holds_kept_cond(program: Program) -> bool:
    """Whether lowering keeps a cond of ``program`` (PROP-24 is asked of those only)."""
    return bool(_live_conds(program))


def _live_conds(program: Program) -> tuple:
    """The conds lowering keeps, found once per program (dead-code elimination asked only
    of a program holding one)."""
    def find() -> tuple:
        if not _conds(program, None, ""):
            return ()
        return tuple(_conds(program, lowered_live(program), ""))
    return program.derived_once("conds lowering keeps", find)


def _conds(program: Program, live: Any, prefix: str) -> list:
    """(path, equation) of each cond lowering keeps in ``program`` and the bodies nested
    in it (``live``: what dead-code elimination leaves of ``program``, None: all of it)."""
    out = []
    for k, eq in enumerate(program.equations):
        if live is not None and not live.equations[k]:
            continue     # (dropped before lowering: never compiled)
        path = f"{prefix}body[{k}]"
        inner = None if live is None else live.bodies.get(k)
        if eq.kind == "cond":
            out.append((path, eq))
            bodies = [(f"{path}.cond.branches[{b}].", branch, None)
                      for b, branch in enumerate(eq.branches)]
        elif eq.kind == "while":
            bodies = [(f"{path}.while.cond.", eq.cond, None),
                      (f"{path}.while.", eq.body_fun, None)]
        else:
            body = getattr(eq, "body", None)
            bodies = [(f"{path}.{eq.kind}.", body, inner)] if isinstance(body, Program) else []
        for inner_prefix, body, body_live in bodies:
            out.extend(_conds(body, body_live, inner_prefix))
    return out


def _written(eq: Any) -> list[tuple]:
    """Per result of a cond, the sharding each branch's result carries into the module
    (None: none; ``_OPEN``: one not read here)."""
    return [tuple(_written_for(branch, branch.outputs[i]) for branch in eq.branches)
            for i in range(len(eq.branches[0].outputs))]


def _written_for(body: Program, number: int) -> Any:
    """The split (per dimension, the mesh axes of more than one device) that value
    ``number`` of ``body`` carries into the module, None where it carries none."""
    made = _maker(body, number)
    if made is None:
        return None      # (an input or a constant of the branch: no operation writes it)
    eq, value = made
    if eq.kind == "sharding_constraint":
        operand = body.value_types[eq.operands[0]]
        if operand.spec is not None and any(operand.spec):
            return _OPEN   # (merged with the operand's Explicit split: WSC-12)
        unconstrained = eq.unconstrained_dims or frozenset()
        return _split([None if d in unconstrained or e is UNCONSTRAINED else e
                       for d, e in enumerate(_padded(eq.sharding.spec, len(value.shape)))],
                      eq.sharding.mesh)
    mesh = value.mesh
    if not types_written(mesh):
        return None
    if AxisType.Manual in mesh.axis_types or not _writes_type(eq):
        return _OPEN
    return _split(_padded(value.spec, len(value.shape)), mesh)


@rule("PROP-25", mirrors="jax._src.interpreters.mlir.lower_with_sharding_in_types")
def types_written(mesh: Any) -> bool:
    """Over a mesh neither all Auto nor all Manual, lowering writes each result's type as a constraint after its operation, so StableHLO folds no reshape of a reshape's result.

    ``mesh``: the abstract mesh of the value's type (None: typed over no mesh). Seen,
    mesh ``(4, 2)`` ``'x'`` Explicit, ``'y'`` Auto: ``squeeze(a[:, None, :], 1)`` of ``a``
    on ``P(('y', 'x'), None)`` typed ``P('x', None)`` is returned on ``P('x', None)``, as
    ``sin(a)`` is (the two reshapes kept apart by the constraint ``[{"x", ?}, {?}, {?}]``
    between them); over an all-Auto mesh the pair folds back to ``a`` and it is returned
    on ``a``'s placement.

    >>> from shardlaw.spec import AbstractMesh, AxisType
    >>> mixed = AbstractMesh((4, 2), ("x", "y"), (AxisType.Explicit, AxisType.Auto))
    >>> types_written(mixed), types_written(AbstractMesh((4, 2), ("x", "y"))), types_written(None)
    (True, False, False)
    """
    if mesh is None or not mesh.axis_names:
        return False
    kinds = set(mesh.axis_types)
    return not (kinds <= {AxisType.Auto} or kinds == {AxisType.Manual})


def _writes_type(eq: Any) -> bool:
    """Whether the lowering of ``eq`` writes its result's type into the module."""
    if eq.kind in ("reshard", "cond"):
        return True
    name = getattr(eq, "primitive", "") or eq.kind
    # (``copy`` lowers to its operand itself)
    return name in WRITES_ITS_TYPE or (name != "copy" and
                                       entry_of_name(name).kind is Kind.ELEMENTWISE)


def _maker(body: Program, number: int) -> tuple | None:
    """The equation that makes value ``number`` of ``body`` and that value's type."""
    found = body.producer(number)
    return None if found is None else (body.equations[found[0]], body.value_types[number])


def _padded(spec: Any, rank: int) -> tuple:
    entries = tuple(spec) if spec is not None else ()
    return entries + (None,) * (rank - len(entries))


def _split(entries: Any, mesh: Any) -> tuple:
    """Per dimension the axes of more than one device, trailing unsplit ones dropped."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    split = [tuple(a for a in ((e,) if isinstance(e, str) else (e or ())) if sizes[a] > 1)
             for e in entries]
    while split and not split[-1]:
        split.pop()
    return tuple(split)

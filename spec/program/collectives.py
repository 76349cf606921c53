"""What a step communicates: the collectives the partitioner inserts (issue 33).

After propagation (:mod:`~shardlaw.spec.program.propagation`) every value of the body has a
split. Each equation computes with one split per factor of its sharding rule — a factor the
result holds is split as the result is, a contracted or reduced factor as far as all its
operands agree — and the partitioner (Shardy, then XLA's SPMD partitioner) reshards each
operand to it: axes an operand holds beyond it are all-gathered, an axis moving from one
dimension to another goes through an all-to-all, axes it lacks are sliced locally (no
communication); a reduced factor split over axes leaves each device a partial result,
summed by an all-reduce. This module says which, with the mesh axes, the replica groups on
a concrete mesh (kept symbolic: nothing enumerates devices until asked), and each one's
bytes on one device, at the equation's path.

The answer holds for one backend: XLA's CPU pipeline (the one held to the compiled HLO
here) keeps an all-reduce followed by a slice where other backends form a reduce-scatter,
so the CPU answer has no reduce-scatter.

>>> from shardlaw.spec import Mesh, NamedSharding, P
>>> from shardlaw.spec.program.description import Opaque, Program, Value
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> a = Value.placed((16, 32), NamedSharding(mesh, P("x", "y")))
>>> b = Value.placed((32, 64), NamedSharding(mesh, P("y", None)))
>>> dot = Opaque((0, 1), primitive="dot_general", results=(Value.typed((16, 64)),),
...              params=(("dimension_numbers", (((1,), (0,)), ((), ()))),))
>>> total = Opaque((2,), primitive="reduce_sum", results=(Value.typed((64,)),),
...                params=(("axes", (0,)),))
>>> step = predicted_collectives(Program((a, b), (dot, total), outputs=(3,)))
>>> for c in step: print(c)
all-reduce over ('y',) at body[0]: float32[8, 64], 2048 bytes per device
all-reduce over ('x',) at body[1]: float32[64], 256 bytes per device
>>> step.bytes_per_device, step[0].replica_groups.groups()
(2304, ((0, 1, 2, 3), (4, 5, 6, 7)))
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.rules import rule
from ..core.shardings import UNSPECIFIED
from ..core.values import AxisType, Mesh
from .description import Program
from .lowering import equation_path, live_parts
from .primitives import Kind, NotPropagated, entry_of
from .propagation import (
    FLOW_KINDS, Split, Undetermined, dimension_splits, factor_sizes, folded_equations,
    predicted_results, propagate, propagation_mesh, tensor_factor_splits,
)
from .propagation_constants import copied_values
from .collectives_plans import (
    batch_grouped, concatenated_apart, reduced_where_it_stands, regathered_by_a_dot,
    sliced_as_a_slice, through_folded_broadcasts,
)

__all__ = ["BACKEND", "ReplicaGroups", "Collective", "Communication", "replica_groups",
           "operation_splits", "reshard", "reduction", "predicted_collectives", "wire_dtype",
           "combined", "group_order", "plan_equation", "constraint_plan", "live_equations",
           "returned_reshards", "REDUCTIONS", "UNSUMMED", "equation_collectives", "moved",
           "DTYPE_BYTES", "compile_aborts", "MANUAL_REDUCTIONS"]

BACKEND = "cpu"

# the reduction an all-reduce of each reducing primitive applies (dot_general's: add)
REDUCTIONS = {"reduce_max": "max", "reduce_min": "min", "reduce_prod": "mul",
              "argmax": "argmax", "argmin": "argmin"}
# the reductions whose split is not summed by one all-reduce (their reason, COLL-3)
UNSUMMED = ("argmax", "argmin")

DTYPE_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
               "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8,
               "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16}


@dataclasses.dataclass(frozen=True)
class ReplicaGroups:
    """The replica groups of a collective over ``axes`` of a concrete ``mesh``, kept
    symbolic; :meth:`groups` lists the device ids (COLL-5)."""

    mesh: Mesh
    axes: tuple[str, ...]

    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The groups as positions in the device assignment (as the HLO lists them)."""
        return replica_groups(self.mesh, self.axes)

    def device_ids(self) -> tuple[tuple[int, ...], ...]:
        """The groups as the ids of the devices at those positions."""
        return tuple(tuple(self.mesh.devices.id_at(p) for p in g) for g in self.groups())

    def __repr__(self) -> str:
        return f"ReplicaGroups({self.axes} of {self.mesh!r})"


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective the partitioner inserts: its kind, the mesh axes it runs over, the
    equation's path (several joined by a plus sign: all-reduces combined into one), the operand
    it reshards (None: the equation's result), the shape and dtype of what it moves on one
    device and their bytes, its replica groups (None on an abstract mesh, and for a
    collective-permute, whose pairs of devices are XLA's choice among those holding each
    piece) and an all-reduce's reduction."""

    kind: str
    axes: tuple[str, ...]
    path: str
    operand: int | None
    shape: tuple[int, ...]
    dtype: str
    bytes_per_device: int
    replica_groups: ReplicaGroups | None = None
    reduction: str = ""   # an all-reduce's: add, max, min, mul
    # an all-reduce's groups in XLA's order: the other mesh axes of size above 1, major
    # first (the summed value's split axes by dimension, then the rest in mesh order)
    group_order: tuple[str, ...] = ()
    # how often one step runs it (a scan body's length; None: the data decide, a while
    # loop's or a cond branch's) and the body it runs in ("": the step's own), COLL-8
    trips: int | None = 1
    computation: str = ""

    def __str__(self) -> str:
        of = "" if self.operand is None else f" (operand {self.operand})"
        runs = "" if self.trips == 1 else ", as often as the data decide" \
            if self.trips is None else f", {self.trips} times"
        return (f"{self.kind} over {self.axes} at {self.path}{of}: {self.dtype}"
                f"{list(self.shape)}, {self.bytes_per_device} bytes per device{runs}")


@dataclasses.dataclass(frozen=True)
class Communication:
    """What a step communicates on ``backend``: its collectives in program order and their
    bytes per device (COLL-4); ``undetermined`` says why the list is not complete (None:
    it is); ``caveat``, where ``backend``'s compiler fails the step itself (COLL-13: no
    executable, so no list)."""

    collectives: tuple[Collective, ...] = ()
    backend: str = BACKEND
    undetermined: Undetermined | None = None
    caveat: Undetermined | None = None

    @property
    def bytes_per_device(self) -> int | None:
        """The step's bytes per device, each collective times its runs (COLL-8); None
        where the data decide how often one runs (a while loop's, a cond branch's)."""
        if any(c.trips is None for c in self.collectives):
            return None
        return sum(c.bytes_per_device * c.trips for c in self.collectives)

    @property
    def bytes_per_run(self) -> int:
        """The bytes per device of every collective run once (as the compiled module
        lists them)."""
        return sum(c.bytes_per_device for c in self.collectives)

    @property
    def complete(self) -> bool:
        return self.undetermined is None and self.caveat is None

    def __iter__(self):
        return iter(self.collectives)

    def __len__(self) -> int:
        return len(self.collectives)

    def __getitem__(self, k: int) -> Collective:
        return self.collectives[k]

    def __str__(self) -> str:
        total = self.bytes_per_device
        lines = [f"{len(self)} collective(s) on {self.backend}, " + (
            f"{total} bytes per device" if total is not None else
            f"{self.bytes_per_run} bytes per device each run once (the data decide how often)")]
        lines += [f"  {c}" for c in self.collectives]
        if self.caveat is not None:
            lines.append(f"  on {self.backend}: {self.caveat}")
        if self.undetermined is not None:
            lines.append(f"  incomplete: {self.undetermined}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- the rules

@rule("COLL-1", mirrors="shardy: insert-explicit-reshards (the operation's factor shardings)")
def operation_splits(factors: Any, splits: list[dict[str, tuple[str, ...]]], count: int
                     ) -> dict[str, tuple[str, ...]] | None:
    """An operation computes each factor a result holds split as the result is, a reduced
    factor split as its operands split it when they all agree, and any other factor unsplit.

    None where the operands disagree on a reduced factor beyond the axes the result's
    factors hold (those it is never split over): the partitioner chooses by cost between
    gathering an operand and slicing another.

    >>> from shardlaw.spec.program.primitives import Factors
    >>> dot = Factors((("i", "j"), ("j", "k")), (("i", "k"),), reduced=frozenset("j"))
    >>> operation_splits(dot, [{"i": ("x",), "j": ("y",)}, {"j": ("y",), "k": ()},
    ...                        {"i": ("x",), "k": ()}], 2)
    {'i': ('x',), 'k': (), 'j': ('y',)}
    >>> print(operation_splits(dot, [{"i": (), "j": ("y",)}, {"j": (), "k": ()},
    ...                              {"i": (), "k": ()}], 2))
    None
    >>> operation_splits(dot, [{"i": ("x",), "j": ()}, {"j": ("x",), "k": ()},
    ...                        {"i": ("x",), "k": ()}], 2)   # ('x' is the result's)
    {'i': ('x',), 'k': (), 'j': ()}
    """
    chosen: dict[str, tuple[str, ...]] = {}
    for read in splits[count:]:
        chosen.update(read)
    held = {a for axes in chosen.values() for a in axes}
    for f in sorted(factors.reduced):
        given = [read.get(f, ()) for read in splits[:count]
                 if any(f in dims for dims in factors.operands[splits[:count].index(read)])]
        if any(g != given[0] for g in given):   # (no axis a result's factor holds: PROP-14)
            given = [g[:next((i for i, a in enumerate(g) if a in held), len(g))]
                     for g in given]
        if any(g != given[0] for g in given):
            return None
        chosen[f] = given[0] if given else ()
    return chosen


@rule("COLL-2", mirrors="xla: SpmdPartitioner reshard (all-gather, all-to-all, slice)")
def reshard(have: Split, need: Split, mesh: Any) -> list[tuple[str, Any, tuple[str, ...]]] | str:
    """An operand is brought to the split its operation needs dimension by dimension: axes
    beyond the shared prefix are all-gathered, an axis moving between dimensions goes
    through an all-to-all, and axes it lacks are sliced locally.

    One all-gather is made per dimension, the minor dimension first. An operand split into
    as many pieces along every dimension as it needs, but other ones, is sent whole to the
    devices that need its piece: one collective-permute. An operand that loses axes and
    gains others otherwise is the partitioner's own choice (a string says why).

    >>> mesh = Mesh.iota((2, 2, 2), ("x", "y", "z"))
    >>> reshard((("x",), ()), ((), ("x",)), mesh)
    [('all-to-all', (0, 1), ('x',))]
    >>> reshard((("x",), ("y",)), ((), ()), mesh)
    [('all-gather', 1, ('y',)), ('all-gather', 0, ('x',))]
    >>> reshard((("x",), ("y",)), (("y",), ("x",)), mesh)
    [('collective-permute', (0, 1), ('x', 'y'))]
    """
    lost, gained = [], []
    for d, (h, n) in enumerate(zip(have, need)):
        kept = 0
        while kept < min(len(h), len(n)) and h[kept] == n[kept]:
            kept += 1
        lost.append(h[kept:])
        gained.append(n[kept:])
    losing = [d for d, a in enumerate(lost) if a]
    gaining = [d for d, a in enumerate(gained) if a]
    if len(losing) == 1 and len(gaining) == 1 and losing != gaining and \
            len(lost[losing[0]]) == 1 and lost[losing[0]] == gained[gaining[0]]:
        return [("all-to-all", (losing[0], gaining[0]), lost[losing[0]])]
    if losing and mesh is not None and all(_pieces(h, mesh) == _pieces(n, mesh)
                                           for h, n in zip(have, need)):
        # every device keeps a piece of the same shape, another one: sent whole
        moved = tuple(dict.fromkeys(a for d in losing for a in lost[d] + gained[d]))
        return [("collective-permute", tuple(losing), moved)]
    both = [d for d in losing if d in gaining]
    if both:
        return (f"dimension {both[0]} loses {lost[both[0]]} and gains {gained[both[0]]}: "
                f"the partitioner chooses how (a collective-permute, or a gather and a slice)")
    if losing and gaining:
        return (f"dimensions {losing} lose {[lost[d] for d in losing]} while dimensions "
                f"{gaining} gain {[gained[d] for d in gaining]}: the partitioner chooses "
                f"how (an all-to-all and a collective-permute, or gathers and slices)")
    return [("all-gather", d, lost[d]) for d in reversed(losing)]


def _pieces(axes: tuple[str, ...], mesh: Any) -> int:
    return math.prod(mesh.axis_size(a) for a in axes)


@rule("COLL-3", mirrors="xla: SpmdPartitioner (the partial results of a split reduction)")
def reduction(chosen: dict[str, tuple[str, ...]], reduced: frozenset) -> tuple[str, ...]:
    """An operation whose reduced factors are split over mesh axes leaves each device a
    partial result, summed over those axes by one all-reduce of the result split as its
    operands split it, any further split sliced after.

    On the CPU backend that holds for a split along the summed axes too: no reduce-scatter.

    >>> reduction({"i": ("x",), "j": ("y",)}, frozenset("j"))
    ('y',)
    """
    return tuple(a for f in sorted(reduced) for a in chosen.get(f, ()))


@rule("COLL-5", mirrors="xla: replica groups over mesh axes (iota replica group lists)")
def replica_groups(mesh: Mesh, axes: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """A collective over mesh axes runs in one group per position of the other axes: the
    devices along ``axes`` (major first), each named by its position in the executable's
    device assignment, whatever the devices' ids.

    That is how the compiled module names them: the assignment is the mesh's devices in
    row-major order.

    >>> replica_groups(Mesh.iota((2, 4), ("x", "y")), ("x",))
    ((0, 4), (1, 5), (2, 6), (3, 7))
    """
    names, sizes = mesh.axis_names, mesh.axis_sizes
    strides = {n: math.prod(sizes[k + 1:]) for k, n in enumerate(names)}

    def positions(along: list[str]) -> list[int]:
        out = [0]
        for n in along:
            out = [o + i * strides[n] for o in out for i in range(mesh.axis_size(n))]
        return out

    others = [n for n in names if n not in axes]
    return tuple(tuple(base + offset for offset in positions(list(axes)))
                 for base in positions(others))


# --------------------------------------------------------------------------- the program

def _shard(shape: tuple[int, ...], split: Split, mesh: Any) -> tuple[int, ...]:
    return tuple(size // math.prod(mesh.axis_size(a) for a in axes)
                 for size, axes in zip(shape, split))


@rule("COLL-6", mirrors="xla: the CPU pipeline's float normalization of collectives")
def wire_dtype(dtype: str, backend: str = BACKEND) -> str:
    """On the CPU backend a collective of a bfloat16 value moves float32 (XLA's CPU
    pipeline normalizes bfloat16 collectives); every other dtype moves as it is.

    >>> wire_dtype("bfloat16"), wire_dtype("float16")
    ('float32', 'float16')
    """
    return "float32" if backend == "cpu" and dtype == "bfloat16" else dtype


# The body's collectives that reduce across its manual axes (psum_scatter binds reduce_scatter)
MANUAL_REDUCTIONS = frozenset(("psum", "psum_invariant", "pmax", "pmin", "reduce_scatter"))


@rule("COLL-13", mirrors="xla: the CPU compiler's check failure on a bfloat16 reduction "
                         "of a partly manual computation (hlo_instruction.cc)")
def compile_aborts(program: Program, backend: str = BACKEND) -> Undetermined | None:
    """On the CPU backend, compiling a shard_map that leaves a mesh axis automatic (of any size) and reduces a bfloat16 value in its body (psum, pmax, pmin, psum_scatter) aborts the process.

    XLA fails a check (``Invalid binary instruction opcode copy``), no Python exception: the
    step has no executable and communicates nothing. float16 and float32 compile, and so
    does a bfloat16 reduction where every mesh axis is manual (notes/jax-facts.md §26).

    >>> from shardlaw.spec import Mesh, P
    >>> from shardlaw.spec.program.description import Opaque, ShardMap, Value
    >>> mesh = Mesh.iota((4, 2), ("x", "y"))
    >>> t = Value.typed((8,), dtype="bfloat16")
    >>> body = Program((t,), (Opaque((0,), primitive="psum_invariant", results=(t,),
    ...                              params=(("axes", ("y",)),)),), outputs=(1,))
    >>> smap = ShardMap((0,), results=(t,), body=body, mesh=mesh, in_specs=(P("y"),),
    ...                 out_specs=(P(),), manual_axes=frozenset({"y"}), check_vma=True)
    >>> a = Value.typed((16,), dtype="bfloat16")
    >>> print(compile_aborts(Program((a,), (smap,), outputs=(1,))))
    [COLL-13] at body[0].shard_map.body[0]: XLA's CPU compiler aborts the process (a check
    failure, no exception) compiling a bfloat16 psum_invariant in a shard_map leaving mesh
    axes ['x'] automatic: no executable
    >>> print(compile_aborts(Program((a,), (smap,), outputs=(1,)), backend="tpu"))
    None
    """
    return _aborting(program, "", False) if backend == "cpu" else None


def _aborting(program: Program, prefix: str, partly: Any) -> Undetermined | None:
    """The first bfloat16 reduction COLL-13 names in ``program`` (``partly``: the axes a
    shard_map around it leaves automatic; False: none does), by its path."""
    types = program.value_types
    for k, eq in enumerate(program.equations):
        path = equation_path(prefix, k)
        name = entry_of(eq).name
        if partly and name in MANUAL_REDUCTIONS and any(
                str(types[n].dtype) == "bfloat16" for n in eq.operands):
            return Undetermined("COLL-13", f"XLA's CPU compiler aborts the process (a check "
                                f"failure, no exception) compiling a bfloat16 {name} in a "
                                f"shard_map leaving mesh axes {sorted(partly)} automatic: no "
                                f"executable", path)
        inner = partly
        if eq.kind == "shard_map" and not partly:
            inner = tuple(a for a in eq.mesh.axis_names if a not in eq.manual_axes) or False
        for field in entry_of(eq).bodies.fields:
            bodies = getattr(eq, field)
            for j, body in enumerate(bodies if isinstance(bodies, tuple) else (bodies,)):
                at = f"{path}.{eq.kind}." + (f"{field}[{j}]." if isinstance(bodies, tuple)
                                             else "")
                found = _aborting(body, at, inner)
                if found is not None:
                    return found
    return None


def _bytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * DTYPE_BYTES.get(str(dtype), 4)


@rule("COLL-4", mirrors="shardy + xla: the collectives of a partitioned module")
def predicted_collectives(program: Program) -> Communication:
    """A step communicates, equation by equation of its live body, the reshards that bring
    each operand to its operation's splits (COLL-1, COLL-2) and the all-reduce of each split
    reduction (COLL-3), then each result's to the placement it is returned on.

    One value is brought to one split once; an iota is computed in the split it is needed in.
    The list is complete where propagation determines every split and every reshard is made
    one way.

    >>> from shardlaw.spec import Mesh, NamedSharding, P
    >>> from shardlaw.spec.program.description import Opaque, Value
    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> a = Value.placed((8, 8), NamedSharding(mesh, P("x", None)))
    >>> b = Value.placed((8, 8), NamedSharding(mesh, P("y", None)))
    >>> add = Opaque((0, 1), primitive="add", results=(Value.typed((8, 8)),))
    >>> print(predicted_collectives(Program((a, b), (add,), outputs=(2,))))
    2 collective(s) on cpu, 512 bytes per device
      all-gather over ('x',) at body[0] (operand 0): float32[8, 8], 256 bytes per device
      all-gather over ('y',) at body[0] (operand 1): float32[8, 8], 256 bytes per device
    """
    if (aborts := compile_aborts(program)) is not None:   # (no executable on CPU: COLL-13)
        return Communication(caveat=aborts)
    splits, live = propagate(program), live_equations(program)
    stopped = splits if isinstance(splits, Undetermined) else read_after_a_chain(program, live)
    if stopped is None and (inlined := _read_inlined(program, live)) is not None:
        return inlined   # (inner jits, shard_maps, reshards: COLL-11)
    splits = stopped or with_grown_returns(program, splits, by_id=False)   # (COLL-19)
    if isinstance(splits, Undetermined):
        return Communication(undetermined=splits)
    mesh, types = propagation_mesh(program), program.value_types
    folded = folded_equations(program)   # (propagate answered: so does this)
    found: list[Collective] = []
    done: set = set(copied_values(program))   # (value, split) reshards made; PROP-16's copies
    upstream: dict[int, frozenset] = {}   # value -> the all-reduces it is computed from
    after: dict[int, frozenset] = {}      # all-reduce -> the all-reduces it is computed from
    plans: dict = {}   # (form, types, splits) -> the equation's plan (_plan)
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        if not live[k]:
            continue
        if k in folded:   # computes nothing, but what it passes on is still computed
            carried = frozenset().union(*(upstream.get(n, frozenset()) for n in eq.operands))
            upstream.update((n, carried) for n in numbers)
            continue
        made = _made(program, k, numbers, types, splits, mesh, done, plans,
                     (upstream, after, len(found)))
        if isinstance(made, Undetermined):
            return Communication(tuple(found), undetermined=made)
        before = frozenset().union(*(upstream.get(n, frozenset()) for n in eq.operands))
        own = set()
        for c in made:
            if c.kind == "all-reduce":   # (a loop's hoisted ones: given by the loop's walk)
                after.setdefault(len(found), before)
                own.add(len(found))
            found.append(c)
        for n in numbers:
            upstream[n] = before | own
    returned = _returns(program, splits, mesh, done)
    if isinstance(returned, Undetermined):
        return Communication(tuple(found), undetermined=returned)
    return Communication(combined(found + returned, after))


def _made(program: Program, k: int, numbers: tuple, types: tuple, splits: dict, mesh: Mesh,
          done: set, plans: dict, seen: tuple = (None, None, 0)
          ) -> list[Collective] | Undetermined:
    """Equation ``k``'s collectives; a control-flow equation's or an inner jit's read
    through its bodies (collectives_loops.py), ``seen`` the step's (upstream, after,
    count of collectives found) for the all-reduces its loops hoist."""
    eq = program.equations[k]
    if eq.kind in FLOW_KINDS or eq.kind == "jit":
        return _loops.flow_collectives(program, k, done, plans, *seen)
    eq, every = through_folded_broadcasts(program, k, tuple(eq.operands) + tuple(numbers))
    return _equation(eq, every, types, splits, mesh, equation_path("", k), done, plans)


def live_equations(program: Program) -> tuple:
    """Which of ``program``'s equations live (kept with the program once found)."""
    return program.derived_once("live parts", lambda: live_parts(program)).equations


def _read_inlined(program: Program, live: tuple) -> Communication | None:
    """What a step with inner jits, shard_maps or reshards communicates (COLL-11; None:
    it has none)."""
    from .collectives_explicit import has_inlined, inlined_collectives   # (builds on this)
    return inlined_collectives(program) if has_inlined(program, live) else None


def _returns(program: Program, splits: dict, mesh: Mesh, done: set
             ) -> list[Collective] | Undetermined:
    """The reshards that bring each result to the placement it is returned on, where that
    is not its value's split (an out sharding on an input, a type's over Explicit axes:
    seen, an input on ``P(('x', 'y'), 'z')``, 'x' Auto, returned on its type's
    ``P('y', 'z')`` after an all-gather and a collective-permute)."""
    results = predicted_results(program)   # (propagate answered: so does this)
    types = program.value_types
    given = program.out_shardings or (UNSPECIFIED,) * len(results)
    out: list[Collective] = []
    for k, (n, need) in enumerate(zip(program.outputs, results)):
        if given[k] is UNSPECIFIED:   # (left to the compiler: COLL-16)
            need = returned_split(need, types[n], mesh)
        if splits[n] == need or (n, need) in done:
            continue
        done.add((n, need))
        ((_, _, made),), _ = _constraint_plan((types[n],), (splits[n], need), mesh)
        if isinstance(made, Undetermined):
            return dataclasses.replace(made, path=f"result[{k}]")
        out += [dataclasses.replace(c, path=f"result[{k}]") for c in made]
    return out


def read_after_a_chain(program: Program, live: tuple) -> Undetermined | None:
    """A value constrained by a chain of two or more constraints and read elsewhere too:
    Shardy's import has its uses after the chain read the chain's last value, where the
    equations here read the value itself — their reshards are not planned yet; or a
    differentiated remat recomputing what JAX stores (COLL-8, ``policy_unread``)."""
    made: dict[int, int] = {}   # a live constraint's result -> its operand
    uses: dict[int, int] = {n: 1 for n in program.outputs}
    for k, (eq, numbers) in enumerate(zip(program.equations, program.result_numbers())):
        if not live[k]:
            continue
        for n in eq.operands:
            uses[n] = uses.get(n, 0) + 1
        if eq.kind == "sharding_constraint":
            made[numbers[0]] = eq.operands[0]
    placed = len(program.inputs) + len(program.consts)   # (an input's is placed: no chain)
    for result, operand in made.items():
        head = made.get(operand)
        if head is not None and head not in made and head >= placed and uses[head] > 1:
            return Undetermined("COLL-4", "a value under a chain of constraints and read "
                                "elsewhere: the uses after the chain read its last value, "
                                "whose reshards are not planned yet")
    return _loops.unread_remat(program)


@rule("COLL-7", mirrors="xla: AllReduceCombiner")
def combined(found: list[Collective], after: dict[int, frozenset]) -> tuple[Collective, ...]:
    """All-reduces over the same axes with the same reduction, dtype and order of groups,
    none computed from another, are combined into one (each joining the first it may), its
    bytes the sum of theirs; other collectives stay apart.

    XLA's combiner keys on the replica groups as it lists them, in order: two sums over
    ``'y'`` of ``P('y', 'z')`` and of ``P('y', None)`` name the same groups in two orders
    (:func:`group_order`) and stay two all-reduces.

    >>> one = Collective("all-reduce", ("x",), "body[0]", None, (4,), "float32", 16,
    ...                  reduction="add")
    >>> two = dataclasses.replace(one, path="body[1]", bytes_per_device=32)
    >>> [str(c) for c in combined([one, two], {0: frozenset(), 1: frozenset()})]
    ["all-reduce over ('x',) at body[0] + body[1]: float32[4], 48 bytes per device"]
    >>> len(combined([one, two], {0: frozenset(), 1: frozenset({0})}))
    2
    """
    groups: list[list[int]] = []
    for i, c in enumerate(found):
        key = (c.kind, c.axes, c.reduction, c.dtype, c.group_order)
        for group in groups:
            first = found[group[0]]
            if c.kind == "all-reduce" and (first.kind, first.axes, first.reduction, first.dtype,
                                           first.group_order) == key and \
                    not after[i] & set(group) and not c.computation and \
                    not first.computation:   # (a body's: combined in its own, COLL-8)
                group.append(i)
                break
        else:
            groups.append([i])
    out = []
    for group in groups:
        first = found[group[0]]
        out.append(first if len(group) == 1 else dataclasses.replace(
            first, path=" + ".join(found[i].path for i in group),
            bytes_per_device=sum(found[i].bytes_per_device for i in group)))
    return tuple(out)


def _equation(eq: Any, every: tuple[int, ...], types: tuple, splits: dict, mesh: Mesh,
              path: str, done: set, plans: dict | None = None
              ) -> list[Collective] | Undetermined:
    """The collectives of one equation (COLL-1 to COLL-3); ``plans``: the plans of the
    equations met so far (:func:`_plan`), by form, types and splits (a model's layers
    repeat one plan)."""
    typed = tuple([types[n] for n in every])
    held = tuple([splits[n] for n in every])
    try:
        key = (eq.form, typed, held)
        plan = plans.get(key) if plans is not None else None
    except TypeError:   # (a parameter that is not hashable: planned afresh)
        key, plan = None, None
    if plan is None:
        plan = _plan(eq, typed, held, mesh)
        if plans is not None and key is not None:
            plans[key] = plan
    if isinstance(plan, Undetermined):
        return dataclasses.replace(plan, path=path)
    operands, summed = plan
    out: list[Collective] = []
    for i, need, made in operands:
        if (every[i], need) in done or every[i] in done:   # one reshard of a value is made
            if _regathered(eq, made, mesh):                # once; an iota's is computed so
                return Undetermined("COLL-1", "a value gathered to an elementwise "
                                    "operation's result split over a mesh with Explicit axes "
                                    "is read so again: XLA gathers it once or each "
                                    "operation's result, by its own plan", path)
            if (again := regathered_by_a_dot(eq, made)) and every[i] not in done:
                return dataclasses.replace(again, path=path)   # (COLL-20)
            continue
        done.add((every[i], need))
        if isinstance(made, Undetermined):
            return dataclasses.replace(made, path=path)
        out += [_at(c, path) for c in made]
    if isinstance(summed, Undetermined):
        return dataclasses.replace(summed, path=path)
    return out + [_at(c, path) for c in summed]


def equation_collectives(eq: Any, every: tuple, types: Any, splits: Any, mesh: Mesh,
                         path: str, done: set, plans: dict | None = None
                         ) -> list[Collective] | Undetermined:
    """The collectives of one equation over values numbered ``every`` (its operands', then
    its results'), their types and splits looked up in ``types`` and ``splits`` (COLL-1 to
    COLL-3); ``done``: the (value, split) reshards made already in its computation."""
    return _equation(eq, every, types, splits, mesh, path, done, plans)


def moved(value: Any, have: Split, need: Split, mesh: Mesh, path: str,
          operand: int | None = None) -> list[Collective] | Undetermined:
    """The collectives that bring a value of type ``value`` from split ``have`` to ``need``
    at ``path``, as a constraint brings its operand (COLL-2)."""
    ((_, _, made),), _ = _constraint_plan((value,), (have, need), mesh)
    if isinstance(made, Undetermined):
        return dataclasses.replace(made, path=path)
    return [dataclasses.replace(c, path=path, operand=operand) for c in made]


def _regathered(eq: Any, made: Any, mesh: Mesh) -> bool:
    """Whether an elementwise operation over a mesh with Explicit axes reads again a value
    another gathered to the split of its result (XLA then computed each where the value
    stands and gathered each result: seen on ``max(a, b)`` and ``mul(b, c)`` of ``b`` typed
    ``P('y')`` over Explicit 'y', placed ``P(('y', 'x'))``; over Auto axes it gathers the
    value once, as the spec does)."""
    return AxisType.Explicit in mesh.axis_types and entry_of(eq).kind is Kind.ELEMENTWISE \
        and not isinstance(made, Undetermined) and any(c.kind == "all-gather" for c in made)


def _at(c: Collective, path: str) -> Collective:
    """``c`` at ``path`` (``dataclasses.replace`` without its checks: a plan's collectives
    are placed once per equation)."""
    placed = object.__new__(Collective)
    placed.__dict__.update(c.__dict__, path=path)
    return placed


def _plan(eq: Any, typed: tuple, held: tuple, mesh: Mesh) -> tuple | Undetermined:
    """What one equation communicates wherever it stands, its path left empty: per operand
    with dimensions, (its index, the split it is brought to, its reshards), and the
    all-reduce of its split reduction — or why not."""
    count = len(eq.operands)
    if eq.kind == "sharding_constraint":
        return _constraint_plan(typed, held, mesh)
    sharding = entry_of(eq).sharding
    factors = sharding(eq, typed[:count]) if callable(sharding) else sharding
    if isinstance(factors, NotPropagated):
        return Undetermined("COLL-4", factors.why, "")
    read = [tensor_factor_splits(factors, typed, i, split, mesh)
            for i, split in enumerate(held)]
    unread = next((r for r in read if isinstance(r, Undetermined)), None)
    if unread is not None:   # (a split that does not read as the factors')
        return dataclasses.replace(unread, path="")
    chosen = operation_splits(factors, read, count)
    if chosen is None:
        return Undetermined("COLL-1", "the operands split a reduced factor differently: the "
                            "partitioner chooses by cost whether to gather or slice", "")
    if entry_of(eq).name == "gather" and _indexed_split(factors, held):
        return Undetermined("COLL-4", "a gather indexing a split dimension of its operand: "
                            "XLA gathers on each shard, masks and all-reduces (seen), by a "
                            "plan not read yet", "")
    if opened := (sliced_as_a_slice(eq, typed, held) or batch_grouped(eq, factors, read, mesh)
                  or concatenated_apart(eq, held)):   # (COLL-17; COLL-2; COLL-1: whose split)
        return opened   # (a batched dot XLA groups through an idle axis: COLL-2)
    if along_a_split(eq, held):
        return Undetermined("COLL-4", f"{entry_of(eq).name} along a split dimension: XLA "
                            "gathers the operand along it (seen) by a plan of its own, not "
                            "read yet", "")
    if entry_of(eq).name in UNSUMMED and any(any(r.values()) for r in read):
        return Undetermined("COLL-3", f"{entry_of(eq).name} of a split value: XLA's variadic "
                            f"reduce moves its operand by its own plan", "")
    uneven = _uneven_split(factors, typed, chosen, read)
    if uneven:
        return Undetermined("COLL-1", f"factor {uneven} is split along dimensions of "
                            f"different sizes (a concatenate's, a pad's, a slice's): the "
                            f"partitioner moves the pieces by its own plan", "")
    beyond = _operand_beyond(factors, read, chosen, count) if factors.reduced else {}
    if not factors.reduced and _beyond_twice(factors, read, chosen, count):
        return Undetermined("COLL-1", "two operands split alike beyond their operation's "
                            "result on a factor they share: the partitioner chooses by cost "
                            "whether to gather each or compute there and gather the result", "")
    if beyond:   # (an elementwise operand is brought to its result's split: seen)
        return _reduced_then_moved(eq, factors, read, {**chosen, **beyond}, typed, held, mesh)
    if (first := reduced_where_it_stands(eq, factors, read, chosen)) is not None:
        return _reduced_then_moved(eq, factors, read, first, typed, held, mesh)   # (COLL-18)
    op = _Operation(factors, read, chosen, factor_sizes(factors, typed), mesh, typed, "")
    operands = _operand_moves(eq, op, held)
    summed = _all_reduce(op, count, REDUCTIONS.get(entry_of(eq).name, "add"),
                         entry_of(eq).name.startswith("reduce_"))
    used = {a for axes in chosen.values() for a in axes}   # (a gather of those comes first)
    if summed and not isinstance(summed, Undetermined) and any(
            not isinstance(made, Undetermined) and any(c.kind == "all-gather" and not set(
                c.axes) <= used for c in made) for _, _, made in operands):
        summed = Undetermined("COLL-3", "a split reduction whose operand is also gathered: "
                              "the partitioner orders the gather and the all-reduce by its "
                              "own plan", "")
    return tuple(operands), summed


def _operand_moves(eq: Any, op: "_Operation", held: tuple) -> list:
    """Per operand with dimensions, (its index, the split it is brought to, its reshards)."""
    operands = []
    for i, dims in enumerate(op.factors.operands):
        if dims:
            need = dimension_splits(dims, op.chosen, op.sizes, op.mesh)
            made = _reshards(op, i, held[i], need)
            operands.append((i, need, _dot_swap(eq, i, made, need, op.mesh)))
    return operands


def _dot_swap(eq: Any, i: int, made: Any, need: Split, mesh: Any) -> Any:
    """Reshard ``made`` of a dot's operand ``i``, or why not: one all-to-all over axes no
    larger than the mesh axes the operand is replicated over at ``need`` is left open
    (seen: ``P(None, 'x')`` to ``P('x')`` over 'x' of (2, 4) is a slice, a
    collective-permute and an all-gather; over 'x' of (4, 2) or (8,) one all-to-all)."""
    if entry_of(eq).name != "dot_general" or isinstance(made, Undetermined) or \
            len(made) != 1 or made[0].kind != "all-to-all":
        return made
    held = {a for axes in need for a in axes}
    rest = math.prod(mesh.axis_size(a) for a in mesh.axis_names if a not in held)
    if math.prod(mesh.axis_size(a) for a in made[0].axes) > rest:
        return made
    return Undetermined("COLL-2", f"operand {i} of a dot moves one axis between its "
                        f"dimensions while replicated over at least as many devices as the "
                        f"axis splits: XLA slices, permutes and gathers it by its dot's own "
                        f"plan (seen), not read yet", "")


def _indexed_split(factors: Any, held: tuple) -> bool:
    """Whether a gather's operand is split along a dimension it indexes or slices shorter
    (an unsplit factor ``o…`` of :func:`~shardlaw.spec.program.sharding_factors.gather_factors`)."""
    dims = factors.operands[0] if factors.operands else ()
    return any(axes and f.startswith("o") for f, axes in zip(dims, held[0] if held else ()))


# (propagation passes their own dimension through; the partitioner gathers it)
CUMULATIVE = ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")


def along_a_split(eq: Any, held: tuple) -> bool:
    """Whether ``eq`` is a cumulative operation along a dimension its operand's split
    ``held[0]`` splits (seen on 8 CPU devices: split elsewhere, no collective)."""
    if entry_of(eq).name not in CUMULATIVE or not held or not held[0]:
        return False
    axis = dict(getattr(eq, "params", ())).get("axis", 0) % len(held[0])
    return bool(held[0][axis])


def _operand_beyond(factors: Any, read: list, chosen: dict, count: int) -> dict:
    """The factors a result holds (not reduced) that an operand splits beyond the result's
    split, to that operand's longest split (empty: none); not where the next axis is one
    another factor computes with (the operand is then gathered: PROP-14's projection)."""
    out = {}
    held = {a for axes in chosen.values() for a in axes}
    for f, split in chosen.items():
        if f in factors.reduced:
            continue
        for r in read[:count]:
            longer = r.get(f, ())
            if len(longer) > len(split) and longer[:len(split)] == split \
                    and longer[len(split)] not in held:
                out[f] = max(out.get(f, ()), longer, key=len)
    return out


def _beyond_twice(factors: Any, read: list, chosen: dict, count: int) -> bool:
    """Whether two operands split one factor of the result alike beyond the result's split
    (XLA then multiplies ``P(('y', 'x'))`` operands where they stand and gathers the product
    once, where it brings operands split otherwise to the result's split each)."""
    for f, split in chosen.items():
        longer = [r.get(f, ()) for r in read[:count] if len(r.get(f, ())) > len(split)
                  and r.get(f, ())[:len(split)] == split]
        if len(longer) > len(set(longer)):
            return True
    return False


def _reduced_then_moved(eq: Any, factors: Any, read: list, computed: dict, typed: tuple,
                        held: tuple, mesh: Mesh) -> tuple | Undetermined:
    """A reduction of one operand split beyond its result on a factor they share: XLA's
    partitioner reduces the operand where it stands and gathers the smaller result (seen:
    ``sin(a).sum(1)`` of ``P(('x', 'y'), None)`` under the out sharding ``P('x')``
    all-gathers the f32[1] sums, 16 bytes, not the f32[1, 8] operand); any other operation
    so split is the partitioner's plan (COLL-1)."""
    count = len(eq.operands)
    if count != 1 or entry_of(eq).name in UNSUMMED:
        return Undetermined("COLL-1", "an operand split beyond its operation's result on a "
                            "factor they share: the partitioner chooses by cost which it "
                            "moves", "")
    op = _Operation(factors, read, computed, factor_sizes(factors, typed), mesh, typed, "")
    if reduction(computed, factors.reduced):
        return Undetermined("COLL-3", "a split reduction whose operand is split beyond its "
                            "result: the partitioner orders the all-reduce and the result's "
                            "gather by its own plan", "")
    made = dimension_splits(factors.results[0], computed, op.sizes, mesh)
    moved = _reshards(dataclasses.replace(op, chosen={}), count, made, held[count])
    if isinstance(moved, Undetermined):
        return moved
    operand = dimension_splits(factors.operands[0], computed, op.sizes, mesh)
    return ((0, operand, _reshards(op, 0, held[0], operand)),), [
        dataclasses.replace(c, operand=None) for c in moved]


def _uneven_split(factors: Any, typed: tuple, chosen: dict, read: list) -> str:
    """A factor split (as the operation or a tensor holds it) along dimensions whose sizes
    differ between its tensors, if any ('' where none)."""
    sizes: dict[str, set] = {}
    for dims, value in zip(factors.operands + factors.results, typed):
        for dim, size in zip(dims, value.shape):
            sizes.setdefault(dim, set()).add(size)
    split = {f for f, axes in chosen.items() if axes} | {
        f for r in read for f, axes in r.items() if axes}
    return next((f for f in sorted(split) if len(sizes.get(f, ())) > 1), "")


def _constraint_plan(typed: tuple, held: tuple, mesh: Mesh) -> tuple:
    """A sharding constraint's plan (:func:`_plan`): its operand brought to the split it
    fixes (COLL-2), no factor of its own taken and nothing summed."""
    op = _Operation(None, [], {}, {}, mesh, typed, "")
    return ((0, held[1], _reshards(op, 0, held[0], held[1])),), []


@dataclasses.dataclass(frozen=True)
class _Operation:
    """One equation as its collectives are read: its sharding rule, each tensor's factor
    splits, the splits it computes with, the factors' sizes, the mesh, the types, the
    path."""

    factors: Any
    read: list
    chosen: dict
    sizes: dict
    mesh: Any
    typed: tuple
    path: str

    def groups(self, axes: tuple[str, ...]) -> ReplicaGroups | None:
        return ReplicaGroups(self.mesh, axes) if isinstance(self.mesh, Mesh) else None


def _holds_every_axis(split: Split, mesh: Any) -> bool:
    """Whether a value split so is replicated over no mesh axis of size above 1."""
    return {n for n in mesh.axis_names if mesh.axis_size(n) > 1} <= {
        a for axes in split for a in axes}


def _reshards(op: _Operation, i: int, have: Split, need: Split
              ) -> list[Collective] | Undetermined:
    """The collectives that bring operand ``i`` from ``have`` to ``need`` (COLL-2)."""
    steps = reshard(have, need, op.mesh)
    if isinstance(steps, str):
        return Undetermined("COLL-2", f"operand {i}: {steps}", op.path)
    if op.factors is not None and steps and steps[0][0] == "collective-permute":
        return Undetermined("COLL-2", f"operand {i} moves to other pieces of one shape: "
                            f"the partitioner chooses how (a collective-permute, or a gather "
                            f"and a slice)", op.path)
    used = {a for split in op.chosen.values() for a in split}
    if op.factors is not None and _holds_every_axis(have, op.mesh):
        # (an axis only a factor outside the operand takes leaves it by a gather alone where
        # the operand holds every axis; one it is replicated over, XLA may route it through)
        own = set("*".join((op.factors.operands + op.factors.results)[i]).split("*"))
        used = {a for f, split in op.chosen.items() if f in own for a in split}
    for kind, _, axes in steps:
        if kind == "all-gather" and used & set(axes):
            return Undetermined("COLL-2", f"operand {i} loses mesh axes "
                                f"{sorted(used & set(axes))} another factor of the operation "
                                f"takes: the partitioner chooses how to move them", op.path)
    value = op.typed[i]
    dtype = wire_dtype(str(value.dtype))
    if steps and steps[0][0] in ("all-to-all", "collective-permute"):
        # the piece each device holds moves whole (an all-to-all splits it as it goes)
        kind, _, axes = steps[0]
        shape = _shard(tuple(value.shape), have, op.mesh)
        return [Collective(kind, axes, op.path, i, shape, dtype, _bytes(shape, dtype),
                           op.groups(axes) if kind == "all-to-all" else None)]
    # axes an operand lacks are sliced first (locally); a gather starts from the slice
    shape = list(_shard(tuple(value.shape), tuple(
        h if _losing(h, n) else n for h, n in zip(have, need)), op.mesh))
    out = []
    for kind, dim, axes in steps:
        shape[dim] *= math.prod(op.mesh.axis_size(a) for a in axes)
        out.append(Collective(kind, axes, op.path, i, tuple(shape), dtype,
                              _bytes(tuple(shape), dtype), op.groups(axes)))
    return out


def _all_reduce(op: _Operation, count: int, how: str, by_dimension: bool = False
                ) -> list[Collective] | Undetermined:
    """The all-reduce of a split reduction, if any (COLL-3); ``by_dimension``: a reduce_*
    primitive's, one per reduced dimension, the minor first (seen: ``a.sum()`` of
    ``P('x', 'y')`` all-reduces over 'y', then over 'x'; of ``P(('x', 'z'), 'y')`` over
    'y', then over ('x', 'z'))."""
    factors, chosen = op.factors, op.chosen
    summed = reduction(chosen, factors.reduced)
    if not summed:
        return []
    if how in UNSUMMED:   # (also split elsewhere only: see _plan)
        return Undetermined("COLL-3", f"{how} over a dimension split over {summed}: XLA "
                            f"gathers each shard's own winners (values and indices), not an "
                            f"all-reduce", op.path)
    if any(set(summed) & set(chosen.get(f, ())) for f in chosen if f not in factors.reduced):
        return Undetermined("COLL-3", f"mesh axes {summed} split a reduced factor and "
                            f"another of the same operation", op.path)
    result = op.typed[count]
    # the sum is of the result as its operands split it; one split further is sliced,
    # before the all-reduce or after it as the partitioner plans (seen both ways)
    held = {f: max((r.get(f, ())[:_kept(r.get(f, ()), split)] for r in op.read[:count]),
                   key=len) for f, split in chosen.items() if f not in factors.reduced}
    if any(held[f] != chosen[f] for f in held):
        return Undetermined("COLL-3", f"the result is split beyond its operands' split "
                            f"while summed over {summed}: the partitioner slices it before "
                            f"the all-reduce or after, by its own plan", op.path)
    shape = _shard(tuple(result.shape),
                   dimension_splits(factors.results[0], held, op.sizes, op.mesh), op.mesh)
    dtype = wire_dtype(str(result.dtype))
    each = [chosen[f] for f in reversed(factors.operands[0]) if f in factors.reduced
            and chosen.get(f)] if by_dimension else []
    split = dimension_splits(factors.results[0], held, op.sizes, op.mesh)
    steps = each if sum(len(a) for a in each) == len(summed) else [summed]
    if len(steps) > 1:   # (each step's groups listed by the operand's whole split)
        split = dimension_splits(factors.operands[0], chosen, op.sizes, op.mesh)
    return [Collective("all-reduce", axes, op.path, None, shape, dtype, _bytes(shape, dtype),
                       op.groups(axes), how, group_order(op.mesh, split, axes))
            for axes in steps]


def group_order(mesh: Any, split: Split, summed: tuple[str, ...]) -> tuple[str, ...]:
    """The order XLA lists an all-reduce's groups in (COLL-7): the summed value's split
    axes dimension by dimension, then the other axes in mesh order, axes of size 1 left
    out (seen: a sum of ``P('y', 'z')`` lists them ``(z, x)``, one of ``P('y', None)``
    ``(x, z)``); a reduction over several split dimensions, one all-reduce each, lists
    each by its operand's split (``a.sum()`` of ``P('z', 'x')`` sums over 'x' listed
    ``(z, y)``, then over 'z' listed ``(x, y)``)."""
    held = [a for axes in split for a in axes if a not in summed]
    rest = [a for a in mesh.axis_names if a not in summed and a not in held]
    return tuple(a for a in held + rest if mesh.axis_size(a) > 1)


def _kept(have: tuple, need: tuple) -> int:
    kept = 0
    while kept < min(len(have), len(need)) and have[kept] == need[kept]:
        kept += 1
    return kept


def _losing(have: tuple, need: tuple) -> bool:
    return len(have) > _kept(have, need)


# The names collectives_explicit.py builds on (an inlined program's steps and boundaries).
plan_equation = _equation
constraint_plan = _constraint_plan
returned_reshards = _returns

# The collectives inside a loop's and a cond's body (its own module for size; it builds on
# this one): imported here so its rules are registered with this module's.
from . import collectives_loops as _loops  # noqa: E402,F401
from .collectives_boundaries import returned_split, with_grown_returns  # noqa: E402

"""The body of a traced program: the shardings inside it (PROG-2, PROG-3, WSC-8) and its refs (REF-1, REF-3).

Lowering a jit first drops the body's dead equations (unless the jit keeps unused inputs),
then holds every sharding left inside the body — a constraint's, a device_put's to a
sharding, an inner jit's given in/out shardings, a concrete shard_map mesh — to the one
device assignment of the program, after the kept inputs' and the results' (DA-1, DA-2),
and counts them for the results' committedness (EXE-2). JAX finds a conflict only while it
lowers; the engine reads the same shardings off the traced body (the jaxpr it has after
tracing) and refuses before anything is lowered, at the equation's path: ``body[3]``,
``body[0].jit.body[1]``, ``body[0].jit.in_shardings[0]``, ``body[2].shard_map.mesh``.

The constraints left in the body must lower: a GSPMDSharding that Shardy cannot write is
refused before lowering (WSC-8, TypeError as JAX raises it), and a tiling of one device,
which would end the process inside XLA, is refused with a RuntimeError of the engine's own
(:func:`check_constraint_lowers`). After compiling, results the compiler placed come back
in the type of the first NamedSharding or SingleDeviceSharding inside the body when no
kept input has one (PROG-3, :func:`recovery_origin`).

A mutable ref is a committed input on its own sharding: passed as an argument, it is an
input where it is passed (:mod:`.call_arguments`); closed over, the walk lists it when the
live body reads or writes it (every one when the jit keeps unused inputs), and it joins the
device assignment right after the arguments (REF-1, at ``constants[k]``, the refs numbered
first among the constants as the program describes them). A ref argument the program
keeps cannot be donated (REF-3, refused before compiling). A call whose refs take part is
compiled and run by JAX's own jit once the engine has decided it: JAX writes the refs' new
values back (REF-2) and reads the results' shardings over the refs' own.

The body is walked as JAX walks it: a body's own equations in order, then the bodies
nested in them, each the same way, at any depth (inner jits, shard_maps, and the bodies of
any other equation: a scan's, a cond's branches). Paths count the equations of the body as
traced, dead ones included. The walk is done once per traced body (and per
``keep_unused``), and remembered with it: a signature that meets a body walked before, and
every cache hit, walks nothing.
"""

from __future__ import annotations

import re
import weakref
from typing import Any, Iterator

from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from . import internals
from .recovery import Value
from .resolution import Source
from .rules import note, reject, rule
from .shardings import UNSPECIFIED, spec_entries

__all__ = ["Body", "walked", "inside_shardings", "walk_body", "ref_inputs", "constant_sharding",
           "recovery_origin",
           "check_body_lowers", "check_listed_specs", "check_constraint_lowers",
           "check_spec_axes_once",
           "check_collective_lowers"]

# The collectives of a shard_map's body, as jax 0.10.2 names its equations.
COLLECTIVES = frozenset({"psum", "psum_invariant", "pmax", "pmin", "pvary", "axis_index",
                         "all_gather", "reduce_scatter", "all_to_all", "ppermute"})


class Body:
    """What the walk of a traced body found: ``shardings``, the shardings inside it that
    take part (PROG-2), and ``lowering``, what lowering checks in its live shard_maps —
    ``(path, "in_spec", spec)`` for an operand its body uses (``"listed_in_spec"`` over a
    concrete mesh: checked before the device assignment), ``(path, "collective",
    (primitive, axes, sizes, perm))`` for a collective, ``sizes`` the mesh's axis sizes;
    ``refs``, the closed-over mutable refs that take part (REF-1), each at its path
    ``constants[k]``; ``constants``, the constants JAX hoists as arguments, in its order,
    each on its sharding or left open (CONST-1, CONST-2)."""

    __slots__ = ("shardings", "lowering", "refs", "constants")

    def __init__(self, shardings: tuple[Source, ...], lowering: tuple[tuple, ...],
                 refs: tuple["RefInput", ...] = (),
                 constants: tuple["RefInput", ...] = ()) -> None:
        self.shardings = shardings
        self.lowering = lowering
        self.refs = refs
        self.constants = constants


# Per traced body (its jaxpr, held weakly): keep_unused -> what its walk found.
_WALKED: "weakref.WeakKeyDictionary[Any, dict[bool, Body]]" = weakref.WeakKeyDictionary()


def walked(closed_jaxpr: Any, keep_unused: bool) -> Body:
    """The walk of a traced body, done once and remembered with it."""
    jaxpr = closed_jaxpr.jaxpr
    try:
        known = _WALKED.setdefault(jaxpr, {})
    except TypeError:   # a body that cannot be held weakly is walked each time
        known = {}
    if keep_unused not in known:
        known[keep_unused] = walk_body(jaxpr, keep_unused, closed_jaxpr.consts)
    return known[keep_unused]


@rule("PROG-2")
def inside_shardings(closed_jaxpr: Any, keep_unused: bool) -> tuple[Source, ...]:
    """Unless the jit keeps unused inputs, dead equations are dropped first; every sharding left inside its body — constraints', device_puts', inner jits' given shardings, concrete shard_map meshes' — then joins the device assignment and the results' committedness.

    Listed body by body — a body's own equations in order, then the bodies nested in them —
    each with its path and what it is (``sharding_constraint at body[1]``). A constraint
    over an abstract mesh, a device_put to a device or to a memory space, and an inner
    jit's shardings left open take no part. Remembered per traced body.
    """
    return walked(closed_jaxpr, keep_unused).shardings


def walk_body(jaxpr: Any, keep_unused: bool, consts: Any = ()) -> Body:
    """What ``jaxpr`` holds that lowering reads, walked now (no memory); ``consts``: the
    values of its constant variables (the closed jaxpr's)."""
    live = jaxpr if keep_unused else internals.live_body(jaxpr)
    out: list[Source] = []
    lowering: list[tuple] = []
    _walk(jaxpr, live, "", out, lowering, None)
    return Body(tuple(out), tuple(sorted(lowering, key=lambda c: _lowering_order(c[0]))),
                _closed_over_refs(jaxpr, live, consts, keep_unused),
                _hoisted_constants(jaxpr, live) if internals.hoists_constants() else ())


# The equations a program's description reads: their literal operands, scalars included,
# are numbered among its constants too (``constants[k]``).
DESCRIBED = frozenset({"jit", "pjit", "sharding_constraint", "device_put", "shard_map",
                       "reshard"})


def _constant_paths(jaxpr: Any, prefix: str, paths: dict[int, str]) -> None:
    """The path of each literal the description reads as a constant, by the literal's id:
    in each body, after its constant variables, the literals of its equations in order
    (every one of an equation it describes, the arrays of any other), then the bodies of
    the equations it describes, each the same way."""
    k = len(jaxpr.constvars)
    for eqn in jaxpr.eqns:
        described = eqn.primitive.name in DESCRIBED
        for v in eqn.invars:
            if type(v) is internals.Literal and id(v) not in paths and (
                    described or getattr(v.val, "ndim", 0) > 0):
                paths[id(v)] = f"{prefix}constants[{k}]"
                k += 1
    for n, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive.name in DESCRIBED:
            for body in internals.bodies_of(eqn):
                _constant_paths(body, f"{prefix}body[{n}].{eqn.primitive.name}.", paths)


def _hoisted_in(jaxpr: Any, found: dict[int, Any]) -> None:
    """JAX's order of the constants it hoists (jaxpr_const_args): the body's results, then
    equation by equation its operands and the bodies nested in it."""
    for v in jaxpr.outvars:
        if internals.hoistable(v):
            found.setdefault(id(v), v)
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if internals.hoistable(v):
                found.setdefault(id(v), v)
        for body in internals.bodies_of(eqn):
            _hoisted_in(body, found)


def _hoisted_constants(jaxpr: Any, live: Any) -> tuple["RefInput", ...]:
    """The constants JAX hoists from the live body, in its order: a committed jax.Array on
    its own sharding, a numpy array or an uncommitted one left open (UNSPECIFIED)."""
    found: dict[int, Any] = {}
    _hoisted_in(live, found)
    if not found:
        return ()
    paths: dict[int, str] = {}
    _constant_paths(jaxpr, "", paths)
    out = []
    for key, literal in found.items():
        value = literal.val
        committed = isinstance(value, internals.ArrayImpl) and value._committed
        path = paths.get(key, "constants")
        out.append(RefInput(value.sharding if committed else UNSPECIFIED,
                            f"closed-over constant {path}", path, Value.of_aval(literal.aval)))
    return tuple(out)


@rule("CONST-2")
def constant_sharding(closed_jaxpr: Any, keep_unused: bool) -> tuple["RefInput", ...]:
    """A hoisted committed jax.Array enters the program on its own sharding, joining the device assignment after the arguments and committing the results; a hoisted numpy or uncommitted array is left open; none is donated.

    Returns the hoisted constants in JAX's order, each on its sharding or left open
    (UNSPECIFIED), at its path (``constants[k]``, ``body[2].jit.constants[0]``), from the walk of the body
    (once per trace). None unless JAX hoists constants (CONST-1).
    """
    return walked(closed_jaxpr, keep_unused).constants


def _closed_over_refs(jaxpr: Any, live: Any, consts: Any, keep_unused: bool
                      ) -> tuple["RefInput", ...]:
    """The closed-over refs that take part: all of them when the jit keeps unused inputs,
    else those a live equation reads or writes (a write is an effect: dead-code
    elimination keeps it). Numbered as the program describes its constants: the refs
    first, in the order the body holds them."""
    held = [(v, c) for v, c in zip(jaxpr.constvars, consts) if type(c) is internals.Ref]
    if not held:
        return ()
    used: set[int] = set()
    if not keep_unused:
        for eqn in live.eqns:
            used.update(id(v) for v in eqn.invars)
        used.update(id(v) for v in live.outvars)
    return tuple(RefInput(c.sharding, f"closed-over ref constants[{k}]", f"constants[{k}]",
                          Value.of_aval(v.aval.inner_aval))
                 for k, (v, c) in enumerate(held) if keep_unused or id(v) in used)


class RefInput(Source):
    """A closed-over ref that takes part: a Source of the device assignment, and the type
    of the value it holds (``value``), which result recovery reads as an input's."""

    __slots__ = ("value",)

    def __init__(self, sharding: Any, what: str, path: str, value: Value) -> None:
        super().__init__(sharding, what, path)
        self.value = value


@rule("REF-1")
def ref_inputs(closed_jaxpr: Any, keep_unused: bool) -> tuple["RefInput", ...]:
    """A mutable ref is a committed input on its own sharding: passed as an argument, where it is passed (kept or dropped as any argument); closed over, right after the arguments when a live equation reads or writes it.

    A ref passed as an argument is an input of the call as any array is (its sharding
    is its own, committed); this returns the closed-over ones that take part, each at its
    path ``constants[k]``, from the walk of the body (once per trace).
    """
    return walked(closed_jaxpr, keep_unused).refs


def _walk(traced: Any, live: Any, prefix: str, out: list[Source], lowering: list[tuple],
          manual: Any) -> None:
    """Append the shardings of ``live`` (``traced`` after dead-code elimination, or itself)
    and what lowering checks in it; ``manual``: (mesh, manual axes) inside a shard_map."""
    positions = _positions(traced, live)
    if positions is None:   # not a subsequence after all: the live body's own numbering
        traced, positions = live, list(range(len(live.eqns)))
    for k, eqn in zip(positions, live.eqns):
        out.extend(_equation_shardings(eqn, traced.eqns[k], f"{prefix}body[{k}]"))
        lowering.extend(_lowering_checks(eqn, traced.eqns[k], f"{prefix}body[{k}]", manual))
    for k, eqn in zip(positions, live.eqns):
        path = f"{prefix}body[{k}]"
        bodies = list(zip(internals.bodies_of(traced.eqns[k]), internals.bodies_of(eqn)))
        inner = manual
        if eqn.primitive.name == "shard_map":
            inner = (eqn.params["mesh"], (manual[1] if manual else frozenset())
                     | frozenset(eqn.params.get("newly_manual_axes", ())))
        for n, (traced_body, live_body) in enumerate(bodies):
            name = eqn.primitive.name
            where = f"{path}.{name}." if len(bodies) == 1 else f"{path}.{name}[{n}]."
            _walk(traced_body, live_body, where, out, lowering, inner)


def _lowering_checks(eqn: Any, traced: Any, path: str, manual: Any) -> Iterator[tuple]:
    """What lowering checks of one live equation: a shard_map's in specs of the operands
    its body uses; a collective inside a shard_map."""
    name, params = eqn.primitive.name, eqn.params
    if name == "shard_map":
        (body,), (traced_body,) = internals.bodies_of(eqn), internals.bodies_of(traced)
        # over a concrete mesh JAX makes shardings of the specs as it lists the shardings
        # inside, before the device assignment; over an abstract one when it lowers
        kind = "in_spec" if isinstance(params["mesh"], AbstractMesh) else "listed_in_spec"
        for i, spec in zip(_numbers(body.invars, traced_body.invars), params["in_specs"]):
            yield (f"{path}.shard_map.in_specs[{i}]", kind, spec)
    elif name in COLLECTIVES and manual is not None:
        named = params.get("axes", params.get("axis_name", ()))
        axes = (named,) if isinstance(named, str) else tuple(named)
        sizes = dict(zip(manual[0].axis_names, manual[0].axis_sizes))
        untiled = name == "all_gather" and not params.get("tiled", True)
        split = _operand_split(eqn) if name == "reduce_scatter" or untiled else None
        gathered = ((tuple(eqn.invars[0].aval.shape), params["all_gather_dimension"])
                    if untiled and split is not None else None)
        yield (path, "collective", (name, axes, sizes, params.get("perm"), split, gathered))


def _operand_split(eqn: Any) -> tuple | None:
    """The split a collective's operand's type keeps over the automatic Explicit axes, one
    entry per dimension, or None where it names none."""
    spec = getattr(getattr(eqn.invars[0].aval, "sharding", None), "spec", None)
    entries = spec_entries(spec) if spec is not None else ()
    return tuple(entries) if any(e is not None for e in entries) else None


def _positions(traced: Any, live: Any) -> list[int] | None:
    """The index in ``traced`` of each equation of ``live``: dead-code elimination keeps
    equations in order and their results as the same variables (an equation without
    results is matched to the next of its primitive); None if one is not found."""
    if live is traced:
        return list(range(len(traced.eqns)))
    out: list[int] = []
    k = 0
    for eqn in live.eqns:
        results = {id(v) for v in eqn.outvars}
        while k < len(traced.eqns):
            candidate = traced.eqns[k]
            k += 1
            if candidate.primitive is eqn.primitive and (
                    not results or results & {id(v) for v in candidate.outvars}):
                out.append(k - 1)
                break
        else:
            return None
    return out


def _equation_shardings(eqn: Any, traced: Any, path: str) -> Iterator[Source]:
    """The shardings of one live equation that take part (as lowering lists them)."""
    name, params = eqn.primitive.name, eqn.params
    if name == "sharding_constraint":
        s = params["sharding"]
        if not (isinstance(s, NamedSharding) and isinstance(s.mesh, AbstractMesh)):
            yield Source(s, f"sharding_constraint at {path}", path)
    elif name == "device_put":
        for s in params["devices"]:
            if isinstance(s, Sharding) and s.memory_kind is not None:
                yield Source(s, f"device_put at {path}", path)
    elif name == "jit":
        yield from _jit_shardings(eqn, traced, path)
    elif name == "shard_map":
        mesh = params["mesh"]
        if not isinstance(mesh, AbstractMesh):
            yield Source(NamedSharding(mesh, PartitionSpec()),
                         f"mesh of the shard_map at {path}", f"{path}.shard_map.mesh")


def _jit_shardings(eqn: Any, traced: Any, path: str) -> Iterator[Source]:
    """An inner jit's given in/out shardings of the inputs and results its live body keeps,
    numbered as the traced jit numbers them."""
    inner, traced_inner = eqn.params["jaxpr"].jaxpr, traced.params["jaxpr"].jaxpr
    ins = _numbers(inner.invars, traced_inner.invars)
    outs = _numbers(eqn.outvars, traced.outvars)
    for which, numbers, given in (("in_shardings", ins, eqn.params["in_shardings"]),
                                  ("out_shardings", outs, eqn.params["out_shardings"])):
        for i, s in zip(numbers, given):
            if isinstance(s, Sharding):
                yield Source(s, f"{which}[{i}] of the jit at {path}", f"{path}.jit.{which}[{i}]")


def _numbers(kept: Any, every: Any) -> list[int]:
    """The position in ``every`` of each variable of ``kept`` (a subsequence of it)."""
    where = {id(v): i for i, v in enumerate(every)}
    return [where.get(id(v), i) for i, v in enumerate(kept)]


@rule("REF-3")
def check_refs_not_donated(paths: list[str], refs: list[int], kept: tuple[int, ...],
                           donated: tuple[bool, ...], inputs: list[tuple] = (),
                           results: list[tuple] = (), devices: int = 1) -> None:
    """A donated ref argument taking part is refused when compiling if the compiler is made its donor: on several devices when a result's sharding is not given, else when an unaliased result has its per-device size.

    ``refs``: the flat arguments that are refs; ``kept``: those the program keeps (a
    donated ref dropped as unused is no donor); ``inputs`` and ``results``: each flat
    argument's and result's (shape, dtype, sharding), the results' as jit's out_shardings
    give them (UNSPECIFIED: not given); ``devices``: the device assignment's size. As JAX
    sets up its aliases: a donated argument not a ref takes the first result of its
    per-device shape and dtype, then every donated argument left, in order, the first
    result left with as many elements per device; a ref that gets one is a donor.
    """
    donors = [i for i in sorted(kept) if i < len(donated) and donated[i]]
    is_ref = set(refs)
    if not any(i in is_ref for i in donors):
        return
    if devices > 1 and not all(_given(s) for _, _, s in results):
        _donated_ref(paths[next(i for i in donors if i in is_ref)])
    free = [(_piece(shape, s, devices), str(dtype)) for shape, dtype, s in results]
    waiting = []
    for i in donors:
        shape, dtype, s = inputs[i]
        mine = (_piece(shape, s, devices), str(dtype))
        if i not in is_ref and mine in free:
            free.remove(mine)    # aliased to that result
        else:
            waiting.append(i)
    counts = [_elements(piece) for piece, _ in free]
    for i in waiting:
        shape, _, s = inputs[i]
        n = _elements(_piece(shape, s, devices))
        if n in counts:
            counts.remove(n)     # the compiler is made its donor
            if i in is_ref:
                _donated_ref(paths[i])


def _donated_ref(path: str) -> None:
    raise reject("REF-3", internals.JaxRuntimeError,
                 f"{path} is a mutable ref, so its buffer is already aliased with its new "
                 "value and cannot be added as a buffer donor for any result as well. Do not "
                 "donate a ref: its updates are written back in place already.", path,
                 jax_error="JaxRuntimeError")


def _given(sharding: Any) -> bool:
    """A result's sharding given, with no dimension left UNCONSTRAINED."""
    if sharding is UNSPECIFIED or sharding is None:
        return False
    return not (isinstance(sharding, NamedSharding)
                and any(e is PartitionSpec.UNCONSTRAINED for e in spec_entries(sharding.spec)))


def _piece(shape: tuple, sharding: Any, devices: int) -> tuple:
    """What one device holds of a value of ``shape`` on ``sharding``."""
    if devices == 1 or not _given(sharding):
        return tuple(shape)
    return tuple(sharding.shard_shape(tuple(shape)))


def _elements(shape: tuple) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


# --------------------------------------------------------------------------- PROG-3

@rule("PROG-3")
def recovery_origin(recovered: list[Any], kept_values: list[Value], results: list[Value],
                    inside: tuple[Source, ...]) -> tuple[list[Any], list[Any], list[Value]]:
    """With no kept input placed by a NamedSharding or SingleDeviceSharding, results the compiler placed take the type of the first such sharding inside the body, re-read over its own mesh; over an abstract mesh they stay as placed.

    Returns what OUT-1 (:func:`~.recovery.recover_shardings`) is given: the shardings and
    types whose first NamedSharding or SingleDeviceSharding it follows, and the results'
    types — without their meshes when a sharding inside the body is followed (JAX reads
    the results over that sharding's mesh then, whatever their types say). When the first
    is a NamedSharding over an abstract mesh, JAX's re-reading over it fails and the
    results stay as the compiler placed them: nothing is followed, not even a later one.
    """
    typed = (NamedSharding, SingleDeviceSharding)
    if not inside or any(type(s) in typed for s in recovered):
        return list(recovered), list(kept_values), list(results)
    for source in inside:
        s = source.sharding
        if type(s) is NamedSharding and isinstance(s.mesh, AbstractMesh):
            break
        if type(s) in typed:
            return [s], [None], [Value(v.rank, None) for v in results]
    return list(recovered), list(kept_values), list(results)


# --------------------------------------------------------------------------- WSC-8

def check_body_lowers(body: Body) -> None:
    """What lowering checks in the body, in the order JAX lowers it (an equation, then the
    body nested in it, then the next equation): WSC-8 for every live constraint, then in
    every live shard_map the in specs of the operands its body uses (SMAP-12) and each
    collective's axes named once (SMAP-13) and ppermute's pairs (SMAP-22)."""
    constraints = [s for s in body.shardings if s.what.startswith("sharding_constraint")
                   and isinstance(s.sharding, internals.GSPMDSharding)]
    for source in sorted(constraints, key=lambda s: _lowering_order(s.path)):
        check_constraint_lowers(source.sharding, source.path)
    for path, kind, what in body.lowering:
        if kind == "in_spec":
            check_spec_axes_once(what, path)
        elif kind == "collective":
            check_collective_lowers(*what, path)


def check_listed_specs(body: Body) -> None:
    """SMAP-12 as JAX lists the shardings inside the body, before the device assignment:
    the in specs of the operands each live shard_map over a concrete mesh uses, in the
    order of the listing (a body's own equations, then the bodies nested in them)."""
    for path, kind, spec in body.lowering:
        if kind == "listed_in_spec":
            check_spec_axes_once(spec, path)


def _lowering_order(path: str | None) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", path or "")]


@rule("WSC-8")
def check_constraint_lowers(sharding: Any, path: str) -> None:
    """Under jit a GSPMDSharding constraint lowers only when it is replicated or tiled in an iota order; a maximal, manual, unreduced or device-by-device tiling is refused (TypeError).

    A tiling of one device is refused too (RuntimeError): lowering it, XLA fails a check
    and ends the process, so JAX raises nothing and its words are never asked for.
    """
    if not isinstance(sharding, internals.GSPMDSharding):
        return
    h = sharding._hlo_sharding
    if h.is_replicated() and not h.tuple_elements():
        return
    if h.is_tiled() and h.num_devices() == 1:
        raise reject("WSC-8", RuntimeError,
                     f"the constraint at {path} is {sharding}, a tiling of one device: "
                     "lowering it, XLA fails a check and aborts the process. Constrain with "
                     "a SingleDeviceSharding or a replicated sharding.", path, jax_error="abort")
    if h.is_tiled() and not h.tuple_elements() and h.is_tile_assignment_iota():
        return
    raise reject("WSC-8", TypeError,
                 f"the constraint at {path} is {sharding}, which JAX cannot write as a Shardy "
                 "sharding: only a replicated GSPMDSharding or one tiled in an iota order "
                 "lowers. Constrain with a NamedSharding, or write the tiles as an iota order "
                 "(e.g. {devices=[4,1]<=[4]}).", path)


# --------------------------------------------------------------------------- shard_maps

def check_spec_axes_once(spec: Any, path: str) -> None:
    """SMAP-12 when lowered: an in spec of an operand a shard_map's body uses names each
    mesh axis at most once (JAX's DuplicateSpecError)."""
    note("SMAP-12")
    seen: set[str] = set()
    # Only the per-dimension entries: an unreduced or reduced set is not a dimension's split
    for entry in spec_entries(spec):
        for name in (() if entry is None else (entry,) if isinstance(entry, str) else entry):
            if name in seen:
                raise reject("SMAP-12", Exception,
                             f"{path.rsplit('.', 1)[-1]} is {spec}, which names mesh axis "
                             f"{name!r} more than once", path,
                             jax_error="DuplicateSpecError", stage="lower")
            seen.add(name)


def check_collective_lowers(primitive: str, axes: tuple, sizes: dict, perm: Any,
                            split: tuple | None, gathered: tuple | None, path: str) -> None:
    """SMAP-23, SMAP-25, SMAP-13 and SMAP-22 when lowered: a psum_scatter's operand is split
    over no Explicit axis its shard_map leaves automatic (``split``: its type's split, or
    None; AssertionError); an untiled all_gather's operand (``gathered``: its shape and
    gather dimension), a dimension of 1 inserted there, divides by that split at the same
    positions (ValueError); a collective names each axis once (ValueError); ppermute's
    pairs name each source and each target once, counted modulo the axes' size
    (ValueError), and lie in -size .. size - 1 (IndexError)."""
    if primitive == "reduce_scatter":
        note("SMAP-23")
        if split is not None:
            raise reject("SMAP-23", AssertionError,
                         f"psum_scatter over {axes} takes a value whose type is split {split} "
                         "over the Explicit axes the shard_map leaves automatic: a "
                         "psum_scatter lowers only of a value its type splits over none of "
                         "them. Reshard the argument so that its type splits no dimension "
                         "over those axes before the shard_map, or make them manual too.",
                         path, stage="lower")
    if gathered is not None and split is not None:
        note("SMAP-25")
        _check_gathered_divides(axes, sizes, split, *gathered, path)
    note("SMAP-13")
    for i, name in enumerate(axes):
        if name in axes[:i]:
            raise reject("SMAP-13", ValueError, f"a collective over {axes} names {name!r} "
                         "more than once", path, stage="lower")
    if primitive != "ppermute" or perm is None:
        return
    note("SMAP-22")
    size = 1
    for name in axes:
        size *= sizes.get(name, 1)
    pairs = tuple(tuple(pair) for pair in perm)
    for which, k in (("source", 0), ("target", 1)):
        seen: set[int] = set()
        for pair in pairs:
            if pair[k] % size in seen:
                raise reject("SMAP-22", ValueError,
                             f"ppermute over {axes} lists {which} {pair[k] % size} more than "
                             f"once in {pairs} (positions count modulo {size}): each position "
                             "sends at most once and receives at most once", path, stage="lower")
            seen.add(pair[k] % size)
    for pair in pairs:
        if not all(-size <= p < size for p in pair):
            raise reject("SMAP-22", IndexError,
                         f"ppermute over {axes} ({size} positions) moves {pair}, which names "
                         f"a position outside -{size} .. {size - 1}", path, stage="lower")


def _check_gathered_divides(axes: tuple, sizes: dict, split: tuple, shape: tuple, dim: int,
                            path: str) -> None:
    """SMAP-25: the operand of an untiled all_gather, a dimension of 1 inserted at ``dim``,
    typed with the operand's split at the same positions, divides evenly."""
    broadcast = shape[:dim] + (1,) + shape[dim:]
    kept = tuple(split) + (None,) * (len(broadcast) - len(split))
    for d, (size, entry) in enumerate(zip(broadcast, kept)):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        ways = 1
        for name in names:
            ways *= sizes.get(name, 1)
        if size % ways:
            raise reject("SMAP-25", ValueError,
                         f"the untiled all_gather over {axes} lowers its operand of shape "
                         f"{shape} with a dimension of 1 inserted at {dim}, typed with the "
                         f"operand's split {tuple(split)} at the same positions: dimension {d} "
                         f"of size {size} does not split {ways} ways", path, stage="lower")

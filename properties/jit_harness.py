"""Run a :class:`~shardlaw.spec.jit.call.Call` through real ``jax.jit`` and compare with the spec.

:func:`run_in_jax` builds the call's arguments on JAX's devices (committed arrays with
``device_put``, uncommitted ones under ``jax.default_device``, numpy arrays, Python
scalars), a function with the described results that uses exactly the described inputs,
the jit options and the context mesh; then it calls ``jax.jit`` and records what JAX did:
the exception (class, built-in base, stage) or the results' shardings, committed flags,
layouts, the device assignment and the compiler's choice for results jit left open (and,
for a call compiled ahead of time, the sharding the executable takes each input in).
Arguments with a layout are laid out with ``jax.device_put(x, Format(layout, sharding))``;
``Format`` and ``Layout`` leaves of the shardings trees become JAX's own.

:func:`compare_call` fills the call's compiler oracle from that record (result shardings,
memory kinds, the shardings of inputs jit left open, and the layouts the compiler chose
under ``Layout.AUTO``), asks the spec for a verdict and returns the list of disagreements
(empty when the two agree).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import warnings
from typing import Any

from shardlaw.properties import hits
from shardlaw.spec import UNSPECIFIED, NamedSharding, from_jax, to_jax
from shardlaw.spec.jit.call import Arg, Call, Static, Verdict, static_positions
from shardlaw.spec.placement.equivalence import placement_equivalent
from shardlaw.spec.jit.pipeline import jit_call
from shardlaw.spec.jit.layouts import AUTO_LAYOUT, Format, Layout, is_layout
from shardlaw.spec.core.pytree import fill, leaves_with_paths, map_leaves
from shardlaw.spec.core.values import AbstractMesh, Mesh

__all__ = ["JaxOutcome", "run_in_jax", "compare_call", "SOURCE", "call_hit_counts",
           "compiled_input_hlo", "with_input_choices", "sharding_differences"]

# The source under which the calls compared record their rules (shardlaw.properties.hits).
SOURCE = "jit"


def call_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting hits, rejecting hits) over the calls compared so far."""
    return hits.counts(SOURCE)


@dataclasses.dataclass
class JaxOutcome:
    """What real jax.jit did with a call."""

    error: BaseException | None = None
    stage: str | None = None
    out_shardings: list[Any] = dataclasses.field(default_factory=list)   # spec values
    out_committed: list[bool] = dataclasses.field(default_factory=list)
    out_shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    compiler: list[Any] = dataclasses.field(default_factory=list)         # spec HLO shardings
    memory: list[Any] = dataclasses.field(default_factory=list)           # memory kinds
    device_assignment: tuple[int, ...] | None = None
    aot_error: BaseException | None = None
    raw: list[Any] = dataclasses.field(default_factory=list)   # (jax sharding, rank) per result
    watching: bool = False
    # spec layouts (None: default) per flat result, and per flat input of an AOT-compiled
    # executable (None also for inputs it does not take); None when not recorded
    out_layouts: list[Any] | None = None
    in_layouts: list[Any] | None = None
    # spec HLO shardings per flat input of an AOT-compiled executable: the sharding it takes
    # the input in (None for inputs it does not take); None when not recorded
    in_compiler: list[Any] | None = None

    @property
    def accepted(self) -> bool:
        return self.error is None and self.aot_error is None


# --------------------------------------------------------------------------- building

def _jax():
    import jax
    return jax


def _device(device_id: int):
    for d in _jax().devices():
        if d.id == device_id:
            return d
    raise LookupError(f"JAX has no device {device_id}")


def _value(arg: Any) -> Any:
    """A JAX or numpy value for one described leaf."""
    import numpy as np

    jax = _jax()
    if isinstance(arg, Static):
        return arg.value
    if arg.kind == "scalar":
        return {"bool": True, "int32": 1, "float32": 1.0, "complex64": 1 + 0j}[arg.dtype]
    host = np.ones(arg.shape, dtype=arg.dtype)
    if arg.kind == "numpy":
        return host
    if arg.kind == "abstract":
        sharding = None if arg.sharding is None else to_jax(arg.sharding)
        return jax.ShapeDtypeStruct(arg.shape, arg.dtype, sharding=sharding)
    if arg.kind == "committed":
        return jax.device_put(host, _placement(arg))
    # Uncommitted: JAX places it on its own; on one device, under that device as default.
    ids = arg.sharding.device_list.id_tuple()
    if len(ids) > 1 or arg.layout is not None:
        # No public API makes an uncommitted array on several devices; build one directly.
        # Nor one in another layout than the default (jit makes them only under Layout.AUTO).
        from jax._src.array import ArrayImpl
        placed = jax.device_put(host, _placement(arg))
        return ArrayImpl(placed.aval, placed.sharding, placed._arrays, committed=False)
    (device,) = ids
    with jax.default_device(_device(device)):
        value = jax.numpy.asarray(host)
    if arg.sharding.memory_kind not in (None, "device"):
        raise NotImplementedError("the harness builds uncommitted arrays in device memory only")
    return value


def _placement(arg: Arg) -> Any:
    """What jax.device_put takes to place (and lay out) an array as ``arg`` is."""
    if arg.layout is None:
        return to_jax(arg.sharding)
    return to_jax(Format(arg.layout, arg.sharding))


def spec_layout(layout: Any, rank: int) -> Any:
    """A JAX layout (or None) as the spec writes it: None for the default layout."""
    if layout is None:
        return None
    found = from_jax(layout)
    return None if found == Layout.default(rank) else found


def build_values(tree: Any) -> Any:
    """The JAX values of a tree of the spec's argument descriptions (leaf by leaf)."""
    return map_leaves(_value, tree)


def _shardings_to_jax(tree: Any) -> Any:
    from shardlaw.spec.jit.call import SHARDING_TYPES
    from shardlaw.spec.core.values import PartitionSpec

    return map_leaves(lambda leaf: to_jax(leaf) if isinstance(leaf, (*SHARDING_TYPES,
                                                                     PartitionSpec, Format))
                      or is_layout(leaf) else leaf, tree)


def call_function(call: Call):
    """A function with the call's results that uses exactly the inputs ``call.uses`` marks."""
    jax = _jax()
    jnp = jax.numpy
    static = static_positions(call.options, len(call.args))
    static_names = set(call.options.static_argnames)
    outs = [o for _, o in leaves_with_paths(call.outputs)]

    def fun(*args: Any, **kwargs: Any) -> Any:
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        named = {k: v for k, v in kwargs.items() if k not in static_names}
        flat = jax.tree_util.tree_leaves((dynamic, named))
        uses = call.uses if call.uses is not None else (True,) * len(flat)
        total = jnp.float32(0)
        for used, x in zip(uses, flat):
            if used:
                total = total + jnp.sum(jnp.asarray(x)).real.astype(jnp.float32)
        values = []
        for out in outs:
            if out.source is not None and out.source < len(flat) and \
                    tuple(jnp.shape(flat[out.source])) == out.shape:
                base = jnp.asarray(flat[out.source]).astype(jnp.float32) * 2
            else:
                base = jnp.zeros(out.shape, jnp.float32)
            values.append((base + total).astype(out.dtype))
        return fill(call.outputs, values)

    return fun


def jit_kwargs(call: Call) -> dict[str, Any]:
    """The keyword arguments of ``jax.jit`` for the call's options, as JAX objects."""
    o = call.options
    kwargs: dict[str, Any] = dict(static_argnums=o.static_argnums,
                                  static_argnames=o.static_argnames,
                                  donate_argnums=o.donate_argnums,
                                  donate_argnames=o.donate_argnames, keep_unused=o.keep_unused)
    if o.in_shardings is not UNSPECIFIED:
        kwargs["in_shardings"] = _shardings_to_jax(o.in_shardings)
    if o.out_shardings is not UNSPECIFIED:
        kwargs["out_shardings"] = _shardings_to_jax(o.out_shardings)
    if o.device is not None:
        kwargs["device"] = _device(o.device)
    if o.backend is not None:
        kwargs["backend"] = o.backend
    return kwargs


def mesh_context(call: Call):
    """The ``jax.set_mesh`` (or abstract mesh) block of the call's context mesh, or the
    ``with mesh:`` block of a pjit call (PJIT-1), if any."""
    jax = _jax()
    if call.resource_mesh is not None:
        return _quiet_block(call.resource_mesh)
    mesh = call.context_mesh
    if mesh is None:
        return contextlib.nullcontext()
    if isinstance(mesh, Mesh):
        return jax.set_mesh(to_jax(mesh))
    assert isinstance(mesh, AbstractMesh)
    return jax.sharding.use_abstract_mesh(to_jax(mesh))


@contextlib.contextmanager
def _quiet_block(mesh: Mesh):
    """``with mesh:`` over ``mesh``, its DeprecationWarning (JAX 0.10.2) left unsaid."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with to_jax(mesh):
            yield


def _wrapper(call: Call) -> Any:
    """``jax.jit``, or the deprecated ``pjit`` for a call made inside a ``with mesh:`` block."""
    if call.resource_mesh is None:
        return _jax().jit
    from jax.experimental.pjit import pjit
    return pjit


def default_device_context(call: Call):
    """The ``jax.default_device`` block of the call's default device, if not device 0."""
    if call.default_device == 0:
        return contextlib.nullcontext()
    return _jax().default_device(_device(call.default_device))


# --------------------------------------------------------------------------- running

@contextlib.contextmanager
def watch_compiler(outcome: JaxOutcome):
    """Record the compiler's result shardings before JAX recovers them (the oracle).

    JAX turns the compiler's choice back into NamedShardings after compiling, and that step
    can itself raise; the choice is read where JAX reads it from the executable.
    """
    from jax._src.interpreters import pxla

    original = pxla._maybe_get_and_check_out_shardings

    def watched(xla_executable, out_shardings, device_list, avals, *rest):
        result = original(xla_executable, out_shardings, device_list, avals, *rest)
        if outcome.watching and not outcome.raw:  # the call's own program, not data moves
            outcome.raw = [(s, len(a.shape)) for s, a in zip(result, avals)]
        return result

    pxla._maybe_get_and_check_out_shardings = watched
    try:
        yield
    finally:
        pxla._maybe_get_and_check_out_shardings = original


def run_in_jax(call: Call) -> JaxOutcome:
    """Call real ``jax.jit`` as ``call`` describes and record what happened."""
    with_watch = JaxOutcome()
    hits.record_jax_calls(1)
    with watch_compiler(with_watch):
        outcome = _run_in_jax(call, with_watch)
    return outcome


def _run_in_jax(call: Call, outcome: JaxOutcome) -> JaxOutcome:
    jax = _jax()
    fun = call_function(call)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            outcome.stage = "jit"
            jitted = _wrapper(call)(fun, **jit_kwargs(call))
        except Exception as error:  # noqa: BLE001 - recorded and compared
            outcome.error = error
            return outcome
        # Arguments are made outside the mesh context: under jax.set_mesh, jnp.asarray makes
        # an array committed to the mesh (replicated), not an uncommitted one.
        with default_device_context(call):
            args = build_values(call.args)
            kwargs = build_values(call.kwargs)
            if call.aot_args is not None:
                aot_args = build_values(call.aot_args)
                aot_kwargs = build_values(call.aot_kwargs or {})
        abstract = any(isinstance(a, Arg) and a.kind == "abstract"
                       for _, a in leaves_with_paths((call.args, call.kwargs)))
        with mesh_context(call), default_device_context(call):
            try:
                outcome.stage = "call"
                outcome.watching = True
                if abstract or call.aot_args is not None:
                    compiled = jitted.lower(*args, **kwargs).compile()
                    outs = compiled.output_shardings
                    flat = jax.tree_util.tree_leaves(outs)
                    avals = jax.tree_util.tree_leaves(compiled.out_info)
                    record_shardings(outcome, flat, [tuple(a.shape) for a in avals], None)
                    _record_formats(outcome, compiled, call)
                    outcome.in_compiler = compiled_input_hlo(compiled, call)
                else:
                    result = jitted(*args, **kwargs)
                    flat = jax.tree_util.tree_leaves(result)
                    record_shardings(outcome, [x.sharding for x in flat],
                                     [tuple(x.shape) for x in flat], [x._committed for x in flat])
                    outcome.out_layouts = [spec_layout(x.format.layout, x.ndim) for x in flat]
            except Exception as error:  # noqa: BLE001
                outcome.error = error
                return outcome
            if call.aot_args is not None:
                try:
                    compiled(*aot_args, **aot_kwargs)
                except Exception as error:  # noqa: BLE001
                    outcome.aot_error = error
    return outcome


def _record_formats(outcome: JaxOutcome, compiled: Any, call: Call) -> None:
    """The layouts an AOT-compiled executable takes its inputs in and gives its results in."""
    from jax.experimental.layout import Format as JaxFormat

    jax = _jax()

    def flat(tree: Any) -> list[Any]:
        return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, JaxFormat))

    ranks = [len(s.shape) for s in jax.tree_util.tree_leaves(compiled.out_info)]
    outs = flat(compiled.output_formats)
    outcome.out_layouts = [spec_layout(f.layout, r) for f, r in zip(outs, ranks)]
    in_ranks = [len(arg.shape) for _, arg in call.normal.flat_in]
    ins = flat(compiled.input_formats)
    outcome.in_layouts = [spec_layout(f.layout, r) for f, r in zip(ins, in_ranks)]


def compiled_input_hlo(compiled: Any, call: Call) -> list[Any] | None:
    """The HLO sharding an AOT-compiled executable takes each flat dynamic input in (spec
    values; None for an input it does not take), read from ``compiled.input_shardings``."""
    jax = _jax()
    dynamic = call.normal.flat_in
    taken = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=lambda s: s is None)
    if len(taken) != len(dynamic):
        return None
    return [None if s is None else from_jax(s._to_xla_hlo_sharding(len(arg.shape)))
            for s, (_, arg) in zip(taken, dynamic)]


def record_shardings(outcome: JaxOutcome, shardings: list[Any], shapes: list[tuple[int, ...]],
                     committed: list[bool] | None) -> None:
    """Write the results' shapes, shardings, lowered shardings, memory kinds and device
    assignment JAX gave into ``outcome``."""
    outcome.out_shapes = shapes
    outcome.out_shardings = [from_jax(s) for s in shardings]
    outcome.compiler = [from_jax(s._to_xla_hlo_sharding(len(shape)))
                        for s, shape in zip(shardings, shapes)]
    outcome.memory = [s.memory_kind for s in shardings]
    outcome.out_committed = committed or []
    if shardings:
        outcome.device_assignment = tuple(d.id for d in shardings[0]._device_assignment)


# --------------------------------------------------------------------------- comparing

def error_kind(error: BaseException) -> tuple[str, str]:
    """(the built-in base class name, the class name) of an exception JAX raised."""
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__, type(error).__name__
    return "Exception", type(error).__name__


def same_error_type(verdict: Verdict, error: BaseException) -> bool:
    """Whether JAX's error is an instance of the built-in class the spec's refusal names."""
    expected = getattr(builtins, verdict.error_type or "", None)
    return isinstance(expected, type) and isinstance(error, expected)


def _type_name(s: Any) -> str:
    return type(s).__name__


def traced_facts(call: Call) -> Call:
    """``call`` with what tracing the function in JAX says: the inputs it uses (after JAX's
    dead-code elimination, which also drops inputs whose value cannot matter, such as a sum
    over zero elements) and the abstract mesh on each result's type."""
    from jax._src.interpreters import partial_eval as pe

    jax = _jax()
    o = call.options
    plain = jax.jit(call_function(call), static_argnums=o.static_argnums,
                    static_argnames=o.static_argnames)
    try:
        with warnings.catch_warnings(), mesh_context(call), default_device_context(call):
            warnings.simplefilter("ignore", DeprecationWarning)
            traced = plain.trace(*build_values(call.args), **build_values(call.kwargs))
    except Exception:  # noqa: BLE001 - the spec and the real call will both see the problem
        return call
    jaxpr = traced.jaxpr.jaxpr
    _, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    meshes = [_aval_mesh(a) for a in traced.jaxpr.out_avals]
    outputs = _with_meshes(call.outputs, meshes)
    return dataclasses.replace(call, uses=tuple(bool(u) for u in used), outputs=outputs)


def _aval_mesh(aval: Any) -> Any:
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    if mesh is None or mesh.empty:
        return None
    return from_jax(mesh)


def _with_meshes(tree: Any, meshes: list[Any]) -> Any:
    it = iter(meshes)
    return map_leaves(lambda out: dataclasses.replace(out, mesh=next(it, None)), tree)


def compare_call(call: Call) -> tuple[Verdict, JaxOutcome, list[str]]:
    """Run ``call`` in JAX and in the spec; the verdict, JAX's outcome and the disagreements."""
    # The function is built from the call as given (``uses`` is its recipe); the spec is
    # asked about the call as JAX traced it (the inputs really used, the results' meshes).
    outcome = run_in_jax(call)
    call = traced_facts(call)
    if outcome.raw:
        open_ = [s is UNSPECIFIED for s in flat_out_shardings(call)]
        choices = [from_jax(s._to_xla_hlo_sharding(rank)) for s, rank in outcome.raw]
        kinds = [s.memory_kind for s, _ in outcome.raw]
        call = dataclasses.replace(
            call, compiler=tuple(c if o else None for c, o in zip(choices, open_)),
            compiler_memory=tuple(m if o else None for m, o in zip(kinds, open_)))
    call = with_input_choices(call, outcome.in_compiler)
    call = with_layout_choices(call, outcome)
    verdict = jit_call(call)
    problems: list[str] = []
    error = outcome.error or outcome.aot_error
    if verdict.accepted and error is not None:
        base, name = error_kind(error)
        problems.append(f"spec accepts, JAX raised {name} ({base}): {str(error)[:300]}")
    elif not verdict.accepted and error is None:
        problems.append(f"spec rejects with {verdict.rule} ({verdict.error_type}), JAX accepted: "
                        f"{verdict.message}")
    elif not verdict.accepted and error is not None:
        if not same_error_type(verdict, error):
            base, name = error_kind(error)
            problems.append(f"spec rejects with {verdict.rule} as {verdict.error_type}, JAX raised "
                            f"{name} ({base}): {str(error)[:300]}")
    if verdict.accepted and error is None:
        problems += compare_results(call, verdict, outcome)
    _count(verdict, problems)
    return verdict, outcome, problems


def with_input_choices(call: Call, taken: list[Any] | None) -> Call:
    """``call`` with the compiler's sharding choices (``taken``: per flat dynamic input, as
    :func:`compiled_input_hlo` reads them) for the inputs jit leaves open."""
    if taken is None:
        return call
    open_ = _flat_in_open(call)
    if len(open_) != len(taken) or not any(open_):
        return call
    return dataclasses.replace(call, compiler_in=tuple(
        c if o else None for c, o in zip(taken, open_)))


def _flat_in_open(call: Call) -> list[bool]:
    """Per flat dynamic input, whether jit leaves its sharding open — no in_sharding and an
    argument that is not committed — as far as known without the spec (for the oracle)."""
    from shardlaw.spec.jit.matching import match_in_shardings
    from shardlaw.spec.core.rules import Rejection

    n = call.normal
    dynamic = n.flat_in
    if n.device_or_backend:
        return [False] * len(dynamic)
    if call.kwargs:  # in_shardings meets no keyword arguments (JIT-4)
        given: list[Any] = [UNSPECIFIED] * len(dynamic)
    else:
        try:
            given = match_in_shardings(n.in_tree, n.positional)
        except Rejection:
            return [False] * len(dynamic)
    return [(s is None or s is UNSPECIFIED) and isinstance(arg, Arg) and not arg.is_committed
            for s, (_, arg) in zip(given, dynamic)]


def with_layout_choices(call: Call, outcome: JaxOutcome) -> Call:
    """``call`` with the compiler's layout choices for its Layout.AUTO inputs and results."""
    from shardlaw.spec.jit.layouts import given_layouts
    from shardlaw.spec.core.rules import Rejection

    try:
        n = call.normal
        if n.device_or_backend:
            return call
        ins, outs = given_layouts(n)
    except (Rejection, IndexError, KeyError, TypeError, ValueError):
        return call  # not a prefix: the spec refuses the call before any layout matters
    ins, outs = ([] if call.kwargs else list(ins)), list(outs)
    def choices(given: list[Any], chosen: list[Any] | None, ranks: list[int]) -> Any:
        if AUTO_LAYOUT not in given or chosen is None or len(chosen) != len(given):
            return None
        # The oracle names the default layout outright (None there means "not known").
        return tuple((Layout.default(rank) if layout is None else layout)
                     if wanted is AUTO_LAYOUT else None
                     for wanted, layout, rank in zip(given, chosen, ranks))

    out_ranks = [len(o.shape) for _, o in n.flat_out]
    changes = {"compiler_layouts": choices(outs, outcome.out_layouts, out_ranks),
               "compiler_in_layouts": choices(ins, outcome.in_layouts,
                                              [len(a.shape) for _, a in n.flat_in])}
    changes = {k: v for k, v in changes.items() if v is not None}
    return dataclasses.replace(call, **changes) if changes else call


def flat_out_shardings(call: Call) -> list[Any]:
    """out_shardings per flat result, as far as they are known without the spec (for the oracle)."""
    from shardlaw.spec.jit.matching import match_out_shardings
    from shardlaw.spec.core.pytree import structure
    from shardlaw.spec.core.rules import Rejection

    tree = call.options.out_shardings
    if call.options.device is not None or call.options.backend is not None:
        return ["device"] * len(list(leaves_with_paths(call.outputs)))
    try:
        flat = match_out_shardings(tree, structure(call.outputs))
    except Rejection:
        return [UNSPECIFIED] * len(list(leaves_with_paths(call.outputs)))
    flat = [s.sharding if isinstance(s, Format) else s for s in flat]
    return [UNSPECIFIED if s is None else s for s in flat]


def compare_results(call: Call, verdict: Verdict, outcome: JaxOutcome) -> list[str]:
    """Where the spec's accepting verdict and JAX's outcome differ, one line per difference."""
    problems = []
    if outcome.device_assignment is not None and verdict.device_assignment is not None and \
            tuple(outcome.device_assignment) != tuple(verdict.device_assignment):
        problems.append(f"device assignment: spec {list(verdict.device_assignment)}, "
                        f"JAX {list(outcome.device_assignment)}")
    for i, (path, mine, theirs, shape) in enumerate(zip(
            verdict.out_paths, verdict.out_shardings, outcome.out_shardings, outcome.out_shapes)):
        if mine is UNSPECIFIED:
            problems.append(f"{path}: spec left the result's sharding open, JAX gave {theirs!r}")
            continue
        problems += sharding_differences(path, mine, theirs, shape)
        if mine.memory_kind != theirs.memory_kind:
            problems.append(f"{path}: spec says memory kind {mine.memory_kind!r}, JAX "
                            f"{theirs.memory_kind!r}")
        if outcome.out_committed and verdict.out_committed[i] != outcome.out_committed[i]:
            problems.append(f"{path}: spec says committed={verdict.out_committed[i]}, JAX "
                            f"{outcome.out_committed[i]}")
    problems += _compare_layouts(verdict, outcome)
    return problems


def sharding_differences(path: str, mine: Any, theirs: Any, shape: tuple,
                         jax: str = "JAX") -> list[str]:
    """Where the sharding the spec gives a result and the one ``jax`` (the release, in the
    words of the message: "JAX" for 0.10.2, "jax 0.4.13") gave it differ: the class, then
    the placement of a value of ``shape``, then a NamedSharding's mesh (names and sizes)."""
    if _type_name(mine) != _type_name(theirs):
        return [f"{path}: spec says {_type_name(mine)} {mine!r}, {jax} gave "
                f"{_type_name(theirs)} {theirs!r}"]
    if not placement_equivalent(mine, theirs, shape):
        return [f"{path}: spec places it as {mine!r}, {jax} as {theirs!r}"]
    if isinstance(mine, NamedSharding) and (
            (mine.mesh.axis_names, mine.mesh.axis_sizes) !=
            (theirs.mesh.axis_names, theirs.mesh.axis_sizes)):
        return [f"{path}: spec puts it on mesh {mine.mesh!r}, {jax} on {theirs.mesh!r}"]
    return []


def _compare_layouts(verdict: Verdict, outcome: JaxOutcome) -> list[str]:
    """LAY-2 on every result; LAY-3 on the inputs an AOT-compiled executable takes.

    A verdict without layouts (an older vector) says the default layout everywhere; a
    layout the spec left to the compiler (Layout.AUTO, choice unknown) is not compared."""
    problems = []
    mine_out = verdict.out_layouts or (None,) * len(verdict.out_paths)
    for path, mine, theirs in zip(verdict.out_paths, mine_out, outcome.out_layouts or ()):
        if mine is not AUTO_LAYOUT and mine != theirs:
            problems.append(f"{path}: spec says layout {mine!r}, JAX gave {theirs!r} "
                            "(None: the default)")
    if outcome.in_layouts is not None and len(outcome.in_layouts) == len(verdict.in_paths):
        mine_in = verdict.in_layouts or (None,) * len(verdict.in_paths)
        for i in verdict.kept_inputs:
            mine, theirs = mine_in[i], outcome.in_layouts[i]
            if mine is not AUTO_LAYOUT and mine != theirs:
                problems.append(f"{verdict.in_paths[i]}: spec says the executable takes it in "
                                f"{mine!r}, JAX's takes it in {theirs!r} (None: the default)")
    return problems


def _count(verdict: Verdict, problems: list[str]) -> None:
    if problems:
        return
    for rule_id in verdict.trace:
        hits.record(SOURCE, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)

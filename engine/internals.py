"""Every private JAX name the engine touches, in one module.

The engine lowers and compiles through JAX's public stages (``jax.jit(...).trace``,
``Traced.lower``, ``Lowered.compile``, ``Compiled``). A few things have no public door,
and they are all here, so that a JAX upgrade has one file to check:

* the C++ dispatcher jit itself uses (``_jax.pjit``): a cache hit costs what it costs
  ``jax.jit`` only if the engine hands its executables to the same C++ fast path;
* the facts of a compiled executable that dispatcher needs (the loaded executable, kept
  inputs, input shardings and layouts, hoisted constants);
* dead-code elimination of a traced program (which inputs the program keeps);
* the configuration that takes part in jit's cache key, and the context meshes;
* a sharding's HLO form and ordered device list, and an array made over existing
  per-device buffers with a chosen type and committed flag (zero copy);
* the traceback filter JAX applies to its own frames, applied to the engine's.
"""

from __future__ import annotations

import os
import traceback
import weakref
from typing import Any, Callable, Sequence

from jax._src import api as _api
from jax._src import api_util as _api_util
from jax._src import config as _config
from jax._src import dispatch as _dispatch
from jax._src import core as _core
from jax._src import dtypes as _dtypes
from jax._src import mesh as _mesh
from jax._src import pjit as _pjit
from jax._src import shard_map as _shard_map
from jax._src import sharding_impls as _sharding_impls
from jax._src import stages as _stages
from jax._src import traceback_util as _traceback_util
from jax._src import tree_util as _tree_util
from jax._src import util as _util
from jax._src.array import ArrayImpl
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lax import parallel as _parallel
from jax._src.lib import _jax
from jax._src.lib import jax_jit as _jax_jit

from shardlaw.compiled_hlo import collectives_in_hlo

__all__ = [
    "ArrayImpl", "Tracer", "api_boundary", "GSPMDSharding", "make_dispatcher", "ExecutableFacts",
    "executable_facts", "hoisted_constants", "argument_avals", "used_inputs", "live_body",
    "bodies_of", "trace_context", "context_meshes", "hlo_of",
    "device_list", "array_over", "fastpath_data", "reflatten_for_dispatch",
    "JAX_PJIT", "resource_env_mesh", "use_concrete_mesh", "TracedCall", "traced_calls",
    "shape_of", "JaxTrace", "trace_for_jit",
]

# JAX's own jit and eval_shape, whatever the names ``jax.jit`` and ``jax.eval_shape`` are
# bound to later (install(), or by hand).
JAX_JIT, JAX_EVAL_SHAPE = _api.jit, _api.eval_shape
# JAX's types the engine tells values and errors apart by.
Tracer, ShapedArray, GSPMDSharding = _core.Tracer, _core.ShapedArray, _sharding_impls.GSPMDSharding
# A mutable ref (jax.new_ref).
Ref = _core.Ref
JaxRuntimeError = _jax.JaxRuntimeError
PjitFunctionType = _jax.PjitFunction   # the type of jax.jit's functions (its C++ dispatcher)
# Whether no transformation is tracing now; a function's name as JAX writes it.
trace_state_clean, fun_name = _core.trace_state_clean, _util.fun_name

# An error raised under an API boundary (a jitted call, ``trace``, ``lower``, ...) reaches
# the user with the frames of the registered files filtered out of its traceback, as JAX
# filters its own (``jax_traceback_filtering``): the engine's files are registered too, and
# its entry points are boundaries, so a user sees their own frames, as under jax.jit.
api_boundary = _traceback_util.api_boundary
_traceback_util.register_exclusion(os.path.dirname(os.path.abspath(__file__)))


def make_dispatcher(name: str, fun: Callable, cache_miss: Callable,
                    static_argnums: Sequence[int], static_argnames: Sequence[str],
                    key: Any, boundary: bool = True) -> Any:
    """A C++ dispatcher like ``jax.jit``'s: known signatures run without Python.

    ``cache_miss(*args, **kwargs)`` is called for every signature the dispatcher has not
    seen, and for signatures whose data it was not given; it returns ``(outputs,
    fastpath_data or None, False)``. It is an API boundary, as jax.jit's is, unless
    ``boundary`` is False (the dispatcher is only ever called from a frame that is one
    already, and a second would only deepen the stack). As with ``jax.jit``, signatures are held in a
    process-wide cache keyed by the function and ``key`` (everything in jit's options that
    decides a call), so ``jit(f, **options)`` made twice shares them; the cache set with
    ``jax.config.jax_jit_cpp_cache_obj`` is used instead where JAX would use it.
    """
    if boundary:
        cache_miss = api_boundary(cache_miss)
    try:
        weakref.ref(fun)
    except TypeError:
        # The C++ cache keys by a weak reference to the function: one that cannot be
        # weakly referenced gets a cache (and key) of its own, shared with nothing.
        return _jax.pjit(name, None, cache_miss, list(static_argnums), list(static_argnames),
                         _DispatcherKey(), _tree_util.dispatch_registry, _pxla.cc_shard_arg,
                         _jax.PjitFunctionCache(capacity=_SIGNATURES))
    try:
        hash(key)
    except TypeError:
        key = _DispatcherKey()
    given = _config.jax_jit_cpp_cache_obj.value
    cache = given if given is not None and _core.trace_state_clean() else _SHARED_SIGNATURES
    return _jax.pjit(name, fun, cache_miss, list(static_argnums), list(static_argnames),
                     key, _tree_util.dispatch_registry, _pxla.cc_shard_arg, cache)


def clear_signatures(dispatcher: Any) -> None:
    """Drop the signatures a C++ dispatcher holds for its function (its own ``_clear_cache``,
    which an engine function of the dispatcher's type has in place of the engine's)."""
    _jax.PjitFunction._clear_cache(dispatcher)


_SIGNATURES = 4096
# The engine's signatures, for all its functions (JAX keeps its own apart, so a function
# jitted both ways never meets the other's entries).
_SHARED_SIGNATURES = _jax.PjitFunctionCache(capacity=2 * _SIGNATURES)


class _DispatcherKey:
    """A key unique to one dispatcher (hashed by identity)."""

    __slots__ = ("__weakref__",)


class ExecutableFacts:
    """What the dispatcher and the engine need to know about one compiled executable."""

    __slots__ = ("compiled", "xla_executable", "in_shardings", "out_shardings", "kept",
                 "num_consts", "const_args", "layouts", "in_avals", "out_avals", "fast",
                 "out_tree", "_collectives")

    def __init__(self, compiled: Any) -> None:
        exe = compiled._executable
        params = compiled._params
        self.compiled = compiled
        self.xla_executable = getattr(exe, "xla_executable", None)
        self.num_consts = len(params.const_args)
        self.kept = frozenset(getattr(exe, "_kept_var_idx", ()))
        self.in_shardings = list(getattr(exe, "_in_shardings", ()))
        self.out_shardings = list(getattr(exe, "_out_shardings", ()))
        self.layouts = getattr(exe, "_dispatch_in_layouts", None)
        self.in_avals = list(getattr(exe, "in_avals", ()))
        self.out_avals = list(getattr(exe, "out_avals", ()))
        self.out_tree = params.out_tree
        call = getattr(exe, "unsafe_call", None)
        self.fast = bool(
            isinstance(exe, _pxla.MeshExecutable)
            and isinstance(call, _pxla.ExecuteReplicated)
            and not call.ordered_effects and not call.has_unordered_effects
            and not call.has_host_callbacks and not getattr(exe, "_mut", None)
            and not params.is_high)
        self.const_args = exe.shard_const_args(params.const_args) if self.fast else ()
        self._collectives: tuple | None = None

    def collectives(self) -> tuple:
        """The collectives of the executable's compiled HLO (read once, when first asked)."""
        if self._collectives is None:
            self._collectives = tuple(collectives_in_hlo(self.compiled.as_text()))
        return self._collectives

    def kept_flat(self, count: int) -> list[bool]:
        """For each flat dynamic input, whether the executable takes it."""
        return [i + self.num_consts in self.kept for i in range(count)]

    def input_sharding(self, flat_index: int) -> Any:
        """The executable's sharding for flat dynamic input ``flat_index`` (None: dropped)."""
        position = flat_index + self.num_consts
        if position not in self.kept:
            return None
        return self.in_shardings[sorted(self.kept).index(position)]

    def input_aval(self, flat_index: int) -> Any:
        position = flat_index + self.num_consts
        return self.in_avals[sorted(self.kept).index(position)]


def executable_facts(compiled: Any) -> ExecutableFacts:
    return ExecutableFacts(compiled)


def reflatten_for_dispatch(out_tree: Any, out_flat: Sequence[Any]) -> tuple[list, Any]:
    return _pxla.reflatten_outputs_for_dispatch(out_tree, list(out_flat))


def fastpath_data(facts: ExecutableFacts, out_tree: Any, outputs: Sequence[Any],
                  num_inputs: int) -> Any:
    """What the dispatcher needs to run one signature without Python.

    Each result is labelled with the sharding of the result itself, as jax.jit labels its
    fast path's (the executable's out shardings): a PRNG key array's, not its physical
    array's, so that ``jax.random.key_data`` of a key the dispatcher returns carries the
    key's spec (``P(None, 'y', 'x')``, not ``P(None, 'y', 'x', None)``).
    """
    flat, dispatch_tree = reflatten_for_dispatch(out_tree, outputs)
    if not all(type(x) is ArrayImpl for x in flat):
        return None
    in_shardings = [
        _sharding_impls.physical_sharding(a, s)
        if a is not _core.abstract_token and _dtypes.issubdtype(a.dtype, _dtypes.extended)
        else s
        for s, a in zip(facts.in_shardings, facts.in_avals)]
    kept = [i in facts.kept for i in range(facts.num_consts + num_inputs)]
    return _pxla.MeshExecutableFastpathData(
        facts.xla_executable, dispatch_tree, in_shardings,
        [x.sharding for x in outputs], [x.aval for x in flat], [x._committed for x in flat],
        kept, facts.layouts, list(facts.const_args))


def hoisted_constants(traced: Any) -> list[Any]:
    """The closed-over values JAX's trace made the program's first inputs.

    JAX hoists every closed-over value into the program's inputs, ahead of the call's own
    arguments, when one of them is mutable with a type of its own (a hijax ``Box``, a
    flax NNX Variable made with ``hijax=True``); otherwise there are none.
    """
    return list(getattr(traced, "_consts", ()))


def argument_avals(traced: Any) -> list[Any]:
    """The abstract values of the call's own flat arguments in a traced program (the
    hoisted constants that come first left out)."""
    return list(traced.jaxpr.in_avals)[len(hoisted_constants(traced)):]


def used_inputs(traced: Any) -> list[bool] | None:
    """Which of the call's own flat arguments a traced program's results depend on (JAX's
    dead-code elimination; the hoisted constants left out)."""
    jaxpr = traced.jaxpr.jaxpr
    try:
        _, used = _pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    except Exception:  # noqa: BLE001 - then every input counts as used
        return None
    return [bool(u) for u in used][len(hoisted_constants(traced)):]


def live_body(jaxpr: Any) -> Any:
    """What lowering keeps of a traced body: JAX's dead-code elimination with every result
    used (the equations it keeps are the body's own, in order, their results the same
    variables; an inner jit's or shard_map's body is eliminated in turn)."""
    return _pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))[0]


def hoists_constants() -> bool:
    """Whether JAX hoists closed-over constants as arguments of the compiled program (the
    simplified-constants flag on now, and lowering's default read when JAX was imported)."""
    from jax._src.interpreters import mlir
    return bool(_config.use_simplified_jaxpr_constants.value
                and mlir.LoweringParameters().hoist_constants_as_args)


def hoistable(literal: Any) -> bool:
    """Whether JAX hoists this literal of a body: an array of rank 1 or more, larger than
    the constants it embeds (jax_embedded_constants_max_bytes)."""
    return type(literal) is _core.Literal and _core.is_hoistable(literal)


Literal = _core.Literal


def bodies_of(equation: Any) -> list[Any]:
    """The bodies an equation holds in its parameters (an inner jit's, a shard_map's, a
    scan's, a cond's branches...), in the order JAX walks them."""
    return list(_core.jaxprs_in_params(equation.params))


# JAX's tracing of a jitted function's call: called by the engine from the frame that
# decides the call (see JaxTrace), never through a function of the engine's own.
trace_for_jit = _pjit._trace_for_jit


class JaxTrace:
    """JAX's own trace of one call of its jitted function ``jitted``, in two halves around
    the one call of :data:`trace_for_jit` that the caller makes itself.

    ``jitted.trace(...)`` reaches JAX's tracing three frames down (its API boundary, its
    trace, its parameter inference); the engine decides a new signature a few frames below
    the dispatcher's miss already, and so would trace the function deeper in the stack than
    jax.jit does (JAX's own test counts the frames). Taken here, the caller's frame calls
    JAX's tracing directly. ``params`` is JAX's trace of the same signature kept from
    before (None: there is none, and ``call`` is what :data:`trace_for_jit` takes);
    :meth:`traced` gives the ``jax.stages.Traced`` of the call, keeping a new trace where
    JAX's jit keeps its own, so that JAX's jit of the function meets it again.
    """

    __slots__ = ("params", "call", "_entry", "_dynamic", "_fun")

    def __init__(self, jitted: Any, args: tuple, kwargs: dict) -> None:
        fun, info = jitted._fun, jitted._jit_info
        self._fun = fun
        mesh = _pjit.get_ctx_mesh(info.use_resource_env)
        signature, self._dynamic = _jax_jit.parse_arguments(
            args, tuple(kwargs.values()), tuple(kwargs), info.static_argnums,
            info.static_argnames, _tree_util.tracing_registry)

        def described() -> Any:
            return _api_util.debug_info(
                "jit", fun, args, kwargs, static_argnums=info.static_argnums,
                static_argnames=info.static_argnames, sourceinfo=info.fun_sourceinfo,
                signature=info.fun_signature)

        avals = _pjit._infer_input_type(fun, described, self._dynamic)
        self._entry = _pjit._infer_params_cached(fun, info, signature, avals, mesh)
        self.params = self._entry.pjit_params
        self.call = None if self.params is not None else (
            fun, info, mesh, described(), avals, args, kwargs)

    def _kept(self, params: Any) -> Any:
        if params is not self.params and not params.params["jaxpr"].jaxpr.is_high:
            self._entry.pjit_params = params
        return params

    def traced(self, params: Any) -> Any:
        """The call's ``Traced``, of ``params``: what :data:`trace_for_jit` returned, or
        the trace kept from before."""
        params = self._kept(params)
        flat = [*params.consts, *self._dynamic]
        return _stages.Traced([_pjit.convert_to_metaty(x) for x in flat], params.params,
                              params.in_tree, params.out_tree, params.consts)

    def bound(self, params: Any, args: tuple, kwargs: dict) -> Any:
        """The call's results, the jit primitive of ``params`` bound in the trace running
        now (a call inside another transformation), as JAX's jit binds it."""
        params = self._kept(params)
        return _pjit._run_python_pjit(params, [*params.consts, *self._dynamic], self._fun,
                                      args, kwargs)[0]


def trace_context() -> tuple:
    """The configuration that takes part in jit's cache key (x64, default device, ...)."""
    return _config.trace_context()


# What decides where a program runs, not what it computes: the device assignment (in the
# executable key) covers it.
_PLACEMENT_ONLY = {"jax_default_device", "mesh_context_manager", "abstract_mesh_context_manager"}


def program_context() -> tuple:
    """The configuration that can change the compiled program (jit's key, less placement)."""
    values = _config.trace_context()
    try:
        names = _config.trace_context_names()
    except NotImplementedError:
        return values
    return tuple(v for n, v in zip(names, values) if n not in _PLACEMENT_ONLY)


def program_text(closed_jaxpr: Any) -> str:
    """A traced program's text: equal for two traces that compute the same thing."""
    return str(closed_jaxpr)


def default_device() -> Any:
    return _config.default_device.value


# pjit (``jax._src.pjit.pjit``, which ``jax.experimental.pjit.pjit`` hands out), the mesh of
# the legacy ``with mesh:`` block it reads, and the concrete-mesh context it traces under.
JAX_PJIT = _pjit.pjit
use_concrete_mesh = _sharding_impls._internal_use_concrete_mesh


def resource_env_mesh() -> Any:
    """The mesh of the innermost ``with mesh:`` block (an empty mesh outside any)."""
    return _mesh.thread_resources.env.physical_mesh


def context_meshes() -> tuple[Any, Any]:
    """(the concrete mesh set with ``jax.set_mesh`` or None, the abstract context mesh or None)."""
    concrete = _mesh.get_concrete_mesh()
    abstract = _mesh.get_abstract_mesh()
    return (None if concrete is None or concrete.empty else concrete,
            None if abstract is None or abstract.empty else abstract)


def hlo_of(sharding: Any, ndim: int) -> Any:
    """The HLO sharding ``sharding`` lowers to for a value of rank ``ndim``."""
    return sharding._to_xla_hlo_sharding(ndim)


def device_list(sharding: Any) -> tuple:
    """The sharding's devices in order (the order jit compares)."""
    return sharding._device_assignment


def addressable_devices(sharding: Any) -> tuple:
    """The sharding's devices this process holds, in the order of its per-device arrays."""
    return tuple(sharding._addressable_device_assignment)


def array_over(shape_aval: Any, sharding: Any, buffers: Sequence[Any],
               committed: bool) -> Any:
    """An array over existing single-device arrays (zero copy), with a chosen type and flag."""
    # JAX itself labels zero-size results with shard shapes their buffers do not have
    # (the engine makes those results anew afterwards: jit._empty_result); skip the check.
    empty = any(n == 0 for n in shape_aval.shape)
    return ArrayImpl(shape_aval, sharding, list(buffers), committed=committed,
                     _skip_checks=empty)


def single_device_arrays(array: Any) -> list[Any]:
    """The array's per-device arrays, in the order of its sharding's device list."""
    return list(array._arrays)


def is_extended(dtype: Any) -> bool:
    return _dtypes.issubdtype(dtype, _dtypes.extended)


class _ClearedWithJax:
    """Something ``jax.clear_caches()`` clears (JAX calls ``cache_clear`` on what it registers)."""

    def __init__(self, clear: Callable[[], None]) -> None:
        self.cache_clear = clear


_cleared_with_jax: list[_ClearedWithJax] = []   # JAX holds them weakly: keep them alive here


def clear_with_jax(clear: Callable[[], None], what: str) -> None:
    """Have ``jax.clear_caches()`` call ``clear`` too."""
    holder = _ClearedWithJax(clear)
    _cleared_with_jax.append(holder)
    _util.register_cache(holder, what)


def note_aot_python_call() -> None:
    """Tell JAX's test hooks an ahead-of-time compiled call took the Python path, as JAX's
    ``Compiled`` does on its first call (later ones run in C++ there)."""
    _util.test_event("stages_compiled_call")


def note_python_dispatch() -> None:
    """Tell JAX's test hooks a jitted call ran outside the C++ fast path, as jax.jit's do."""
    _util.test_event("jit_cpp_cache_miss")


def wraps(fun: Any, jitted: Any) -> None:
    """Give ``jitted`` the name, docstring and ``__wrapped__`` jax.jit gives its functions."""
    _util.wraps(fun)(jitted)


def typed_sharding(aval: Any) -> Any:
    """The sharding an abstract value's type carries over a mesh with axes, else None."""
    typed = getattr(aval, "sharding", None)
    mesh = getattr(typed, "mesh", None)
    return None if mesh is None or mesh.empty else typed


def execute(facts: "ExecutableFacts", flat_args: Sequence[Any], in_tree: Any) -> tuple[list, Any]:
    """Run an executable on flat arguments, as jit runs its own (no AOT argument checks).

    Returns the flat results and their tree. Programs with mutable or high-level types go
    through JAX's ``Compiled`` call, which knows how to unpack them.
    """
    params = facts.compiled._params
    if params.is_high:
        args, kwargs = _tree_util.tree_unflatten(in_tree, list(flat_args))
        out = facts.compiled(*args, **kwargs)
        return _tree_util.tree_flatten(out)
    out_flat = facts.compiled._executable.unsafe_call(*params.const_args, *flat_args)
    return list(out_flat), params.out_tree


def check_no_escaped_tracers(traced: Any) -> None:
    """Refuse, as jit does, a traced program that closes over a tracer from another trace.

    Such a tracer leaked out of an earlier transformation (a side effect of a traced
    function); JAX's own jit finds it among the hoisted constants before it runs.
    """
    for const in hoisted_constants(traced):
        if isinstance(const, _core.Tracer):
            raise _core.escaped_tracer_error(const)


def jax_takes(value: Any, for_call: bool) -> bool:
    """Whether JAX can type ``value`` as an argument (and, ``for_call``, whether jit takes
    it in a call: ``ShapeDtypeStruct`` and the like only lower)."""
    try:
        _core.shaped_abstractify(value)
        if for_call:
            _dispatch.check_arg(value)
    except (TypeError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------- trace refusals

# The frames of JAX's code that locate a call it refused while tracing a jit's body: by
# file and function, what the call is (its own checks), or the nesting it opens.
_PJIT_FILE, _API_FILE = _pjit.__file__, _api.__file__
_PE_FILE = _pe.__file__
_SMAP_FILE, _PARALLEL_FILE = _shard_map.__file__, _parallel.__file__
_CALLS = {
    (_PJIT_FILE, "with_sharding_constraint"): "constraint",
    (_API_FILE, "device_put"): "device_put",
    (_PJIT_FILE, "reshard"): "reshard",
    (_PJIT_FILE, "_process_in_axis_resources"): "jit_in",
    (_PJIT_FILE, "_check_and_canonicalize_out_shardings"): "jit_out",
    (_SMAP_FILE, "_check_specs"): "shard_map_specs",
    (_SMAP_FILE, "_check_specs_vs_args"): "shard_map_args",
}
_NESTINGS = {(_PJIT_FILE, "_infer_params"): "jit", (_SMAP_FILE, "_shard_map_staging"): "shard_map"}
_COLLECTIVES = frozenset({"psum", "pmax", "pmin", "pmean", "all_gather", "psum_scatter",
                          "all_to_all", "ppermute", "pshuffle", "axis_index", "pvary",
                          "psum_invariant", "all_gather_invariant"})
# the operands each call's frame holds, to tell a call of this trace from one under a
# transformation inside the body (vmap, grad), whose tracers are another trace's
_OPERANDS = ("x_flat", "x", "xs", "args")


class TracedCall:
    """Where JAX refused while tracing: ``kind`` (a key of the engine's checks), ``frame``
    (the locals of JAX's frame that checked the call), ``prefix`` (``body[0].jit.``) and
    ``index`` (the equation the call would have been in its body), ``shard_map`` (mesh,
    manual axes, check_vma) of the innermost shard_map it is inside, or None."""

    __slots__ = ("kind", "frame", "prefix", "index", "shard_map", "raised_in")

    def __init__(self, kind: str, frame: dict, prefix: str, index: int,
                 shard_map: Any, raised_in: frozenset = frozenset()) -> None:
        self.kind, self.frame, self.prefix, self.index = kind, frame, prefix, index
        self.shard_map = shard_map
        # the names of JAX's functions the error was raised through, under the call's
        self.raised_in = raised_in


def _equations_so_far(trace: Any) -> int:
    return len(trace.frame.tracing_eqns)


def _of_trace(values: Any, trace: Any) -> bool:
    """Whether every tracer among ``values`` (a value, or a sequence of them) is ``trace``'s."""
    seq = values if isinstance(values, (list, tuple)) else (values,)
    return all(getattr(v, "_trace", trace) is trace for v in seq if isinstance(v, Tracer))


def traced_calls(tb: Any) -> TracedCall | None:
    """The call JAX was tracing in a jit's body when it raised, read off the frames of the
    traceback ``tb``; None where it cannot be located (a body nested in anything but a jit
    or a shard_map, a call under another transformation inside the body)."""
    frames = [frame for frame, _ in traceback.walk_tb(tb)]
    starts = [i for i, f in enumerate(frames) if _key(f) == (_PE_FILE, "trace_to_jaxpr")]
    if not starts:
        return None
    trace = frames[starts[0]].f_locals.get("trace")
    prefix, pending, inside, found, below = "", None, None, None, []
    for frame in frames[starts[0] + 1:]:
        key = _key(frame)
        if key == (_PE_FILE, "trace_to_jaxpr"):
            if pending is None or trace is None:
                return None
            kind, marker = pending
            prefix += f"body[{_equations_so_far(trace)}].{kind}."
            if kind == "shard_map":
                outer = inside[1] if inside else frozenset()
                inside = (marker["mesh"], frozenset(marker["newly_manual_axes"]) | outer,
                          bool(marker["check_vma"]))
            trace, pending, found = frame.f_locals.get("trace"), None, None
        elif key in _NESTINGS:
            pending = (_NESTINGS[key], frame.f_locals)
        elif found is None and key in _CALLS:
            found, below = (_CALLS[key], frame.f_locals), []
        elif found is None and key[0] == _PARALLEL_FILE and key[1] in _COLLECTIVES:
            found, below = ("collective", frame.f_locals), []
        elif found is not None:
            below.append(key[1])
    if found is None or trace is None:
        return None
    kind, local = found
    operands = [local[name] for name in _OPERANDS if name in local]
    if kind in ("jit_in", "jit_out") and pending is not None:
        operands = [pending[1].get("args", ())]
    if not all(_of_trace(v, trace) for v in operands):
        return None
    return TracedCall(kind, dict(local), prefix, _equations_so_far(trace), inside,
                      frozenset(below))


def _key(frame: Any) -> tuple[str, str]:
    return frame.f_code.co_filename, frame.f_code.co_name


def shape_of(value: Any) -> tuple:
    """The shape JAX types ``value`` with."""
    return tuple(_core.shaped_abstractify(value).shape)

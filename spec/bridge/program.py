"""A user's function read into a :class:`~shardlaw.spec.program.description.Program`.

:func:`describe_program` traces the function as written with ``jax.make_jaxpr`` and reads
the closed jaxpr: its arguments (with their shardings and committedness), the constants it
closed over, and each equation — ``jit`` (its parameters ``jaxpr``, ``in_shardings``,
``out_shardings``, ``donated_invars``, ``keep_unused``, ``ctx_mesh``),
``sharding_constraint`` (``sharding``, ``unconstrained_dims``), ``device_put``
(``devices``), ``shard_map`` (``mesh``, ``in_specs``, ``out_specs``,
``newly_manual_axes``, ``check_vma``, its body), ``reshard`` (``dst_sharding``) and the
control flow, remat and custom-derivative calls (``scan``, ``while``, ``cond``,
``remat2``, ``custom_jvp_call``, ``custom_vjp_call``: their bodies read once each,
:mod:`shardlaw.spec.bridge.control_flow`); any other primitive is read as an opaque
equation with its parameters and result types. A
function whose trace is one ``jit`` equation over its arguments is that jit call; any
other function is read as ``jax.jit(f)``. Nothing is lowered, compiled or run.

What ``jax.vmap`` returned (nested vmaps, or ``jax.jit`` of them) is not read from JAX's
trace of the batched function: the function vmapped is described on one example and the
spec applies the vmaps (:func:`describe_vmapped`), as the spec applies every
transformation a user asks for; :func:`describe_trace` reads any function's trace as it is.

A traced value's type is read with its split over Explicit axes (``aval.sharding.spec``,
reduced and unreduced axes included). What is not described yet is refused with a
TypeError that says what: layouts, memory spaces other than the device's, literal
operands of the described kinds, and other primitives whose bodies place values
(``custom_vmap_call`` ...).
"""

from __future__ import annotations

from typing import Any

from ..core.shardings import UNSPECIFIED
from ..program.description import (
    DESCRIBED_PRIMITIVES,
    Const, DevicePut, Jit, Opaque, Program, Reshard, ShardingConstraint, ShardMap, Value,
)
from .control_flow import CONTROL_FLOW_PRIMITIVES, control_flow_equation
from .convert import layout_from_jax, from_jax

__all__ = ["describe_program", "describe_trace", "input_paths", "read_type", "read_sharding",
           "read_target", "read_param", "read_jaxpr"]


def _jax() -> Any:
    import jax
    return jax


class _Unreadable(TypeError):
    """What the bridge cannot describe yet (a TypeError, as describe_call's)."""


# --------------------------------------------------------------------------- values

def _argument(value: Any) -> Value:
    """The Value for one argument leaf a user passes."""
    import numpy as np

    jax = _jax()
    if type(value) in (bool, int, float, complex):
        return Value.scalar(type(value).__name__)
    if isinstance(value, jax.Ref):
        return _held_by_ref(value)
    if isinstance(value, jax.Array):
        layout = layout_from_jax(getattr(getattr(value, "format", None), "layout", None))
        if layout is not None and not layout.is_default:
            raise _Unreadable(f"describe_program reads arrays in the default layout; got "
                              f"{layout!r}")
        # an array keeps its weak type (jax.jit(lambda: 1.0)() is ~float32[])
        return Value(tuple(value.shape), str(value.dtype), bool(getattr(
            value, "weak_type", False)), sharding=from_jax(value.sharding),
            committed=_committed(value))
    if isinstance(value, (np.ndarray, np.generic)):
        return Value.numpy(tuple(np.shape(value)), str(value.dtype))
    if isinstance(value, jax.ShapeDtypeStruct):
        sharding = getattr(value, "sharding", None)
        return Value.shape_dtype(tuple(value.shape), str(value.dtype),
                                 None if sharding is None else from_jax(sharding))
    raise _Unreadable(f"describe_program reads jax.Array, jax.ShapeDtypeStruct, numpy arrays "
                      f"and Python scalars as arguments; got {type(value).__qualname__}: "
                      f"{value!r}")


def _committed(value: Any) -> bool:
    """Whether an array is committed (a typed key array answers for its key data)."""
    if hasattr(value, "_committed"):
        return bool(value._committed)
    return bool(value._base_array._committed)


def value_type_of(aval: Any, what: str) -> Value:
    """The Value for a traced value's type."""
    from jax._src import core
    from jax._src.state.types import AbstractRef

    if isinstance(aval, AbstractRef):   # a ref's value, as a jit body takes a ref (REF-1)
        aval = aval.inner_aval
    if not isinstance(aval, core.ShapedArray):
        raise _Unreadable(f"describe_program reads arrays; {what} is a {aval!r}")
    if aval.memory_space != core.MemorySpace.Device:
        raise _Unreadable(f"describe_program reads values in device memory; {what} is in "
                          f"{aval.memory_space}")
    if aval.manual_axis_type.unreduced:   # (SMAP-19's unreduced manual axes: not typed yet)
        raise _Unreadable(f"describe_program does not describe values unreduced along a "
                          f"shard_map's manual axes yet; {what} is {aval.str_short(True)}")
    sharding = aval.sharding
    mesh = None if sharding.mesh.empty else from_jax(sharding.mesh)
    # the split over Explicit axes, reduced and unreduced axes included (a spec with
    # reduced axes is read entry by entry: iterating it raises)
    spec = from_jax(sharding.spec) if mesh is not None else None
    return Value(tuple(aval.shape), str(aval.dtype), bool(aval.weak_type), mesh,
                 aval.manual_axis_type.varying, spec=spec,
                 reduced=aval.manual_axis_type.reduced)


def _held_by_ref(ref: Any) -> Value:
    """The value a mutable ref holds: on its sharding, always committed (REF-1)."""
    return Value.placed(tuple(ref.shape), from_jax(ref.sharding), str(ref.dtype))


def _const(value: Any, var: Any) -> Const:
    """A closed-over constant (a mutable ref when its type is a ref)."""
    import numpy as np
    from jax._src.state.types import AbstractRef

    ref = isinstance(var.aval, AbstractRef)
    jax = _jax()
    if isinstance(value, jax.Ref):
        return Const(_held_by_ref(value), True)
    if isinstance(value, jax.Array):
        placed = Value.placed(tuple(value.shape), from_jax(value.sharding), str(value.dtype),
                              committed=_committed(value))
        return Const(placed, ref)
    if isinstance(value, (np.ndarray, np.generic)):
        return Const(Value.numpy(tuple(np.shape(value)), str(value.dtype)), ref)
    return Const(value_type_of(var.aval, "a closed-over constant"), ref)


# --------------------------------------------------------------------------- parameters

def _sharding(s: Any, what: str) -> Any:
    from jax._src.named_sharding import UnspecifiedValue

    if isinstance(s, UnspecifiedValue):
        return UNSPECIFIED
    try:
        return from_jax(s)
    except TypeError:
        raise _Unreadable(f"describe_program reads shardings; {what} is {s!r}") from None


def _param(value: Any) -> Any:
    """A parameter value as a plain value: tuples and frozensets kept, numpy's scalars as
    Python's, JAX's sharding values read, anything else (a dtype, an enum) by its text."""
    import numpy as np
    jax = _jax()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.bool_):   # numpy's scalars (a library's np.int64 dimension) by value
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if type(value) in (tuple, list):
        return tuple(_param(v) for v in value)
    if type(value) in (frozenset, set):
        return frozenset(_param(v) for v in value)
    if isinstance(value, (jax.sharding.PartitionSpec, jax.sharding.Mesh,
                          jax.sharding.AbstractMesh, jax.sharding.Sharding)):
        return from_jax(value)
    return str(value)


def _no_layouts(params: dict, what: str) -> None:
    for name in ("in_layouts", "out_layouts", "layout"):
        given = params.get(name)
        if given is not None and any(x is not None for x in
                                     (given if isinstance(given, tuple) else (given,))):
            raise _Unreadable(f"describe_program does not describe layouts yet; {what} has "
                              f"{name}={given!r}")


# --------------------------------------------------------------------------- bodies

class _Numbers:
    """The number of each variable of a body, in the order the description numbers them."""

    def __init__(self) -> None:
        self.of: dict[Any, int] = {}

    def define(self, var: Any) -> None:
        self.of[var] = len(self.of)

    def operands(self, eqn: Any, opaque: bool) -> tuple[int, ...]:
        from jax._src import core

        numbers = []
        for v in eqn.invars:
            if isinstance(v, core.Literal):
                if opaque and id(v) not in self.of:
                    continue  # a literal operand of another primitive is not described
                numbers.append(self.of[id(v)])  # numbered as a constant (_literals)
                continue
            numbers.append(self.of[v])
        return tuple(numbers)


def _literals(jaxpr: Any, numbers: _Numbers) -> tuple[Const, ...]:
    """The literal operands of the body's described equations (a constraint's, a
    device_put's, a reshard's, a jit's or a shard_map's: ``reshard 1.0`` seeds a gradient),
    each read as a closed-over numpy constant of its type, numbered after the constants."""
    from jax._src import core

    import numpy as np

    found = []
    hoisting = _hoisting()
    # a literal result (``lambda x: 1.0``) is read as a constant the body returns, as JAX
    # returns it
    uses = [(eqn.primitive.name in DESCRIBED_PRIMITIVES, eqn.invars) for eqn in jaxpr.eqns]
    for described, invars in [*uses, (True, jaxpr.outvars)]:
        for v in invars:
            # with constants simplified, a closed-over array is a literal wherever it is
            # used: read as a constant, which CONST-1 hoists or leaves embedded
            hoisted = hoisting and isinstance(v, core.Literal) and np.ndim(v.val) > 0
            if isinstance(v, core.Literal) and id(v) not in numbers.of and (
                    described or hoisted):
                numbers.of[id(v)] = len(numbers.of)
                aval = v.aval
                found.append(_const(v.val, v) if hoisted else Const(Value(
                    tuple(aval.shape), str(aval.dtype), bool(aval.weak_type) and
                    aval.shape == ())))
    return tuple(found)


def _body(jaxpr: Any, consts: list, inputs: tuple[Value, ...], where: str,
          lifted: tuple = (), **options: Any) -> Program:
    """The Program for a jaxpr (open or closed) with these input values and jit options;
    ``lifted``: the values of its last inputs, closed-over refs the trace passes to the jit
    as operands, read as constants."""
    numbers = _Numbers()
    for v in [*jaxpr.invars, *jaxpr.constvars]:
        numbers.define(v)
    refs = jaxpr.invars[len(jaxpr.invars) - len(lifted):]
    constants = tuple(_const(c, v) for c, v in zip([*lifted, *consts],
                                                   [*refs, *jaxpr.constvars]))
    constants += _literals(jaxpr, numbers)
    equations = []
    for k, eqn in enumerate(jaxpr.eqns):
        equations.append(_equation(eqn, numbers, f"{where}body[{k}]"))
        for v in eqn.outvars:
            numbers.define(v)
    from jax._src import core

    outputs = [numbers.of[id(v) if isinstance(v, core.Literal) else v] for v in jaxpr.outvars]
    return Program(inputs, tuple(equations), tuple(outputs), constants, **options)


def _jit_options(params: dict, where: str) -> dict:
    ctx = params.get("ctx_mesh")
    return dict(
        in_shardings=tuple(_sharding(s, f"in_shardings of {where}")
                           for s in params["in_shardings"]),
        out_shardings=tuple(_sharding(s, f"out_shardings of {where}")
                            for s in params["out_shardings"]),
        donated=tuple(bool(d) for d in params["donated_invars"]),
        keep_unused=bool(params["keep_unused"]),
        context_mesh=None if ctx is None or ctx.empty else from_jax(ctx))


def _results(eqn: Any, where: str) -> tuple[Value, ...]:
    return tuple(value_type_of(v.aval, f"result {i} of {where}") for i, v in enumerate(eqn.outvars))


def _equation(eqn: Any, numbers: _Numbers, where: str) -> Any:
    """The equation for one jaxpr equation."""
    from jax._src import core

    name, params = eqn.primitive.name, eqn.params
    results = _results(eqn, where)
    if name in ("jit", "pjit"):
        _no_layouts(params, where)
        closed = params["jaxpr"]
        inputs = tuple(value_type_of(v.aval, f"input {i} of {where}")
                       for i, v in enumerate(closed.jaxpr.invars))
        body = _body(closed.jaxpr, list(closed.consts), inputs, f"{where}.jit.",
                     **_jit_options(params, where))
        return Jit(numbers.operands(eqn, False), results, body=body, name=str(params["name"]))
    if name == "sharding_constraint":
        _no_layouts(params, where)
        return ShardingConstraint(numbers.operands(eqn, False), results,
                                  sharding=_sharding(params["sharding"], where),
                                  unconstrained_dims=frozenset(params["unconstrained_dims"]))
    if name == "device_put":
        return DevicePut(numbers.operands(eqn, False), results,
                         targets=tuple(_target(d, where) for d in params["devices"]))
    if name == "shard_map":
        jaxpr = params["jaxpr"]
        inputs = tuple(value_type_of(v.aval, f"input {i} of {where}")
                       for i, v in enumerate(jaxpr.invars))
        body = _body(jaxpr, [], inputs, f"{where}.shard_map.")
        return ShardMap(numbers.operands(eqn, False), results, body=body,
                        mesh=from_jax(params["mesh"]),
                        in_specs=tuple(from_jax(s) for s in params["in_specs"]),
                        out_specs=tuple(from_jax(s) for s in params["out_specs"]),
                        manual_axes=frozenset(params["newly_manual_axes"]),
                        check_vma=bool(params["check_vma"]))
    if name == "reshard":
        return Reshard(numbers.operands(eqn, False), results,
                       sharding=_sharding(params["dst_sharding"], where))
    if name in CONTROL_FLOW_PRIMITIVES:
        return control_flow_equation(eqn, numbers.operands(eqn, False), results, where,
                                     _read_body)
    bodies = list(core.jaxprs_in_params(params))
    if name == "closed_call" and any(_places(body) for body in bodies):
        # A plain call (what JAX's partial evaluation leaves of a remat's known part under
        # grad): a body inlined when lowering, checked as the jit it stands for without
        # options of its own.
        return Jit(numbers.operands(eqn, False), results, name=name, checked=False,
                   body=_read_body(params["call_jaxpr"], f"{where}.closed_call."))
    if any(_places(body) for body in bodies):
        raise _Unreadable(f"describe_program does not describe {name} equations whose bodies "
                          f"place values (a constraint, a device_put, a jit, a shard_map, a "
                          f"reshard inside) yet; {where} is one")
    return Opaque(numbers.operands(eqn, True), results, primitive=name,
                  params=tuple((k, _param(params[k]) if not bodies else _body_param(params[k]))
                               for k in sorted(params)))


def read_jaxpr(jaxpr: Any, consts: list, inputs: tuple[Value, ...], where: str,
               **options: Any) -> Program:
    """The Program for a jaxpr with its constants, these input values and jit options, as
    the description of a refusal reads each body."""
    return _body(jaxpr, consts, inputs, where, **options)


def _read_body(jaxpr: Any, where: str) -> Program:
    """A control-flow equation's body (a closed or open jaxpr) as a Program of its types."""
    from jax._src import core

    closed = isinstance(jaxpr, core.ClosedJaxpr)
    inner, consts = (jaxpr.jaxpr, list(jaxpr.consts)) if closed else (jaxpr, [])
    inputs = tuple(value_type_of(v.aval, f"input {i} of {where[:-1]}")
                   for i, v in enumerate(inner.invars))
    return _body(inner, consts, inputs, where)


def _places(jaxpr: Any) -> bool:
    """Whether a body holds, at any depth, an equation that places values."""
    from jax._src import core

    return any(eqn.primitive.name in DESCRIBED_PRIMITIVES
               or any(_places(body) for body in core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _body_param(value: Any) -> Any:
    """A parameter of an equation with bodies that place nothing (``scatter-add``'s
    update computation, ``cond``'s branches): a body is read as its equation count."""
    from jax._src import core

    if isinstance(value, (core.Jaxpr, core.ClosedJaxpr)):
        jaxpr = value.jaxpr if isinstance(value, core.ClosedJaxpr) else value
        return f"<body of {len(jaxpr.eqns)} equations>"
    if type(value) in (tuple, list):
        return tuple(_body_param(v) for v in value)
    return _param(value)


def _target(device: Any, where: str) -> Any:
    """A device_put's target: a sharding, a device id, or None."""
    jax = _jax()
    if device is None:
        return None
    if isinstance(device, jax.sharding.Sharding):
        return _sharding(device, where)
    if isinstance(device, jax.Device):
        return device.id
    raise _Unreadable(f"describe_program reads device_put to a sharding or a device; {where} "
                      f"puts to {device!r}")


# --------------------------------------------------------------------------- the program

def is_one_jit(closed: Any) -> bool:
    """Whether the trace is one jit equation over the arguments, in order, returning its
    results: the function is that jit call."""
    jaxpr = closed.jaxpr
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name not in ("jit", "pjit"):
        return False
    eqn = jaxpr.eqns[0]
    # closed-over refs the trace passes to the jit as its last operands (REF-1)
    lifted = list(eqn.invars[len(jaxpr.invars):])
    return (list(eqn.invars[:len(jaxpr.invars)]) == list(jaxpr.invars)
            and len(lifted) == len(jaxpr.constvars) and set(lifted) == set(jaxpr.constvars)
            and all(isinstance(c, _jax().Ref) for c in closed.consts)
            and list(eqn.outvars) == list(jaxpr.outvars))


def _hoisting() -> bool:
    """Whether JAX hoists closed-over constants as arguments (CONST-1): the flag on now and
    when JAX was imported (the lowering's default is read then)."""
    from jax._src import config
    from jax._src.interpreters import mlir

    return bool(config.use_simplified_jaxpr_constants.value
                and mlir.LoweringParameters().hoist_constants_as_args)


def describe_program(fun: Any, *args: Any, **kwargs: Any) -> Program:
    """The :class:`~shardlaw.spec.program.description.Program` for calling ``fun(*args,
    **kwargs)`` — ``fun`` a jitted function, or any function, read as ``jax.jit(fun)``.

    The arguments are real values (``jax.Array``, numpy arrays, Python scalars), read with
    their shardings and committedness, every one traced (static arguments are not read
    yet); the mesh set with ``jax.set_mesh`` is the one the trace records (the jit
    equation's ``ctx_mesh``).

    A ``jax.shard_map`` whose in_specs are left out (or ``jax.jit`` of one) has them
    inferred by the spec from the arguments' types (SMAP-16, which may refuse), and is
    described with them (:func:`describe_inferred_shard_map`).

    A function ``jax.vmap`` returned (nested vmaps too), or ``jax.jit`` of one, is not read
    from JAX's trace of the batched function: the function vmapped is described on one
    example (the arguments less their mapped dimensions) and the spec applies the vmaps
    (:func:`~shardlaw.spec.program.batching.nested_vmap_program`), so a refusal of the vmap
    is the spec's; ``jax.jit``'s own options around the vmap are read from its trace.
    """
    nest = _vmap_nest(fun)
    if nest is not None:
        return describe_vmapped(nest, args, kwargs)
    inferring = _shard_map_inferring(fun)
    if inferring is not None and not kwargs:
        return describe_inferred_shard_map(*inferring, args)
    return describe_trace(fun, *args, **kwargs)


def describe_trace(fun: Any, *args: Any, **kwargs: Any) -> Program:
    """:func:`describe_program` read from JAX's trace of ``fun`` as it is, a transformed
    function's too (what the properties compare the spec's rewrites with): a jit a batching
    rule bound is read as a jit the user called. A jitted function's static arguments are
    passed to it as they are, and only its other arguments are the program's inputs, each
    named by its pytree path (:func:`input_paths`)."""
    jax = _jax()
    library = _is_library_jit(fun)
    jitted = hasattr(fun, "trace") or _is_filter_jit(fun)
    fun, args, kwargs = _statics_bound(fun, args, kwargs)
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    inputs = tuple(_argument(leaf) for leaf in leaves)
    refs = tuple(isinstance(leaf, jax.Ref) for leaf in leaves)
    given = dict(devices=jax.device_count(), refs=refs, hoist_constants=_hoisting(),
                 input_paths=input_paths(args, kwargs))
    try:
        closed = jax.make_jaxpr(fun)(*args, **kwargs)
    except Exception as error:   # JAX refused while tracing: described up to the refusal
        refused = _refused(fun, args, kwargs, inputs, given, jitted)
        if refused is None:
            raise
        return refused
    if library and not is_one_jit(closed) and _wraps_one_jit(closed):
        # the one jit the library calls, over the leaves it hands it (its results all)
        picked = [closed.jaxpr.invars.index(v) for v in closed.jaxpr.eqns[0].invars]
        inputs = tuple(inputs[i] for i in picked)
        given.update(refs=tuple(refs[i] for i in picked), input_paths=tuple(
            given["input_paths"][i] for i in picked))
    elif not is_one_jit(closed):
        closed = jax.make_jaxpr(jax.jit(fun))(*args, **kwargs)
    eqn = closed.jaxpr.eqns[0]
    _no_layouts(eqn.params, "the jit called")
    body = eqn.params["jaxpr"]
    outer = dict(zip(closed.jaxpr.constvars, closed.consts))
    lifted = tuple(outer[v] for v in eqn.invars[len(inputs):])
    options = _jit_options(eqn.params, "the jit called")
    for name in ("in_shardings", "donated"):   # the lifted refs' are JAX's, not the user's
        options[name] = options[name][:len(inputs)]
    return _body(body.jaxpr, list(body.consts), inputs, "", lifted, **options, **given)


def _refused(fun: Any, args: tuple, kwargs: dict, inputs: tuple, given: dict, jitted: bool
             ) -> Program | None:
    """The program JAX refuses while tracing it, described up to the call it refuses
    (:func:`~shardlaw.spec.bridge.refusals.describe_refused`), or None: traced again with
    JAX's frames kept, to find the call."""
    from jax._src import config

    from .refusals import describe_refused

    if any(given["refs"]):
        return None
    try:
        with config.traceback_filtering("off"):
            _jax().make_jaxpr(fun)(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the refusal, now with its frames
        return describe_refused(error, inputs, given, jitted, _body)
    return None


def input_paths(args: tuple, kwargs: dict) -> tuple[str, ...]:
    """Each argument leaf's pytree path, as the engine names it: ``args[0]['b1']``,
    ``args[1][0].mu``, ``kwargs['batch']`` (``args[k]``: the k-th positional argument
    that is not static)."""
    jax = _jax()
    flat, _ = jax.tree_util.tree_flatten_with_path((args, kwargs))
    return tuple(("args" if keys[0].idx == 0 else "kwargs") + jax.tree_util.keystr(keys[1:])
                 for keys, _ in flat)


def _statics_bound(fun: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """(a function of the dynamic arguments, those arguments) for ``fun``: where ``fun`` is
    a ``jax.jit`` given ``static_argnums``/``static_argnames``, one that calls it with the
    static values as they were passed (its trace is that jit's, over the others); else
    ``fun`` and the arguments as they are."""
    filtered = _filter_jit_statics(fun, args, kwargs)
    if filtered is not None:
        return filtered
    info = getattr(fun, "_jit_info", None)   # JAX 0.10.2's jit keeps both, each completed
    nums, names = (getattr(info, "static_argnums", ()) or (),
                   getattr(info, "static_argnames", ()) or ())
    count = len(args)
    static = {i % count for i in nums if -count <= i < count}
    if not static and not set(names) & set(kwargs):
        return fun, args, kwargs
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    named = {k: v for k, v in kwargs.items() if k not in names}
    fixed = {k: v for k, v in kwargs.items() if k in names}

    def with_statics(*given: Any, **given_kwargs: Any) -> Any:
        rest = iter(given)
        return fun(*(args[i] if i in static else next(rest) for i in range(count)),
                   **given_kwargs, **fixed)

    return with_statics, dynamic, named


def _is_library_jit(fun: Any) -> bool:
    """Whether ``fun`` is what flax NNX's ``nnx.jit`` or ``equinox.filter_jit`` returned: a
    wrapper that hands one ``jax.jit`` the arrays of its arguments (NNX: a module's and an
    optimizer's state) and does its own work around the call; the program is that jit, its
    results all it returns (NNX: the new state it writes back, then the function's;
    equinox: a counter of its own, then the function's)."""
    return type(fun).__module__.partition(".")[0] in ("flax", "equinox") and hasattr(
        fun, "lower")


def _wraps_one_jit(closed: Any) -> bool:
    """Whether the trace is one jit equation over arguments, each once, and nothing else
    (what a library's wrapper around one jit traces to; its results may be others)."""
    jaxpr = closed.jaxpr
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name not in ("jit", "pjit"):
        return False
    operands = list(jaxpr.eqns[0].invars)
    return (not jaxpr.constvars and len(set(operands)) == len(operands)
            and all(v in set(jaxpr.invars) for v in operands))


def _is_filter_jit(fun: Any) -> bool:
    """Whether ``fun`` is what ``equinox.filter_jit`` returned."""
    return type(fun).__module__.partition(".")[0] == "equinox" and hasattr(fun, "lower")


def _filter_jit_statics(fun: Any, args: tuple, kwargs: dict
                        ) -> tuple[Any, tuple, dict] | None:
    """:func:`_statics_bound` for an ``equinox.filter_jit`` function: every leaf that is not
    an array (a module's functions, its Python numbers) is static, as filter_jit makes it
    (equinox's ``is_array``: a jax.Array or a numpy value), and the arrays are the
    arguments (None where a leaf is static, so that their paths are the user's:
    ``args[0].layers[1].weight``)."""
    import numpy as np

    if not _is_filter_jit(fun):
        return None
    jax = _jax()
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    arrays = [isinstance(leaf, (jax.Array, np.ndarray, np.generic)) for leaf in leaves]
    dynamic, named = jax.tree_util.tree_unflatten(
        tree, [leaf if a else None for leaf, a in zip(leaves, arrays)])

    def with_statics(*given: Any, **given_kwargs: Any) -> Any:
        passed = iter(jax.tree_util.tree_leaves((given, given_kwargs)))
        called, keywords = jax.tree_util.tree_unflatten(
            tree, [next(passed) if a else leaf for leaf, a in zip(leaves, arrays)])
        return fun(*called, **keywords)

    return with_statics, dynamic, named


# --------------------------------------------------------------------------- vmapped functions

_VMAP_OPTIONS = ("in_axes", "out_axes", "axis_size", "spmd_axis_name")


def _vmap_of(fun: Any) -> tuple[Any, dict] | None:
    """(the function vmapped, vmap's options) where ``fun`` is what ``jax.vmap`` returned:
    JAX 0.10.2 wraps its ``vmap_f``, which holds them, in an API boundary."""
    inner = _closed_over(fun, "vmap.<locals>.vmap_f")
    if inner is None:
        return None
    held = dict(zip(inner.__code__.co_freevars,
                    (c.cell_contents for c in inner.__closure__ or ())))
    if not set(_VMAP_OPTIONS) | {"fun", "axis_name"} <= set(held):
        return None
    if type(held["axis_name"]) is not object or held.get("sum_match"):
        raise _Unreadable("describe_program does not describe a vmap given axis_name "
                          "(collectives over the batch axis by name) yet")
    return held["fun"], {k: held[k] for k in _VMAP_OPTIONS}


def _vmap_nest(fun: Any) -> tuple[Any, list[dict], Any] | None:
    """(the ``jax.jit`` around the vmaps or None, each vmap's options outermost first, the
    function vmapped) where ``fun`` is a vmapped function or a jit of one; else None."""
    jitted = hasattr(fun, "lower") and hasattr(fun, "trace") and hasattr(fun, "__wrapped__")
    found = _vmap_of(fun.__wrapped__ if jitted else fun)
    if found is None:
        return None
    vmaps = []
    while found is not None:
        inner, options = found
        vmaps.append(options)
        found = _vmap_of(inner)
    return (fun if jitted else None), vmaps, inner


def _flat_axes(axes: Any, tree: Any, what: str, per_item: bool) -> Any:
    """vmap's ``in_axes`` (``per_item``: an int or None, or one entry per argument) or
    ``out_axes`` (an int or None, or a prefix tree of the results) as one entry per leaf
    of ``tree``; an int or None is left as it is."""
    jax = _jax()
    if type(axes) is list:
        axes = tuple(axes)
    if axes is None or type(axes) is int:
        return axes
    if per_item and (type(axes) is not tuple or len(axes) != len(tree)):
        raise _Unreadable(f"describe_program reads vmap's {what} as an int, None or one "
                          f"entry per argument; got {axes!r}")
    try:
        spread = jax.tree_util.tree_map(
            lambda a, sub: [a] * len(jax.tree_util.tree_leaves(sub)), axes, tree,
            is_leaf=lambda x: x is None)
    except ValueError:
        raise _Unreadable(f"describe_program reads vmap's {what} as a prefix of the "
                          f"{'arguments' if per_item else 'results'}; got {axes!r}") from None
    return tuple(a for part in jax.tree_util.tree_leaves(spread, is_leaf=lambda x: type(x) is list)
                 for a in part)


def _example_leaf(leaf: Any, axis: int | None) -> Any:
    """What vmap's function is given for one argument leaf: ``leaf`` less its mapped
    dimension (a numpy view, or a ShapeDtypeStruct typed as one example is: a mapped
    dimension split over Explicit axes leaves the example's type, as JAX's vmap types it)."""
    import numpy as np

    jax = _jax()
    shape = tuple(np.shape(leaf))
    if axis is None or not -len(shape) <= axis < len(shape):
        return leaf   # (an axis out of range: the spec's vmap refuses it, BAT-0)
    axis %= len(shape)
    if isinstance(leaf, (np.ndarray, np.generic)):
        return np.asarray(leaf)[(slice(None),) * axis + (0,)]
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = sharding.spec
        parts = list(spec.partitions) + [None] * (len(shape) - len(spec.partitions))
        sharding = jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(
                *(parts[:axis] + parts[axis + 1:]), unreduced=spec.unreduced,
                reduced=spec.reduced), memory_kind=sharding.memory_kind)
    elif sharding is not None and not isinstance(sharding, jax.sharding.SingleDeviceSharding):
        raise _Unreadable(f"describe_program reads vmap of arguments on a NamedSharding or "
                          f"one device; one is on {sharding!r}")
    return jax.ShapeDtypeStruct(shape[:axis] + shape[axis + 1:], leaf.dtype, sharding=sharding)


def _mapped_split(leaf: Any, axis: int | None) -> Any:
    """The spec entry of ``leaf``'s type at its mapped dimension (the Explicit axes JAX's
    vmap reads there, ``_mapped_axis_spec``), None where unsplit or unmapped."""
    import numpy as np

    jax = _jax()
    shape = tuple(np.shape(leaf))
    if axis is None or not -len(shape) <= axis < len(shape) or isinstance(
            leaf, (np.ndarray, np.generic)) or not isinstance(
            getattr(leaf, "sharding", None), jax.sharding.NamedSharding):
        return None
    parts = list(jax.typeof(leaf).sharding.spec.partitions) + [None] * len(shape)
    entry = parts[axis % len(shape)]
    if isinstance(entry, tuple):
        entry = entry if len(entry) != 1 else entry[0]
    return entry or None


def _example_value(value: Value, axis: int | None) -> Value:
    """One example's argument for the batched argument ``value`` mapped at ``axis``: the
    mapped dimension taken out of its shape and its sharding's spec."""
    import dataclasses

    from ..core.shardings import NamedSharding
    from ..core.values import PartitionSpec

    if axis is None or not -len(value.shape) <= axis < len(value.shape):
        return value
    axis %= len(value.shape)
    shape = value.shape[:axis] + value.shape[axis + 1:]
    s = value.sharding
    if isinstance(s, NamedSharding):
        parts = list(s.spec.partitions)
        s = NamedSharding(s.mesh, PartitionSpec(*(parts[:axis] + parts[axis + 1:]),
                                                unreduced=s.spec.unreduced,
                                                reduced=s.spec.reduced),
                          memory_kind=s.memory_kind)
    if s is None:
        return Value.shape_dtype(shape, value.dtype) if value.abstract else \
            dataclasses.replace(value, shape=shape)
    if value.abstract:
        return Value.shape_dtype(shape, value.dtype, s)
    return Value.placed(shape, s, value.dtype, committed=value.committed)


def _trimmed(value: Value) -> Value:
    """``value`` with its NamedSharding's spec written without trailing Nones (P() and
    P(None) place alike; batched_input writes the inserted dimension out)."""
    import dataclasses

    from ..core.shardings import NamedSharding
    from ..core.values import PartitionSpec

    s = value.sharding
    if not isinstance(s, NamedSharding):
        return value
    parts = list(s.spec.partitions)
    while parts and parts[-1] is None:
        parts.pop()
    spec = PartitionSpec(*parts, unreduced=s.spec.unreduced, reduced=s.spec.reduced)
    return dataclasses.replace(value, sharding=NamedSharding(s.mesh, spec,
                                                             memory_kind=s.memory_kind))


def _levels(vmaps: list[dict], args: tuple) -> tuple[list[dict], list]:
    """Each vmap's options for the spec (in_axes one per argument leaf, the batch size),
    outermost first, and the argument leaves one example is given."""
    import numpy as np

    from ..transforms.batching import check_vmap_parameters

    jax = _jax()
    treedef = jax.tree_util.tree_structure(args)
    given, levels = jax.tree_util.tree_leaves(args), []
    for options in vmaps:   # outermost first: each vmap is given what the one outside maps
        axes = _flat_axes(options["in_axes"], args, "in_axes", True)
        axes = (axes,) * len(given) if axes is None or type(axes) is int else axes
        # the spec's BAT-0 on the arguments this vmap is given (JAX's _mapped_axis_size)
        _, _, size = check_vmap_parameters([np.shape(leaf) for leaf in given], axes,
                                           options["axis_size"])
        splits = tuple(_mapped_split(leaf, a) for leaf, a in zip(given, axes))
        given = [_example_leaf(leaf, a) for leaf, a in zip(given, axes)]
        args = jax.tree_util.tree_unflatten(treedef, given)
        levels.append(dict(in_axes=tuple(axes), out_axes=options["out_axes"],
                           axis_size=size, spmd_axis_name=options["spmd_axis_name"],
                           in_splits=splits))
    return levels, given


def describe_vmapped(nest: tuple[Any, list[dict], Any], args: tuple, kwargs: dict
                     ) -> Program:
    """:func:`describe_program` of a vmapped function (``nest``: :func:`_vmap_nest`'s): the
    function vmapped described on one example, the vmaps applied by the spec innermost
    first; under ``jax.jit`` the batched function is that jit's body."""
    import dataclasses

    from ..program.batching import nested_vmap_program
    from .refused_shard_map import in_vmaps

    jax = _jax()
    jitted, vmaps, inner = nest
    if kwargs:
        raise _Unreadable("describe_program reads a vmapped function's positional arguments "
                          "only; got keyword arguments")
    leaves = jax.tree_util.tree_leaves(args)
    if any(isinstance(leaf, jax.Ref) for leaf in leaves):
        raise _Unreadable("describe_program does not describe refs under vmap yet")
    inputs = tuple(_argument(leaf) for leaf in leaves)
    levels, given = _levels(vmaps, args)
    examples = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(args), given)
    with in_vmaps(levels):   # (JAX traces the example in the vmaps' axis environment)
        example = describe_program(inner, *examples)
        results = _example_results(inner, examples, levels)
        one_jit = _one_jit_call(inner, examples)
    values = list(inputs)
    for level in levels:   # the example's values: the user's, less each mapped dimension
        values = [_example_value(v, a) for v, a in zip(values, level["in_axes"])]
    example = dataclasses.replace(example, inputs=tuple(values))
    for level in levels:
        level["out_axes"] = _flat_axes(level["out_axes"], results, "out_axes", False)
    program = nested_vmap_program(example, levels[::-1], jitted=one_jit)
    # (a mapped dimension split over Auto axes, a sharded ensemble, is the user's to place:
    # the batched types do not hold that split, and the batched call takes it as given)
    if tuple(map(_trimmed, _unmapped(program.inputs, levels))) != tuple(
            map(_trimmed, _unmapped(inputs, levels))):
        raise _Unreadable(f"describe_program reads vmap of arguments placed as one example's "
                          f"are, with the batch dimension inserted unsplit; got {inputs}, "
                          f"where the example gives {program.inputs}")
    program = dataclasses.replace(program, inputs=inputs, devices=jax.device_count(),
                                  hoist_constants=_hoisting())
    return program if jitted is None else _under_jit(jitted, program, args,
                                                     getattr(inner, "__name__", "vmapped"),
                                                     results)


def _one_jit_call(inner: Any, examples: Any) -> bool:
    """Whether JAX traces the function vmapped as one jit call (a jit, or a function whose
    body is that call alone): vmap then traces the jit's body whole on the example before
    batching it, and a Python function's equations one at a time."""
    from jax._src import config

    if hasattr(inner, "trace") or _is_library_jit(inner):
        return True
    try:
        with config.traceback_filtering("off"):
            closed = _jax().make_jaxpr(inner)(*examples)
    except Exception as error:  # noqa: BLE001 - the example refused: where, read from it
        from .refusals import calls_one_jit
        return calls_one_jit(error)
    return is_one_jit(closed)


def _example_results(inner: Any, examples: Any, levels: list[dict]) -> Any:
    """The results of the function vmapped on one example, as JAX's ``eval_shape`` gives
    them; None where JAX refuses the example while tracing (its description holds the
    refused call) and every ``out_axes`` is an int or None, which needs no results."""
    try:
        return _jax().eval_shape(inner, *examples)
    except Exception:   # noqa: BLE001 - the example's own refusal, described
        if any(not (level["out_axes"] is None or type(level["out_axes"]) is int)
               for level in levels):
            raise
        return None


def _unmapped(values: tuple, levels: list[dict]) -> list:
    """The batched ``values`` less every mapped dimension (the outermost vmap's first)."""
    values = list(values)
    for level in levels:
        values = [_example_value(v, a) for v, a in zip(values, level["in_axes"])]
    return values


def _under_jit(jitted: Any, program: Program, args: tuple, name: str, results: Any = None
               ) -> Program:
    """``jax.jit`` of the vmapped function: its options read from its trace, its body the
    spec's batched program (the batched jit call, then vmap's moves, which ``program``
    already is as ``jax.jit`` of the function; or the batched jit call alone).
    ``results``: the function's results on one example."""
    jax = _jax()
    try:
        eqn = jax.make_jaxpr(jitted)(*args).jaxpr.eqns[0]
    except Exception:   # noqa: BLE001 - JAX refuses while tracing
        try:
            return describe_trace(jitted, *args)   # described as any jit it so refuses
        except Exception:   # (inside vmap's batching rules: the spec's batched program)
            from .refused_batching import refused_in_batching
            refused = refused_in_batching(jitted, args, lambda options: _jitted(
                program, options, name), results)
            if refused is None:
                raise
            return refused
    _no_layouts(eqn.params, "the jit called")
    return _jitted(program, _jit_options(eqn.params, "the jit called"), name)


def _jitted(program: Program, options: dict, name: str) -> Program:
    """The spec's batched ``program`` under ``jax.jit``'s ``options`` (:func:`_under_jit`)."""
    import dataclasses

    if program.checked:   # jax.jit of the vmapped function already: the options are the user's
        return dataclasses.replace(program, **options)
    count = len(program.inputs)
    body = dataclasses.replace(program, inputs=tuple(v.type for v in program.inputs),
                               compiler=None, compiler_in=None)
    return Program(program.inputs, (Jit(tuple(range(count)), body=body, name=name,
                                        checked=False),),
                   tuple(range(count, count + len(program.outputs))), **options,
                   devices=program.devices, hoist_constants=program.hoist_constants)


# --------------------------------------------------------------------------- shard_map, in_specs left out

def _shard_map_inferring(fun: Any) -> tuple[Any, dict] | None:
    """(the ``jax.jit`` around it or None, what ``jax.shard_map`` was given) where ``fun``
    is a shard_map whose in_specs were left out, or a jit of one: JAX 0.10.2's shard_map
    returns its ``wrapped``, which holds them."""
    from jax._src.shard_map import Infer

    jitted = hasattr(fun, "lower") and hasattr(fun, "trace") and hasattr(fun, "__wrapped__")
    wrapped = _closed_over(fun.__wrapped__ if jitted else fun, "_shard_map.<locals>.wrapped")
    if wrapped is None:
        return None
    held = dict(zip(wrapped.__code__.co_freevars,
                    (c.cell_contents for c in wrapped.__closure__ or ())))
    if held.get("in_specs") is not Infer or not {"f", "mesh", "out_specs", "axis_names",
                                                 "check_vma"} <= set(held):
        return None
    return (fun if jitted else None), held


def _closed_over(fun: Any, qualname: str) -> Any:
    """The function named ``qualname`` that ``fun`` (an API boundary JAX wraps around
    what its transformations return) closes over, or None."""
    for cell in getattr(fun, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:   # a cell not yet filled, in a user's closure
            continue
        if getattr(inner, "__qualname__", "") == qualname:
            return inner
    return None


def describe_inferred_shard_map(jitted: Any, held: dict, args: tuple) -> Program:
    """:func:`describe_program` of a shard_map whose in_specs were left out (``held``: what
    shard_map was given; ``jitted``: the ``jax.jit`` around it, or None): the spec infers
    the in_specs from the arguments' types (SMAP-16: every manual axis Explicit, no entry
    naming an automatic axis before a manual one), then the shard_map given them is read,
    under the user's jit with its options where there is one."""
    import dataclasses

    from ..transforms.shardmap_parameters import Shaped
    from ..transforms.shardmap_specs import manual_axes_of
    from ..transforms.shardmap_types import infer_in_specs
    from .convert import to_jax

    jax = _jax()
    mesh = held["mesh"] if held["mesh"] is not None else jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:   # no mesh: JAX refuses the call as it is
        return describe_trace(jitted or _plain(held), *args)
    ours = from_jax(mesh)
    leaves = jax.tree_util.tree_leaves(args)
    values = [_argument(leaf) for leaf in leaves]
    manual = manual_axes_of(ours, set(held["axis_names"]))
    specs = infer_in_specs(ours, manual, tuple(
        Shaped(v.shape, v.spec if v.mesh is not None else None) for v in values))
    given = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(args),
                                         [to_jax(s) for s in specs])
    mapped = jax.shard_map(held["f"], mesh=held["mesh"], in_specs=given,
                           out_specs=held["out_specs"], axis_names=held["axis_names"],
                           check_vma=held["check_vma"])
    program = describe_trace(jax.jit(mapped), *args)
    if jitted is None:
        return program
    eqn = jax.make_jaxpr(jitted)(*args).jaxpr.eqns[0]   # the user's jit: its options
    _no_layouts(eqn.params, "the jit called")
    return dataclasses.replace(program, **_jit_options(eqn.params, "the jit called"))


def _plain(held: dict) -> Any:
    """The shard_map ``held`` describes, called as it was (in_specs left out)."""
    return _jax().shard_map(held["f"], mesh=held["mesh"], out_specs=held["out_specs"],
                            axis_names=held["axis_names"], check_vma=held["check_vma"])


# --------------------------------------------------------------------------- doors

def read_type(aval: Any, what: str) -> Value:
    """A traced value's type (a JAX aval) as the spec's :class:`Value`."""
    return value_type_of(aval, what)


def read_sharding(s: Any, what: str) -> Any:
    """A sharding JAX holds (its unspecified value included) as the spec's."""
    return _sharding(s, what)


def read_param(value: Any) -> Any:
    """A primitive's parameter as the spec's equations hold it (a plain value)."""
    return _param(value)


def read_target(device: Any, where: str) -> Any:
    """A device_put's target as the spec's: a sharding, a device id, or None."""
    return _target(device, where)

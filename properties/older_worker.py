"""Run jit calls, written as JSON, through a real ``jax.jit`` of the JAX 0.4 line; report as JSON.

This file runs as a script in an environment of its own (jax/jaxlib 0.4.13, numpy < 2): it
imports nothing of shardlaw, whose bridge speaks JAX 0.10.2. It reads one call a line on
standard input, in the form :func:`shardlaw.properties.older_harness.call_json` writes, and
answers each with one line: what ``jax.jit`` did (the exception's class, its built-in base
and its message; or each result's sharding, committed flag and HLO sharding, the device
assignment, the inputs the function uses, and for a call compiled ahead of time the HLO
sharding the executable takes each input in). ``{"version": true}`` asks for the versions;
``{"sequence": [call, ...]}`` runs calls through one wrapper and answers, per call, how
often it missed jit's lowering cache; ``{"placement": {"sharding": ..., "shape": [...]}}``
asks where a sharding puts a value of that shape.

Run by hand: ``echo '{"version": true}' | /work/venv0413/bin/python properties/older_worker.py``.
"""

import contextlib
import json
import os
import sys
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding  # noqa: E402

DEVICES = {d.id: d for d in jax.devices()}


# --------------------------------------------------------------------------- reading

def tree(node, leaf):
    """A pytree written as JSON (``{"tuple": [...]}``, ``{"list": ...}``, ``{"dict": ...}``,
    ``{"leaf": ...}``) rebuilt, each leaf passed through ``leaf``."""
    if "tuple" in node:
        return tuple(tree(n, leaf) for n in node["tuple"])
    if "list" in node:
        return [tree(n, leaf) for n in node["list"]]
    if "dict" in node:
        return {k: tree(v, leaf) for k, v in node["dict"].items()}
    return leaf(node["leaf"])


def spec(entries):
    return PartitionSpec(*[tuple(e) if isinstance(e, list) else e for e in entries])


def sharding(written):
    """A JAX sharding (or PartitionSpec, or None) from its JSON form."""
    if written is None:
        return None
    kind = written["type"]
    if kind == "spec":
        return spec(written["spec"])
    if kind == "single":
        return SingleDeviceSharding(DEVICES[written["device"]])
    mesh = written["mesh"]
    devices = np.array([DEVICES[i] for i in mesh["devices"]]).reshape(mesh["shape"])
    return NamedSharding(Mesh(devices, tuple(mesh["names"])), spec(written["spec"]))


def value(written):
    """A JAX or numpy value for one argument leaf."""
    kind = written["kind"]
    if kind == "static":
        return written["value"]
    if kind == "scalar":
        return {"bool": True, "int32": 1, "float32": 1.0, "complex64": 1 + 0j}[written["dtype"]]
    host = np.ones(written["shape"], dtype=jnp.dtype(written["dtype"]))
    if kind == "numpy":
        return host
    placed = sharding(written["sharding"])
    if kind == "committed":
        return jax.device_put(host, placed)
    if isinstance(placed, SingleDeviceSharding):
        with jax.default_device(placed._device):
            return jnp.asarray(host)
    # No public way makes an uncommitted array on several devices: build one directly.
    from jax._src.array import ArrayImpl
    made = jax.device_put(host, placed)
    return ArrayImpl(made.aval, made.sharding, made._arrays, committed=False)


def function(call):
    """A function with the described results that uses exactly the inputs ``uses`` marks."""
    static = set(call["static_argnums"])
    outs = []
    tree(call["outputs"], outs.append)

    def fun(*args, **kwargs):
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        flat = jax.tree_util.tree_leaves((dynamic, kwargs))
        uses = call["uses"] if call["uses"] is not None else [True] * len(flat)
        total = jnp.float32(0)
        for used, x in zip(uses, flat):
            if used:
                total = total + jnp.sum(jnp.asarray(x)).real.astype(jnp.float32)
        results = []
        for out in outs:
            source = out["source"]
            if source is not None and source < len(flat) and \
                    tuple(jnp.shape(flat[source])) == tuple(out["shape"]):
                base = jnp.asarray(flat[source]).astype(jnp.float32) * 2
            else:
                base = jnp.zeros(out["shape"], jnp.float32)
            results.append((base + total).astype(out["dtype"]))
        it = iter(results)
        return tree(call["outputs"], lambda _: next(it))

    return fun


def jit_options(call):
    options = {"static_argnums": tuple(call["static_argnums"]),
               "keep_unused": call["keep_unused"]}
    for name in ("in_shardings", "out_shardings"):
        if call[name] != "unspecified":
            options[name] = tree(call[name], sharding)
    if call["device"] is not None:
        options["device"] = DEVICES[call["device"]]
    return options


# --------------------------------------------------------------------------- writing

def shown(s, shape):
    """A JAX sharding of a value of ``shape`` as JSON: its type, enough to rebuild it, and
    its HLO sharding."""
    written = {"type": type(s).__name__, "hlo": str(s._to_xla_hlo_sharding(len(shape))),
               "shape": list(shape),
               "devices": [d.id for d in s._device_assignment]}
    if isinstance(s, NamedSharding):
        written["mesh"] = {"shape": list(s.mesh.devices.shape),
                           "names": list(s.mesh.axis_names),
                           "devices": [d.id for d in s.mesh.devices.flat]}
        written["spec"] = [list(e) if isinstance(e, tuple) else e for e in s.spec]
    elif isinstance(s, SingleDeviceSharding):
        written["device"] = s._device.id
    return written


def failure(error):
    base = next((c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins"),
                "Exception")
    return {"class": type(error).__name__, "base": base, "message": str(error)[:2000]}


def used_inputs(fun, call, args, kwargs):
    """Which flat dynamic inputs the traced function keeps after dead-code elimination."""
    from jax._src.interpreters import partial_eval as pe
    try:
        closed = jax.make_jaxpr(fun, static_argnums=tuple(call["static_argnums"]))(
            *args, **kwargs)
    except Exception:  # noqa: BLE001 - the call itself will meet the problem
        return None
    _, used = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    return [bool(u) for u in used]


def taken_inputs(compiled, call, args, kwargs):
    """The HLO sharding the executable takes each flat dynamic input in, or None where
    0.4.13 cannot say: its ``Compiled.input_shardings`` fails ("Too few leaves for
    PyTreeDef") once unused inputs were dropped from the program."""
    ranks = [np.ndim(x) for x in jax.tree_util.tree_leaves(
        (tuple(a for i, a in enumerate(args) if i not in call["static_argnums"]), kwargs))]
    try:
        taken = jax.tree_util.tree_leaves(compiled.input_shardings,
                                          is_leaf=lambda s: s is None)
    except ValueError:
        # Read them where 0.4.13 keeps them: the kept inputs' shardings, in order.
        executable = compiled._executable
        kept = iter(executable._in_shardings)
        taken = [next(kept) if i in executable._kept_var_idx else None
                 for i in range(len(ranks))]
    if len(taken) != len(ranks):
        return None
    return [None if s is None else str(s._to_xla_hlo_sharding(r))
            for s, r in zip(taken, ranks)]


def block(call):
    """The ``with mesh:`` block a pjit call is made in (a null context for ``jax.jit``)."""
    written = call.get("resource_mesh")
    if written is None:
        return contextlib.nullcontext()
    devices = np.array([DEVICES[i] for i in written["devices"]]).reshape(written["shape"])
    return Mesh(devices, tuple(written["names"]))


def run(call):
    """What ``jax.jit`` (or ``pjit`` inside a ``with mesh:`` block) does with one call."""
    answer = {"stage": "jit"}
    fun = function(call)
    try:
        if call.get("resource_mesh") is None:
            jitted = jax.jit(fun, **jit_options(call))
        else:
            from jax.experimental.pjit import pjit
            jitted = pjit(fun, **jit_options(call))
    except Exception as error:  # noqa: BLE001 - reported
        answer["error"] = failure(error)
        return answer
    default = (jax.default_device(DEVICES[call["default_device"]])
               if call["default_device"] else contextlib.nullcontext())
    with default:
        args = tree(call["args"], value)
        kwargs = tree(call["kwargs"], value)
        aot = None if call["aot_args"] is None else tree(call["aot_args"], value)
        aot_kwargs = {} if call["aot_kwargs"] is None else tree(call["aot_kwargs"], value)
        answer["uses"] = used_inputs(fun, call, args, kwargs)
        answer["stage"] = "call"
        with block(call):
            return called(answer, call, jitted, args, kwargs, aot, aot_kwargs)


def called(answer, call, jitted, args, kwargs, aot, aot_kwargs):
    """``answer`` completed with what calling ``jitted`` did (compiled first, for AOT)."""
    try:
        if aot is not None:
            compiled = jitted.lower(*args, **kwargs).compile()
            shapes = []
            tree(call["outputs"], lambda out: shapes.append(tuple(out["shape"])))
            outs = jax.tree_util.tree_leaves(compiled.output_shardings)
            answer["results"] = [shown(s, shape) for s, shape in zip(outs, shapes)]
            answer["inputs"] = taken_inputs(compiled, call, args, kwargs)
        else:
            flat = jax.tree_util.tree_leaves(jitted(*args, **kwargs))
            answer["results"] = [shown(x.sharding, x.shape) for x in flat]
            answer["committed"] = [bool(x._committed) for x in flat]
    except Exception as error:  # noqa: BLE001
        answer["error"] = failure(error)
        return answer
    if aot is not None:
        answer["stage"] = "aot"
        try:
            compiled(*aot, **aot_kwargs)
        except Exception as error:  # noqa: BLE001
            answer["error"] = failure(error)
    return answer


def box(index, shape):
    """A per-device index (a tuple of slices, maybe short) as [[start, stop], ...]."""
    out = []
    for dim, size in enumerate(shape):
        piece = index[dim] if dim < len(index) else slice(None)
        out.append(list(piece.indices(size)[:2]))
    return out


def placement(question):
    """Where a sharding puts a value of a shape, as jax 0.4.13 says: its HLO sharding,
    the shard shape (or the error), each device's box, the replica ids, full replication."""
    from jax._src.sharding_impls import device_replica_id_map
    s, shape = sharding(question["sharding"]), tuple(question["shape"])
    answer = {"hlo": None, "fully_replicated": bool(s.is_fully_replicated)}
    try:
        answer["hlo"] = str(s._to_xla_hlo_sharding(len(shape)))
        answer["shard_shape"] = list(s.shard_shape(shape))
    except Exception as error:  # noqa: BLE001 - reported
        answer["error"] = failure(error)
        return answer
    answer["indices"] = [[d.id, box(i, shape)] for d, i in s.devices_indices_map(shape).items()]
    answer["replica_ids"] = {str(d.id): r for d, r in device_replica_id_map(s, shape).items()}
    return answer


_WATCHED = {}


def _lowerings_of(name):
    """A counter of the misses of jit's lowering cache for functions called ``name`` (not
    the jitted identity 0.4.13 runs to move an argument onto other devices)."""
    from jax._src import pjit as pjit_module
    if not _WATCHED:
        cached = pjit_module._pjit_lower_cached

        def watched(jaxpr, in_s, out_s, resource_env, donated, fun_name, *rest, **kw):
            before = cached.cache_info().misses
            try:
                return cached(jaxpr, in_s, out_s, resource_env, donated, fun_name, *rest, **kw)
            finally:
                counter = _WATCHED.get(fun_name)
                if counter is not None:
                    counter["misses"] += cached.cache_info().misses - before

        watched.cache_info = cached.cache_info
        pjit_module._pjit_lower_cached = watched
        _WATCHED[None] = None
    _WATCHED[name] = {"misses": 0}
    return _WATCHED[name]


def run_sequence(calls):
    """Each call of a sequence through one function object and one ``jax.jit`` wrapper
    (the first call's options): how many times each missed jit's lowering cache
    (``pjit._pjit_lower_cached``, keyed by ``SameDeviceAssignmentTuple``), or its error."""
    fun = function(calls[0])
    lowering = _lowerings_of(fun.__name__)
    jitted = jax.jit(fun, **jit_options(calls[0]))
    rows = []
    for call in calls:
        default = (jax.default_device(DEVICES[call["default_device"]])
                   if call["default_device"] else contextlib.nullcontext())
        row = {}
        with default:
            # Made first: making an array may itself lower (jnp.asarray's conversions).
            args = tree(call["args"], value)
            kwargs = tree(call["kwargs"], value)
            before = lowering["misses"]
            try:
                jax.block_until_ready(jitted(*args, **kwargs))
            except Exception as error:  # noqa: BLE001 - reported
                row["error"] = failure(error)
            row["lowering"] = lowering["misses"] - before
        rows.append(row)
    return {"rows": rows}


def main():
    warnings.simplefilter("ignore")
    for line in sys.stdin:
        if not line.strip():
            continue
        call = json.loads(line)
        if "placement" in call:
            try:
                answer = placement(call["placement"])
            except Exception as error:  # noqa: BLE001 - a harness fault
                answer = {"harness_error": failure(error)}
        elif "sequence" in call:
            try:
                answer = run_sequence(call["sequence"])
            except Exception as error:  # noqa: BLE001 - a harness fault
                answer = {"harness_error": failure(error)}
        elif call.get("version"):
            answer = {"jax": jax.__version__, "jaxlib": jax.lib.__version__,
                      "numpy": np.__version__, "devices": len(DEVICES)}
        else:
            try:
                answer = run(call)
            except Exception as error:  # noqa: BLE001 - a harness fault, not JAX's answer
                answer = {"harness_error": failure(error)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""One of two JAX processes (jax.distributed, gloo) running the engine; started by test_engine_processes.

Usage: python engine_process_worker.py PROCESS_ID PORT. Prints one JSON object: for each
check, true or a description of what went wrong.
"""

import json
import sys
import traceback


def main(process_id: int, port: int) -> dict:
    import jax

    jax.config.update("jax_num_cpu_devices", 4)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=90)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

    from shardlaw.engine import jit

    checks: dict = {}

    def check(name, condition, detail=""):
        checks[name] = True if condition else (detail or False)

    auto = (AxisType.Auto, AxisType.Auto)
    devices = np.array(jax.devices()).reshape(2, 4)
    mesh = Mesh(devices, ("x", "y"), axis_types=auto)
    renamed = Mesh(devices, ("a", "b"), axis_types=auto)
    host = np.arange(64, dtype=np.float32).reshape(8, 8)

    def global_array(sharding):
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    check("two processes, eight devices", jax.process_count() == 2 and len(jax.devices()) == 8,
          f"{jax.process_count()} processes, {len(jax.devices())} devices")
    f = lambda a: a * 2 + 1  # noqa: E731
    engine = jit(f)
    x = global_array(NamedSharding(mesh, P("x", "y")))
    mine, again, theirs = engine(x), engine(x), jax.jit(f)(x)
    check("same sharding as jax.jit", mine.sharding == theirs.sharding,
          f"{mine.sharding} vs {theirs.sharding}")
    check("committed", mine._committed == theirs._committed)
    gathered = multihost_utils.process_allgather(again, tiled=True)
    check("values", np.array_equal(np.asarray(gathered), host * 2 + 1))
    check("addresses half the devices",
          len(mine.addressable_shards) == 4 and not mine.is_fully_addressable)

    # A placement-equal argument written over renamed axes: no second compile.
    y = global_array(NamedSharding(renamed, P("a", "b")))
    out = engine(y)
    check("renamed axes reuse the executable", engine.cache_info().compiles == 1,
          str(engine.cache_info()))
    check("renamed axes come back renamed", out.sharding == NamedSharding(renamed, P("a", "b")),
          str(out.sharding))
    check("renamed values", np.array_equal(
        np.asarray(multihost_utils.process_allgather(out, tiled=True)), host * 2 + 1))

    # Replicated over the devices in reverse order, asked for in mesh order: the same
    # buffers, relabelled (each process reorders the arrays it holds).
    backwards = Mesh(devices.reshape(-1)[::-1].reshape(2, 4), ("x", "y"), axis_types=auto)
    z = global_array(NamedSharding(backwards, P()))
    wanted = NamedSharding(mesh, P())
    moved = jit(f, in_shardings=wanted)
    for _ in range(2):
        result = moved(z)
    check("reordered replicas, relabelled", result.sharding == wanted and np.array_equal(
        np.asarray(result.addressable_shards[0].data), host * 2 + 1), str(result.sharding))

    # A reduction over all eight devices: gloo collectives across the two processes.
    total = jit(lambda a: (a * 2).sum())(x)
    check("cross-process reduction", float(total) == float((host * 2).sum()), str(total))

    # RES-2: a numpy argument meets a split in_sharding in a program of two processes.
    split = NamedSharding(mesh, P("x"))
    try:
        jit(f, in_shardings=split)(host)
        check("RES-2 refuses numpy with a split sharding", False, "accepted")
    except ValueError as error:
        check("RES-2 refuses numpy with a split sharding", getattr(error, "rule", None) == "RES-2",
              f"{type(error).__name__}: {error}")
    try:
        jax.jit(f, in_shardings=split)(host)
        check("jax.jit refuses it too", False, "accepted")
    except ValueError:
        check("jax.jit refuses it too", True)
    # The spec, asked about the same calls through describe_call, decides them alike.
    from shardlaw.spec import describe_call, jit_call
    verdict = jit_call(describe_call(f, host, in_shardings=split))
    check("the spec refuses it with RES-2", verdict.rule == "RES-2", str(verdict.rule))
    verdict = jit_call(describe_call(f, host, in_shardings=NamedSharding(mesh, P())))
    check("the spec accepts a replicated sharding", verdict.accepted, str(verdict.message))
    replicated = jit(f, in_shardings=NamedSharding(mesh, P()))(host)
    check("numpy with a replicated sharding", np.array_equal(
        np.asarray(replicated.addressable_shards[0].data), host * 2 + 1))
    # Non-addressable devices: programs whose inputs or results live only on the other
    # process's devices run here too (every process runs every program), with no local data.
    from jax.sharding import SingleDeviceSharding
    remote = [d for d in jax.devices() if d.process_index != process_id]
    remote_mesh = Mesh(np.array(remote).reshape(2, 2), ("x", "y"), axis_types=auto)
    small = host[:4, :4]
    elsewhere = jax.make_array_from_callback(small.shape, NamedSharding(remote_mesh, P()),
                                             lambda index: small[index], dtype=np.float32)
    cases = {
        "out_shardings on a remote device": (dict(out_shardings=SingleDeviceSharding(remote[0])),
                                             small),
        "in_shardings on a remote device": (dict(in_shardings=SingleDeviceSharding(remote[0])),
                                            small),
        "in_shardings over a remote mesh": (dict(in_shardings=NamedSharding(remote_mesh, P())),
                                            small),
        "an argument with no local shard": ({}, elsewhere),
        "device= a remote device": (dict(device=remote[0]), small),
    }
    import warnings
    for name, (options, argument) in cases.items():
        outcomes = []
        for jit_fn in (jax.jit, jit):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    result = jit_fn(f, **options)(argument)
                    outcomes.append((str(result.sharding), len(result.addressable_shards),
                                     result._committed))
                except Exception as error:  # noqa: BLE001 - compared, not raised
                    outcomes.append((type(error).__name__, getattr(error, "rule", None)))
        theirs, mine = outcomes
        check(f"non-addressable: {name}", mine == theirs and mine[1] == 0, f"{mine} vs {theirs}")
    # Donation across processes: the engine deletes the donated array where jax.jit does
    # (PROC-17), each call on a fresh array (a deleted one crashes JAX's fast path).
    donating = {
        "like the argument": (lambda a: a * 2, None),
        "replicated": (lambda a: a * 2, NamedSharding(mesh, P())),
        "narrower (float16)": (lambda a: (a * 2).astype(np.float16), None),
        "flattened": (lambda a: (a * 2).reshape(-1), NamedSharding(mesh, P(("x", "y")))),
        "two results": (lambda a: (a.sum(), a * 2), None),
    }
    deleted = set()
    for name, (g, out) in donating.items():
        seen = []
        for jit_fn in (jax.jit, jit):
            fresh = global_array(NamedSharding(mesh, P("x", "y")))
            options = {} if out is None else {"out_shardings": out}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # "Some donated buffers were not usable"
                result = jit_fn(g, donate_argnums=0, **options)(fresh)
            seen.append((fresh.is_deleted(), str(jax.tree.map(lambda r: r.sharding, result))))
        theirs, mine = seen
        check(f"donation: {name}", mine == theirs, f"{mine} vs {theirs}")
        deleted.add(theirs[0])
    check("donation: deleted and kept both seen", deleted == {True, False}, str(deleted))
    verdict = engine.explain(x)
    check("device assignment spans both processes",
          verdict.device_assignment == tuple(d.id for d in devices.flat),
          str(verdict.device_assignment))
    multihost_utils.sync_global_devices("done")
    return checks


if __name__ == "__main__":
    try:
        result = main(int(sys.argv[1]), int(sys.argv[2]))
    except Exception:  # noqa: BLE001 - reported to the test
        result = {"crashed": traceback.format_exc()[-3000:]}
    print("RESULT " + json.dumps(result), flush=True)

"""One process of the multi-process property: answers examples under jax.distributed.

Started by :class:`shardlaw.properties.processes_harness.Pool` as ``python -m
shardlaw.properties.processes_worker PROCESS_ID PORT PROCESSES DEVICES_PER_PROCESS``. It
joins the program (gloo collectives), prints ``READY``, then reads one example a line (JSON,
drawn by the parent, the same for every process) and prints one answer a line: the
disagreements between the spec's answer for this process and what JAX does in this
process, and the sides of the rules it saw. ``STOP`` ends it. Only running a compiled
program meets the other processes (the programs are elementwise, but the first run over a
set of devices joins a gloo communicator): a process that fails before it leaves the others
waiting there, and the harness's time limit ends them. The rules planted wrong in the parent
(a campaign's ``--plant``) are planted here too, named by ``SHARDLAW_PROCESSES_PLANTED``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any

import numpy as np

import shardlaw.spec as S
from shardlaw.spec.core.rules import Rejection

PLANTED_ENV = "SHARDLAW_PROCESSES_PLANTED"   # the harness's name for the rules planted wrong


class Answers:
    """What one process saw for one example: disagreements and rule sides."""

    def __init__(self, example: dict) -> None:
        self.example = example
        self.problems: list[str] = []
        self.hits: list[tuple[str, bool]] = []

    def agree(self, what: str, ours: Any, theirs: Any) -> None:
        if ours != theirs:
            self.problems.append(f"{what}: spec {ours!r} vs JAX {theirs!r}")

    def hit(self, rule_id: str, refused: bool) -> None:
        self.hits.append((rule_id, bool(refused)))


def outcome(thunk) -> tuple[str | None, Any]:
    """(None, value) or (the exception's class name, the exception)."""
    try:
        return None, thunk()
    except Exception as error:  # noqa: BLE001 - compared, not raised
        return type(error).__name__, error


def spec_outcome(thunk) -> tuple[str | None, Any]:
    """Like :func:`outcome`, naming a refusal by JAX's class name and keeping its rule."""
    try:
        return None, thunk()
    except Rejection as error:
        return error.failure.jax_error, error


def box_of_index(index: tuple, shape: tuple) -> tuple:
    return tuple((s.start or 0, n if s.stop is None else s.stop) for s, n in zip(index, shape))


def jax_sharding(example: dict) -> Any:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    devices = sorted(jax.devices(), key=lambda d: d.id)
    chosen = np.array([devices[i] for i in example["devices"]], dtype=object)
    mesh = Mesh(chosen.reshape(example["axis_sizes"]), tuple(example["axis_names"]))
    spec = PartitionSpec(*[None if d is None else tuple(d) for d in example["spec"]])
    return NamedSharding(mesh, spec)


def check_addressing(answers: Answers, ours: Any, theirs: Any, pid: int) -> None:
    """DEV-2 and PROC-1: the devices this process addresses, and whether that is all."""
    answers.agree("DEV-2 addressable devices", sorted(S.addressable_device_ids(ours, pid)),
                  sorted(d.id for d in theirs.addressable_devices))
    full = S.is_fully_addressable(ours, pid)
    answers.agree("PROC-1 is_fully_addressable", full, theirs.is_fully_addressable)
    answers.hit("DEV-2", not S.addressable_device_ids(ours, pid))
    answers.hit("PROC-1", not full)


def check_shards(answers: Answers, ours: Any, array: Any, shape: tuple, pid: int,
                 values: np.ndarray) -> None:
    """PROC-2: the shards this process holds, in order, with their boxes, replica ids, data."""
    predicted = S.addressable_shards(ours, shape, pid)
    held = [S.Shard(sh.device.id, box_of_index(sh.index, shape), sh.replica_id)
            for sh in array.addressable_shards]
    answers.agree("PROC-2 addressable shards", list(predicted), held)
    for shard, real in zip(predicted, array.addressable_shards):
        wanted = values[tuple(slice(a, b) for a, b in shard.box)]
        if not np.array_equal(np.asarray(real.data), wanted):
            answers.problems.append(f"PROC-2 shard data on device {shard.device}")
    answers.hit("PROC-2", not predicted)


def check_fetch(answers: Answers, ours: Any, array: Any, shape: tuple, pid: int,
                values: np.ndarray) -> None:
    """PROC-5: np.asarray of the global array in this process; printing never refuses."""
    mine = spec_outcome(lambda: S.check_fetchable(ours, shape, pid))
    theirs = outcome(lambda: np.asarray(array))
    answers.agree("PROC-5 np.asarray refusal class", mine[0], theirs[0])
    if mine[0] is None and theirs[0] is None and not np.array_equal(theirs[1], values):
        answers.problems.append("PROC-5 fetched values differ from the global array")
    printed = outcome(lambda: str(array))
    answers.agree("PROC-5 str() refusal", None, printed[0])
    answers.hit("PROC-5", mine[0] is not None)


def local_shape_of(example: dict, theirs: Any, shape: tuple) -> tuple:
    """This process's local data shape: per dimension the whole global size, the extent
    this process addresses, or (``wrong``) neither."""
    owned = theirs.addressable_devices_indices_map(shape).values()
    piece = theirs.shard_shape(shape)
    local = []
    for dim, mode in enumerate(example["local"]):
        own = piece[dim] * len({box_of_index(i, shape)[dim] for i in owned})
        local.append({"full": shape[dim], "own": own,
                      "wrong": own + 1 if own + 1 != shape[dim] else own + 2}[mode])
    return tuple(local)


def check_process_local(answers: Answers, ours: Any, theirs: Any, shape: tuple,
                        pid: int) -> None:
    """PROC-3 and PROC-4: make_array_from_process_local_data with this process's data."""
    import jax
    from jax._src.sharding_impls import local_to_global_shape
    local = local_shape_of(answers.example, theirs, shape)
    data = np.arange(int(np.prod(local)), dtype=np.float32).reshape(local) + 1000 * pid
    inferred = S.global_shape_from_local(ours, local, pid)
    answers.agree("PROC-3 global shape", inferred, tuple(local_to_global_shape(theirs, local)))
    answers.hit("PROC-3", None in inferred)
    given = shape if answers.example["global_given"] else None
    mine = spec_outcome(lambda: S.process_local_slices(ours, local, given, pid))
    theirs_out = outcome(lambda: jax.make_array_from_process_local_data(theirs, data, given))
    answers.agree("PROC-4 refusal class", mine[0], theirs_out[0])
    answers.hit("PROC-4", mine[0] is not None)
    if mine[0] is not None or theirs_out[0] is not None:
        if mine[0] is not None and mine[1].rule != "PROC-4":
            answers.problems.append(f"PROC-4 refused by {mine[1].rule}: {mine[1]}")
        return
    global_shape, boxes = mine[1]
    array = theirs_out[1]
    answers.agree("PROC-4 global shape", tuple(global_shape), tuple(array.shape))
    for real in array.addressable_shards:
        box = boxes.get(real.device.id)
        wanted = None if box is None else data[tuple(slice(a, b) for a, b in box)]
        if wanted is None or not np.array_equal(np.asarray(real.data), wanted):
            answers.problems.append(f"PROC-4 rows on device {real.device.id}: spec box {box}")


def check_host_local(answers: Answers, ours: Any, theirs: Any, array: Any, shape: tuple,
                     pid: int, values: np.ndarray) -> None:
    """PROC-6 to PROC-8: the local mesh, global_array_to_host_local_array and back."""
    from jax.experimental import multihost_utils as hosts
    mesh, spec = theirs.mesh, theirs.spec
    mine = spec_outcome(lambda: S.local_mesh(ours.mesh, pid))
    real = outcome(lambda: mesh._local_mesh(pid))
    answers.agree("PROC-6 local mesh refusal class", mine[0], real[0])
    answers.hit("PROC-6", mine[0] is not None)
    if mine[0] is None and real[0] is None:
        answers.agree("PROC-6 local mesh", (mine[1].devices.id_tuple(), mine[1].axis_sizes),
                      (tuple(d.id for d in real[1].devices.flat), tuple(real[1].devices.shape)))
    down = spec_outcome(lambda: S.global_to_host_local(ours.mesh, ours.spec, shape, pid))
    local = outcome(lambda: hosts.global_array_to_host_local_array(array, mesh, spec))
    answers.agree("PROC-8 refusal class", down[0], local[0])
    answers.hit("PROC-8", down[0] is not None)
    if down[0] is None and local[0] is None:
        local_shape, boxes = down[1]
        answers.agree("PROC-8 local shape", tuple(local_shape), tuple(local[1].shape))
        found = {sh.device.id: (box_of_index(sh.index, local_shape), np.asarray(sh.data))
                 for sh in local[1].addressable_shards}
        for device, (local_box, global_box) in boxes.items():
            wanted = values[tuple(slice(a, b) for a, b in global_box)]
            got = found.get(device)
            if got is None or got[0] != local_box or not np.array_equal(got[1], wanted):
                answers.problems.append(f"PROC-8 device {device}: spec {local_box} holding "
                                        f"{global_box}, JAX {None if got is None else got[0]}")
    # Asked of this process's own local shape, or of the global one where that is refused.
    ok = down[0] is None and local[0] is None
    check_host_local_up(answers, ours, theirs, tuple(local[1].shape) if ok else shape, pid)


def check_host_local_up(answers: Answers, ours: Any, theirs: Any, local_shape: tuple,
                        pid: int) -> None:
    """PROC-7: host_local_array_to_global_array of this process's own local data."""
    from jax.experimental import multihost_utils as hosts
    data = np.arange(int(np.prod(local_shape)), dtype=np.float32).reshape(local_shape)
    data = data + 1000 * pid
    up = spec_outcome(lambda: S.host_local_to_global(ours.mesh, ours.spec, local_shape, pid))
    real = outcome(lambda: hosts.host_local_array_to_global_array(data, theirs.mesh,
                                                                  theirs.spec))
    answers.agree("PROC-7 refusal class", up[0], real[0])
    answers.hit("PROC-7", up[0] is not None)
    if up[0] is not None or real[0] is not None:
        return
    global_shape, boxes = up[1]
    answers.agree("PROC-7 global shape", tuple(global_shape), tuple(real[1].shape))
    for shard in real[1].addressable_shards:
        box = boxes.get(shard.device.id)
        wanted = None if box is None else data[tuple(slice(a, b) for a, b in box)]
        if wanted is None or not np.array_equal(np.asarray(shard.data), wanted):
            answers.problems.append(f"PROC-7 data on device {shard.device.id}: spec box {box}")


def check_single_device_arrays(answers: Answers, ours: Any, theirs: Any, shape: tuple,
                               pid: int, values: np.ndarray) -> None:
    """PROC-9: make_array_from_single_device_arrays from this process's own arrays."""
    import jax
    owned = [d for d in theirs._addressable_device_assignment]
    boxes = theirs.addressable_devices_indices_map(shape)
    pieces = [(d, values[boxes[d]]) for d in owned]
    rotate = answers.example.get("rotate", 0) % max(len(pieces), 1)
    pieces = pieces[rotate:] + pieces[:rotate]
    mode = answers.example.get("single", "exact")
    if mode == "missing":
        pieces = pieces[1:]
    elif mode == "twice" and pieces:
        pieces = pieces + [pieces[0]]
    elif mode == "misshapen" and pieces:
        pieces = [(pieces[0][0], np.zeros((pieces[0][1].shape[0] + 1, *pieces[0][1].shape[1:]),
                                          np.float32))] + pieces[1:]
    mine = spec_outcome(lambda: S.place_single_device_arrays(
        ours, shape, [(d.id, p.shape) for d, p in pieces], pid))
    real = outcome(lambda: jax.make_array_from_single_device_arrays(
        shape, theirs, [jax.device_put(p, d) for d, p in pieces], dtype=np.float32))
    answers.agree("PROC-9 refusal class", mine[0], real[0])
    answers.hit("PROC-9", mine[0] is not None)
    if mine[0] is None and real[0] is None:
        for shard in real[1].addressable_shards:
            box = mine[1].get(shard.device.id)
            answers.agree(f"PROC-9 box on device {shard.device.id}", box,
                          box_of_index(shard.index, shape))
            if box is not None and not np.array_equal(
                    np.asarray(shard.data), values[tuple(slice(a, b) for a, b in box)]):
                answers.problems.append(f"PROC-9 data on device {shard.device.id}")


def check_numpy_argument(answers: Answers, theirs: Any, values: np.ndarray) -> None:
    """RES-2: jit with this in_sharding and a numpy argument, lowered in this process."""
    import jax

    def f(x):
        return x * 2

    verdict = S.jit_call(S.describe_call(f, values, in_shardings=theirs))
    real = outcome(lambda: jax.jit(f, in_shardings=theirs).lower(values))
    refused = None if verdict.accepted else verdict.jax_error
    answers.agree("RES-2 jit with a numpy argument", refused, real[0])
    if not verdict.accepted:
        answers.agree("RES-2 rule", verdict.rule, "RES-2")
    answers.hit("RES-2", not verdict.accepted)


def check_jit_with_array(answers: Answers, ours: Any, array: Any, shape: tuple, pid: int,
                         values: np.ndarray) -> None:
    """PROC-10 (closing over the array) and jit's results across processes: the result of a
    call with the array as argument holds the shards PROC-2 gives the spec's out sharding."""
    import jax
    mine = spec_outcome(lambda: S.check_closed_over(ours, shape, pid))
    real = outcome(lambda: jax.jit(lambda: array * 2).lower())
    answers.agree("PROC-10 closing over the array", mine[0], real[0])
    answers.hit("PROC-10", mine[0] is not None)

    if not answers.example.get("run", True):
        return   # compiling and running costs most of an example: a quarter of them do

    def f(x):
        return x * 2

    # Its out_sharding given: left to the compiler, the spec does not know it before compiling.
    verdict = S.jit_call(S.describe_call(f, array, out_shardings=array.sharding))
    result = outcome(lambda: jax.jit(f, out_shardings=array.sharding)(array))
    answers.agree("jit with the array: refusal", None if verdict.accepted else
                  verdict.jax_error, result[0])
    if not verdict.accepted or result[0] is not None:
        return
    predicted = S.addressable_shards(verdict.out_shardings[0], shape, pid)
    held = [S.Shard(sh.device.id, box_of_index(sh.index, shape), sh.replica_id)
            for sh in result[1].addressable_shards]
    answers.agree("PROC-2 shards of jit's result", list(predicted), held)
    for shard, real_shard in zip(predicted, result[1].addressable_shards):
        wanted = values[tuple(slice(a, b) for a, b in shard.box)] * 2
        if not np.array_equal(np.asarray(real_shard.data), wanted):
            answers.problems.append(f"jit's result data on device {shard.device}")
    answers.hit("PROC-2 results", not predicted)


def check_allgather(answers: Answers, ours: Any, array: Any, shape: tuple, pid: int,
                    values: np.ndarray) -> None:
    """PROC-11: process_allgather of each process's host data, and of the global array when
    its mesh spans every process (the same question in every process: it is collective)."""
    import jax
    from jax.experimental import multihost_utils as hosts
    tiled, processes = answers.example.get("tiled", True), jax.process_count()

    def host_data(p):
        return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1000 * p

    mine = spec_outcome(lambda: S.gathered(shape, processes, tiled, pid))
    real = outcome(lambda: hosts.process_allgather(host_data(pid), tiled=tiled))
    answers.agree("PROC-11 host data refusal", mine[0], real[0])
    if mine[0] is None and real[0] is None:
        out_shape, boxes = mine[1]
        answers.agree("PROC-11 gathered shape", tuple(out_shape), tuple(real[1].shape))
        for p, box in enumerate(boxes):
            got = real[1][tuple(slice(a, b) for a, b in box)].reshape(shape)
            if not np.array_equal(got, host_data(p)):
                answers.problems.append(f"PROC-11 process {p}'s data not at {box}")
    answers.hit("PROC-11", mine[0] is not None)
    if len({d.process_index for d in array.sharding.device_set}) < processes:
        return
    mine = spec_outcome(lambda: S.gathered(shape, processes, tiled, pid, ours))
    real = outcome(lambda: hosts.process_allgather(array, tiled=tiled))
    answers.agree("PROC-11 global array refusal", mine[0], real[0])
    answers.hit("PROC-11", mine[0] is not None)
    if mine[0] is None and real[0] is None:
        answers.agree("PROC-11 gathered shape", tuple(mine[1][0]), tuple(real[1].shape))
        if not np.array_equal(np.asarray(real[1]), values):
            answers.problems.append("PROC-11 the gathered array is not the global value")


# --------------------------------------------------------------------------- jax.make_mesh

def _by_position() -> list:
    """The program's devices in jax.devices() order: the spec names a device by its place."""
    import jax
    return list(jax.devices())


def check_make_mesh(answers: Answers, pid: int) -> None:
    """PROC-12 and PROC-13: jax.make_mesh (or create_device_mesh) over every process's devices,
    its device order, and the coordinates and local mesh of this process."""
    import jax
    from jax.experimental import mesh_utils
    drawn = answers.example.get("make_mesh")
    if drawn is None:
        return
    sizes, exact = tuple(drawn["axis_sizes"]), drawn["exact"]
    names = tuple(f"m{i}" for i in range(len(sizes)))
    devices = _by_position()
    per = len(jax.local_devices())
    mine = spec_outcome(lambda: S.process_mesh(sizes, names, jax.process_count(), per,
                                               exact=exact))
    if exact:
        real = outcome(lambda: jax.sharding.Mesh(mesh_utils.create_device_mesh(sizes), names))
    else:
        real = outcome(lambda: jax.make_mesh(sizes, names))
    answers.agree("PROC-12 refusal class", mine[0], real[0])
    answers.hit("PROC-12", mine[0] is not None)
    if mine[0] is not None or real[0] is not None:
        return
    answers.agree("PROC-12 device order", list(mine[1].devices.id_tuple()),
                  [devices.index(d) for d in real[1].devices.flat])
    part = S.make_mesh_part(sizes, jax.process_count(), per, pid)
    coordinates = [tuple(int(i) for i in c) for c, d in np.ndenumerate(real[1].devices)
                   if d.process_index == pid]
    answers.agree("PROC-13 coordinates", list(part.coordinates), coordinates)
    if coordinates:
        block = outcome(lambda: real[1]._local_mesh(pid))[0] is None
        answers.agree("PROC-13 block (a local mesh)", part.block, block)
    answers.hit("PROC-13", not part.block)


# --------------------------------------------------------------------------- device_put

def _target_sharding(put: dict) -> Any:
    return jax_sharding({"devices": put["devices"], "axis_sizes": put["axis_sizes"],
                         "axis_names": put["axis_names"], "spec": put["spec"]})


def _crashes_reordering(source: Any, target: Any) -> bool:
    """Whether JAX 0.10.2 aborts a process here: a reshard over the same devices in another
    order, where some process holds none of them, kills that process (a failed check in
    the runtime's shard reordering, not an exception). Not asked."""
    import jax
    if {d.id for d in source.device_set} != {d.id for d in target.device_set}:
        return False
    owners = {d.process_index for d in source.device_set}
    same_order = (list(source._device_assignment) == list(target._device_assignment))
    return len(owners) < jax.process_count() and not same_order


def _breaks_uncommitted(target: Any) -> bool:
    """Whether JAX 0.10.2 returns a broken array here: an uncommitted array put on a fully
    replicated sharding over several processes gives a process that owns one device of it
    an array whose shards cannot be read (ValueError "... must have one shard each ...").
    Asked of no process (over every process the put is collective)."""
    import collections
    owned = collections.Counter(d.process_index for d in target.device_set)
    return target.is_fully_replicated and len(owned) > 1 and 1 in owned.values()


def check_device_put(answers: Answers, ours: Any, theirs: Any, array: Any, shape: tuple,
                     pid: int, values: np.ndarray) -> None:
    """PROC-14 to PROC-16: jax.device_put of host data, of the global array or of a
    single-device array, to a sharding, to one device, or with no target."""
    import jax
    put = answers.example.get("put")
    if put is None:
        return
    devices = _by_position()
    source_kind, to = put["source"], put["to"]
    own = values + pid if source_kind == "host-differ" else values
    host = put.get("host", "numpy")
    if source_kind == "single":
        single = jax.device_put(values, devices[put["single_device"]])
        x, source = single, S.from_jax(single.sharding)
    elif source_kind == "array":
        x, source = array, ours
    elif host == "scalar":   # a Python float: a value of shape ()
        own, shape = own.reshape(-1)[:1].reshape(()), ()
        x, source = float(own), None
    else:
        x = jax.numpy.asarray(own) if host == "uncommitted" else own
        source = None
    if to == "sharding":
        target = theirs if put["same"] else _target_sharding(put)
        if shape == ():
            target = jax.sharding.NamedSharding(target.mesh, jax.sharding.PartitionSpec())
        if source is not None and _crashes_reordering(x.sharding, target):
            return
        if host == "uncommitted" and source is None and _breaks_uncommitted(target):
            return
        spec_target = S.from_jax(target)
        if source is None:
            rule_id = "PROC-14"
            mine = spec_outcome(lambda: S.put_host_value(
                spec_target, shape, pid, jax.process_count(), source_kind == "host"))
        else:
            rule_id = "PROC-15"
            mine = spec_outcome(lambda: S.put_array(source, spec_target, shape, pid))
        real = outcome(lambda: jax.device_put(x, target))
    else:
        rule_id = "PROC-16"
        device = None if to == "none" else devices[put["device"]]
        if device is None and source is None:
            return   # host data with no target goes to the default device: not asked
        spec_device = None if device is None else S.Device(device.id, "cpu",
                                                           device.process_index)
        mine = spec_outcome(lambda: S.put_on_device(source, spec_device, shape, pid))
        real = outcome(lambda: jax.device_put(x, device))
    _compare_put(answers, rule_id, mine, real, x, shape, own)


def _compare_put(answers: Answers, rule_id: str, mine: tuple, real: tuple, x: Any,
                 shape: tuple, own: np.ndarray) -> None:
    """The spec's answer to a device_put (``mine``) against JAX's (``real``): the refusal's
    class and rule, else the argument itself or not, the shards held and their data."""
    answers.agree(f"{rule_id} refusal class", mine[0], real[0])
    answers.hit(rule_id, mine[0] is not None)
    if mine[0] is not None:
        if mine[1].rule != rule_id:
            answers.problems.append(f"{rule_id} refused by {mine[1].rule}: {mine[1]}")
        return
    if real[0] is not None:
        return
    placed, result = mine[1], real[1]
    answers.agree(f"{rule_id} the argument itself", placed.same, result is x)
    held = [S.Shard(sh.device.id, box_of_index(sh.index, shape), sh.replica_id)
            for sh in result.addressable_shards]
    answers.agree(f"{rule_id} shards", list(placed.shards), held)
    for shard, real_shard in zip(placed.shards, result.addressable_shards):
        if not np.array_equal(np.asarray(real_shard.data),
                              own[tuple(slice(a, b) for a, b in shard.box)]):
            answers.problems.append(f"{rule_id} data on device {shard.device}")


# --------------------------------------------------------------------------- donation

def _donating_call(kind: str, theirs: Any, shape: tuple) -> tuple:
    """The function of a drawn donating call, its out_shardings, and its results as
    (shape, dtype, JAX sharding) triples: a result like the argument, replicated, summed,
    of another dtype (as wide or not), with a unit dimension added (another shard shape,
    as many elements), flattened over the mesh's axes (as many elements per shard or not),
    or two results at once."""
    from jax.sharding import NamedSharding, PartitionSpec
    mesh = theirs.mesh
    replicated = NamedSharding(mesh, PartitionSpec())
    casts = {"cast": np.int32, "uint32": np.uint32, "narrow": np.float16,
             "bfloat16": "bfloat16", "int8": np.int8}
    if kind in casts:
        dtype = np.dtype(casts[kind])
        return (lambda a: (a * 2).astype(dtype), theirs, [(shape, dtype.name, theirs)])
    if kind == "same":
        return lambda a: a * 2, theirs, [(shape, "float32", theirs)]
    if kind == "replicated":
        return lambda a: a * 2, replicated, [(shape, "float32", replicated)]
    if kind == "sum":
        return lambda a: a.sum(), replicated, [((), "float32", replicated)]
    if kind == "expand":
        wider = NamedSharding(mesh, PartitionSpec(*theirs.spec, None))
        return lambda a: (a * 2)[..., None], wider, [((*shape, 1), "float32", wider)]
    if kind == "flatten":
        # Over every axis of the mesh where they divide the flat size, else over the axes
        # the argument is split over: as many elements per shard as the argument, or fewer.
        size = int(np.prod(shape))
        used = [a for entry in theirs.spec if entry is not None
                for a in ((entry,) if isinstance(entry, str) else entry)]
        axes = tuple(mesh.axis_names) if size % mesh.size == 0 else tuple(used)
        flat = NamedSharding(mesh, PartitionSpec(axes or None))
        return lambda a: (a * 2).reshape(-1), flat, [((size,), "float32", flat)]
    if kind == "pair":
        return (lambda a: (a.sum(), a * 2), (replicated, theirs),
                [((), "float32", replicated), (shape, "float32", theirs)])
    raise ValueError(f"no donating call {kind!r}")


def check_donation(answers: Answers, ours: Any, theirs: Any, shape: tuple, pid: int,
                   values: np.ndarray) -> None:
    """PROC-17 and PROC-18: a jit call that donates a fresh copy of the global array, whether
    this process's copy is deleted, and one use of it afterwards. Each call is a new
    function: calling the same jitted function again with a deleted array crashes JAX
    0.10.2's dispatch (a segmentation fault, not an exception), so it is not asked."""
    import warnings
    import jax
    from jax.sharding import NamedSharding, PartitionSpec
    drawn = answers.example.get("donate")
    if drawn is None:
        return
    fresh = jax.make_array_from_callback(shape, theirs, lambda index: values[index],
                                         dtype=np.float32)
    replicated = NamedSharding(theirs.mesh, PartitionSpec())
    ours_replicated = S.NamedSharding(ours.mesh, S.P())
    f, out, results = _donating_call(drawn["result"], theirs, shape)
    results = [(r_shape, dtype, S.from_jax(sharding)) for r_shape, dtype, sharding in results]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "Some donated buffers were not usable"
        jax.jit(f, donate_argnums=0, out_shardings=out)(fresh)
    deleted = S.donated(ours, shape, "float32", results, pid)
    answers.agree("PROC-17 deleted", deleted, fresh.is_deleted())
    answers.hit("PROC-17", not deleted)
    answers.hit(f"PROC-17 {drawn['result']}", not deleted)   # which calls were seen, each way
    operation = drawn["after"]
    if operation == "device_put" and ours_replicated == ours:
        operation = "device_put to its own sharding"
    mine = spec_outcome(lambda: S.check_not_deleted(deleted, ours, shape, operation, pid))
    if mine[0] is None and operation == "np.asarray":
        mine = spec_outcome(lambda: S.check_fetchable(ours, shape, pid))
    act = {
        "np.asarray": lambda: np.asarray(fresh),
        "addressable_shards": lambda: [np.asarray(s.data) for s in fresh.addressable_shards],
        "jit": lambda: jax.jit(lambda a: a + 1)(fresh),
        "device_put": lambda: jax.device_put(fresh, replicated),
        "device_put to its own sharding": lambda: jax.device_put(fresh, theirs) is fresh,
        "str": lambda: str(fresh),
    }[operation]
    real = outcome(act)
    answers.agree(f"PROC-18 {operation} after donation", mine[0], real[0])
    answers.hit("PROC-18", mine[0] is not None and mine[1].rule == "PROC-18")


def answer(example: dict, pid: int) -> Answers:
    """Every question of one example, asked of the spec and of JAX in this process."""
    import jax
    answers = Answers(example)
    theirs = jax_sharding(example)
    ours = S.from_jax(theirs)
    shape = tuple(example["shape"])
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    check_addressing(answers, ours, theirs, pid)
    array = jax.make_array_from_callback(shape, theirs, lambda index: values[index],
                                         dtype=np.float32)
    check_shards(answers, ours, array, shape, pid, values)
    check_fetch(answers, ours, array, shape, pid, values)
    if S.addressable_device_ids(ours, pid):
        # A process that owns no device of the sharding has no local data to place.
        check_process_local(answers, ours, theirs, shape, pid)
    check_host_local(answers, ours, theirs, array, shape, pid, values)
    check_single_device_arrays(answers, ours, theirs, shape, pid, values)
    check_numpy_argument(answers, theirs, values)
    check_jit_with_array(answers, ours, array, shape, pid, values)
    if example.get("run", True):
        check_allgather(answers, ours, array, shape, pid, values)
        check_donation(answers, ours, theirs, shape, pid, values)
    check_make_mesh(answers, pid)
    check_device_put(answers, ours, theirs, array, shape, pid, values)
    return answers


def serve(pid: int, port: int, processes: int, per_process: int) -> None:
    # The answers go out on a copy of the standard output; the descriptor itself is pointed
    # at the standard error, so that what the runtime prints there (gloo's "[Gloo] Rank 0
    # is connected ...") cannot land inside an answer's line.
    answers_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import jax
    jax.config.update("jax_num_cpu_devices", per_process)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=processes, process_id=pid,
                               initialization_timeout=120)
    with contextlib.ExitStack() as plants:
        for planted_rule in filter(None, os.environ.get(PLANTED_ENV, "").split(",")):
            from shardlaw.campaign_plugin import planted
            plants.enter_context(planted(planted_rule))
        say(answers_out, "READY")
        answer_lines(pid, answers_out)
    jax.distributed.shutdown()


def say(out: Any, line: str) -> None:
    out.write(line + "\n")   # one write: the line is never split
    out.flush()


def answer_lines(pid: int, out: Any) -> None:
    """One answer a line of standard input, up to STOP."""
    for line in sys.stdin:
        if line.strip() == "STOP":
            break
        try:
            seen = answer(json.loads(line), pid)
            reply = {"problems": seen.problems, "hits": seen.hits}
        except Exception:  # noqa: BLE001 - reported to the parent as a disagreement
            reply = {"problems": ["crashed: " + traceback.format_exc()[-2500:]], "hits": []}
        say(out, "ANSWER " + json.dumps(reply))


if __name__ == "__main__":
    serve(*(int(a) for a in sys.argv[1:5]))

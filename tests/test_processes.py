"""Addressable devices per process (DEV-2), against real JAX's single process and as a law;
jax.make_mesh's process order (PROC-12, PROC-13) as a law over any number of processes."""

import itertools

import jax
from hypothesis import given, strategies as st

import shardlaw.spec as S
from shardlaw.properties.registry import checks
from shardlaw.properties import strategies as ST


@checks("DEV-2")
@given(st.data())
def test_addressable_devices_partition_the_device_set(data):
    """Every device of a sharding is addressable by exactly its own process."""
    mesh = data.draw(ST.meshes(max_devices=8))
    per = data.draw(st.sampled_from([None, 1, 2, 4]))
    mesh = S.Mesh(mesh.axis_sizes, mesh.axis_names,
                  S.DeviceList.of_ids(mesh.devices.id_tuple(), devices_per_process=per),
                  mesh.axis_types)
    sharding = S.NamedSharding(mesh, S.P())
    processes = range(mesh.size if per else 1)
    seen = [d for p in processes for d in S.addressable_device_ids(sharding, p)]
    assert sorted(seen) == sorted(mesh.devices.ids())
    for p in processes:
        for d in S.addressable_device_ids(sharding, p):
            assert d // (per or mesh.size or 1) == p or per is None


@checks("DEV-2")
def test_addressable_devices_agree_with_jax_single_process():
    """In one JAX process every device is addressable; a second process addresses none."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    jax_sharding = NamedSharding(Mesh(devices, ("x", "y")), PartitionSpec("x"))
    ours = S.from_jax(jax_sharding)
    assert set(S.addressable_device_ids(ours, jax.process_index())) == {
        d.id for d in jax_sharding.addressable_devices}
    assert S.addressable_device_ids(ours, jax.process_index() + 1) == ()


@checks("DEV-2")
def test_addressable_devices_reject_abstract_meshes():
    """An abstract mesh has no devices to address: the rule says so instead of guessing."""
    abstract = S.NamedSharding(S.AbstractMesh((2, 4), ("x", "y")), S.P("x"))
    try:
        S.addressable_device_ids(abstract, 0)
    except S.Rejection as e:
        assert e.rule == "DEV-1" and "abstract mesh" in str(e)
    else:
        raise AssertionError("an abstract mesh has no addressable devices")


@checks("PROC-12", "PROC-13")
@given(st.data())
def test_make_mesh_parts_are_blocks_exactly_where_a_local_mesh_exists(data):
    """PROC-13's closed form (whole trailing axes and one run) is PROC-6's local mesh over
    PROC-12's device order, for any number of processes and devices per process; the parts
    of all processes are the mesh's positions, each once, in process order."""
    processes, per = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 8))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3).filter(
        lambda s: S.Mesh.iota(tuple(s), tuple("abc"[:len(s)])).size <= processes * per))
    mesh = S.process_mesh(sizes, tuple("abc"[:len(sizes)]), processes, per)
    seen = []
    for p in range(processes):
        part = S.make_mesh_part(sizes, processes, per, p)
        seen.extend(part.coordinates)
        if part.coordinates:
            try:
                S.local_mesh(mesh, p)
                block = True
            except S.Rejection as refused:
                assert refused.rule == "PROC-6"
                block = False
            assert part.block == block, (sizes, processes, per, p)
    every = [tuple(c) for c in itertools.product(*(range(n) for n in sizes))]
    assert seen == every

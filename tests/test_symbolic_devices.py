"""A concrete iota mesh keeps its device assignment symbolic through a whole jit call."""

import shardlaw.spec as S
from shardlaw.spec import Arg, Call, JitOptions, Mesh, NamedSharding, Out, P
from shardlaw.spec.jit.call import DeviceIds

N = 1 << 20


def test_a_million_device_assignment_is_never_listed():
    mesh = Mesh.iota((N // 8, 8), ("data", "model"))
    x = Arg.committed((N, 64), NamedSharding(mesh, P("data", "model")))
    verdict = S.jit_call(Call(args=(x,), outputs=Out((N, 64)), devices=N,
                              options=JitOptions(in_shardings=(NamedSharding(mesh, P("data")),),
                                                 out_shardings=NamedSharding(mesh, P()))))
    assert verdict.rule == "RES-4"
    ok = S.jit_call(Call(args=(x,), outputs=Out((N, 64)), devices=N))
    ids = ok.device_assignment
    assert isinstance(ids, DeviceIds) and ids.devices.iota is not None
    assert len(ids) == N and ids[0] == 0 and ids[-1] == N - 1 and ids[12345] == 12345
    assert ids == DeviceIds(mesh.devices) and ok.num_devices == N


def test_device_ids_compare_with_tuples_as_before():
    ids = DeviceIds(S.DeviceList.of_ids([3, 1, 2]))
    assert ids == (3, 1, 2) and (3, 1, 2) == ids and ids != (1, 2, 3) and ids != [3, 1, 2]
    assert hash(ids) == hash((3, 1, 2)) and list(ids) == [3, 1, 2] and repr(ids) == "(3, 1, 2)"

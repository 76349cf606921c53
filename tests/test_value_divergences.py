"""JAX's side of the deliberate divergences, observed again so the docs cannot rot.

The "Deliberate divergences" section of ``docs/values.rst`` quotes what jax 0.10.2 does on
inputs the spec refuses. Every quoted call is listed here with the outcome the docs show
for it; one test runs each call against JAX and another checks that the docs quote both
the call and the outcome. A third checks that the spec refuses the same inputs with the
rule the docs name.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402

from shardlaw import spec  # noqa: E402
from shardlaw.spec.core.rules import Rejection  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "values.rst"
SECTION = "Deliberate divergences"


class Observed(NamedTuple):
    """A call as the docs write it, and what jax 0.10.2 gives: the value's repr, or
    ``ErrorClass: first line of the message``."""

    rule: str
    call: str
    outcome: str


_REFUSED = ("INVALID_ARGUMENT: `reshape_dims` and `transpose_perm` should have the same size, "
            "saw [2,4] v.s. [1]")

OBSERVED = [
    # VAL-1: mesh axis sizes of zero or below
    Observed("VAL-1", "AbstractMesh((0, 4), ('x', 'y')).size", "0"),
    Observed("VAL-1", "AbstractMesh((-1, 4), ('x', 'y')).size", "-4"),
    Observed("VAL-1", "NamedSharding(AbstractMesh((-1, 4), ('x', 'y')), P('x')).shard_shape((8,))",
             "(-8,)"),
    Observed("VAL-1", "NamedSharding(AbstractMesh((-1, 4), ('x', 'y')), P('y'))"
                      "._to_xla_hlo_sharding(1)",
             "{devices=[4,-1]<=[-1,4]T(1,0) last_tile_dim_replicate}"),
    Observed("VAL-1", "NamedSharding(AbstractMesh((-2, 4), ('x', 'y')), P('x'))"
                      "._to_xla_hlo_sharding(1)", "MemoryError: std::bad_alloc"),
    Observed("VAL-1", "Mesh(np.empty((0, 4), dtype=object), ('x', 'y'))",
             "Mesh(axis_sizes=(), axis_names=())"),
    # VAL-3: duplicate axis names
    Observed("VAL-3", "Mesh(ids([[0, 1, 2, 3], [4, 5, 6, 7]]), ('x', 'x')).shape",
             "OrderedDict([('x', 4)])"),
    Observed("VAL-3", "Mesh(ids([[0, 1, 2, 3], [4, 5, 6, 7]]), ('x', 'x')).size", "8"),
    Observed("VAL-3", "AbstractMesh((2, 4), ('x', 'x')).shape", "OrderedDict([('x', 4)])"),
    Observed("VAL-3", "NamedSharding(Mesh(ids([[0, 1, 2, 3], [4, 5, 6, 7]]), ('x', 'x')), P())"
                      "._to_xla_hlo_sharding(1)", "{replicated}"),
    Observed("VAL-3", "NamedSharding(Mesh(ids([[0, 1, 2, 3], [4, 5, 6, 7]]), ('x', 'x')), P('x'))"
                      ".shard_shape((8,))", "JaxRuntimeError: " + _REFUSED),
    Observed("VAL-3", "jax.device_put(np.zeros(8), NamedSharding(Mesh(ids([[0, 1, 2, 3], "
                      "[4, 5, 6, 7]]), ('x', 'x')), P('x')))", "JaxRuntimeError: " + _REFUSED),
    # VAL-5: a device twice
    Observed("VAL-5", "NamedSharding(Mesh(ids([[0, 1], [0, 1]]), ('x', 'y')), P('x')).num_devices",
             "4"),
    Observed("VAL-5", "len(NamedSharding(Mesh(ids([[0, 1], [0, 1]]), ('x', 'y')), P('x'))"
                      ".device_set)", "2"),
    Observed("VAL-5", "by_id(NamedSharding(Mesh(ids([[0, 1], [0, 1]]), ('x', 'y')), P('x'))"
                      ".devices_indices_map((4,)))",
             "{0: (slice(2, 4, None),), 1: (slice(2, 4, None),)}"),
    Observed("VAL-5", "jax.device_put(np.zeros(4), NamedSharding(Mesh(ids([[0, 1], [0, 1]]), "
                      "('x', 'y')), P('x')))",
             "ValueError: safe_zip() argument 1 has length 4 but argument 0 has length 2. "
             "All lengths: (2, 4)"),
    # VAL-9: a layout that is not an order of the dimensions
    Observed("VAL-9", "Layout((0, 0))",
             "Layout(major_to_minor=(0, 0), tiling=None, sub_byte_element_size_in_bits=0)"),
    Observed("VAL-9", "jax.jit(lambda a: a, in_shardings=Format(Layout((0, 0)), "
                      "SingleDeviceSharding(jax.devices()[0])))(np.zeros((2, 2)))",
             "JaxRuntimeError: INVALID_ARGUMENT: during context [hlo verifier]: layout "
             "minor_to_major field has duplicate values: {0, 0}; shape: f32[2,2]"),
    # LOW-1: lowering a value that is not a sharding
    Observed("LOW-1", "'sharding'._to_xla_hlo_sharding(1)",
             "AttributeError: 'str' object has no attribute '_to_xla_hlo_sharding'"),
    Observed("LOW-1", "jax.jit(lambda a: a, in_shardings='sharding')",
             "TypeError: in_shardings leaf specifications are expected to be PartitionSpec "
             "instances or None, but got sharding"),
    # DIV-2: the tile counts of a manual sharding
    Observed("DIV-2", "get_num_ways_dim_sharded(HloSharding.manual())", "AssertionError"),
    Observed("DIV-2", "get_num_ways_dim_sharded(HloSharding.iota_tile([2, 4], "
                      "subgroup_types=[OpSharding.Type.MANUAL]))",
             "NotImplementedError: Unhandled OpSharding type: {devices=[2,4]<=[8] "
             "last_tile_dims={manual}}. Please open a bug report!"),
    # IDX-2: the replica id of a device outside the sharding
    Observed("IDX-2", "device_replica_id_map(SingleDeviceSharding(jax.devices()[3]), (4,))"
                      "[jax.devices()[2]]", "KeyError: CpuDevice(id=2)"),
    # HLO-3: printing a value that is not an HLO sharding
    Observed("HLO-3", "HloSharding.__repr__('{replicated}')",
             "TypeError: __repr__(): incompatible function arguments. The following argument "
             "types are supported:"),
    Observed("HLO-3", "str('{replicated}')", "'{replicated}'"),
]

# Calls that kill the process (a signal inside XLA): run in a child process.
KILLED = [
    Observed("VAL-1", "NamedSharding(AbstractMesh((0, 4), ('x', 'y')), P('x'))"
                      "._to_xla_hlo_sharding(1)", "SIGFPE"),
]

# The spec refuses what the docs show JAX accepting, with the rule the docs name.
SPEC_REFUSES = [
    ("VAL-1", "AbstractMesh((0, 4), ('x', 'y'))"),
    ("VAL-1", "AbstractMesh((-1, 4), ('x', 'y'))"),
    ("VAL-3", "Mesh.iota((2, 4), ('x', 'x'))"),
    ("VAL-3", "AbstractMesh((2, 4), ('x', 'x'))"),
    ("VAL-5", "Mesh((2, 2), ('x', 'y'), [0, 1, 0, 1])"),
    ("VAL-8", "to_hlo('sharding', 1)"),
    ("VAL-9", "Layout((0, 0))"),
    ("IDX-1", "tiles_per_dimension(GSPMDSharding(range(8), '{manual}'), 1)"),
    ("IDX-1", "replica_id(SingleDeviceSharding(3), (4,), 2)"),
    ("HLO-2", "hlo_text('{replicated}')"),
]


def _jax_namespace() -> dict:
    from jax._src.lib import xla_client as xc
    from jax._src.op_shardings import get_num_ways_dim_sharded
    from jax._src.sharding_impls import device_replica_id_map
    from jax.experimental.layout import Format, Layout
    from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    devices = np.empty(len(jax.devices()), dtype=object)
    devices[:] = sorted(jax.devices(), key=lambda d: d.id)
    return {
        "jax": jax, "np": np, "Mesh": Mesh, "AbstractMesh": AbstractMesh,
        "NamedSharding": NamedSharding, "P": PartitionSpec,
        "SingleDeviceSharding": SingleDeviceSharding, "HloSharding": xc.HloSharding,
        "OpSharding": xc.OpSharding, "get_num_ways_dim_sharded": get_num_ways_dim_sharded,
        "device_replica_id_map": device_replica_id_map, "Format": Format, "Layout": Layout,
        # JAX's CPU devices with these ids, in an array of the same shape
        "ids": lambda rows: devices[np.array(rows)],
        # a devices_indices_map keyed by device id
        "by_id": lambda mapping: {d.id: index for d, index in mapping.items()},
    }


def _outcome(call: str, namespace: dict) -> str:
    try:
        value = eval(call, namespace)  # noqa: S307 - the calls are the fixed list above
    except Exception as e:  # noqa: BLE001 - the exception is the observation
        lines = str(e).splitlines()
        return f"{type(e).__name__}: {lines[0]}" if lines and lines[0] else type(e).__name__
    return repr(value)


@pytest.mark.parametrize("observed", OBSERVED, ids=lambda o: f"{o.rule} {o.call[:40]}")
def test_jax_still_does_what_the_docs_say(observed):
    assert _outcome(observed.call, _jax_namespace()) == observed.outcome


@pytest.mark.parametrize("observed", KILLED, ids=lambda o: f"{o.rule} {o.call[:40]}")
def test_jax_still_dies_where_the_docs_say(observed):
    program = ("import jax\n"
               "jax.config.update('jax_num_cpu_devices', 8)\n"
               "from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P\n"
               f"{observed.call}\n")
    child = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=300)
    assert child.returncode == -getattr(signal, observed.outcome), child.stderr[-2000:]


def _section_text() -> str:
    text = DOCS.read_text()
    start = text.index(SECTION)
    return " ".join(text[start:].split())


def test_the_docs_quote_every_observation():
    section = _section_text()
    unquoted = [f"{o.call} -> {o.outcome}" for o in OBSERVED + KILLED
                if " ".join(o.call.split()) not in section
                or " ".join(o.outcome.split()) not in section]
    assert not unquoted, f"{DOCS.name} does not quote: {unquoted}"


@pytest.mark.parametrize("rule, call", SPEC_REFUSES)
def test_the_spec_refuses_with_the_rule_the_docs_name(rule, call):
    with pytest.raises(Rejection) as refused:
        eval(call, vars(spec))  # noqa: S307 - the calls are the fixed list above
    assert refused.value.rule == rule
    assert re.search(rf"\b{rule}\b", _section_text())

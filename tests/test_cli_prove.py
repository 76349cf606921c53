"""``shardlaw prove``: verdicts, pictures, the sharding text and JSON forms, bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest
from hypothesis import assume, given

pytest.importorskip("z3")

from shardlaw.cli import main  # noqa: E402
from shardlaw.cli_prove import (  # noqa: E402
    ShardingTextError, parse_sharding, placement_grid, sharding_from_json, sharding_text,
    sharding_to_json,
)
from shardlaw.properties.strategies import shardings  # noqa: E402
from shardlaw.spec import UNCONSTRAINED, Iota, Mesh, NamedSharding, P, Tiled  # noqa: E402

MESH = "mesh=2x4:x,y"


def prove(capsys, *argv):
    status = main(["prove", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_proof_exits_0(capsys):
    status, out, _ = prove(capsys, f"{MESH} spec=y,x",
                           "mesh=4x2:y,x devices=<=[2,4]T(1,0) spec=y,x", "--shape", "8,8")
    assert status == 0
    assert ("proved: every device holds the same block under A and B, in the same memory "
            "kind, for shape (8, 8) (enumeration of a small mesh's symbolic orders; ") in out
    assert "JAX-equivalent (EQ-1, Sharding.is_equivalent_to): no" in out


def test_a_counterexample_exits_1_and_draws_both_placements(capsys, tmp_path):
    svg = tmp_path / "placements.svg"
    status, out, _ = prove(capsys, f"{MESH} spec=x", f"{MESH} spec=y", "--shape", "8",
                           "--svg", str(svg))
    assert status == 1
    assert "not equivalent: device" in out
    device = int(out.split("not equivalent: device ")[1].split()[0])
    assert f"[{device}]" in out  # the device is marked in both grids
    assert "A: device ids per block" in out and "B: device ids per block" in out
    root = ElementTree.fromstring(svg.read_text())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any(f"device {device}:" in (t or "") for t in texts)
    reds = [r for r in root.iter("{http://www.w3.org/2000/svg}rect")
            if r.get("stroke") == "#c00000"]
    assert len(reds) == 2  # one block of the device in each placement


def test_a_proof_writes_a_picture_of_the_shared_placement(capsys, tmp_path):
    svg = tmp_path / "same.svg"
    status, _, _ = prove(capsys, f"{MESH} spec=x,y", "gspmd:{devices=[2,4]<=[8]}",
                         "--shape", "8,8", "--svg", str(svg))
    assert status == 0
    assert len(list(ElementTree.fromstring(svg.read_text()).iter(
        "{http://www.w3.org/2000/svg}rect"))) == 16


def test_memory_kinds_that_differ_are_named(capsys, tmp_path):
    """Issue 25: the same blocks in pinned_host memory were "proved" alike."""
    svg = tmp_path / "memory.svg"
    status, out, _ = prove(capsys, f"{MESH} spec=x", f"{MESH} spec=x memory=pinned_host",
                           "--shape", "8,8", "--svg", str(svg))
    assert status == 1
    assert ("not equivalent: A holds its blocks in device memory and B in pinned_host memory; "
            "device 0 holds [0:4, 0:8] under A and [0:4, 0:8] under B") in out
    assert "memory: device under A, pinned_host under B" in svg.read_text()
    status, out, _ = prove(capsys, f"{MESH} spec=x memory=pinned_host",
                           "gspmd:{devices=[2,1,4]<=[8] last_tile_dim_replicate} "
                           "memory=pinned_host", "--shape", "8,8", "--json")
    assert status == 0 and json.loads(out)["verdict"] == "proved"
    status, out, _ = prove(capsys, f"{MESH} spec=x", f"{MESH} spec=x memory=pinned_host",
                           "--rank", "2", "--max-dim", "64", "--json")
    verdict = json.loads(out)
    assert status == 1 and (verdict["memory_kind_a"], verdict["memory_kind_b"]) == (
        "device", "pinned_host")


def test_every_shape_with_json_output(capsys):
    status, out, _ = prove(capsys, f"{MESH} spec=x", f"{MESH} spec=", "--rank", "1",
                           "--max-dim", "64", "--json")
    assert status == 1
    verdict = json.loads(out)
    assert verdict["verdict"] == "counterexample" and verdict["shape"][0] > 0
    status, out, _ = prove(capsys, f"{MESH} spec=(x,y)", "mesh=8:z spec=z", "--rank", "2",
                           "--max-dim", "1024", "--json")
    assert status == 0 and json.loads(out)["verdict"] == "proved"


def test_json_shardings_are_read(capsys):
    a = json.dumps(sharding_to_json(NamedSharding(Mesh.iota((2, 4), ("x", "y")), P("x"))))
    status, out, _ = prove(capsys, a, f"{MESH} spec=x", "--shape", "8")
    assert status == 0 and "proved" in out


@pytest.mark.parametrize("argv, shows", [
    (["mesh=2x4 spec=x", f"{MESH} spec=x", "--shape", "8"], "cannot read A: mesh= is"),
    ([f"{MESH} spec=x", "bogus", "--shape", "8"], "cannot read B"),
    ([f"{MESH} spec=z", f"{MESH} spec=x", "--shape", "8"], "[NS-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=y", "--shape", "6"], "[DIV-1]"),
    ([f"{MESH} spec=x", f"{MESH} spec=y"], "give --shape, or --rank and --max-dim"),
    ([f"{MESH} spec=x", f"{MESH} spec=y", "--shape", "8", "--rank", "1", "--max-dim", "8"],
     "[SMT-1]"),
    (['{"type": "Mesh"}', f"{MESH} spec=y", "--shape", "8"], "[VEC-1]"),
    (["gspmd:{replicated}", f"{MESH} spec=y", "--shape", "8"], "names no device count"),
])
def test_bad_input_exits_2_with_a_reason(capsys, argv, shows):
    status, out, err = prove(capsys, *argv)
    assert status == 2 and not out
    assert shows in err and "Traceback" not in err


def test_unknown_exits_3(capsys):
    status, out, _ = prove(capsys, "mesh=4:x devices=1,0,2,3 spec=x",
                           "mesh=4:x devices=0,1,3,2 spec=x", "--shape", "4", "--timeout", "1e-9")
    assert status == 3 and out.count("unknown for shape (4,)") == 1
    assert "time limit" in out


def test_large_placements_are_not_drawn():
    s = parse_sharding("mesh=1024:x spec=x")
    assert placement_grid(s, (1024,)) == ["(not drawn: 1024 devices)"]


def test_grids_of_scalars_and_high_ranks():
    assert placement_grid(parse_sharding(f"{MESH}"), ())[0].startswith("scalar")
    lines = placement_grid(parse_sharding(f"{MESH} spec=x,_,y"), (2, 2, 4), highlight=5)
    assert "[5]" in "\n".join(lines) and lines[-1] == "(dimensions 2..2 are not drawn)"


# --------------------------------------------------------------------------- text and JSON

def _one_device_list(s) -> bool:
    """An explicit tile assignment over one device prints as {devices=[1]0}, which XLA's
    parser (and so HLO-2) refuses: neither form can carry it."""
    hlo = getattr(s, "hlo", None)
    return isinstance(hlo, Tiled) and hlo.num_devices == 1 and not isinstance(hlo.assignment,
                                                                              Iota)


def _writable(s) -> bool:
    """What the text form carries: no UNCONSTRAINED entries, no unreduced or reduced axes."""
    spec = getattr(s, "spec", None)
    return not _one_device_list(s) and (spec is None or (
        UNCONSTRAINED not in spec.partitions and not spec.unreduced and not spec.reduced))


@given(shardings())
def test_the_text_form_reads_back(s):
    assume(_writable(s))
    assert parse_sharding(sharding_text(s)) == s


@given(shardings())
def test_the_json_form_reads_back(s):
    assume(not _one_device_list(s))
    assert sharding_from_json(sharding_to_json(s)) == s
    assert parse_sharding(json.dumps(sharding_to_json(s))) == s


@pytest.mark.parametrize("text", [
    "", "mesh=2x4:x,y spec=(x", "mesh=2x4:x,y spec=x,y extra=1", "single:", "single:1,2",
    "mesh=2x4:x,y types=sideways", "mesh=2x4:x,y devices=a,b", "mesh=2x4:x,y spec=x y",
    "gspmd:{devices=[2]<=[2]} devices=<=[x]",
])
def test_unreadable_text_is_a_sharding_text_error(text):
    with pytest.raises(ShardingTextError):
        parse_sharding(text)


def test_the_prove_command_is_listed(capsys):
    assert main(["--help"]) == 0
    assert "prove" in capsys.readouterr().out

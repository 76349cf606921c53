"""The bounded model check (properties/model_check.py), its classes, vectors and costs.

In the ``ci`` profile the check covers up to 3 devices and rank 2 (about half a minute);
with ``HYPOTHESIS_PROFILE=deep`` it covers the default space (up to 4 devices, rank 2),
which takes many minutes. The divergence vectors are re-checked against the spec, the
solver, the docs page and (when JAX is installed) JAX's measured costs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("z3")

from shardlaw.properties import model_check as M  # noqa: E402
from shardlaw.properties.registry import checks  # noqa: E402
from shardlaw.spec import (  # noqa: E402
    GSPMDSharding, Mesh, NamedSharding, P, SingleDeviceSharding, devices_indices_map,
    jax_equivalent, placement_equivalent,
)
from shardlaw.spec.prove.smt import Proved, prove_equivalent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VECTORS = sorted((ROOT / "vectors" / "equivalence").glob("*.json"))
DEEP = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "deep"
SPACE = M.Space() if DEEP else M.Space(max_devices=3, max_rank=2, max_axes=2)


@checks("SMT-1", "EQ-1", "EQ-2", "IDX-1", "LOW-1")
def test_bounded_model_check():
    """Over every pair of the space: EQ-2, the solver and enumeration agree, and no pair is
    JAX-equivalent without being placement-equivalent."""
    report = M.check(SPACE)
    print(report.summary())
    assert not report.findings, "\n".join(map(str, report.findings[:10]))
    assert report.unknown == 0
    assert report.pairs > 100_000 and report.solver_pairs > 1_000
    # The space is large enough to reach the classes that need at most 3 devices.
    for slug in ("zero-size-dimension", "replicated-on-different-orders",
                 "compensated-device-order", "renamed-axes", "size-one-axes",
                 "spec-spelling", "sharding-type"):
        assert report.classes[slug] > 0, slug
    assert report.classes["unclassified"] == 0


def test_the_space_is_what_it_says():
    space = M.Space(max_devices=2, max_rank=1, max_axes=2)
    named = list(space.named(1))
    # meshes (1,), (1, 1), (2,), (1, 2), (2, 1) over both orders, names from two alphabets
    assert NamedSharding(Mesh((2,), ("x",), [1, 0]), P("x")) in named
    assert NamedSharding(Mesh.iota((2,), ("a",)), P("a")) in named
    assert NamedSharding(Mesh.iota((1, 2), ("x", "y")), P(("y", "x"))) in named
    assert NamedSharding(Mesh.iota((1, 2), ("x", "y")), P(None)) in named
    firsts = space.shardings(1, ordered_only=True)
    assert all(list(s.device_list.ids()) == sorted(s.device_list.ids()) for s in firsts)
    assert SingleDeviceSharding(1) in space.shardings(1)
    assert space.shapes(2) == [(2, 2), (0, 2), (2, 0)]


MESH = Mesh.iota((2, 2), ("x", "y"))


@pytest.mark.parametrize("a, b, shape, slug", [
    (NamedSharding(MESH, P("x")), NamedSharding(MESH, P("y")), (0,), "zero-size-dimension"),
    (NamedSharding(MESH, P()), GSPMDSharding([3, 2, 1, 0], "{replicated}"), (4,),
     "replicated-on-different-orders"),
    (NamedSharding(MESH, P("y")), NamedSharding(Mesh((2, 2), ("x", "y"), [0, 3, 2, 1]), P("y")),
     (4,), "copies-listed-in-another-order"),
    (NamedSharding(MESH, P("y", "x")), NamedSharding(Mesh((2, 2), ("y", "x"), [0, 2, 1, 3]),
                                                     P("y", "x")), (4, 4),
     "compensated-device-order"),
    (NamedSharding(MESH, P("x", "y")), GSPMDSharding(range(4), "{devices=[2,2]<=[4]}"), (4, 4),
     "sharding-type"),
    (NamedSharding(MESH, P("x")), NamedSharding(Mesh.iota((2, 2), ("a", "b")), P("a")), (4,),
     "renamed-axes"),
    (NamedSharding(MESH, P("x")), NamedSharding(Mesh.iota((2, 1, 2), ("x", "o", "y")), P("x")),
     (4,), "size-one-axes"),
    (NamedSharding(MESH, P("x")), NamedSharding(MESH, P("x", None)), (4, 4), "spec-spelling"),
    (NamedSharding(MESH, P(("x", "y"))), NamedSharding(Mesh.iota((4,), ("z",)), P("z")), (4,),
     "reshaped-mesh"),
    (NamedSharding(MESH, P("x")), NamedSharding(Mesh.iota((2, 2), ("a", "b")), P("a", None)),
     (4, 4), "several-rewrites"),
    (GSPMDSharding(range(4), "{replicated}"), GSPMDSharding(range(4), "{maximal device=2}"),
     (4,), "hlo-spelling"),
])
def test_classify(a, b, shape, slug):
    assert placement_equivalent(a, b, shape)
    assert M.classify(a, b, shape) == slug
    assert M.CLASSES[slug][1] == ("==" if jax_equivalent(a, b, len(shape)) else "is_equivalent_to")


# --------------------------------------------------------------------------- vectors

def test_every_class_found_has_a_vector():
    assert {p.stem for p in VECTORS} >= {"zero-size-dimension", "replicated-on-different-orders",
                                         "compensated-device-order", "renamed-axes"}
    assert {p.stem for p in VECTORS} <= set(M.CLASSES)


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vectors_hold_in_the_spec_and_the_solver(path):
    data, a, b, shape = M.read_vector(path)
    assert data["format"] == M.VECTOR_FORMAT and data["version"] == M.VECTOR_VERSION
    assert data["class"] == path.stem == M.classify(a, b, shape)
    assert placement_equivalent(a, b, shape) and isinstance(prove_equivalent(a, b, shape), Proved)
    assert data["expect"]["jax_equivalent"] == jax_equivalent(a, b, len(shape))
    placement = {d: tuple(map(tuple, box)) for d, box in data["expect"]["placement"]}
    assert placement == devices_indices_map(a, shape) == devices_indices_map(b, shape)
    assert M.vector(path.stem, a, b, shape, data["jax_costs"]) == data


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_docs_page_shows_each_vector_and_its_costs(path):
    page = (ROOT / "docs" / "divergences.rst").read_text(encoding="utf-8")
    data = M.read_vector(path)[0]
    assert f"vectors/equivalence/{path.stem}.json" in page
    assert M.cost_line(data["jax_costs"]) in page, M.cost_line(data["jax_costs"])


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_the_cost_table_row_matches_the_vector(path):
    lines = (ROOT / "docs" / "divergences.rst").read_text(encoding="utf-8").splitlines()
    costs = M.read_vector(path)[0]["jax_costs"]
    start = lines.index(f"   * - ``{path.stem}``")
    cells = [line.strip()[2:] for line in lines[start + 1:start + 7]]
    assert cells == [str(costs[k]) for k in ("is_equivalent_to", "equal", "recompiles",
                                             "mixed_arguments", "aot_call", "in_shardings")]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_costs_hold_in_jax(path):
    """The costs recorded in each vector (and so on the docs page) are what JAX 0.10.2 does."""
    pytest.importorskip("jax")
    data, a, b, shape = M.read_vector(path)
    assert M.jax_costs(a, b, shape) == data["jax_costs"]


def test_explicit_tile_assignments_cannot_reach_jit():
    """docs/divergences.rst: written with GSPMDShardings and an explicit tile assignment, a
    compensated device order cannot even be passed to a jitted function in JAX 0.10.2."""
    pytest.importorskip("jax")
    a = GSPMDSharding([0, 1], "{devices=[2]1,0}")
    b = GSPMDSharding([1, 0], "{devices=[2]<=[2]}")
    assert M.classify(a, b, (4,)) == "compensated-device-order"
    costs = M.jax_costs(a, b, (4,))
    # jit(f)(x) and jit(f).lower(x) fail for the array placed by ``a`` alone.
    assert costs["recompiles"] == "not measured: jit fails (no-shardy-form)"
    assert costs["aot_call"] == "no-shardy-form"

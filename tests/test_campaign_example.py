"""The user's example (examples/transformer_plan.py) runs in the default test run, ci size.

It checks a transformer's FSDP + tensor-parallel plan with the specification alone over
2-D and 3-D meshes of 8 to 65,536 chips; here its property runs with the profile's number of
examples, and the mesh it reports as breaking a wider plan is the one the rules refuse.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardlaw.spec import AbstractMesh

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "transformer_plan.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("transformer_plan", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_the_plan_fits_every_mesh_of_the_family(example):
    example.test_the_plan_fits_every_mesh()


def test_the_smallest_and_largest_meshes_are_checked(example):
    small = example.check_plan(AbstractMesh((8, 1), ("fsdp", "model")))
    large = example.check_plan(AbstractMesh((8, 1024, 8), ("data", "fsdp", "model")))
    assert small["devices"] == 8 and large["devices"] == 65536
    assert small["GiB per chip"] > large["GiB per chip"]


def test_a_wider_plan_is_broken_by_a_mesh_the_rules_refuse(example):
    mesh = example.breaking_mesh(example.MAX_DEVICES)
    why = example.refusal(mesh)
    assert mesh.axis_size("fsdp") > example.MODEL.d_model and why.startswith("[DIV-1]")


@pytest.mark.parametrize("profile, examples", [("deep", "5,000"), ("shardlaw-fresh", "200")])
def test_the_example_runs_as_a_script_under_the_documented_profiles(tmp_path, profile, examples):
    """``HYPOTHESIS_PROFILE=deep python examples/transformer_plan.py``, as its docstring says,
    from a folder that is not the checkout: outside pytest no conftest registers profiles."""
    run = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "HYPOTHESIS_PROFILE": profile})
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("Hypothesis profile") and f"{examples} examples" in first
    assert "breaks the plan" in run.stdout


def test_the_example_names_the_profiles_when_the_name_is_unknown(tmp_path):
    run = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "HYPOTHESIS_PROFILE": "dep"})
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "'dep' names no profile" in run.stderr and "deep" in run.stderr

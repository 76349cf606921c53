"""The library steps example (examples/library_steps.py) runs in the default test run: a
flax NNX step and an optax step over a scanned-layer model, read with describe_program on
8 real devices and on abstract meshes up to 65,536 chips, each answer held to JAX's own."""

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "library_steps.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("library_steps", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mesh", [(2, 4), (64, 8), (256, 256)])
def test_the_nnx_step_is_answered_as_jax_answers(example, mesh):
    row = example.check("nnx", mesh)
    assert row["agree"] and row["verdict"].accepted, row
    assert row["abstract"] == (mesh != (2, 4))
    paths = row["program"].input_paths
    assert "args[0].up.kernel.value" in paths   # the module's variables, by path
    assert any(p.startswith("args[1].opt_state") for p in paths)   # the optimizer's state


@pytest.mark.parametrize("mesh", [(2, 4), (256, 256)])
def test_the_scanned_optax_step_is_answered_as_jax_answers(example, mesh):
    row = example.check("optax", mesh)
    assert row["agree"] and row["verdict"].accepted, row
    paths = row["program"].input_paths
    assert "args[0]['w1']" in paths and any(".mu['w1']" in p for p in paths)

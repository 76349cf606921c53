"""Every rule's examples (its docstring doctests) run and give what the docs show."""

import doctest
import importlib
import pkgutil

import pytest

import shardlaw.spec

MODULES = sorted(
    m.name for m in pkgutil.iter_modules(shardlaw.spec.__path__, "shardlaw.spec.")
    # the bridges import JAX (spec/bridge/convert.py, spec/bridge_*.py); the prover imports z3
    if not m.name.endswith(("jax_bridge", "smt")) and not m.name.startswith("shardlaw.spec.bridge_"))


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             extraglobs=vars(shardlaw.spec))
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed"

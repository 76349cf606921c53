"""Every rule's examples (its docstring doctests) run and give what the docs show."""

import doctest
import importlib
import pkgutil

import pytest

import shardlaw.spec

MODULES = sorted(
    # every module of every layer (spec/core/rules.py ...), not only the layers' packages
    m.name for m in pkgutil.walk_packages(shardlaw.spec.__path__, "shardlaw.spec.")
    # the bridges import JAX (spec/bridge/); the prover imports z3 (tests/test_proofs.py
    # runs its examples)
    if not m.name.startswith("shardlaw.spec.bridge.") and m.name != "shardlaw.spec.prove.smt")


def test_every_layer_is_read():
    """A module in a layer is listed (the layers' packages alone hold almost no examples)."""
    assert "shardlaw.spec.core.rules" in MODULES and "shardlaw.spec.jit.call" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             extraglobs=vars(shardlaw.spec))
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed"

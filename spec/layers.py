"""The spec's floor plan: its layers, bottom to top, and where each earlier module went.

A module may import from its own layer and from layers below it, never from one above or
beside it (``tests/test_floor_plan.py`` holds every module to this); only ``bridge``
imports JAX and only ``prove`` imports z3. The README's layout table is checked against
the folders.

>>> [layer for layer, _ in LAYERS]
['core', 'placement', 'jit', 'prove', 'transforms', 'program', 'vectors', 'bridge']
>>> MOVED["smt"]
'prove.smt'
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["LAYERS", "RANK", "MOVED", "install_moved_names"]

# (layer, what it is), bottom first. Layers of one rank do not import each other.
LAYERS: list[tuple[str, str]] = [
    ("core", "value types and the rule registry"),
    ("placement", "which device holds which block; equivalence"),
    ("jit", "a jit call: description, pipeline stages, caches"),
    ("prove", "placement equivalence proved with z3"),
    ("transforms", "device_put, vmap, AD, constraints, shard_map"),
    ("program", "whole programs: a jit's body, equation by equation"),
    ("vectors", "test vectors"),
    ("bridge", "the JAX objects in and out: the only part that imports JAX"),
]
RANK: dict[str, int] = {"core": 0, "placement": 1, "jit": 2, "prove": 2, "transforms": 3,
                        "program": 4, "vectors": 5, "bridge": 5}

# The spec was one flat folder until 2026-12: its module names, and where each lives now
# (``shardlaw.spec.placement``, ``.jit`` and ``.vectors`` are now the layers that hold them,
# and keep their names).
MOVED: dict[str, str] = {
    "rules": "core.rules", "dims": "core.dims", "iota": "core.iota", "hlo": "core.hlo",
    "values": "core.values", "shardings": "core.shardings", "pytree": "core.pytree",
    "equivalence": "placement.equivalence",
    "call": "jit.call", "options": "jit.options", "matching": "jit.matching",
    "resolution": "jit.resolution", "assignment": "jit.assignment",
    "recovery": "jit.recovery", "aot": "jit.aot", "layouts": "jit.layouts",
    "cache": "jit.cache",
    "arguments": "transforms.arguments", "autodiff": "transforms.autodiff",
    "batching": "transforms.batching", "constraint": "transforms.constraint",
    "shardmap": "transforms.shardmap",
    "jax_bridge": "bridge.convert", "bridge_autodiff": "bridge.autodiff",
    "bridge_batching": "bridge.batching", "bridge_constraint": "bridge.constraint",
    "bridge_shardmap": "bridge.shardmap",
    "smt": "prove.smt",
}

_PACKAGE = __name__.rpartition(".")[0]


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``shardlaw.spec.<old name>`` as the module that now holds it, with a warning."""

    def __init__(self):
        self.specs = {}

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        name = spec.name.rpartition(".")[2]
        warnings.warn(f"{spec.name} moved to {_PACKAGE}.{MOVED[name]}", DeprecationWarning,
                      stacklevel=2)
        module = importlib.import_module(f"{_PACKAGE}.{MOVED[name]}")
        self.specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        # The import system has set the alias's spec on the module: give it back its own.
        module.__spec__ = self.specs[module.__name__]


def install_moved_names() -> None:
    """Let the earlier module paths import (once per process)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())

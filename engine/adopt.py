"""Adopting the engine across a whole program: :func:`install` puts it in place of ``jax.jit``.

``shardlaw.engine.install()`` makes ``jax.jit`` the engine's ``jit`` (and lets
``jax.eval_shape`` ask engine functions as it asks JAX's) for every caller that looks it up
from then on: the program's own code, ``from jax import jit`` in modules imported
afterwards, and libraries that call ``jax.jit`` themselves. ``uninstall()`` puts JAX's back.
``with shardlaw.engine.install(): ...`` does both around a block. ``jax.jit =
shardlaw.engine.jit`` by hand works too: the engine itself always uses JAX's own jit
(:data:`shardlaw.engine.internals.JAX_JIT`), never the name ``jax.jit``.

Functions jitted before :func:`install` stay JAX's, and functions jitted by the engine stay
the engine's after :func:`uninstall`.
"""

from __future__ import annotations

import threading
from typing import Any

import jax

from . import internals
from .jit import JittedFunction, jit

__all__ = ["install", "uninstall", "installed"]

_lock = threading.Lock()
# What each install() replaced (jax.jit, jax.eval_shape), innermost last: nested installs
# undo in order.
_replaced: list[tuple[Any, Any]] = []


@internals.api_boundary
def eval_shape(fun: Any, *args: Any, **kwargs: Any) -> Any:
    """``jax.eval_shape`` that asks an engine function itself, as JAX asks its own jit's.

    ``jax.eval_shape`` answers a function jitted by ``jax.jit`` from that function's own
    trace (its result formats included); any other callable it jits anew. Under
    :func:`install` the engine's functions get the same treatment.
    """
    if type(fun) is JittedFunction:
        return fun.eval_shape(*args, **kwargs)
    return internals.JAX_EVAL_SHAPE(fun, *args, **kwargs)


class install:
    """Put the engine in place of ``jax.jit`` (undone by :func:`uninstall` or on leaving ``with``).

    ``jax.eval_shape`` is routed too, so that it asks an engine function for its result
    types as it asks one of JAX's.
    """

    def __init__(self) -> None:
        with _lock:
            _replaced.append((jax.jit, jax.eval_shape))
            jax.jit = jit
            jax.eval_shape = eval_shape

    def __enter__(self) -> "install":
        return self

    def __exit__(self, *exc: object) -> None:
        uninstall()

    def __repr__(self) -> str:
        return f"<shardlaw.engine.install: jax.jit is {'the engine' if installed() else 'JAX'}>"


def uninstall() -> None:
    """Put back the ``jax.jit`` the last :func:`install` replaced (JAX's own if none is left)."""
    with _lock:
        jax.jit, jax.eval_shape = (_replaced.pop() if _replaced
                                   else (internals.JAX_JIT, internals.JAX_EVAL_SHAPE))


def installed() -> bool:
    """Whether ``jax.jit`` is the engine's jit now."""
    return jax.jit is jit

"""Adopting the engine across a whole program: :func:`install` puts it in place of ``jax.jit``.

``shardlaw.engine.install()`` makes ``jax.jit`` the engine's ``jit`` (and lets
``jax.eval_shape`` ask engine functions as it asks JAX's) for every caller that looks it up
from then on: the program's own code, ``from jax import jit`` in modules imported
afterwards, and libraries that call ``jax.jit`` themselves. The deprecated ``pjit`` goes
the same way (``jax.experimental.pjit.pjit`` and ``jax._src.pjit.pjit``, which JAX's own
multiprocess tests and a few libraries call): it becomes :func:`pjit`, the engine's jit
with pjit's two differences. ``uninstall()`` puts JAX's back.
``with shardlaw.engine.install(): ...`` does both around a block. ``jax.jit =
shardlaw.engine.jit`` by hand works too: the engine itself always uses JAX's own jit
(:data:`shardlaw.engine.internals.JAX_JIT`), never the name ``jax.jit``.

Functions jitted before :func:`install` stay JAX's, and functions jitted by the engine stay
the engine's after :func:`uninstall`.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types
from typing import Any, Callable

import jax
from jax.sharding import PartitionSpec

from . import internals
from .jit import JittedFunction, is_engine_function, jit, jit_as, warn_device_or_backend
from .options import NOT_GIVEN
from .rules import rule

__all__ = ["install", "uninstall", "installed", "pjit", "PjitFunction"]

_lock = threading.Lock()
# What each install() replaced (jax.jit, jax.eval_shape, jax._src.pjit.pjit, and the entry
# jax.experimental.pjit hands out for ``pjit``), innermost last: nested installs undo in order.
_replaced: list[tuple[Any, Any, Any, Any]] = []


class PjitFunction:
    """What :func:`pjit` returns: the engine's jit, made anew for each ``with mesh:`` mesh.

    pjit is jax.jit with two differences, both about the mesh of the enclosing legacy
    ``with mesh:`` block, read at each call: a PartitionSpec in ``in_shardings`` or
    ``out_shardings`` is over that mesh, and so is a None leaf, which means "replicated"
    (under jit a None leaf leaves the choice to jit); the function is traced with that mesh
    as the context mesh. Without such a block, or with ``device=``/``backend=``, pjit is jit.
    So each mesh gets an engine jit of its own, with its None leaves written as ``P()``,
    called with the mesh in context.
    """

    __slots__ = ("_fun", "_options", "_jits", "__dict__", "__weakref__")

    def __init__(self, fun: Callable, options: dict[str, Any], plain: JittedFunction) -> None:
        # ``plain``, made by pjit() (where device=/backend= warn, once), serves every call
        # outside a ``with mesh:`` block and every call with device=/backend=.
        self._fun, self._options, self._jits = fun, options, {None: plain}
        functools.update_wrapper(self, fun)

    def _for_mesh(self) -> tuple[Any, JittedFunction]:
        mesh = internals.resource_env_mesh()
        empty = mesh.empty
        legacy = not (empty or self._options["device"] is not None
                      or self._options["backend"] is not None)
        key = block_mesh(mesh) if legacy else None
        jitted = self._jits.get(key)
        if jitted is None:
            options = block_leaves(self._options) if legacy else dict(self._options)
            jitted = self._jits[key] = _pjit_engine(self._fun, options)
        # With device=/backend=, the mesh is still in context, where JIT-4 refuses the call.
        return (None if empty else mesh), jitted

    @contextlib.contextmanager
    def _context(self):  # noqa: ANN202 - a context manager yielding the jitted function
        mesh, jitted = self._for_mesh()
        if mesh is None:
            yield jitted
            return
        with internals.use_concrete_mesh(mesh), jax.sharding.use_abstract_mesh(
                mesh.abstract_mesh):
            yield jitted

    @internals.api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._context() as jitted:
            return jitted(*args, **kwargs)

    @internals.api_boundary
    def trace(self, *args: Any, **kwargs: Any) -> Any:
        with self._context() as jitted:
            return jitted.trace(*args, **kwargs)

    @internals.api_boundary
    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with self._context() as jitted:
            return jitted.lower(*args, **kwargs)

    @internals.api_boundary
    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        with self._context() as jitted:
            return jitted.eval_shape(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # explain, cache_info, clear_cache, ...: those of the jit for the current mesh,
        # called with that mesh in context.
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(self._for_mesh()[1], name)
        if not callable(found):
            return found

        @functools.wraps(found)
        def in_context(*args: Any, **kwargs: Any) -> Any:
            with self._context() as jitted:
                return getattr(jitted, name)(*args, **kwargs)
        return in_context

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # As a class attribute it binds like a method, as JAX's pjit functions do.
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<shardlaw.engine.pjit of {internals.fun_name(self._fun)}>"


def pjit(fun: Callable, in_shardings: Any = NOT_GIVEN, out_shardings: Any = NOT_GIVEN,
         static_argnums: Any = None, static_argnames: Any = None, donate_argnums: Any = None,
         donate_argnames: Any = None, keep_unused: bool = False, device: Any = None,
         backend: str | None = None, inline: bool = False,
         compiler_options: dict[str, Any] | None = None) -> PjitFunction:
    """``pjit`` (deprecated in JAX, still called by its multiprocess tests) through the engine.

    The same arguments as ``jax._src.pjit.pjit``; see :class:`PjitFunction` for what
    differs from :func:`shardlaw.engine.jit`.
    """
    options = dict(in_shardings=in_shardings, out_shardings=out_shardings,
                   static_argnums=static_argnums, static_argnames=static_argnames,
                   donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                   keep_unused=keep_unused, device=device, backend=backend, inline=inline,
                   compiler_options=compiler_options)
    # The options are checked once here, as pjit checks them (a bad one raises now).
    if not callable(fun):
        jit(fun)   # ENG-4, in JAX's words
    warn_device_or_backend(device, backend, stacklevel=3)
    return PjitFunction(fun, options, _pjit_engine(fun, options))


@rule("PJIT-1")
def block_mesh(mesh: Any) -> Any:
    """A call made through pjit inside a ``with mesh:`` block runs under the block's mesh as under ``jax.set_mesh(mesh)``: the block's mesh is the context mesh jit reads.

    The engine keeps one jit per block mesh a pjit function is called under (its key).
    """
    return mesh


@rule("PJIT-2")
def block_leaf(leaf: Any) -> Any:
    """Under pjit inside a ``with mesh:`` block, a None leaf of in_shardings or out_shardings (the whole tree's too) is the replicated NamedSharding over the block's mesh, and a PartitionSpec is resolved against that mesh.

    The engine writes the None leaf ``P()``; its jit resolves a PartitionSpec against the
    block's mesh, which is the context mesh while it runs (PJIT-1).
    """
    return PartitionSpec() if leaf is None else leaf


def block_leaves(options: dict[str, Any]) -> dict[str, Any]:
    """pjit's options inside a ``with mesh:`` block: every None leaf of its in and out
    shardings written as :func:`block_leaf` writes it."""
    options = dict(options)
    for which in ("in_shardings", "out_shardings"):
        if options[which] is not NOT_GIVEN:
            options[which] = jax.tree.map(block_leaf, options[which],
                                          is_leaf=lambda leaf: leaf is None)
    return options


def _pjit_engine(fun: Callable, options: dict[str, Any]) -> JittedFunction:
    """The engine's jit held to JAX's pjit (its refusals in pjit's words)."""
    return jit_as(internals.JAX_PJIT, fun, **options)


def _experimental_pjit_entry() -> Any:
    """What ``jax.experimental.pjit`` hands out for the name ``pjit`` (message, function)."""
    module = sys.modules.get("jax.experimental.pjit")
    return None if module is None else module._deprecations.get("pjit")


def _set_pjit(src_pjit: Any, experimental_entry: Any) -> None:
    from jax._src import pjit as pjit_module

    pjit_module.pjit = src_pjit
    module = sys.modules.get("jax.experimental.pjit")
    if module is not None and experimental_entry is not None:
        module._deprecations["pjit"] = experimental_entry
        # Its module __getattr__ caches each answer: forget them, so the new entry is read.
        module.__getattr__.cache_clear()


@internals.api_boundary
def eval_shape(fun: Any, *args: Any, **kwargs: Any) -> Any:
    """``jax.eval_shape`` that asks an engine function itself, as JAX asks its own jit's.

    ``jax.eval_shape`` answers a function jitted by ``jax.jit`` from that function's own
    trace (its result formats included); any other callable it jits anew. Under
    :func:`install` the engine's functions get the same treatment.
    """
    if type(fun) in (JittedFunction, PjitFunction) or is_engine_function(fun):
        return fun.eval_shape(*args, **kwargs)
    return internals.JAX_EVAL_SHAPE(fun, *args, **kwargs)


class install:
    """Put the engine in place of ``jax.jit`` (undone by :func:`uninstall` or on leaving ``with``).

    ``jax.eval_shape`` is routed too, so that it asks an engine function for its result
    types as it asks one of JAX's, and so is ``pjit`` (:func:`pjit`).
    """

    def __init__(self) -> None:
        import jax.experimental.pjit  # noqa: F401 - so that its entry is replaced too
        from jax._src import pjit as pjit_module

        with _lock:
            entry = _experimental_pjit_entry()
            _replaced.append((jax.jit, jax.eval_shape, pjit_module.pjit, entry))
            jax.jit = jit
            jax.eval_shape = eval_shape
            _set_pjit(pjit, None if entry is None else (entry[0], pjit))

    def __enter__(self) -> "install":
        return self

    def __exit__(self, *exc: object) -> None:
        uninstall()

    def __repr__(self) -> str:
        return f"<shardlaw.engine.install: jax.jit is {'the engine' if installed() else 'JAX'}>"


def uninstall() -> None:
    """Put back the ``jax.jit`` the last :func:`install` replaced (JAX's own if none is left)."""
    with _lock:
        if _replaced:
            jax.jit, jax.eval_shape, src_pjit, entry = _replaced.pop()
        else:
            jax.jit, jax.eval_shape, src_pjit = (internals.JAX_JIT, internals.JAX_EVAL_SHAPE,
                                                 internals.JAX_PJIT)
            entry = _experimental_pjit_entry()
            entry = None if entry is None else (entry[0], internals.JAX_PJIT)
        _set_pjit(src_pjit, entry)


def installed() -> bool:
    """Whether ``jax.jit`` is the engine's jit now."""
    return jax.jit is jit

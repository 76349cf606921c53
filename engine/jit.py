"""``shardlaw.engine.jit``: jax.jit's interface, the jit-call semantics, the shardlaw cache policy.

The public front: :func:`jit` checks jit's options (:mod:`.options`), makes the function's
:class:`~.function_engine.Engine` and hands back a :class:`JittedFunction` — JAX's own C++
dispatcher, which runs a known signature without Python and calls the engine for the rest.
Where the rest lives:

* :mod:`.options` — jit's options, checked once (JIT-1, JIT-2), and the call's form (JIT-4);
* :mod:`.call_arguments` — one call's arguments, its signature key, ENG-1/2/3/6;
* :mod:`.function_engine` — what one jitted function holds: its signature cache, the
  dispatcher's miss, the refusal in JAX's words, cache control;
* :mod:`.decision` — what the stages share: the :class:`~.decision.StageContext` they read
  of the function, the :class:`~.decision.CallDecision` they write of a call;
* :mod:`.stages` — deciding a call in JAX's order (call, trace, lower, compile, dispatch),
  and the executable key (the placement class);
* :mod:`.dispatch_plan` — the decision for a signature, a :class:`~.dispatch_plan.DispatchPlan`:
  the executable, how to hand it the arguments, how to label the results;
* :mod:`.execution` — running a plan on the Python path;
* :mod:`.statistics` — :class:`CacheInfo` and :func:`count_calls`;
* :mod:`.aot` — the stages as JAX's ``trace``/``lower``/``compile`` objects, and ``explain``;
* :mod:`.explanation` — what ``explain`` answers.

The engine decides with its own implementation of the rules (leaf creation, prefix
matching, fit, resolution, device assignment, recovery of result shardings), on JAX
objects, and lowers and compiles through JAX's public stages.
"""

from __future__ import annotations

import collections.abc
import functools
import operator
import types
import warnings
import weakref
from typing import Any, Callable, Iterator

from . import aot, internals
from .call_arguments import check_donations, short
from .function_engine import SIGNATURE_CAPACITY, Engine
from .options import NOT_GIVEN, Options
from .rules import EngineRejection, reject
from .statistics import CacheInfo, count_calls

__all__ = ["jit", "JittedFunction", "EngineMethods", "is_engine_function", "CacheInfo", "count_calls"]

_UNHASHABLE = "Non-hashable static arguments"   # how JAX's C++ dispatcher refuses one


@internals.api_boundary
def jit(fun: Callable | Any = NOT_GIVEN, /, *, in_shardings: Any = NOT_GIVEN,
        out_shardings: Any = NOT_GIVEN, static_argnums: Any = None,
        static_argnames: Any = None, donate_argnums: Any = None, donate_argnames: Any = None,
        keep_unused: bool = False, device: Any = None, backend: str | None = None,
        inline: bool = False, compiler_options: dict[str, Any] | None = None) -> Any:
    """``jax.jit`` with the jit-call semantics enforced and the shardlaw cache policy.

    Takes jax.jit's arguments and returns a function that behaves like ``jax.jit``'s, plus
    ``.explain(*args, **kwargs)`` (the verdict and the rules that decided it, without
    running), ``.cache_info()`` and ``.clear_cache()``. Used without ``fun`` it is a
    decorator factory: ``@jit(static_argnums=0)``.
    """
    if fun is NOT_GIVEN:
        return functools.partial(
            jit, in_shardings=in_shardings, out_shardings=out_shardings,
            static_argnums=static_argnums, static_argnames=static_argnames,
            donate_argnums=donate_argnums, donate_argnames=donate_argnames,
            keep_unused=keep_unused, device=device, backend=backend, inline=inline,
            compiler_options=compiler_options)
    if not callable(fun):
        raise _options_in_jax_words(
            reject("ENG-4", TypeError, f"jit expects a callable, got {type(fun)}: {short(fun)}"),
            fun, in_shardings, out_shardings, {})
    warn_device_or_backend(device, backend, stacklevel=3)
    return jit_as(internals.JAX_JIT, fun, in_shardings, out_shardings, static_argnums,
                  static_argnames, donate_argnums, donate_argnames, keep_unused, device, backend,
                  inline, compiler_options)


def warn_device_or_backend(device: Any, backend: Any, stacklevel: int) -> None:
    """JAX's DeprecationWarning for jit's (and pjit's) device= and backend=, given once,
    where the function is made (``stacklevel`` reaches the user's call)."""
    if device is not None or backend is not None:
        warnings.warn(
            "backend and device argument on jit is deprecated. You can use "
            '`jax.device_put(..., jax.local_devices(backend="cpu")[0])` on the inputs to the '
            "jitted function to get the same behavior.", DeprecationWarning,
            stacklevel=stacklevel)


def jit_as(jax_api: Callable, fun: Callable, in_shardings: Any, out_shardings: Any,
           static_argnums: Any, static_argnames: Any, donate_argnums: Any, donate_argnames: Any,
           keep_unused: bool, device: Any, backend: Any, inline: bool,
           compiler_options: Any) -> Any:
    """The engine's jit of a callable ``fun``, held to ``jax_api`` (JAX's jit, or its pjit)."""
    given = dict(static_argnums=static_argnums, static_argnames=static_argnames,
                 donate_argnums=donate_argnums, donate_argnames=donate_argnames,
                 keep_unused=keep_unused, device=device, backend=backend, inline=inline,
                 compiler_options=compiler_options)
    try:
        options = Options(fun, in_shardings, out_shardings, static_argnums, static_argnames,
                          donate_argnums, donate_argnames, keep_unused, device, backend,
                          inline, compiler_options)
        # The engine makes JAX's own jit of the function, which refuses what JAX refuses.
        engine = Engine(fun, options, SIGNATURE_CAPACITY, jax_api)
    except EngineRejection as error:
        raise _options_in_jax_words(error, fun, in_shardings, out_shardings, given,
                                    jax_api) from None
    return _jitted(engine)


class JittedFunction:
    """What ``jit(fun)`` returns for a function with a frame in front of JAX's C++ dispatcher
    (static or donated arguments, or call counting on); any other function is the
    dispatcher itself, of ``jax.jit``'s own type (:func:`_jitted`, :func:`is_engine_function`).

    Calling it calls that frame (``__call__`` is a property that hands it over, so no
    Python frame of a method comes in between), which calls the dispatcher: a known
    signature runs in C++. Everything the engine needs lives in slots, never in the
    instance's ``__dict__``: ``functools.wraps``, ``jax.grad``, ``jax.vmap`` and ``jax.jit``
    copy a wrapped function's ``__dict__`` onto their wrapper, and a ``lower`` copied that
    way would lower the engine's function in place of the wrapper's
    (``jax.jit(jax.grad(f)).lower(x)`` would compile ``f``). No reference cycle is made, so
    a jitted function, its engine and what its function closes over go as soon as the last
    reference does (as jax.jit's).
    """

    __slots__ = ("_call", "_dispatcher", "_engine", "_methods", "__dict__", "__weakref__")
    __call__ = property(operator.attrgetter("_call"))

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # As a class attribute it binds like a method, as jax.jit's functions do.
        return self if instance is None else types.MethodType(self, instance)

    @internals.api_boundary
    def trace(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.trace(*args, **kwargs)

    # lower and eval_shape trace through ``trace`` of the methods directly: the function
    # runs no deeper in the stack than under jax.jit's.
    @internals.api_boundary
    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.trace(*args, **kwargs).lower()

    @internals.api_boundary
    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.trace(*args, **kwargs).out_info

    @internals.api_boundary
    def explain(self, *args: Any, **kwargs: Any) -> Any:
        return self._methods.explain(*args, **kwargs)

    def cache_info(self) -> CacheInfo:
        return self._engine.cache_info()

    def clear_cache(self) -> None:
        self._engine.clear_cache()

    def _cache_size(self) -> int:
        """How many signatures the C++ dispatcher holds (as jax.jit's ``_cache_size``)."""
        return self._dispatcher._cache_size()

    def _clear_cache(self) -> None:
        self._engine.clear_cache()

    def __getstate__(self) -> Any:
        return self._dispatcher.__getstate__()

    def __repr__(self) -> str:
        # Written as jax.jit's functions are, which logs and tests already read.
        try:
            return f"<PjitFunction of {self.__wrapped__!r}>"
        except Exception:  # noqa: BLE001 - a repr must not fail, as jax.jit's does not
            return "<PjitFunction>"


def is_engine_function(fun: Any) -> bool:
    """Whether ``fun`` was made by the engine's jit (of either type :func:`_jitted` gives)."""
    if type(fun) is JittedFunction:
        return True
    return type(fun) is internals.PjitFunctionType and \
        type(getattr(fun, "__dict__", None)) is EngineMethods


def _options_in_jax_words(error: EngineRejection, fun: Callable, in_shardings: Any,
                          out_shardings: Any, given: dict[str, Any],
                          jax_api: Callable | None = None) -> EngineRejection:
    """A refusal of jit's options, in the class and words of JAX's own refusal of them."""
    if in_shardings is not NOT_GIVEN:
        given["in_shardings"] = in_shardings
    if out_shardings is not NOT_GIVEN:
        given["out_shardings"] = out_shardings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (jax_api or internals.JAX_JIT)(fun, **given)
    except Exception as jax_error:  # noqa: BLE001 - JAX's refusal, whatever its class
        return error.as_jax(jax_error)
    return error


def _jitted(engine: Engine) -> Any:
    """The jitted function: JAX's C++ dispatcher (behind a counting frame when asked), with methods.

    A function with nothing to do in front of the dispatcher is the dispatcher itself, of
    ``jax.jit``'s own type, with the engine's methods in its ``__dict__``
    (:class:`EngineMethods`): ``jax.eval_shape`` asks a function of that exact type for its
    own answer, and so asks the engine's, under the bare patch too. A function with static
    or donated arguments, or made while counting is on, is a :class:`JittedFunction`: the
    frame in front counts every call — JAX's dispatcher counts no hits, and ``cache_info``
    reports them exactly — checks donations (ENG-3, ENG-6), and turns the dispatcher's own
    refusal of an unhashable static argument, raised before any engine code runs, into
    ENG-1 with the argument's path. Everything else is the dispatcher's: a known signature
    runs in C++.
    """
    o = engine.options
    name = internals.fun_name(engine.fun)
    donates = bool(o.names.donate_nums or o.names.donate_names)
    framed = engine.framed
    # With a frame in front, that frame is the API boundary (the dispatcher is called
    # from it only), and the miss decides a new signature in its own frame
    # (Engine.cache_miss): the traced function runs as deep as under jax.jit.
    dispatcher = internals.make_dispatcher(name, engine.fun, engine.cache_miss,
                                           o.names.static_nums, o.names.static_names,
                                           o.dispatch_key(), boundary=not framed)
    engine.dispatcher_ref = _weak(dispatcher)
    methods = aot.Methods(engine)
    if not framed:
        internals.wraps(engine.fun, dispatcher)   # name, docstring, __wrapped__, as jax.jit's
        dispatcher.__dict__ = EngineMethods(dispatcher.__dict__, engine, methods)
    # what JAX's NaN checker reads off a dispatcher (after wraps, which copies the
    # function's own __dict__: a jitted function's _fun would be the wrong one)
    dispatcher._fun = engine.fun
    if not framed:
        return dispatcher
    calls = engine.calls
    check = functools.partial(check_donations, o.names) if donates else None

    @internals.api_boundary
    def call(*args: Any, **kwargs: Any) -> Any:
        next(calls)
        if check is not None:
            check(args, kwargs)
        try:
            return dispatcher(*args, **kwargs)
        except ValueError as error:
            if type(error) is ValueError and str(error).startswith(_UNHASHABLE):
                raise engine.unhashable_static(args, kwargs) from None
            raise

    jitted = JittedFunction()
    jitted._call = call
    jitted._dispatcher = dispatcher
    jitted._engine = engine
    jitted._methods = methods
    internals.wraps(engine.fun, jitted)   # name, docstring, __wrapped__, as jax.jit gives them
    return jitted


class EngineMethods(dict):
    """The ``__dict__`` of an engine function that is JAX's own dispatcher: its methods in it,
    out of sight of anything that copies a ``__dict__``.

    Attribute lookup finds ``trace``, ``lower``, ``eval_shape``, ``explain``,
    ``cache_info``, ``clear_cache`` and ``_clear_cache`` here before JAX's methods of the
    type (and ``_engine``, as on a :class:`JittedFunction`); iterating the dict (what ``functools.wraps``, ``jax.grad``, ``jax.vmap`` and
    ``jax.jit`` do to copy a wrapped function's ``__dict__`` onto their wrapper) skips them,
    so a wrapper never carries the engine's ``lower`` of the function it wraps
    (``jax.jit(jax.grad(f)).lower(x)`` lowers the gradient).
    """

    __slots__ = ()

    def __init__(self, given: dict, engine: Engine, methods: aot.Methods) -> None:
        super().__init__(given)

        @internals.api_boundary
        def lower(*args: Any, **kwargs: Any) -> Any:
            return methods.trace(*args, **kwargs).lower()

        @internals.api_boundary
        def eval_shape(*args: Any, **kwargs: Any) -> Any:
            return methods.trace(*args, **kwargs).out_info

        self.update(trace=internals.api_boundary(methods.trace), lower=lower,
                    eval_shape=eval_shape, explain=internals.api_boundary(methods.explain),
                    cache_info=engine.cache_info, clear_cache=engine.clear_cache,
                    _clear_cache=engine.clear_cache, _engine=engine)

    def __iter__(self) -> Iterator[str]:
        return (k for k in dict.__iter__(self) if k not in _METHOD_NAMES)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> Any:
        return _VisibleKeys(self)

    def items(self) -> Any:
        return collections.abc.ItemsView(self)

    def values(self) -> Any:
        return collections.abc.ValuesView(self)

    def copy(self) -> dict:
        return dict(self.items())


class _VisibleKeys(collections.abc.KeysView):
    """The keys of an :class:`EngineMethods` that copies see (the methods' names left out)."""

    def __contains__(self, key: object) -> bool:
        return key not in _METHOD_NAMES and key in self._mapping


_METHOD_NAMES = frozenset({"trace", "lower", "eval_shape", "explain", "cache_info",
                           "clear_cache", "_clear_cache", "_engine"})


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj

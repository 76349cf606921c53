"""What the engine did with one whole call, as a verdict (for test vectors and differential suites).

:func:`verdict_for_call` runs ``shardlaw.engine.jit(fun, **jit_options)(*args, **kwargs)``
— or, for abstract arguments or an ahead-of-time call, ``.lower(...).compile()`` and then
the compiled executable on ``aot_args`` — and returns an
:class:`~shardlaw.engine.explanation.Explanation` of what happened: rejected (the rule, the
built-in error type, JAX's class name, the path) or accepted (the shardings the program
got and the results came back with, committed flags, device ids, kept inputs, moved
inputs). Everything is JAX objects; nothing here knows the specification's types.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jax
from jax import tree_util

from .explanation import Explanation
from .call_arguments import CallArguments
from .jit import jit
from .rules import EngineRejection

__all__ = ["verdict_for_call"]


def verdict_for_call(fun: Any, args: tuple = (), kwargs: dict | None = None, *,
                     jit_options: dict | None = None, aot_args: tuple | None = None,
                     aot_kwargs: dict | None = None) -> tuple[Explanation, Any]:
    """(what the engine decided, the results or None) for one call; rejections become verdicts."""
    kwargs = kwargs or {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            jitted = jit(fun, **(jit_options or {}))
        except EngineRejection as error:
            return Explanation.of_rejection(error), None
    abstract = any(isinstance(leaf, jax.ShapeDtypeStruct)
                   for leaf in tree_util.tree_leaves((args, kwargs)))
    if abstract or aot_args is not None:
        try:
            compiled = jitted.lower(*args, **kwargs).compile()
        except EngineRejection as error:
            return Explanation.of_rejection(error), None
        explanation = compiled.explanation
        results = None
        if aot_args is not None:
            try:
                results = compiled(*aot_args, **(aot_kwargs or {}))
            except EngineRejection as error:
                return Explanation.of_rejection(error, explanation.trace), None
        return explanation, results
    try:
        results = jitted(*args, **kwargs)
    except EngineRejection as error:
        return Explanation.of_rejection(error), None
    engine = jitted._engine
    arguments = CallArguments(args, kwargs, engine.options.names, abstract_ok=False)
    plan = engine.plan(arguments)
    explanation = Explanation.of_plan(plan)
    flat = tree_util.tree_leaves(results)
    if flat and all(isinstance(x, jax.Array) for x in flat):
        explanation = dataclasses.replace(
            explanation, out_shardings=tuple(x.sharding for x in flat),
            out_committed=tuple(bool(x._committed) for x in flat))
    return explanation, results

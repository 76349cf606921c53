"""``jax.jit`` of a vmapped function JAX refuses while batching it, described by the spec's vmap.

describe_program describes a vmapped function on one example and applies the vmaps itself
(:func:`~shardlaw.spec.program.batching.nested_vmap_program`); only ``jax.jit``'s own
options around the vmap are read from JAX's trace of the batched function. Where JAX
refuses that trace inside its batching rules — a primitive its rule stages over the
batched operands that JAX cannot type, such as the ``select_n`` a ``lax.cond`` with a
batched predicate becomes, its predicate unsplit and its cases split over Explicit axes —
there is no trace to read the options from, and no call of the user's to locate the
refusal at. :func:`refused_in_batching` reads the options from the frame of JAX's jit
while it traced the body (as :mod:`~shardlaw.spec.bridge.refusals` reads an inner jit's:
in_shardings, donation, keep_unused, the context mesh; its out_shardings, which JAX reads
only once the body is traced, from the jit's own record of them, flattened over the results
the function gives on one example; a jit given static arguments is read from its trace as a
function calling a vmap, :mod:`~shardlaw.spec.bridge.refusals`), and keeps the spec's
batched program under them where the spec refuses it while tracing with JAX's class.
Otherwise JAX's error stands.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

__all__ = ["refused_in_batching"]


def _jit_frame(error: BaseException, info: Any) -> dict | None:
    """The locals of the frame tracing the jit whose parameters are ``info`` when JAX
    raised ``error``, where it raised it while tracing that jit's body (past its
    in_shardings)."""
    from jax._src import pjit
    from jax._src.interpreters import partial_eval as pe

    found = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        code = frame.f_code
        if found is None and code.co_filename == pjit.__file__ and \
                code.co_name == "_trace_for_jit" and frame.f_locals.get("ji") is info:
            found = frame.f_locals
        elif found is not None and code.co_filename == pe.__file__ and \
                code.co_name == "trace_to_jaxpr":
            return found
    return None


def _options(jitted: Any, args: tuple, results: Any) -> tuple[dict | None,
                                                                 BaseException | None]:
    """(the options of ``jitted`` as its frame holds them while JAX traces its body, its
    out_shardings flattened over ``results``, or None where not read; the error JAX raised)
    for ``jitted(*args)``, traced again with JAX's frames kept."""
    from jax._src import config

    import jax

    from .refusals import frame_options

    try:
        with config.traceback_filtering("off"):
            jax.make_jaxpr(jitted)(*args)
    except Exception as error:  # noqa: BLE001 - the refusal, now with its frames
        info = getattr(jitted, "_jit_info", None)
        jit = None if info is None else _jit_frame(error, info)
        if jit is None or info.static_argnums or info.static_argnames or jit.get("kwargs"):
            return None, error
        outs = _out_shardings(info, results)
        if outs is None:
            return None, error
        return {**frame_options(jit), **outs}, error
    return None, None


def _out_shardings(info: Any, results: Any) -> dict | None:
    """``{"out_shardings": ...}``, one per flat result of ``results`` (the function's
    results on one example: the tree the batched function returns), read as JAX reads
    them once the body is traced; ``{}`` where none is given; None where some are given
    and ``results`` is unknown."""
    from jax._src.pjit import flatten_axis_resources
    from jax._src.sharding_impls import UNSPECIFIED, UnspecifiedValue
    from jax._src.tree_util import tree_structure, tree_unflatten

    from .program import read_sharding

    if all(isinstance(s, UnspecifiedValue) for s in info.out_shardings_leaves):
        return {}
    if results is None:
        return None
    given = tree_unflatten(info.out_shardings_treedef, info.out_shardings_leaves)
    count = tree_structure(results).num_leaves
    flat = (given,) * count if not isinstance(given, (list, tuple, dict)) else \
        flatten_axis_resources("pjit out_shardings", tree_structure(results), given,
                               tupled_args=False)
    # (a None leaf is left to the compiler, as JAX's jit equation holds it)
    return {"out_shardings": tuple(read_sharding(UNSPECIFIED if s is None else s,
                                                 "out_shardings of a jit") for s in flat)}


def refused_in_batching(jitted: Any, args: tuple, under: Callable[[dict], Any],
                        results: Any = None) -> Any:
    """The spec's batched program under ``jitted``'s options (``under(options)``), where JAX
    refuses ``jitted(*args)`` while tracing it and the spec refuses that program at the
    trace stage with JAX's class; None otherwise (the module's docstring says when).
    ``results``: the function's results on one example, which give the tree its
    out_shardings are flattened over."""
    from ..program.explain import explain_program

    options, error = _options(jitted, args, results)
    if options is None or error is None:
        return None
    names = {cls.__name__ for cls in type(error).__mro__}
    try:
        program = under(options)
        verdict = explain_program(program, until="trace")
    except Exception:  # noqa: BLE001 - the spec cannot answer: JAX's error stands
        return None
    if verdict.accepted or verdict.stage != "trace" or not (
            {verdict.jax_error, verdict.error_type} & names):
        return None
    return program

"""``jax.jit`` of a vmapped function JAX refuses while batching it, described by the spec's vmap.

describe_program describes a vmapped function on one example and applies the vmaps itself
(:func:`~shardlaw.spec.program.batching.nested_vmap_program`); only ``jax.jit``'s own
options around the vmap are read from JAX's trace of the batched function. Where JAX
refuses that trace inside its batching rules — a primitive its rule stages over the
batched operands that JAX cannot type, such as the ``select_n`` a ``lax.cond`` with a
batched predicate becomes, its predicate unsplit and its cases split over Explicit axes —
there is no trace to read the options from, and no call of the user's to locate the
refusal at. :func:`batched_as_refused` says when the spec's batched program stands for the
call as it is: the jit was given no options of its own (its in and out shardings left
unspecified, nothing donated, static or kept, no device or backend, no compiler options)
under no mesh context, so that its body is that program, and the spec refuses the
program while tracing with JAX's class. Otherwise JAX's error stands.
"""

from __future__ import annotations

from typing import Any

__all__ = ["batched_as_refused"]


def _given_no_options(jitted: Any) -> bool:
    """Whether ``jitted`` (a ``jax.jit``) holds JAX's defaults for every option, and no
    mesh context is set."""
    import jax
    from jax._src import mesh as mesh_lib
    from jax._src.sharding_impls import UnspecifiedValue

    info = getattr(jitted, "_jit_info", None)
    if info is None or info.user_specified_in_shardings:
        return False
    if any(not isinstance(s, UnspecifiedValue) for s in info.out_shardings_leaves):
        return False
    if info.donate_argnums or info.donate_argnames or info.static_argnums or \
            info.static_argnames or info.keep_unused or info.compiler_options_kvs:
        return False
    if info.device is not None or info.backend is not None:
        return False
    return jax.sharding.get_abstract_mesh().empty and mesh_lib.get_concrete_mesh().empty


def batched_as_refused(jitted: Any, program: Any, error: BaseException) -> bool:
    """Whether the spec's batched ``program`` describes ``jax.jit`` of the vmapped function
    JAX refused with ``error`` while tracing it (the module's docstring says when)."""
    from ..program.explain import explain_program

    if not _given_no_options(jitted):
        return False
    names = {cls.__name__ for cls in type(error).__mro__}
    try:
        verdict = explain_program(program, until="trace")
    except Exception:  # noqa: BLE001 - the spec cannot answer: JAX's error stands
        return False
    return not verdict.accepted and verdict.stage == "trace" and bool(
        {verdict.jax_error, verdict.error_type} & names)

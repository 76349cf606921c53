"""Running a :class:`~.dispatch_plan.DispatchPlan` on the Python path: hand the arguments over, run, label the results.

A known signature whose arguments go as they are runs in JAX's C++ dispatcher and never
comes here. Here come the calls that must move or relabel an argument, a signature's first
call (which also hands the dispatcher its fast-path data, where the plan allows it), and
calls of executables compiled ahead of time.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import tree_util

from . import internals
from .dispatch_plan import DispatchPlan, conversion
from .statistics import Counters

__all__ = ["run", "run_aot", "execute"]


def run(plan: DispatchPlan, leaves: list[Any], treedef: Any, counters: Counters) -> Any:
    """Run ``plan`` on a call's flat arguments (the Python path)."""
    return execute(plan, leaves, treedef, plan.conversions, counters)


def run_aot(plan: DispatchPlan, leaves: list[Any], treedef: Any, counters: Counters) -> Any:
    """Run an AOT-compiled plan on arguments AOT-1..3 accepted."""
    entry = plan.entry
    assert entry is not None
    conversions: list[Any] = [None] * len(leaves)
    for i in plan.kept:
        leaf = leaves[i]
        if type(leaf) is internals.ArrayImpl and leaf._committed:
            conversions[i] = conversion(leaf, entry.facts, i)
    return execute(plan, leaves, treedef, conversions, counters)


def execute(plan: DispatchPlan, leaves: list[Any], treedef: Any, conversions: list[Any],
            counters: Counters) -> Any:
    """Hand the arguments over as ``conversions`` say, run the executable, label the results."""
    entry = plan.entry
    assert entry is not None
    if any(c is not None for c in conversions):
        leaves = _handed_over(plan, leaves, conversions)
    flat, out_tree = internals.execute(entry.facts, leaves, treedef)
    if entry.out_committed is None:
        entry.out_committed = tuple(bool(getattr(x, "_committed", True)) for x in flat)
    if plan.compiled_here and entry.out_committed != plan.out_committed:
        counters.diverged([f"committed: engine {plan.out_committed}, "
                           f"JAX {entry.out_committed}"])
        plan.out_committed = entry.out_committed
        plan.out_labels = [None if label is None else (*label[:3], c)
                           for label, c in zip(plan.out_labels, plan.out_committed)]
    flat = _labelled(plan, flat)
    if plan.fastpath is None and plan.fast_ok:
        plan.fastpath = internals.fastpath_data(entry.facts, entry.facts.out_tree, flat,
                                                plan.num_inputs)
    return tree_util.tree_unflatten(out_tree, flat)


def _handed_over(plan: DispatchPlan, leaves: list[Any], conversions: list[Any]) -> list[Any]:
    """The arguments as the executable takes them: relabelled over their buffers, or moved."""
    leaves = list(leaves)
    for i, how in enumerate(conversions):
        if how is None:
            continue
        kind, sharding, _fast, aval, order = how
        if kind == "relabel":
            # The same buffers, labelled with the executable's sharding: no copy.
            buffers = internals.single_device_arrays(leaves[i])
            if order is not None:
                buffers = [buffers[k] for k in order]
            leaves[i] = internals.array_over(aval, sharding, buffers, True)
        else:
            # Another placement: move it, as jit does (never a buffer on the wrong device).
            donate = plan.donated[i] if i < len(plan.donated) else False
            leaves[i] = jax.device_put(leaves[i], sharding, donate=donate)
    return leaves


def _labelled(plan: DispatchPlan, flat: list[Any]) -> list[Any]:
    """The results as ``jax.jit`` would label them for this call (the plan's labels)."""
    entry = plan.entry
    assert entry is not None
    if any(label is not None for label in plan.out_labels):
        flat = list(flat)
        for j, label in enumerate(plan.out_labels):
            if label is None:
                continue
            sharding, aval, order, committed = label
            buffers = internals.single_device_arrays(flat[j])
            if order is not None:
                buffers = [buffers[k] for k in order]
            flat[j] = internals.array_over(aval, sharding, buffers, committed)
    if not plan.compiled_here and entry.out_committed != plan.out_committed:
        # One executable serves uncommitted and committed arguments alike (an open input
        # on a one-device program): whether results are committed is this call's (EXE-2).
        flat = [internals.array_over(x.aval, x.sharding, internals.single_device_arrays(x), c)
                if type(x) is internals.ArrayImpl and x._committed != c else x
                for x, c in zip(flat, plan.out_committed)]
    if plan.empty_results:
        flat = list(flat)
        for j in plan.empty_results:
            flat[j] = _empty_result(flat[j])
    return flat


def _empty_result(array: Any) -> Any:
    """A zero-size result made anew: empty per-device buffers of its shard shape, same type and flag."""
    sharding = array.sharding
    shard = sharding.shard_shape(array.shape)
    host = np.zeros(shard, array.dtype)
    buffers = [jax.device_put(host, d) for d in internals.addressable_devices(sharding)]
    return internals.array_over(array.aval, sharding, buffers, array._committed)

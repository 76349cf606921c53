"""Shared by the cache probes: count what jax.jit did for one call.

Import AFTER `jax.config.update('jax_num_cpu_devices', 8)`. The counts are the test events that
jax._src.test_util's counters count (that module needs absl, so the events are read directly):
cpp = jit_cpp_cache_miss (count_pjit_cpp_cache_miss: the Python path ran), trace = trace_to_jaxpr
(count_jit_tracing_cache_miss), lower = lower_jaxpr_to_module (count_jit_and_pmap_lowerings),
jaxcomp = pxla_cached_compilation (count_jit_compilation_cache_miss); xla = XLA backend compiles,
from the monitoring event /jax/core/compile/backend_compile_duration; params = misses of
pjit._infer_params_cached (its cache_info()).
"""
import collections

from jax._src import monitoring, util

COUNTS = collections.Counter()
EVENTS = {"jit_cpp_cache_miss": "cpp", "trace_to_jaxpr": "trace",
          "lower_jaxpr_to_module": "lower", "pxla_cached_compilation": "jaxcomp"}
_previous = util.test_event_listener


def _event(name, *args):
    if name in EVENTS:
        COUNTS[EVENTS[name]] += 1
    if _previous is not None:
        _previous(name, *args)


def _duration(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        COUNTS["xla"] += 1


util.test_event_listener = _event
monitoring.register_event_duration_secs_listener(_duration)


def _params():
    from jax._src import pjit
    return pjit._infer_params_cached.cache_info().misses


def counted(thunk):
    before = dict(COUNTS, params=_params())
    out = thunk()
    COUNTS["params"] = _params()
    return out, {k: COUNTS[k] - before.get(k, 0)
                 for k in ("cpp", "params", "trace", "lower", "jaxcomp", "xla")}


def show(label, thunk):
    try:
        _, c = counted(thunk)
        print(f"[{label}] " + " ".join(f"{k}={v}" for k, v in c.items()), flush=True)
    except Exception as e:  # noqa
        print(f"[{label}] ERR {type(e).__name__}: {str(e)[:150]}", flush=True)

"""Tiny helper shared by the probes. Import AFTER `jax.config.update('jax_num_cpu_devices', 8)`."""
import warnings
import traceback


def _base(cls):
    for b in cls.__mro__:
        if b.__module__ == 'builtins':
            return b.__name__
    return '?'


def desc(v):
    """Describe a result: arrays get sharding + committed flag."""
    import jax
    if isinstance(v, jax.Array):
        s = v.sharding
        ids = [d.id for d in s._device_assignment]
        return (f"{type(s).__name__}({getattr(s, 'spec', '')}) mk={s.memory_kind} "
                f"devs={ids} committed={v._committed} hlo={s._to_xla_hlo_sharding(v.ndim)}")
    if isinstance(v, (tuple, list)):
        return type(v).__name__ + '[' + '; '.join(desc(x) for x in v) + ']'
    return repr(v)


def show(label, fn, full=False):
    """Run fn(); print OK + description, or the exception class, its builtin base and message gist."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        try:
            r = fn()
            out = f"OK   {desc(r)}"
        except Exception as e:  # noqa
            cls = type(e)
            msg = str(e).strip().replace('\n', ' | ')
            if not full and len(msg) > 400:
                msg = msg[:400] + ' ...'
            out = f"ERR  {cls.__module__}.{cls.__qualname__} (base {_base(cls)}): {msg}"
    ws = ''.join(f"\n     WARN {x.category.__name__}: {str(x.message)[:120]}" for x in w)
    print(f"[{label}] {out}{ws}", flush=True)

import jax; jax.config.update('jax_num_cpu_devices', 8)
# Inputs jit leaves open (uncommitted / numpy / scalar / ShapeDtypeStruct without a sharding):
# what sharding the compiled executable takes them in, and which committed arrays an AOT call
# of that executable then accepts (notes/jit-facts.md §11).
import numpy as np
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, SingleDeviceSharding
from _show import show

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
mrev = Mesh(devs[::-1].reshape(2, 4), ('x', 'y'))
m8 = Mesh(devs, ('z',))
m1 = Mesh(devs[[0]], ('a',))
x = np.arange(8., dtype=np.float32)
xx = np.ones((8, 8), np.float32)


def put(v, s):
    return jax.device_put(v, s)


def unc(v, dev=0):
    with jax.default_device(d[dev]):
        return jnp.asarray(v)


def ins(c):
    return '; '.join(f"{type(s).__name__}({getattr(s, 'spec', '')}) "
                     f"devs={[q.id for q in s._device_assignment]} mk={s.memory_kind} "
                     f"hlo={s._to_xla_hlo_sharding(n)}" if s is not None else 'None'
                     for s, n in zip(jax.tree_util.tree_leaves(c.input_shardings, is_leaf=lambda q: q is None),
                                     [len(a.shape) for a in jax.tree_util.tree_leaves(c.in_avals)]))


def compiled(label, f, *args, **kw):
    c = jax.jit(f, **kw).lower(*args).compile()
    print(f"== {label}: input_shardings = {ins(c)}", flush=True)
    return c


print('--- one-device programs')
c = compiled('uncommitted on d0 alone', lambda a: a * 2, unc(x))
show('  committed d0', lambda: c(put(x, d[0])))
show('  committed d3', lambda: c(put(x, d[3])), full=True)
show('  committed NS(Mesh([d0]),P())', lambda: c(put(x, NamedSharding(m1, P()))))
show('  committed NS(m,P()) 8 devices', lambda: c(put(x, NamedSharding(m, P()))), full=True)
show('  committed d0 pinned_host', lambda: c(put(x, SingleDeviceSharding(d[0], memory_kind='pinned_host'))), full=True)
show('  uncommitted on d3', lambda: c(unc(x, 3)))
show('  uncommitted on 8 devices (committed=False)',
     lambda: c(jax._src.array.ArrayImpl(put(x, NamedSharding(m, P('x'))).aval,
                                        NamedSharding(m, P('x')),
                                        put(x, NamedSharding(m, P('x')))._arrays, committed=False)))
show('  numpy', lambda: c(x))

c = compiled('uncommitted on d3 alone (default_device d3 at lower)', lambda a: a * 2, unc(x, 3))
show('  committed d3', lambda: c(put(x, d[3])))
show('  committed d0', lambda: c(put(x, d[0])), full=True)

with jax.default_device(d[5]):
    c = compiled('numpy alone, default_device d5', lambda a: a * 2, x)
show('  committed d5', lambda: c(put(x, d[5])))
show('  committed d0', lambda: c(put(x, d[0])), full=True)
c = compiled('numpy alone, default d0', lambda a: a * 2, x)
show('  committed d0', lambda: c(put(x, d[0])))
show('  committed d1', lambda: c(put(x, d[1])), full=True)

c = compiled('python float alone', lambda a: a * 2, 1.0)
show('  committed float32[] on d0', lambda: c(put(np.float32(1.0), d[0])))
show('  committed float32[] on d2', lambda: c(put(np.float32(1.0), d[2])), full=True)
show('  committed weak float on d2 (jnp.asarray(1.0) put)', lambda: c(put(jnp.asarray(1.0), d[2])), full=True)

c = compiled('ShapeDtypeStruct without sharding', lambda a: a * 2, jax.ShapeDtypeStruct((8,), jnp.float32))
show('  committed d0', lambda: c(put(x, d[0])))
show('  committed d4', lambda: c(put(x, d[4])), full=True)

c = compiled('numpy + committed NS(Mesh([d5]),P()) (one device, given NamedSharding)',
             lambda a, b: a + b, x, put(x, NamedSharding(Mesh(devs[[5]], ('a',)), P())))
show('  a committed d5', lambda: c(put(x, d[5]), put(x, NamedSharding(Mesh(devs[[5]], ('a',)), P()))))
show('  a committed d0', lambda: c(put(x, d[0]), put(x, NamedSharding(Mesh(devs[[5]], ('a',)), P()))), full=True)

c = compiled('uncommitted + out_shardings=SDS(d6) (one device set by out_shardings)', lambda a: a * 2,
             unc(x), out_shardings=SingleDeviceSharding(d[6]))
show('  committed d6', lambda: c(put(x, d[6])))
show('  committed d0', lambda: c(put(x, d[0])), full=True)

c = compiled('numpy, unused (keep_unused=False) + committed d2', lambda a, b: b * 2, x, put(x, d[2]))
show('  unused a committed d7', lambda: c(put(x, d[7]), put(x, d[2])))
c = compiled('numpy, unused, keep_unused=True + committed d2', lambda a, b: b * 2, x, put(x, d[2]),
             keep_unused=True)
show('  kept unused a committed d2', lambda: c(put(x, d[2]), put(x, d[2])))
show('  kept unused a committed d7', lambda: c(put(x, d[7]), put(x, d[2])), full=True)

print('--- multi-device programs')
S = NamedSharding(m, P('x'))
c = compiled('numpy + committed NS(m,P(x)), a+b', lambda a, b: a + b, x, put(x, S))
show('  a committed NS(m,P(x))', lambda: c(put(x, S), put(x, S)))
show('  a committed GSPMD same HLO', lambda: c(put(x, jax._src.sharding_impls.GSPMDSharding(tuple(devs), S._to_xla_hlo_sharding(1))), put(x, S)))
show('  a committed NS(m,P())', lambda: c(put(x, NamedSharding(m, P())), put(x, S)), full=True)
show('  a committed NS(mrev,P(x))', lambda: c(put(x, NamedSharding(mrev, P('x'))), put(x, S)), full=True)
show('  a committed d0', lambda: c(put(x, d[0]), put(x, S)), full=True)
show('  a uncommitted d3', lambda: c(unc(x, 3), put(x, S)))

c = compiled('numpy used by sum only + committed NS(m,P(x)), sum(a)+b', lambda a, b: jnp.sum(a) + b, x, put(x, S))
show('  a committed NS(m,P())', lambda: c(put(x, NamedSharding(m, P())), put(x, S)))
show('  a committed NS(m,P(x))', lambda: c(put(x, S), put(x, S)))

c = compiled('uncommitted + out_shardings=NS(m,P(x)), a*2', lambda a: a * 2, unc(x),
             out_shardings=S)
show('  committed NS(m,P(x))', lambda: c(put(x, S)))
show('  committed NS(m,P())', lambda: c(put(x, NamedSharding(m, P()))), full=True)
show('  committed d0', lambda: c(put(x, d[0])), full=True)

c = compiled('2-D numpy + committed NS(m,P(x,y)), a+b', lambda a, b: a + b, xx,
             put(xx, NamedSharding(m, P('x', 'y'))))
show('  a committed NS(m,P(x,y))', lambda: c(put(xx, NamedSharding(m, P('x', 'y'))), put(xx, NamedSharding(m, P('x', 'y')))))
show('  a committed NS(m,P(y,x))', lambda: c(put(xx, NamedSharding(m, P('y', 'x'))), put(xx, NamedSharding(m, P('x', 'y')))), full=True)

c = compiled('python float + committed NS(m,P(x))', lambda a, b: a + b, 1.0, put(x, S))
show('  a committed float32[] NS(m,P())', lambda: c(put(np.float32(1), NamedSharding(m, P())), put(x, S)))
show('  a committed float32[] NS(m8,P())', lambda: c(put(np.float32(1), NamedSharding(m8, P())), put(x, S)))
show('  a committed float32[] d0', lambda: c(put(np.float32(1), d[0]), put(x, S)), full=True)

with jax.set_mesh(m):
    c = compiled('numpy alone under set_mesh(m)', lambda a: a * 2, x)
    show('  committed NS(m,P())', lambda: c(put(x, NamedSharding(m, P()))))
    show('  committed NS(m,P(x))', lambda: c(put(x, S)), full=True)

c = compiled('uncommitted d0 + committed NS(m,P(x)), unused a, keep_unused=True', lambda a, b: b * 2, unc(x),
             put(x, S), keep_unused=True)
show('  a committed NS(m,P())', lambda: c(put(x, NamedSharding(m, P())), put(x, S)))
show('  a committed NS(m,P(x))', lambda: c(put(x, S), put(x, S)))

c = compiled('device=d3, numpy', lambda a: a * 2, x, device=d[3])
show('  committed NS(m,P(x)) (device= bypass)', lambda: c(put(x, S)))

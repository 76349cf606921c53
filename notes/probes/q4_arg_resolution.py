import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, SingleDeviceSharding
from jax._src.sharding_impls import GSPMDSharding
from jax._src.lib import xla_client as xc
from _show import show, desc

devs = np.array(jax.devices())
d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
mperm = Mesh(devs[[0, 2, 1, 3, 4, 6, 5, 7]].reshape(2, 4), ('x', 'y'))
mrev = Mesh(devs[::-1].reshape(2, 4), ('x', 'y'))
x = np.arange(8.)
f = lambda a: a * 2
F = lambda: (lambda a: a * 2)  # fresh function per experiment (avoids jit caches)
g = lambda a, b: a + b
G = lambda: (lambda a, b: a + b)

print('--- 4a unspecified in_sharding + committed arg')
a_px = jax.device_put(x, NamedSharding(m, P('x')))
print('  arg:', desc(a_px))
show('jit(f)(committed P(x))', lambda: jax.jit(F())(a_px))
show('jit(f).lower(committed P(x)).compile().input_shardings', lambda: jax.jit(F()).lower(a_px).compile().input_shardings)
a_d5 = jax.device_put(x, d[5])
print('  arg:', desc(a_d5))
show('jit(f)(committed on d5)', lambda: jax.jit(F())(a_d5))

print('--- 4b uncommitted single-device arrays')
u = jnp.ones(8)
print('  jnp.ones:', desc(u))
u2 = jax.device_put(x)
print('  device_put(x) no target:', desc(u2))
show('jit(f)(jnp.ones)', lambda: jax.jit(F())(u))
show('jit(g)(jnp.ones, committed P(x))', lambda: jax.jit(G())(u, a_px))
show('jit(g)(jnp.ones, committed d5)', lambda: jax.jit(G())(u, a_d5))
with jax.default_device(d[6]):
    u6 = jnp.ones(8)
print('  jnp.ones under default_device(d6):', desc(u6))
show('jit(f)(uncommitted on d6) outside default_device ctx', lambda: jax.jit(F())(u6))
show('jit(g)(uncommitted d6, committed d5)', lambda: jax.jit(G())(u6, a_d5))

print('--- 4c uncommitted multi-device arrays: can one be created?')
with jax.set_mesh(m):
    show('jnp.ones under set_mesh', lambda: jnp.ones(8))
    show('jit(lambda: jnp.ones(8))() under set_mesh', lambda: jax.jit(lambda: jnp.ones(8))())
show('jit(f, out_shardings=NS(m,P(x)))(np)', lambda: jax.jit(F(), out_shardings=NamedSharding(m, P('x')))(x))
show('device_put(x, NS(m,P(x)))', lambda: jax.device_put(x, NamedSharding(m, P('x'))))
show('make_array_from_callback', lambda: jax.make_array_from_callback((8,), NamedSharding(m, P('x')), lambda i: x[i]))
show('jnp.array(committed P(x))', lambda: jnp.array(a_px))
show('a_px + 1 (eager)', lambda: a_px + 1)
show('jnp.asarray(a_px, copy=True)', lambda: jnp.asarray(a_px, copy=True))
show('jax.device_put(a_px) (no target)', lambda: jax.device_put(a_px))
show('jax.device_put(a_px, may_alias=False)', lambda: jax.device_put(a_px, may_alias=False))
# internal constructor: the only way found
from jax._src import array as arr_mod
unc = arr_mod.ArrayImpl(a_px.aval, a_px.sharding, [s.data for s in a_px.addressable_shards], committed=False)
print('  internal ArrayImpl(committed=False):', desc(unc))
show('jit(f)(uncommitted multi-device)', lambda: jax.jit(F())(unc))
show('jit(f, in_shardings=NS(m,P(x)))(uncommitted multi-device same)', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(unc))
show('jit(f, in_shardings=NS(m,P(y)))(uncommitted multi-device other)', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y')))(unc))
show('jit(f, in_shardings=NS(mrev,P(x)))(uncommitted multi-device)', lambda: jax.jit(F(), in_shardings=NamedSharding(mrev, P('x')))(unc))

print('--- 4d specified in_sharding vs committed arg')
show('in=NS(m,P(y)) vs arg NS(m,P(x))', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y')))(a_px))
show('in=NS(m,P(x)) vs arg NS(m,P(x)) [same]', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(a_px))
show('in=GSPMD(iota [2,4] rold) vs arg NS(m,P(x)) [same HLO, other type]',
     lambda: jax.jit(F(), in_shardings=GSPMDSharding(tuple(d), NamedSharding(m, P('x'))._to_xla_hlo_sharding(1)))(a_px))
show('in=NS(mperm,P(x)) vs arg NS(m,P(x)) [same HLO, other device order]', lambda: jax.jit(F(), in_shardings=NamedSharding(mperm, P('x')))(a_px))
show('in=NS(mrev,P(x)) vs arg NS(m,P(x)) [same HLO, reversed devices]', lambda: jax.jit(F(), in_shardings=NamedSharding(mrev, P('x')))(a_px))
show('in=SDS(d3) vs arg committed d5 [both replicated HLO]', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[3]))(a_d5))
show('in=NS(m,P()) vs arg committed d5 [replicated vs single]', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P()))(a_d5))
show('in=NS(m,P(x)) vs arg committed d5', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(a_d5))
m2a = Mesh(devs[:2], ('a',)); m2b = Mesh(devs[4:6], ('a',))
a_2a = jax.device_put(x, NamedSharding(m2a, P('a')))
show('in=NS(devs4,5 P(a)) vs arg NS(devs0,1 P(a)) [same HLO, disjoint devices]', lambda: jax.jit(F(), in_shardings=NamedSharding(m2b, P('a')))(a_2a))
a_rep = jax.device_put(x, NamedSharding(m, P()))
show('in=SDS(d0) vs arg NS(m,P()) 8-dev replicated', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[0]))(a_rep))
m8 = Mesh(devs, ('z',))
show('in=NS(m8,P(z)) vs arg NS(m,P((x,y)))', lambda: jax.jit(F(), in_shardings=NamedSharding(m8, P('z')))(jax.device_put(x, NamedSharding(m, P(('x', 'y'))))))
# 2 arguments: one arg moved silently, other pins devices
show('jit(g, in=(NS(mrev,P(x)), None))(a_px, a_px)',
     lambda: jax.jit(G(), in_shardings=(NamedSharding(mrev, P('x')), None))(a_px, a_px))
show('HLO equality only: in=NS(m,P(x,None)) 2D vs arg NS(m,P(x)) 2D',
     lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x', None)))(jax.device_put(np.ones((8, 4)), NamedSharding(m, P('x')))))
show('in_sharding shard replicated-size-1 mesh: in=NS(Mesh([d3]),P()) vs arg on d5',
     lambda: jax.jit(F(), in_shardings=NamedSharding(Mesh(devs[3:4], ('a',)), P()))(a_d5))

print('--- 4e memory kinds')
a_pin = jax.device_put(x, NamedSharding(m, P('x'), memory_kind='pinned_host'))
print('  arg:', desc(a_pin))
show('in=NS(m,P(x)) [device] vs committed pinned_host arg', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(a_pin))
show('in=NS(m,P(x),pinned_host) vs committed device arg', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x'), memory_kind='pinned_host'))(a_px))
show('in=NS(m,P(x),pinned_host) vs numpy arg', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x'), memory_kind='pinned_host'))(x))
show('unspecified vs committed pinned_host arg', lambda: jax.jit(F())(a_pin))
show('in=NS(m,P(y)) [device] vs committed pinned_host arg P(x)', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y')))(a_pin))
u_pin = jax.device_put(x, jax.memory.Space.Host) if hasattr(jax, 'memory') else None
if u_pin is not None:
    print('  device_put(x, jax.memory.Space.Host):', desc(u_pin))
unc_pin = arr_mod.ArrayImpl(jax.ShapeDtypeStruct((8,), np.float64).update() if False else u.aval,
                            SingleDeviceSharding(d[0], memory_kind='pinned_host'),
                            [jax.device_put(u, SingleDeviceSharding(d[0], memory_kind='pinned_host')).addressable_data(0)], committed=False)
print('  internal uncommitted pinned_host:', desc(unc_pin))
show('in=NS(m,P(x)) [device] vs UNcommitted pinned_host single-device', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(unc_pin))
show('in=SDS(d0) [device] vs UNcommitted pinned_host', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[0]))(unc_pin))
show('unspecified vs UNcommitted pinned_host', lambda: jax.jit(F())(unc_pin))

print('--- 4f numpy / python scalars with specified in_sharding')
show('in=NS(m,P(x)) numpy', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(x))
show('in=NS(m,P()) python scalar', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P()))(3.0))
show('in=NS(m,P(x)) python scalar', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(3.0))
show('in=SDS(d4) python scalar', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[4]))(3.0))
show('in=NS(m,P(x)) uncommitted jnp.ones single-device', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(u))
show('in=NS(m,P(x)) uncommitted jnp.ones on d6', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(u6))
show('in=NS(m,P(x)) np scalar np.float32(1)', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P()))(np.float32(1)))
print('  process_count:', jax.process_count())

import jax; jax.config.update('jax_num_cpu_devices', 8)
# One jitted function, one wrapper, one (8, 8) argument arriving with different shardings.
# Each line: which counters moved for that call (cache_counters.py): cpp = the Python path ran
# (dispatch miss), trace, lower (module built), jaxcomp (JAX's "compilation cache miss": a new
# MeshComputation), xla (XLA compiled). Arguments are built before counting.
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, SingleDeviceSharding
from jax._src.sharding_impls import GSPMDSharding
from cache_counters import show

devs = np.array(jax.devices())
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
print('Mesh objects are interned:', m is Mesh(devs.reshape(2, 4), ('x', 'y')))
print("P('x') == P('x', None):", P('x') == P('x', None))
x = np.ones((8, 8), np.float32)
put = lambda s: jax.device_put(x, s)
jf = jax.jit(lambda v: lax.mul(v, v))
a = put(NamedSharding(m, P('x')))
show('first call, NS(m, P(x))', lambda: jf(a))
show('the same array again', lambda: jf(a))
b = put(a.sharding); show('another array, the same sharding object', lambda: jf(b))
c = put(NamedSharding(m, P('x'))); show('an equal NamedSharding built again', lambda: jf(c))
d = put(NamedSharding(m, P('x', None))); show("P('x', None): written differently", lambda: jf(d))
d2 = put(NamedSharding(m, P('x', None))); show("P('x', None) again", lambda: jf(d2))
mrev = Mesh(devs[::-1].reshape(2, 4), ('x', 'y'))
e = put(NamedSharding(mrev, P('x'))); show('devices reversed, same HLO', lambda: jf(e))
mren = Mesh(devs.reshape(2, 4), ('a', 'b'))
f = put(NamedSharding(mren, P('a'))); show('axes renamed (a, b), P(a)', lambda: jf(f))
g = put(GSPMDSharding(list(devs), NamedSharding(m, P('x'))._to_xla_hlo_sharding(2)))
show('GSPMDSharding of the same HLO', lambda: jf(g))
g2 = put(GSPMDSharding(list(devs), NamedSharding(m, P('x'))._to_xla_hlo_sharding(2)))
show('an equal GSPMDSharding built again', lambda: jf(g2))
m3 = Mesh(devs.reshape(2, 1, 4), ('x', 'one', 'y'))
h = put(NamedSharding(m3, P('x'))); show('a size-1 axis added to the mesh', lambda: jf(h))
print('--- one device')
jf = jax.jit(lambda v: lax.mul(v, v))
u = jax.numpy.asarray(x); c0 = put(devs[0]); c1 = put(SingleDeviceSharding(devs[0]))
n1 = put(NamedSharding(Mesh(devs[:1], ('a',)), P()))
show('numpy', lambda: jf(x))
show('uncommitted on device 0', lambda: jf(u))
show('committed on device 0', lambda: jf(c0))
show('committed on an equal SingleDeviceSharding', lambda: jf(c1))
show('NamedSharding over a 1-device mesh', lambda: jf(n1))
print('aval of a committed NS(m, P(x)) array (Auto axes):', jax.typeof(a).sharding)

import jax; jax.config.update('jax_num_cpu_devices', 8)
# Several jit wrappers of ONE function object, each called once with the same numpy (8, 8) array,
# in this order; then the keep_unused quirk, the default device and the context mesh.
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, SingleDeviceSharding
from cache_counters import show, counted

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y')); mren = Mesh(devs.reshape(2, 4), ('a', 'b'))
x = np.ones((8, 8), np.float32)
f = lambda v: lax.mul(v, v)
show('jit(f, in_shardings=NS(m, P(x)))', lambda: jax.jit(f, in_shardings=NamedSharding(m, P('x')))(x))
show("jit(f, in_shardings=NS(m, P('x', None)))", lambda: jax.jit(f, in_shardings=NamedSharding(m, P('x', None)))(x))
show('jit(f, in_shardings=NS(renamed, P(a)))', lambda: jax.jit(f, in_shardings=NamedSharding(mren, P('a')))(x))
show('jit(f, out_shardings=NS(m, P(x)))', lambda: jax.jit(f, out_shardings=NamedSharding(m, P('x')))(x))
show('jit(f, out_shardings=NS(renamed, P(a)))', lambda: jax.jit(f, out_shardings=NamedSharding(mren, P('a')))(x))
show('jit(f, in_shardings=SDS(3))', lambda: jax.jit(f, in_shardings=SingleDeviceSharding(d[3]))(x))
show('jit(f, in_shardings=SDS(5))', lambda: jax.jit(f, in_shardings=SingleDeviceSharding(d[5]))(x))
show('jit(f)', lambda: jax.jit(f)(x))
show('jit(f) again, a new wrapper', lambda: jax.jit(f)(x))
show('jit(f, keep_unused=True)', lambda: jax.jit(f, keep_unused=True)(x))
show('jit(f, in_shardings=None)', lambda: jax.jit(f, in_shardings=None)(x))
show('jit(f, donate_argnums=0)', lambda: jax.jit(f, donate_argnums=0)(np.ones((8, 8), np.float32)))
print('--- keep_unused is not part of the dispatch key')
g = lambda a, b: lax.mul(a, a)
ja = jax.device_put(x, NamedSharding(m, P('x'))); jb = jax.device_put(np.ones(4, np.float32), d[5])
show('jit(g)(a on 8 devices, b unused on device 5)', lambda: jax.jit(g)(ja, jb))
show('jit(g, keep_unused=True)(same): served by jit(g)', lambda: jax.jit(g, keep_unused=True)(ja, jb))
g2 = lambda a, b: lax.mul(a, a)
show('a fresh g: jit(g2, keep_unused=True)(same)', lambda: jax.jit(g2, keep_unused=True)(ja, jb))
print('--- context')
jf = jax.jit(lambda v: lax.mul(v, v))
show('numpy, default device 0', lambda: jf(x))
with jax.default_device(d[3]):
    out, c = counted(lambda: jf(x)); print('[numpy under jax.default_device(3)]', c, out.sharding.device_set)
with jax.set_mesh(m):
    out, c = counted(lambda: jf(x)); print('[numpy under jax.set_mesh(m)]', c, out.sharding)

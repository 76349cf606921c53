import jax; jax.config.update('jax_num_cpu_devices', 8)
# An uncommitted array that jit must move to the program's sharding: JAX runs a jitted copy of its
# own, whose trace, lowering and compilation JAX's global counters also count (once per process).
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from cache_counters import show

devs = np.array(jax.devices())
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
x = np.ones((8, 8), np.float32)
u, u2 = jax.numpy.asarray(x), jax.numpy.asarray(x)
jf = jax.jit(lambda v: lax.mul(v, v), in_shardings=NamedSharding(m, P('x')))
show('numpy', lambda: jf(x))
show('uncommitted on device 0 (moved)', lambda: jf(u))
show('another uncommitted array (moved)', lambda: jf(u2))
jg = jax.jit(lambda v: lax.mul(v, v), in_shardings=NamedSharding(m, P('x')))
show('a new function, uncommitted (the copy program is cached)', lambda: jg(u))

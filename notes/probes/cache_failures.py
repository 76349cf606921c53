import jax; jax.config.update('jax_num_cpu_devices', 8)
# A call that raises leaves entries behind: its dispatch entry sends later calls with the same
# signature to Python every time, and a call refused while lowering leaves its trace.
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from cache_counters import show

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
x = np.ones((8, 8), np.float32)
a = jax.device_put(x, NamedSharding(m, P('x'))); b = jax.device_put(np.ones(4, np.float32), d[5])
g = lambda u, v: lax.mul(u, u)
show('jit(g, keep_unused=True)(a, b): refused (devices differ)', lambda: jax.jit(g, keep_unused=True)(a, b))
jg = jax.jit(g)
show('jit(g)(a, b): accepted; the trace is reused', lambda: jg(a, b))
show('jit(g)(a, b) again: the fast path still falls back to Python', lambda: jg(a, b))
h = lambda u: lax.mul(u, u)
jh = jax.jit(h, in_shardings=NamedSharding(m, P()))
c = jax.device_put(x, NamedSharding(m, P('x')))
show('in_shardings P(), committed P(x): refused while lowering', lambda: jh(c))
r = jax.device_put(x, NamedSharding(m, P()))
show('committed P(): accepted, the refused call traced already', lambda: jh(r))

import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from _show import show

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
mperm = Mesh(devs[[0, 2, 1, 3, 4, 6, 5, 7]].reshape(2, 4), ('x', 'y'))
x = np.arange(8.)
S = NamedSharding(m, P('x'))
# the same jitted function called repeatedly: do cached (C++ fast path) calls decide differently?
jf = jax.jit(lambda a: a * 2, in_shardings=S)
for i in range(2):
    show(f'call {i}: numpy', lambda: jf(x))
    show(f'call {i}: committed S', lambda: jf(jax.device_put(x, S)))
    show(f'call {i}: committed P(y) (error)', lambda: jf(jax.device_put(x, NamedSharding(m, P('y')))))
    show(f'call {i}: committed d5 (error)', lambda: jf(jax.device_put(x, d[5])))
ju = jax.jit(lambda a: a * 2)
for i in range(2):
    show(f'unspecified call {i}: committed S', lambda: ju(jax.device_put(x, S)))
    show(f'unspecified call {i}: committed mperm', lambda: ju(jax.device_put(x, NamedSharding(mperm, P('x')))))
    show(f'unspecified call {i}: uncommitted on d0', lambda: ju(np.ones(8)))
with jax.set_mesh(m):
    show('same jitted fn under set_mesh (ctx mesh is in the cache key)', lambda: ju(np.ones(8)))
show('after set_mesh exit', lambda: ju(np.ones(8)))
# LAST, because the 2nd call kills the process (see q9_fastpath_crash.py):
for i in range(2):
    show(f'call {i}: committed mperm P(x) (silently moved on call 0)', lambda: jf(jax.device_put(x, NamedSharding(mperm, P('x')))))

import jax; jax.config.update('jax_num_cpu_devices', 8)
# Minimal: a jitted function with in_shardings, called TWICE with a committed argument whose sharding has the
# same HloSharding as the in_sharding but a different device list. Run with an argument:
#   python3 q9_fastpath_crash.py mperm   |  python3 q9_fastpath_crash.py single  | python3 q9_fastpath_crash.py rep
import sys
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, SingleDeviceSharding
devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
mperm = Mesh(devs[[0, 2, 1, 3, 4, 6, 5, 7]].reshape(2, 4), ('x', 'y'))
x = np.arange(8.)
case = sys.argv[1] if len(sys.argv) > 1 else 'mperm'
if case == 'mperm':
    jf = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(m, P('x')))
    arg = jax.device_put(x, NamedSharding(mperm, P('x')))
elif case == 'single':
    jf = jax.jit(lambda a: a * 2, in_shardings=SingleDeviceSharding(d[3]))
    arg = jax.device_put(x, d[5])
elif case == 'rep':
    jf = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(m, P()))
    arg = jax.device_put(x, d[5])
for i in range(3):
    out = jf(arg)
    print(f'{case} call {i}: ok, out devices', [dd.id for dd in out.sharding._device_assignment], flush=True)

import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from _show import show
devs = np.array(jax.devices())
m = Mesh(devs.reshape(2, 4), ('x', 'y')); m45 = Mesh(devs[4:6], ('a',))
x = np.arange(8.)
a_m = jax.device_put(x, NamedSharding(m, P('x')))
# unused second argument (keep_unused=False default): which checks still apply to it?
show('unused committed P(y) arg vs in_sharding P(x) (HLO check runs before DCE)',
     lambda: jax.jit(lambda a, b: a * 2, in_shardings=(None, NamedSharding(m, P('x'))))(a_m, jax.device_put(x, NamedSharding(m, P('y')))))
show('unused pinned_host arg vs in_sharding device (memory-kind check runs before DCE)',
     lambda: jax.jit(lambda a, b: a * 2, in_shardings=(None, NamedSharding(m, P('x'))))(a_m, jax.device_put(x, NamedSharding(m, P('x'), memory_kind='pinned_host'))))
from jax._src import array as arr_mod
unc = arr_mod.ArrayImpl(a_m.aval, a_m.sharding, [s.data for s in a_m.addressable_shards], committed=False)
show('unused uncommitted multi-device arg (finalize_arg_sharding runs before DCE)', lambda: jax.jit(lambda a, b: a * 2)(a_m, unc))
show('unused arg on other devices (device-assignment check runs after DCE)', lambda: jax.jit(lambda a, b: a * 2)(a_m, jax.device_put(x, NamedSharding(m45, P('a')))))
show('donated but unused arg: compiled.input_shardings (is it dropped?)',
     lambda: jax.jit(lambda a, b: a * 2, donate_argnums=1).lower(a_m, x).compile().input_shardings)

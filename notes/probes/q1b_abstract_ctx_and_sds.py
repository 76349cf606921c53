import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, AbstractMesh, AxisType, SingleDeviceSharding
from _show import show

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
me = Mesh(devs.reshape(2, 4), ('x', 'y'), axis_types=(AxisType.Explicit,) * 2)
m4 = Mesh(devs[:4], ('a',), axis_types=(AxisType.Explicit,))
ame = me.abstract_mesh
x = np.arange(8.)
F = lambda: (lambda a: a * 2)
a_me = jax.device_put(x, NamedSharding(me, P('x')))
a_m4 = jax.device_put(x, NamedSharding(m4, P('a')))

print('--- explicit abstract mesh context (use_abstract_mesh)')
with jax.sharding.use_abstract_mesh(ame):
    show('in=P(x) + committed arg on explicit mesh me', lambda: jax.jit(F(), in_shardings=P('x'))(a_me), full=True)
    show('in=None + committed arg on me', lambda: jax.jit(F())(a_me))
    show('in=None + committed arg on 4-device mesh', lambda: jax.jit(F())(a_m4), full=True)
    show('out=P(x) + committed arg on me', lambda: jax.jit(F(), out_shardings=P('x'))(a_me), full=True)

print('--- ShapeDtypeStruct arguments to .lower (count as committed when they carry a sharding)')
sds = lambda s=None: jax.ShapeDtypeStruct((8,), np.float32, sharding=s)
show('lower(SDS no sharding).compile().input_shardings', lambda: jax.jit(F()).lower(sds()).compile().input_shardings)
show('lower(SDS NS(m,P(x))).compile().input_shardings', lambda: jax.jit(F()).lower(sds(NamedSharding(m, P('x')))).compile().input_shardings)
show('in=NS(m,P(y)) lower(SDS NS(m,P(x)))', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y'))).lower(sds(NamedSharding(m, P('x')))), full=True)
show('in=SDS(d3) lower(SDS on d5) [replicated HLO both -> accepted]', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[3])).lower(sds(SingleDeviceSharding(d[5]))).compile().input_shardings)
show('two SDS args on different devices', lambda: jax.jit(lambda a, b: a + b).lower(sds(SingleDeviceSharding(d[3])), sds(SingleDeviceSharding(d[5]))), full=True)

import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from jax._src.sharding_impls import GSPMDSharding
from _show import show

devs = np.array(jax.devices())
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
sds = lambda *s: jax.ShapeDtypeStruct(s, np.float32)
F = lambda: (lambda a: a * 2)

print('--- arguments (phase: .trace() = before lowering)')
show("in P('x','y') rank-1 arg, trace", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x', 'y'))).trace(sds(8)), full=True)
show("in P('x',None) rank-1 arg (trailing None counts)", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x', None))).trace(sds(8)))
show("in P('y') arg shape (6,) on axis size 4, trace", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y'))).trace(sds(6)), full=True)
show("in P('y') arg shape (6,), call with numpy", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y')))(np.zeros(6)))
show("in P(('x','y')) arg (4,) [4 % 8]", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P(('x', 'y')))).trace(sds(4)))
show("in P('x') arg (0,) [empty dim]", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')))(np.zeros(0)))
show("in P() rank-0 arg", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P()))(np.float32(1)))
show("in GSPMD(iota [2,4]) rank-1 arg", lambda: jax.jit(F(), in_shardings=GSPMDSharding(tuple(devs), NamedSharding(m, P('x', 'y'))._to_xla_hlo_sharding(2))).trace(sds(8)))
show("in GSPMD(iota [2,4]) arg (2,6)", lambda: jax.jit(F(), in_shardings=GSPMDSharding(tuple(devs), NamedSharding(m, P('x', 'y'))._to_xla_hlo_sharding(2))).trace(sds(2, 6)))
show("in P('x') on 2nd arg bad, 1st arg also bad -> which reported", lambda: jax.jit(lambda a, b: a + b, in_shardings=(NamedSharding(m, P('x', 'y')), NamedSharding(m, P('y')))).trace(sds(8), sds(6)))
show("nested arg path", lambda: jax.jit(lambda d: d['k'][1], in_shardings=({'k': (None, NamedSharding(m, P('y')))},)).trace({'k': (sds(8), sds(6))}))

print('--- outputs')
show("out P('x','y') rank-1 output, trace", lambda: jax.jit(F(), out_shardings=NamedSharding(m, P('x', 'y'))).trace(sds(8)), full=True)
show("out P('y') output (6,), trace", lambda: jax.jit(F(), out_shardings=NamedSharding(m, P('y'))).trace(sds(6)), full=True)
show("out P('y') on 2nd output of tuple", lambda: jax.jit(lambda a: (a, a[:6]), out_shardings=(None, NamedSharding(m, P('y')))).trace(sds(8)))
show("out P('y') nested dict output path", lambda: jax.jit(lambda a: {'r': [a, a[:6]]}, out_shardings={'r': [None, NamedSharding(m, P('y'))]}).trace(sds(8)))
show("in ok + out bad: which first (in checked before tracing)", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('y')), out_shardings=NamedSharding(m, P('x', 'y'))).trace(sds(6)))

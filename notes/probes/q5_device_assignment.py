import jax; jax.config.update('jax_num_cpu_devices', 8)
import numpy as np
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, AbstractMesh, SingleDeviceSharding
from _show import show

devs = np.array(jax.devices()); d = jax.devices()
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
mrev = Mesh(devs[::-1].reshape(2, 4), ('x', 'y'))
m01 = Mesh(devs[[0, 1]], ('a',)); m45 = Mesh(devs[[4, 5]], ('a',)); m4 = Mesh(devs[:4], ('a',))
x = np.arange(8.)
F = lambda: (lambda a: a * 2)
G = lambda: (lambda a, b: a + b)
H = lambda: (lambda a, b, c: a + b + c)
a_m = jax.device_put(x, NamedSharding(m, P('x')))
a_rev = jax.device_put(x, NamedSharding(mrev, P('x')))
a_01 = jax.device_put(x, NamedSharding(m01, P('a')))
a_45 = jax.device_put(x, NamedSharding(m45, P('a')))
a_d5 = jax.device_put(x, d[5])

print('--- two committed args, unspecified in_shardings')
show('args (m, mrev) [same set, reversed order]', lambda: jax.jit(G())(a_m, a_rev), full=True)
show('args (devs01, devs45)', lambda: jax.jit(G())(a_01, a_45), full=True)
show('args (d5 single, m)', lambda: jax.jit(G())(a_d5, a_m), full=True)
show('3 args (m, m, devs45): third differs', lambda: jax.jit(H())(a_m, a_m, a_45), full=True)
show('3 args uncommitted, m, devs45', lambda: jax.jit(H())(jnp.ones(8), a_m, a_45), full=True)

print('--- in_shardings vs args / each other')
show('in=(NS(m45),NS(m01)) numpy args', lambda: jax.jit(G(), in_shardings=(NamedSharding(m45, P('a')), NamedSharding(m01, P('a'))))(x, x), full=True)
show('in=(NS(m45), None) args (numpy, committed 01)', lambda: jax.jit(G(), in_shardings=(NamedSharding(m45, P('a')), None))(x, a_01), full=True)
show('in=(None, NS(m45)) args (committed 01, numpy)', lambda: jax.jit(G(), in_shardings=(None, NamedSharding(m45, P('a'))))(a_01, x), full=True)
show('in=(NS(m45),None) args (committed 01 [moved], committed 01)', lambda: jax.jit(G(), in_shardings=(NamedSharding(m45, P('a')), None))(a_01, a_01), full=True)

print('--- in vs out shardings')
show('in=NS(m), out=NS(mrev)', lambda: jax.jit(F(), in_shardings=NamedSharding(m, P('x')), out_shardings=NamedSharding(mrev, P('x')))(x), full=True)
show('committed arg m, out=NS(m45)', lambda: jax.jit(F(), out_shardings=NamedSharding(m45, P('a')))(a_m), full=True)
show('numpy arg, out=NS(m45) only', lambda: jax.jit(F(), out_shardings=NamedSharding(m45, P('a')))(x))
show('in=SDS(d3) out=SDS(d5)', lambda: jax.jit(F(), in_shardings=SingleDeviceSharding(d[3]), out_shardings=SingleDeviceSharding(d[5]))(x), full=True)

print('--- sharding inside computation')
show('wsc(NS(m45)) inside, committed arg m', lambda: jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, NamedSharding(m45, P('a'))))(a_m), full=True)
show('device_put(d5) inside, committed arg m', lambda: jax.jit(lambda a: jax.device_put(a * 2, d[5]))(a_m), full=True)

print('--- context mesh (set_mesh)')
with jax.set_mesh(m):
    show('set_mesh(m): committed arg on mrev', lambda: jax.jit(F())(a_rev), full=True)
    show('set_mesh(m): committed arg on d5', lambda: jax.jit(F())(a_d5), full=True)
    show('set_mesh(m): in=NS(m45)', lambda: jax.jit(F(), in_shardings=NamedSharding(m45, P('a')))(x), full=True)
    show('set_mesh(m): out=NS(m45)', lambda: jax.jit(F(), out_shardings=NamedSharding(m45, P('a')))(x), full=True)
    show('set_mesh(m): uncommitted jnp.ones arg (d0)', lambda: jax.jit(F())(jnp.ones(8)))
    show('set_mesh(m): committed arg on m', lambda: jax.jit(F())(a_m))
with jax.set_mesh(mrev):
    show('set_mesh(mrev): committed arg on m', lambda: jax.jit(F())(a_m), full=True)

print('--- unused args (keep_unused)')
show('unused committed arg on devs45, used on m', lambda: jax.jit(lambda a, b: a * 2)(a_m, a_45))
show('same with keep_unused=True', lambda: jax.jit(lambda a, b: a * 2, keep_unused=True)(a_m, a_45), full=True)
show('unused arg with in_sharding NS(m45)', lambda: jax.jit(lambda a, b: a * 2, in_shardings=(None, NamedSharding(m45, P('a'))))(a_m, x))

print('--- default device')
show('no sharding anywhere, numpy', lambda: jax.jit(F())(x))
with jax.default_device(d[3]):
    show('jax.default_device(d3), numpy', lambda: jax.jit(F())(x))
    show('jax.default_device(d3), uncommitted on d0', lambda: jax.jit(F())(jax.device_put(x, d[0]).copy() if False else jnp.ones(8)))
u0 = jnp.ones(8)
with jax.default_device(d[3]):
    show('jax.default_device(d3), uncommitted array created on d0 earlier', lambda: jax.jit(F())(u0))
    show('jax.default_device(d3), committed arg d5', lambda: jax.jit(F())(a_d5))
    show('jax.default_device(d3), no args', lambda: jax.jit(lambda: jnp.ones(3))())

print('--- abstract-mesh shardings as jit shardings')
am = AbstractMesh((2, 4), ('x', 'y')); am4 = AbstractMesh((4,), ('a',))
show('in=NS(am,P(x)) numpy', lambda: jax.jit(F(), in_shardings=NamedSharding(am, P('x')))(x), full=True)
show('in=NS(am,P(x)) committed arg on m', lambda: jax.jit(F(), in_shardings=NamedSharding(am, P('x')))(a_m))
show('in=NS(am,P(x)) committed arg on mrev', lambda: jax.jit(F(), in_shardings=NamedSharding(am, P('x')))(a_rev))
show('in=(NS(am,P(x)), None) args (numpy, committed on m)', lambda: jax.jit(G(), in_shardings=(NamedSharding(am, P('x')), None))(x, a_m))
show('in=(NS(am,P(x)), None) args (numpy, committed on m4 [4 devs])',
     lambda: jax.jit(G(), in_shardings=(NamedSharding(am, P('x')), None))(x, jax.device_put(x, NamedSharding(m4, P('a')))), full=True)
show('in=(NS(am8), NS(am4)) numpy', lambda: jax.jit(G(), in_shardings=(NamedSharding(am, P('x')), NamedSharding(am4, P('a'))))(x, x), full=True)
with jax.set_mesh(m4):
    show('set_mesh(m4) + in=NS(am 8)', lambda: jax.jit(F(), in_shardings=NamedSharding(am, P('x')))(x), full=True)

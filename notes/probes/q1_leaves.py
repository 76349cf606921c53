import jax; jax.config.update('jax_num_cpu_devices', 8)
import warnings
import numpy as np
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh, AbstractMesh, AxisType, SingleDeviceSharding
from _show import show

devs = np.array(jax.devices())
m = Mesh(devs.reshape(2, 4), ('x', 'y'))
x = np.arange(8.)
f = lambda a: a * 2
F = lambda: (lambda a: a * 2)  # fresh function per experiment (avoids jit caches)

print('--- None leaves, no context mesh')
show('in=None no mesh, numpy arg', lambda: jax.jit(F(), in_shardings=None)(x))
show('out=None no mesh', lambda: jax.jit(F(), out_shardings=None)(x))
show('in=None no mesh, committed sharded arg', lambda: jax.jit(F(), in_shardings=None)(jax.device_put(x, NamedSharding(m, P('x')))))

print('--- None leaves with jax.set_mesh')
with jax.set_mesh(m):
    show('set_mesh in=None numpy', lambda: jax.jit(F(), in_shardings=None)(x))
    show('set_mesh out=None numpy', lambda: jax.jit(F(), out_shardings=None)(x))
    show('set_mesh no shardings numpy', lambda: jax.jit(F())(x))
    show('set_mesh in=None committed P(x) arg', lambda: jax.jit(F(), in_shardings=None)(jax.device_put(x, NamedSharding(m, P('x')))))
    show('set_mesh no shardings committed P(x) arg', lambda: jax.jit(F())(jax.device_put(x, NamedSharding(m, P('x')))))
    show('set_mesh out=None committed P(x) arg', lambda: jax.jit(F(), out_shardings=None)(jax.device_put(x, NamedSharding(m, P('x')))))

print('--- PartitionSpec leaf, no context mesh')
def mk():
    return jax.jit(F(), in_shardings=P('x'))
show('jit(in=P) creation', mk)
show('jit(in=P) call', lambda: mk()(x))
show('jit(out=P) call', lambda: jax.jit(F(), out_shardings=P('x'))(x))
show('jit(in=P) lower', lambda: mk().lower(x))

print('--- PartitionSpec leaf with set_mesh')
with jax.set_mesh(m):
    show('set_mesh in=P(x)', lambda: jax.jit(F(), in_shardings=P('x'))(x))
    show('set_mesh out=P(x)', lambda: jax.jit(F(), out_shardings=P('x'))(x))
    show('set_mesh in=P(z) bad axis', lambda: jax.jit(F(), in_shardings=P('z'))(x))
jit_created_outside = jax.jit(F(), in_shardings=P('x'))
with jax.set_mesh(m):
    show('jit created outside, called inside set_mesh', lambda: jit_created_outside(x))

print('--- abstract mesh contexts')
am = AbstractMesh((2, 4), ('x', 'y'))
ame = AbstractMesh((2, 4), ('x', 'y'), axis_types=(AxisType.Explicit,) * 2)
show('set_mesh(AbstractMesh)', lambda: jax.set_mesh(am))
with jax.sharding.use_abstract_mesh(am):
    show('use_abstract_mesh(Auto) in=P(x) call', lambda: jax.jit(F(), in_shardings=P('x'))(x))
with jax.sharding.use_abstract_mesh(ame):
    show('use_abstract_mesh(Explicit) in=P(x) call', lambda: jax.jit(F(), in_shardings=P('x'))(x))
    show('use_abstract_mesh(Explicit) in=P(x) lower', lambda: jax.jit(F(), in_shardings=P('x')).lower(x))
    show('use_abstract_mesh(Explicit) in=P(x) trace.lower(lowering_platforms=cpu)',
         lambda: jax.jit(F(), in_shardings=P('x')).trace(jax.ShapeDtypeStruct((8,), jnp.float32)).lower(lowering_platforms=('cpu',)).as_text()[:0] or 'lowered')
    show('use_abstract_mesh(Explicit) in=None call', lambda: jax.jit(F(), in_shardings=None)(x))

print('--- deprecated `with mesh:`')
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter('always')
    with m:
        print('  warning on enter:', [(x_.category.__name__, str(x_.message)[:80]) for x_ in w])
        show('with mesh: jit in=P(x)', lambda: jax.jit(F(), in_shardings=P('x'))(x))
        show('with mesh: jit out=P(x)', lambda: jax.jit(F(), out_shardings=P('x'))(x))
        show('with mesh: jit no shardings', lambda: jax.jit(F())(x))
        show('with mesh: get_concrete_mesh empty?', lambda: jax._src.mesh.get_concrete_mesh().empty)
        show('with mesh: get_abstract_mesh empty?', lambda: jax._src.mesh.get_abstract_mesh().empty)
        from jax.experimental.pjit import pjit
        show('with mesh: pjit in=P(x)', lambda: pjit(F(), in_shardings=P('x'))(x))
        show('with mesh: pjit in=None', lambda: pjit(F(), in_shardings=None)(x))

print('--- device= / backend=')
d3 = jax.devices()[3]
show('jit(device=d3) creation', lambda: jax.jit(F(), device=d3))
show('jit(device=d3) numpy', lambda: jax.jit(F(), device=d3)(x))
show('jit(backend=cpu) numpy', lambda: jax.jit(F(), backend='cpu')(x))
show('jit(device=d3) committed on d5', lambda: jax.jit(F(), device=d3)(jax.device_put(x, jax.devices()[5])))
show('jit(device=d3) committed sharded 8 devs', lambda: jax.jit(F(), device=d3)(jax.device_put(x, NamedSharding(m, P('x')))))
show('jit(device=d3) committed pinned_host', lambda: jax.jit(F(), device=d3)(jax.device_put(x, SingleDeviceSharding(jax.devices()[5], memory_kind='pinned_host'))))
show('jit(device=d3, backend=cpu)', lambda: jax.jit(F(), device=d3, backend='cpu'))
show('jit(device=d3, in_shardings=None)', lambda: jax.jit(F(), device=d3, in_shardings=None))
show('jit(device=d3, in_shardings=P())', lambda: jax.jit(F(), device=d3, in_shardings=P()))
show('jit(device=d3, out_shardings=None)', lambda: jax.jit(F(), device=d3, out_shardings=None))
with jax.set_mesh(m):
    show('jit(device=d3) under set_mesh', lambda: jax.jit(F(), device=d3)(x))
show('jit(backend=gpu)', lambda: jax.jit(F(), backend='gpu')(x))

print('--- AUTO leaves')
import jax._src.sharding_impls as si, jax._src.interpreters.pxla as px
print('  AUTO in sharding_impls:', hasattr(si, 'AUTO'), ' in pxla:', hasattr(px, 'AUTO'), ' in jax.sharding:', hasattr(jax.sharding, 'AUTO'))
show('in=Layout.AUTO (a layout, not a sharding)', lambda: jax.jit(F(), in_shardings=jax._src.layout.Layout.AUTO))

print('--- UNSPECIFIED (argument left out)')
show('no shardings numpy', lambda: jax.jit(F())(x))

print('--- non-sharding leaves')
show('in=3', lambda: jax.jit(F(), in_shardings=3))
show("in='x'", lambda: jax.jit(F(), in_shardings='x'))
show("in=('x',)", lambda: jax.jit(F(), in_shardings=('x',)))
show("out=3", lambda: jax.jit(F(), out_shardings=3))
show("in=NamedSharding(empty mesh)", lambda: jax.jit(F(), in_shardings=NamedSharding(Mesh(np.empty((0,), object), ('a',)), P())))
show("in=P(UNCONSTRAINED)", lambda: jax.jit(F(), in_shardings=P(P.UNCONSTRAINED)))
show("in=NS(m,P(UNCONSTRAINED))", lambda: jax.jit(F(), in_shardings=NamedSharding(m, P(P.UNCONSTRAINED))))
show("out=NS(m,P(UNCONSTRAINED))", lambda: jax.jit(F(), out_shardings=NamedSharding(m, P(P.UNCONSTRAINED))))
show("in=P('x','x') dup", lambda: jax.jit(F(), in_shardings=P('x', 'x')))
show("in=jax.devices()[0] (a Device)", lambda: jax.jit(F(), in_shardings=jax.devices()[0]))

import jax; jax.config.update('jax_num_cpu_devices', 8)
# pjit._process_in_axis_resources is a global util.cache keyed by in_shardings leaves (compared by
# ==), the avals and the debug info (function source location and argument names), and it returns
# the flat in_shardings. A jit of ANOTHER function object made at the same source line, with an
# equal but differently written in_sharding, gets the first one's sharding objects back.
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax._src.sharding_impls import GSPMDSharding
from jax._src.lib import xla_client as xc

devs = jax.devices()[:4]
x = np.ones((8, 4), np.float32)
iota = xc.HloSharding.iota_tile((4, 1))                                    # {devices=[4,1]<=[4]}
listed = GSPMDSharding(devs, xc.HloSharding.from_string('{devices=[4,1]0,1,2,3}'))
tiled = GSPMDSharding(devs, iota)
print('equal as shardings:', listed == tiled, '| hashes equal:', hash(listed) == hash(tiled))


def make():
    return lambda a: lax.mul(a, a)   # every function object comes from this line


def call(sharding, label):
    try:
        out = jax.jit(make(), in_shardings=sharding)(x)
        print(f'[{label}] OK {out.sharding}')
    except Exception as e:  # noqa
        print(f'[{label}] ERR {type(e).__name__}: {str(e)[:120]}')


import sys
if len(sys.argv) > 1 and sys.argv[1] == 'fresh':
    call(tiled, 'iota form alone (fresh process)')
else:
    call(listed, 'listed form first')
    call(tiled, 'iota form, another function object, same source line')

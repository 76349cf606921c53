import jax; jax.config.update('jax_num_cpu_devices', 8)
# Weak types, Python bool, 64-bit numpy, dtypes, shapes and static arguments.
import numpy as np
from jax import lax
from cache_counters import show

x = np.ones((8, 8), np.float32)
jf = jax.jit(lambda v: lax.mul(v, v))
show('Python float 2.0', lambda: jf(2.0))
show('Python float 3.0 (another value)', lambda: jf(3.0))
show('numpy float32 scalar', lambda: jf(np.float32(2.0)))
show('Python int 2', lambda: jf(2))
jb = jax.jit(lambda v: lax.bitwise_and(v, v))
show('Python bool True', lambda: jb(True))
show('numpy bool_ 0-d', lambda: jb(np.bool_(True)))
print('types:', jax.typeof(True), jax.typeof(2), jax.typeof(2.0), jax.typeof(np.bool_(True)))
jf = jax.jit(lambda v: lax.mul(v, v))
show('numpy float32 (8, 8)', lambda: jf(x))
show('numpy float64 (8, 8): narrowed to float32', lambda: jf(x.astype(np.float64)))
show('int32', lambda: jf(x.astype(np.int32)))
show('shape (4, 8)', lambda: jf(x[:4]))
js = jax.jit(lambda v, k: lax.mul(v, v), static_argnums=1)
show('static True', lambda: js(x, True))
show('static 1 (== True, another type)', lambda: js(x, 1))
show('static True again', lambda: js(x, True))
show('static 1.0', lambda: js(x, 1.0))

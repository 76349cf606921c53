"""Drawn steps of a real model, each a JAX function of drawn shapes (issue 32, item 2).

The program harnesses draw bodies of constraints, device_puts, jits and ``neg``/``sin``;
a real step holds more: matmuls and einsums, a bias added by implicit broadcasting,
reductions and ``argmax``, cumulative sums, sorts, ``where``, reshapes and slices, pads and
concatenations, softmax and layer norm, powers and casts, typed PRNG keys drawing
noise, and (under vmap) gathers, scatters, dynamic slices, top_k, clamp and erf. A
:class:`StepCase` is one such step with its example arguments' shapes (a key argument's
shape, dtype ``key<fry>``); the vmap and AD harnesses draw them
(:func:`step_cases`) and hold the spec's rewrite of ``describe_program`` of the step to
JAX's own transformation of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from hypothesis import strategies as st

__all__ = ["StepCase", "step_cases", "examples_of", "KEY", "STEP_NAMES", "VMAP_STEP_NAMES"]

KEY = "key"   # an argument that is a typed PRNG key


@dataclasses.dataclass(frozen=True)
class StepCase:
    """A step: its name, its drawn parameters (shapes, axes, the operation), the shape of
    each example argument (or ``(KEY, shape)`` for a key array)."""

    name: str
    params: tuple
    shapes: tuple

    @property
    def function(self) -> Callable:
        return _BUILDERS[self.name][1](**dict(self.params))


def examples_of(step: StepCase) -> list:
    """One example's arguments: float32 arrays of the step's shapes, keys for its keys."""
    import jax
    import numpy as np

    out = []
    for k, shape in enumerate(step.shapes):
        if shape and shape[0] == KEY:
            base = jax.random.key(k)
            out.append(base if shape[1] == () else jax.random.split(base, shape[1]))
        else:
            size = max(1, int(np.prod(shape)))
            out.append(np.linspace(-1.0, 1.0, size, dtype=np.float32).reshape(shape))
    return out


def _jnp():
    import jax
    import jax.numpy as jnp
    return jax, jnp


# --------------------------------------------------------------------------- the steps

def _matmul(*, transposed: bool) -> Callable:
    _, jnp = _jnp()
    return (lambda w, x: jnp.tanh(x @ w.T)) if transposed else (lambda w, x: x @ w)


def _bias(*, op: str) -> Callable:
    jax, jnp = _jnp()
    act = {"tanh": jnp.tanh, "gelu": jax.nn.gelu, "sigmoid": jax.nn.sigmoid}[op]
    return lambda w, b, x: act(x @ w + b)


def _einsum() -> Callable:
    _, jnp = _jnp()
    return lambda a, b: jnp.einsum("bij,bjk->bik", a, b)


def _binary(*, op: str) -> Callable:
    _, jnp = _jnp()
    return {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply,
            "max": jnp.maximum, "div": lambda a, b: a / (b * b + 1.0)}[op]


def _reduce(*, op: str, axis: int) -> Callable:
    _, jnp = _jnp()
    return {"sum": lambda x: jnp.sum(x, axis), "max": lambda x: jnp.max(x, axis),
            "argmax": lambda x: jnp.argmax(x, axis), "argmin": lambda x: jnp.argmin(x, axis),
            "mean": lambda x: jnp.mean(x * x, axis, keepdims=True)}[op]


def _cumulative(*, op: str, axis: int) -> Callable:
    jax, jnp = _jnp()
    return {"cumsum": lambda x: jnp.cumsum(x, axis), "cumprod": lambda x: jnp.cumprod(x, axis),
            "cummax": lambda x: jax.lax.cummax(x, axis)}[op]


def _sort(*, op: str, axis: int) -> Callable:
    _, jnp = _jnp()
    return {"sort": lambda x: jnp.sort(x, axis), "argsort": lambda x: jnp.argsort(x, axis),
            "rank": lambda x: jnp.sum(jnp.sort(x, axis) * x)}[op]


def _where() -> Callable:
    _, jnp = _jnp()
    return lambda p, a, b: jnp.where(p > 0, a, b)


def _structural(*, op: str) -> Callable:
    _, jnp = _jnp()
    return {"reshape": lambda x: jnp.reshape(x, (-1,)) * 2.0,
            "slice": lambda x: x[1:, ::2],
            "squeeze": lambda x: jnp.squeeze(x[:1], 0),
            "flip": lambda x: jnp.flip(x, 0) - x,
            "pad": lambda x: jnp.pad(x, ((1, 0), (0, 2))),
            "concat": lambda x: jnp.concatenate([x, -x], 1)}[op]


def _layer(*, op: str) -> Callable:
    jax, jnp = _jnp()

    def layernorm(x, g):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5) * g
    return {"softmax": lambda x, g: jax.nn.softmax(x * g, axis=-1),
            "layernorm": layernorm,
            "logsumexp": lambda x, g: jax.nn.logsumexp(x + g, axis=-1),
            "powers": lambda x, g: (x ** 3 + jnp.arange(x.shape[-1], dtype=jnp.float32) * g
                                    ).astype(jnp.int32).astype(jnp.float32)}[op]


def _noise(*, op: str) -> Callable:
    jax, jnp = _jnp()
    return {"normal": lambda k, x: x + jax.random.normal(k, x.shape),
            "uniform-fold-in": lambda k, x: x * jax.random.uniform(jax.random.fold_in(k, 3),
                                                                   x.shape),
            "split-normal": lambda k, x: x + jax.random.normal(jax.random.split(k)[1],
                                                               x.shape),
            "key-data": lambda k, x: x + jax.random.bits(jax.random.wrap_key_data(
                jax.random.key_data(k) + jnp.uint32(1)), x.shape).astype(jnp.float32)}[op]


def _indexing(*, op: str) -> Callable:
    """Indexing with indices the step computes (so every argument stays a float array):
    a row or rows taken, a dynamic slice or update at a computed start, a scatter-add,
    top_k, clamp, erf."""
    jax, jnp = _jnp()
    row = lambda x: jnp.argmax(x[:, 0])   # noqa: E731  (a traced scalar index)
    return {"take-row": lambda x: x[row(x)] * 2.0,
            "take-along": lambda x: jnp.take_along_axis(x, jnp.argsort(x, 1)[:, :2], 1),
            "dynamic-slice": lambda x: jax.lax.dynamic_slice_in_dim(x, row(x), 1, 0),
            "dynamic-update": lambda x: jax.lax.dynamic_update_slice_in_dim(
                x, x[:1] * 2.0, row(x), 0),
            "scatter-add": lambda x: x.at[jnp.argmax(x, 0)].add(1.0),
            "top-k": lambda x: jax.lax.top_k(x, 2)[0],
            "clamp": lambda x: jax.lax.clamp(-0.5, x, 0.5),
            "erf": lambda x: jax.scipy.special.erf(x) * x}[op]


_DIMS = st.sampled_from([2, 4, 8])


@st.composite
def _shapes_matmul(draw: Any) -> tuple:
    m, k, n = draw(_DIMS), draw(_DIMS), draw(_DIMS)
    transposed = draw(st.booleans())
    return (("transposed", transposed),), ((n, k) if transposed else (k, n), (m, k))


@st.composite
def _shapes_bias(draw: Any) -> tuple:
    m, k, n = draw(_DIMS), draw(_DIMS), draw(_DIMS)
    op = draw(st.sampled_from(["tanh", "gelu", "sigmoid"]))
    return (("op", op),), ((k, n), (n,), (m, k))


@st.composite
def _shapes_einsum(draw: Any) -> tuple:
    b, i, j, k = (draw(_DIMS) for _ in range(4))
    return (), ((b, i, j), (b, j, k))


@st.composite
def _shapes_binary(draw: Any) -> tuple:
    m, n = draw(_DIMS), draw(_DIMS)
    other = draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), ()]))
    op = draw(st.sampled_from(["add", "sub", "mul", "max", "div"]))
    pair = ((m, n), other) if draw(st.booleans()) else (other, (m, n))
    return (("op", op),), pair


def _one_axis(ops: list[str]) -> Any:
    @st.composite
    def shapes(draw: Any) -> tuple:
        shape = (draw(_DIMS), draw(_DIMS))
        return (("op", draw(st.sampled_from(ops))), ("axis", draw(st.sampled_from([0, 1])))
                ), (shape,)
    return shapes()


@st.composite
def _shapes_where(draw: Any) -> tuple:
    m, n = draw(_DIMS), draw(_DIMS)
    pred = draw(st.sampled_from([(m, n), ()]))
    return (), (pred, (m, n), (m, n))


@st.composite
def _shapes_structural(draw: Any) -> tuple:
    op = draw(st.sampled_from(["reshape", "slice", "squeeze", "flip", "pad", "concat"]))
    return (("op", op),), ((draw(_DIMS), draw(_DIMS)),)


@st.composite
def _shapes_layer(draw: Any) -> tuple:
    m, n = draw(_DIMS), draw(_DIMS)
    op = draw(st.sampled_from(["softmax", "layernorm", "logsumexp", "powers"]))
    return (("op", op),), ((m, n), (n,))


@st.composite
def _shapes_noise(draw: Any) -> tuple:
    m, n = draw(_DIMS), draw(_DIMS)
    op = draw(st.sampled_from(["normal", "uniform-fold-in", "split-normal", "key-data"]))
    return (("op", op),), ((KEY, ()), (m, n))


@st.composite
def _shapes_indexing(draw: Any) -> tuple:
    op = draw(st.sampled_from(["take-row", "take-along", "dynamic-slice", "dynamic-update",
                               "scatter-add", "top-k", "clamp", "erf"]))
    return (("op", op),), ((draw(_DIMS), draw(_DIMS)),)


_BUILDERS = {
    "matmul": (_shapes_matmul(), _matmul),
    "bias": (_shapes_bias(), _bias),
    "einsum": (_shapes_einsum(), _einsum),
    "binary": (_shapes_binary(), _binary),
    "reduce": (_one_axis(["sum", "max", "argmax", "argmin", "mean"]), _reduce),
    "cumulative": (_one_axis(["cumsum", "cumprod", "cummax"]), _cumulative),
    "sort": (_one_axis(["sort", "argsort", "rank"]), _sort),
    "where": (_shapes_where(), _where),
    "structural": (_shapes_structural(), _structural),
    "layer": (_shapes_layer(), _layer),
    "noise": (_shapes_noise(), _noise),
    "indexing": (_shapes_indexing(), _indexing),
}
# (the indexing steps are drawn under vmap only: their AD is opaque to the spec)
STEP_NAMES = tuple(name for name in _BUILDERS if name != "indexing")
VMAP_STEP_NAMES = tuple(_BUILDERS)


@st.composite
def step_cases(draw: Any, names: tuple[str, ...] = STEP_NAMES) -> StepCase:
    """A drawn step of one of ``names``, with its parameters and example shapes."""
    name = draw(st.sampled_from(names))
    params, shapes = draw(_BUILDERS[name][0])
    return StepCase(name, params, shapes)

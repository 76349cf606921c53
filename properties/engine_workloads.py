"""Workloads for the engine: placement-equal rewrites of a sharding, and a sharded MLP training step.

:func:`rewrites` writes one JAX sharding in the other ways that place every block on the
same device — renamed mesh axes, a GSPMDSharding for a NamedSharding, size-1 mesh axes,
trailing Nones, a one-device mesh for a SingleDeviceSharding — which is what the shardlaw
cache policy must not recompile for. :func:`placement_equal_workload` is the fixed
workload the tests and the benchmark count compilations on. :func:`mlp` builds a small MLP
training step sharded over a 2x4 mesh (data parallel over ``data``, model parallel over
``model``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["rewrites", "placement_equal_workload", "count_compiles", "mlp"]


def _jax() -> Any:
    import jax
    return jax


def _mesh(devices: Any, shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    jax = _jax()
    auto = (jax.sharding.AxisType.Auto,) * len(names)
    return jax.sharding.Mesh(np.asarray(devices, dtype=object).reshape(shape), names,
                             axis_types=auto)


def rewrites(sharding: Any, ndim: int) -> list[tuple[str, Any]]:
    """``sharding`` and other ways of writing it that place the same blocks on the same devices."""
    from jax._src.sharding_impls import GSPMDSharding
    from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

    out: list[tuple[str, Any]] = [("as given", sharding)]
    hlo = sharding._to_xla_hlo_sharding(ndim)
    devices = list(sharding._device_assignment)
    out.append(("GSPMD", GSPMDSharding(tuple(devices), hlo, memory_kind=sharding.memory_kind)))
    if isinstance(sharding, SingleDeviceSharding):
        mesh = _mesh(devices, (1,), ("one",))
        out.append(("1-device mesh", NamedSharding(mesh, P())))
        out.append(("1-device mesh, trailing Nones", NamedSharding(mesh, P(*[None] * ndim))))
        return out
    if not isinstance(sharding, NamedSharding):
        return out
    mesh, spec = sharding.mesh, sharding.spec
    names = tuple(n + "_r" for n in mesh.axis_names)
    renamed = _mesh(devices, tuple(mesh.axis_sizes), names)
    rename = dict(zip(mesh.axis_names, names))

    def respell(entry: Any) -> Any:
        if entry is None:
            return None
        if isinstance(entry, tuple):
            return tuple(rename[e] for e in entry)
        return rename[entry]

    entries = list(spec)
    out.append(("renamed axes", NamedSharding(renamed, P(*[respell(e) for e in entries]))))
    if len(entries) < ndim:
        out.append(("trailing None", NamedSharding(mesh, P(*entries, *[None] * (ndim - len(entries))))))
    else:
        trimmed = list(entries)
        while trimmed and trimmed[-1] is None:
            trimmed.pop()
        if trimmed != entries:
            out.append(("trailing None dropped", NamedSharding(mesh, P(*trimmed))))
    with_unit = _mesh(devices, tuple(mesh.axis_sizes) + (1,), tuple(mesh.axis_names) + ("unit",))
    out.append(("size-1 axis", NamedSharding(with_unit, spec)))
    if entries and entries[0] is not None:
        first = entries[0] if isinstance(entries[0], tuple) else (entries[0],)
        out.append(("size-1 axis used", NamedSharding(with_unit, P(first + ("unit",),
                                                                     *entries[1:]))))
    if len(devices) == 1:
        out.append(("single device", SingleDeviceSharding(devices[0])))
    return out


def placement_equal_workload() -> tuple[tuple[int, ...], list[tuple[str, int, Any]]]:
    """(shape, [(how it is written, placement class, sharding)]) over JAX's first 8 devices.

    Three placement classes: rows split over a 2x4 mesh's first axis, replicated over all
    eight devices, and one device.
    """
    jax = _jax()
    from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

    devices = jax.devices()[:8]
    mesh = _mesh(devices, (2, 4), ("x", "y"))
    shape = (8, 16)
    rows = NamedSharding(mesh, P("x"))
    everywhere = NamedSharding(mesh, P())
    one = SingleDeviceSharding(devices[0])
    workload = []
    for placement, sharding in enumerate((rows, everywhere, one)):
        for how, written in rewrites(sharding, len(shape)):
            workload.append((how, placement, written))
    flat8 = _mesh(devices, (8,), ("z",))
    workload.append(("one flat axis", 1, NamedSharding(flat8, P())))
    return shape, workload


class count_compiles:
    """Count XLA compilations inside a ``with`` block (JAX's backend-compile events)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __enter__(self) -> "count_compiles":
        self.count = 0

        def listener(event: str, duration: float, **_: Any) -> None:
            if event == self.EVENT:
                self.count += 1

        self._listener = listener
        _jax().monitoring.register_event_duration_secs_listener(listener)
        return self

    def __exit__(self, *exc: object) -> None:
        _jax().monitoring.unregister_event_duration_listener(self._listener)


def mlp(sizes: tuple[int, int, int] = (16, 32, 8), batch: int = 16, seed: int = 0
        ) -> tuple[Callable, Callable, Any, Any]:
    """(make params, train step, batch x, batch y) for an MLP sharded over a 2x4 mesh.

    The batch is split over ``data`` (2 ways, data parallel); the hidden layer over
    ``model`` (4 ways, model parallel). ``step(params, x, y) -> (params, loss)`` takes one
    step of gradient descent on the mean squared error.
    """
    jax = _jax()
    jnp = jax.numpy
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = _mesh(jax.devices()[:8], (2, 4), ("data", "model"))
    n_in, n_hidden, n_out = sizes
    rng = np.random.default_rng(seed)
    host = {
        "w1": rng.normal(size=(n_in, n_hidden)).astype(np.float32) * 0.3,
        "b1": np.zeros((n_hidden,), np.float32),
        "w2": rng.normal(size=(n_hidden, n_out)).astype(np.float32) * 0.3,
        "b2": np.zeros((n_out,), np.float32),
    }
    layout = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}

    def params() -> dict:
        return {k: jax.device_put(v, NamedSharding(mesh, layout[k])) for k, v in host.items()}

    x = jax.device_put(rng.normal(size=(batch, n_in)).astype(np.float32),
                       NamedSharding(mesh, P("data", None)))
    y = jax.device_put(rng.normal(size=(batch, n_out)).astype(np.float32),
                       NamedSharding(mesh, P("data", None)))

    def loss(p: dict, x: Any, y: Any) -> Any:
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    def step(p: dict, x: Any, y: Any) -> tuple[dict, Any]:
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, p, grads), value

    return params, step, x, y

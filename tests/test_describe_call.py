"""describe_call reads real JAX objects into a Call without running anything."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardlaw.spec as S


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


def test_arguments_results_and_uses(mesh):
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    call = S.describe_call(lambda a, b, n, c: (a * n, {"s": b}), x, np.ones(3, np.int32), 2,
                           jax.ShapeDtypeStruct((4,), np.float32), static_argnums=2)
    kinds = [a.kind if isinstance(a, S.Arg) else "static" for a in call.args]
    assert kinds == ["committed", "numpy", "static", "abstract"]
    assert call.args[0].sharding == S.from_jax(x.sharding)
    assert call.uses == (True, True, False)  # c is not used
    out, rest = call.outputs
    assert out.shape == (8, 8) and out.mesh == S.AbstractMesh((2, 4), ("x", "y"))
    assert rest["s"].dtype == "int32"


def test_verdict_agrees_with_jax_on_a_device_mismatch(mesh):
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("x")))
    y = jax.device_put(np.ones(8, np.float32), jax.devices()[3])
    f = lambda a, b: a + b.sum()
    verdict = S.jit_call(S.describe_call(f, x, y))
    with pytest.raises(ValueError):
        jax.jit(f)(x, y)
    assert verdict.rule == "DA-1" and "args[1]" in verdict.message


def test_context_mesh_is_read(mesh):
    with jax.set_mesh(mesh):
        call = S.describe_call(lambda a: a * 2, np.ones((6, 8), np.float32), in_shardings=P("y"))
    assert call.context_mesh == S.from_jax(mesh)
    verdict = S.jit_call(call)
    assert verdict.rule == "FIT-1" and "6" in verdict.message


def test_not_an_argument_is_a_clear_error():
    with pytest.raises(TypeError, match="static_argnums"):
        S.describe_call(lambda a: a, object())


def test_compiler_in_is_passed_on(mesh):
    """The compiler's choice for an input jit leaves open decides the AOT call (AOT-3)."""
    import dataclasses

    x = np.ones((8, 8), np.float32)
    split = NamedSharding(mesh, P("x", "y"))
    f = lambda a: a * 2
    compiled = jax.jit(f, out_shardings=split).lower(x).compile()
    chosen = [S.from_jax(s._to_xla_hlo_sharding(2))
              for s in jax.tree_util.tree_leaves(compiled.input_shardings)]
    call = S.describe_call(f, x, out_shardings=split, compiler_in=chosen)
    assert call.compiler_in == tuple(chosen)
    replicated = jax.device_put(x, NamedSharding(mesh, P()))
    call = dataclasses.replace(call, aot_args=(
        S.Arg.committed((8, 8), S.from_jax(replicated.sharding)),))
    with pytest.raises(ValueError):
        compiled(replicated)
    assert S.jit_call(call).rule == "AOT-3"

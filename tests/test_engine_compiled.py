"""What ``explain()`` shows of the executable it runs: the compiled placement of every result
(the executable's output shardings, as JAX spells them) and the collectives of its compiled
HLO, held to what JAX's own jit compiles for the same call (issue 33, item 5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardlaw.engine as engine
from shardlaw.compiled_hlo import collectives_in_hlo

MESH = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))


def _step(a, b):
    h = jnp.tanh(a @ b)
    return h.sum(0), h.T, h.reshape(4, -1)


def _arguments():
    a = jax.device_put(jnp.ones((16, 32)), NamedSharding(MESH, P("x", "y")))
    b = jax.device_put(jnp.ones((32, 64)), NamedSharding(MESH, P("y", None)))
    return a, b


def test_explain_shows_the_compiled_placements_and_collectives_jax_compiles():
    a, b = _arguments()
    explained = engine.jit(_step).explain(a, b)
    theirs = jax.jit(_step).lower(a, b).compile()
    assert explained.compiled_out_shardings == tuple(theirs.output_shardings)
    assert [tuple(s.spec) for s in explained.compiled_out_shardings] == [(), (None, "x"), ("x",)]
    assert explained.collectives == tuple(collectives_in_hlo(theirs.as_text()))
    kinds = [(c.kind, set(c.replica_groups)) for c in explained.collectives]
    assert kinds == [("all-reduce", {(0, 1, 2, 3), (4, 5, 6, 7)}),      # a @ b, over y
                     ("all-reduce", {(0, 4), (1, 5), (2, 6), (3, 7)})]   # h.sum(0), over x
    text = str(explained)
    assert "compiled out result[1]: NamedSharding(" in text and "P(None, 'x')" in text
    assert "collective all-reduce groups {0,1,2,3} {4,5,6,7}: float32[8,64], 2048 bytes" in text


def test_a_shared_executable_shows_its_own_compiled_placement():
    # The placement-class cache serves a second signature with the first one's executable:
    # explain() shows the executable that runs (its output shardings), beside the labels
    # the results of this call get.
    a, b = _arguments()
    reordered = jax.sharding.Mesh(MESH.devices, ("p", "q"), axis_types=MESH.axis_types)
    f = engine.jit(_step)
    f.explain(a, b)
    a2 = jax.device_put(a, NamedSharding(reordered, P("p", "q")))
    b2 = jax.device_put(b, NamedSharding(reordered, P("q", None)))
    second = f.explain(a2, b2)
    assert second.executable.startswith("shared")
    assert [s.mesh.axis_names for s in second.compiled_out_shardings] == [("x", "y")] * 3
    assert [s.mesh.axis_names for s in second.out_shardings] == [("p", "q")] * 3
    assert second.collectives == f.explain(a, b).collectives


def test_a_call_without_collectives_shows_none_and_a_refusal_shows_neither():
    f = engine.jit(lambda v: v * 2)
    explained = f.explain(np.ones(8, np.float32))
    assert explained.collectives == () and len(explained.compiled_out_shardings) == 1
    refused = engine.jit(lambda v: v, in_shardings=NamedSharding(MESH, P("x"))).explain(
        np.ones(3, np.float32))
    assert not refused.accepted
    assert refused.collectives == () and refused.compiled_out_shardings == ()


def test_the_docs_example_of_explain_runs_as_written():
    # docs/engine.rst's doctest (run by the Sphinx doctest build in CI) run here too.
    import doctest
    from pathlib import Path
    text = (Path(__file__).parents[1] / "docs" / "engine.rst").read_text()
    start = text.index(".. doctest:: engine-explain")
    block = text[start:text.index("\n\nThe first all-reduce", start)]
    source = "\n".join(line[3:] for line in block.splitlines()[1:])
    test = doctest.DocTestParser().get_doctest(source, {"jax": jax}, "engine-explain", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False) == (0, 10)

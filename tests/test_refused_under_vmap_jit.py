"""describe_program of what JAX refuses inside vmap's batching rule for a jit, a cond, a
scan, a while loop or a remat (issue 32, item 4), against JAX 0.10.2 on 8 CPU devices.

vmap traces such a call's body on one example, then its batching rule batches that body and
binds the batched call: a cond whose predicate vmap batches becomes a ``select_n`` of its
branches' results, which JAX cannot type where the batched predicate is unsplit and the
cases are split over Explicit axes (the cond ``jax.grad`` makes of a ``lax.cond`` under
``vmap``), a ShardingTypeError. Only ``jax.jit`` of the vmapped function, given no options,
was described before (spec/bridge/refused_batching.py read its options from the frame of
JAX's jit); given out_shardings, static arguments, numpy arguments and in_shardings (one
steps draw of 5,040), or with the vmap anywhere else in the function, it was JAX's own
error. The call vmap was batching is now described as JAX staged it on the example (its
bodies and options read from the primitive's parameters) and batched by the spec, after
what JAX traced before it; a jit's out_shardings, where that description is not reached,
are read from the jit's own record of them, flattened over the function's results. Each
is held to JAX on both sides: the neighbour JAX accepts (the cases unsplit) is accepted
alike (traced, compiled and run), the refused one refused by PROG-8, at the trace stage,
with JAX's class, at the select_n.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shardlaw.properties import steps_harness as harness
from shardlaw.properties.registry import checks
from shardlaw.properties.steps_strategies import StepCase
from shardlaw.spec.bridge.program import describe_program
from shardlaw.spec.bridge.refused_batching import refused_in_batching
from shardlaw.spec.core.shardings import UNSPECIFIED

from test_steps_arguments import NS, P, held_to_jax

lax = jax.lax
EXPLICIT = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)


def _explicit(spec):
    return NS(EXPLICIT, spec)


def _data(shape=(4, 8)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 3


def _on(spec, shape=(4, 8)):
    """An array of ``shape`` placed by ``spec`` on the (2, 4) mesh of Explicit axes."""
    return jax.device_put(_data(shape), _explicit(spec))


def _signs():
    return np.array([1.0, -1.0, 1.0, -1.0], np.float32)


def _loss(h):
    return lax.cond(h.sum() > 0, lambda v: -v, lambda v: v, h).sum()


def one(p, x):
    """The gradient of a cond's result, scaled by ``p``: under vmap the cond ``grad``
    makes is batched into a select_n by the batched predicate."""
    return jax.grad(_loss)(x) * p


def pair(p, x):
    return one(p, x), x


def resharded(p, x):
    """``one`` of ``x`` resharded over 'y' (typed so wherever the argument came from)."""
    return one(p, jax.sharding.reshard(x * 1.0, _explicit(P("y"))))


def scanned(p, x):
    return lax.scan(lambda c, _: (one(p, c), None), x, None, length=2)[0]


def looped(p, x):
    return lax.fori_loop(0, 2, lambda i, c: one(p, c), x)


@jax.custom_jvp
def custom(p, x):
    return one(p, x)


@custom.defjvp
def _custom_jvp(primals, tangents):
    return custom(*primals), tangents[1]


def _split():
    return _signs(), _on(P(None, "y"))


def _unsplit():
    return _signs(), _on(P())


def _inside(f, **kwargs):
    """``f`` under a vmap inside the function (JAX's jit around it)."""
    return lambda p, x: jax.vmap(f, **kwargs)(p, x)


def _static(f):
    """A jit with a static argument calling ``f`` under vmap."""
    return jax.jit(lambda p, x, k: jax.vmap(f)(p, x) * k, static_argnums=2)


_SELECT = "body[6].jit.body[3]"   # (the batched cond: moves, branch jits, the select_n)

# name: (the function, its arguments, the path of the refusal; None: both accept)
CASES = {
    "jit-of-vmap": (jax.jit(jax.vmap(one)), _split, _SELECT),
    "jit-of-vmap-unsplit": (jax.jit(jax.vmap(one)), _unsplit, None),
    "jit-of-vmap-out_shardings": (jax.jit(jax.vmap(one), out_shardings=_explicit(P())),
                                  _split, _SELECT),
    "jit-of-vmap-out_shardings-unsplit": (jax.jit(jax.vmap(one),
                                                  out_shardings=_explicit(P())),
                                          _unsplit, None),
    "jit-of-vmap-out_shardings-tree": (jax.jit(jax.vmap(pair),
                                               out_shardings=(_explicit(P()), None)),
                                       _split, _SELECT),
    "jit-of-vmap-static_argnums": (jax.jit(jax.vmap(lambda p, x, k: one(p, x) * k,
                                                    in_axes=(0, 0, None)),
                                           static_argnums=2),
                                   lambda: (*_split(), 3.0), _SELECT),
    "jit-of-vmap-static_argnums-unsplit": (jax.jit(jax.vmap(lambda p, x, k: one(p, x) * k,
                                                            in_axes=(0, 0, None)),
                                                   static_argnums=2),
                                           lambda: (*_unsplit(), 3.0), None),
    "vmap-in-a-jit-with-static_argnums": (_static(one), lambda: (*_split(), 3.0), _SELECT),
    "numpy-arguments-and-in_shardings": (
        jax.jit(jax.vmap(resharded), in_shardings=(_explicit(P()), _explicit(P()))),
        lambda: (_signs(), _data()), "body[8].jit.body[3]"),
    "numpy-arguments-and-in_shardings-out_shardings": (
        jax.jit(jax.vmap(resharded), in_shardings=(_explicit(P()), _explicit(P())),
                out_shardings=_explicit(P())),
        lambda: (_signs(), _data()), "body[8].jit.body[3]"),
    "numpy-arguments-and-in_shardings-unsplit": (
        jax.jit(jax.vmap(one), in_shardings=(_explicit(P()), _explicit(P()))),
        lambda: (_signs(), _data()), None),
    "vmap-inside": (_inside(one), _split, _SELECT),
    "vmap-inside-unsplit": (_inside(one), _unsplit, None),
    "vmap-inside-of-a-scan": (_inside(scanned), _split, "body[0].scan.body[6]"),
    "vmap-inside-of-a-scan-unsplit": (_inside(scanned), _unsplit, None),
    "vmap-inside-of-a-fori_loop": (_inside(looped), _split, "body[0].scan.body[7]"),
    "vmap-inside-of-a-remat": (_inside(jax.checkpoint(one)), _split, "body[0].jit.body[6]"),
    "vmap-inside-of-a-remat-unsplit": (_inside(jax.checkpoint(one)), _unsplit, None),
    "vmap-inside-of-a-custom_jvp": (_inside(custom), _split,
                                    "body[0].jit.body[6].jit.body[3]"),
    "jit-of-vmap-of-a-remat-out_shardings": (
        jax.jit(jax.vmap(jax.checkpoint(one)), out_shardings=_explicit(P())), _split,
        "body[0].jit.body[6]"),
}


@checks("PROG-8")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_call_vmaps_batching_rule_stages_is_held_to_jax(name):
    fun, arguments, path = CASES[name]
    args = arguments()
    _, verdict, problems = held_to_jax(fun, *args)
    assert not problems, problems
    if path is None:
        assert verdict.accepted
        return
    with pytest.raises(Exception) as refused:
        (fun if hasattr(fun, "trace") else jax.jit(fun)).trace(*args)
    assert type(refused.value).__name__ == "ShardingTypeError"
    assert (verdict.rule, verdict.stage, verdict.path, verdict.jax_error) == (
        "PROG-8", "trace", path, "ShardingTypeError")


@checks("PROG-8")
def test_the_steps_draw_of_numpy_arguments_typed_by_in_shardings_is_described():
    """The steps draw of the deep run left "not described" (seed 20262007): a vmapped
    step over numpy arguments given in_shardings over an Explicit mesh, whose cond's cases
    an activation constraint splits over 'y'. The property's own comparison: described,
    refused alike."""
    case = StepCase(layers=("softmax",), depth=2, cond=True, transform="vmap",
                    optimizer="adamw", mesh="explicit", grid=(1, 8), plan="replicated",
                    constraint="model", given=True)
    agree, unread = harness.TALLY["agree"], harness.TALLY["not described"]
    assert harness.compare_step(case) == []
    assert (harness.TALLY["agree"] - agree, harness.TALLY["not described"] - unread) == (1, 0)


@checks("PROG-8")
def test_a_jits_out_shardings_are_read_where_it_refuses_in_vmaps_batching():
    """jax.jit of a vmapped function JAX refuses inside vmap's batching, given
    out_shardings as a tree: the options the spec's batched program is put under hold
    them flattened over the function's results on one example, a None leaf left to the
    compiler, as JAX's jit equation would hold them."""
    jitted = jax.jit(jax.vmap(pair), out_shardings=(_explicit(P()), None))
    args = _split()
    given = []
    program = describe_program(jax.jit(pair), *(a[0] for a in args))

    def under(options):
        given.append(options)
        return program
    results = jax.eval_shape(pair, *(a[0] for a in args))
    assert refused_in_batching(jitted, args, under, results) is None   # (accepted: not it)
    [options] = given
    assert [str(s) for s in options["out_shardings"]] == [
        str(describe_program(jax.jit(lambda v: v, out_shardings=_explicit(P())),
                             args[1]).out_shardings[0]), str(UNSPECIFIED)]
    assert refused_in_batching(jitted, args, under) is None and len(given) == 1

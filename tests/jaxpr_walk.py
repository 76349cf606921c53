"""Test-side readers of a program's equations, bodies included, on both sides: the
primitive names of a jaxpr (:func:`jax_kinds`), and the placing equations of a spec
Program and of a jaxpr (:func:`spec_placing`, :func:`jax_placing`). Imported by the test
modules that hold a rewrite's equations to JAX's (``from jaxpr_walk import ...``: pytest
puts ``tests/`` on the path)."""

from __future__ import annotations

import jax

from shardlaw.properties.program_ad_harness import placing, typed
from shardlaw.spec import from_jax
from shardlaw.spec.bridge.program import value_type_of
from shardlaw.spec.program.control_flow import Cond, While


def jax_kinds(jaxpr, out=None) -> list:
    """The primitive names of ``jaxpr``'s equations in order, every jaxpr in an equation's
    parameters flattened in after it."""
    from jax._src import core

    out = [] if out is None else out
    for eqn in jaxpr.eqns:
        out.append(eqn.primitive.name)
        for inner in core.jaxprs_in_params(eqn.params):
            jax_kinds(inner, out)
    return out


def spec_bodies(eq):
    """The bodies of a spec equation: a cond's branches, a while loop's cond and body, or its
    one body."""
    if isinstance(eq, Cond):
        return eq.branches
    if isinstance(eq, While):
        return (eq.cond, eq.body_fun)
    return () if eq.body is None else (eq.body,)


def spec_placing(program) -> list:
    """The placing equations of a spec Program in order, every body flattened in: each
    constraint's, device_put's and reshard's sharding and the types it gives."""
    out = []
    for eq in program.equations:
        placed = placing(eq)
        if placed is not None:
            out.append(placed)
        for body in spec_bodies(eq):
            out += spec_placing(body)
    return out


def jax_placing(jaxpr) -> list:
    """:func:`spec_placing` read from a jaxpr (every jaxpr in an equation's parameters)."""
    from jax._src import core

    out = []
    for eqn in jaxpr.eqns:
        name, params = eqn.primitive.name, eqn.params
        types = typed(value_type_of(v.aval, "a result") for v in eqn.outvars)
        if name == "sharding_constraint":
            out.append((name, from_jax(params["sharding"]), types))
        elif name == "device_put":
            out.append((name, tuple(None if d is None else d.id if isinstance(d, jax.Device)
                                    else from_jax(d) for d in params["devices"]), types))
        elif name == "reshard":
            out.append((name, from_jax(params["dst_sharding"]), types))
        for inner in core.jaxprs_in_params(params):
            out += jax_placing(inner)
    return out

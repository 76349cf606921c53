"""JAX's control-flow, remat and custom-derivative equations read into the spec's kinds
(:mod:`shardlaw.spec.program.control_flow`): ``scan``, ``while``, ``cond``, ``remat2``
(``jax.checkpoint``), ``custom_jvp_call`` and ``custom_vjp_call``, each body read as a
Program once (a scan's body is not unrolled).

A custom-derivative call is read by its primal body (``call_jaxpr``); its rule
(``jvp_jaxpr_fun``, ``fwd``/``bwd``) is a function JAX calls only under AD, not a jaxpr of
the trace.
"""

from __future__ import annotations

from typing import Any, Callable

from ..program.control_flow import Cond, CustomJvp, CustomVjp, Remat, Scan, While

__all__ = ["CONTROL_FLOW_PRIMITIVES", "control_flow_equation"]

CONTROL_FLOW_PRIMITIVES = ("scan", "while", "cond", "remat2", "custom_jvp_call",
                           "custom_vjp_call")

# read_body(jaxpr, where): the Program of a (closed or open) jaxpr, its inputs its types
Reader = Callable[[Any, str], Any]


def control_flow_equation(eqn: Any, operands: tuple[int, ...], results: tuple, where: str,
                          read_body: Reader) -> Any:
    """The spec's equation for one of JAX's control-flow equations (its name in
    :data:`CONTROL_FLOW_PRIMITIVES`)."""
    name, params = eqn.primitive.name, eqn.params
    if name == "scan":
        return Scan(operands, results, body=read_body(params["jaxpr"], f"{where}.scan."),
                    length=int(params["length"]), reverse=bool(params["reverse"]),
                    num_consts=int(params["num_consts"]), num_carry=int(params["num_carry"]))
    if name == "while":
        return While(operands, results,
                     cond=read_body(params["cond_jaxpr"], f"{where}.while.cond."),
                     body_fun=read_body(params["body_jaxpr"], f"{where}.while.body."),
                     cond_consts=int(params["cond_nconsts"]),
                     body_consts=int(params["body_nconsts"]))
    if name == "cond":
        return Cond(operands, results, branches=tuple(
            read_body(b, f"{where}.cond.branches[{i}].")
            for i, b in enumerate(params["branches"])))
    if name == "remat2":
        return Remat(operands, results, body=read_body(params["jaxpr"], f"{where}.remat2."),
                     name="checkpoint", prevent_cse=bool(params["prevent_cse"]),
                     differentiated=bool(params["differentiated"]))
    kind = CustomJvp if name == "custom_jvp_call" else CustomVjp
    called = getattr(params.get("name"), "__name__", None) or str(params.get("name", name))
    return kind(operands, results, body=read_body(params["call_jaxpr"], f"{where}.{name}."),
                name=called)

"""JAX's control-flow, remat and custom-derivative equations read into the spec's kinds
(:mod:`shardlaw.spec.program.control_flow`): ``scan``, ``while``, ``cond``, ``remat2``
(``jax.checkpoint``), ``custom_jvp_call``, ``custom_vjp_call`` and ``custom_lin`` (the
tangent of a custom_vjp function that JAX's own jvp or linearize leaves in a trace), each
body read as a Program once (a scan's body is not unrolled).

A custom-derivative call is read by its primal body (``call_jaxpr``) and by its rules,
functions JAX calls only under AD (``jvp_jaxpr_fun``; ``fwd_jaxpr_thunk`` and ``bwd``),
each traced here once for every input differentiated (:func:`custom_rules`): a rule that
calls its own function again (``jax.nn.relu``'s calls ``relu``) is read to a depth of
:data:`RULE_DEPTH`, deeper calls' rules when AD asks for them (``rules_later``); a rule
JAX fails to trace is left unread (None), except a custom_jvp's rule JAX refuses while tracing it (a call in it JAX
refuses over the primals and tangents, :func:`~shardlaw.spec.bridge.refusals.
describe_refused_rule`): that rule is read up to the refused call (``rule_refused``;
None where the spec does not describe the refusal). A custom_jvp's rule taking symbolic
zeros is read besides for the inputs without a tangent AD leaves, when it asks for them
(``zero_rule``, :func:`_zero_rule`: one trace per set asked, not 2 ** n up front); a
custom_vjp's ``fwd`` and ``bwd`` taking symbolic zeros, for the inputs not perturbed and
the cotangents that are zeros (``zero_rules``, :func:`_zero_vjp_rules`).
"""

from __future__ import annotations

from typing import Any, Callable

from ..program.control_flow import Cond, CustomJvp, CustomLin, CustomVjp, Remat, Scan, While

__all__ = ["CONTROL_FLOW_PRIMITIVES", "OnDemand", "control_flow_equation", "policy_name"]

CONTROL_FLOW_PRIMITIVES = ("scan", "while", "cond", "remat2", "custom_jvp_call",
                           "custom_vjp_call", "custom_lin")

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
                     differentiated=bool(params["differentiated"]),
                     policy=policy_name(params.get("policy"), None if params[
                         "differentiated"] else params["jaxpr"]))
    if name == "custom_lin":
        return custom_lin_equation(eqn, operands, results, where, read_body)
    kind = CustomJvp if name == "custom_jvp_call" else CustomVjp
    called = getattr(params.get("name"), "__name__", None) or str(params.get("name", name))
    return kind(operands, results, body=read_body(params["call_jaxpr"], f"{where}.{name}."),
                name=called, **custom_rules(eqn, f"{where}.{name}.", read_body))


def policy_name(policy: Any, jaxpr: Any = None) -> str | None:
    """The name a remat's ``policy`` is held by (None: JAX's default, or
    ``nothing_saveable``, which saves nothing alike); a function of the user's own, given
    the remat's body ``jaxpr``, with the table of what it answers there
    (:func:`~shardlaw.spec.bridge.remat_policies.policy_table`)."""
    import jax

    policies = jax.checkpoint_policies
    if policy is None or policy is policies.nothing_saveable:
        return None
    for name in ("everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable"):
        if policy is getattr(policies, name) or policy == getattr(policies, name):
            return name
    either = _both_policies(policy)
    if either is not None:
        return either
    names = getattr(policy, "saveable_names", None)
    if type(policy).__name__ == "SaveOnlyTheseNames" and names is not None:
        return f"save_only_these_names({', '.join(sorted(names))})"
    names = getattr(policy, "names", None)
    if type(policy).__name__ == "SaveAnyNamesButThese" and names is not None:
        return f"save_any_names_but_these({', '.join(sorted(names))})"
    named = f"<{getattr(policy, '__name__', type(policy).__name__)}>"
    if jaxpr is None or not callable(policy) or type(policy).__module__.startswith("jax"):
        return named
    from .remat_policies import policy_table

    return policy_table(policy, jaxpr, named)


def _both_policies(policy: Any) -> str | None:
    """``save_from_both_policies(a, b)`` for JAX's policy of that name over two policies
    named (``nothing_saveable`` for JAX's default), else None (a function of the user's
    own)."""
    code = getattr(policy, "__code__", None)
    if getattr(policy, "__qualname__", None) != "save_from_both_policies.<locals>.policy" \
            or code is None or code.co_freevars != ("policy_1", "policy_2"):
        return None
    names = [policy_name(cell.cell_contents) or "nothing_saveable"
             for cell in policy.__closure__]
    return f"save_from_both_policies({names[0]}, {names[1]})"


class OnDemand:
    """A reader of rules read when AD asks for them (a closure over JAX's functions for
    them): called as it; a copy is itself, and pickled (sent to another process, where
    those functions are not) it is None, rules not read."""

    __slots__ = ("read",)

    def __init__(self, read: Callable[..., Any]) -> None:
        self.read = read

    def __call__(self, *args: Any) -> Any:
        return self.read(*args)

    def __copy__(self) -> "OnDemand":
        return self

    def __deepcopy__(self, memo: dict) -> "OnDemand":
        return self

    def __reduce__(self) -> tuple:
        return (_unread, ())


def _unread() -> None:
    return None


# How deep a rule calling its own function again is read up front (first-order AD reads
# the rule of a call; differentiating that rule again, the rule of the call inside it);
# deeper calls' rules are read when AD asks for them (``rules_later``).
RULE_DEPTH = 2
_reading = [0]   # the rules being read now, nested


def custom_rules(eqn: Any, where: str, read_body: Reader) -> dict:
    """The fields of a custom call that hold its rules (:class:`CustomJvp`'s ``rule``,
    :class:`CustomVjp`'s ``fwd`` and ``bwd``), read from JAX's functions for them (or,
    nested deeper than :data:`RULE_DEPTH`, the reader of them, ``rules_later``)."""
    params = eqn.params
    fields = {"num_consts": int(params.get("num_consts", 0)),
              "symbolic_zeros": bool(params.get("symbolic_zeros", False))}
    if _reading[0] >= RULE_DEPTH:
        return {**fields, "rules_later": _rules_later(eqn, where, read_body)}
    return {**fields, **_read_rules(eqn, where, read_body)}


def _read_rules(eqn: Any, where: str, read_body: Reader) -> dict:
    """A custom call's rules read one level deeper than those being read now ({}: JAX
    fails to trace them)."""
    _reading[0] += 1
    try:
        if eqn.primitive.name == "custom_jvp_call":
            return _jvp_rule(eqn, where, read_body)
        return _vjp_rules(eqn, where, read_body)
    except Exception:   # noqa: BLE001 - (JAX fails to trace the rule: it stays unread)
        return {}
    finally:
        _reading[0] -= 1


def _rules_later(eqn: Any, where: str, read_body: Reader) -> Callable[[], dict]:
    """The reader of a custom call's rules nested deeper than :data:`RULE_DEPTH` (a third
    derivative of ``relu``): read once, when AD first asks, under the abstract mesh of
    the call, the calls inside them left for later in turn."""
    import jax

    read: list[dict] = []
    mesh = jax.sharding.get_abstract_mesh()

    def rules_later() -> dict:
        if not read:
            outer, _reading[0] = _reading[0], RULE_DEPTH - 1
            try:
                with jax.sharding.use_abstract_mesh(mesh):
                    read.append(_read_rules(eqn, where, read_body))
            finally:
                _reading[0] = outer
        return read[0]
    return OnDemand(rules_later)


def _jvp_rule(eqn: Any, where: str, read_body: Reader) -> dict:
    from jax._src import core

    params = eqn.params
    count = len(eqn.invars) - int(params.get("num_consts", 0))
    try:
        jaxpr, consts, out_zeros = params["jvp_jaxpr_fun"].call_wrapped(*([False] * count))
    except Exception:   # JAX refuses while tracing the rule: read up to the refused call
        refused = _refused_rule(params["jvp_jaxpr_fun"], (False,) * count)
        fields = {"rule": refused, "rule_refused": True}   # (None: not described)
    else:
        rule = read_body(core.ClosedJaxpr(jaxpr, consts), f"{where}rule.")
        fields = {"rule": rule, "rule_zeros": tuple(bool(z) for z in out_zeros)}
    if params.get("symbolic_zeros") and count > 1:   # (JAX may trace it for fewer tangents)
        fields["zero_rule"] = _zero_rule(params["jvp_jaxpr_fun"], where, read_body)
    return fields


def _zero_rule(fun: Any, where: str, read_body: Reader) -> Callable[[tuple], Any]:
    """A rule taking symbolic zeros (JAX's ``jvp_jaxpr_fun``) as
    :class:`~shardlaw.spec.program.control_flow.CustomJvp`'s ``zero_rule`` reads it: traced
    for a set of inputs without a tangent when AD first asks for that set (a rule of n
    inputs has 2 ** n sets: none is traced up front), at the depth and under the abstract
    mesh of the call it belongs to; None for a set JAX fails to trace it for."""
    import jax

    read: dict[tuple, Any] = {}
    depth, mesh = _reading[0], jax.sharding.get_abstract_mesh()

    def zero_rule(zeros: tuple) -> Any:
        if zeros not in read:
            outer, _reading[0] = _reading[0], depth
            try:
                with jax.sharding.use_abstract_mesh(mesh):
                    read[zeros] = _traced_for(fun, zeros, where, read_body)
            finally:
                _reading[0] = outer
        return read[zeros]
    return OnDemand(zero_rule)


def _traced_for(fun: Any, zeros: tuple, where: str, read_body: Reader) -> Any:
    """``(rule, rule_zeros, refused)``: the rule ``fun`` traced with symbolic zeros for
    the inputs ``zeros`` marks; where JAX refuses tracing it, the rule read up to the
    refused call, ``refused`` True (None where that refusal is not described, or the spec
    cannot read the rule)."""
    from jax._src import core

    try:
        jaxpr, consts, out_zeros = fun.call_wrapped(*zeros)
    except Exception:   # noqa: BLE001 - JAX refuses it: read up to the refused call
        refused = _refused_rule(fun, zeros)
        return None if refused is None else (refused, (), True)
    try:
        rule = read_body(core.ClosedJaxpr(jaxpr, consts), f"{where}rule{list(zeros)}.")
    except Exception:   # noqa: BLE001 - (the spec cannot read it: not read)
        return None
    return rule, tuple(bool(z) for z in out_zeros), False


def _refused_rule(rule: Any, zeros: tuple) -> Any:
    """The custom_jvp rule ``rule`` (JAX's ``jvp_jaxpr_fun``, given which inputs have no
    tangent: ``zeros``) that JAX refuses while tracing it, traced again with JAX's frames
    kept and described up to the refused call; None where it is not described."""
    from jax._src import config

    from .program import read_jaxpr
    from .refusals import describe_refused_rule

    try:
        with config.traceback_filtering("off"):
            rule.call_wrapped(*zeros)
    except Exception as error:  # noqa: BLE001 - the refusal, now with its frames
        return describe_refused_rule(error, read_jaxpr)
    return None


def _vjp_rules(eqn: Any, where: str, read_body: Reader) -> dict:
    count = len(eqn.invars) - int(eqn.params.get("num_consts", 0))
    fields = _vjp_rules_for(eqn, (False,) * count, (False,) * len(eqn.outvars), where,
                            read_body)
    if eqn.params.get("symbolic_zeros"):
        fields["zero_rules"] = _zero_vjp_rules(eqn, where, read_body)
    return fields


def _vjp_rules_for(eqn: Any, in_zeros: tuple, ct_zeros: tuple, where: str,
                   read_body: Reader) -> dict:
    """A custom_vjp's ``fwd`` traced for the inputs ``in_zeros`` marks not perturbed, its
    ``bwd`` on the residuals that ``fwd`` makes and the cotangents ``ct_zeros`` does not
    mark symbolic zeros (what a rule taking symbolic zeros is given; all, otherwise)."""
    from jax._src import core

    params = eqn.params
    jaxpr, consts = params["fwd_jaxpr_thunk"].call_wrapped(*(not z for z in in_zeros))
    fwd = read_body(core.ClosedJaxpr(jaxpr, consts), f"{where}fwd.")
    _, res_tree, forwarded = params["out_trees"]()
    made = iter(jaxpr.outvars)
    ins = [v.aval for v in eqn.invars][int(params.get("num_consts", 0)):]
    res_avals = [ins[f] if f is not None else next(made).aval for f in forwarded]
    ct_avals = [v.aval.to_ct_aval() for v in eqn.outvars]
    body, zeros = _read_bwd(params["bwd"], res_avals, ct_avals, where, read_body, ct_zeros)
    return {"fwd": fwd, "forwarded": tuple(forwarded), "bwd": body, "bwd_zeros": zeros}


def _zero_vjp_rules(eqn: Any, where: str, read_body: Reader) -> Callable[..., Any]:
    """A custom_vjp taking symbolic zeros as
    :class:`~shardlaw.spec.program.control_flow.CustomVjp`'s ``zero_rules`` reads it:
    ``fwd`` and ``bwd`` traced for the inputs not perturbed and the cotangents that are
    symbolic zeros when AD first asks for them (at the depth and under the abstract mesh
    of the call); None where JAX fails to trace them (or the spec to read them)."""
    import jax

    read: dict[tuple, Any] = {}
    depth, mesh = _reading[0], jax.sharding.get_abstract_mesh()

    def zero_rules(in_zeros: tuple, ct_zeros: tuple) -> Any:
        key = (tuple(in_zeros), tuple(ct_zeros))
        if key not in read:
            outer, _reading[0] = _reading[0], depth
            try:
                with jax.sharding.use_abstract_mesh(mesh):
                    read[key] = _vjp_rules_for(eqn, *key, f"{where}zeros{list(key)}.",
                                               read_body)
            except Exception:   # noqa: BLE001 - (JAX fails to trace them: not read)
                read[key] = None
            finally:
                _reading[0] = outer
        return read[key]
    return OnDemand(zero_rules)


def _read_bwd(bwd_fun: Any, res_avals: list, ct_avals: list, where: str,
              read_body: Reader, ct_zeros: tuple = ()) -> tuple[Any, tuple[bool, ...]]:
    """A custom_vjp's ``bwd`` traced on its residuals' and cotangents' types (a symbolic
    zero for each cotangent ``ct_zeros`` marks, not an input): its Program (the cotangents
    it gives) and which inputs it gives none (a zero)."""
    from jax._src import config, core
    from jax._src import linear_util as lu
    from jax._src.ad_util import SymbolicZero
    from jax._src.api_util import debug_info
    from jax._src.interpreters import ad
    from jax._src.interpreters import partial_eval as pe

    zeros: list[bool] = []
    absent = tuple(ct_zeros) or (False,) * len(ct_avals)
    avals = list(res_avals) + [a for a, z in zip(ct_avals, absent) if not z]

    def bwd(*args: Any) -> list:
        given = iter(args[len(res_avals):])
        cts = [ad.replace_internal_symbolic_zeros(ad.Zero(a)) if z else next(given)
               for a, z in zip(ct_avals, absent)]
        cts = bwd_fun.call_wrapped(*args[:len(res_avals)], *cts)
        zeros[:] = [isinstance(c, (ad.Zero, SymbolicZero)) or c is None for c in cts]
        return [c for c, z in zip(cts, zeros) if not z]
    traced = lu.wrap_init(bwd, debug_info=debug_info("custom_vjp bwd", bwd, tuple(avals),
                                                     {}))
    # (its results' types are the spec's to check, LOOP-4: JAX's own check is left out)
    with config.disable_bwd_checks(True):
        bwd_jaxpr, _, bwd_consts = pe.trace_to_jaxpr_dynamic(traced, list(avals))
    body = read_body(core.ClosedJaxpr(bwd_jaxpr, bwd_consts), f"{where}bwd.")
    return body, tuple(zeros)


def custom_lin_equation(eqn: Any, operands: tuple[int, ...], results: tuple, where: str,
                        read_body: Reader) -> CustomLin:
    """JAX's ``custom_lin`` (its params: ``num_res``, ``bwd``, ``out_avals``, ``in_zeros``,
    ``symbolic_zeros``) as the spec's :class:`CustomLin`, its ``bwd`` read as a Program;
    the primal inputs' types known are those of the tangents given before the first zero."""
    from .program import value_type_of

    params = eqn.params
    num_res = int(params["num_res"])
    in_zeros = tuple(bool(z) for z in params["in_zeros"])
    try:
        bwd, bwd_zeros = _read_bwd(params["bwd"], [v.aval for v in eqn.invars[:num_res]],
                                   [a.to_ct_aval() for a in params["out_avals"]],
                                   f"{where}.custom_lin.", read_body)
    except Exception as err:   # noqa: BLE001 - (JAX fails to trace it: not described)
        raise TypeError(f"describe_program does not describe a custom_lin whose bwd JAX "
                        f"fails to trace; {where} is one ({type(err).__name__})") from err
    known = in_zeros.index(True) if True in in_zeros else len(in_zeros)
    in_types = tuple(value_type_of(v.aval, f"input {num_res + k} of {where}").type
                     for k, v in enumerate(eqn.invars[num_res:num_res + known]))
    return CustomLin(operands, results, bwd=bwd, bwd_zeros=bwd_zeros, num_res=num_res,
                     in_zeros=in_zeros, in_types=in_types,
                     name=f"(bwd {params['bwd'].debug_info.func_name})")

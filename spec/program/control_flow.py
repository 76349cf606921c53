"""Control flow, remat and custom derivatives as equations that carry bodies (issue 32).

``jax.lax.scan``, ``while_loop`` (``fori_loop``), ``cond`` (``switch``),
``jax.checkpoint`` and ``custom_jvp``/``custom_vjp`` functions trace to equations that hold
jaxprs of their own; here each is an equation kind whose bodies are :class:`Program`\\ s,
as a nested jit's is, so that every sharding inside one is checked where a jit's would be:

* :class:`Scan` — ``scan``: the loop's body read once (``length`` iterations of it, never
  unrolled), its operands the constants, the carry and the stacked ``xs``; its results the
  final carry and the ``ys`` stacked on a leading axis of ``length``;
* :class:`While` — ``while``: the predicate's body (``cond``) and the loop's body
  (``body_fun``), over the predicate's constants, the loop's constants and the carry;
* :class:`Cond` — ``cond``: an int32 index and one body per branch, over the same
  operands, their results of one type;
* :class:`Remat`, :class:`CustomJvp`, :class:`CustomVjp` — ``remat2``
  (``jax.checkpoint``), ``custom_jvp_call`` and ``custom_vjp_call``: a body called as a jit
  without options is (their primal body; the rewrites treat them as such a jit).

The walkers of a program (dead-code elimination, the device assignment, the lowering
checks) read one ``body`` per equation: a loop's or a branching equation's ``body`` is one
Program that calls each of its bodies as a jit without options and returns all their
results (a branch's, the predicate's), so that each body is checked wherever a jit's is;
:meth:`Equation.used_in_body` says which of them are used when the equation's are.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

from ..core.rules import Failure, reject, rule, staged
from ..core.shardings import UNSPECIFIED
from .description import Equation, Jit, Program, Value
from .typed_values import described_bool, refuse_described, require_described

__all__ = ["Scan", "While", "Cond", "Remat", "CustomJvp", "CustomVjp", "CustomLin", "stacked",
           "unstacked", "CONTROL_FLOW_KINDS", "check_custom_lin_transposed",
           "CustomVjpForwardMode", "check_bwd_cotangent", "BwdCotangentType"]


# --------------------------------------------------------------------------- helpers

def stacked(value: Value, length: int) -> Value:
    """``value``'s type with a leading axis of ``length`` (a scan's ``ys``), unsplit."""
    spec = value.spec
    if spec is not None:
        from ..core.values import PartitionSpec
        spec = PartitionSpec(None, *spec.partitions, unreduced=spec.unreduced,
                             reduced=spec.reduced)
    return dataclasses.replace(value, shape=(length, *value.shape), spec=spec)


def unstacked(value: Value) -> Value:
    """``value``'s type less its leading axis (one iteration's slice of a scan's ``xs``)."""
    spec = value.spec
    if spec is not None:
        from ..core.values import PartitionSpec
        spec = PartitionSpec(*spec.partitions[1:], unreduced=spec.unreduced,
                             reduced=spec.reduced)
    return dataclasses.replace(value, shape=value.shape[1:], spec=spec)


def _same_array(a: Value, b: Value) -> bool:
    return (a.shape, a.dtype) == (b.shape, b.dtype)


def _check_body(body: Any, what: str) -> None:
    """A body of a control-flow equation: a Program of traced inputs, with no jit options."""
    require_described(isinstance(body, Program), what, "a Program", body)
    for k, value in enumerate(body.inputs):
        if value.sharding is not None:
            refuse_described(f"input {k} of {what}", "a traced value (a type, no sharding)",
                             value)
    require_described(body.compiler is None and body.compiler_in is None
                      and not body.keep_unused and body.context_mesh is None
                      and all(s is UNSPECIFIED for s in body.in_shardings + body.out_shardings)
                      and not any(body.donated), what, "a body without jit options", body)


def _count(value: Any, what: str) -> int:
    require_described(type(value) is int and value >= 0, what, "an int at least 0", value)
    return value


def _call(numbers: tuple[int, ...], body: Program, name: str) -> Jit:
    """One body called as a jit without options (inside a loop's or a branching
    equation's ``body``)."""
    return Jit(numbers, body=body, name=name, checked=False)


def _outputs_of(inputs: int, calls: list[Jit]) -> list[range]:
    start, out = inputs, []
    for call in calls:
        count = len(call.body.outputs)
        out.append(range(start, start + count))
        start += count
    return out


class _Bodied(Equation):
    """What a loop's and a branching equation's kinds share: the outputs of their ``body``
    all used when any of their results is (a loop's carry feeds its next iteration; every
    branch may be taken)."""

    def used_in_body(self, used: tuple[bool, ...]) -> tuple[bool, ...]:
        return (any(used),) * len(self.body.outputs)

    def _joined(self, inputs: tuple[Value, ...], calls: list[Jit], extra: tuple[int, ...]
                ) -> Program:
        ranges = _outputs_of(len(inputs), calls)
        outputs = tuple(n for r in ranges for n in r) + extra
        return Program(inputs, tuple(calls), outputs)


# --------------------------------------------------------------------------- scan

@dataclasses.dataclass(frozen=True)
class Scan(_Bodied):
    """``jax.lax.scan``: its body over (constants, carry, one slice of each ``xs``) giving
    (the next carry, one slice of each ``ys``), run ``length`` times, backwards when
    ``reverse``. Its operands are the constants, the initial carry and the stacked ``xs``;
    its results the final carry and the stacked ``ys``."""

    kind: ClassVar[str] = "scan"
    body: "Program | None" = None   # type: ignore[assignment]
    length: int = 0
    reverse: bool = False
    num_consts: int = 0
    num_carry: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_body(self.body, "a scan's body")
        _count(self.length, "a scan's length")
        described_bool(self.reverse, "a scan's reverse")
        body = self.body
        consts, carry = _count(self.num_consts, "a scan's num_consts"), \
            _count(self.num_carry, "a scan's num_carry")
        require_described(consts + carry <= len(body.inputs), "a scan's num_consts and "
                          "num_carry", f"at most its body's inputs ({len(body.inputs)})",
                          (consts, carry))
        require_described(carry <= len(body.outputs), "a scan's num_carry",
                          f"at most its body's results ({len(body.outputs)})", carry)
        for k in range(carry):
            given, made = body.inputs[consts + k], body.value_types[body.outputs[k]]
            if not _same_array(given, made):
                refuse_described(f"carry {k} a scan's body returns",
                                 f"of the type it takes ({given})", made)

    def used_in_body(self, used: tuple[bool, ...]) -> tuple[bool, ...]:
        """The results used, and each carry the body reads to make them (a carry read
        feeds the next iteration: its result is made too; found to a fixed point, as
        JAX's dead-code elimination of a scan does)."""
        from .ad_bodies import dependencies   # (it imports this module's kinds)

        deps, c, k = dependencies(self.body), self.num_consts, self.num_carry
        live = list(used)
        while True:
            read = frozenset().union(*(d for d, u in zip(deps, live) if u))
            grown = [u or (c + i) in read for i, u in enumerate(live[:k])]
            if grown == live[:k]:
                return tuple(live)
            live[:k] = grown

    def kept_operands(self, used: tuple[bool, ...]) -> tuple[bool, ...]:
        """The operands dead-code elimination keeps whether the body reads them or not:
        the initial carry of each carry made (JAX's elimination instantiates them)."""
        live, c, k = self.used_in_body(used), self.num_consts, self.num_carry
        return (False,) * c + tuple(live[:k]) + (False,) * (len(self.operands) - c - k)

    def check(self, operands: tuple[Value, ...]) -> None:
        body = self.body
        require_described(len(operands) == len(body.inputs), "a scan's operands",
                          f"one per input of its body ({len(body.inputs)})", self.operands)
        split = self.num_consts + self.num_carry
        for k, (given, wanted) in enumerate(zip(operands, body.inputs)):
            if k >= split:
                wanted = stacked(wanted, self.length)
            if not _same_array(given, wanted):
                refuse_described(f"operand {k} of a scan", f"of type {wanted.dtype}"
                                 f"{list(wanted.shape)}", given)



# --------------------------------------------------------------------------- while

@dataclasses.dataclass(frozen=True)
class While(_Bodied):
    """``jax.lax.while_loop`` (``fori_loop``): ``cond`` over (its constants, the carry)
    gives a bool scalar; ``body_fun`` over (its constants, the carry) the next carry. Its
    operands are the predicate's constants, the body's constants and the initial carry;
    its results the final carry. Its ``body`` calls the predicate on the carry and the
    loop's body, and returns the next carry and the predicate's value."""

    kind: ClassVar[str] = "while"
    # (JAX 0.10.2 has no dead-code elimination rule for a while loop: once a result is
    # used, every operand and its bodies' every equation stay, a dead constraint's device
    # in the assignment too)
    keeps_body: ClassVar[bool] = True
    cond: "Program | None" = None
    body_fun: "Program | None" = None
    cond_consts: int = 0
    body_consts: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_body(self.cond, "a while's cond")
        _check_body(self.body_fun, "a while's body")
        cc = _count(self.cond_consts, "a while's cond_consts")
        bc = _count(self.body_consts, "a while's body_consts")
        cond, body = self.cond, self.body_fun
        carry = body.inputs[bc:]
        require_described(bc <= len(body.inputs) and len(body.outputs) == len(carry),
                          "a while's body", "a body returning the carry it takes", body)
        require_described(cc <= len(cond.inputs) and len(cond.inputs) - cc == len(carry),
                          "a while's cond", "a predicate over the carry", cond)
        pred = [cond.value_types[n] for n in cond.outputs]
        # (one bool[], or under vmap one bool per example: a prefix of every carry's shape)
        require_described(len(pred) == 1 and pred[0].dtype == "bool" and all(
            v.shape[:len(pred[0].shape)] == pred[0].shape for v in carry),
                          "a while's cond", "a predicate giving one bool[] (or, batched, "
                          "one bool per example)", pred)
        for k, given in enumerate(carry):
            made = body.value_types[body.outputs[k]]
            if not (_same_array(given, made) and _same_array(cond.inputs[cc + k], given)):
                refuse_described(f"carry {k} of a while", f"of one type ({given})", made)

    @functools.cached_property
    def body(self) -> Program:   # type: ignore[override]
        cc, bc = self.cond_consts, self.body_consts
        carry = len(self.body_fun.inputs) - bc
        inputs = tuple(self.cond.inputs[:cc]) + tuple(self.body_fun.inputs)
        at = cc + bc
        calls = [_call(tuple(range(cc)) + tuple(range(at, at + carry)), self.cond, "cond"),
                 _call(tuple(range(cc, at + carry)), self.body_fun, "body")]
        ranges = _outputs_of(len(inputs), calls)
        return Program(inputs, tuple(calls), tuple(ranges[1]) + tuple(ranges[0]))

    def check(self, operands: tuple[Value, ...]) -> None:
        body = self.body
        require_described(len(operands) == len(body.inputs), "a while's operands",
                          f"the constants and the carry ({len(body.inputs)})", self.operands)
        for k, (given, wanted) in enumerate(zip(operands, body.inputs)):
            if not _same_array(given, wanted):
                refuse_described(f"operand {k} of a while", f"of type {wanted}", given)


# --------------------------------------------------------------------------- cond

@dataclasses.dataclass(frozen=True)
class Cond(_Bodied):
    """``jax.lax.cond`` and ``switch``: its first operand the int32 index of the branch
    taken (clamped), the others every branch's inputs; each branch a body over them, all
    returning results of one type. Its ``body`` calls every branch and returns their
    results, then the index."""

    kind: ClassVar[str] = "cond"
    branches: tuple = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        require_described(type(self.branches) is tuple and len(self.branches) >= 1,
                          "a cond's branches", "a tuple of at least one Program",
                          self.branches)
        first = self.branches[0]
        for i, branch in enumerate(self.branches):
            _check_body(branch, f"branch {i} of a cond")
            require_described(
                len(branch.inputs) == len(first.inputs) and all(
                    _same_array(a, b) for a, b in zip(branch.inputs, first.inputs)),
                f"branch {i} of a cond's inputs", "of the types of branch 0's", branch.inputs)
            # (JAX matches the branches' results by shape and dtype; a constraint may
            # leave one over another mesh)
            made = [branch.value_types[n] for n in branch.outputs]
            wanted = [first.value_types[n] for n in first.outputs]
            require_described(len(made) == len(wanted) and all(
                _same_array(a, b) for a, b in zip(made, wanted)), f"branch {i} of a cond's results",
                              f"of the types of branch 0's ({wanted})", made)

    def used_in_body(self, used: tuple[bool, ...]) -> tuple[bool, ...]:
        """Each branch's results that are used (JAX's dead-code elimination prunes every
        branch to them), and the index while any is."""
        return tuple(used) * len(self.branches) + (any(used),)

    @functools.cached_property
    def body(self) -> Program:   # type: ignore[override]
        inputs = (Value.typed((), "int32"),) + tuple(self.branches[0].inputs)
        numbers = tuple(range(1, len(inputs)))
        calls = [_call(numbers, b, f"branches[{i}]") for i, b in enumerate(self.branches)]
        return self._joined(inputs, calls, (0,))

    def check(self, operands: tuple[Value, ...]) -> None:
        require_described(len(operands) == len(self.branches[0].inputs) + 1,
                          "a cond's operands", "the index, then one per input of its "
                          "branches", self.operands)
        index = operands[0]
        require_described(index.shape == () and index.dtype == "int32", "a cond's index",
                          "an int32 scalar", index)
        for k, (given, wanted) in enumerate(zip(operands[1:], self.branches[0].inputs)):
            if not _same_array(given, wanted):
                refuse_described(f"operand {k + 1} of a cond", f"of type {wanted}", given)


# --------------------------------------------------------------------------- calls

class _Called(Jit):
    """A body called as a jit without options is (its options are checked none). A
    custom call's ``rules_later``: the reader of rules not read yet (a call nested deeper
    than the bridge reads up front), giving the fields that hold them; None: read."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_body(self.body, f"a {self.kind}'s body")


@dataclasses.dataclass(frozen=True)
class Remat(_Called):
    """``jax.checkpoint`` (``remat2``): its body, called as a jit without options; under
    grad JAX recomputes it in the backward pass rather than storing its residuals, but for
    those its ``policy`` saves (None: JAX's default, which saves nothing, as
    ``nothing_saveable``; else the policy's name, ``everything_saveable``,
    ``dots_saveable``, ``dots_with_no_batch_dims_saveable``, ``save_only_these_names(a,
    b)``, ``save_any_names_but_these(a)``, or another's in angle brackets). The spec's
    linearization stores what the policy saves and recomputes the rest, as JAX's (AD-21,
    AD-22); ``policy_unread``: a differentiated remat the spec made recomputing everything
    where it could not read the policy (an offloading or a user's own policy, a body
    holding bodies or constants), whose communication is left undetermined (COLL-8)."""

    kind: ClassVar[str] = "remat2"
    prevent_cse: bool = True
    differentiated: bool = False
    policy: str | None = None
    policy_unread: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require_described(self.policy is None or type(self.policy) is str,
                          "a remat's policy", "None or a policy's name", self.policy)
        require_described(type(self.policy_unread) is bool, "a remat's policy_unread",
                          "a bool", self.policy_unread)


def _rule_body(value: Any, what: str) -> None:
    require_described(value is None or isinstance(value, Program), what,
                      "a Program or None", value)


def _flags(value: Any, what: str) -> None:
    require_described(type(value) is tuple and all(type(v) is bool for v in value), what,
                      "a tuple of bools", value)


@dataclasses.dataclass(frozen=True)
class CustomJvp(_Called):
    """A ``jax.custom_jvp`` function's call (``custom_jvp_call``; ``jax.nn.relu``): its
    primal body, called as a jit without options, and its own rule, which JAX calls only
    under AD: ``rule`` over the primals and a tangent of each (its first ``num_consts``
    inputs, closed over, take none) returns the primal results, then the tangent of each
    result ``rule_zeros`` does not mark a symbolic zero (None: not read). ``rule_refused``:
    ``rule`` is the rule JAX refused while tracing it, described up to the refused call
    (None: JAX refused it in a way not described).
    ``zero_rule``: a rule taking symbolic zeros read on demand for other inputs without a
    tangent, ``zero_rule(in_zeros)`` giving ``(rule, rule_zeros)`` as JAX traces it for
    them, ``rule`` over the primals and the tangents ``in_zeros`` does not mark a zero
    (None: JAX fails to trace it for them); None: not read."""

    kind: ClassVar[str] = "custom_jvp_call"
    # (JAX 0.10.2's dead-code elimination keeps every operand of a custom call whose
    # results are used, its body pruned: a dead operand still joins the device assignment)
    keeps_operands: ClassVar[bool] = True
    rule: "Program | None" = None
    rule_zeros: tuple = ()
    num_consts: int = 0
    symbolic_zeros: bool = False
    rule_refused: bool = False
    zero_rule: Any = dataclasses.field(default=None, compare=False)   # (read by the bridge)
    rules_later: Any = dataclasses.field(default=None, compare=False)   # (see _Called)

    def __post_init__(self) -> None:
        super().__post_init__()
        _rule_body(self.rule, "a custom_jvp's rule")
        _flags(self.rule_zeros, "a custom_jvp's rule_zeros")
        _count(self.num_consts, "a custom_jvp's num_consts")
        described_bool(self.symbolic_zeros, "a custom_jvp's symbolic_zeros")
        described_bool(self.rule_refused, "a custom_jvp's rule_refused")
        require_described(self.zero_rule is None or callable(self.zero_rule),
                          "a custom_jvp's zero_rule", "a callable or None", self.zero_rule)
        require_described(self.rules_later is None or callable(self.rules_later),
                          "a custom_jvp's rules_later", "a callable or None", self.rules_later)


@dataclasses.dataclass(frozen=True)
class CustomVjp(_Called):
    """A ``jax.custom_vjp`` function's call (``custom_vjp_call``): its primal body, called
    as a jit without options, and its rules, which JAX calls only under AD: ``fwd`` over
    the primals (less the first ``num_consts``, closed over) returns the residuals it makes,
    then the primal results; ``forwarded`` says, per residual ``bwd`` takes, which input it
    is (None: the next one ``fwd`` makes); ``bwd`` over the residuals and a cotangent per
    result returns the cotangent of each input ``bwd_zeros`` does not mark a zero (None:
    not read). ``zero_rules``: rules taking symbolic zeros read on demand,
    ``zero_rules(in_zeros, ct_zeros)`` giving ``(fwd, forwarded, bwd, bwd_zeros)`` as JAX
    traces them for the inputs not perturbed and the cotangents that are zeros (``bwd``
    takes the others alone; None: JAX fails to trace them); None: not read."""

    kind: ClassVar[str] = "custom_vjp_call"
    keeps_operands: ClassVar[bool] = True   # (as a custom_jvp_call's)
    fwd: "Program | None" = None
    forwarded: tuple = ()
    bwd: "Program | None" = None
    bwd_zeros: tuple = ()
    num_consts: int = 0
    symbolic_zeros: bool = False
    zero_rules: Any = dataclasses.field(default=None, compare=False)   # (read by the bridge)
    rules_later: Any = dataclasses.field(default=None, compare=False)   # (see _Called)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_described(self.zero_rules is None or callable(self.zero_rules),
                          "a custom_vjp's zero_rules", "a callable or None", self.zero_rules)
        require_described(self.rules_later is None or callable(self.rules_later),
                          "a custom_vjp's rules_later", "a callable or None", self.rules_later)
        _rule_body(self.fwd, "a custom_vjp's fwd")
        _rule_body(self.bwd, "a custom_vjp's bwd")
        _flags(self.bwd_zeros, "a custom_vjp's bwd_zeros")
        _count(self.num_consts, "a custom_vjp's num_consts")
        described_bool(self.symbolic_zeros, "a custom_vjp's symbolic_zeros")


@dataclasses.dataclass(frozen=True)
class CustomLin(Equation):
    """The tangent of a ``custom_vjp`` function's results (JAX's ``custom_lin``): over the
    residuals its ``fwd`` made (the first ``num_res`` operands) and the nonzero tangents of
    its inputs (``in_zeros`` marks those given none), its results typed as its primal
    results. Transposed, it is its ``bwd``; left in a program, it does not lower (LOOP-3).
    ``zero_bwd``: a ``bwd`` taking symbolic zeros read on demand, ``zero_bwd(ct_zeros)``
    giving ``(bwd, bwd_zeros)`` over the residuals and the cotangents ``ct_zeros`` does not
    mark zeros (None: not read)."""

    kind: ClassVar[str] = "custom_lin"
    bwd: "Program | None" = None
    bwd_zeros: tuple = ()
    num_res: int = 0
    in_zeros: tuple = ()
    name: str = ""
    in_types: tuple = ()   # the primal inputs' types (bwd's cotangents are held to them)
    zero_bwd: Any = dataclasses.field(default=None, compare=False)   # (read by the bridge)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_described(isinstance(self.bwd, Program), "a custom_lin's bwd", "a Program",
                          self.bwd)
        require_described(self.results is not None, "a custom_lin's results",
                          "the tangent types of its primal results", self.results)
        _flags(self.bwd_zeros, "a custom_lin's bwd_zeros")
        _flags(self.in_zeros, "a custom_lin's in_zeros")
        _count(self.num_res, "a custom_lin's num_res")


# --------------------------------------------------------------------------- LOOP-3

@dataclasses.dataclass(frozen=True)
class CustomVjpForwardMode(Failure, rule="LOOP-3", error=TypeError):
    template = ("the tangent of the custom_vjp function {name} at {path} is left in the "
                "program: can't apply forward-mode autodiff (jvp) to a custom_vjp function "
                "(refused {when})")
    hint = ("Differentiate it in reverse mode (jax.grad, jax.vjp), or define its "
            "derivative with jax.custom_jvp.")
    name: str
    path: str
    when: str


@rule("LOOP-3", mirrors="jax._src.interpreters.ad.raise_custom_vjp_error_on_jvp")
def check_custom_lin_transposed(name: str, path: str, stage: str) -> None:
    """A custom_vjp function's tangent (custom_lin) that jvp or linearize leaves untransposed is refused with TypeError when the program lowers, or while tracing where vmap batches it.

    A dead one is dropped first.

    Reverse mode transposes it into the function's ``bwd`` (``grad``, ``vjp``): nothing is
    left to refuse.

    >>> check_custom_lin_transposed("clip", "body[0].jit.body[2]", "lower")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [LOOP-3]: the tangent of the custom_vjp function clip at body[0].jit.body[2] is left in the program: can't apply forward-mode autodiff (jvp) to a custom_vjp function (refused when lowering). Differentiate it in reverse mode (jax.grad, jax.vjp), or define its derivative with jax.custom_jvp.
    """
    when = "when lowering" if stage == "lower" else "while vmap batches it"
    with staged(stage):
        raise reject(CustomVjpForwardMode(name, path, when))


# --------------------------------------------------------------------------- LOOP-4

@dataclasses.dataclass(frozen=True)
class BwdCotangentType(Failure, rule="LOOP-4", error=ValueError):
    template = ("the bwd rule of the custom_vjp function {name} at {path} gives input {index} "
                "a cotangent of type {made}; that input's cotangent type is {expected}: "
                "Custom VJP bwd rule must produce an output with the same type as the args "
                "tuple of the primal function")
    hint = ("Return from bwd a cotangent of each input's type (jax.sharding.reshard it to "
            "the input's sharding over Explicit axes).")
    name: str
    path: str
    index: int
    made: str
    expected: str


def _explicit_mesh(mesh: Any) -> bool:
    return mesh is not None and any(t.name == "Explicit" for t in mesh.axis_types)


def _entries(value: Value) -> tuple:
    spec = value.spec
    parts = tuple(spec.partitions) if spec is not None else ()
    parts += (None,) * (len(value.shape) - len(parts))
    return (parts, spec.reduced if spec is not None else frozenset(),
            spec.unreduced if spec is not None else frozenset())


@rule("LOOP-4", mirrors="jax._src.custom_derivatives._flatten_bwd; jax._src.core.typecompat")
def check_bwd_cotangent(expected: Value, made: Value, name: str, index: int, path: str
                        ) -> None:
    """A custom_vjp's bwd gives each input a cotangent of that input's cotangent type: shape, varying axes, dtype (a float's may differ), and mesh and split where both have meshes, one with an Explicit axis; else ValueError at trace.

    >>> from shardlaw.spec.core.values import AbstractMesh, AxisType, PartitionSpec as P
    >>> mesh = AbstractMesh((2, 4), ("x", "y"), (AxisType.Explicit,) * 2)
    >>> check_bwd_cotangent(Value((8,), mesh=mesh, spec=P("x")),
    ...                     Value((8,), "bfloat16", mesh=mesh, spec=P("x")), "clip", 0, "body[1]")
    >>> check_bwd_cotangent(Value((8,), mesh=mesh, spec=P("x")), Value((8,), mesh=mesh),
    ...                     "clip", 0, "body[1]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [LOOP-4]: the bwd rule of the custom_vjp function clip at body[1] gives input 0 a cotangent of type float32[8] over ('x', 'y'); that input's cotangent type is float32[8] over ('x', 'y') split P('x'): Custom VJP bwd rule must produce an output with the same type as the args tuple of the primal function. Return from bwd a cotangent of each input's type (jax.sharding.reshard it to the input's sharding over Explicit axes).
    """
    floats = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")
    same = (expected.shape == made.shape and expected.varying == made.varying
            and (expected.dtype == made.dtype or expected.dtype in floats))
    if same and expected.mesh is not None and made.mesh is not None and (
            _explicit_mesh(expected.mesh) or _explicit_mesh(made.mesh)):
        same = expected.mesh == made.mesh and _entries(expected) == _entries(made)
    if not same:
        with staged("trace"):
            raise reject(BwdCotangentType(name, path, index, _typed(made), _typed(expected)))


def _typed(value: Value) -> str:
    mesh = f" over {value.mesh.axis_names}" if value.mesh is not None else ""
    split = f" split {value.spec}" if value.spec is not None else ""
    return f"{value.dtype}{list(value.shape)}{mesh}{split}"


CONTROL_FLOW_KINDS = (Scan, While, Cond, Remat, CustomJvp, CustomVjp, CustomLin)

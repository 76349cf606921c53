"""What changes for a jit call when its user upgrades from JAX 0.4.13 to 0.10.2.

:func:`upgrade` asks the spec about one call twice, once per edition, and sets the two
verdicts side by side: what changed (accepted or refused, the rule, the exception class,
the device assignment, each result's sharding and committed flag) and the rules of either
trace whose variants differ between the two releases (:func:`shardlaw.spec.core.rules.varies`).
``shardlaw upgrade FILE.json`` prints it for the calls of test vectors.

>>> from shardlaw.spec.jit.call import Arg, Call, JitOptions, Out
>>> mesh = Mesh.iota((2, 4), ("x", "y"))
>>> call = Call(args=(Arg.numpy((3, 8)),), outputs=Out((3, 8)),
...             options=JitOptions(in_shardings=NamedSharding(mesh, P("x"))))
>>> change = upgrade(call)
>>> change.changes
('refused by FIT-1 with ValueError in 0.4.13, with IndivisibleError in 0.10.2',)
>>> change.varying
('DIV-1', 'FIT-1')
"""

from __future__ import annotations

import dataclasses

from .call import Call, Verdict
from .pipeline import jit_call
from ..core.editions import DEFAULT, OLDER
from ..core.rules import RULES
from ..core.shardings import NamedSharding
from ..core.values import Mesh, PartitionSpec
from ..placement.equivalence import placement_equivalent

P = PartitionSpec  # the name the examples use

__all__ = ["Upgrade", "upgrade"]


@dataclasses.dataclass(frozen=True)
class Upgrade:
    """One call's verdicts in two editions, what differs between them, and the rules of
    either trace whose variants differ (in ID order)."""

    before: Verdict
    after: Verdict
    changes: tuple[str, ...]
    varying: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def upgrade(call: Call, before: str = OLDER, after: str = DEFAULT) -> Upgrade:
    """The verdicts on ``call`` for JAX ``before`` and JAX ``after``, side by side."""
    old, new = jit_call(call, jax=before), jit_call(call, jax=after)
    fired = {*old.trace, *new.trace, *(r for r in (old.rule, new.rule) if r)}
    varying = tuple(sorted((r for r in fired if r in RULES and _differs(r, before, after)),
                           key=lambda r: (r.rsplit("-", 1)[0], int(r.rsplit("-", 1)[1]))))
    shapes = _shapes(call)
    return Upgrade(old, new, tuple(_changes(old, new, shapes)), varying)


def _differs(rule_id: str, before: str, after: str) -> bool:
    """Whether the rule reads otherwise in the two releases; a rule one of them lacks is
    left out (CALL-1 refuses a call that uses what it lacks, and says so)."""
    a, b = RULES[rule_id].in_edition(before), RULES[rule_id].in_edition(after)
    return a is not b and not getattr(a, "absent", False) and not getattr(b, "absent", False)


def _changes(old: Verdict, new: Verdict, shapes: list) -> list[str]:
    """What a user sees change, in words."""
    a, b = old.jax, new.jax
    if old.accepted != new.accepted:
        return [f"refused by {old.rule} ({old.jax_error}) in {a}, accepted in {b}"
                if new.accepted else
                f"accepted in {a}, refused by {new.rule} ({new.jax_error}) in {b}"]
    if not old.accepted:
        if old.rule != new.rule:
            return [f"refused by {old.rule} ({old.jax_error}) in {a}, by {new.rule} "
                    f"({new.jax_error}) in {b}"]
        if old.jax_error != new.jax_error:
            return [f"refused by {old.rule} with {old.jax_error} in {a}, with "
                    f"{new.jax_error} in {b}"]
        return []
    changes = []
    if tuple(old.device_assignment or ()) != tuple(new.device_assignment or ()):
        changes.append(f"device assignment {list(old.device_assignment or ())} in {a}, "
                       f"{list(new.device_assignment or ())} in {b}")
    for path, s, t, shape_of in zip(old.out_paths, old.out_shardings, new.out_shardings,
                                    shapes):
        if type(s) is not type(t) or s != t:
            same = shape_of is not None and _placed_alike(s, t, shape_of)
            changes.append(f"{path} comes back as {s!r} in {a}, as {t!r} in {b}"
                           + (" (the same blocks on the same devices)" if same else ""))
    for path, c, d in zip(old.out_paths, old.out_committed, new.out_committed):
        if c != d:
            changes.append(f"{path} is {'committed' if c else 'uncommitted'} in {a}, "
                           f"{'committed' if d else 'uncommitted'} in {b}")
    return changes


def _shapes(call: Call) -> list:
    """Each flat result's shape (None where the call cannot say)."""
    try:
        return [out.shape for _, out in call.normal.flat_out]
    except Exception:  # noqa: BLE001 - a call both editions refuse before reading it
        return []


def _placed_alike(s: object, t: object, shape: tuple) -> bool:
    try:
        return placement_equivalent(s, t, shape)
    except Exception:  # noqa: BLE001 - an unknown shape or an open sharding: not claimed
        return False

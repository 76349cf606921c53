"""What ``explain`` answers: an :class:`Explanation` of what the engine does with a call.

Accepted, it says where the call runs and every sharding it goes in and comes out with;
refused, it carries the :class:`Refusal` (the rule, the classes, the message, the path and
the stage). Both carry the rules that fired, in order. ``Compiled.explanation`` and
:func:`~shardlaw.engine.verdict.verdict_for_call` give the same record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardlaw.compiled_hlo import Collective

from .dispatch_plan import held_inputs
from .rules import EngineRejection

__all__ = ["Explanation", "Refusal"]


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why the engine refused a call, as an :class:`Explanation` carries it: the rule, the
    built-in type's name and the class JAX raises, the message, the argument or result it
    is about, and the stage."""

    rule: str
    stage: str | None
    path: str | None
    error_type: str
    jax_error: str | None
    message: str

    @classmethod
    def of(cls, error: EngineRejection) -> "Refusal":
        return cls(error.rule, error.stage, error.path, error.error_type.__name__,
                   error.jax_error, str(error))


# A stage as the words of a refusal say it: "rejected ... when lowering".
_WHEN = {"jit": "jit is applied", "trace": "tracing", "lower": "lowering",
         "compile": "compiling", "call": "calling", "aot": "calling the compiled function"}


def _refusal_field(name: str) -> property:
    """The refusal's ``name`` read through the explanation (None when it was accepted)."""
    return property(lambda self: None if self.refusal is None else getattr(self.refusal, name),
                    doc=f"The refusal's ``{name}`` (None when the call was accepted).")


@dataclasses.dataclass(frozen=True)
class Explanation:
    """What the engine does with a call: the verdict and the rules that decided it.

    Accepted: ``num_devices`` and ``device_assignment`` (device ids), ``executable``
    (compiled for this signature, or shared with a placement-equal signature); per flat dynamic
    input ``in_paths`` and ``in_shardings`` (as the program gets them; UNSPECIFIED where the
    compiler chooses), ``kept_inputs``, ``transfers`` (inputs moved before running); per
    result ``out_paths``, ``out_shardings`` (as the results come back, the compiler's choices
    included) and ``out_committed``; ``inside``, the (path, sharding) of every sharding
    inside the function's body that joined the device assignment (PROG-2: constraints,
    device_puts, inner jits' shardings, shard_map meshes, at any depth); ``held``, the
    (path, sharding, what) of every closed-over value the program takes in after the
    arguments — a mutable ref that takes part (REF-1), its new value written back in place
    (REF-2), a constant JAX hoists (CONST-1, on its sharding or left open: CONST-2);
    ``compiled_out_shardings``, the output shardings of the executable it runs, as JAX spells
    them (``Compiled.output_shardings``, flat, one per result: what the compiler placed,
    beside ``out_shardings``, how the results are labelled); ``collectives``, every
    all-gather, all-reduce, reduce-scatter, all-to-all and collective-permute in that
    executable's compiled HLO (:class:`shardlaw.compiled_hlo.Collective`: kind, replica
    groups, per-device shape, dtype and bytes). Rejected: ``refusal``, whose ``rule``, ``error_type``
    (the built-in type's name), ``jax_error``, ``message``, ``path`` and ``stage`` read
    through the explanation too. Both: ``trace``, the rules that fired, in order.
    """

    accepted: bool
    trace: tuple[str, ...] = ()
    num_devices: int = 0
    device_assignment: tuple[int, ...] | None = None
    executable: str = ""
    in_paths: tuple[str, ...] = ()
    in_shardings: tuple = ()
    kept_inputs: tuple[int, ...] = ()
    transfers: tuple[str, ...] = ()
    out_paths: tuple[str, ...] = ()
    out_shardings: tuple = ()
    out_committed: tuple[bool, ...] = ()
    inside: tuple[tuple[str, Any], ...] = ()
    held: tuple[tuple[str, Any, str], ...] = ()
    compiled_out_shardings: tuple = ()
    collectives: tuple[Collective, ...] = ()
    refusal: Refusal | None = None

    rule = _refusal_field("rule")
    error_type = _refusal_field("error_type")
    jax_error = _refusal_field("jax_error")
    message = _refusal_field("message")
    path = _refusal_field("path")
    stage = _refusal_field("stage")

    @classmethod
    def of_plan(cls, plan: Any) -> "Explanation":
        if plan.rejection is not None:
            return cls.of_rejection(plan.rejection, plan.fired)
        if plan.compiled_here:
            executable = "compiled for this signature"
        else:
            executable = "shared with a placement-equal signature compiled before"
        return cls(True, plan.fired, num_devices=plan.num_devices,
                   device_assignment=tuple(d.id for d in plan.device_assignment),
                   executable=executable,
                   in_paths=plan.in_paths, in_shardings=plan.in_shardings,
                   kept_inputs=plan.kept, transfers=plan.transfers, out_paths=plan.out_paths,
                   out_shardings=plan.out_shardings, out_committed=plan.out_committed,
                   inside=plan.inside, held=plan.held,
                   **_what_ran(plan.entry.facts, len(plan.out_paths)))

    @classmethod
    def of_decision(cls, d: Any, compiled: Any, why: str,
                    fired: tuple[str, ...] = ()) -> "Explanation":
        """A call the engine decided up to compiling and JAX's own jit compiled (``compiled``:
        the executable's facts, the results' shardings read off it; the refs' updates come
        after the results)."""
        n = len(d.arguments.leaves)
        return cls(True, tuple(fired), num_devices=d.count,
                   device_assignment=tuple(dev.id for dev in d.assignment),
                   executable=f"compiled by JAX's own jit: {why}",
                   in_paths=tuple(d.arguments.paths()) if n else (),
                   in_shardings=tuple(d.final), kept_inputs=d.kept,
                   out_paths=tuple(d.out_paths),
                   out_shardings=tuple(compiled.out_shardings[:len(d.out_paths)]),
                   out_committed=(d.committed,) * len(d.out_paths),
                   inside=tuple((s.path, s.sharding) for s in d.inside),
                   held=held_inputs(d), **_what_ran(compiled, len(d.out_paths)))

    @classmethod
    def of_rejection(cls, error: EngineRejection, fired: tuple[str, ...] = ()) -> "Explanation":
        return cls(False, tuple(fired) or tuple(getattr(error, "fired", ())),
                   refusal=Refusal.of(error))

    def __str__(self) -> str:
        if not self.accepted:
            where = f" at {self.path}" if self.path else ""
            when = f" when {_WHEN.get(self.stage, self.stage)}" if self.stage else ""
            return (f"rejected by {self.rule} ({self.error_type}){where}{when}: {self.message}"
                    + (f"\n  rules: {' '.join(self.trace)}" if self.trace else ""))
        lines = [f"accepted on {self.num_devices} device(s) {list(self.device_assignment or ())}"
                 f"; executable: {self.executable}"]
        for path, s in zip(self.in_paths, self.in_shardings):
            moved = " (moved)" if path in self.transfers else ""
            lines.append(f"  in  {path}: {s}{moved}")
        for path, s, what in self.held:
            lines.append(f"  held {path}: {s} ({what})")
        for path, s in self.inside:
            lines.append(f"  inside {path}: {s}")
        for path, s, c in zip(self.out_paths, self.out_shardings, self.out_committed):
            lines.append(f"  out {path}: {s}" + ("" if c else " (uncommitted)"))
        for path, s in zip(self.out_paths, self.compiled_out_shardings):
            lines.append(f"  compiled out {path}: {s}")
        for c in self.collectives:
            lines.append(f"  collective {_collective_words(c)}")
        lines.append("  rules: " + " ".join(self.trace))
        return "\n".join(lines)


def _what_ran(facts: Any, results: int) -> dict[str, tuple]:
    """The executable's own output shardings (flat, as JAX spells them; the refs' updates
    that follow the results left out) and the collectives of its compiled HLO."""
    return {"compiled_out_shardings": tuple(facts.out_shardings[:results]),
            "collectives": facts.collectives()}


def _collective_words(c: Collective) -> str:
    """One collective on one line: kind, who takes part, what each device receives."""
    if c.kind == "collective-permute":
        who = "pairs " + " ".join(f"{a}->{b}" for a, b in c.source_target_pairs)
    else:
        who = "groups " + " ".join("{" + ",".join(map(str, g)) + "}" for g in c.replica_groups)
    shape = ",".join(map(str, c.shape))
    made = f" for {c.op_name}" if c.op_name else ""
    return f"{c.kind} {who}: {c.dtype}[{shape}], {c.bytes_per_device} bytes per device{made}"

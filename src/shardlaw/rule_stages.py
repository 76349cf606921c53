"""When a jit call meets each rule: the one declaration of every rule's stage.

A rule's stage says when ``jax.jit`` (0.10.2) applies it, so when a refusal by it is
raised. The specification's rule registry reads this table (``Rule.stage``), and so does
the engine, which never imports the specification: the module holds data and the standard
library only.

The stages, in pipeline order:

* ``description`` — checks of the call's description itself (the spec's own values; JAX has
  no such step): they run before any of jit's rules and are left out of a jit trace;
* ``jit`` — at ``jax.jit(f, ...)``, before any call;
* ``trace`` — at the call, while jit reads its arguments and traces the function (the
  engine's ``stage_call`` and ``stage_trace``);
* ``lower`` — lowering the traced call (``stage_lower``);
* ``compile`` — compiling, and reading the compiled program's shardings back
  (``stage_compile``);
* ``call`` — handing the arguments to the executable (``stage_dispatch``);
* ``aot`` — calling an executable compiled ahead of time.

>>> stage_of("NS-1"), stage_of("RES-5"), stage_of("EQ-2")
('trace', 'call', None)
>>> [rule for rule in rules_at("aot")]
['AOT-1', 'AOT-2', 'AOT-3']
"""

from __future__ import annotations

__all__ = ["STAGES", "STAGE_OF", "stage_of", "rules_at", "is_description"]

STAGES = ("description", "jit", "trace", "lower", "compile", "call", "aot")

# Rule ID -> stage. Rules that are not part of a jit call's pipeline (the placement core
# asked on its own, the cache model, the vectors) have none. ENG-* are the engine's own.
STAGE_OF: dict[str, str] = {
    # The call's description (CALL-0) and the values it holds.
    "CALL-0": "description",
    **{f"VAL-{n}": "description" for n in (1, 2, 3, 4, 5, 6, 7, 8, 10)},
    # At jax.jit(...): device/backend options, the leaves of in_/out_shardings, and what
    # JAX checks of a leaf there (a PartitionSpec's axes named once; a Format's layout).
    "JIT-1": "jit", "JIT-2": "jit", "NS-2": "jit", "VAL-9": "jit", "ENG-4": "jit",
    # At the call and while tracing: the context mesh, the call's form, each leaf's
    # meaning under the context mesh (a PartitionSpec naming an axis the mesh lacks is
    # refused here, NS-1), matching the trees, fitting arguments and results.
    "JIT-5": "trace", "JIT-4": "trace", "JIT-3": "trace", "NS-1": "trace", "NS-3": "trace",
    "NS-4": "trace", "TREE-1": "trace", "TREE-2": "trace", "FIT-1": "trace", "LAY-4": "trace",
    "ENG-1": "trace", "ENG-2": "trace",
    # Lowering: resolution, layouts, kept inputs, the device assignment, what the program
    # receives.
    "RES-1": "lower", "RES-2": "lower", "RES-3": "lower", "RES-4": "lower",
    "LAY-1": "lower", "LAY-5": "lower", "LAY-3": "lower", "KEEP-1": "lower",
    "DA-1": "lower", "DA-2": "lower", "DA-3": "lower", "DA-4": "lower",
    "EXE-1": "lower", "EXE-4": "lower", "EXE-2": "lower",
    # Compiling: XLA's verifier, and the shardings and layouts read back.
    "EXE-3": "compile", "OUT-1": "compile", "OUT-2": "compile", "OUT-3": "compile",
    "LAY-2": "compile", "ENG-5": "compile",
    # Handing the arguments over.
    "RES-5": "call", "ENG-3": "call", "ENG-6": "call",
    # Calling an executable compiled ahead of time.
    "AOT-1": "aot", "AOT-2": "aot", "AOT-3": "aot",
}


def stage_of(rule_id: str) -> str | None:
    """The stage at which jit applies ``rule_id`` (None: not a step of a jit call)."""
    return STAGE_OF.get(rule_id)


def rules_at(stage: str) -> list[str]:
    """The rules of one stage, in declaration order."""
    if stage not in STAGES:
        raise ValueError(f"{stage!r} is not a stage; the stages are {STAGES}")
    return [rule for rule, at in STAGE_OF.items() if at == stage]


def is_description(rule_id: str) -> bool:
    """Whether ``rule_id`` checks the call's description rather than being one of JAX's rules."""
    return STAGE_OF.get(rule_id) == "description"


assert set(STAGE_OF.values()) <= set(STAGES)

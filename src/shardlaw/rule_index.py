"""The rule index: every fact about a rule that is not its code, declared once.

A rule's code lives in the specification, next to its failures: ``@rule("DIV-1",
mirrors=...)`` gives its ID, the JAX function it mirrors, and (in the docstring) its
statement, numbered clauses and examples. Everything else about it is here, as data, and
every other table is derived from it:

* its **family**: which part of the documentation it belongs to, under which title, in
  pipeline order (:data:`FAMILIES`; the docs' rule pages and their order);
* its **stage**: when ``jax.jit`` (0.10.2) applies it, so when a refusal by it is raised
  (the family's stage, unless :data:`STAGE_EXCEPTIONS` says otherwise; ``Rule.stage`` in
  the spec, ``EngineRejection.stage`` in the engine);
* its **engine counterpart**, for a rule of a jit stage: by default an engine function
  marked ``@rule("ID")`` with the spec function's name and statement, or an inline
  ``note("ID")``; :data:`ENGINE_EXCEPTIONS` says where the engine does otherwise — leaves the
  rule to JAX (``left_to_jax``), refuses by it inline in another rule's function
  (``refused_inline``), or names its function otherwise (``named_otherwise``).

The specification refuses a rule whose family is not declared here; the engine, which never
imports the specification, reads this module (data and the standard library only).
``docs/adding-a-rule.rst`` says what a new rule touches.

The stages, in pipeline order:

* ``description`` — checks of the call's description itself (the spec's own values; JAX has
  no such step): they run before any of jit's rules and are left out of a jit trace;
* ``jit`` — at ``jax.jit(f, ...)``, before any call;
* ``trace`` — at the call, while jit reads its arguments and traces the function;
* ``lower`` — lowering the traced call;
* ``compile`` — compiling, and reading the compiled program's shardings back;
* ``call`` — handing the arguments to the executable;
* ``aot`` — calling an executable compiled ahead of time.

>>> stage_of("NS-1"), stage_of("RES-5"), stage_of("EQ-2"), stage_of("DIV-7")
('trace', 'call', None, None)
>>> family_of("SMAP-12").title
'shard_map'
>>> sorted(LEFT_TO_JAX)  # doctest: +NORMALIZE_WHITESPACE
['CONST-1', 'LAY-2', 'LAY-3', 'NS-3', 'PROG-1', 'PROG-10', 'PROG-11', 'PROG-12',
 'PROG-13', 'PROG-14', 'PROG-15', 'PROG-16', 'PROG-4', 'PROG-6', 'PROG-7', 'PROG-8',
 'PROG-9', 'PROP-24', 'REF-2', 'WSC-10', 'WSC-11', 'WSC-12']
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "STAGES", "JIT_STAGES", "Family", "FAMILIES", "PARTS", "STAGE_EXCEPTIONS", "Counterpart",
    "ENGINE_EXCEPTIONS", "LEFT_TO_JAX", "family_of", "stage_of", "is_description",
    "counterpart_of", "family_id",
]

STAGES = ("description", "jit", "trace", "lower", "compile", "call", "aot")
JIT_STAGES = STAGES[1:]


@dataclasses.dataclass(frozen=True)
class Family:
    """A family of rules: ``ID-1``, ``ID-2``, ... — one page of the docs."""

    id: str
    part: str          # the docs' part it sits in
    title: str
    stage: str | None  # the stage of its rules (None: not a step of a jit call)

    def __post_init__(self) -> None:
        if self.stage is not None and self.stage not in STAGES:
            raise ValueError(f"family {self.id}: {self.stage!r} is not one of {STAGES}")


_ALL = [
    # The values themselves.
    Family("VAL", "Values", "Meshes, devices, partition specs: what a valid value is",
           "description"),
    Family("HLO", "Values", "HLO shardings: canonical form, text, parsing", None),
    Family("NS", "Values", "NamedSharding validation", "trace"),
    # Where a sharding puts the blocks.
    Family("LOW", "Placement", "Lowering to HLO shardings", None),
    Family("DIV", "Placement", "Dividing dimensions", None),
    Family("DEV", "Placement", "Devices", None),
    Family("IDX", "Placement", "Indices: which device holds which box", None),
    Family("REP", "Placement", "Replication", None),
    Family("PROC", "Placement",
           "Several processes: what each process addresses, holds and may fetch", None),
    # When two shardings count as the same.
    Family("EQ", "Equivalence", "Equivalence: JAX's and placement's", None),
    Family("SMT", "Equivalence", "Proving placement equivalence with z3", None),
    # A jit call, stage by stage.
    Family("CALL", "A jit call, stage by stage", "Call descriptions, checked before JAX's rules",
           "description"),
    Family("JIT", "A jit call, stage by stage", "jit options and sharding leaves", "trace"),
    Family("PJIT", "A jit call, stage by stage",
           "pjit inside a `with mesh:` block (the JAX 0.4 line's resource environment)",
           "trace"),
    Family("TREE", "A jit call, stage by stage", "Matching shardings to pytrees", "trace"),
    Family("FIT", "A jit call, stage by stage", "Arguments and results fit their shardings",
           "trace"),
    Family("RES", "A jit call, stage by stage", "Resolving argument shardings", "lower"),
    Family("KEEP", "A jit call, stage by stage", "Kept inputs", "lower"),
    Family("DA", "A jit call, stage by stage", "The device assignment", "lower"),
    Family("LAY", "A jit call, stage by stage",
           "Layouts: Format leaves, arrays' layouts, results' layouts", "lower"),
    Family("EXE", "A jit call, stage by stage", "What the compiled program receives", "lower"),
    Family("OUT", "A jit call, stage by stage", "Result shardings", "compile"),
    Family("AOT", "A jit call, stage by stage",
           "Calling an ahead-of-time compiled executable", "aot"),
    # Under transformations.
    Family("ARG", "Under transformations",
           "Argument placement: putting values on devices before a call", None),
    Family("BAT", "Under transformations", "vmap of a jit call", None),
    Family("AD", "Under transformations", "Differentiating through a jit call", None),
    Family("WSC", "Under transformations", "with_sharding_constraint", None),
    Family("SMAP", "Under transformations", "shard_map", None),
    # A whole program: a jit's body, equation by equation.
    Family("PROG", "Whole programs", "Whole programs: the equations inside a jit", "lower"),
    Family("CONST", "Whole programs", "Closed-over constants: embedded or hoisted", "lower"),
    Family("REF", "Whole programs", "Mutable refs: inputs, aliased updates, donation",
           "lower"),
    Family("PBAT", "Whole programs", "vmap of a whole program: the equations it rewrites",
           None),
    Family("LOOP", "Whole programs",
           "Control flow: scan, while_loop, cond, remat and custom derivatives", None),
    Family("PROP", "Whole programs",
           "Sharding propagation: where the compiler places what the user did not", None),
    Family("COLL", "Whole programs",
           "Collectives: what a step communicates where the partitioner reshards", None),
    # Whether it compiles again.
    Family("CACHE", "Caches", "When jit traces, lowers and compiles again; the cache policy",
           None),
    Family("VEC", "Test vectors", "Test vectors: reading and writing", None),
    # The engine's own rules, for input the jit-call semantics does not describe.
    Family("ENG", "The engine's own", "Input beyond the jit-call semantics", "trace"),
]
FAMILIES: dict[str, Family] = {family.id: family for family in _ALL}
PARTS: tuple[str, ...] = tuple(dict.fromkeys(family.part for family in _ALL))

# Rules whose stage is not their family's: rule ID -> stage (None: not a step of a jit call).
STAGE_EXCEPTIONS: dict[str, str | None] = {
    # JAX checks these of a leaf at jax.jit(...): a PartitionSpec's axes named once, a
    # Format's layout, and jit's own options.
    "JIT-1": "jit", "JIT-2": "jit", "NS-2": "jit", "VAL-9": "jit", "ENG-4": "jit",
    # A layout of the wrong rank is refused while tracing.
    "LAY-4": "trace",
    # An abstract argument's own sharding is first divided when the program is written out.
    "FIT-3": "lower",
    # A sharding's rank against a value's, asked of the placement core alone.
    "NS-5": None,
    # Compiling: XLA's verifier, and the layouts read back.
    "EXE-3": "compile", "LAY-2": "compile", "ENG-5": "compile",
    # Handing the arguments over.
    "RES-5": "call", "ENG-3": "call", "ENG-6": "call",
    # A whole program: its description, its equations' types (while tracing), and its
    # results as compiled.
    "PROG-0": "description", "PROG-1": "trace", "PROG-3": "compile", "PROG-4": "compile",
    "PROG-6": "compile", "PROG-7": "trace", "PROG-8": "trace", "PROG-9": "trace",
    "PROG-10": "trace", "PROG-12": "trace", "PROG-13": "trace", "PROG-14": "trace",
    "PROG-15": "trace", "PROG-16": "trace",
    # Compiling: XLA refuses a donated input aliased before the compiler split it.
    "PROG-11": "compile",
    # Compiling: XLA's verifier refuses a cond whose branches' results carry different
    # shardings written before propagation.
    "PROP-24": "compile",
    # A result typed over an Explicit mesh of another size than the device assignment.
    "AD-9": "lower",
    # Compiling: XLA refuses a donated ref (its buffer is aliased already).
    "REF-3": "compile",
    # Refs under vmap and AD (the rewrites' rules), and in shard_map bodies (as the SMAP
    # rules): raised in the stage running, trace or lower.
    "REF-4": None, "REF-5": None, "REF-6": None, "REF-7": None, "REF-8": None,
    # Lowering a constraint inside a jit's body: a GSPMDSharding that Shardy cannot write,
    # an operand typed with reduced axes, a spec merged with the operand's split.
    "WSC-8": "lower", "WSC-11": "lower", "WSC-12": "lower",
    # A constraint's result type, while tracing.
    "WSC-10": "trace",
}


@dataclasses.dataclass(frozen=True)
class Counterpart:
    """How the engine decides a rule of a jit stage, where not by a same-named function."""

    kind: str   # "left to JAX", "refused inline" or "named otherwise"
    why: str

    KINDS = ("left to JAX", "refused inline", "named otherwise")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS or not self.why.strip():
            raise ValueError(f"a counterpart is one of {self.KINDS} with a reason")


def _left_to_jax(why: str) -> Counterpart:
    return Counterpart("left to JAX", why)


def _refused_inline(where: str) -> Counterpart:
    return Counterpart("refused inline", where)


def _named_otherwise(why: str) -> Counterpart:
    return Counterpart("named otherwise", why)


ENGINE_EXCEPTIONS: dict[str, Counterpart] = {
    # No engine code decides these; JAX's own code does, and what it decides or raises stands.
    "NS-3": _left_to_jax(
        "JAX's NamedSharding constructor refuses UNCONSTRAINED over a mesh without an Auto "
        "axis when the sharding is built, before jit sees it; a leaf of "
        "in_shardings/out_shardings holding UNCONSTRAINED is refused earlier, by JIT-2"),
    "WSC-10": _left_to_jax(
        "JAX's abstract evaluation of the constraint moves the operand's type onto the "
        "constraint's mesh and refuses a split over axes it lacks; the engine's walk of the "
        "body does not read value types, and JAX's refusal stands"),
    "WSC-11": _left_to_jax(
        "JAX's lowering of the constraint refuses an operand typed with unreduced or "
        "reduced axes; the engine's walk of the body does not read value types, and JAX's "
        "refusal stands"),
    "WSC-12": _left_to_jax(
        "JAX's lowering of the constraint merges the operand's split over Explicit axes into "
        "the constraint's spec and refuses a mesh axis named twice; the engine's walk of "
        "the body does not read value types, and JAX's refusal stands"),
    "PROG-6": _left_to_jax(
        "only vmap's batching rule binds an out sharding with a dimension left UNCONSTRAINED "
        "(jax.jit refuses one), and JAX reads the compiler's placement of such a result "
        "back; the engine hands the batched call to JAX unchanged"),
    "LAY-2": _left_to_jax(
        "JAX's compiler decides the layouts of the results (its choice under Layout.AUTO, "
        "else the Format's layout or the default) and JAX reads them off the executable; the "
        "engine hands out_shardings' Formats to JAX unchanged"),
    "LAY-3": _left_to_jax(
        "JAX (pjit's _resolve_in_layouts) and its compiler decide the layouts the executable "
        "takes its inputs in; the engine hands in_shardings' Formats to JAX unchanged and "
        "checks only what jit refuses (LAY-1, LAY-4, LAY-5)"),
    # The engine refuses these inside another rule's function, with no function of their own.
    "NS-4": _refused_inline(
        "engine.shardings.leaf_to_sharding (JIT-3) refuses a PartitionSpec whose unreduced or "
        "reduced axes are not Explicit axes of the context mesh, in the words of JAX's "
        "NamedSharding constructor, which refuses it first"),
    "NS-1": _refused_inline(
        "engine.shardings.leaf_to_sharding (JIT-3) refuses a PartitionSpec that names an axis "
        "the context mesh lacks before building its NamedSharding"),
    "NS-2": _refused_inline(
        "engine.shardings.check_leaf (JIT-2), through _check_axes_used_once, refuses a "
        "PartitionSpec leaf that uses a mesh axis twice; JAX's NamedSharding constructor "
        "refuses a NamedSharding that does"),
    # The engine reads the shardings inside a jit's body and recovers results over them
    # (PROG-2, PROG-3: engine/program_body.py); JAX's own tracing types its equations and
    # its compiler places the results.
    # JAX embeds or hoists closed-over constants (issue 23, seed rows); the engine reads the
    # hoisted ones' shardings (CONST-2) and refs (REF-1, REF-3: engine/program_body.py), and
    # JAX aliases the refs' updates.
    "CONST-1": _left_to_jax(
        "JAX's lowering embeds closed-over constants, or hoists them as arguments when "
        "jax_use_simplified_jaxpr_constants is on; the engine traces through JAX's jit"),
    "REF-2": _left_to_jax(
        "JAX's _discharge_refs aliases each ref's new value to its buffer; the engine decides "
        "a call with refs (REF-1, REF-3) and JAX's jit compiles the aliasing"),
    "PROG-1": _left_to_jax(
        "JAX's abstract evaluation types each equation of the body while jit traces it; the "
        "engine reads the types JAX gives"),
    "PROG-11": _left_to_jax(
        "JAX's lowering aliases a donated input whose sharding it leaves to the compiler at "
        "its whole shape, and XLA refuses compiling where the compiler splits it (jax#25346); "
        "the engine compiles through JAX's jit, and XLA's refusal stands"),
    "PROP-24": _left_to_jax(
        "XLA's verifier refuses a conditional whose branches return a result on different "
        "shardings as compiling starts; the engine compiles through JAX's jit, and XLA's "
        "refusal stands"),
    "PROG-7": _left_to_jax(
        "JAX's dot_general sharding rule types each matmul of the body (and of its "
        "gradient) while jit traces it; the engine traces through JAX's jit"),
    "PROG-8": _left_to_jax(
        "JAX's broadcasting and select sharding rules type each elementwise operation of the "
        "body while jit traces it; the engine traces through JAX's jit"),
    "PROG-9": _left_to_jax(
        "JAX's slice, dynamic_slice, pad and split sharding rules type each resized result of "
        "the body while jit traces it; the engine traces through JAX's jit"),
    "PROG-10": _left_to_jax(
        "JAX's cumulative reductions' sharding rule types each of the body while jit traces "
        "it; the engine traces through JAX's jit"),
    "PROG-12": _left_to_jax(
        "JAX's reshape sharding rule types each reshape of the body while jit traces it; the "
        "engine traces through JAX's jit"),
    "PROG-13": _left_to_jax(
        "JAX's gather sharding rule types each gather of the body (jnp.take, indexing by an "
        "array) while jit traces it; the engine traces through JAX's jit"),
    "PROG-14": _left_to_jax(
        "JAX's sort abstract evaluation types each sort of the body (jnp.sort, jnp.argsort) "
        "while jit traces it; the engine traces through JAX's jit"),
    "PROG-15": _left_to_jax(
        "JAX's convolution sharding rule types each conv_general_dilated of the body while "
        "jit traces it; the engine traces through JAX's jit"),
    "PROG-16": _left_to_jax(
        "JAX's triangular_solve and linear-algebra sharding rules type each solve of the body "
        "while jit traces it; the engine traces through JAX's jit"),
    "PROG-4": _left_to_jax(
        "the compiler places a result a constraint or an inner jit returns; the engine "
        "takes the shardings JAX reports where it compiles"),
    # The engine's function for these carries another name.
    "VAL-9": _named_otherwise(
        "engine.layouts names its checks by the part of a layout they look at (check_order); "
        "the spec's check_major_to_minor names the field"),
    "LAY-1": _named_otherwise(
        "engine.layouts.check_layout, one of the layout checks named by what they look at; "
        "the spec's check_argument_layout"),
    "LAY-4": _named_otherwise(
        "engine.layouts.check_rank, one of the layout checks named by what they look at; the "
        "spec's check_layout_rank"),
    "JIT-5": _named_otherwise(
        "the engine's context_mesh() reads JAX's context itself; the spec's "
        "jit_context_mesh(context) is given the context the call describes"),
    "RES-3": _named_otherwise(
        "the same check of one argument, singular in the engine (check_memory_kind), plural "
        "in the spec (check_memory_kinds)"),
}

# Derived: the rules the engine leaves to JAX, and why.
LEFT_TO_JAX: dict[str, str] = {rule_id: c.why for rule_id, c in ENGINE_EXCEPTIONS.items()
                               if c.kind == "left to JAX"}


def family_id(rule_id: str) -> str:
    """``"SMAP"`` for ``"SMAP-12"``."""
    return rule_id.rsplit("-", 1)[0]


def family_of(rule_id: str) -> Family:
    """The declared family of ``rule_id`` (KeyError, naming this module, when undeclared)."""
    family = family_id(rule_id)
    if family not in FAMILIES:
        raise KeyError(f"the family {family!r} of rule {rule_id} is not declared in "
                       f"shardlaw.rule_index.FAMILIES; declare it there (its part, title and "
                       f"stage) before its first rule")
    return FAMILIES[family]


def stage_of(rule_id: str) -> str | None:
    """The stage at which jit applies ``rule_id`` (None: not a step of a jit call)."""
    if rule_id in STAGE_EXCEPTIONS:
        return STAGE_EXCEPTIONS[rule_id]
    family = FAMILIES.get(family_id(rule_id))
    return family.stage if family else None


def is_description(rule_id: str) -> bool:
    """Whether ``rule_id`` checks the call's description rather than being one of JAX's rules."""
    return stage_of(rule_id) == "description"


def counterpart_of(rule_id: str) -> Counterpart | None:
    """How the engine decides ``rule_id`` where not by a same-named function (None: it does)."""
    return ENGINE_EXCEPTIONS.get(rule_id)


assert set(STAGE_EXCEPTIONS.values()) - {None} <= set(STAGES)

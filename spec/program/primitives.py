"""The primitive table: every primitive and every kind of equation, its facts declared once.

JAX registers each primitive's rules beside the primitive (``batching.primitive_batchers[p]``,
``ad.primitive_jvps[p]``, ``ad.primitive_transposes[p]``, its abstract evaluation); the
partitioner keeps one sharding rule per operation. Here one :class:`Entry` per primitive
(``sin``, ``psum``, ``broadcast_in_dim`` ...) and per kind of equation (``jit``,
``sharding_constraint``, ``device_put``, ``reshard``, ``shard_map``) says what it is
(:class:`Kind`), how its results are typed, batched, differentiated (its tangent and its
transpose), checked (where JAX traces it, inside a shard_map's body, when lowering), what
dead-code elimination does with it, the bodies it carries and — for issue 33 — its sharding
rule. A slot holds the *name* of a rule; each rewrite keeps its rules in a :class:`Rules`
(``BATCHING``, ``TANGENTS``, ``TRANSPOSES`` ...) under those names, registered beside the
rewrite's machinery (``@BATCHING.register("keeps_axis")``), and finds an equation's rule by
:func:`entry_of` — never by asking ``isinstance``. A slot may hold :class:`Absent`: the
rewrite refuses the entry, for the reason given.

A primitive the table has no entry for is an opaque one (:func:`entry_of` answers for it
from :func:`unknown_entry`): its results' types are as the description gives them, vmap
refuses it (PROG-0: the spec does not know its batching), AD differentiates and transposes
it opaquely (``linearized_<name>``, ``transposed_<name>``), nothing is checked of it, and
its sharding is not propagated.

Standard library only; imports nothing of the program layer (the layer's modules import
it).

>>> entry_of_name("sin").kind, entry_of_name("sin").batching, entry_of_name("sin").residuals
(<Kind.ELEMENTWISE: 'elementwise'>, 'keeps_axis', ('cos',))
>>> entry_of_name("my_op").kind, entry_of_name("my_op").batching
(<Kind.OPAQUE: 'opaque'>, Absent(why='the table has no entry for my_op: its batching is not known'))
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, Callable, Iterator, Union

__all__ = ["Kind", "Absent", "Factors", "NotPropagated", "NOT_PROPAGATED_YET", "Bodies",
           "NO_BODIES", "Entry", "TABLE", "Rules", "REWRITES", "entry_of", "entry_of_name",
           "unknown_entry", "declare", "names_where", "described_names", "ALIASES", "TYPING", "BATCHING", "TANGENTS",
           "JVP_BODIES", "LINEARIZE_BODIES", "TRANSPOSES", "TRACING", "IN_SHARD_MAP",
           "PRUNING", "ASSIGNMENT", "RECORDS"]


class Kind(enum.Enum):
    """What an entry is, as a reader and the rewrites group them."""

    ELEMENTWISE = "elementwise"     # each result element from the operands' same elements
    REDUCTION = "reduction"         # reduces dimensions (reduce_sum ...)
    CONTRACTION = "contraction"     # contracts dimensions of two operands (dot_general)
    STRUCTURAL = "structural"       # rearranges elements (transpose, broadcast_in_dim ...)
    COLLECTIVE = "collective"       # moves or reduces values across a shard_map's devices
    EFFECT = "effect"               # reads or writes a mutable ref
    PLACEMENT = "placement"         # places its operand (constraint, device_put, reshard)
    CALL = "call"                   # runs a body as a nested program (jit)
    MAPPED = "mapped"               # runs a body per shard (shard_map)
    CONTROL_FLOW = "control flow"   # runs bodies by a predicate or a loop (issue 32)
    OPAQUE = "opaque"               # not in the table: nothing is known of it


@dataclasses.dataclass(frozen=True)
class Absent:
    """A slot declared empty: the rewrite refuses the entry (or does nothing of its own),
    for the reason given."""

    why: str


# --------------------------------------------------------------------------- sharding rules

@dataclasses.dataclass(frozen=True)
class Factors:
    """A sharding rule as the partitioner holds one (Shardy's ``OpShardingRule``): each
    operand's and each result's dimensions named by factors; a factor split the same way
    wherever it appears. A factor in ``reduced`` is contracted or reduced (it appears in
    operands only: operands split along it give partial results, summed by a collective);
    one in ``replicated`` must be unsplit (needs replication); every other factor passes its
    split through from operands to results.

    >>> matmul = Factors((("i", "j"), ("j", "k")), (("i", "k"),), reduced=frozenset("j"))
    >>> sorted(matmul.passed_through)
    ['i', 'k']
    """

    operands: tuple[tuple[str, ...], ...]
    results: tuple[tuple[str, ...], ...]
    reduced: frozenset[str] = frozenset()
    replicated: frozenset[str] = frozenset()
    # (factor, size) of each factor that shares a dimension with another (a reshape's,
    # major first); a factor alone in a dimension has that dimension's size.
    sizes: tuple[tuple[str, int], ...] = ()

    @property
    def passed_through(self) -> frozenset[str]:
        """The factors whose split passes from operands to results."""
        every = {f for dims in self.operands + self.results for f in dims}
        return frozenset(every - self.reduced - self.replicated)


@dataclasses.dataclass(frozen=True)
class NotPropagated:
    """An entry whose sharding is not propagated (the verdict says so), and why."""

    why: str


NOT_PROPAGATED_YET = NotPropagated("sharding propagation is not written yet (issue 33)")

# A sharding slot: one rule for every use, a function of the equation and its operands'
# types giving one (a reshape's factors depend on its shapes), or none.
ShardingRule = Union[Factors, Callable[[Any, tuple], Factors], NotPropagated]


# --------------------------------------------------------------------------- bodies

@dataclasses.dataclass(frozen=True)
class Bodies:
    """The bodies an equation carries: the fields that hold Programs (a jit's ``body``; a
    cond's branches, a scan's body, issue 32) and whether they run per shard."""

    fields: tuple[str, ...] = ()
    per_shard: bool = False

    def __bool__(self) -> bool:
        return bool(self.fields)


NO_BODIES = Bodies()


# --------------------------------------------------------------------------- entries

Slot = Union[str, Absent, None]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One primitive or kind of equation, its facts declared once.

    ``equation`` is the class of its equations in a description: ``Opaque`` for a
    primitive, its own for a kind of equation (``Jit``, ``ShardMap`` ...). Rule slots name
    a rule of the rewrite that fills them (a :class:`Rules`), or hold an :class:`Absent`;
    ``None`` in a checking slot: nothing of its own is checked there.

    * ``typing`` (:data:`TYPING`): how its results are typed — the name of a PROG-1 rule
      deriving them from its operands, or None: the description gives them;
    * ``batching`` (:data:`BATCHING`): its rule under ``vmap``;
    * ``jvp``: its tangent rule — in :data:`TANGENTS` for an entry without bodies (the
      tangent of an equation whose primal is emitted), in :data:`JVP_BODIES` and
      :data:`LINEARIZE_BODIES` for one with bodies (which emit primal and tangent);
    * ``transpose`` (:data:`TRANSPOSES`): its rule in a linear body's transpose;
    * ``tracing`` (:data:`TRACING`): its own checks where JAX traces it, outside a
      shard_map's body; ``in_shard_map`` (:data:`IN_SHARD_MAP`): its checks inside one
      (the SMAP rules of a collective, an elementwise result's split);
    * ``pruning`` (:data:`PRUNING`): what dead-code elimination does with it;
    * ``assignment`` (:data:`ASSIGNMENT`): the shardings it adds to the device assignment
      (PROG-2); ``record`` (:data:`RECORDS`): what it decides, for a verdict;
    * ``checks``: the rule IDs its checks apply, for the reader and the docs;
    * facts of its family: ``residuals`` (what its linearization stores, in the order its
      tangent reads them), ``params`` (the parameters it must hold), ``broadcasting`` (its
      batching casts operands as a broadcasting n-ary operation does), ``drops_varying``
      (a collective whose result no longer varies along the axes it names), ``effect``
      (``"reads ref"``, ``"writes ref"``);
    * ``sharding``: its sharding (propagation) rule (:data:`ShardingRule`; issue 33);
    * ``bodies``: the bodies it carries (:class:`Bodies`).
    """

    name: str
    kind: Kind
    equation: str = "Opaque"
    typing: Slot = None
    batching: Slot = None
    jvp: Slot = None
    transpose: Slot = None
    tracing: Slot = None
    in_shard_map: Slot = None
    pruning: Slot = "whole"
    assignment: Slot = None
    record: Slot = None
    checks: tuple[str, ...] = ()
    residuals: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    broadcasting: bool = False
    drops_varying: bool = False
    effect: str | None = None
    sharding: Any = NOT_PROPAGATED_YET
    bodies: Bodies = NO_BODIES

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise ValueError(f"an entry's name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.kind, Kind):
            raise ValueError(f"the kind of {self.name} must be a Kind, got {self.kind!r}")
        for slot in SLOTS:
            value = getattr(self, slot)
            if not (value is None or isinstance(value, (str, Absent))):
                raise ValueError(f"the {slot} slot of {self.name} must name a rule, be "
                                 f"Absent(why) or None, got {value!r}")
        if not (isinstance(self.sharding, (Factors, NotPropagated)) or callable(self.sharding)):
            raise ValueError(f"the sharding slot of {self.name} must be Factors, a function "
                             f"giving Factors, or NotPropagated, got {self.sharding!r}")
        if self.effect not in (None, "reads ref", "writes ref"):
            raise ValueError(f"the effect of {self.name} must be None, 'reads ref' or "
                             f"'writes ref', got {self.effect!r}")


# The slots that name a rule of a rewrite.
SLOTS = ("typing", "batching", "jvp", "transpose", "tracing", "in_shard_map", "pruning",
         "assignment", "record")


# --------------------------------------------------------------------------- rewrites' rules

class Rules:
    """One rewrite's rules by the name an entry's slot gives (JAX's ``primitive_batchers``,
    keyed by rule rather than by primitive: primitives of one family share a rule). The
    rewrite registers each rule beside its machinery; :meth:`of` finds an entry's."""

    def __init__(self, rewrite: str, slot: str, needed: str = "every") -> None:
        self.rewrite, self.slot, self.needed = rewrite, slot, needed
        self.rules: dict[str, Callable] = {}
        REWRITES.append(self)

    def register(self, *names: str) -> Callable[[Callable], Callable]:
        """Register the decorated function as the rule ``names`` name."""
        def add(function: Callable) -> Callable:
            for name in names:
                if name in self.rules:
                    raise ValueError(f"{self.rewrite} has a rule {name!r} already")
                self.rules[name] = function
            return function
        return add

    def of(self, entry: Entry) -> Callable | None:
        """The rule ``entry`` names in this rewrite's slot (None: an Absent or empty slot)."""
        named = getattr(entry, self.slot)
        return self.rules[named] if type(named) is str else None

    def __repr__(self) -> str:
        return f"Rules({self.rewrite!r}, slot {self.slot!r}: {sorted(self.rules)})"


REWRITES: list[Rules] = []

TYPING = Rules("typing (PROG-1)", "typing")
BATCHING = Rules("vmap", "batching")
TANGENTS = Rules("jvp and linearize: a tangent", "jvp", needed="without bodies")
JVP_BODIES = Rules("jvp: an equation with bodies", "jvp", needed="with bodies")
LINEARIZE_BODIES = Rules("linearize: an equation with bodies", "jvp", needed="with bodies")
TRANSPOSES = Rules("transpose", "transpose")
TRACING = Rules("tracing (explain's checks)", "tracing")
IN_SHARD_MAP = Rules("tracing inside a shard_map's body", "in_shard_map")
PRUNING = Rules("dead-code elimination", "pruning")
ASSIGNMENT = Rules("the device assignment (PROG-2)", "assignment")
RECORDS = Rules("the verdict's record of what is decided", "record")


# --------------------------------------------------------------------------- the table

TABLE: dict[str, Entry] = {}


def declare(entry: Entry) -> Entry:
    """Put ``entry`` in the table (a name is declared once)."""
    if entry.name in TABLE:
        raise ValueError(f"the primitive table has an entry {entry.name!r} already")
    TABLE[entry.name] = entry
    return entry


def entry_of(eq: Any) -> Entry:
    """The entry of an equation: its kind's, or for an opaque equation its primitive's."""
    name = eq.kind
    if name == "opaque":
        name = eq.primitive
    found = TABLE.get(name)
    return found if found is not None else unknown_entry(name)


def entry_of_name(name: str) -> Entry:
    """The entry of a primitive or kind of equation by its name."""
    found = TABLE.get(name)
    return found if found is not None else unknown_entry(name)


@functools.lru_cache(maxsize=256)
def unknown_entry(name: str) -> Entry:
    """What the table answers for a primitive it has no entry for: opaque (module
    docstring)."""
    return Entry(name, Kind.OPAQUE, batching=Absent(
        f"the table has no entry for {name}: its batching is not known"),
        jvp="opaque", transpose="opaque", sharding=NotPropagated(
            f"the table has no entry for {name}: its sharding rule is not known"))


def names_where(**facts: Any) -> tuple[str, ...]:
    """The names of the entries (in the table's order) whose fields are as ``facts`` say;
    a fact given as a tuple or frozenset matches any of its members."""
    def matches(entry: Entry) -> bool:
        for field, wanted in facts.items():
            value = getattr(entry, field)
            if isinstance(wanted, (tuple, frozenset)):
                if value not in wanted:
                    return False
            elif value != wanted:
                return False
        return True
    return tuple(name for name, entry in TABLE.items() if matches(entry))


def entries() -> Iterator[Entry]:
    return iter(TABLE.values())


# --------------------------------------------------------------------------- kinds of equation
# (in the order the PROG-0 refusal of an opaque equation names them)

_NO_AD_BODY = "a kind without bodies has its tangent in TANGENTS"

declare(Entry(
    "jit", equation="Jit", kind=Kind.CALL, typing="jit", batching="jit", jvp="jit", transpose="jit",
    tracing="jit", in_shard_map="jit", pruning="jit", assignment="jit", record="jit",
    checks=("FIT-1", "PROG-1", "AD-2", "AD-5", "AD-8"), bodies=Bodies(("body",))))
declare(Entry(
    "sharding_constraint", equation="ShardingConstraint", kind=Kind.PLACEMENT, typing="sharding_constraint", batching="sharding_constraint",
    jvp="sharding_constraint", transpose="sharding_constraint", tracing="sharding_constraint",
    assignment="sharding_constraint", record="placement", in_shard_map="sharding_constraint",
    checks=("PROG-1", "WSC-4", "WSC-5", "WSC-6", "WSC-7", "WSC-8", "WSC-10", "WSC-11",
            "WSC-12", "SMAP-28")))
declare(Entry(
    "device_put", equation="DevicePut", kind=Kind.PLACEMENT, typing="device_put", batching="device_put", jvp="device_put",
    transpose="device_put", tracing="device_put", assignment="device_put", record="device_put",
    checks=("PROG-1", "ARG-4")))
declare(Entry(
    "shard_map", equation="ShardMap", kind=Kind.MAPPED, batching="shard_map", jvp="shard_map", transpose="shard_map",
    tracing="shard_map", in_shard_map="shard_map", pruning="shard_map",
    assignment="shard_map", checks=("SMAP-3", "SMAP-7", "SMAP-8", "SMAP-12", "PBAT-1",
                                    "PBAT-2", "PBAT-3", "AD-10", "AD-11", "REF-7", "REF-8"),
    bodies=Bodies(("body",), per_shard=True)))
declare(Entry(
    "reshard", equation="Reshard", kind=Kind.PLACEMENT, typing="reshard", batching="reshard", jvp="reshard",
    transpose="reshard", tracing="reshard", record="placement", in_shard_map="reshard",
    checks=("PROG-1", "ARG-4", "EXE-3", "SMAP-28")))

# Control flow, remat and custom derivatives (issue 32): their bodies are Programs.
# A loop and a branching equation have rules of their own (control_flow_rules.py);
# remat and the custom-derivative calls are jits without options to the rewrites.
_NO_TRANSPOSE = Absent("its linearization is refused first: a transpose is never asked")
for _name, _equation, _bodies in (("scan", "Scan", ("body",)),
                                  ("while", "While", ("cond", "body_fun")),
                                  ("cond", "Cond", ("branches",))):
    _scan = _name == "scan"
    declare(Entry(_name, equation=_equation, kind=Kind.CONTROL_FLOW, typing=_name,
                  batching=_name, jvp=_name,
                  transpose=_name if _name != "while" else _NO_TRANSPOSE,
                  tracing="bodies", in_shard_map="bodies", checks=("PROG-0", "PROG-1"),
                  bodies=Bodies(_bodies)))
for _name, _equation in (("remat2", "Remat"), ("custom_jvp_call", "CustomJvp"),
                         ("custom_vjp_call", "CustomVjp")):
    # (under vmap JAX batches a remat's body at axis 0, a custom call's where its
    # operands are batched, as a jit's)
    declare(Entry(_name, equation=_equation, kind=Kind.CALL, typing="jit",
                  batching="at_front" if _name == "remat2" else "custom_call",
                  jvp={"remat2": "jit", "custom_jvp_call": "custom_jvp",
                       "custom_vjp_call": "custom_vjp"}[_name],
                  transpose="jit", tracing="jit", in_shard_map="jit",
                  pruning="jit", assignment="jit", record="jit",
                  checks=("PROG-0", "PROG-1", "AD-2", "AD-5", "AD-8"),
                  bodies=Bodies(("body",))))
del _name, _equation, _bodies, _scan
# A custom_vjp function's tangent (custom_lin): its bwd is no body of the trace.
declare(Entry("custom_lin", equation="CustomLin", kind=Kind.OPAQUE, batching="custom_lin",
              jvp=Absent("JAX gives custom_lin no derivative: it is transposed, or refused"),
              transpose="custom_lin", checks=("LOOP-3",)))

# jax.make_jaxpr names an inner jit's equation ``pjit`` in older versions: read as a jit
# (the bridge), never an opaque equation's name.
ALIASES = {"pjit": "jit"}


def described_names() -> tuple[str, ...]:
    """The names of the kinds of equation (each followed by its aliases): an opaque
    equation names any other primitive."""
    out = []
    for name, entry in TABLE.items():
        if entry.equation != "Opaque":
            out.append(name)
            out += [alias for alias, target in ALIASES.items() if target == name]
    return tuple(out)


# --------------------------------------------------------------------------- primitives

# An n-ary elementwise primitive's (and select_n's) operands' types where JAX traces it
# (PROG-8, elementwise_types.py).
_TYPED = dict(tracing="elementwise", checks=("PROG-8",))


def _elementwise(name: str, *, jvp: str = "opaque", residuals: tuple[str, ...] = (),
                 transpose: str = "opaque", broadcasting: bool = False,
                 split_checked: bool = True, batching: str = "keeps_axis") -> Entry:
    """An elementwise primitive: batched keeping its operands' batch axis; its result
    inside a shard_map's body split as its operands of its shape (``split_checked``; not
    yet held to JAX for the few declared without)."""
    return declare(Entry(name, Kind.ELEMENTWISE, batching=batching, jvp=jvp,
                         transpose=transpose, residuals=residuals, broadcasting=broadcasting,
                         in_shard_map="elementwise" if split_checked else None,
                         **_TYPED if broadcasting else {}))


# Unary elementwise primitives. NONLINEAR's residuals: ``operand`` and ``result`` are the
# primal's own values; any other is computed from them in the primal body, typed as the
# result (seen on jax.linearize of each, jax 0.10.2).
_elementwise("neg", jvp="linear", transpose="same")
_elementwise("sin", jvp="nonlinear", residuals=("cos",))
_elementwise("cos", jvp="nonlinear", residuals=("sin",))
_elementwise("tan")
_elementwise("exp", jvp="nonlinear", residuals=("result",))
_elementwise("log", jvp="nonlinear", residuals=("operand",))
_elementwise("tanh", jvp="nonlinear", residuals=("result", "one_minus_result"))
_elementwise("abs")
_elementwise("sign")
_elementwise("sqrt", jvp="nonlinear", residuals=("sqrt_slope",))
_elementwise("rsqrt")
_elementwise("logistic", jvp="nonlinear", residuals=("logistic_slope",))
_elementwise("floor", split_checked=False)
_elementwise("ceil", split_checked=False)
_elementwise("round", split_checked=False)
_elementwise("copy", jvp="linear")
_elementwise("copy_p", split_checked=False)
_elementwise("integer_pow", jvp="nonlinear", residuals=("power_slope",))
_elementwise("square")
_elementwise("convert_element_type", jvp="linear")
_elementwise("reduce_precision", split_checked=False)
# jax.ad_checkpoint.checkpoint_name: the identity, its operand named for a remat's policy
# (AD-21); its tangent is its operand's, unnamed (JAX's name_jvp).
_elementwise("name", jvp="forwarded")
# Binary elementwise primitives, batched as broadcasting n-ary operations.
_elementwise("add", jvp="sum", transpose="sum", broadcasting=True)
_elementwise("sub", jvp="sum", transpose="sub", broadcasting=True)
_elementwise("mul", jvp="bilinear", transpose="same", broadcasting=True)
_elementwise("div", jvp="quotient", broadcasting=True)
_elementwise("max", broadcasting=True)
_elementwise("min", broadcasting=True)
_elementwise("pow", broadcasting=True)
# The sum of cotangents AD makes (JAX's add_any): not batched by the spec.
declare(Entry("add_any", Kind.ELEMENTWISE, batching="add_any", jvp="add_any",
              transpose="sum"))


def _collective(name: str, params: tuple[str, ...], *, batching: str = "keeps_axis",
                jvp: str = "linear", transpose: str = "collective",
                drops_varying: bool = False) -> Entry:
    """A collective of a shard_map's body: the parameters it must hold, the SMAP rules of
    its axes, its operand's variance and its result's type (SMAP-13, SMAP-20 to SMAP-25)."""
    return declare(Entry(name, Kind.COLLECTIVE, batching=batching, jvp=jvp,
                         transpose=transpose, in_shard_map="collective", params=params,
                         drops_varying=drops_varying,
                         checks=("SMAP-13", "SMAP-20", "SMAP-21", "SMAP-22", "SMAP-23",
                                 "SMAP-24", "SMAP-25", "SMAP-26", "AD-12")))


_collective("psum", ("axes",), drops_varying=True)
_collective("psum_invariant", ("axes",), drops_varying=True)
_collective("pmax", ("axes",), jvp="no_derivative", transpose="opaque", drops_varying=True)
_collective("pmin", ("axes",), jvp="no_derivative", transpose="opaque", drops_varying=True)
_collective("pvary", ("axes",))
_collective("axis_index", ("axis_name",), batching=Absent(
    "its result depends on no operand: vmap never batches it"), jvp="opaque",
    transpose="opaque")
_collective("all_gather", ("axis_name", "all_gather_dimension"), batching="gathered")
_collective("reduce_scatter", ("axis_name", "scatter_dimension"), batching="scattered")
_collective("all_to_all", ("axis_name", "split_axis", "concat_axis"), batching="all_to_all")
_collective("ppermute", ("axis_name", "perm"))
# Collectives the spec batches but does not check inside a shard_map's body yet.
declare(Entry("pcast", Kind.COLLECTIVE, batching="keeps_axis", jvp="opaque",
              transpose="opaque"))
declare(Entry("all_gather_invariant", Kind.COLLECTIVE, batching="gathered", jvp="opaque",
              transpose="opaque", drops_varying=True, in_shard_map="gathered_to",
              checks=("SMAP-13", "SMAP-26")))
# all_gather to reduced values: its axes and operand checked (SMAP-13, SMAP-27), its
# result (typed reduced, which a described value does not hold) not.
declare(Entry("all_gather_reduced", Kind.COLLECTIVE, batching=Absent(
    "a value typed reduced is not described"), jvp="opaque", transpose="opaque",
    drops_varying=True, in_shard_map="gathered_to", checks=("SMAP-13", "SMAP-26", "SMAP-27")))
# jax's psum_scatter by its own name (its equation is ``reduce_scatter``): linear.
declare(Entry("psum_scatter", Kind.COLLECTIVE, batching=Absent(
    "jax.make_jaxpr names it reduce_scatter: described by that name"), jvp="linear",
    transpose="opaque"))

# Reductions: batched with their reduced axes moved past the batch axis.
declare(Entry("reduce_sum", Kind.REDUCTION, batching="reduction", jvp="linear",
              transpose="swap"))
for _name in ("reduce_max", "reduce_min", "reduce_prod"):
    declare(Entry(_name, Kind.REDUCTION, batching="reduction", jvp="opaque",
                  transpose="opaque"))

# Structural primitives. vmap stages transpose and broadcast_in_dim itself, after the
# call, to move a result's batch axis (``moves``).
declare(Entry("transpose", Kind.STRUCTURAL, batching="transpose", jvp="linear",
              transpose="opaque"))
declare(Entry("broadcast_in_dim", Kind.STRUCTURAL, batching="broadcast_in_dim", jvp="linear",
              transpose="swap"))
# (a reshape's result type over Explicit axes, PROG-12, where traced: structural_types.py)
for _name in ("reshape", "squeeze"):
    declare(Entry(_name, Kind.STRUCTURAL, batching=_name, jvp="linear", transpose="opaque",
                  **(dict(tracing="reshaped", checks=("PROG-12",)) if _name == "reshape"
                     else {})))
declare(Entry("expand_dims", Kind.STRUCTURAL, batching=Absent(
    "jax 0.10.2 binds no expand_dims (jnp.expand_dims is a broadcast_in_dim): no batching "
    "of it to hold to JAX"), jvp="linear", transpose="opaque"))

# (its result type over Explicit axes, PROG-7, where traced and where transposed:
# contraction.py)
declare(Entry("dot_general", Kind.CONTRACTION, batching="dot_general", jvp="bilinear",
              transpose="dot_general", tracing="dot_general", checks=("PROG-7",)))
declare(Entry("transposed_dot_general", Kind.OPAQUE, batching=Absent(
    "a gradient's transposed product: vmap of a gradient batches the primal's"),
    jvp="opaque", transpose="opaque", tracing="transposed_dot_general", checks=("PROG-7",)))

# The primitives of a real step (issue 32), batched by batching_primitives.py's rules.
# (a result resized over a split dimension, PROG-9, and a cumulative reduction along one,
# PROG-10, are typed where traced: structural_types.py)
_RESIZED = dict(tracing="resized", checks=("PROG-9",))
declare(Entry("slice", Kind.STRUCTURAL, batching="slice", jvp="linear", transpose="opaque",
              **_RESIZED))
declare(Entry("rev", Kind.STRUCTURAL, batching="rev", jvp="linear", transpose="opaque"))
declare(Entry("pad", Kind.STRUCTURAL, batching="pad", jvp="add_any", transpose="opaque",
              **_RESIZED))
declare(Entry("concatenate", Kind.STRUCTURAL, batching="concatenate", jvp="add_any",
              transpose="opaque"))
for _name in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
    declare(Entry(_name, Kind.REDUCTION, batching="axis_param",
                  jvp="linear" if _name == "cumsum" else "opaque", transpose="opaque",
                  tracing="scanned", checks=("PROG-10",)))
for _name in ("argmax", "argmin", "reduce_and", "reduce_or", "reduce_xor"):
    declare(Entry(_name, Kind.REDUCTION, batching="reduction", jvp="zero",
                  transpose="opaque"))
# (its operands' types over Explicit axes, PROG-14, where traced: sorted_types.py)
declare(Entry("sort", Kind.STRUCTURAL, batching="sorted", jvp="opaque", transpose="opaque",
              tracing="sorts", checks=("PROG-14",)))
declare(Entry("select_n", Kind.ELEMENTWISE, batching="select_n", jvp="opaque",
              transpose="opaque", **_TYPED))
declare(Entry("iota", Kind.STRUCTURAL, batching=Absent(
    "it has no operand: vmap never batches it"), jvp="zero", transpose="opaque"))
for _name in ("erfc", "exp2", "log1p", "expm1", "not", "is_finite", "erf_inv", "cbrt", "sinh",
              "cosh", "asinh", "acosh", "atanh", "asin", "acos", "atan", "imag", "real",
              "conj", "population_count", "clz", "stop_gradient"):
    _elementwise(_name, split_checked=False)
for _name in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"):
    declare(Entry(_name, Kind.ELEMENTWISE, batching="keeps_axis", jvp="zero",
                  transpose="opaque", broadcasting=True, **_TYPED))
# Typed PRNG keys (``jax.random.key``: a key<fry> value): a result holds its operand's
# dimensions first, then its own (random_split's, random_bits', the key data's trailing
# one for random_unwrap), so the batch axis stays; random_wrap moves it first. A key has a
# float0 tangent, random bits none.
for _name in ("random_seed", "random_bits", "random_split", "random_unwrap", "random_clone",
              "bitcast_convert_type"):
    declare(Entry(_name, Kind.ELEMENTWISE, batching="keeps_axis", jvp="zero",
                  transpose="opaque"))
declare(Entry("random_fold_in", Kind.ELEMENTWISE, batching="keeps_axis", jvp="zero",
              transpose="opaque", broadcasting=True))
declare(Entry("random_wrap", Kind.STRUCTURAL, batching="moved_first", jvp="zero",
              transpose="opaque"))
for _name in ("atan2", "rem", "nextafter", "shift_left", "shift_right_logical",
              "shift_right_arithmetic"):
    _elementwise(_name, broadcasting=True, split_checked=False)

# Indexing (batching_indexing.py): a dynamic slice or update batched is the gather or the
# scatter JAX makes of it; top_k's axis moves past the batch axis; clamp as JAX's rule.
# (a gather's result type over Explicit axes, PROG-13, where traced: structural_types.py)
_INDEXING = {"dynamic_slice": _RESIZED, "gather": dict(tracing="gathered", checks=("PROG-13",))}
for _name in ("gather", "dynamic_slice", "dynamic_update_slice"):
    declare(Entry(_name, Kind.STRUCTURAL, batching=_name, jvp="opaque", transpose="opaque",
                  **_INDEXING.get(_name, {})))
for _name in ("scatter", "scatter-add", "scatter-sub", "scatter-mul", "scatter-min",
              "scatter-max"):
    declare(Entry(_name, Kind.STRUCTURAL, batching="scatter", jvp="opaque",
                  transpose="opaque"))
for _name in ("top_k", "split"):
    declare(Entry(_name, Kind.STRUCTURAL, batching="axis_param", jvp="opaque",
                  transpose="opaque", **(_RESIZED if _name == "split" else {})))
declare(Entry("clamp", Kind.ELEMENTWISE, batching="clamp", jvp="opaque", transpose="opaque"))
_elementwise("erf", split_checked=False)

# Special functions (jax.scipy.special): elementwise, batched keeping the operands' batch
# axis as JAX's standard unary and binary batching rules do; their sharding rules are not
# held to the compiler yet (below).
for _name in ("lgamma", "digamma", "bessel_i0e", "bessel_i1e"):
    _elementwise(_name, split_checked=False)
for _name in ("igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma",
              "zeta"):
    _elementwise(_name, broadcasting=True, split_checked=False)

# fft batched with its operand's batch axis moved first, optimization_barrier with each
# operand's kept (JAX's rules); their sharding rules are not held to the compiler yet.
declare(Entry("fft", Kind.OPAQUE, batching="moved_first", jvp="opaque", transpose="opaque"))
declare(Entry("optimization_barrier", Kind.OPAQUE, batching="per_operand", jvp="opaque",
              transpose="opaque"))

# Linear algebra (jax.lax.linalg) batched as JAX's expand_dims_batcher: every operand's
# batch first; their sharding rules are not held to the compiler yet.
_LINALG = ("cholesky", "eig", "eigh", "hessenberg", "householder_product", "ormqr", "lu",
          "lu_pivots_to_permutation", "geqrf", "geqp3", "qr", "schur", "svd",
          "symmetric_product", "tridiagonal")
for _name in _LINALG:
    declare(Entry(_name, Kind.OPAQUE, batching="leading_batch", jvp="opaque",
                  transpose="opaque"))

# Windowed reductions (avg_pool, max_pool, lax.reduce_window with add, max or min): a
# window of 1 over the batch axis; their sharding rules are not held to the compiler yet.
for _name in ("reduce_window_sum", "reduce_window_max", "reduce_window_min"):
    declare(Entry(_name, Kind.REDUCTION, batching="windowed", jvp="opaque",
                  transpose="opaque"))

# Batched as JAX's rules batch them (issue 32): approx_top_k's reduction dimension and a
# generic reduce_window's window past the batch axis (BAT-13: its initial values
# unbatched), in batching_primitives.py; a convolution and the two solves with the batch
# folded into one of their dimensions, in batching_folded.py. Opaque otherwise (their
# types where traced are the description's, unchecked; a verdict lists them as opaque).
_NOT_HELD = NotPropagated("its sharding rule is not held to the compiler yet")
declare(Entry("approx_top_k", Kind.OPAQUE, batching="approx_top_k", jvp="opaque",
              transpose="opaque", sharding=_NOT_HELD))
declare(Entry("reduce_window", Kind.OPAQUE, batching="reduce_window", jvp="opaque",
              transpose="opaque", sharding=_NOT_HELD, checks=("BAT-13",)))
for _name in ("conv_general_dilated", "triangular_solve", "tridiagonal_solve"):
    declare(Entry(_name, Kind.OPAQUE, batching=_name, jvp="opaque", transpose="opaque",
                  sharding=_NOT_HELD))

# A call back into Python: batched by its vmap_method (BAT-11, batching_primitives.py);
# no derivative (AD-20, read from the name); its sharding rule as for no entry.
declare(Entry("pure_callback", Kind.OPAQUE, batching="callback", jvp="opaque",
              transpose="opaque", sharding=NotPropagated(
                  "a callback's result is replicated by its lowering: its sharding rule is "
                  "not held to the compiler yet"), checks=("BAT-11",)))
declare(Entry("io_callback", Kind.OPAQUE, batching="io_callback", jvp="opaque",
              transpose="opaque", sharding=NotPropagated(
                  "a callback's result is replicated by its lowering: its sharding rule is "
                  "not held to the compiler yet"), checks=("BAT-12",)))

# Mutable refs (jax.Ref): the first operand is the ref, read or written whole.
declare(Entry("get", Kind.EFFECT, batching="ref_access", jvp="opaque", transpose="opaque",
              effect="reads ref", checks=("REF-4",)))
for _name in ("swap", "addupdate"):
    declare(Entry(_name, Kind.EFFECT, batching="ref_access", jvp="opaque",
                  transpose="opaque", effect="writes ref",
                  checks=("REF-4", "REF-5", "REF-6", "REF-8")))
del _name

# Sharding rules (issue 33), by family, in a module of their own that fills the slots.
from .sharding_factors import SHARDING_ONLY, SHARDING_RULES  # noqa: E402  (reads Factors)
# Primitives the table holds for their sharding rule alone: opaque to every other rewrite.
for _name in sorted(set(SHARDING_ONLY) - set(TABLE)):   # a primitive another family declared
    declare(Entry(_name, Kind.OPAQUE, batching=Absent(
        f"the table holds only the sharding rule of {_name}: its batching is not known"),
        jvp="opaque", transpose="opaque"))
for _name, _rule in SHARDING_RULES.items():
    TABLE[_name] = dataclasses.replace(TABLE[_name], sharding=_rule)
# Entries other work declared without a sharding rule (the control-flow kinds; primitives a
# real step holds that the batching work added), each named: none is held to the compiler yet.
_UNPROPAGATED = {
    "a control-flow body is not propagated yet (the partitioner propagates through it)":
        ("scan", "while", "cond", "remat2", "custom_jvp_call", "custom_vjp_call",
         "custom_lin"),
    "a key's data carries a trailing dimension its factors would have to name":
        ("random_seed", "random_bits", "random_split", "random_unwrap", "random_clone",
         "random_fold_in", "random_wrap"),
    "its sharding rule is not held to the compiler yet":
        ("rev", "reduce_and", "reduce_or", "reduce_xor", "erfc", "erf_inv", "cbrt", "asinh",
         "acosh", "atanh", "imag", "real", "conj", "population_count", "clz",
         "bitcast_convert_type", "shift_left", "shift_right_logical",
         "shift_right_arithmetic", "scatter-sub", "top_k", "split", "erf", "lgamma",
         "digamma", "bessel_i0e", "bessel_i1e", "igamma", "igammac", "igamma_grad_a",
         "random_gamma_grad", "polygamma", "zeta", "fft", "optimization_barrier", *_LINALG,
         "reduce_window_sum", "reduce_window_max", "reduce_window_min"),
}
for _why, _names in _UNPROPAGATED.items():
    for _name in _names:
        if _name in TABLE and TABLE[_name].sharding is NOT_PROPAGATED_YET:
            TABLE[_name] = dataclasses.replace(TABLE[_name], sharding=NotPropagated(_why))
del _name, _rule, _why, _names

"""Typed values of a program description and its input checking (PROG-0).

A :class:`Value` is a typed value — shape, dtype, weak type, the abstract mesh its type
carries, the manual axes it varies over inside a shard_map, its split over Explicit axes —
and, for a program's arguments and constants, the sharding it lives on and whether it is
committed; a :class:`Const` is a value a function closed over. PROG-0 refuses a description
that is not one (:func:`check_program`); the helpers here put each of its checks into words
for :mod:`~shardlaw.spec.program.description`'s equations and programs too.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from ..core.rules import Failure, reject, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import (
    AbstractMesh, AxisType, Mesh, PartitionSpec, UNCONSTRAINED, check_dims, compared_fields,
    state_without_hash,
)
from ..jit.call import (
    CANONICAL, DTYPES, KEY_DTYPES, MAX_NESTING, SCALAR_DTYPES, Arg, placed_dtype,
)
from .type_splits import canonical_type_spec, type_spec

P = PartitionSpec  # the name the examples use

__all__ = ["Value", "Const", "BadProgram", "check_program", "require_described",
           "refuse_described", "described_bool", "described_tuple", "described_axis_names",
           "described_sharding", "SHARDINGS", "MAX_DEPTH"]

SHARDINGS = (NamedSharding, SingleDeviceSharding, GSPMDSharding)

# Bodies nest in bodies at most this deep (a jit in a jit in ...): the limit of a call's
# pytrees, for the same reason (every reader walks them).
MAX_DEPTH = MAX_NESTING



# --------------------------------------------------------------------------- PROG-0

@dataclasses.dataclass(frozen=True)
class BadProgram(Failure, rule="PROG-0", error=TypeError):
    template = "{what} must be {expected}, got {value!r}"
    what: str
    expected: str
    value: Any


@rule("PROG-0", mirrors="(input checking of a program description; JAX has no such value)")
def check_program(condition: bool, what: str, expected: str, value: Any) -> None:
    """A program description holds only what it names: typed values, constants, equations of the described kinds whose operands are defined before use, and results, nested at most 200 bodies deep.

    >>> Program(inputs=(Value.numpy((4,)),), outputs=(1,))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionTypeError: [PROG-0]: outputs[0] must be the number of a value defined in the body (0 .. 0), got 1
    >>> Program(inputs=(Value.numpy((4,)),), outputs=(0,)).outputs
    (0,)
    """
    if not condition:
        raise reject(BadProgram(what, expected, value))


def require_described(condition: bool, what: str, expected: str, value: Any) -> None:
    """PROG-0 (:func:`check_program`), the rule called where the description breaks it: a
    description is checked item by item, thousands of items in a rewrite of a step."""
    if not condition:
        check_program(condition, what, expected, value)


def refuse_described(what: str, expected: str, value: Any) -> None:
    """PROG-0's refusal, where a check has found the description broken (a loop over many
    items tests each first, and puts the item it refuses into words only then)."""
    check_program(False, what, expected, value)


def described_bool(value: Any, what: str) -> bool:
    require_described(type(value) is bool, what, "a bool", value)
    return value


def described_tuple(value: Any, what: str, expected: str) -> tuple:
    if type(value) not in (tuple, list):
        refuse_described(what, f"a tuple of {expected}", value)
    return tuple(value)


def described_axis_names(value: Any, what: str) -> frozenset[str]:
    require_described(type(value) in (frozenset, set, tuple, list)
             and all(isinstance(v, str) for v in value), what,
             "a set of mesh axis names", value)
    return frozenset(value)


def described_sharding(value: Any, what: str, *, unspecified: bool = False) -> Any:
    if not (isinstance(value, SHARDINGS) or (unspecified and value is UNSPECIFIED)):
        refuse_described(what, "a NamedSharding, SingleDeviceSharding or GSPMDSharding"
                + (" or UNSPECIFIED" if unspecified else ""), value)
    return value


# --------------------------------------------------------------------------- values

# What a value's checks expect, put into words once (every value built is checked).
_ONE_OF_DTYPES = f"one of {DTYPES + KEY_DTYPES}"
# The dtypes ARG-2 may change in a value's type: the 64-bit ones, and a Python bool's weak type.
_PYTHON_TYPE = {dtype: python for python, dtype in SCALAR_DTYPES.items()}
_RETYPED = frozenset(d for d in DTYPES if CANONICAL.get(d, d) != d) | {"bool"}

@dataclasses.dataclass(frozen=True)
class Value:
    """A typed value: shape, dtype, weak type, the abstract mesh its type carries (what
    ``jax.typeof`` shows; None: none) and, inside a ``shard_map``, the manual axes it varies
    over and those it is reduced over (an ``all_gather`` to reduced values gives them); and — for a program's arguments and constants only — the sharding it lives on
    (None: a numpy array or a Python scalar) and whether it is committed.

    A value on a NamedSharding over a concrete mesh has that mesh's abstract mesh in its type.

    >>> mesh = Mesh.iota((2, 4), ("x", "y"))
    >>> Value.placed((8, 8), NamedSharding(mesh, P("x"))).mesh
    AbstractMesh({'x': 2, 'y': 4})
    >>> Value.scalar("float")
    Value.scalar('float32')
    """

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    weak_type: bool = False
    mesh: AbstractMesh | None = None
    varying: frozenset[str] = frozenset()
    sharding: Any = None
    committed: bool = False
    abstract: bool = False
    spec: PartitionSpec | None = None
    reduced: frozenset[str] = frozenset()   # inside a shard_map: the manual axes reduced over

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_dims(self.shape, what="a value's shape"))
        if self.sharding is None and _plain_type(self):
            object.__setattr__(self, "spec", None)   # (a split of no axis is none)
            return
        described_bool(self.abstract, "a value's abstract flag")
        require_described(not (self.abstract and (self.committed or self.weak_type)),
                 "an abstract value (a jax.ShapeDtypeStruct)",
                 "neither committed nor weakly typed", self)
        require_described(type(self.dtype) is str and self.dtype in DTYPES + KEY_DTYPES,
                          "a value's dtype",
                 _ONE_OF_DTYPES, self.dtype)
        described_bool(self.weak_type, "a value's weak_type")
        described_bool(self.committed, "a value's committed flag")
        require_described(self.mesh is None or type(self.mesh) is AbstractMesh,
                 "the mesh of a value's type", "None or an AbstractMesh", self.mesh)
        object.__setattr__(self, "varying", described_axis_names(self.varying, "a value's varying axes"))
        object.__setattr__(self, "reduced", described_axis_names(
            self.reduced, "a value's reduced manual axes"))
        require_described(not self.reduced or (self.mesh is not None and self.reduced
                                               <= set(self.mesh.axis_names)),
                          "a value's reduced manual axes", "axes of the mesh of its type",
                          self.reduced)
        if self.sharding is None:
            _set_type_spec(self, self.spec)
        require_described(not self.varying or (self.mesh is not None and self.varying
                                      <= set(self.mesh.axis_names)),
                 "a value's varying axes", "axes of the mesh of its type", self.varying)
        if self.sharding is None:
            require_described(not self.committed, "a committed value's sharding", "a sharding",
                     None)
            # (a traced value of any rank may be weakly typed: jnp.broadcast_to(1.0, (8,)))
            require_described(not self.weak_type or self.dtype != "bool" or self.shape == (),
                              "a weakly typed bool without a sharding",
                              "a Python bool: shape ()", (self.shape, self.dtype))
            return
        described_sharding(self.sharding, "a value's sharding")
        # An array that exists fits its sharding (CALL-0, as for a jit argument).
        self.as_arg()
        named = self.sharding if isinstance(self.sharding, NamedSharding) else None
        if named is not None and self.mesh is None:
            object.__setattr__(self, "mesh", named.mesh.abstract if named.is_concrete
                               else named.mesh)
        _set_type_spec(self, type_spec(named) if self.spec is None else self.spec)

    def __hash__(self) -> int:
        # A value is immutable and hashed often (a rewrite finds an equation's results once
        # per form and operand types): hashed once, by its compared fields.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(_compared(self))
            object.__setattr__(self, "_hash", cached)
        return cached

    __getstate__ = state_without_hash   # the hash is worked out again where unpickled

    # Constructors named for what a user holds.
    @classmethod
    def placed(cls, shape: Any, sharding: Any, dtype: str = "float32", *,
               committed: bool = True) -> "Value":
        """A ``jax.Array`` on ``sharding``: committed when placed explicitly
        (``jax.device_put`` with a sharding), uncommitted when JAX placed it on its own
        (``jnp.ones``: ``committed=False``)."""
        return cls(shape, dtype, sharding=sharding, committed=committed)

    @classmethod
    def numpy(cls, shape: Any, dtype: str = "float32") -> "Value":
        return cls(shape, dtype)

    @classmethod
    def scalar(cls, python_type: str = "float") -> "Value":
        """A Python ``bool``/``int``/``float``/``complex``: weakly typed, shape ()."""
        require_described(python_type in SCALAR_DTYPES, "a Python scalar's type",
                 f"one of {tuple(SCALAR_DTYPES)}", python_type)
        return cls((), SCALAR_DTYPES[python_type], True)

    @classmethod
    def shape_dtype(cls, shape: Any, dtype: str = "float32", sharding: Any = None) -> "Value":
        """A ``jax.ShapeDtypeStruct``, with or without a sharding (over a concrete or an
        abstract mesh): what ``.trace``/``.lower`` take; jit treats its sharding as committed.

        >>> Value.shape_dtype((8, 8), sharding=NamedSharding(AbstractMesh((2, 4), ("x", "y")), P("x"))).mesh
        AbstractMesh({'x': 2, 'y': 4})
        """
        return cls(shape, dtype, sharding=sharding, abstract=True)

    @classmethod
    def typed(cls, shape: Any, dtype: str = "float32", mesh: AbstractMesh | None = None, *,
              weak_type: bool = False, varying: Any = frozenset()) -> "Value":
        """A traced value: its type only (a body's input, an equation's result)."""
        return cls(shape, dtype, weak_type, mesh, varying)

    @property
    def type(self) -> "Value":
        """The value's type alone, as a traced value has it (no sharding, not committed):
        an argument's dtype and weak type as jit traces it (ARG-2: 64-bit types narrowed, a
        Python bool not weak)."""
        dtype, weak = self.dtype, self.weak_type
        if dtype in _RETYPED:
            dtype, weak = placed_dtype(self._python_type or "array", dtype, weak)
        if self.sharding is None and not self.abstract and (dtype, weak) == (
                self.dtype, self.weak_type):
            return self
        return Value(self.shape, dtype, weak, self.mesh, self.varying, spec=self.spec,
                     reduced=self.reduced)

    @property
    def _python_type(self) -> str | None:
        """The Python scalar type this value is an argument of (None: not a Python scalar)."""
        if self.sharding is not None or self.abstract or not self.weak_type or self.shape:
            return None
        return _PYTHON_TYPE.get(self.dtype)

    def as_arg(self) -> Arg:
        """The jit argument this value is (:class:`~shardlaw.spec.jit.call.Arg`)."""
        found = self.__dict__.get("_arg")   # (built, and so checked, once: as it is made)
        if found is None:
            found = self._new_arg()
            object.__setattr__(self, "_arg", found)
        return found

    def _new_arg(self) -> Arg:
        if self.abstract:
            return Arg.abstract(self.shape, self.dtype, self.sharding)
        if self.sharding is not None:
            return Arg("committed" if self.committed else "uncommitted", self.shape,
                       self.dtype, self.sharding)
        python = self._python_type
        if python is not None:
            return Arg.scalar(python)
        return Arg.numpy(self.shape, self.dtype)

    def __repr__(self) -> str:
        if self._python_type is not None:
            return f"Value.scalar({self.dtype!r})"
        shape = "x".join(map(str, self.shape)) or "scalar"
        text = f"{self.dtype}[{shape}]" + ("~" if self.weak_type else "")
        if self.mesh is not None:
            text += f" over {self.mesh!r}"
        if self.varying:
            text += f" varying {sorted(self.varying)}"
        if self.reduced:
            text += f" reduced {sorted(self.reduced)}"
        if self.spec is not None:
            text += f" split {self.spec!r}"
        if self.abstract:
            text += " abstract" + ("" if self.sharding is None else f" on {self.sharding!r}")
        elif self.sharding is not None:
            text += (" committed" if self.committed else " uncommitted") + \
                f" on {self.sharding!r}"
        return f"<{text}>"


# A value's compared fields, read at once (its hash is of them).
_compared = operator.attrgetter(*compared_fields(Value))


def _plain_type(value: Value) -> bool:
    """Whether ``value``, without a sharding, passes every check of a value's fields at once
    (the flags bools, a known dtype, its mesh, varying axes of it, a split of no axis,
    uncommitted, not weakly typed); where one fails, the checks are made one by one, in
    order, and the first that fails is the refusal."""
    mesh, varying, spec = value.mesh, value.varying, value.spec
    return ((spec is None or (mesh is not None and type(spec) is PartitionSpec
                              and not spec.unreduced and not spec.reduced
                              and len(spec) <= len(value.shape)
                              and all(e is None for e in spec.partitions)))
            and value.abstract is False and value.committed is False
            and value.weak_type is False and type(value.dtype) is str
            and value.dtype in _DTYPE_NAMES and (mesh is None or type(mesh) is AbstractMesh)
            and type(varying) is frozenset and type(value.reduced) is frozenset
            and not value.reduced
            and (not varying or (mesh is not None and all(type(v) is str for v in varying)
                                 and varying.issubset(mesh.axis_names))))


_DTYPE_NAMES = frozenset(DTYPES + KEY_DTYPES)


@dataclasses.dataclass(frozen=True)
class Const:
    """A value the function closed over: a constant (a ``jax.Array`` with its sharding, or a
    numpy array) or a mutable ref (``ref=True``)."""

    value: Value
    ref: bool = False

    def __post_init__(self) -> None:
        require_described(isinstance(self.value, Value), "a constant's value", "a Value",
                 self.value)
        described_bool(self.ref, "a constant's ref flag")
        # jax.new_ref places its value and commits it, whatever it was given (REF-1)
        require_described(not self.ref or self.value.committed, "a closed-over ref's value",
                 "a committed array (a mutable ref is always committed)", self.value)


# --------------------------------------------------------------------------- types split over Explicit axes

def _set_type_spec(value: Value, spec: Any) -> None:
    """A value's split, checked (PROG-0): a PartitionSpec over Explicit axes of the mesh of
    its type, no longer than its rank; kept canonical."""
    if spec is None:
        return
    what = "the split of a value's type"
    check_program(isinstance(spec, PartitionSpec), what, "None or a PartitionSpec", spec)
    mesh = value.mesh
    check_program(mesh is not None, what, "a split over the mesh of its type (a value "
                  "typed over no mesh is not split)", spec)
    sizes = {name: size for name, size, kind in zip(mesh.axis_names, mesh.axis_sizes,
                                                     mesh.axis_types)
             if kind is AxisType.Explicit}
    named = [*spec.axes(), *spec.unreduced, *spec.reduced]
    check_program(all(name in sizes for name in named), what,
                  f"Explicit axes of the mesh of its type {sorted(sizes)}", spec)
    # a split that does not divide the shape is a refusal of the equation that makes it
    # (ARG-4 for a device_put), not of its description
    check_program(len(spec) <= len(value.shape) and UNCONSTRAINED not in tuple(spec), what,
                  f"at most {len(value.shape)} entries, none UNCONSTRAINED", spec)
    object.__setattr__(value, "spec", canonical_type_spec(spec))



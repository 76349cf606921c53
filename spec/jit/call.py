"""A jit call described abstractly, and the verdict on it.

A :class:`Call` says everything ``jax.jit(f, ...)(*args, **kwargs)`` decides shardings
from, and nothing it does not: the jit options, the context mesh, the arguments as pytrees
of :class:`Arg` (what kind of value, its shape and dtype, its sharding and whether it is
committed), the results' shapes, which inputs the function uses, and — for results whose
sharding jit leaves to the compiler — the HLO sharding the compiler chose. The spec does
not model XLA's sharding propagation; it models what jit does with its outcome.

:func:`shardlaw.spec.jit_call` turns a Call into a :class:`Verdict`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterator, Sequence

from ..core.hlo import HloSharding
from .assignment import Source
from .layouts import Layout, split_format
from ..core.pytree import Node, leaves_with_paths, map_leaves, show_path, structure
from ..placement.blocks import check_rank, num_devices, shard_shape
from ..core.rules import Failure, Rejection, reject, rule
from ..core.shardings import UNSPECIFIED, GSPMDSharding, NamedSharding, SingleDeviceSharding
from ..core.values import AbstractMesh, DeviceList, Mesh, PartitionSpec, check_dims

__all__ = ["Arg", "Static", "Out", "JitOptions", "Call", "Verdict", "ARG_KINDS", "check_call",
           "NormalCall", "flat_arguments", "static_positions", "DeviceIds", "placed_dtype"]

ARG_KINDS = ("committed", "uncommitted", "numpy", "scalar", "abstract")

# The dtypes a description may name (numpy spellings).
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint32", "bfloat16",
          "float16", "float32", "float64", "complex64")

# JAX's typed PRNG key dtypes (``jax.random.key``): a key array of shape S is typed and
# placed by S; its key data (``jax.random.key_data``) is uint32 of shape S + (2,) (threefry;
# (4,) for rbg), the trailing dimension never split.
KEY_DTYPES = ("key<fry>", "key<rbg>", "key<unsafe_rbg>")
KEY_DATA_WIDTH = {"key<fry>": 2, "key<rbg>": 4, "key<unsafe_rbg>": 4}

# The dtype jit gives a Python scalar of each type (with x64 off, JAX's default).
SCALAR_DTYPES = {"bool": "bool", "int": "int32", "float": "float32", "complex": "complex64"}

# numpy dtype names JAX takes, and what each becomes with 64-bit types off.
CANONICAL = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int32",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint32",
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float32",
    "complex64": "complex64", "complex128": "complex64",
}


@rule("ARG-2", mirrors="jax._src.dtypes.canonicalize_dtype / jax._src.abstract_arrays "
                       "(Python scalar types are weak)")
def placed_dtype(value_kind: str, dtype: str | None, weak_type: bool = False
                 ) -> tuple[str, bool]:
    """A Python bool becomes bool and an int, float or complex becomes int32, float32 or complex64, weakly typed; any other value keeps its dtype and its own weak type (a numpy value has none), but 64-bit types become 32-bit.

    jit types its arguments so when it traces them (CACHE-4), ``device_put`` places them so
    (ARG-4), and a whole program's inputs are typed so in its body
    (:class:`~shardlaw.spec.program.description.Value`).

    >>> placed_dtype("int", None), placed_dtype("bool", None)
    (('int32', True), ('bool', False))
    >>> placed_dtype("numpy_scalar", "float64"), placed_dtype("numpy_array", "uint64")
    (('float32', False), ('uint32', False))
    >>> placed_dtype("array", "float32", weak_type=True)
    ('float32', True)
    """
    # A description names the value's kind and dtype by strings (CALL-0)
    if type(value_kind) is not str:
        check_call(False, "a value's kind", "a string such as 'numpy_array' or 'int'",
                   value_kind)
    if dtype is not None and type(dtype) is not str:
        check_call(False, "a value's dtype", "a dtype name or None", dtype)
    if value_kind in SCALAR_DTYPES:
        return SCALAR_DTYPES[value_kind], value_kind != "bool"
    return CANONICAL.get(dtype, dtype), weak_type  # type: ignore[arg-type]

SHARDING_TYPES = (NamedSharding, SingleDeviceSharding, GSPMDSharding)


@dataclasses.dataclass(frozen=True)
class BadDescription(Failure, rule="CALL-0"):
    template = "{what} must be {expected}, got {value!r}"
    what: str
    expected: str
    value: Any


@rule("CALL-0", mirrors="(input checking of a call description; JAX has no such value)")
def check_call(condition: bool, what: str, expected: str, value: Any) -> None:
    """A call description holds only values of the kinds it names: arguments, static values, result shapes, shardings and options of the right types.

    >>> Arg.committed((4,), None)
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [CALL-0]: a committed argument's sharding must be a concrete NamedSharding, SingleDeviceSharding or GSPMDSharding, got None
    """
    if not condition:
        raise reject(BadDescription(what, expected, value))


def _concrete(sharding: Any) -> bool:
    return isinstance(sharding, SHARDING_TYPES) and sharding.is_concrete


@dataclasses.dataclass(frozen=True)
class Arg:
    """One array argument of a jit call (a leaf of the arguments' pytrees).

    ``kind`` is one of :data:`ARG_KINDS`:

    * ``committed`` — a ``jax.Array`` placed explicitly (``device_put`` with a sharding,
      or a jit result that came back committed); ``sharding`` is its sharding;
    * ``uncommitted`` — a ``jax.Array`` JAX placed on its own (``jnp.ones``); its
      ``sharding`` is where it lives, usually one device;
    * ``numpy`` — a ``numpy.ndarray``; ``scalar`` — a Python ``bool``/``int``/``float``;
    * ``abstract`` — a ``jax.ShapeDtypeStruct`` (for ``.trace``/``.lower``), with an
      optional sharding that jit treats as committed. Its sharding need not divide its
      shape (nothing is placed yet): jit refuses that itself (FIT-2, FIT-3).

    ``layout`` is the :class:`~shardlaw.spec.jit.layouts.Layout` a committed or uncommitted
    array's buffers are in (``x.format.layout``); None, and the default layout, are kept as
    None.
    """

    kind: str
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    sharding: Any = None
    layout: Any = None

    def __post_init__(self) -> None:
        check_call(self.kind in ARG_KINDS, "an argument's kind", f"one of {ARG_KINDS}", self.kind)
        object.__setattr__(self, "shape", check_dims(self.shape, what="an argument's shape"))
        check_call(self.dtype in DTYPES + KEY_DTYPES, "an argument's dtype",
                   f"one of {DTYPES + KEY_DTYPES}", self.dtype)
        if self.kind in ("committed", "uncommitted"):
            check_call(_concrete(self.sharding), f"a {self.kind} argument's sharding",
                       "a concrete NamedSharding, SingleDeviceSharding or GSPMDSharding",
                       self.sharding)
        elif self.kind == "abstract":
            check_call(self.sharding is None or isinstance(self.sharding, SHARDING_TYPES),
                       "an abstract argument's sharding", "None or a sharding", self.sharding)
        else:
            check_call(self.sharding is None, f"a {self.kind} argument's sharding",
                       "None (it has none)", self.sharding)
        if self.kind in ("committed", "uncommitted") or (self.kind == "abstract"
                                                         and self.sharding is not None):
            _check_placeable(self)
        if self.kind == "scalar":
            check_call(self.shape == (), "a Python scalar's shape", "()", self.shape)
        if self.layout is not None:
            check_call(self.kind in ("committed", "uncommitted"), f"a {self.kind} argument's "
                       "layout", "None (only jax.Array arguments are laid out)", self.layout)
            check_call(isinstance(self.layout, Layout) and self.layout.rank == len(self.shape),
                       f"the layout of an argument of shape {self.shape}",
                       f"None or a Layout of rank {len(self.shape)}", self.layout)
            if self.layout.is_default:
                object.__setattr__(self, "layout", None)

    # Constructors named for what a user holds.
    @classmethod
    def committed(cls, shape: Any, sharding: Any, dtype: str = "float32",
                  layout: Any = None) -> "Arg":
        return cls("committed", shape, dtype, sharding, layout)

    @classmethod
    def uncommitted(cls, shape: Any, sharding: Any = None, dtype: str = "float32",
                    layout: Any = None) -> "Arg":
        return cls("uncommitted", shape, dtype,
                   SingleDeviceSharding(0) if sharding is None else sharding, layout)

    @classmethod
    def numpy(cls, shape: Any, dtype: str = "float32") -> "Arg":
        return cls("numpy", shape, dtype)

    @classmethod
    def scalar(cls, python_type: str = "float") -> "Arg":
        check_call(python_type in SCALAR_DTYPES, "a Python scalar's type",
                   f"one of {tuple(SCALAR_DTYPES)}", python_type)
        return cls("scalar", (), SCALAR_DTYPES[python_type])

    @classmethod
    def abstract(cls, shape: Any, dtype: str = "float32", sharding: Any = None) -> "Arg":
        return cls("abstract", shape, dtype, sharding)

    @property
    def is_committed(self) -> bool:
        """Committed as jit sees it: a committed array, or an abstract value with a sharding."""
        return self.kind == "committed" or (self.kind == "abstract" and self.sharding is not None)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        where = "" if self.sharding is None else f" on {self.sharding!r}"
        laid = "" if self.layout is None else f" in {self.layout!r}"
        return f"<{self.kind} {self.dtype}[{shape}]{where}{laid}>"


MAX_NESTING = 200


def nesting(tree: Any, limit: int = MAX_NESTING) -> int:
    """How many containers deep ``tree`` nests (tuples, lists, dicts), read without recursion
    (it stops once past ``limit``)."""
    deepest, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if type(node) in (tuple, list, dict):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            stack.extend((child, depth) for child in
                         (node.values() if type(node) is dict else node))
    return deepest


def _check_placeable(arg: "Arg") -> None:
    """An array that exists fits its sharding. A ``jax.ShapeDtypeStruct`` places nothing
    yet: it only has a rank its sharding allows (its constructor refuses the rest); whether
    its sharding divides it is jit's to decide (FIT-2 at the call, FIT-3 at lowering)."""
    abstract = arg.kind == "abstract"
    try:
        num_devices(arg.sharding)  # a GSPMD tile assignment fills its device list
        check_rank(arg.sharding, arg.shape)
        if not abstract:
            shard_shape(arg.sharding, arg.shape)
    except Rejection as error:
        check_call(False, f"a {arg.kind} argument of shape {arg.shape}",
                   "of a rank its own sharding allows (jax.ShapeDtypeStruct refuses the rest)"
                   if abstract else
                   "placeable by its own sharding (an array that exists fits its sharding)",
                   f"{arg.sharding!r}: {error}")


@dataclasses.dataclass(frozen=True)
class Static:
    """A static argument's value (it is hashed, never placed)."""

    value: Any = None

    def __repr__(self) -> str:
        return f"Static({self.value!r})"


@dataclasses.dataclass(frozen=True)
class Out:
    """One result of the function: its shape and dtype.

    ``mesh`` is the abstract mesh the result's type carries (JAX's ``aval.sharding.mesh``:
    a result computed from a committed NamedSharding argument carries that argument's mesh),
    or None. ``source`` says how a harness that rebuilds the function computes it (``None``:
    from all used inputs; ``i``: from the flat input ``i``, shape-preserving); the spec
    ignores it. ``spec`` is its type's split over the Explicit axes of ``mesh`` (JAX's
    ``aval.sharding.spec``; ``P()``: not split; None: not described), which places a result
    left unspecified (PROG-5).
    """

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    source: int | None = None
    mesh: AbstractMesh | None = None
    spec: PartitionSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_dims(self.shape, what="a result's shape"))
        check_call(self.dtype in DTYPES + KEY_DTYPES, "a result's dtype",
                   f"one of {DTYPES + KEY_DTYPES}", self.dtype)
        check_call(self.source is None or (isinstance(self.source, int) and self.source >= 0),
                   "a result's source", "None or a flat input index", self.source)
        check_call(self.mesh is None or isinstance(self.mesh, AbstractMesh),
                   "a result's mesh", "None or an AbstractMesh", self.mesh)
        check_call(self.spec is None or (isinstance(self.spec, PartitionSpec)
                                         and self.mesh is not None
                                         and len(self.spec) <= len(self.shape)
                                         and set(self.spec.axes()) | self.spec.reduced
                                         | self.spec.unreduced <= set(self.mesh.axis_names)),
                   "a result's split", "None or a PartitionSpec over its mesh's axes, no "
                   "longer than its rank", self.spec)


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    check_call(isinstance(value, (tuple, list)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value), what,
        "an int or a sequence of ints", value)
    return tuple(value)


def _str_tuple(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    check_call(isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value),
               what, "a string or a sequence of strings", value)
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class JitOptions:
    """The arguments of ``jax.jit`` that decide shardings.

    ``in_shardings`` and ``out_shardings`` are pytrees whose leaves are shardings,
    PartitionSpecs, :class:`~shardlaw.spec.jit.layouts.Format` values or None, or
    :data:`UNSPECIFIED` when left out. ``device`` is a device
    id; ``backend`` a platform name (both deprecated in JAX 0.10.2).
    """

    in_shardings: Any = UNSPECIFIED
    out_shardings: Any = UNSPECIFIED
    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    keep_unused: bool = False
    device: int | None = None
    backend: str | None = None

    def __post_init__(self) -> None:
        for name in ("static_argnums", "donate_argnums"):
            object.__setattr__(self, name, _int_tuple(getattr(self, name), name))
        for name in ("static_argnames", "donate_argnames"):
            object.__setattr__(self, name, _str_tuple(getattr(self, name), name))
        check_call(isinstance(self.keep_unused, bool), "keep_unused", "a bool", self.keep_unused)
        check_call(self.device is None or (isinstance(self.device, int)
                                           and not isinstance(self.device, bool)
                                           and self.device >= 0),
                   "device", "None or a device id", self.device)
        check_call(self.backend is None or isinstance(self.backend, str), "backend",
                   "None or a platform name", self.backend)


@dataclasses.dataclass(frozen=True)
class Call:
    """A jit call: options, context, arguments, results and the compiler's choices.

    * ``args`` — the positional arguments, each a pytree of :class:`Arg` (or a
      :class:`Static` at a static position); ``kwargs`` likewise, by name;
    * ``outputs`` — the function's result, a pytree of :class:`Out`;
    * ``context_mesh`` — the mesh set with ``jax.set_mesh`` (concrete or abstract), or None;
    * ``uses`` — for each flat dynamic input, whether the function uses it (None: all);
    * ``compiler`` — for each flat output, the HLO sharding the compiler chose when jit
      left it open (None where unknown or not needed); ``compiler_memory`` — the memory
      kind it chose (None: the default, ``device``); ``compiler_layouts`` — for each flat
      output whose layout is ``Layout.AUTO``, the layout the compiler chose, and
      ``compiler_in_layouts`` the same for each flat input (None where unknown or not
      needed); ``compiler_in`` — for each flat dynamic input, the HLO sharding the
      compiler chose when jit left it open (the sharding the compiled executable takes it
      in; None where unknown or not needed);
    * ``devices`` — the platform's device count; ``default_device`` — the device id
      jit uses when nothing else decides (``jax.default_device``);
    * ``process_count`` — the number of JAX processes (the multi-process rules);
    * ``aot_args``/``aot_kwargs`` — when set, the compiled executable (``.lower().compile()``
      of this call) is then called with these arguments;
    * ``inside`` — the shardings inside the function's body that take part in the device
      assignment (:class:`~shardlaw.spec.jit.assignment.Source` values, in JAX's order), as
      the whole-program layer lists them (PROG-2; :mod:`shardlaw.spec.jit.inside`);
    * ``resource_mesh`` — the (concrete) mesh of a ``with mesh:`` block the call is made in,
      through ``jax.experimental.pjit.pjit`` rather than ``jax.jit`` (None: no block, and
      ``jax.jit``); PJIT-1 (:mod:`shardlaw.spec.jit.older`) says how each release reads it.
    """

    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    outputs: Any = ()
    options: JitOptions = dataclasses.field(default_factory=JitOptions)
    context_mesh: Mesh | AbstractMesh | None = None
    uses: tuple[bool, ...] | None = None
    compiler: tuple[HloSharding | None, ...] | None = None
    compiler_memory: tuple[str | None, ...] | None = None
    devices: int = 8
    default_device: int = 0
    process_count: int = 1
    aot_args: tuple | None = None
    aot_kwargs: dict | None = None
    compiler_layouts: tuple[Layout | None, ...] | None = None
    compiler_in_layouts: tuple[Layout | None, ...] | None = None
    compiler_in: tuple[HloSharding | None, ...] | None = None
    inside: tuple = ()   # the shardings inside the body (Sources), for a whole program
    resource_mesh: Mesh | None = None   # pjit inside ``with mesh:`` (PJIT-1)

    def __post_init__(self) -> None:
        # A call that exists is well-formed (CALL-0): each step checks one part of the
        # description, in this order, and the first part that is wrong is the one named.
        self._check_trees()
        self._check_device_counts()
        self._check_choices()
        self._check_aot_call()
        self._check_argument_devices()
        object.__setattr__(self, "inside", _inside(self.inside))

    def _check_trees(self) -> None:
        """The arguments, results, options and context mesh are of their types."""
        # Read before anything walks them: the description's trees nest at most MAX_NESTING
        # deep (deeper input would exhaust the recursion of every reader below).
        trees = (self.args, self.kwargs, self.outputs, self.aot_args, self.aot_kwargs)
        check_call(nesting(trees) <= MAX_NESTING, "a call's pytrees",
                   f"at most {MAX_NESTING} containers deep", self.args)
        check_call(isinstance(self.args, tuple), "a call's args", "a tuple", self.args)
        check_call(isinstance(self.kwargs, dict) and all(isinstance(k, str) for k in self.kwargs),
                   "a call's kwargs", "a dict with string keys", self.kwargs)
        check_call(isinstance(self.options, JitOptions), "a call's options", "JitOptions",
                   self.options)
        check_call(self.context_mesh is None or isinstance(self.context_mesh, (Mesh, AbstractMesh)),
                   "the context mesh", "None, a Mesh or an AbstractMesh", self.context_mesh)
        check_call(self.resource_mesh is None or (isinstance(self.resource_mesh, Mesh)
                                                  and self.context_mesh is None),
                   "the mesh of a `with mesh:` block (pjit)",
                   "None, or a concrete Mesh on a call with no context mesh", self.resource_mesh)
        for what, tree in (("args", self.args), ("kwargs", self.kwargs)):
            for path, leaf in leaves_with_paths(tree):
                check_call(isinstance(leaf, (Arg, Static)), f"{show_path((what, *path))}",
                           "an Arg or a Static", leaf)
        for path, leaf in leaves_with_paths(self.outputs):
            check_call(isinstance(leaf, Out), f"{show_path(('outputs', *path))}", "an Out", leaf)

    def _check_device_counts(self) -> None:
        """The device and process counts are positive and the default device is a device."""
        for name in ("devices", "default_device", "process_count"):
            value = getattr(self, name)
            check_call(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                       name, "a non-negative integer", value)
        check_call(self.devices >= 1 and self.process_count >= 1, "devices and process_count",
                   "at least 1", (self.devices, self.process_count))
        # One process numbers its devices 0..N-1; several processes may number them apart
        # (JAX's CPU client gives process p the ids from p * 2048), so ids are then unbounded.
        single = self.process_count == 1
        check_call(not single or self.default_device < self.devices, "default_device",
                   f"a device id below {self.devices}", self.default_device)

    def _check_choices(self) -> None:
        """Which inputs the function uses, and the compiler's choices, are tuples of their
        types (or None)."""
        if self.uses is not None:
            object.__setattr__(self, "uses", tuple(self.uses))
            check_call(all(isinstance(u, bool) for u in self.uses), "uses",
                       "a sequence of bools", self.uses)
        for name in ("compiler", "compiler_in"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
                check_call(all(c is None or isinstance(c, HloSharding)
                               for c in getattr(self, name)),
                           name, "a sequence of HLO shardings or None", value)
        if self.compiler_memory is not None:
            object.__setattr__(self, "compiler_memory", tuple(self.compiler_memory))
            check_call(all(m is None or isinstance(m, str) for m in self.compiler_memory),
                       "compiler_memory", "a sequence of memory kinds or None",
                       self.compiler_memory)
        for name in ("compiler_layouts", "compiler_in_layouts"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
                check_call(all(c is None or isinstance(c, Layout) for c in getattr(self, name)),
                           name, "a sequence of Layouts or None", value)

    def _check_aot_call(self) -> None:
        """The compiled executable's own call, when there is one, passes Args and Statics."""
        if self.aot_args is not None or self.aot_kwargs is not None:
            object.__setattr__(self, "aot_args", tuple(self.aot_args or ()))
            object.__setattr__(self, "aot_kwargs", dict(self.aot_kwargs or {}))
            for what, tree in (("args", self.aot_args), ("kwargs", self.aot_kwargs)):
                for path, leaf in leaves_with_paths(tree):
                    check_call(isinstance(leaf, (Arg, Static)),
                               f"the AOT call's {show_path((what, *path))}",
                               "an Arg or a Static", leaf)

    def _check_argument_devices(self) -> None:
        """In one process, the arguments' shardings name only the call's devices."""
        single = self.process_count == 1
        for path, leaf in leaves_with_paths(self.args if single else ()):
            if isinstance(leaf, Arg) and leaf.sharding is not None:
                for d in _device_ids_of(leaf.sharding):
                    check_call(d < self.devices, f"the devices of {show_path(('args', *path))}",
                               f"device ids below {self.devices}", d)


    @functools.cached_property
    def normal(self) -> "NormalCall":
        """The call as every stage reads it, normalised once (:class:`NormalCall`)."""
        return NormalCall.of(self)


def _inside(inside: Any) -> tuple:
    """The shardings inside the body, checked: Sources of shardings, in JAX's order (the
    whole-program layer lists them, PROG-2)."""
    check_call(type(inside) in (tuple, list) and all(
        isinstance(s, Source) and isinstance(s.sharding, SHARDING_TYPES) for s in inside),
        "the shardings inside the body", "a tuple of Sources of shardings", inside)
    return tuple(inside)


def _device_ids_of(sharding: Any) -> tuple[int, ...]:
    """The ids to check against the device count (an iota list: its largest id only)."""
    devices = getattr(sharding, "device_list", None)
    if devices is None:
        return ()
    if devices.iota is not None:
        return (len(devices) - 1,)
    return devices.id_tuple()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What jit does with a :class:`Call`.

    Accepted: ``in_shardings`` (one per flat dynamic input, as the compiled program gets
    them; :data:`UNSPECIFIED` where the compiler chooses), ``out_shardings`` (one per flat
    result, as the results come back), ``device_assignment`` (device ids in order; None
    when only abstract meshes decide), ``num_devices``, ``kept_inputs`` (flat indices the
    program keeps), ``out_committed`` and ``transfers`` (flat inputs jit moves to other
    devices or shardings before the call), ``in_layouts`` (one per flat dynamic input: the
    layout the compiled program takes it in) and ``out_layouts`` (one per flat result: the
    layout it comes back in) — None for the default layout, ``Layout.AUTO`` where the
    compiler chooses and its choice is not known. Rejected: ``rule``, ``error_type`` (the name of
    the built-in exception type JAX raises), ``jax_error`` (JAX's own class name),
    ``message``, ``path``, ``stage`` (when jit raises it: the rule's stage, declared in
    :mod:`shardlaw.rule_index`) and ``facts``, the failure's facts as (name, value) pairs
    that the message puts into words (not compared: a verdict read from a vector has none).
    Both: ``trace``, JAX's rules that fired, in order (checks of the description are left
    out). ``device_assignment`` is a :class:`DeviceIds` view, which compares equal to the
    tuple of ids and lists them only when asked.
    ``jax`` is the JAX release the verdict holds for: the edition of the spec that gave it
    (0.10.2 unless the caller named another).
    """

    accepted: bool
    trace: tuple[str, ...] = ()
    in_paths: tuple[str, ...] = ()
    in_shardings: tuple = ()
    out_paths: tuple[str, ...] = ()
    out_shardings: tuple = ()
    device_assignment: tuple[int, ...] | None = None
    num_devices: int = 0
    kept_inputs: tuple[int, ...] = ()
    out_committed: tuple[bool, ...] = ()
    transfers: tuple[str, ...] = ()
    rule: str | None = None
    error_type: str | None = None
    jax_error: str | None = None
    message: str | None = None
    path: str | None = None
    stage: str | None = None
    in_layouts: tuple = ()
    out_layouts: tuple = ()
    facts: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), compare=False, repr=False)
    jax: str = dataclasses.field(default="0.10.2", repr=False)   # the release it holds for

    def __str__(self) -> str:
        if not self.accepted:
            return f"rejected by {self.rule} ({self.error_type}): {self.message}"
        lines = [f"accepted on {self.num_devices} device(s)"
                 + (f" {list(self.device_assignment)}" if self.device_assignment else "")]
        in_layouts = self.in_layouts or (None,) * len(self.in_paths)
        out_layouts = self.out_layouts or (None,) * len(self.out_paths)
        for path, s, laid in zip(self.in_paths, self.in_shardings, in_layouts):
            lines.append(f"  in  {path}: {s!r}" + ("" if laid is None else f" in {laid!r}"))
        for path, s, c, laid in zip(self.out_paths, self.out_shardings, self.out_committed,
                                    out_layouts):
            lines.append(f"  out {path}: {s!r}" + ("" if laid is None else f" in {laid!r}")
                         + ("" if c else " (uncommitted)"))
        return "\n".join(lines)



# =========================================================================== the normalised call

def flat_arguments(args: tuple, kwargs: dict, static: set[int] | frozenset[int],
                   static_names: set[str] | frozenset[str]) -> tuple[list[tuple[str, Any]], Node]:
    """The dynamic arguments' leaves with their paths (``args[0]``, ``kwargs['y']``; static
    positions are left out, so positions count the dynamic arguments only, as JAX's do), and
    the structure of (dynamic positional arguments, dynamic keyword arguments).

    >>> flat, _ = flat_arguments((1, (2, 3)), {"y": 4}, {0}, set())
    >>> flat
    [('args[0][0]', 2), ('args[0][1]', 3), ("kwargs['y']", 4)]
    """
    dynamic_args = tuple(a for i, a in enumerate(args) if i not in static)
    dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
    flat = [(show_path(("args", *p)), leaf) for p, leaf in leaves_with_paths(dynamic_args)]
    flat += [(show_path(("kwargs", *p)), leaf) for p, leaf in leaves_with_paths(dynamic_kwargs)]
    return flat, structure((dynamic_args, dynamic_kwargs))


def static_positions(options: JitOptions, count: int) -> frozenset[int]:
    """The positions ``static_argnums`` marks among ``count`` positional arguments, a negative
    one counted from the end.

    >>> static_positions(JitOptions(static_argnums=(0, -1)), 3)
    frozenset({0, 2})
    """
    return frozenset(i if i >= 0 else i + count for i in options.static_argnums)


def _split_tree(tree: Any) -> tuple[Any, Any]:
    """A shardings tree split into its sharding parts and its layout parts (same shape)."""
    if tree is UNSPECIFIED:
        return UNSPECIFIED, UNSPECIFIED
    shardings = map_leaves(lambda leaf: split_format(leaf)[0], tree, none_is_leaf=True)
    layouts = map_leaves(lambda leaf: split_format(leaf)[1], tree, none_is_leaf=True)
    return shardings, layouts


@dataclasses.dataclass(frozen=True)
class NormalCall:
    """A call read once, as every stage of jit, the layouts, the cache model and the bridge read it.

    Static positions are counted from the front; the dynamic arguments are flat, each with its
    pytree path and checked to be an :class:`Arg`; the results likewise; ``in_tree`` and
    ``out_tree`` are jit's shardings trees with each Format leaf's layout split off into
    ``in_layout_tree``/``out_layout_tree``. Building one checks the description (CALL-0):
    the flat arguments, and the lengths of ``uses`` and of the compiler's choices.

    >>> n = Call(args=(Arg.numpy((2,)), Static(3)), kwargs={"y": Arg.numpy((4,))},
    ...          options=JitOptions(static_argnums=-1)).normal
    >>> n.static, [path for path, _ in n.flat_in], n.device_or_backend
    (frozenset({1}), ['args[0]', "kwargs['y']"], False)
    """

    call: Call
    static: frozenset[int]
    static_names: frozenset[str]
    flat_in: tuple[tuple[str, Arg], ...]
    dynamic: Node                # (dynamic positional arguments, dynamic keyword arguments)
    positional: Node             # the dynamic positional arguments (what in_shardings covers)
    statics: tuple[tuple[str, Any], ...]     # (path, value) per static argument
    flat_out: tuple[tuple[str, Out], ...]
    results: Node
    device_or_backend: bool
    in_tree: Any
    in_layout_tree: Any
    out_tree: Any
    out_layout_tree: Any

    @classmethod
    def of(cls, call: Call) -> "NormalCall":
        options = call.options
        static, names = static_positions(options, len(call.args)), frozenset(options.static_argnames)
        flat_in, dynamic = flat_arguments(call.args, call.kwargs, static, names)
        for path, leaf in flat_in:
            check_call(isinstance(leaf, Arg), f"the dynamic argument {path}",
                       "an Arg (mark static positions with static_argnums)", leaf)
        statics = tuple((f"args[{i}]", call.args[i].value) for i in sorted(static)
                        if i < len(call.args)) + tuple(
            (f"kwargs[{k!r}]", call.kwargs[k].value) for k in sorted(call.kwargs) if k in names)
        flat_out = tuple((show_path(("result", *p)), o) for p, o in leaves_with_paths(
            call.outputs))
        _check_lengths(call, len(flat_in), len(flat_out))
        return cls(call, static, names, tuple(flat_in), dynamic,
                   structure(tuple(a for i, a in enumerate(call.args) if i not in static)),
                   statics, flat_out, structure(call.outputs),
                   options.device is not None or options.backend is not None,
                   *_split_tree(options.in_shardings), *_split_tree(options.out_shardings))

    @property
    def in_paths(self) -> tuple[str, ...]:
        return tuple(path for path, _ in self.flat_in)

    @property
    def out_paths(self) -> tuple[str, ...]:
        return tuple(path for path, _ in self.flat_out)

    @property
    def args(self) -> tuple[Arg, ...]:
        return tuple(arg for _, arg in self.flat_in)


def _check_lengths(call: Call, inputs: int, outputs: int) -> None:
    """The per-input and per-result facts of a description have one entry each."""
    for name, wanted, what in (("uses", inputs, "flags, one per flat input"),
                               ("compiler", outputs, "entries, one per flat result"),
                               ("compiler_memory", outputs, "entries, one per flat result"),
                               ("compiler_in", inputs, "entries, one per flat input"),
                               ("compiler_layouts", outputs, "entries, one per flat result"),
                               ("compiler_in_layouts", inputs, "entries, one per flat input")):
        value = getattr(call, name)
        check_call(value is None or len(value) == wanted, name, f"{wanted} {what}", value)
    if call.aot_args is not None:
        for path, leaf in flat_arguments(call.aot_args, call.aot_kwargs or {}, set(), set())[0]:
            check_call(isinstance(leaf, Arg), f"the AOT call's {path}", "an Arg", leaf)


class DeviceIds(Sequence[int]):
    """A device assignment's ids in order, read from its device list only when asked for one
    by one: an iota list of a million devices stays a formula.

    >>> ids = DeviceIds(DeviceList.of_ids(range(4)))
    >>> ids, ids == (0, 1, 2, 3), list(ids[1:3]), len(ids)
    ((0, 1, 2, 3), True, [1, 2], 4)
    """

    __slots__ = ("devices",)

    def __init__(self, devices: DeviceList) -> None:
        self.devices = devices

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.devices.id_tuple()[index]
        if index < 0:
            index += len(self.devices)
        if not 0 <= index < len(self.devices):
            raise IndexError(index)
        return self.devices.id_at(index)

    def __iter__(self) -> Iterator[int]:
        return self.devices.ids()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeviceIds):
            return self.devices == other.devices
        if isinstance(other, tuple):
            return len(other) == len(self.devices) and other == self.devices.id_tuple()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.devices.id_tuple())

    def __repr__(self) -> str:
        return repr(self.devices.id_tuple())

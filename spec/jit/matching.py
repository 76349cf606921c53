"""Matching jit's shardings to the values: the TREE and FIT rules.

``in_shardings`` is matched against the positional arguments (TREE-1) at the call,
``out_shardings`` against the function's result after tracing (TREE-2); each argument and
result then fits its sharding (FIT-1). An abstract argument (a ``jax.ShapeDtypeStruct``)
brings a sharding nothing has been placed by yet: its type must divide over the Explicit
axes while jit traces (FIT-2), and the sharding lowering hands each kept input must divide
it (FIT-3). Each rule's failure is written right above it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ..placement.blocks import TilesDoNotMatchRank, check_rank, shard_shape
from ..core.pytree import Node, broadcast_prefix, is_container, prefix_mismatch
from ..core.rules import Failure, Rejection, explain, reject, require, rule, varies
from ..core.shardings import UNSPECIFIED, NamedSharding
from ..core.values import AbstractMesh, AxisType, Mesh, PartitionSpec

P = PartitionSpec  # the name the examples use

__all__ = ["match_in_shardings", "match_out_shardings", "check_fits", "check_typed_fit",
           "check_lowered_fit"]


@dataclasses.dataclass(frozen=True)
class NotAPrefix(Failure, rule="TREE-1"):
    template = ("{which} must be a tree prefix of {against}: {detail}")
    which: str
    against: str
    detail: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@dataclasses.dataclass(frozen=True)
class EmptyNotAPrefix(NotAPrefix, error=AssertionError):
    pass


@rule("TREE-1", mirrors="jax._src.pjit._process_in_axis_resources; "
                        "jax._src.api_util.flatten_axis_resources")
def match_in_shardings(in_shardings: Any, positional: Node) -> list[Any]:
    """``in_shardings`` is a single leaf for every argument, or a tuple with one tree prefix per positional argument.

    (C1) A single leaf (a sharding, a PartitionSpec or None) covers every argument.
    (C2) A tuple, or a top-level list read as one, holds one entry per positional argument.
    (C3) Within an entry a leaf covers a whole subtree, and containers match the argument's
    in type, length and dict keys.

    >>> from shardlaw.spec.core.pytree import structure
    >>> match_in_shardings([P("x"), None], structure((1, {"a": 2, "b": 3})))
    [P('x'), None, None]
    >>> match_in_shardings(P("x"), structure(((1, 2),)))
    [P('x'), P('x')]
    >>> match_in_shardings((P("x"), P()), structure(((1, 2),)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [TREE-1]: in_shardings must be a tree prefix of the positional arguments: it is a tuple of length 2 for 1 positional argument(s). It looks like in_shardings should be wrapped in a singleton tuple: ((P('x'), P()),).

    An empty container that does not match fails JAX's internal assertion (AssertionError):

    >>> match_in_shardings((), structure((1,)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionAssertionError: [TREE-1]: in_shardings must be a tree prefix of the positional arguments: it is a tuple of length 0 for 1 positional argument(s)
    """
    if in_shardings is UNSPECIFIED or in_shardings is None or not is_container(in_shardings):
        return [in_shardings] * positional.num_leaves
    if isinstance(in_shardings, list):
        in_shardings = tuple(in_shardings)
    found = prefix_mismatch(in_shardings, positional, ())
    if found is None:
        return broadcast_prefix(in_shardings, positional)
    count = len(positional.children)
    if type(in_shardings) is not tuple:
        detail = f"it is a {type(in_shardings).__name__}, not a tuple of {count} entries"
    elif len(in_shardings) != count:
        detail = f"it is a tuple of length {len(in_shardings)} for {count} positional argument(s)"
    else:
        detail = found
    fix = ""
    if count == 1 and prefix_mismatch((in_shardings,), positional, ()) is None:
        fix = (f"It looks like in_shardings should be wrapped in a singleton tuple: "
               f"({in_shardings!r},).")
    # JAX's own check takes an empty container for a leaf and fails an internal assertion.
    kind = EmptyNotAPrefix if len(in_shardings) == 0 else NotAPrefix
    raise reject(kind("in_shardings", "the positional arguments", detail, fix))


@dataclasses.dataclass(frozen=True)
class OutNotAPrefix(NotAPrefix, rule="TREE-2"):
    pass


@dataclasses.dataclass(frozen=True)
class EmptyOutNotAPrefix(EmptyNotAPrefix, rule="TREE-2"):
    pass


@rule("TREE-2", mirrors="jax._src.pjit._check_and_canonicalize_out_shardings")
def match_out_shardings(out_shardings: Any, results: Node) -> list[Any]:
    """``out_shardings`` is a single leaf for every result or a tree prefix of the function's result, containers matching in type (a list is not a tuple here), length and dict keys.

    >>> from shardlaw.spec.core.pytree import structure
    >>> match_out_shardings((P("x"), None), structure((1, [2, 3])))
    [P('x'), None, None]
    >>> match_out_shardings([P("x"), None], structure((1, 2)))
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [TREE-2]: out_shardings must be a tree prefix of the function's result: at the top level the shardings hold a list where the value holds a tuple of length 2
    """
    if out_shardings is UNSPECIFIED or out_shardings is None or not is_container(out_shardings):
        return [out_shardings] * results.num_leaves
    found = prefix_mismatch(out_shardings, results, ())
    kind = EmptyOutNotAPrefix if len(out_shardings) == 0 else OutNotAPrefix
    require(found is None, lambda: kind("out_shardings", "the function's result", found or ""))
    return broadcast_prefix(out_shardings, results)


@dataclasses.dataclass(frozen=True)
class DoesNotFit(Failure, rule="FIT-1"):
    template = "a value of shape {shape} does not fit its sharding: {reason}"
    shape: tuple
    reason: str
    fix: str = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.fix


@dataclasses.dataclass(frozen=True)
class DoesNotDivide(DoesNotFit, jax_error="IndivisibleError"):
    pass


@dataclasses.dataclass(frozen=True)
class TilesDoNotFit(DoesNotFit, error=AssertionError):
    pass


@varies("0.4.13", "Each argument and result given a sharding has at least the rank the "
        "sharding needs and divides evenly into its shards; an indivisible one is a plain "
        "ValueError (IndivisibleError came later).", raises={"IndivisibleError": "ValueError"})
@rule("FIT-1", mirrors="jax._src.pjit.pjit_check_aval_sharding")
def check_fits(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """Each argument and result given a sharding has at least the rank the sharding needs and divides evenly into its shards.

    >>> check_fits(NamedSharding(Mesh.iota((4,), ("x",)), P("x")), (6,), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [FIT-1] at args[0]: a value of shape (6,) does not fit its sharding: [DIV-1]: dimension 0 of shape (6,) has size 6, which NamedSharding(Mesh({'x': 4}), P('x')) splits 4 ways; 6 is not a multiple of 4 (ways per dimension: (4,)). Pad dimension 0 to a multiple of 4, or split it over fewer mesh axes.
    """
    if sharding is UNSPECIFIED:
        return
    _fit(sharding, shape, path, (DoesNotFit, DoesNotDivide, TilesDoNotFit))


def _fit(sharding: Any, shape: tuple[int, ...], path: str, kinds: tuple) -> None:
    """``shape`` fits ``sharding``, else the refusal of the kind (of ``kinds``: plain,
    indivisible, tiles of another rank) JAX's own check raises."""
    plain, indivisible, tiles = kinds
    try:
        check_rank(sharding, shape)
        shard_shape(sharding, shape)
    except Rejection as error:
        failure = error.failure
        # JAX raises what its own check raises: IndivisibleError, or a bare AssertionError
        # when a GSPMD tile assignment has another rank than the value.
        kind = (indivisible if failure.jax_error == "IndivisibleError" else
                tiles if isinstance(failure, TilesDoNotMatchRank) else plain)
        raise reject(kind(tuple(shape), explain(failure)), path) from None


@dataclasses.dataclass(frozen=True)
class TypeDoesNotDivide(Failure, rule="FIT-2"):
    template = ("the abstract argument's type, {shape} over {sharding!r}, splits dimension "
                "{dim} of size {size} over the Explicit mesh axes {axes}, {ways} ways; "
                "{size} is not a multiple of {ways}")
    hint = ("Pad dimension {dim} to a multiple of {ways}, or split it over fewer Explicit "
            "axes.")
    shape: tuple
    sharding: Any
    dim: int
    size: int
    axes: tuple
    ways: int


def _explicit_axes(entry: Any, mesh: Mesh | AbstractMesh) -> tuple[str, ...]:
    """The Explicit mesh axes among a spec entry's (a name, a tuple of names, or None)."""
    names = (entry,) if isinstance(entry, str) else entry if isinstance(entry, tuple) else ()
    return tuple(a for a in names if mesh.axis_type(a) is AxisType.Explicit)


@rule("FIT-2", mirrors="jax._src.core.get_sharding (_check_divisibility), reached from "
                       "jax._src.core.shaped_abstractify of each argument at jit's trace")
def check_typed_fit(sharding: Any, shape: tuple[int, ...], path: str) -> None:
    """An abstract argument over a NamedSharding is typed by its sharding's Explicit mesh axes, which must divide each dimension evenly; Auto and Manual axes are left out of the type.

    jit types every argument before anything else at the call (before the context mesh's
    use, the keyword arguments and ``in_shardings``), so ``in_shardings`` cannot rescue an
    argument whose type does not divide, and neither can an unused one. An array that
    exists fits its sharding, so only a ``jax.ShapeDtypeStruct`` can fail here.

    >>> explicit = Mesh.iota((4, 2), ("data", "model"), (AxisType.Explicit, AxisType.Auto))
    >>> check_typed_fit(NamedSharding(explicit, P("data", "model")), (8, 3), "args[0]")
    >>> check_typed_fit(NamedSharding(explicit, P("data")), (6, 4), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [FIT-2] at args[0]: the abstract argument's type, (6, 4) over NamedSharding(Mesh({'data': 4, 'model': 2}, types=('Explicit', 'Auto')), P('data')), splits dimension 0 of size 6 over the Explicit mesh axes ('data',), 4 ways; 6 is not a multiple of 4. Pad dimension 0 to a multiple of 4, or split it over fewer Explicit axes.
    """
    if not isinstance(sharding, NamedSharding):
        return  # only a NamedSharding gives an argument's type a mesh
    mesh = sharding.mesh
    for dim, (entry, size) in enumerate(zip(sharding.spec, shape)):
        axes = _explicit_axes(entry, mesh)
        ways = 1
        for axis in axes:
            ways *= mesh.axis_size(axis)
        # Every dimension divides evenly by the Explicit axes that split it
        if size % ways:
            raise reject(TypeDoesNotDivide(tuple(shape), sharding, dim, size, axes, ways), path)


@dataclasses.dataclass(frozen=True)
class LoweredDoesNotFit(DoesNotFit, rule="FIT-3"):
    template = ("the {what}, of shape {shape}, does not fit the sharding lowering hands it: "
                "{reason}")
    what: str = "abstract argument"


@dataclasses.dataclass(frozen=True)
class LoweredDoesNotDivide(LoweredDoesNotFit, jax_error="IndivisibleError"):
    pass


@dataclasses.dataclass(frozen=True)
class LoweredTilesDoNotFit(LoweredDoesNotFit, error=AssertionError):
    pass


@rule("FIT-3", mirrors="jax._src.interpreters.mlir.sharded_aval (lower_jaxpr_to_module: "
                       "each kept input's and each result's shard shape)")
def check_lowered_fit(sharding: Any, shape: tuple[int, ...], path: str,
                      what: str = "abstract argument") -> None:
    """Each input the program keeps, and each result, divides evenly into the shards of the sharding lowering hands it, a GSPMD tiling having the value's rank.

    It is checked when the program is written out, after the device assignment (DA-1..4):
    an input that is not kept (KEEP-1) or that ``device=`` moves to one device is not
    checked, and an argument on an abstract mesh alone is refused by DA-4 first. An
    ``in_sharding`` and an ``out_sharding`` were checked at the call (FIT-1), and an array
    that exists fits its sharding, so in a jit call only a ``jax.ShapeDtypeStruct``'s own
    sharding can fail here. A jit call that vmap binds on batched arguments is not checked
    at the call (:attr:`Program.checked <shardlaw.spec.program.description.Program>`): its
    batched shardings, which the spmd axes may split unevenly, are first divided here
    (``what``: the words for the value).

    >>> data = NamedSharding(Mesh.iota((4, 2), ("data", "model")), P("data"))
    >>> check_lowered_fit(data, (8, 4), "args[0]")
    >>> check_lowered_fit(data, (6, 4), "args[0]")
    Traceback (most recent call last):
    ...
    shardlaw.spec.core.rules.RejectionValueError: [FIT-3] at args[0]: the abstract argument, of shape (6, 4), does not fit the sharding lowering hands it: [DIV-1]: dimension 0 of shape (6, 4) has size 6, which NamedSharding(Mesh({'data': 4, 'model': 2}), P('data')) splits 4 ways; 6 is not a multiple of 4 (ways per dimension: (4, 1)). Pad dimension 0 to a multiple of 4, or split it over fewer mesh axes.
    """
    if sharding is UNSPECIFIED:
        return
    _fit(sharding, shape, path, tuple(functools.partial(kind, what=what) for kind in (
        LoweredDoesNotFit, LoweredDoesNotDivide, LoweredTilesDoNotFit)))

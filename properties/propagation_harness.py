"""Where the compiler decides, held to real XLA: drawn programs of the propagated
primitives (PROP-1 to PROP-7) against the compiled executable's result shardings.

A :class:`Recipe` is a small program over one 8-device mesh (of shape ``(8,)``,
``(2, 4)``, ``(4, 2)``, ``(2, 2, 2)``, ``(1, 8)`` or ``(2, 1, 4)``, devices in order,
reversed or drawn; its axes Auto, or with ``recipes(explicit=True)`` all Explicit or
Explicit beside Auto): inputs of 1 to 3 dimensions of sizes 2 to 16, each committed to a
drawn split, and steps — elementwise unary and binary operations (operands of one shape with
conflicting or partly open splits, a rank-1 operand broadcast along the last dimension, a
scalar), ``dot_general`` with batch and contracting dimensions split, reductions,
transposes, reshapes merging and splitting dimensions, ``broadcast_in_dim`` and
``convert_element_type``, the further primitives, realistic blocks, constraints (some
dimensions UNCONSTRAINED), inner jits with in and out shardings, shard_maps over every
axis, and control flow (a scan's carry or ys, a cond, a remat) — each over an earlier value
or a fresh input. :func:`compare_recipe` builds the real function, reads its
:class:`~shardlaw.spec.Program` with :func:`~shardlaw.spec.bridge.program.describe_program`,
asks :func:`~shardlaw.spec.explain_program` and compares every result the spec places with
the sharding the executable returns it on: equal as JAX spells it, not only
placement-equivalent. It asks the same of
:func:`~shardlaw.spec.program.propagation_spelling.predicted_out_shardings` on the concrete
mesh and on the program described over the recipe's abstract mesh (ShapeDtypeStructs),
whose results are held to the concrete executable's over that abstract mesh. A result the
spec leaves UNSPECIFIED is an abstention (counted, with the reason the verdict gives); any
other difference is a disagreement. A program JAX refuses while tracing (an Explicit axes'
type rule) is counted apart.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from hypothesis import strategies as st

__all__ = ["Recipe", "recipes", "compare_recipe", "Outcome", "TALLY"]

MESHES = ((8,), (2, 4), (4, 2), (2, 2, 2), (1, 8), (2, 1, 4))
NAMES = ("x", "y", "z")
SIZES = (2, 4, 8, 16)
UNARY = ("neg", "sin", "tanh", "exp")
BINARY = ("add", "mul", "sub", "max")

# Over the run: outcomes ("agree", "abstain", "disagree") and, per primitive of the
# programs whose every result the spec predicted, how many such programs held it.
TALLY: collections.Counter = collections.Counter()


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A drawn program: its mesh (shape, reversed devices), its inputs (shape, split per
    dimension) and its steps ``(kind, operands, parameter)``, each giving one value (an
    ``input`` step gives input number ``parameter``); operands and ``outputs`` number the
    steps' values."""

    mesh: tuple[int, ...]
    reversed_devices: bool
    inputs: tuple[tuple[tuple[int, ...], tuple], ...]
    steps: tuple[tuple[str, tuple[int, ...], Any], ...]
    outputs: tuple[int, ...]
    devices: tuple[int, ...] = ()     # a drawn device order (empty: as reversed_devices says)
    out_shardings: tuple = ()         # per output a split, or None: left open
    axis_types: str = ""              # per mesh axis "A" (Auto) or "E" (Explicit); "": Auto


def _loose(draw: Any, split: tuple) -> tuple:
    """``split`` with some dimensions left UNCONSTRAINED (written ``"?"``)."""
    return tuple("?" if draw(st.integers(0, 2)) == 0 else e for e in split)


def _split(draw: Any, shape: tuple[int, ...], mesh: tuple[int, ...]) -> tuple:
    """A split of ``shape``: per dimension None, an axis or two axes dividing it."""
    names = NAMES[:len(mesh)]
    size = dict(zip(names, mesh))
    free = list(names)
    out = []
    for dim in shape:
        choice = draw(st.sampled_from(["none", "one", "two"]))
        fit = [a for a in free if dim % size[a] == 0]
        if choice == "one" and fit:
            axis = draw(st.sampled_from(fit))
            free.remove(axis)
            out.append(axis)
        elif choice == "two" and len(fit) >= 2:
            a = draw(st.sampled_from(fit))
            rest = [b for b in fit if b != a and dim % (size[a] * size[b]) == 0]
            if rest:
                b = draw(st.sampled_from(rest))
                free.remove(a)
                free.remove(b)
                out.append((a, b))
            else:
                free.remove(a)
                out.append(a)
        else:
            out.append(None)
    return tuple(out)


@st.composite
def recipes(draw: Any, max_steps: int = 5, explicit: bool = False) -> Recipe:
    """Recipes from small to large: one input and one step first; ``explicit``: some over
    meshes with Explicit axes (all of them, or beside Auto ones), some with a reshard onto
    them."""
    mesh = draw(st.sampled_from(MESHES))
    reversed_devices = draw(st.booleans())
    inputs: list = []
    shapes: list[tuple[int, ...]] = []

    steps: list = []

    def new_input(shape: tuple[int, ...]) -> int:
        inputs.append((shape, _split(draw, shape, mesh)))
        steps.append(("input", (), len(inputs) - 1))
        shapes.append(shape)
        return len(shapes) - 1

    def same_shape(shape: tuple[int, ...]) -> int:
        known = [k for k, s in enumerate(shapes) if s == shape]
        if known and draw(st.booleans()):
            return draw(st.sampled_from(known))
        return new_input(shape)

    rank = draw(st.integers(1, 3))
    new_input(tuple(draw(st.sampled_from(SIZES)) for _ in range(rank)))
    for _ in range(draw(st.integers(1, max_steps))):
        v = draw(st.integers(0, len(shapes) - 1))
        shape = shapes[v]
        step, out = _placed_step(draw, *_step(draw, v, shape, same_shape), shape, mesh)
        steps.append(step)
        shapes.append(out)
    made = [k for k, (kind, _, _) in enumerate(steps) if kind != "input"]
    outputs = tuple(draw(st.lists(st.sampled_from(made), min_size=1, max_size=3)))
    devices = tuple(draw(st.permutations(range(8)))) if draw(st.booleans()) else ()
    given = tuple(_given(draw, shapes[k], mesh) if draw(st.integers(0, 3)) == 0 else None
                  for k in outputs) if draw(st.booleans()) else ()
    kinds = draw(st.sampled_from(("", "", "mixed", "E"))) if explicit else ""
    types = "E" * len(mesh) if kinds == "E" else ""
    if kinds == "mixed":   # (a mesh of one axis: Explicit)
        types = "".join(draw(st.permutations("E" + "A" * (len(mesh) - 1)))) \
            if draw(st.booleans()) else "".join(draw(st.permutations(
                "A" + "E" * (len(mesh) - 1))))
    if "E" in types and draw(st.booleans()):   # a reshard onto Explicit axes, read on
        v = draw(st.sampled_from(made))
        steps.append(("reshard", (v,), _explicit_split(draw, shapes[v], mesh, types)))
        if draw(st.booleans()):
            steps.append(("unary", (len(steps) - 1,), draw(st.sampled_from(UNARY))))
        outputs += (len(steps) - 1,)
        given += (None,) if given else ()
    return Recipe(mesh, reversed_devices, tuple(inputs), tuple(steps), outputs, devices,
                  given, types)


def _placed_step(draw: Any, step: tuple, out: tuple, shape: tuple[int, ...],
                 mesh: tuple[int, ...]) -> tuple:
    """A drawn step over a value of ``shape`` given the placements it writes over ``mesh``
    (a constraint's, an inner jit's, a shard_map's specs), with its result's shape."""
    if step[0] == "constrain":
        split = _split(draw, shape, mesh)
        step = ("constrain", step[1], _loose(draw, split) if draw(st.booleans()) else split)
        step = _other_mesh(draw, step, shape, mesh)
    elif step[0] == "shard_map":
        step = ("shard_map", step[1], _split(draw, shape, mesh))
    elif step[0] == "shard_map_auto":
        step, out = _auto_map(draw, step[1][0], shape, mesh)
    elif step[0] == "inner":
        ins = _split(draw, shape, mesh) if draw(st.booleans()) else None
        outs = _split(draw, shape, mesh) if draw(st.booleans()) else None
        step = _other_mesh(draw, ("inner", step[1], (ins, outs)), shape, mesh)
    elif step[0] == "flow_led":
        step = ("flow_led", step[1], (step[2][0], _split(draw, shape, mesh)))
    return step, out


OTHER = ("a", "b", "c")   # the axes of another mesh of the recipe's devices


def _other_mesh(draw: Any, step: tuple, shape: tuple[int, ...], mesh: tuple[int, ...]
                ) -> tuple:
    """Maybe ``step`` (a constraint, an inner jit) over another mesh of the recipe's devices
    (``constrain_other``: a constraint; ``inner_other``: an inner jit's in sharding), its
    split drawn over that mesh's axes and made of whole axes of the recipe's mesh (a split
    over parts of them is PROP-8's, and JAX refuses a value computed from it: not drawn)."""
    if draw(st.integers(0, 2)) != 0:
        return step
    other = draw(st.sampled_from([m for m in MESHES if m != mesh]))
    split = _split(draw, shape, other)
    if not _whole(split, other, mesh, len(shape)):
        return step
    kind = "constrain_other" if step[0] == "constrain" else "inner_other"
    return (kind, step[1], (other, split))


def _whole(split: tuple, other: tuple, mesh: tuple, rank: int) -> bool:
    """Whether each dimension of ``split`` (over a mesh of shape ``other``) is made of whole
    axes of the recipe's mesh (shape ``mesh``; both over the devices in one order)."""
    import math

    from shardlaw.spec import Mesh, NamedSharding
    from shardlaw.spec.program.placement_checks import crossmesh_split
    theirs = Mesh.iota(other, NAMES[:len(other)])
    ours = Mesh.iota(mesh, NAMES[:len(mesh)])
    found = crossmesh_split(NamedSharding(theirs, _spec_of(split)), ours, rank)
    for entry, axes in zip(split, found):
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        if math.prod(theirs.axis_size(a) for a in names) != \
                math.prod(ours.axis_size(a) for a in axes):
            return False
    return True


def _spec_of(split: tuple) -> Any:
    from shardlaw.spec import P
    return P(*split)


def _auto_map(draw: Any, v: int, shape: tuple[int, ...], mesh: tuple[int, ...]) -> tuple:
    """A shard_map over ``v`` leaving some mesh axes automatic (``axis_names`` a drawn
    proper subset), its specs over its manual axes only, and its body: elementwise, a
    transpose of every dimension (its out spec the in spec reversed), or a psum over the
    axes its spec names (its out spec ``P()``, its result of the local shape); with the
    shape of its result."""
    names = NAMES[:len(mesh)]
    wide = [a for a, n in zip(names, mesh) if n > 1]   # (XLA fails a psum over a manual axis
    if len(names) < 2 or not wide:                     # of size 1 beside free ones: seen)
        return ("shard_map", (v,), _split(draw, shape, mesh)), shape
    manual = tuple(sorted(draw(st.sets(st.sampled_from(wide), min_size=1,
                                       max_size=len(names) - 1))))
    split = tuple(_only(entry, manual) for entry in _split(draw, shape, mesh))
    body = draw(st.sampled_from(("cos", "transpose", "psum") if len(shape) >= 2 else
                                ("cos", "psum")))
    size = dict(zip(names, mesh))
    local = tuple(n // _ways(entry, size) for n, entry in zip(shape, split))
    out = shape[::-1] if body == "transpose" else local if body == "psum" else shape
    return ("shard_map_auto", (v,), (split, manual, body)), out


def _ways(entry: Any, size: dict) -> int:
    """How many pieces a spec entry splits its dimension into."""
    ways = 1
    for a in ((entry,) if isinstance(entry, str) else entry or ()):
        ways *= size[a]
    return ways


def _only(entry: Any, manual: tuple) -> Any:
    """A drawn spec entry with its axes outside ``manual`` left out."""
    kept = tuple(a for a in ((entry,) if isinstance(entry, str) else entry or ())
                 if a in manual)
    return None if not kept else kept[0] if len(kept) == 1 else kept


def _explicit_split(draw: Any, shape: tuple[int, ...], mesh: tuple[int, ...], types: str
                    ) -> tuple:
    """A split of ``shape`` over the mesh's Explicit axes only (a reshard's): per
    dimension None or one Explicit axis dividing it, each axis once."""
    free = [a for a, t in zip(NAMES, types) if t == "E"]
    sizes = dict(zip(NAMES, mesh))
    out = []
    for dim in shape:
        fit = [a for a in free if dim % sizes[a] == 0]
        axis = draw(st.sampled_from([None] + fit))
        if axis is not None:
            free.remove(axis)
        out.append(axis)
    return tuple(out)


def _given(draw: Any, shape: tuple[int, ...], mesh: tuple[int, ...]) -> tuple:
    return _split(draw, shape, mesh)   # (jit refuses UNCONSTRAINED in out_shardings)


def _step(draw: Any, v: int, shape: tuple[int, ...], same_shape: Any) -> tuple:
    """One drawn step over value ``v`` of ``shape`` and the shape of its result."""
    kind = draw(st.sampled_from(("unary", "binary", "broadcast_add", "scalar", "dot",
                                 "reduce", "transpose", "reshape", "broadcast",
                                 "convert", "more", "more", "constrain", "block", "inner",
                                 "shard_map", "shard_map_auto", "shard_map_auto", "flow")))
    if not shape:   # a scalar (an argmax's of a vector): elementwise steps only
        return ("unary", (v,), draw(st.sampled_from(UNARY))), shape
    if kind == "flow" and draw(st.booleans()):   # a join a constraint leads (PROP-13)
        which = draw(st.sampled_from(("scan", "while", "cond", "cond second")))
        xs = same_shape((4,) + shape if which == "scan" else shape)
        return ("flow_led", (v, xs), (which, None)), shape
    if kind == "flow":   # control flow: a scan's carry or ys, a cond, a remat
        which = draw(st.sampled_from(("scan carry", "scan ys", "cond", "remat", "while")))
        if which.startswith("scan"):
            xs = same_shape((4,) + shape)
            return ("flow", (v, xs), which), shape if which == "scan carry" else (4,) + shape
        return ("flow", (v, same_shape(shape)), which), shape
    if kind in ("more", "constrain", "block", "inner", "shard_map", "shard_map_auto"):
        return _more_step(draw, kind, v, shape, same_shape)
    if kind == "unary":
        step, out = ("unary", (v,), draw(st.sampled_from(UNARY))), shape
    elif kind == "binary":
        w = same_shape(shape)
        step, out = ("binary", (v, w), draw(st.sampled_from(BINARY))), shape
    elif kind == "broadcast_add" and len(shape) >= 2:
        w = same_shape(shape[-1:])
        step, out = ("broadcast_add", (v, w), None), shape
    elif kind == "scalar":
        step, out = ("scalar", (v,), None), shape
    elif kind == "dot" and len(shape) in (2, 3):
        n = draw(st.sampled_from(SIZES))
        other = (*shape[:-2], shape[-1], n)
        w = same_shape(other)
        step, out = ("dot", (v, w), None), (*shape[:-1], n)
    elif kind == "reduce" and len(shape) >= 2:
        axis = draw(st.integers(0, len(shape) - 1))
        op = draw(st.sampled_from(("sum", "max")))
        step, out = ("reduce", (v,), (op, axis)), shape[:axis] + shape[axis + 1:]
    elif kind == "transpose" and len(shape) >= 2:
        perm = tuple(draw(st.permutations(range(len(shape)))))
        step, out = ("transpose", (v,), perm), tuple(shape[p] for p in perm)
    elif kind == "reshape":
        out = _reshaped(draw, shape)
        step = ("reshape", (v,), out)
    elif kind == "broadcast" and len(shape) <= 2:
        where = draw(st.integers(0, len(shape)))
        n = draw(st.sampled_from(SIZES))
        out = shape[:where] + (n,) + shape[where:]
        step = ("broadcast", (v,), (where, out))
    else:
        step, out = ("convert", (v,), None), shape
    return step, out


MORE = ("slice", "concat", "pad", "where", "cumsum", "argmax", "sort", "squeeze",
        "take", "dynamic_slice", "iota")
BLOCKS = ("mlp", "layernorm", "attention", "loss_grad", "mlp_grad")


def _more_step(draw: Any, kind: str, v: int, shape: tuple[int, ...], same_shape: Any
               ) -> tuple:
    """A constraint in the middle, a step of the table's further primitives, or a
    realistic block (an MLP, layernorm, attention, a loss's gradient) over ``v``."""
    if kind in ("constrain", "inner", "shard_map", "shard_map_auto"):
        return (kind, (v,), None), shape
    if kind == "block" and len(shape) == 2:
        block = draw(st.sampled_from(BLOCKS))
        d, h = shape[1], draw(st.sampled_from(SIZES))
        weights = {"mlp": ((d, h), (h, d)), "mlp_grad": ((d, h), (h, d)),
                   "layernorm": ((d,), (d,)), "attention": ((d, d), (d, d), (d, d)),
                   "loss_grad": ((d, d),)}[block]
        made = tuple(same_shape(w) for w in weights)
        out = {"loss_grad": (d, d), "mlp_grad": (d, h)}.get(block, shape)
        return ("block", (v, *made), block), out
    op = draw(st.sampled_from(MORE))
    axis = draw(st.integers(0, len(shape) - 1))
    if op == "concat":
        return ("concat", (v, same_shape(shape)), axis), \
            shape[:axis] + (2 * shape[axis],) + shape[axis + 1:]
    if op == "where":
        return ("where", (v, same_shape(shape)), None), shape
    if op in ("slice", "take", "dynamic_slice"):
        n = draw(st.sampled_from([k for k in (1, 2, 4, 8) if k <= shape[axis]]))
        return (op, (v,), (axis, n)), shape[:axis] + (n,) + shape[axis + 1:]
    if op == "pad":
        return ("pad", (v,), axis), shape[:axis] + (shape[axis] + 2,) + shape[axis + 1:]
    if op == "argmax":
        return ("argmax", (v,), axis), shape[:axis] + shape[axis + 1:]
    return (op, (v,), axis), shape


def _reshaped(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A reshape merging two adjacent dimensions or splitting one into two."""
    if len(shape) >= 2 and draw(st.booleans()):
        d = draw(st.integers(0, len(shape) - 2))
        return shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:]
    d = draw(st.integers(0, len(shape) - 1))
    divisors = [k for k in (2, 4, 8) if shape[d] % k == 0 and k < shape[d]]
    if not divisors or len(shape) >= 3:
        return shape[:-1] + (shape[-1],) if len(shape) < 2 else \
            shape[:-2] + (shape[-2] * shape[-1],)
    k = draw(st.sampled_from(divisors))
    return shape[:d] + (k, shape[d] // k) + shape[d + 1:]


# --------------------------------------------------------------------------- the real program

def _axis_types(recipe: Recipe) -> tuple:
    import jax
    kinds = {"A": jax.sharding.AxisType.Auto, "E": jax.sharding.AxisType.Explicit}
    return tuple(kinds[t] for t in recipe.axis_types or "A" * len(recipe.mesh))


def _jax_mesh(recipe: Recipe) -> Any:
    import jax
    import numpy as np
    devices = jax.devices()[:8]
    if recipe.devices:
        devices = [devices[k] for k in recipe.devices]
    elif recipe.reversed_devices:
        devices = devices[::-1]
    return jax.sharding.Mesh(np.array(devices).reshape(recipe.mesh), NAMES[:len(recipe.mesh)],
                             axis_types=_axis_types(recipe))


def abstract_mesh(recipe: Recipe) -> Any:
    """The recipe's mesh without devices (jax.sharding.AbstractMesh)."""
    import jax
    return jax.sharding.AbstractMesh(recipe.mesh, NAMES[:len(recipe.mesh)],
                                     axis_types=_axis_types(recipe))


def spec_of(split: tuple) -> Any:
    """The PartitionSpec a drawn split writes (``"?"``: UNCONSTRAINED)."""
    import jax
    P = jax.sharding.PartitionSpec
    return P(*(P.UNCONSTRAINED if e == "?" else e for e in split))


def function_of(recipe: Recipe, mesh: Any = None) -> Any:
    """The real function a recipe describes (its constraints over ``mesh``; None: the
    recipe's concrete mesh)."""
    import jax.numpy as jnp
    from jax import lax
    mesh = _jax_mesh(recipe) if mesh is None else mesh

    def step(kind: str, args: list, param: Any) -> Any:
        if kind == "unary":
            return getattr(jnp, param)(args[0]) if param != "neg" else -args[0]
        if kind == "binary":
            return {"add": jnp.add, "mul": jnp.multiply, "sub": jnp.subtract,
                    "max": jnp.maximum}[param](*args)
        if kind == "broadcast_add":
            return args[0] + args[1]
        if kind == "scalar":
            return args[0] * 2.0
        if kind == "dot":
            return jnp.matmul(args[0], args[1])
        if kind == "reduce":
            op, axis = param
            return args[0].sum(axis) if op == "sum" else args[0].max(axis)
        if kind == "transpose":
            return jnp.transpose(args[0], param)
        if kind == "reshape":
            return args[0].reshape(param)
        if kind == "broadcast":
            where, shape = param
            return lax.broadcast_in_dim(args[0], shape, tuple(
                d if d < where else d + 1 for d in range(len(shape) - 1)))
        if kind == "convert":
            return args[0].astype(jnp.bfloat16)
        return more_step(kind, args, param, mesh)

    def f(*inputs: Any) -> Any:
        values: list = []
        for kind, operands, param in recipe.steps:
            values.append(inputs[param] if kind == "input" else
                          step(kind, [values[k] for k in operands], param))
        return tuple(values[k] for k in recipe.outputs)

    return f


def more_step(kind: str, args: list, param: Any, mesh: Any) -> Any:
    """The real value of a constraint, an inner jit with shardings, a further primitive's
    step or a block (over ``mesh``)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    x = args[0]
    if kind == "constrain":
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(
            mesh, spec_of(param)))
    if kind == "reshard":   # to a split over Explicit axes only (JAX refuses Auto ones)
        return jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, spec_of(param)))
    if kind == "shard_map":   # every axis manual; the body elementwise
        return jax.shard_map(lambda t: jnp.cos(t) * 2.0, mesh=mesh, in_specs=spec_of(param),
                             out_specs=spec_of(param))(x)
    if kind == "shard_map_auto":
        return _auto_map_of(param, x, mesh)
    if kind in ("constrain_other", "inner_other"):   # over another mesh of its devices
        other, split = param
        names = dict(zip(NAMES, OTHER))
        placed = jax.sharding.NamedSharding(_other_of(mesh, other), spec_of(tuple(
            None if e is None else names[e] if isinstance(e, str) else
            tuple(names[a] for a in e) for e in split)))
        if kind == "constrain_other":
            return jax.lax.with_sharding_constraint(x, placed)
        return jax.jit(lambda t: jnp.sin(t) * 2.0, in_shardings=placed)(x)
    if kind == "inner":
        ins, outs = (None if s is None else jax.sharding.NamedSharding(mesh, spec_of(s))
                     for s in param)
        return jax.jit(lambda t: jnp.sin(t) * 2.0, in_shardings=ins, out_shardings=outs)(x)
    if kind == "block":
        return _block(param, args)
    if kind == "flow":
        return _flow(param, args)
    if kind == "flow_led":
        return _flow_led(param, args, mesh)
    if kind == "concat":
        return jnp.concatenate(args, param)
    if kind == "where":
        return jnp.where(x > args[1], x, args[1])
    if kind == "pad":
        return jnp.pad(x, [(1, 1) if d == param else (0, 0) for d in range(x.ndim)])
    if kind == "argmax":
        return jnp.argmax(x, param).astype(jnp.float32)
    if kind == "sort":
        return jnp.sort(x, param)
    if kind == "cumsum":
        return jnp.cumsum(x, param)
    if kind == "squeeze":
        return lax.squeeze(jnp.expand_dims(x, param), (param,))
    if kind == "iota":
        return x + lax.broadcasted_iota(x.dtype, x.shape, param)
    axis, n = param
    if kind == "slice":
        return lax.slice_in_dim(x, 0, n, axis=axis)
    if kind == "take":
        return jnp.take(x, jnp.arange(n) % x.shape[axis], axis=axis)
    return lax.dynamic_slice_in_dim(x, 1 % (x.shape[axis] - n + 1), n, axis=axis)


def _other_of(mesh: Any, shape: tuple) -> Any:
    """Another mesh of ``mesh``'s devices in their order, of ``shape`` and axes OTHER (over
    an abstract mesh, an abstract one)."""
    import jax
    import numpy as np
    kinds = tuple(mesh.axis_types)[:1] * len(shape)
    if isinstance(mesh, jax.sharding.AbstractMesh):
        return jax.sharding.AbstractMesh(shape, OTHER[:len(shape)], axis_types=kinds)
    return jax.sharding.Mesh(np.array(list(mesh.devices.flat)).reshape(shape),
                             OTHER[:len(shape)], axis_types=kinds)


def _auto_map_of(param: tuple, x: Any, mesh: Any) -> Any:
    """The real shard_map of :func:`_auto_map` over ``x``."""
    import jax
    import jax.numpy as jnp
    split, manual, body = param
    spec = spec_of(split)
    if body == "transpose":
        fn, out = (lambda t: jnp.transpose(t) * 2.0), spec_of(split[::-1])
    elif body == "psum":   # (over the axes the spec names: the ones its operand varies over)
        named = tuple(a for e in split for a in ((e,) if isinstance(e, str) else e or ()))
        # (summed in float32: a bfloat16 psum in a shard_map leaving axes automatic aborts
        # XLA's CPU compiler in jax 0.10.2, "Invalid binary instruction opcode copy")
        fn, out = (lambda t: jax.lax.psum(jnp.cos(t).astype(jnp.float32), named) if named
                   else jnp.cos(t)), spec_of(())
    else:
        fn, out = (lambda t: jnp.cos(t) * 2.0), spec
    return jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=out,
                         axis_names=set(manual))(x)


def _flow(name: str, args: list) -> Any:
    """A control-flow step over ``x`` and a second value (a scan's xs)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    x, w = args
    if name.startswith("scan"):
        carry, ys = lax.scan(lambda c, t: ((jnp.sin(c) + t).astype(c.dtype), c * 2.0), x, w)
        return carry if name == "scan carry" else ys
    if name == "while":
        return lax.while_loop(lambda s: s[1] < 3, lambda s: (
            (jnp.sin(s[0]) * w).astype(s[0].dtype), s[1] + 1), (x, 0))[0]
    if name == "cond":
        return lax.cond(x.sum() > 0, lambda t, u: jnp.sin(t) + u, lambda t, u: t * u, x, w)
    return jax.checkpoint(lambda t, u: jnp.sin(t) * u)(x, w)


def _flow_led(param: tuple, args: list, mesh: Any) -> Any:
    """A loop whose body, or a cond one branch of which, returns a constraint's result (a
    carry or a result whose sources may end apart: PROP-13)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    which, split = param
    x, w = args

    def put(v: Any) -> Any:
        return jax.lax.with_sharding_constraint(v, jax.sharding.NamedSharding(
            mesh, spec_of(split)))
    if which == "scan":
        return lax.scan(lambda c, t: (put(jnp.sin(c) + t).astype(c.dtype), None), x, w)[0]
    if which == "while":
        return lax.while_loop(lambda s: s[1] < 3, lambda s: (
            put(jnp.sin(s[0]) * w).astype(s[0].dtype), s[1] + 1), (x, 0))[0]
    branches = [lambda t, u: put(jnp.sin(t) + u), lambda t, u: t * u]
    if which == "cond second":
        branches = branches[::-1]
    return lax.cond(x.sum() > 0, *branches, x, w)


def _block(name: str, args: list) -> Any:
    """A realistic block over ``x`` and its weights."""
    import jax
    import jax.numpy as jnp
    x, *w = args

    def mlp(w1: Any, w2: Any) -> Any:
        return jnp.maximum(x @ w1, 0.0) @ w2
    if name == "mlp":
        return mlp(*w)
    if name == "mlp_grad":
        return jax.grad(lambda w1: jnp.mean(mlp(w1, w[1]) ** 2))(w[0])
    if name == "layernorm":
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w[0] + w[1]
    if name == "attention":
        q, k, v = (x @ m for m in w)
        return jax.nn.softmax(q @ k.T / 4.0, axis=-1) @ v
    return jax.grad(lambda m: jnp.mean(jnp.tanh(x @ m) ** 2))(w[0])


def arguments_of(recipe: Recipe) -> list:
    import jax
    import jax.numpy as jnp
    mesh = _jax_mesh(recipe)
    return [jax.device_put(jnp.ones(shape, jnp.float32),
                           jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*split)))
            for shape, split in recipe.inputs]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one recipe gave: per result, JAX's sharding and the spec's (UNSPECIFIED: it
    abstained), the reasons it gave, and the primitives of the program; ``spelled``, the
    spec's results spelled without the pipeline (PROP-7) on the concrete mesh, and
    ``abstract`` on the recipe's abstract mesh, held to JAX's results over that mesh
    (``over``); ``refused``: JAX refused the drawn program (an Explicit axes' type rule)."""

    jax: tuple
    spec: tuple
    undetermined: tuple
    primitives: tuple[str, ...]
    spelled: tuple = ()
    abstract: tuple = ()
    over: Any = None
    refused: str = ""
    mismatch: str = ""

    @property
    def disagreements(self) -> list[str]:
        from shardlaw.spec import UNSPECIFIED, from_jax
        out = [self.mismatch] if self.mismatch else []
        for k, (real, said) in enumerate(zip(self.jax, self.spec)):
            if said is not UNSPECIFIED and from_jax(real) != said:
                out.append(f"result {k}: JAX {real}, spec {said!r}")
        for k, (real, said) in enumerate(zip(self.jax, self.spelled)):
            if said is not UNSPECIFIED and _named(from_jax(real)) != _named(said):
                out.append(f"result {k} spelled: JAX {real}, spec {said!r}")
        for k, (real, said) in enumerate(zip(self.jax, self.abstract)):
            if said is not UNSPECIFIED and (self.over, from_jax(real).spec) != _named(said):
                out.append(f"result {k} over the abstract mesh: JAX {real.spec}, spec {said!r}")
        return out

    @property
    def abstained(self) -> bool:
        from shardlaw.spec import UNSPECIFIED
        return any(s is UNSPECIFIED for s in self.spec)

    @property
    def abstract_abstained(self) -> bool:
        from shardlaw.spec import UNSPECIFIED
        return any(s is UNSPECIFIED for s in self.abstract)


def _named(sharding: Any) -> Any:
    return (getattr(sharding, "mesh", None), getattr(sharding, "spec", sharding))


def _run(recipe: Recipe, mesh: Any, args: list) -> tuple:
    """The jitted recipe over ``mesh`` (its out shardings too) and its description."""
    import jax
    from shardlaw.spec.bridge.program import describe_program
    given = tuple(None if split is None else jax.sharding.NamedSharding(mesh, spec_of(split))
                  for split in recipe.out_shardings)
    f = function_of(recipe, mesh)
    jitted = jax.jit(f, out_shardings=given) if given else jax.jit(f)
    return jitted, describe_program(jitted, *args)


def _abstract_run(recipe: Recipe) -> tuple:
    """The spec's results of the recipe described over its abstract mesh (PROP-7)."""
    import jax
    import jax.numpy as jnp
    from shardlaw.spec import from_jax
    from shardlaw.spec.program.propagation_spelling import predicted_out_shardings
    mesh = abstract_mesh(recipe)
    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(*split))) for shape, split in recipe.inputs]
    _, program = _run(recipe, mesh, args)
    return predicted_out_shardings(program), from_jax(
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())).mesh


def compare_recipe(recipe: Recipe) -> Outcome:
    """Run the recipe under jax.jit and ask the spec about the same program, and about it
    over the recipe's abstract mesh."""
    from shardlaw.spec import explain_program
    from shardlaw.spec.program.propagation_spelling import predicted_out_shardings
    args = arguments_of(recipe)
    try:
        jitted, program = _run(recipe, _jax_mesh(recipe), args)
    except Exception as error:   # (over Explicit axes: a type rule of JAX refuses it)
        if "E" not in recipe.axis_types:
            raise
        TALLY["refused by JAX"] += 1
        return Outcome((), (), (), (), refused=type(error).__name__)
    verdict = explain_program(program)
    try:
        results = jitted(*args)
    except Exception as error:   # (refused when compiled or run: OUT-2, say)
        return _refused_when_run(type(error).__name__, verdict)
    if not verdict.accepted:
        TALLY["disagree"] += 1
        return Outcome((), (), (), (), mismatch=f"JAX ran it, the spec refused: "
                       f"{verdict.message}")
    real = tuple(r.sharding for r in results)
    primitives = tuple(sorted({getattr(eq, "primitive", eq.kind) for eq in program.equations}))
    abstract, over = _abstract_run(recipe)
    outcome = Outcome(real, verdict.out_shardings, verdict.undetermined, primitives,
                      predicted_out_shardings(program), abstract, over)
    _tally(outcome, recipe)
    return outcome


def _refused_when_run(error: str, verdict: Any) -> Outcome:
    """A program JAX traces but refuses when it compiles or runs it (a placement the
    compiler chose that an out sharding's mesh cannot spell: OUT-2's IndivisibleError),
    held to the spec's verdict: refused with JAX's class, or left open by propagation."""
    TALLY["refused by JAX"] += 1
    if not verdict.accepted and error in (verdict.jax_error, verdict.error_type):
        TALLY["refused when run: the spec refuses alike"] += 1
        return Outcome((), (), (), (), refused=error)
    if verdict.accepted and verdict.undetermined:
        TALLY["refused when run: the spec leaves it open"] += 1
        return Outcome((), (), (), (), refused=error)
    said = f"refused with {verdict.error_type} ({verdict.rule})" if not verdict.accepted \
        else "accepted"
    TALLY["disagree"] += 1
    return Outcome((), (), (), (), refused=error,
                   mismatch=f"JAX refused when running with {error}, the spec {said}")


def _features(recipe: Recipe) -> set:
    """What of the recipe this slice of the property added: a constraint with
    UNCONSTRAINED dimensions, an inner jit with shardings, a shard_map."""
    found = set()
    for kind, _, param in recipe.steps:
        if kind == "constrain" and "?" in param:
            found.add("with UNCONSTRAINED")
        elif kind == "inner" and param != (None, None):
            found.add("with an inner jit's shardings")
        elif kind == "shard_map":
            found.add("with a shard_map")
        elif kind == "shard_map_auto":
            found.add("with a shard_map leaving axes automatic")
        elif kind in ("constrain_other", "inner_other"):
            found.add("over two meshes")
        elif kind == "reshard":
            found.add("with a reshard")
        elif kind == "flow":
            found.add("with control flow")
        elif kind == "flow_led":
            found.add("with a join a constraint leads")
    return found


def _tally(outcome: Outcome, recipe: Recipe) -> None:
    kind = "mixed" if "A" in recipe.axis_types and "E" in recipe.axis_types else \
        "explicit" if recipe.axis_types else "auto"
    verdict = "disagree" if outcome.disagreements else \
        "abstain" if outcome.abstained else "agree"
    TALLY[verdict] += 1
    TALLY[f"{kind}: {verdict}"] += 1
    TALLY["abstract: " + ("abstain" if outcome.abstract_abstained else "predicted")] += 1
    for feature in _features(recipe):
        TALLY[f"{feature}: {verdict}"] += 1
    if not outcome.abstained and not outcome.disagreements:
        for name in outcome.primitives:
            TALLY[f"held: {name}"] += 1
    for _, why in outcome.undetermined:
        TALLY[f"why: {why.split(': ', 1)[-1][:70]}"] += 1


def deep_run(examples: int, seed: int, max_steps: int = 7, report: Any = None,
             only_explicit: bool = False) -> dict:
    """A deep run of the property: ``examples`` drawn programs from ``seed``; the tally
    (outcomes, reasons, programs held per primitive) and the recipes that disagreed,
    written to the file ``report`` (if given) after every 50 programs as well;
    ``only_explicit``: meshes with Explicit axes only."""
    drawn = recipes(max_steps=max_steps, explicit=True)
    if only_explicit:
        drawn = drawn.filter(lambda r: "E" in r.axis_types)
    return counted_run(drawn, compare_recipe, TALLY,
                       ("agree", "abstain", "disagree", "refused by JAX"), examples, seed,
                       report)


def counted_run(strategy: Any, compare: Any, tally: Any, outcomes: tuple[str, ...],
                examples: int, seed: int, report: Any = None) -> dict:
    """``examples`` recipes drawn from ``strategy`` with ``seed``, each held by ``compare``
    (its outcome's ``disagreements`` collected, not raised); ``tally`` cleared first and
    written with them to ``report`` every 50 recipes counted in ``outcomes``, and at the
    end."""
    import json

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    found: list = []

    def write() -> None:
        if report is not None:
            with open(report, "w") as out:
                json.dump({"tally": dict(tally), "disagreements": found}, out)

    @seeded(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(recipe: Recipe) -> None:
        outcome = compare(recipe)
        if outcome.disagreements:
            found.append(repr((recipe, outcome.disagreements)))
        if sum(tally[k] for k in outcomes) % 50 == 0:
            write()

    tally.clear()
    run()
    write()
    return {"tally": dict(tally), "disagreements": found}


if __name__ == "__main__":   # ... propagation_harness N SEED [REPORT [explicit]]
    import json
    import sys

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    print(json.dumps(deep_run(int(sys.argv[1]), int(sys.argv[2]),
                              report=sys.argv[3] if len(sys.argv) > 3 else None,
                              only_explicit=sys.argv[4:5] == ["explicit"])))

"""Hold the spec's 0.4.13 edition to a real ``jax.jit`` of JAX 0.4.13, in its own environment.

JAX 0.4.13 (with numpy < 2) cannot share a Python environment with the JAX 0.10.2 the rest
of the project runs on, so the real calls run in a child process: the venv's Python runs
``properties/older_worker.py``, which reads calls as JSON lines and answers each with what
``jax.jit`` did. This module writes a :class:`~shardlaw.spec.jit.call.Call` as that JSON
(:func:`call_json`), keeps one worker per environment (:class:`OlderJax`), reads the answer
back into spec values, fills the call's compiler oracle from it and compares the spec's
verdict for edition 0.4.13 with it (:func:`compare_older`).

Only calls that 0.4.13 can express are sent (:func:`expressible`): no Explicit axes, no
abstract meshes or abstract arguments, no memory kinds, no layouts, no ``jax.set_mesh``
context, no GSPMDSharding leaves (0.4.13 makes them from an XLA proto only), and no
``backend=``. The environment is found through ``SHARDLAW_JAX_0413`` (a Python
executable), else ``/work/venv0413/bin/python``, else ``.venv0413/bin/python`` under the
repository; :func:`older_python` answers None when there is none.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import pathlib
import re
import subprocess
from typing import Any

from shardlaw.properties import hits
from shardlaw.spec import UNSPECIFIED, NamedSharding, SingleDeviceSharding
from shardlaw.spec.core.hlo import parse_hlo
from shardlaw.spec.core.pytree import leaves_with_paths
from shardlaw.spec.core.values import UNCONSTRAINED, AxisType, Mesh, PartitionSpec
from shardlaw.spec.jit.call import Arg, Call, Static, Verdict
from shardlaw.spec.jit.layouts import Format, is_layout
from shardlaw.spec.jit.pipeline import jit_call
from shardlaw.properties.jit_harness import sharding_differences, with_input_choices
from shardlaw.spec.core.shardings import GSPMDSharding

__all__ = ["OLDER", "SOURCE", "older_python", "expressible", "call_json", "OlderJax",
           "compare_older", "older_hit_counts", "older_calls", "block_calls"]

OLDER = "0.4.13"
SOURCE = "jit-0.4.13"   # the hit counts' source (shardlaw.properties.hits)
WORKER = pathlib.Path(__file__).with_name("older_worker.py")
_REPO = pathlib.Path(__file__).resolve().parents[1]


def older_python() -> str | None:
    """The Python executable of the jax 0.4.13 environment, or None when there is none."""
    given = os.environ.get("SHARDLAW_JAX_0413")
    candidates = [given] if given else [
        "/work/venv0413/bin/python", str(_REPO / ".venv0413" / "bin" / "python")]
    for candidate in candidates:
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def older_hit_counts() -> dict[str, tuple[int, int]]:
    """rule ID -> (accepting hits, rejecting hits) over the calls compared with 0.4.13."""
    return hits.counts(SOURCE)


# --------------------------------------------------------------------------- expressible

def _sharding_expressible(s: Any) -> bool:
    if s is None or s is UNSPECIFIED:
        return True
    if isinstance(s, PartitionSpec):
        return not (s.reduced or s.unreduced)
    if isinstance(s, SingleDeviceSharding):
        return s.memory_kind in (None, "device")
    if isinstance(s, NamedSharding):
        return (isinstance(s.mesh, Mesh) and s.memory_kind in (None, "device")
                and all(t == AxisType.Auto for t in s.mesh.axis_types)
                and _sharding_expressible(s.spec))
    return False   # GSPMDSharding, Format, a layout, an abstract mesh's sharding


def expressible(call: Call) -> bool:
    """Whether JAX 0.4.13 can express ``call`` (see the module's description)."""
    o = call.options
    if call.resource_mesh is not None and any(
            t != AxisType.Auto for t in call.resource_mesh.axis_types):
        return False
    if call.context_mesh is not None or o.backend is not None or call.inside \
            or call.process_count != 1 or o.donate_argnums or o.donate_argnames \
            or o.static_argnames:
        return False
    for tree in (o.in_shardings, o.out_shardings):
        if tree is not UNSPECIFIED and not all(
                _sharding_expressible(leaf) for _, leaf in leaves_with_paths(tree)):
            return False
    for tree in (call.args, call.kwargs, call.aot_args or (), call.aot_kwargs or {}):
        for _, leaf in leaves_with_paths(tree):
            if isinstance(leaf, Arg) and (leaf.kind == "abstract" or leaf.layout is not None
                                          or not _sharding_expressible(leaf.sharding)):
                return False
            if isinstance(leaf, Static) and not isinstance(leaf.value, (int, str, type(None))):
                return False
    return True


# --------------------------------------------------------------------------- writing

def _tree(node: Any, leaf: Any) -> dict:
    if type(node) is tuple:
        return {"tuple": [_tree(n, leaf) for n in node]}
    if type(node) is list:
        return {"list": [_tree(n, leaf) for n in node]}
    if type(node) is dict:
        return {"dict": {k: _tree(v, leaf) for k, v in node.items()}}
    return {"leaf": leaf(node)}


def _spec(spec: PartitionSpec) -> list:
    return [list(e) if isinstance(e, tuple) else e for e in spec]


def _mesh_json(mesh: Mesh) -> dict:
    return {"shape": list(mesh.axis_sizes), "names": list(mesh.axis_names),
            "devices": list(mesh.devices.id_tuple())}


def _sharding(s: Any) -> Any:
    if s is None:
        return None
    if isinstance(s, PartitionSpec):
        return {"type": "spec", "spec": _spec(s)}
    if isinstance(s, SingleDeviceSharding):
        return {"type": "single", "device": s.device.id}
    return {"type": "named", "spec": _spec(s.spec), "mesh": _mesh_json(s.mesh)}


def _leaf(arg: Any) -> dict:
    if isinstance(arg, Static):
        return {"kind": "static", "value": arg.value}
    return {"kind": arg.kind, "shape": list(arg.shape), "dtype": arg.dtype,
            "sharding": _sharding(arg.sharding)}


def _out(out: Any) -> dict:
    return {"shape": list(out.shape), "dtype": out.dtype, "source": out.source}


def call_json(call: Call) -> dict:
    """``call`` in the worker's JSON form (an expressible call: see :func:`expressible`)."""
    o = call.options
    shardings = {name: "unspecified" if tree is UNSPECIFIED else _tree(tree, _sharding)
                 for name, tree in (("in_shardings", o.in_shardings),
                                    ("out_shardings", o.out_shardings))}
    return {"args": _tree(call.args, _leaf), "kwargs": _tree(call.kwargs, _leaf),
            "outputs": _tree(call.outputs, _out), "uses": list(call.uses) if call.uses
            is not None else None, "static_argnums": list(o.static_argnums),
            "keep_unused": o.keep_unused, "device": o.device,
            "default_device": call.default_device, **shardings,
            "aot_args": None if call.aot_args is None else _tree(call.aot_args, _leaf),
            "aot_kwargs": None if call.aot_kwargs is None else _tree(call.aot_kwargs, _leaf),
            "resource_mesh": None if call.resource_mesh is None else _mesh_json(
                call.resource_mesh)}


# --------------------------------------------------------------------------- the worker

class OlderJax:
    """One child process running jax 0.4.13's ``jax.jit`` on calls sent to it."""

    _shared: "OlderJax | None" = None

    def __init__(self, python: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
        env["PYTHONNOUSERSITE"] = "1"
        env.pop("PYTHONPATH", None)
        self.process = subprocess.Popen(
            [python, "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env)
        self.versions = self.ask({"version": True})

    @classmethod
    def shared(cls) -> "OlderJax":
        """The one worker of this process, started on first use."""
        if cls._shared is None or cls._shared.process.poll() is not None:
            python = older_python()
            if python is None:
                raise RuntimeError("no jax 0.4.13 environment (set SHARDLAW_JAX_0413)")
            cls._shared = cls(python)
            atexit.register(cls._shared.close)
        return cls._shared

    def ask(self, message: dict) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the jax 0.4.13 worker stopped")
        return json.loads(line)

    def run(self, call: Call) -> dict:
        """What jax 0.4.13's jit did with ``call``."""
        hits.record_jax_calls(1)
        answer = self.ask(call_json(call))
        if "harness_error" in answer:
            raise RuntimeError(f"the 0.4.13 worker failed: {answer['harness_error']}")
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()   # type: ignore[union-attr]
            self.process.wait(timeout=30)


# --------------------------------------------------------------------------- reading back

# 0.4.13 writes a tiling over one device as a list (``{devices=[1,1]0}``), which 0.10.2's
# text (and the spec's reader) writes as replication: the same single block.
_ONE_DEVICE_TILING = re.compile(r"^\{devices=\[[1,]+\][0-9]+\}$")


def older_hlo(text: str) -> Any:
    """An HLO sharding as 0.4.13 writes it, read as a spec value."""
    return parse_hlo("{replicated}" if _ONE_DEVICE_TILING.match(text) else text)


def _mesh(written: dict) -> Mesh:
    return Mesh(tuple(written["shape"]), tuple(written["names"]), tuple(written["devices"]))


def result_sharding(written: dict) -> Any:
    """A result's sharding, as 0.4.13 reported it, as a spec value."""
    if written["type"] == "NamedSharding":
        spec = PartitionSpec(*[tuple(e) if isinstance(e, list) else e
                               for e in written["spec"]])
        return NamedSharding(_mesh(written["mesh"]), spec)
    if written["type"] == "SingleDeviceSharding":
        return SingleDeviceSharding(written["device"])
    return GSPMDSharding(tuple(written["devices"]), older_hlo(written["hlo"]))


def _open_results(call: Call) -> list[bool]:
    """Per flat result, whether out_shardings leaves it to the compiler (as far as known)."""
    from shardlaw.spec.core.pytree import structure
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.jit.matching import match_out_shardings

    count = len(list(leaves_with_paths(call.outputs)))
    if call.options.device is not None:
        return [False] * count
    try:
        flat = match_out_shardings(call.options.out_shardings, structure(call.outputs))
    except Rejection:
        return [True] * count
    return [s is None or s is UNSPECIFIED for s in flat]


def with_older_oracle(call: Call, answer: dict) -> Call:
    """``call`` with what 0.4.13's tracing and compiler decided: the inputs the function
    uses, the HLO sharding of each result jit left open, and (AOT) of each open input."""
    changes: dict[str, Any] = {}
    if answer.get("uses") is not None:
        changes["uses"] = tuple(answer["uses"])
    results = answer.get("results")
    if results:
        open_ = _open_results(call)
        if len(open_) == len(results):
            changes["compiler"] = tuple(older_hlo(r["hlo"]) if o else None
                                        for r, o in zip(results, open_))
    if answer.get("inputs") is not None:
        taken = [None if h is None else older_hlo(h) for h in answer["inputs"]]
        call = with_input_choices(call, taken)
    return dataclasses.replace(call, **changes) if changes else call


# --------------------------------------------------------------------------- comparing

def compare_older(call: Call, worker: OlderJax | None = None
                  ) -> tuple[Verdict, dict, list[str]]:
    """Run ``call`` in jax 0.4.13 and through the spec's 0.4.13 edition; the verdict, the
    worker's answer and the disagreements (empty when the two agree)."""
    answer = (worker or OlderJax.shared()).run(call)
    call = with_older_oracle(call, answer)
    verdict = jit_call(call, jax=OLDER)
    problems: list[str] = []
    error = answer.get("error")
    if verdict.accepted and error is not None:
        problems.append(f"spec accepts, jax 0.4.13 raised {error['class']} at {answer['stage']}"
                        f": {error['message'][:300]}")
    elif not verdict.accepted and error is None:
        problems.append(f"spec rejects with {verdict.rule} ({verdict.jax_error}), jax 0.4.13 "
                        f"accepted: {verdict.message}")
    elif not verdict.accepted:
        assert error is not None
        if (verdict.error_type, verdict.jax_error) != (error["base"], error["class"]):
            problems.append(f"spec rejects with {verdict.rule} as {verdict.jax_error} "
                            f"({verdict.error_type}), jax 0.4.13 raised {error['class']} "
                            f"({error['base']}): {error['message'][:300]}")
    else:
        problems += _compare_results(verdict, answer)
    if not problems:
        for rule_id in verdict.trace:
            hits.record(SOURCE, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)
    return verdict, answer, problems


def _compare_results(verdict: Verdict, answer: dict) -> list[str]:
    problems = []
    results = answer["results"]
    if results and verdict.device_assignment is not None and \
            tuple(results[0]["devices"]) != tuple(verdict.device_assignment):
        problems.append(f"device assignment: spec {list(verdict.device_assignment)}, jax "
                        f"0.4.13 {results[0]['devices']}")
    committed = answer.get("committed")
    for i, (path, mine, written) in enumerate(zip(verdict.out_paths, verdict.out_shardings,
                                                  results)):
        problems += sharding_differences(path, mine, result_sharding(written),
                                         tuple(written["shape"]), jax=f"jax {OLDER}")
        if committed and verdict.out_committed[i] != committed[i]:
            problems.append(f"{path}: spec says committed={verdict.out_committed[i]}, jax "
                            f"0.4.13 {committed[i]}")
    return problems



# --------------------------------------------------------------------------- drawing

def _older_sharding(s: Any) -> Any:
    """``s`` as 0.4.13 can write it: no memory kind, Auto axes, a concrete mesh; None where
    it has no such form (a GSPMDSharding, a Format)."""
    if isinstance(s, SingleDeviceSharding):
        return SingleDeviceSharding(s.device)
    if isinstance(s, PartitionSpec):
        return PartitionSpec(*s)
    if isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh):
        mesh = s.mesh
        auto = Mesh(mesh.axis_sizes, mesh.axis_names, mesh.devices,
                    (AxisType.Auto,) * len(mesh.axis_names))
        return NamedSharding(auto, PartitionSpec(*s.spec))
    return None if s is not None and s is not UNSPECIFIED else s


def _auto(mesh: Mesh) -> Mesh:
    return Mesh(mesh.axis_sizes, mesh.axis_names, mesh.devices,
                (AxisType.Auto,) * len(mesh.axis_names))


def _block_mesh(call: Call) -> Mesh | None:
    """The mesh of a ``with mesh:`` block for ``call``: its concrete context mesh, else the
    mesh of the first NamedSharding among its options and arguments (None: there is none)."""
    if isinstance(call.context_mesh, Mesh):
        return _auto(call.context_mesh)
    o = call.options
    for tree in (o.in_shardings, o.out_shardings, call.args, call.kwargs):
        if tree is UNSPECIFIED:
            continue
        for _, leaf in leaves_with_paths(tree):
            s = leaf.sharding if isinstance(leaf, Arg) else leaf
            if isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh):
                return _auto(s.mesh)
    return None


def older_form(call: Call, block: bool = False) -> Call:
    """``call`` written as 0.4.13 can express it: memory kinds dropped, shardings 0.4.13
    cannot write left out (None) or their argument dropped, and the ``jax.set_mesh``
    context dropped; with ``block``, the call made through pjit inside a ``with mesh:``
    block (PJIT-1) over the context mesh or the call's first NamedSharding's mesh; still
    to be checked with :func:`expressible`."""
    from shardlaw.spec.core.pytree import map_leaves

    def leaf_of(s: Any) -> Any:
        return _older_sharding(s)

    def arg_of(arg: Any) -> Any:
        if not isinstance(arg, Arg) or arg.sharding is None:
            return arg
        s = _older_sharding(arg.sharding)
        if s is None:
            return Arg.numpy(arg.shape, arg.dtype)
        return dataclasses.replace(arg, sharding=s)

    o = call.options
    trees = {name: tree if tree is UNSPECIFIED else map_leaves(leaf_of, tree, none_is_leaf=True)
             for name, tree in (("in_shardings", o.in_shardings),
                                ("out_shardings", o.out_shardings))}
    options = dataclasses.replace(o, **trees)
    resource = _block_mesh(call) if block else None
    return dataclasses.replace(
        call, options=options, context_mesh=None, resource_mesh=resource,
        args=map_leaves(arg_of, call.args),
        kwargs=map_leaves(arg_of, call.kwargs),
        aot_args=None if call.aot_args is None else map_leaves(arg_of, call.aot_args),
        aot_kwargs=None if call.aot_kwargs is None else map_leaves(arg_of, call.aot_kwargs))


def within_known_defects(call: Call) -> bool:
    """Whether ``call`` avoids two defects of jax 0.4.13 itself, which the spec does not
    model (notes/older-jax-facts.md): ``.lower()`` of a jit given ``device=`` fails in its
    pytree code ("Too few leaves for PyTreeDef"), and a program with no results over several
    devices can fail in XLA ("Output sharding is inconsistent with the tuple result")."""
    if call.aot_args is not None and call.options.device is not None:
        return False
    return bool(list(leaves_with_paths(call.outputs)))


def older_calls(max_devices: int = 8) -> Any:
    """Jit calls that JAX 0.4.13 can express: :func:`calls` of the main suite, written as
    0.4.13 writes them (:func:`older_form`; about half made through pjit inside a ``with
    mesh:`` block), away from its known defects."""
    from hypothesis import strategies as st

    from shardlaw.properties.call_strategies import calls

    drawn = st.tuples(calls(max_devices=max_devices, aot=True, layouts=False), st.booleans())
    return drawn.map(lambda pair: older_form(*pair)).filter(
        lambda call: expressible(call) and within_known_defects(call))


def block_calls(max_devices: int = 8) -> Any:
    """The calls of :func:`older_calls` made through pjit inside a ``with mesh:`` block."""
    return older_calls(max_devices).filter(lambda call: call.resource_mesh is not None)


def lacks_in_0_4_13(call: Call) -> bool:
    """Whether ``call`` uses what JAX 0.4.13 does not have (a second reading, beside the
    spec's CALL-1, of the same facts: a context mesh, an abstract mesh, mesh axis types, a
    memory kind, reduced axes or a layout)."""
    def lacking(s: Any) -> bool:
        if isinstance(s, Format) or is_layout(s):
            return True
        if isinstance(s, PartitionSpec):
            return bool(s.reduced or s.unreduced)
        if isinstance(s, (NamedSharding, SingleDeviceSharding, GSPMDSharding)):
            if s.memory_kind not in (None, "device"):
                return True
            if isinstance(s, NamedSharding):
                return (not isinstance(s.mesh, Mesh)
                        or any(t != AxisType.Auto for t in s.mesh.axis_types)
                        or lacking(s.spec))
        return False

    if call.context_mesh is not None or (call.resource_mesh is not None and any(
            t != AxisType.Auto for t in call.resource_mesh.axis_types)):
        return True
    for tree in (call.options.in_shardings, call.options.out_shardings):
        if tree is not UNSPECIFIED and any(
                lacking(leaf) for _, leaf in leaves_with_paths(tree, is_leaf=lambda x: x is None)):
            return True
    for tree in (call.args, call.kwargs, call.aot_args or (), call.aot_kwargs or {}):
        for _, leaf in leaves_with_paths(tree):
            if isinstance(leaf, Arg) and (leaf.layout is not None or lacking(leaf.sharding)):
                return True
    return False


# --------------------------------------------------------------------------- the lowering cache

def compare_cache_older(calls: list[Call], worker: OlderJax | None = None
                        ) -> tuple[list[int], list[str]]:
    """Run ``calls`` in order through one function object and one ``jax.jit`` wrapper of
    jax 0.4.13 (the first call's options) and through the cache model's 0.4.13 edition
    (:func:`~shardlaw.spec.jit.cache.explain_cache`); per call the lowering cache's misses
    as jax 0.4.13 counted them, and the disagreements (CACHE-7 and whether jit refused)."""
    from shardlaw.spec.core.editions import holding
    from shardlaw.spec.jit.cache import CallSite, explain_cache

    answer = (worker or OlderJax.shared()).ask({"sequence": [call_json(c) for c in calls]})
    if "harness_error" in answer:
        raise RuntimeError(f"the 0.4.13 worker failed: {answer['harness_error']}")
    with holding(OLDER):
        table = explain_cache([CallSite(c, "f", "w") for c in calls])
    problems: list[str] = []
    for index, (row, theirs) in enumerate(zip(table, answer["rows"])):
        if (row.rejected is not None) != ("error" in theirs):
            problems.append(f"call {index}: spec {'refuses: ' + row.rejected if row.rejected else 'accepts'}"
                            f", jax 0.4.13 {'raised ' + theirs['error']['class'] if 'error' in theirs else 'accepted'}")
        elif row.misses()["lowering"] != theirs["lowering"]:
            problems.append(f"call {index}: spec says the lowering cache "
                            f"{'missed' if row.misses()['lowering'] else 'was not missed'} "
                            f"({row.why('lowering') or 'hit or not asked'}), jax 0.4.13 counted "
                            f"{theirs['lowering']} miss(es)")
    if not problems:
        for row in table:
            if row.rejected is None and row.at("lowering"):
                hits.record(SOURCE, "CACHE-7", refused=row.at("lowering") == "miss")
    return [r["lowering"] for r in answer["rows"]], problems


def cache_sequences(max_devices: int = 8) -> Any:
    """Sequences of two to five calls of one function through one ``jax.jit`` wrapper, as
    JAX 0.4.13 can express them: one set of options and results, the arguments of one
    shape placed otherwise from call to call (numpy, uncommitted, committed over one of two
    meshes in specs written with or without trailing None, on one device), and the default
    device 0 or 3."""
    from hypothesis import strategies as st

    meshes = (Mesh.iota((2, 4), ("x", "y")), Mesh.iota((2, 4), ("a", "b")),
              Mesh((8,), ("x",), tuple(range(7, -1, -1))))
    shape = (8, 8)
    placements = st.sampled_from(
        [Arg.numpy(shape), Arg.uncommitted(shape), Arg.committed(shape, SingleDeviceSharding(0)),
         Arg.committed(shape, SingleDeviceSharding(3))]
        + [Arg.committed(shape, NamedSharding(m, spec)) for m in meshes
           for spec in (PartitionSpec(m.axis_names[0]), PartitionSpec(m.axis_names[0], None),
                        PartitionSpec(), PartitionSpec(None, m.axis_names[-1]))])
    from shardlaw.spec.jit.call import JitOptions, Out

    @st.composite
    def sequence(draw: Any) -> list[Call]:
        out_sharding = draw(st.sampled_from(
            [UNSPECIFIED, NamedSharding(meshes[0], PartitionSpec("x")),
             SingleDeviceSharding(0)]))
        options = JitOptions(out_shardings=out_sharding, keep_unused=draw(st.booleans()))
        used = draw(st.booleans())
        count = draw(st.integers(2, 5))
        return [Call(args=(draw(placements),), outputs=Out(shape, source=0 if used else None),
                     options=options, uses=(used,), devices=max_devices,
                     default_device=draw(st.sampled_from((0, 0, 3))))
                for _ in range(count)]

    return sequence()


# --------------------------------------------------------------------------- placement

def compare_placement_older(sharding: Any, shape: tuple, worker: OlderJax | None = None
                            ) -> list[str]:
    """Where ``sharding`` (a NamedSharding or SingleDeviceSharding 0.4.13 can write) puts a
    value of ``shape``, by the spec's 0.4.13 edition and by jax 0.4.13: the HLO sharding
    (LOW-1), the shard shape or the class of its refusal (DIV-1), each device's box
    (IDX-1), the replica ids (IDX-2) and full replication (REP-1)."""
    from shardlaw.spec import devices_indices_map, is_fully_replicated, replica_ids, to_hlo
    from shardlaw.spec.core.editions import holding
    from shardlaw.spec.core.rules import Rejection
    from shardlaw.spec.placement.blocks import shard_shape
    from shardlaw.spec.placement.equivalence import hlo_equal

    theirs = (worker or OlderJax.shared()).ask(
        {"placement": {"sharding": _sharding(sharding), "shape": list(shape)}})
    if "harness_error" in theirs:
        raise RuntimeError(f"the 0.4.13 worker failed: {theirs['harness_error']}")
    problems: list[str] = []
    where = f"{sharding!r} for {tuple(shape)}"
    with holding(OLDER):
        if not hlo_equal(to_hlo(sharding, len(shape)), older_hlo(theirs["hlo"])):
            problems.append(f"LOW-1 {where}: spec {to_hlo(sharding, len(shape))}, jax "
                            f"{OLDER} {theirs['hlo']}")
        if is_fully_replicated(sharding) != theirs["fully_replicated"]:
            problems.append(f"REP-1 {where}: spec {is_fully_replicated(sharding)}, jax {OLDER} "
                            f"{theirs['fully_replicated']}")
        try:
            mine = shard_shape(sharding, tuple(shape))
        except Rejection as refusal:
            error = theirs.get("error")
            if error is None or error["class"] != refusal.jax_error:
                problems.append(f"DIV-1 {where}: spec refuses with {refusal.jax_error}, jax "
                                f"{OLDER} {error['class'] if error else theirs['shard_shape']}")
            elif not problems:
                hits.record(SOURCE, "DIV-1", refused=True)
            return problems
        if "error" in theirs:
            return problems + [f"DIV-1 {where}: spec {mine}, jax {OLDER} raised "
                               f"{theirs['error']['class']}"]
        if list(mine) != theirs["shard_shape"]:
            problems.append(f"DIV-1 {where}: spec {mine}, jax {OLDER} {theirs['shard_shape']}")
        boxes = [[d, [list(b) for b in box]] for d, box in
                 devices_indices_map(sharding, tuple(shape)).items()]
        if boxes != theirs["indices"]:
            problems.append(f"IDX-1 {where}: spec {boxes}, jax {OLDER} {theirs['indices']}")
        ids = {str(d): r for d, r in replica_ids(sharding, tuple(shape)).items()}
        if ids != theirs["replica_ids"]:
            problems.append(f"IDX-2 {where}: spec {ids}, jax {OLDER} {theirs['replica_ids']}")
    if not problems:
        for rule_id in ("LOW-1", "DIV-1", "IDX-1", "IDX-2", "REP-1"):
            hits.record(SOURCE, rule_id, refused=False)
    return problems


def older_placements(max_devices: int = 8) -> Any:
    """(sharding, shape) pairs 0.4.13 can write: a NamedSharding over a concrete mesh (its
    axes made Auto, the spec without reduced axes) or a SingleDeviceSharding, no memory
    kind, and a shape for it, divisible or not."""
    from hypothesis import strategies as st

    from shardlaw.properties import strategies as S

    @st.composite
    def pair(draw: Any) -> tuple[Any, tuple]:
        if draw(st.integers(0, 4)) == 0:
            sharding = _older_sharding(draw(S.single_device_shardings(max_devices)))
        else:
            sharding = _older_sharding(draw(S.named_shardings(max_devices)))
        shape = draw(S.shapes_for(sharding, divisible=draw(st.sampled_from((True, True, None)))))
        return sharding, tuple(shape)

    def writable(p: tuple[Any, tuple]) -> bool:
        s = p[0]
        return s is not None and _sharding_expressible(s) and not (
            isinstance(s, NamedSharding) and UNCONSTRAINED in tuple(s.spec))

    return pair().filter(writable)

"""Run a :class:`~shardlaw.spec.jit.call.Call` through ``shardlaw.engine.jit`` and hold it against ``jax.jit`` and the spec.

:func:`compare_engine` builds the call's function and arguments once (as
:mod:`shardlaw.properties.jit_harness` does), runs a fresh ``jax.jit`` and a fresh
``shardlaw.engine.jit`` on them, asks the spec for its verdict, and lists every
disagreement of the engine:

* with JAX — accepted or not, the built-in exception type; for accepted calls each
  result's sharding type, placement, mesh, memory kind, committed flag and value;
* with the spec — the rule that refuses the call, and the refusal's path, stage, JAX class
  and the numbers and names its facts hold (:func:`refusal_differences`; only where the spec
  and JAX agree, so that a known divergence of the spec does not read as one of the engine);
* with itself — what the engine predicted against what JAX compiled
  (``cache_info().divergences``).

On a call the engine agreed on, every rule of the spec's trace is recorded with
:func:`shardlaw.properties.hits.record` (source ``"engine"``): refused for the rule that
refused the call, accepted for the others.

:func:`replay_in_engine` replays a test vector against the engine (for
``shardlaw vectors run DIR --against engine``); a refusal's facts are held to the spec's.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

from shardlaw.properties import hits
from shardlaw.spec import UNSPECIFIED, from_jax
from shardlaw.spec.jit.call import Arg, Call, Verdict
from shardlaw.spec.placement.equivalence import placement_equivalent
from shardlaw.spec.jit.pipeline import jit_call
from shardlaw.spec.core.pytree import leaves_with_paths

from . import jit_harness as H

__all__ = ["SOURCE", "Run", "run_call", "compare_engine", "replay_in_engine", "engine_verdict",
           "refusal_differences", "stated_values"]

# The source under which the calls the engine agreed on record their rules.
SOURCE = "engine"


@dataclasses.dataclass
class Run:
    """What one jit implementation did with a call."""

    error: BaseException | None = None
    aot_error: BaseException | None = None
    results: list[Any] = dataclasses.field(default_factory=list)
    shardings: list[Any] = dataclasses.field(default_factory=list)   # JAX shardings
    committed: list[bool] = dataclasses.field(default_factory=list)
    shapes: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    jitted: Any = None
    in_compiler: list[Any] | None = None   # compiled ahead of time: the inputs' HLO shardings

    @property
    def failure(self) -> BaseException | None:
        return self.error or self.aot_error


def _arguments(call: Call) -> tuple[Any, Any, Any, Any]:
    with H.default_device_context(call):
        args = H.build_values(call.args)
        kwargs = H.build_values(call.kwargs)
        aot_args = aot_kwargs = None
        if call.aot_args is not None:
            aot_args = H.build_values(call.aot_args)
            aot_kwargs = H.build_values(call.aot_kwargs or {})
    return args, kwargs, aot_args, aot_kwargs


def run_call(call: Call, jit_fn: Any, fun: Any, arguments: tuple) -> Run:
    """Call ``jit_fn(fun, **options)`` as ``call`` describes, on prebuilt ``arguments``."""
    import jax

    if jit_fn is jax.jit:
        hits.record_jax_calls(1)
    run = Run()
    args, kwargs, aot_args, aot_kwargs = arguments
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            jitted = run.jitted = jit_fn(fun, **H.jit_kwargs(call))
        except Exception as error:  # noqa: BLE001 - recorded and compared
            run.error = error
            return run
        abstract = any(isinstance(a, Arg) and a.kind == "abstract"
                       for _, a in leaves_with_paths((call.args, call.kwargs)))
        with H.mesh_context(call), H.default_device_context(call):
            try:
                if abstract or call.aot_args is not None:
                    compiled = jitted.lower(*args, **kwargs).compile()
                    shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
                    run.shardings = shardings
                    if jit_fn is jax.jit:   # the oracle is read from JAX only
                        run.in_compiler = H.compiled_input_hlo(compiled, call)
                    run.shapes = [tuple(a.shape) for a in
                                  jax.tree_util.tree_leaves(compiled.out_info)] if hasattr(
                        compiled, "out_info") else []
                else:
                    out = jitted(*args, **kwargs)
                    flat = jax.tree_util.tree_leaves(out)
                    run.results = flat
                    run.shardings = [x.sharding for x in flat]
                    run.shapes = [tuple(x.shape) for x in flat]
                    run.committed = [bool(x._committed) for x in flat]
            except Exception as error:  # noqa: BLE001
                run.error = error
                return run
            if call.aot_args is not None:
                try:
                    out = compiled(*aot_args, **(aot_kwargs or {}))
                    flat = jax.tree_util.tree_leaves(out)
                    run.results = flat
                    run.committed = [bool(x._committed) for x in flat]
                except Exception as error:  # noqa: BLE001
                    run.aot_error = error
    return run


def _outcome(run: Run) -> H.JaxOutcome:
    outcome = H.JaxOutcome(error=run.error, aot_error=run.aot_error)
    if run.failure is None and run.shardings:
        H.record_shardings(outcome, run.shardings, run.shapes or [
            tuple(x.shape) for x in run.results], run.committed or None)
    return outcome


def _spec_verdict(call: Call, jax_run: Run, raw: list[Any]) -> tuple[Verdict, list[str]]:
    """The spec's verdict (with the compiler's choices from JAX) and its disagreements with JAX."""
    if raw:
        open_ = [s is UNSPECIFIED for s in H.flat_out_shardings(call)]
        choices = [from_jax(s._to_xla_hlo_sharding(rank)) for s, rank in raw]
        kinds = [s.memory_kind for s, _ in raw]
        call = dataclasses.replace(
            call, compiler=tuple(c if o else None for c, o in zip(choices, open_)),
            compiler_memory=tuple(m if o else None for m, o in zip(kinds, open_)))
    call = H.with_input_choices(call, jax_run.in_compiler)
    verdict = jit_call(call)
    outcome = _outcome(jax_run)
    error = jax_run.failure
    problems = []
    if verdict.accepted != (error is None):
        problems.append("spec and JAX disagree on acceptance")
    elif error is not None and not H.same_error_type(verdict, error):
        problems.append("spec and JAX disagree on the error type")
    elif error is None:
        problems += H.compare_results(call, verdict, outcome)
    return verdict, problems


def compare_engine(call: Call) -> tuple[Verdict, Run, Run, list[str], bool]:
    """(spec verdict, JAX's run, the engine's run, the engine's disagreements, spec agrees with JAX)."""
    from shardlaw.engine import jit as engine_jit
    import jax

    call = H.traced_facts(call)
    fun = H.call_function(call)
    arguments = _arguments(call)
    watched = H.JaxOutcome()
    with H.watch_compiler(watched):
        watched.watching = True
        jax_run = run_call(call, jax.jit, fun, arguments)
    raw = watched.raw if jax_run.error is None else []
    verdict, spec_problems = _spec_verdict(call, jax_run, raw)
    engine_run = run_call(call, engine_jit, H.call_function(call), _arguments(call))
    problems = _disagreements(call, verdict, jax_run, engine_run, not spec_problems)
    if not problems:
        for rule_id in dict.fromkeys(verdict.trace):
            hits.record(SOURCE, rule_id, refused=not verdict.accepted and rule_id == verdict.rule)
    return verdict, jax_run, engine_run, problems, not spec_problems


def _base(error: BaseException) -> type:
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def _disagreements(call: Call, verdict: Verdict, theirs: Run, mine: Run,
                   spec_agrees: bool) -> list[str]:
    import numpy as np

    problems: list[str] = []
    theirs_error, mine_error = theirs.failure, mine.failure
    if (theirs_error is None) != (mine_error is None):
        if mine_error is None:
            problems.append(f"JAX raised {type(theirs_error).__name__}: "
                            f"{str(theirs_error)[:300]}; the engine accepted")
        else:
            problems.append(f"the engine raised {type(mine_error).__name__} "
                            f"[{getattr(mine_error, 'rule', None)}]: {str(mine_error)[:300]}; "
                            "JAX accepted")
        return problems
    if theirs_error is not None:
        assert mine_error is not None
        if not isinstance(mine_error, _base(theirs_error)):
            problems.append(f"JAX raised {type(theirs_error).__name__} "
                            f"({_base(theirs_error).__name__}), the engine "
                            f"{type(mine_error).__name__}: {str(mine_error)[:300]}")
        rule = getattr(mine_error, "rule", None)
        if rule is None:
            problems.append(f"the engine raised without a rule: {type(mine_error).__name__}: "
                            f"{str(mine_error)[:300]}")
        elif spec_agrees and not verdict.accepted and rule != verdict.rule:
            problems.append(f"the engine refused by {rule}, the spec by {verdict.rule}: "
                            f"{str(mine_error)[:300]}")
        elif spec_agrees and not verdict.accepted:
            problems += refusal_differences(verdict, mine_error)
        return problems
    for i, (a, b) in enumerate(zip(mine.shardings, theirs.shardings)):
        shape = (mine.shapes or theirs.shapes)[i]
        sa, sb = from_jax(a), from_jax(b)
        if type(sa) is not type(sb):
            problems.append(f"result {i}: engine {a}, JAX {b}")
        elif not placement_equivalent(sa, sb, shape):
            problems.append(f"result {i}: engine places it as {a}, JAX as {b}")
        elif hasattr(sa, "mesh") and (sa.mesh.axis_names, sa.mesh.axis_sizes) != (
                sb.mesh.axis_names, sb.mesh.axis_sizes):
            problems.append(f"result {i}: engine mesh {sa.mesh}, JAX mesh {sb.mesh}")
        if a.memory_kind != b.memory_kind:
            problems.append(f"result {i}: memory kind {a.memory_kind} vs {b.memory_kind}")
    if len(mine.shardings) != len(theirs.shardings):
        problems.append(f"{len(mine.shardings)} results from the engine, "
                        f"{len(theirs.shardings)} from JAX")
    if mine.committed != theirs.committed:
        problems.append(f"committed: engine {mine.committed}, JAX {theirs.committed}")
    for i, (a, b) in enumerate(zip(mine.results, theirs.results)):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            problems.append(f"result {i}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        elif a.size and not np.array_equal(np.asarray(a), np.asarray(b)):
            # (jax 0.10.2 cannot read back some zero-size sharded results at all)
            problems.append(f"result {i}: values differ")
    info = mine.jitted.cache_info() if mine.jitted is not None else None
    if info is not None and info.divergences:
        problems += [f"engine prediction: {d}" for d in info.divergences]
    return problems


# --------------------------------------------------------------------------- refusals

# A whole number in a message, not part of a word or of a decimal (float32, 1.5).
_NUMBER = re.compile(r"(?<![\w.])-?[0-9]+(?!\w|\.[0-9])")
# A fact that is a name (a memory kind, a mesh axis, "argument" or "result").
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A fact that is a list of whole numbers written out ("[0, 1, 2]", "(8, 8)").
_NUMBERS_ONLY = re.compile(r"^[\[(]?\s*(-?[0-9]+\s*,?\s*)*[\])]?$")


def stated_values(facts: Any) -> list[tuple[str, Any]]:
    """The facts of a spec failure that any wording of it states as they are: whole
    numbers (as a tuple, in order) and names. Prose and objects are left out, since
    the engine may write a sharding or a tree in JAX's own repr.

    >>> stated_values((("count", 2), ("devices", "[0, 1]"), ("held", "pinned_host"),
    ...                ("why", "it is not"), ("auto", True)))
    [('count', (2,)), ('devices', (0, 1)), ('held', 'pinned_host')]
    """
    stated: list[tuple[str, Any]] = []
    for name, value in facts:
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            stated.append((name, (value,)))
        elif isinstance(value, tuple) and all(type(v) is int for v in value):
            stated.append((name, value))
        elif isinstance(value, str) and _NAME.match(value):
            stated.append((name, value))
        elif isinstance(value, str) and _NUMBERS_ONLY.match(value) and _NUMBER.search(value):
            stated.append((name, tuple(int(n) for n in _NUMBER.findall(value))))
    return stated


def _states(message: str, value: Any) -> bool:
    """Whether ``message`` states ``value``: a name as a word, numbers in the same order."""
    if isinstance(value, str):
        return re.search(rf"(?<![\w]){re.escape(value)}(?![\w])", message) is not None
    numbers = [int(n) for n in _NUMBER.findall(message)]
    n = len(value)
    return any(tuple(numbers[i:i + n]) == value for i in range(len(numbers) - n + 1))


def refusal_differences(verdict: Verdict, error: BaseException) -> list[str]:
    """How the engine's refusal differs from the spec's in its facts (empty: the same).

    Both refused by the same rule; they must name the same argument (``path``), stage and
    JAX class, and the engine's own words (``error.message``) must state every number and
    name that the spec's failure holds as a fact (:func:`stated_values`), so that the two
    wordings of one failure cannot drift apart.
    """
    problems = []
    for name in ("path", "stage", "jax_error"):
        spec_side, engine_side = getattr(verdict, name), getattr(error, name, None)
        if spec_side != engine_side:
            problems.append(f"{verdict.rule}: {name} is {spec_side!r} in the spec, "
                            f"{engine_side!r} in the engine")
    # The engine's own words: a message that holds JAX's words first has ours after the rule.
    message = (getattr(error, "message", None) or str(error)).rpartition(f"[{verdict.rule}]")[2]
    for name, value in stated_values(verdict.facts):
        if not _states(message, value):
            shown = value if isinstance(value, str) else ", ".join(map(str, value))
            problems.append(f"{verdict.rule}: the engine's words do not state the fact "
                            f"{name} = {shown}: {message[:300]}")
    return problems


# --------------------------------------------------------------------------- vectors

def engine_verdict(call: Call) -> Verdict:
    """The spec-typed :class:`Verdict` of what the engine does with ``call`` (run for real)."""
    from shardlaw.engine import verdict_for_call

    call = H.traced_facts(call)
    fun = H.call_function(call)
    args, kwargs, aot_args, aot_kwargs = _arguments(call)
    with H.mesh_context(call), H.default_device_context(call):
        explanation, results = verdict_for_call(fun, args, kwargs,
                                                jit_options=H.jit_kwargs(call),
                                                aot_args=aot_args, aot_kwargs=aot_kwargs)
    if not explanation.accepted:
        return Verdict(False, explanation.trace, rule=explanation.rule,
                       error_type=explanation.error_type, jax_error=explanation.jax_error,
                       message=explanation.message, path=explanation.path,
                       stage=explanation.stage)

    def spec(s: Any) -> Any:
        return UNSPECIFIED if s is None or type(s).__name__ == "_Unspecified" else from_jax(s)

    # The layouts the results came back in, read off the results themselves (LAY-2).
    import jax

    flat = jax.tree_util.tree_leaves(results) if results is not None else []
    out_layouts = tuple(H.spec_layout(x.format.layout, x.ndim) for x in flat) \
        if flat and all(isinstance(x, jax.Array) for x in flat) else ()
    return Verdict(
        True, explanation.trace, explanation.in_paths,
        tuple(spec(s) for s in explanation.in_shardings), explanation.out_paths,
        tuple(spec(s) for s in explanation.out_shardings), explanation.device_assignment,
        explanation.num_devices, explanation.kept_inputs, explanation.out_committed,
        explanation.transfers, out_layouts=out_layouts)


def replay_in_engine(vector: Any) -> list[str]:
    """How the engine differs from the vector's expected verdict (empty: it agrees)."""
    from shardlaw.spec.vectors.jit_vectors import verdict_differences

    from .vectors_gen import NotReplayable

    if vector.expect is None:
        raise NotReplayable("the vector has no expected verdict")
    if vector.call.process_count > 1:
        raise NotReplayable(f"the call runs in {vector.call.process_count} JAX processes; the "
                            "replay runs one")
    engine = engine_verdict(vector.call)
    differences = verdict_differences(vector.expect, engine)
    if not differences and not engine.accepted:
        # The vector keeps no facts: the spec's verdict on the same call has them.
        spec = jit_call(vector.call)
        if not spec.accepted and spec.rule == engine.rule:
            differences += refusal_differences(spec, engine)
    return differences

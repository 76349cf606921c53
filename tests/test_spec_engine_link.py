"""Spec <-> engine, visibly: every rule of a jit-call stage has its engine counterpart.

The engine never imports the spec, so nothing but this test ties the two together. For
every spec rule whose stage (``shardlaw.rule_index``) is one of jit's, the engine has

* a function decorated with the engine's ``@rule("ID")`` — named as the spec's rule
  function, unless :data:`NAMED_OTHERWISE` says why not — whose docstring's first sentence
  is the spec's statement of the rule, word for word; or
* an inline ``note("ID")`` where it decides the rule in the middle of another step; or
* only an inline ``reject("ID", ...)`` inside another rule's function, listed in
  :data:`REFUSED_INLINE`; or
* an entry in ``shardlaw.engine.rules.LEFT_TO_JAX``, which says why JAX decides it.

Every list here is exact: an entry that no longer describes the engine fails the test too.
"""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import shardlaw.engine
import shardlaw.spec as S
from shardlaw.engine.rules import LEFT_TO_JAX
from shardlaw.rule_index import ENGINE_EXCEPTIONS, JIT_STAGES, stage_of
from shardlaw.spec.core.rules import first_sentence

ENGINE = Path(shardlaw.engine.__file__).resolve().parent
MODULES = sorted(p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__")

# Derived from the one rule index (shardlaw.rule_index.ENGINE_EXCEPTIONS): the spec rules
# of jit's stages whose engine function carries another name, and why; and those the engine
# refuses inline, inside another rule's function, without a function or a note of their own.
NAMED_OTHERWISE = {r: c.why for r, c in ENGINE_EXCEPTIONS.items() if c.kind == "named otherwise"}
REFUSED_INLINE = {r: c.why for r, c in ENGINE_EXCEPTIONS.items() if c.kind == "refused inline"}


def _jit_rules():
    return {rule_id: rule for rule_id, rule in S.RULES.items()
            if stage_of(rule_id) in JIT_STAGES}


def _engine_functions():
    """Rule ID -> the engine functions decorated with ``@rule`` for it."""
    found = {}
    for name in MODULES:
        module = importlib.import_module(f"shardlaw.engine.{name}")
        for _, value in vars(module).items():
            if getattr(value, "__module__", None) == module.__name__ and hasattr(value, "rule_id"):
                found.setdefault(value.rule_id, set()).add(value)
    return found


def _inline_calls(callee):
    """Rule ID -> the engine modules that call ``callee("ID", ...)`` with a literal ID."""
    found = {}
    for name in MODULES:
        tree = ast.parse((ENGINE / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == callee and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                found.setdefault(node.args[0].value, set()).add(name)
    return found


FUNCTIONS = _engine_functions()
NOTES = _inline_calls("note")
REJECTS = _inline_calls("reject")


def test_the_walk_finds_the_engine_rules():
    # The walks above see what they are meant to see (a walk that finds nothing passes all).
    assert {"JIT-2", "DA-1", "AOT-3", "LAY-1"} <= set(FUNCTIONS)
    assert {"NS-1", "NS-2", "FIT-1"} <= set(REJECTS)
    assert "DA-1" in _jit_rules() and "EQ-2" not in _jit_rules()


@pytest.mark.parametrize("rule_id", sorted(_jit_rules()))
def test_every_jit_rule_has_an_engine_counterpart_or_is_left_to_jax(rule_id):
    ways = [way for way, holds in (("an @rule function", rule_id in FUNCTIONS),
                                   ("a note()", rule_id in NOTES),
                                   ("listed as refused inline", rule_id in REFUSED_INLINE),
                                   ("left to JAX", rule_id in LEFT_TO_JAX)) if holds]
    assert ways, (f"{rule_id} ({S.RULES[rule_id].function.__name__}) has no engine counterpart: "
                  "implement it in engine/ with @rule or note(), or say why in LEFT_TO_JAX")
    # Left to JAX means the engine does not decide it anywhere.
    if rule_id in LEFT_TO_JAX:
        assert ways == ["left to JAX"] and rule_id not in REJECTS, \
            f"{rule_id} is in LEFT_TO_JAX but the engine decides it ({ways})"
    if rule_id in REFUSED_INLINE:
        assert ways == ["listed as refused inline"], \
            f"{rule_id} has a function or note() of its own now: drop it from REFUSED_INLINE"
        assert rule_id in REJECTS, f"the engine no longer refuses by {rule_id} inline"


def test_left_to_jax_and_the_exceptions_name_jit_rules():
    rules = _jit_rules()
    for table in (LEFT_TO_JAX, REFUSED_INLINE, NAMED_OTHERWISE):
        assert set(table) <= set(rules), set(table) - set(rules)
        assert all(why.strip() for why in table.values())
    assert set(NAMED_OTHERWISE) <= set(FUNCTIONS)


@pytest.mark.parametrize("rule_id", sorted(set(_jit_rules()) & set(FUNCTIONS)))
def test_an_engine_rule_function_carries_the_spec_function_name(rule_id):
    spec_name = S.RULES[rule_id].function.__name__
    engine_names = sorted(f.__name__ for f in FUNCTIONS[rule_id])
    if rule_id in NAMED_OTHERWISE:
        assert spec_name not in engine_names, \
            f"{rule_id} is named {spec_name} in the engine now: drop it from NAMED_OTHERWISE"
    else:
        assert engine_names == [spec_name], (rule_id, engine_names, spec_name)


@pytest.mark.parametrize("rule_id", sorted(set(S.RULES) & set(FUNCTIONS)))
def test_an_engine_rule_function_states_the_spec_rule(rule_id):
    """The first sentence of the engine function's docstring is the spec's statement."""
    for function in FUNCTIONS[rule_id]:
        where = f"{function.__module__}.{function.__name__}"
        assert first_sentence(inspect.getdoc(function)) == S.RULES[rule_id].statement, where


def test_engine_rule_ids_are_spec_rules_or_the_engines_own():
    ids = set(FUNCTIONS) | set(NOTES) | set(REJECTS)
    assert {i for i in ids if not i.startswith("ENG-")} <= set(S.RULES)

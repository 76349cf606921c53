"""The rule pages: what each rule's entry shows, and that the docs build never imports tests/.

The generator (``docs/_ext/shardlaw_rules.py``) reads the test files' ``@checks("ID", ...)`` as
text; these tests hold that reading against the registry the imported test modules fill,
and check one entry's statement block, clauses, engine link and folded source.
"""

import importlib
import inspect
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from shardlaw.spec import RULES

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("sphinx")


@pytest.fixture(scope="module")
def generator():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        return importlib.import_module("shardlaw_rules")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


def test_the_docs_build_imports_nothing_from_tests():
    """Everything the generator reads, read in a fresh interpreter: no module of tests/."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "docs" / "_ext")!r})
        import shardlaw_rules as g
        g.load_rules(); g.property_checks(); g.engine_counterparts(); g.left_to_jax()
        g.engine_inline_sites()
        tests = {str(ROOT / "tests")!r}
        loaded = sorted(name for name, module in list(sys.modules.items())
                        if (getattr(module, "__file__", None) or "").startswith(tests))
        assert not loaded, loaded
        assert tests not in sys.path
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=600)


def test_reading_checks_as_text_finds_what_importing_registers(generator):
    """For every test file, the text reading gives each property the rules it registers."""
    from shardlaw.properties.registry import CHECKS

    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if "checks(" not in path.read_text(encoding="utf-8"):
            continue
        importlib.import_module(path.stem)
        registered: dict[str, set[str]] = {}
        for rule_id, names in CHECKS.items():
            for name in names:
                if name.startswith(path.stem + "."):
                    registered.setdefault(generator.property_name(name), set()).add(rule_id)
        found, problems = generator.checks_in_file(path)
        assert not problems, problems
        read: dict[str, set[str]] = {}
        for rule_id, names in found.items():
            for name in names:
                read.setdefault(name, set()).add(rule_id)
        assert read == registered, path.name


def test_every_family_has_a_title_and_a_place_in_the_pipeline(generator):
    families = {rule.family for rule in RULES.values()}
    ordered = [f for _, members in generator.pipeline_order(families) for f in members]
    assert sorted(ordered) == sorted(families)
    untitled = sorted(families - set(generator.FAMILY_TITLES))
    assert not untitled, f"families without a title on the docs index: {untitled}"


def _entry(generator, rule, **context):
    return generator.rule_entry(rule, generator.Context(**context))


def test_an_entry_has_a_statement_block_and_folds_its_source(generator):
    rule = RULES["DIV-1"]
    page = _entry(generator, rule, checks={"DIV-1": ["test_x.test_y"]},
                  engine={"DIV-1": ["shardlaw.engine.somewhere.shard_shape"]})
    block = page[page.index(".. container:: rule-block"):page.index(".. rubric:: Examples")]
    assert rule.statement in block
    assert ":Error: ``ValueError``" in block
    assert ":Message:" in block and "[DIV-1]: dimension 0" in block
    assert ":Engine: ``shardlaw.engine.somewhere.shard_shape``" in block
    assert f":Mirrors: ``{rule.mirrors}``" in block
    assert "* ``test_y`` (``test_x``)" in block
    source = page[page.index("<details"):page.index("</details>")]
    assert "def shard_shape" in source
    # the examples are printed once, under Examples, not again in the source's docstring
    assert ">>>" not in source
    assert page.count(">>> mesh = Mesh.iota((2, 4)") == 1


def test_an_entry_says_when_a_rule_is_left_to_jax(generator):
    page = _entry(generator, RULES["DIV-2"], engine={})
    assert ":Engine: left to JAX" in page
    marked = _entry(generator, RULES["DIV-2"], engine={},
                    left_to_jax={"DIV-2": "XLA divides the dimensions"})
    assert ":Engine: left to JAX: XLA divides the dimensions" in marked
    declared = _entry(generator, RULES["EQ-2"], engine={}, left_to_jax={"EQ-2": ""})
    assert ":Engine: left to JAX (so the engine declares)" in declared
    assert ":Engine: none" in _entry(generator, RULES["EQ-2"], engine={})
    inline = _entry(generator, RULES["DIV-2"], engine={},
                    inline={"reject": {"DIV-2": ["shardlaw.engine.x.check"]}})
    assert ":Engine: refused inside ``shardlaw.engine.x.check``" in inline


def test_the_engine_source_is_read_for_inline_refusals(generator):
    sites = generator.engine_inline_sites()
    assert any(rule_id.startswith("NS-") for rule_id in sites["reject"])
    assert all(where.startswith("shardlaw.engine.")
               for found in sites.values() for wheres in found.values() for where in wheres)


def test_clauses_and_stage_are_shown_when_the_registry_has_them(generator):
    def decide(x):
        """A value is kept when it is small.

        (C1) A value below ten is kept.
        (C2) Any other value is dropped.

        >>> decide(3)
        3
        """
        return x

    rule = types.SimpleNamespace(
        id="FAKE-1", family="FAKE", function=decide, mirrors="(none)",
        statement="A value is kept when it is small.", stage="trace",
        clauses=("(C1) A value below ten is kept.", "(C2) Any other value is dropped."))
    page = _entry(generator, rule)
    assert ":C1: A value below ten is kept." in page
    assert ":C2: Any other value is dropped." in page
    assert page.count("below ten") == 1  # not repeated from the docstring below the block
    assert ":Stage: ``trace``" in page
    assert inspect.getsource(decide).count(">>>") == 1 and ">>>" in page


def test_the_index_lists_families_in_pipeline_order(generator):
    families: dict[str, list] = {}
    for rule in RULES.values():
        families.setdefault(rule.family, []).append(rule)
    text = generator.families_include(families)
    positions = [text.index(f":doc:`{f} <rules/{f.lower()}>`")
                 for f in ("VAL", "DIV", "EQ", "CALL", "JIT", "DA", "OUT", "CACHE")
                 if f in families]
    assert positions == sorted(positions)


def test_computed_checks_in_a_test_file_are_reported_not_evaluated(generator, tmp_path):
    path = tmp_path / "test_made_up.py"
    path.write_text("IDS = ('DIV-1',)\n\n@checks(*IDS)\ndef test_a():\n    pass\n\n"
                    "@checks('DIV-2')\ndef test_b():\n    pass\n")
    found, problems = generator.checks_in_file(path)
    assert found == {"DIV-2": ["test_made_up.test_b"]}
    assert problems == ["test_made_up.test_a (write the rule IDs of @checks as string "
                        "literals in a test file)"]

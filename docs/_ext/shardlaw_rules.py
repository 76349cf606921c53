"""Sphinx extension: write one page per rule family from the rule registry.

At ``config-inited`` it imports the specification (with ``shardlaw.spec.prove.smt``, which the
package loads only on first use), the property modules of
``shardlaw.properties`` and the engine (for its ``@rule`` functions; what the engine
leaves to JAX comes from the rule index, ``shardlaw.rule_index``),
and reads the test files in ``tests/`` and the engine's inline ``note``/``reject`` calls
*as text* (it never imports ``tests/``). Then it writes ``docs/rules/index.rst``, one
``docs/rules/<family>.rst`` per family, ``docs/rules/families.inc`` (the families in
pipeline order, included by ``docs/index.rst``) and ``docs/rules/value-types.inc``.

Every rule gets the same entry: a statement block (the statement, its numbered clauses,
the stage at which JAX refuses, the error type and an example message, the engine's
counterpart, the JAX function it mirrors and the properties that check it), then the rest
of its docstring with the examples as ``.. doctest::`` blocks (run by
``sphinx-build -b doctest``), then its source, folded away and without the docstring.
Registry fields that a rule does not have yet are left out of its block.
``docs/rules/`` is generated and git-ignored; files are rewritten only when they change.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import textwrap
from pathlib import Path
from typing import Any, Iterable

from sphinx.util import logging

from shardlaw.rule_index import FAMILIES, LEFT_TO_JAX, PARTS
from shardlaw_pictures import PICTURED_FAMILIES, example_grid

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- families

# The families in the order a value meets them (first the values themselves, then where a
# sharding puts the blocks, when two shardings count as the same, a jit call stage by stage,
# the transformations, the caches): declared once, in shardlaw.rule_index.
PIPELINE = [(part, [(f.id, f.title) for f in FAMILIES.values() if f.part == part])
            for part in PARTS]

FAMILY_TITLES = {family: title for _, families in PIPELINE for family, title in families}


def family_title(family: str) -> str:
    return FAMILY_TITLES.get(family, f"{family} rules")


def pipeline_order(families: Iterable[str]) -> list[tuple[str, list[str]]]:
    """The given families grouped into parts, in pipeline order; unknown ones come last."""
    present = list(families)
    parts = [(part, [f for f, _ in members if f in present]) for part, members in PIPELINE]
    other = [f for f in present if f not in FAMILY_TITLES]
    if other:
        parts.append(("Other rules", other))
    return [(part, members) for part, members in parts if members]


# --------------------------------------------------------------------------- rules

# Spec modules that ``shardlaw.spec`` loads on first use; their rules are listed too.
LAZY_SPEC_MODULES = ["shardlaw.spec.prove.smt"]


def load_rules() -> dict[str, Any]:
    """The registry, with the spec's lazily loaded modules imported (z3 for ``.smt``)."""
    from shardlaw.spec import RULES

    for name in LAZY_SPEC_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as error:  # the rules it holds are then not listed
            logger.info("shardlaw: spec module %s not imported: %s", name, error)
    return RULES


def failures_of(rule_id: str) -> list[type]:
    """The failure classes (``shardlaw.spec.core.rules.Failure`` subclasses) of one rule."""
    from shardlaw.spec.core.rules import Failure

    found, todo = [], list(Failure.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if getattr(cls, "rule", None) == rule_id and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


# --------------------------------------------------------------------------- the engine

def engine_counterparts() -> dict[str, list[str]]:
    """Rule ID -> the engine functions marked ``@rule(ID)`` (``fire.rule_id``), by name."""
    found: dict[str, list[str]] = {}
    try:
        import shardlaw.engine as engine
    except ImportError as error:
        logger.info("shardlaw: engine not imported (%s); no engine links", error)
        return found

    def visit(value: Any, module: str) -> None:
        rule_id = getattr(value, "rule_id", None)
        if callable(value) and isinstance(rule_id, str):
            original = inspect.unwrap(value)
            if getattr(original, "__module__", None) == module:
                name = f"{module}.{original.__qualname__}"
                names = found.setdefault(rule_id, [])
                if name not in names:
                    names.append(name)

    for info in pkgutil.iter_modules(engine.__path__, "shardlaw.engine."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as error:
            logger.info("shardlaw: engine module %s not imported: %s", info.name, error)
            continue
        for value in list(vars(module).values()):
            visit(value, module.__name__)
            if inspect.isclass(value) and value.__module__ == module.__name__:
                for member in vars(value).values():
                    visit(getattr(member, "__func__", member), module.__name__)
    return found


def engine_inline_sites() -> dict[str, dict[str, list[str]]]:
    """``note("ID")`` and ``reject("ID", ...)`` calls in the engine's source, read as text:
    {"note" | "reject": {rule ID: the functions that make them}}."""
    sites: dict[str, dict[str, list[str]]] = {"note": {}, "reject": {}}
    try:
        import shardlaw.engine as engine
    except ImportError:
        return sites
    for path in sorted(Path(engine.__path__[0]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except SyntaxError:
            continue
        module = f"shardlaw.engine.{path.stem}"

        def visit(node: ast.AST, scope: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, scope + [child.name])
                    continue
                if isinstance(child, ast.Call) and child.args:
                    func = child.func
                    name = func.id if isinstance(func, ast.Name) else \
                        func.attr if isinstance(func, ast.Attribute) else None
                    first = child.args[0]
                    if (name in sites and isinstance(first, ast.Constant)
                            and isinstance(first.value, str) and scope):
                        where = ".".join([module] + scope)
                        found = sites[name].setdefault(first.value, [])
                        if where not in found:
                            found.append(where)
                visit(child, scope)
        visit(tree, [])
    return sites


def left_to_jax() -> dict[str, str]:
    """Rules the engine leaves to JAX: rule ID -> the reason (from the rule index)."""
    return dict(LEFT_TO_JAX)


# --------------------------------------------------------------------------- properties

def property_checks(test_dir: Path = ROOT / "tests") -> tuple[dict[str, list[str]], list[str]]:
    """Rule ID -> the properties that check it, and what could not be read.

    The property modules of ``shardlaw.properties`` and its suites are imported (they
    register with ``shardlaw.properties.registry.checks``); the test files are read as
    text: every ``@checks("ID", ...)`` decorator, whose IDs are string literals.
    """
    checks: dict[str, list[str]] = {}
    unread: list[str] = []
    try:
        import shardlaw.properties as properties
        from shardlaw.properties.registry import CHECKS
    except ImportError as error:
        return checks, [f"shardlaw.properties ({error})"]
    for info in pkgutil.walk_packages(properties.__path__, "shardlaw.properties."):
        try:
            importlib.import_module(info.name)
        except ImportError as error:  # a module others are still writing
            unread.append(f"{info.name} ({type(error).__name__}: {error})")
    for rule_id, names in CHECKS.items():
        checks.setdefault(rule_id, []).extend(n for n in names if n.startswith("shardlaw."))
    if test_dir.is_dir():
        for path in sorted(test_dir.glob("test_*.py")):
            found, problems = checks_in_file(path)
            unread += problems
            for rule_id, names in found.items():
                have = checks.setdefault(rule_id, [])
                have += [n for n in names if n not in have]
    return checks, unread


def _is_checks(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "checks")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "checks"))


def checks_in_file(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """The ``@checks("ID", ...)`` decorators of one test file, read without importing it.

    A test file outside the installed suites writes the IDs it checks as string literals
    (the suites of ``shardlaw.properties`` are imported and may compute theirs); anything
    else is reported as a problem, never evaluated. A property is named as the registry
    names it, ``module.qualname`` with helper scopes (``f.<locals>.``) left out.
    """
    module = path.stem
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except SyntaxError as error:  # a file being edited; the test run will say so
        return {}, [f"{module} (SyntaxError: {error})"]
    found: dict[str, list[str]] = {}
    problems: list[str] = []

    def visit(body: list[ast.stmt], scope: list[str]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, scope + [node.name])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = ".".join([module] + scope + [node.name])
                for decorator in filter(_is_checks, node.decorator_list):
                    literal = [a.value for a in decorator.args
                               if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                    if len(literal) != len(decorator.args) or decorator.keywords:
                        problems.append(f"{name} (write the rule IDs of @checks as string "
                                        f"literals in a test file)")
                        continue
                    for rule_id in literal:
                        names = found.setdefault(rule_id, [])
                        if name not in names:
                            names.append(name)
                visit(node.body, scope)  # properties defined inside helpers
    visit(tree.body, [])
    return found, problems


def property_name(qualified: str) -> str:
    """A property's name as pytest shows it: helper scopes (``f.<locals>.``) left out."""
    return re.sub(r"(?:[\w]+\.<locals>\.)+", "", qualified)


def property_entry(qualified: str) -> str:
    """A property as a rule's block lists it: its name, then its module (a line may break
    between the two, not inside a name)."""
    module, _, name = property_name(qualified).rpartition(".")
    return f"``{name}`` (``{module}``)" if module else f"``{name}``"


# --------------------------------------------------------------------------- text helpers

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"(``.+?``)")


def prose(text: str) -> str:
    """Docstring prose as safe reStructuredText: roles become literals, markup is escaped."""
    text = _ROLE.sub(r"``\1``", text)
    out = []
    for i, part in enumerate(_LITERAL.split(text)):
        if i % 2:
            out.append(part)
        else:
            for ch in "\\*`|_[":
                part = part.replace(ch, "\\" + ch)
            out.append(part)
    return "".join(out)


def split_docstring(doc: str) -> tuple[list[str], list[str]]:
    """The prose paragraphs and the example blocks (``>>>`` runs) of a docstring."""
    paragraphs, examples = [], []
    for block in docstring_blocks(doc):
        (examples if block.lstrip().startswith(">>>") else paragraphs).append(block)
    return paragraphs, examples


def docstring_blocks(doc: str) -> list[str]:
    """A docstring's blank-line separated blocks, in order."""
    return [b for b in re.split(r"\n\s*\n", doc.strip()) if b.strip()]


def tabular(example: str) -> bool:
    """Whether an example's output is laid out in columns (runs of spaces inside a line)."""
    return any("   " in line.strip() for line in example.splitlines()
               if not line.lstrip().startswith((">>>", "...")))


def indent(text: str, by: str = "   ") -> str:
    return textwrap.indent(text, by, lambda line: True).replace(by + "\n", "\n")


def literal(text: str) -> str:
    """Inline literal markup for any text (backquotes cannot be escaped inside one)."""
    text = " ".join(str(text).split())
    if "``" in text or text.startswith("`") or text.endswith("`"):
        return prose(text)
    return f"``{text}``"


def source_without_docstring(function: Any) -> str:
    """The function's source, dedented, with its docstring taken out (the page shows it)."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return "# source not available"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    node = tree.body[0] if tree.body else None
    if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)):
        doc = node.body[0]
        lines = source.splitlines()
        rest = lines[doc.end_lineno:]
        if not any(line.strip() for line in rest):  # nothing but a docstring
            rest = [" " * doc.col_offset + "..."]
        lines = lines[: doc.lineno - 1] + rest
        source = "\n".join(lines) + "\n"
    return source


# --------------------------------------------------------------------------- a rule's block

# A clause as the docstring writes it: ``(C1) text``.
_CLAUSE = re.compile(r"^\s*\(C([0-9]+)\)\s+")

# The stages of a jit call, in words (the registry gives their names).
STAGE_WORDS = {
    "description": "checking the call's description, before any of JAX's rules",
    "jit": "at jax.jit(f, ...), before any call",
    "trace": "at the call, while jit reads the arguments and traces the function",
    "lower": "lowering the traced call",
    "compile": "compiling, and reading the compiled program's shardings back",
    "call": "handing the arguments to the executable",
    "aot": "calling an executable compiled ahead of time",
}


def clauses_of(rule: Any) -> list[tuple[str, str]]:
    """The rule's numbered clauses as (label, text), from whatever form the registry has."""
    raw = getattr(rule, "clauses", None)
    if not raw:
        return []
    if isinstance(raw, str):
        raw = [raw]
    items = list(raw.items()) if isinstance(raw, dict) else list(enumerate(raw, 1))
    out = []
    for key, clause in items:
        label = getattr(clause, "id", None) or getattr(clause, "label", None)
        text = getattr(clause, "text", None) or getattr(clause, "statement", None)
        if text is None:
            text = clause if isinstance(clause, str) else str(clause)
        numbered = _CLAUSE.match(text)
        if numbered:  # "(C1) text", as the registry reads it from the docstring
            label, text = label or f"C{numbered.group(1)}", text[numbered.end():]
        if label is None:
            label = key if isinstance(key, str) else f"C{key}"
        label = str(label).rsplit(".", 1)[-1].rsplit(":", 1)[-1]  # "DIV-1.C1" -> "C1"
        out.append((label, str(text)))
    return out


def _type_name(value: Any) -> str:
    if value is None:
        return ""
    return value.__name__ if inspect.isclass(value) else str(value)


def error_types(rule: Any, failures: list[type]) -> str:
    """How a refusal of this rule is raised, e.g. ``ValueError`` (JAX raises
    ``IndivisibleError``): from the registry when it declares it, else from its failures."""
    declared = getattr(rule, "error_type", None) or getattr(rule, "error", None)
    jax_declared = getattr(rule, "jax_error", None)
    if declared:
        types = [_type_name(d) for d in
                 (declared if isinstance(declared, (list, tuple)) else [declared])]
        jax_names = [_type_name(j) for j in
                     (jax_declared if isinstance(jax_declared, (list, tuple))
                      else [jax_declared] if jax_declared else [])]
    else:
        types = [_type_name(getattr(f, "error_type", None)) for f in failures]
        jax_names = [str(getattr(f, "jax_error", "") or "") for f in failures]
    types = list(dict.fromkeys(t for t in types if t))
    jax_names = list(dict.fromkeys(j for j in jax_names if j))
    if not types:
        return ""
    text = " or ".join(f"``{t}``" for t in types)
    if jax_names and set(jax_names) != set(types):
        text += " (JAX raises " + " or ".join(f"``{j}``" for j in jax_names) + ")"
    return text


_MESSAGE = re.compile(r"^\s*[\w.]*(?:Rejection|Error|Exception)\w*: (\[(?P<id>[A-Z0-9-]+)\].*)$")


def example_message(rule: Any, doc: str, failures: list[type]) -> tuple[str, str] | None:
    """("example", message) from the rule's executed examples, or ("template", text) from
    its failure's template when no example refuses; None when the rule never refuses."""
    declared = getattr(rule, "example_message", None)
    if declared:
        return "example", str(declared)
    for line in doc.splitlines():
        match = _MESSAGE.match(line)
        if match and match.group("id") == rule.id:
            return "example", match.group(1)
    from shardlaw.spec.core.rules import as_sentence  # the punctuation explain() gives a message
    for failure in failures:
        template = getattr(failure, "template", "")
        hint = getattr(failure, "hint", "")
        if isinstance(template, str) and template:
            text = f"[{rule.id}]: {template}"
            if isinstance(hint, str) and as_sentence(hint):
                text = f"{as_sentence(text)} {as_sentence(hint)}"
            return "template", text
    return None


@dataclasses.dataclass
class Context:
    """What the pages need beyond the registry: checks, engine counterparts, JAX's share."""

    checks: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    engine: dict[str, list[str]] | None = None  # None: the engine was not looked at
    left_to_jax: dict[str, str] = dataclasses.field(default_factory=dict)
    # {"note" | "reject": {rule ID: engine functions}}: rules decided inside other steps
    inline: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)


def statement_block(rule: Any, original: Any, doc: str, context: Context) -> list[str]:
    """The rule's block: statement, clauses and the facts a reader looks up."""
    lines = [".. container:: rule-block", ""]
    body = [".. rst-class:: rule-statement", "", prose(" ".join(rule.statement.split())), ""]
    clauses = clauses_of(rule)
    if clauses:
        body += [".. rst-class:: rule-clauses", ""]
        body += [f":{label}: {prose(' '.join(text.split()))}" for label, text in clauses]
        body += [""]

    facts: list[str] = []
    stage = getattr(rule, "stage", None)
    if stage:
        words = STAGE_WORDS.get(str(stage))
        facts.append(f":Stage: {literal(stage)}" + (f" — {prose(words)}" if words else ""))
    failures = failures_of(rule.id)
    types = error_types(rule, failures)
    if types:
        facts.append(f":Error: {types}")
    message = example_message(rule, doc, failures)
    if message:
        kind, text = message
        label = "Message" if kind == "example" else "Message template"
        facts += [f":{label}:", "", indent(".. code-block:: text"), "", indent(indent(text)), ""]
    if context.engine is not None:
        names = context.engine.get(rule.id, [])
        # a marker in the registry (True or the reason), else the engine's own table
        marked = getattr(rule, "left_to_jax", None) or context.left_to_jax.get(rule.id)
        noted = context.inline.get("note", {}).get(rule.id, [])
        refused = context.inline.get("reject", {}).get(rule.id, [])
        if names:
            facts.append(":Engine: " + ", ".join(f"``{n}``" for n in names))
        elif noted:
            facts.append(":Engine: decided inside "
                         + ", ".join(f"``{n}``" for n in noted))
        elif rule.id in context.left_to_jax or marked:
            reason = marked if isinstance(marked, str) and marked.strip() else ""
            facts.append(":Engine: left to JAX" + (f": {prose(reason)}" if reason
                                                   else " (so the engine declares)"))
        elif refused:
            facts.append(":Engine: refused inside "
                         + ", ".join(f"``{n}``" for n in refused))
        elif rule.mirrors.lstrip().startswith("("):  # JAX has no such step either
            facts.append(f":Engine: none (no engine function carries ``{rule.id}``)")
        else:
            facts.append(f":Engine: left to JAX (no engine function carries ``{rule.id}``)")
    for jax, variant in sorted(getattr(rule, "variants", {}).items()):
        # the rule as an older JAX has it (declared with the rule: shardlaw.spec.core.rules.varies)
        said = ("absent — " if variant.absent else "") + prose(" ".join(variant.statement.split()))
        raised = ", ".join(f"{literal(new)} was {literal(old)}" for new, old in variant.raises)
        clauses = " ".join(prose(" ".join(c.split())) for c in variant.clauses)
        facts.append(f":In JAX {jax}: {said}" + (f" ({raised})" if raised else "")
                     + (f" {clauses}" if clauses else ""))
    facts.append(f":Mirrors: {literal(rule.mirrors)}")
    facts.append(f":Defined in: ``{original.__module__}.{original.__qualname__}``")
    names = context.checks.get(rule.id, [])
    if names:
        facts += [":Checked by:", ""]
        facts += [indent(f"* {property_entry(n)}") for n in names] + [""]
    else:
        facts.append(":Checked by: no property checks this rule yet")
    body += [".. rst-class:: rule-facts", ""] + facts + [""]
    return lines + [indent("\n".join(body)), ""]


def rule_entry(rule: Any, checks_or_context: dict[str, list[str]] | Context) -> str:
    context = (checks_or_context if isinstance(checks_or_context, Context)
               else Context(checks=checks_or_context))
    function = rule.function
    original = inspect.unwrap(function)
    doc = inspect.getdoc(original) or ""
    title = f"{rule.id} · {original.__name__}"
    lines = [f".. _rule-{rule.id}:", "", title, "-" * len(title), ""]
    lines += statement_block(rule, original, doc, context)

    # The docstring after its statement, prose and examples in their own order.
    blocks = docstring_blocks(doc)
    rest = blocks[1:] if blocks and not blocks[0].lstrip().startswith(">>>") else blocks
    if blocks and rest is not blocks:
        first = " ".join(blocks[0].split())
        statement = " ".join(rule.statement.split())
        if first.startswith(statement) and first[len(statement):].strip():
            rest = [first[len(statement):].strip()] + rest
    has_examples = any(b.lstrip().startswith(">>>") for b in rest)
    if has_examples:
        module = original.__module__
        lines += [f".. testsetup:: {rule.id}", "",
                  "   import importlib as _importlib",
                  f"   globals().update({{k: v for k, v in vars(_importlib.import_module("
                  f"{module!r})).items() if not k.startswith('__')}})", ""]
    if clauses_of(rule):  # the clauses are in the block above
        rest = [b for b in rest if not _CLAUSE.match(b)]
    shown_rubric = False
    for block in rest:
        if block.lstrip().startswith(">>>"):
            first = not shown_rubric
            if first:
                lines += [".. rubric:: Examples", ""]
                shown_rubric = True
            if tabular(block):  # columns keep their alignment; long messages wrap (CSS)
                lines += [".. rst-class:: keep-columns", ""]
            lines += [f".. doctest:: {rule.id}", "", indent(textwrap.dedent(block)), ""]
            if first and rule.family in PICTURED_FAMILIES:  # the example's sharding, drawn
                lines += example_grid(textwrap.dedent(block), original.__module__, rule.id)
        else:
            lines += [prose(" ".join(block.split())), ""]
    if not has_examples:
        lines += ["This rule has no example yet.", ""]

    source = source_without_docstring(original)
    lines += [".. raw:: html", "",
              "   <details class=\"rule-source\"><summary>Source "
              f"<code>{original.__qualname__}</code> (docstring above)</summary>", "",
              ".. code-block:: python", "", indent(source.rstrip("\n")), "",
              ".. raw:: html", "", "   </details>", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- pages

_GENERATED = ".. This page is generated by docs/_ext/shardlaw_rules.py; do not edit."


def family_page(family: str, rules: list[Any],
                checks_or_context: dict[str, list[str]] | Context) -> str:
    title = f"{family}: {family_title(family)}"
    lines = [_GENERATED, "", title, "=" * len(title), "",
             ".. rst-class:: rule-summary", ""]
    lines += [f"* :ref:`rule-{r.id}` — {prose(r.statement)}" for r in rules] + [""]
    for r in rules:
        lines.append(rule_entry(r, checks_or_context))
    return "\n".join(lines)


def stages_of(rules: list[Any]) -> list[str]:
    """The stages the registry declares for these rules, in pipeline order."""
    found = {str(getattr(r, "stage", None) or "") for r in rules} - {""}
    return sorted(found, key=lambda s: (list(STAGE_WORDS).index(s) if s in STAGE_WORDS
                                        else len(STAGE_WORDS), s))


def stages_text(stages: list[str]) -> str:
    """``stage ``trace```` or ``stages ``jit``, ``trace````."""
    return ("stage " if len(stages) == 1 else "stages ") + ", ".join(f"``{s}``" for s in stages)


def families_include(families: dict[str, list[Any]]) -> str:
    """The families in pipeline order, with their titles (included by ``docs/index.rst``)."""
    lines = [_GENERATED.replace("page", "file"), ""]
    for part, members in pipeline_order(families):
        lines += [f"**{part}**", ""]
        for family in members:
            count = len(families[family])
            about = f"{count} rule{'s' * (count != 1)}"
            stages = stages_of(families[family])
            if stages:
                about += "; " + stages_text(stages)
            lines.append(f"* :doc:`{family} <rules/{family.lower()}>` — "
                         f"{prose(family_title(family))} ({about})")
        lines.append("")
    return "\n".join(lines)


def index_page(families: dict[str, list[Any]], rules_count: int, unchecked: list[str],
               unread: list[str]) -> str:
    lines = [_GENERATED, "", "The rules", "=========", "",
             f"The specification has {rules_count} rules in {len(families)} families, listed "
             "here in pipeline order: values, where a sharding places blocks, when two "
             "shardings are the same, a jit call stage by stage, and the caches. Every rule "
             "has the same entry: a block with its statement, its numbered clauses when it "
             "has several, the stage of a jit call it belongs to, the error a refusal raises "
             "and an example message, the engine function that implements it, the JAX "
             "function it mirrors and the properties that check it; then its examples, "
             "which this documentation runs as doctests; then its source, folded away.", ""]
    if unchecked:
        lines += ["Rules that no property checks yet: "
                  + ", ".join(f":ref:`rule-{r}`" for r in unchecked) + ".", ""]
    else:
        lines += ["Every rule is checked by at least one property.", ""]
    if unread:
        lines += ["What could not be read when this page was built:", ""]
        lines += [f"* {prose(name)}" for name in unread] + [""]
    for part, members in pipeline_order(families):
        lines += [part, "-" * len(part), ""]
        for family in members:
            ids = ", ".join(f":ref:`{r.id} <rule-{r.id}>`" for r in families[family])
            stages = stages_of(families[family])
            at = f" ({stages_text(stages)})" if stages else ""
            lines.append(f"* :doc:`{family}: {prose(family_title(family))} "
                         f"<{family.lower()}>`{at} — {ids}")
        lines.append("")
    order = [f for _, members in pipeline_order(families) for f in members]
    lines += [".. toctree::", "   :hidden:", "   :maxdepth: 2", ""]
    lines += [f"   {family.lower()}" for family in order] + [""]
    return "\n".join(lines)


# The value types, in the order the values page lists them: (group, names).
VALUE_TYPES = [
    ("Devices and meshes", ["Iota", "Device", "DeviceList", "AxisType", "AbstractMesh", "Mesh"]),
    ("Partition specs", ["PartitionSpec", "UNCONSTRAINED"]),
    ("HLO shardings", ["HloSharding", "Replicated", "Maximal", "Manual", "Unreduced", "Tiled",
                       "SubgroupType"]),
    ("Shardings", ["NamedSharding", "SingleDeviceSharding", "GSPMDSharding", "UNSPECIFIED",
                   "AUTO"]),
    ("Rules and rejections", ["Rule", "Rejection"]),
]


def value_types_include() -> str:
    """The list of value types with their docstrings (included by ``values.rst``)."""
    import shardlaw.spec as spec

    lines = [_GENERATED.replace("page", "file"), ""]
    for group, names in VALUE_TYPES:
        lines += [group, "-" * len(group), ""]
        for name in names:
            value = getattr(spec, name, None)
            if value is None:
                continue
            kind = "class" if inspect.isclass(value) else "marker"
            doc = inspect.getdoc(value) or ""
            module = getattr(value, "__module__", "shardlaw.spec") if kind == "class" \
                else "shardlaw.spec"
            paragraphs = [prose(" ".join(p.split())) for p in split_docstring(doc)[0]]
            lines += [f"``{name}`` ({kind}, ``{module}``)",
                      indent("\n\n".join(paragraphs) or "(no description)"), ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app: Any, config: Any) -> None:
    rules = load_rules()
    checks, unread = property_checks()
    for name in unread:
        logger.info("shardlaw: not read: %s", name)
    context = Context(checks=checks, engine=engine_counterparts(), left_to_jax=left_to_jax(),
                      inline=engine_inline_sites())

    families: dict[str, list[Any]] = {}
    for r in rules.values():
        families.setdefault(r.family, []).append(r)
    for members in families.values():
        members.sort(key=lambda r: int(r.id.rsplit("-", 1)[1]))

    out = Path(app.srcdir) / "rules"
    out.mkdir(exist_ok=True)
    wanted = {"index.rst"}
    order = [f for _, members in pipeline_order(families) for f in members]
    unchecked = [r.id for f in order for r in families[f] if not checks.get(r.id)]
    _write(out / "index.rst", index_page(families, len(rules), unchecked, unread))
    for family, members in families.items():
        name = f"{family.lower()}.rst"
        wanted.add(name)
        _write(out / name, family_page(family, members, context))
    _write(out / "families.inc", families_include(families))
    _write(out / "value-types.inc", value_types_include())
    for stale in out.glob("*.rst"):
        if stale.name not in wanted:
            stale.unlink()


def setup(app: Any) -> dict[str, Any]:
    app.connect("config-inited", generate)
    app.add_css_file("shardlaw.css")
    return {"version": "2", "parallel_read_safe": True, "parallel_write_safe": True}

"""The engine and the spec are two implementations: no code of one is copied into the other.

The differential tests hold the engine against the spec (and both against JAX); that is worth
something only while the two decide independently. This test reads every ``.py`` file of
``engine/`` and of ``spec/`` (all of its sub-packages) as text and fails when six or more
consecutive lines of an engine file stand, in the same shape, in a spec file — the check
that the ``duplicates`` command makes, written here with the standard library:

* each line is normalised: names become ``N``, strings ``S`` and numbers ``0`` (keywords
  and operators stay), so a copy with renamed variables still matches; a string that spans
  lines is one ``S`` on the line it starts on;
* lines that decide nothing are passed over, as comments and blank lines are: import lines,
  lone punctuation, decorators, ``class`` headers, docstrings, and declarations of a name's
  type with at most a literal default (a record's fields: ``rule: str | None = None``).
  Such lines take the same few shapes in any two records, copied or not.

A failure names both places. The cure is on the engine side: write the engine's own
implementation of what it decides, not the spec's with other names.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = 6   # consecutive normalised lines that make a copy

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
if hasattr(tokenize, "FSTRING_START"):   # Python 3.12 splits f-strings into parts
    _FSTRING = {tokenize.FSTRING_START, tokenize.FSTRING_MIDDLE, tokenize.FSTRING_END}
else:
    _FSTRING = set()


def normalised_lines(text: str) -> list[tuple[int, str]]:
    """(line number, shape) for each line of Python source that counts."""
    shapes: dict[int, list[str]] = {}
    in_fstring = 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind, value, (line, _) = token.type, token.string, token.start
        if kind in _SKIP:
            continue
        if kind in _FSTRING:   # an f-string is one string, whatever it holds
            if kind == tokenize.FSTRING_START:
                if not in_fstring:
                    shapes.setdefault(line, []).append("S")
                in_fstring += 1
            elif kind == tokenize.FSTRING_END:
                in_fstring -= 1
            continue
        if in_fstring:
            continue
        if kind == tokenize.NAME:
            word = value if keyword.iskeyword(value) else "N"
        elif kind == tokenize.STRING:
            word = "S"
        elif kind == tokenize.NUMBER:
            word = "0"
        else:
            word = value
        shapes.setdefault(line, []).append(word)
    return [(line, " ".join(shapes[line])) for line in sorted(shapes)
            if not _decides_nothing(shapes[line])]


def _decides_nothing(words: list[str]) -> bool:
    """Import lines, lone punctuation, decorators, class headers, docstrings, and a name's
    declared type with at most a literal default (no call)."""
    if words[0] in ("import", "from", "@", "class") or words == ["S"]:
        return True
    if all(not w.isalnum() for w in words):
        return True
    calls = any(w == "(" and nxt != ")" for w, nxt in zip(words, words[1:] + [""]))
    return words[:2] == ["N", ":"] and not calls


def _python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _windows(path: Path) -> list[tuple[tuple[str, ...], int, int]]:
    """Every run of RUN consecutive normalised lines: (shapes, first line, last line)."""
    lines = normalised_lines(path.read_text(encoding="utf-8"))
    return [(tuple(shape for _, shape in lines[i:i + RUN]), lines[i][0], lines[i + RUN - 1][0])
            for i in range(len(lines) - RUN + 1)]


def shared_runs(ours: str = "engine", theirs: str = "spec") -> list[str]:
    """Each place in ``ours`` whose lines stand in the same shape in ``theirs``, with both places."""
    seen: dict[tuple[str, ...], str] = {}
    for path in _python_files(theirs):
        for shapes, first, last in _windows(path):
            seen.setdefault(shapes, f"{path.relative_to(ROOT)}:{first}-{last}")
    found = []
    for path in _python_files(ours):
        last_reported = 0
        for shapes, first, last in _windows(path):
            where = seen.get(shapes)
            if where is not None and first > last_reported:   # one row per run of overlaps
                found.append(f"{path.relative_to(ROOT)}:{first}-{last} ~ {where}")
                last_reported = last
    return found


def test_the_check_sees_a_renamed_copy():
    a = "def f(x, y):\n    total = 0\n    for item in x:\n        total += item * 2\n" \
        "    if total > y:\n        return 'big'\n    return total\n"
    b = "def g(values, limit):  # renamed\n\n    acc = 1\n    for v in values:\n" \
        "        acc += v * 3\n    if acc > limit:\n        return \"large\"\n    return acc\n"
    assert [s for _, s in normalised_lines(a)] == [s for _, s in normalised_lines(b)]
    assert len(normalised_lines(a)) == 7
    assert normalised_lines('x = f"{a} and {b}"\n"""doc\nstring"""\n') == [(1, "N = S")]
    record = ("@dataclasses.dataclass(frozen=True)\nclass A:\n    'Doc.'\n\n"
              "    rule: str | None = None\n    size: int = 0\n"
              "    parts: list = dataclasses.field(default_factory=list)\n")
    assert normalised_lines(record) == [(7, "N : N = N . N ( N = N )")]


def test_the_check_reads_both_trees():
    assert len(_python_files("engine")) >= 10 and len(_python_files("spec")) >= 10
    # Code is left after the pass-over: most of a file's lines count.
    recovery = next(p for p in _python_files("spec") if p.name == "recovery.py")
    assert len(_windows(recovery)) > 100


def test_no_engine_code_is_copied_from_the_spec():
    shared = shared_runs()
    assert not shared, (
        f"{len(shared)} run(s) of {RUN}+ lines of engine/ stand, in the same shape, in spec/ "
        "(engine place ~ spec place); write the engine's own implementation:\n  "
        + "\n  ".join(shared))

"""A refusal with a hint reads as two sentences: ``[RULE]: message. Hint.`` (issue 12, item 5)."""

import dataclasses
from pathlib import Path
from typing import ClassVar

from hypothesis import given, strategies as st

from shardlaw.spec import jit_call
from shardlaw.spec.core.rules import Failure, explain
from shardlaw.spec.vectors.jit_vectors import load_vector

ENDS = (".", "!", "?", "\u2026")


@dataclasses.dataclass(frozen=True)
class Said(Failure):
    rule: ClassVar[str] = "SPEC-0"
    template: ClassVar[str] = "{text}"
    text: object
    said: object = ""

    @property
    def hint(self) -> str:  # type: ignore[override]
        return self.said


class Odd(str):
    """A str whose own methods raise: the message must not call them."""

    def rstrip(self, *args):
        raise RuntimeError("rstrip")

    def endswith(self, *args):
        raise RuntimeError("endswith")

    def __getitem__(self, index):
        raise RuntimeError("getitem")


def test_message_and_hint_are_sentences():
    assert explain(Said("jit does not reshard committed arguments", "Reshard it first")) == \
        "[SPEC-0]: jit does not reshard committed arguments. Reshard it first."
    assert explain(Said("it is wrong!", "Fix it? ")) == "[SPEC-0]: it is wrong! Fix it?"
    assert explain(Said("no hint here", "")) == "[SPEC-0]: no hint here"
    assert explain(Said("a blank hint", " \n ")) == "[SPEC-0]: a blank hint"
    assert explain(Said("a path", "See it"), "args[0]") == "[SPEC-0] at args[0]: a path. See it."


@given(st.text(), st.text())
def test_explain_cannot_fail_on_odd_text(text, hint):
    for said in (hint, Odd(hint)):
        message = explain(Said(text, said))
        assert message.startswith("[SPEC-0]: ")
        if str.strip(said):
            assert message.endswith(ENDS)


def test_vectors_store_the_spec_s_messages():
    """A vector stores its refusal's message as the spec words it today."""
    for path in sorted(Path(__file__).parent.parent.glob("vectors/jit/**/*.json")):
        vector = load_vector(path.read_text())
        if vector.expect is None or vector.expect.accepted or not vector.expect.message:
            continue
        assert vector.expect.message == jit_call(vector.call).message, path

"""reStructuredText as a terminal shows it: the rules' statements are written for the docs
(``code``, :func:`name`, :class:`~module.Name`); the command line prints them as plain text."""

from __future__ import annotations

import re

__all__ = ["plain_text"]

# :role:`target`, :role:`~a.b.target` (the last part), :role:`words <target>` (the words).
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`(~?)([^`<]*?)(?:\s*<[^`>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")


def _role_text(match: re.Match[str]) -> str:
    short, text = match.group(1), match.group(2).strip()
    return text.rsplit(".", 1)[-1] if short else text


def plain_text(text: str) -> str:
    """``text`` without its reST markup: roles become their names, literals their text, and
    backslash-escaped spaces vanish.

    >>> plain_text("The values are :class:`Arg` leaves; ``P('x')`` names "
    ...            ":func:`~shardlaw.spec.jit_call` and :doc:`the cache <cache>`.")
    "The values are Arg leaves; P('x') names jit_call and the cache."
    """
    text = _ROLE.sub(_role_text, text)
    text = _LITERAL.sub(r"\1", text)
    return text.replace("\\ ", "")

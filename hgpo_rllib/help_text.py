"""A script's ``--help`` description from its module docstring: the first paragraph, as plain text.

A docstring's first line can stop mid-sentence, and its reST markup (``:func:`~a.b```, double
backquotes) reads as noise in a terminal; every script under ``benchmarks/`` and ``scripts/`` describes
itself with :func:`doc_summary` instead. Pure: the GPU-only benchmarks import it without RLlib.
"""

from __future__ import annotations

import re

#: A reST role, ``:func:`target```, ``:func:`~a.b.target``` or ``:func:`title <target>```.
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")
#: A reST inline literal, ````text````.
_LITERAL = re.compile(r"``([^`]+)``")


def _role_text(match: re.Match[str]) -> str:
    """What Sphinx shows for a role: its title, else its target (the last name with ``~``)."""
    content = match.group(1)
    if titled := re.fullmatch(r"(.+?)\s*<[^>]+>", content):
        return f"`{titled.group(1)}`"
    return f"`{content[1:].rsplit('.', 1)[-1]}`" if content.startswith("~") else f"`{content}`"


def doc_summary(doc: str | None) -> str:
    """The first paragraph of ``doc`` on one line, each role and literal shown as its text in single
    backquotes (the style of ``rllib --help``); "" for no docstring."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    return _LITERAL.sub(r"`\1`", _ROLE.sub(_role_text, paragraph))

"""Where HiPER's three blocks sit in a response's tokens (``docs/hiper.md`` §Token assignment).

HiPER trains action tokens with the low-level advantage, subgoal tokens (on segment starts) with the
high-level one and switch tokens with the termination one; each span covers its block *with* its
tags, as the authors' masks do. The critic's values are read at token positions derived from the
same spans. Pure Python over the response's per-token texts, so it is tested without a tokenizer.

A token belongs to a span when any of its characters do (a token may straddle a tag's edge). Texts
are per-token decodes; a multi-byte character split over two tokens decodes to replacement
characters in each, which shifts offsets only inside such characters (never inside ASCII tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TAGS = ("switch", "subgoal", "action")


@dataclass(frozen=True)
class Spans:
    """Token index ranges ``[start, end)`` of each block, or None where the block is missing."""

    switch: tuple[int, int] | None
    subgoal: tuple[int, int] | None
    action: tuple[int, int] | None

    def low_value_position(self) -> int:
        """The response index of V_L: the first token after ``</subgoal>`` (the value there is the
        critic's output at the subgoal's last token), else after ``</switch>``, else 0. It is one
        past the last token when the response ends with that tag: the caller clamps it."""
        for span in (self.subgoal, self.switch):
            if span is not None:
                return span[1]
        return 0


def char_span(text: str, tag: str) -> tuple[int, int] | None:
    """``[start, end)`` of the first ``<tag>...</tag>`` in ``text``, tags included, or None."""
    start = text.find(f"<{tag}>")
    if start < 0:
        return None
    close = f"</{tag}>"
    end = text.find(close, start + len(tag) + 2)
    return None if end < 0 else (start, end + len(close))


def token_spans(pieces: Sequence[str]) -> Spans:
    """The spans of a response given its tokens' texts (valid tokens only, in order)."""
    starts, position = [], 0
    for piece in pieces:
        starts.append(position)
        position += len(piece)
    text = "".join(pieces)

    def tokens_of(span: tuple[int, int] | None) -> tuple[int, int] | None:
        if span is None:
            return None
        first = next(i for i, s in enumerate(starts) if s + len(pieces[i]) > span[0])
        last = max(i for i, s in enumerate(starts) if s < span[1])
        return first, last + 1

    switch, subgoal, action = (tokens_of(char_span(text, tag)) for tag in TAGS)
    return Spans(switch=switch, subgoal=subgoal, action=action)

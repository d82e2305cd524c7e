"""Turning an LLM's raw output into an environment command (the reference's "projection").

The whole generated string is the agent's action. As in verl-agent (docs/hgpo_algorithm.md §1), a
well-formed output is ``<think>...</think><action>command</action>``: it is *valid* when it has both
tag pairs and no CJK characters, and the command is the lower-cased text between the first
``<action>`` and the first ``</action>`` after it. Any other string is legal input and simply invalid.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_CJK = re.compile(r"[\u4e00-\u9fff]")
_WHITESPACE = re.compile(r"\s+")
# Longest command kept from a malformed output (the reference keeps the last 30 characters).
MALFORMED_TAIL_CHARS = 30
# Longest command ever passed to an engine; longer text cannot be a real command.
MAX_COMMAND_CHARS = 512


@dataclass(frozen=True)
class ParsedAction:
    """``command``: normalised text to execute; ``is_valid``: the reference's format validity."""

    command: str
    is_valid: bool


def normalize_command(text: str) -> str:
    """Lower-case, drop control characters, collapse whitespace, and cap the length.

    A command cut at the cap keeps its closing ``]``, so an over-long ``search[...]`` stays a search
    (of its first words) instead of becoming an invalid action."""
    closed = text.rstrip().endswith("]")
    text = text[: 4 * MAX_COMMAND_CHARS]  # bound the work on huge outputs; longer is no command
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C" or ch in "\t\n ")
    text = _WHITESPACE.sub(" ", text).strip().lower()
    if len(text) <= MAX_COMMAND_CHARS:
        return text
    if closed:
        return text[: MAX_COMMAND_CHARS - 1].rstrip() + "]"
    return text[:MAX_COMMAND_CHARS].rstrip()


def parse_action(output: str, *, require_tags: bool = True) -> ParsedAction:
    """Extract the command from an LLM output; never raises.

    With ``require_tags=False`` (small from-scratch models, e.g. KeyChest) an output without an
    ``<action>`` block is taken whole as the command and counts as valid.
    """
    if not isinstance(output, str):
        output = "" if output is None else str(output)
    lowered = output.lower()
    start = lowered.find("<action>")
    end = lowered.find("</action>", start + len("<action>")) if start != -1 else -1
    if start != -1 and end != -1:
        command = normalize_command(lowered[start + len("<action>") : end])
        is_valid = "<think>" in output and "</think>" in output if require_tags else True
    elif require_tags:
        return ParsedAction(normalize_command(lowered[-MALFORMED_TAIL_CHARS:]), False)
    else:
        command, is_valid = normalize_command(lowered), True
    if _CJK.search(output):
        is_valid = False
    return ParsedAction(command, is_valid)

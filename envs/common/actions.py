"""Turning an LLM's raw output into an environment command (the reference's "projection").

The whole generated string is the agent's action; ``answer_format`` (an env setting) says which shape
a well-formed one has. Any other string is legal input and simply invalid.

* ``"think_action"`` (default; verl-agent's, docs/hgpo_algorithm.md §1):
  ``<think>...</think><action>command</action>``, valid when it has both tag pairs (or, where bare
  commands are allowed, is no longer than a command) (:func:`parse_action`).
* ``"plan_execute"`` (HiPER, Peng et al. 2026, docs/hiper.md "The plan-execute answer format"):
  ``<switch>KEEP|SWITCH</switch><subgoal>...</subgoal><action>command</action>``, valid when all three
  tag pairs are there and the switch text is exactly KEEP or SWITCH (:func:`parse_plan_execute`).

In every format an output with CJK or control characters (a NUL byte) is invalid
(:func:`is_malformed_text`).

In both, the command is the lower-cased text between the first ``<action>`` and the first
``</action>`` after it (tags matched in any case).

A team role's answer in a tag of its own (a verdict, a subgoal; the team envs of
:mod:`envs.common.team_env`) is read by :func:`parse_tagged`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_CJK = re.compile(r"[\u4e00-\u9fff]")
_WHITESPACE = re.compile(r"\s+")
# Longest command kept from a malformed output (the reference keeps the last 30 characters).
MALFORMED_TAIL_CHARS = 30
# Longest command ever passed to an engine; longer text cannot be a real command.
MAX_COMMAND_CHARS = 512

THINK_ACTION = "think_action"
PLAN_EXECUTE = "plan_execute"
#: The values of the envs' ``answer_format`` setting.
ANSWER_FORMATS = (THINK_ACTION, PLAN_EXECUTE)
#: The only switch texts a valid plan-execute answer may hold (surrounding whitespace aside).
SWITCH_WORDS = ("KEEP", "SWITCH")
#: ``info`` keys of a plan-execute env's steps: the text inside ``<switch>`` and ``<subgoal>`` (None
#: when that tag pair is missing; None at reset).
SWITCH_INFO = "switch"
SUBGOAL_INFO = "subgoal"


def plan_execute_blocks(subgoals: Sequence[str], actions: Sequence[str]) -> list[str]:
    """Whole blocks a plan-execute answer can be assembled from: both switch blocks, one block per
    subgoal and one per action. A from-scratch model gets one token per block (its
    ``action_vocabulary``) and, restricted to the blocks (``constrain_to_admissible``), answers in three
    tokens; it still has to learn to write one block of each kind."""
    return [
        *(f"<switch>{word}</switch>" for word in SWITCH_WORDS),
        *(f"<subgoal>{subgoal}</subgoal>" for subgoal in subgoals),
        *(f"<action>{action}</action>" for action in actions),
    ]


def subgoals_of_blocks(blocks: Sequence[str]) -> list[str]:
    """The subgoals of the ``<subgoal>`` blocks among ``blocks`` (:func:`plan_execute_blocks` inverted)."""
    return [b[len("<subgoal>") : -len("</subgoal>")] for b in blocks if b.startswith("<subgoal>")]


@dataclass(frozen=True)
class ParsedAction:
    """``command``: normalised text to execute; ``is_valid``: the format's validity rule. A
    plan-execute answer also has its ``switch`` and ``subgoal`` texts (stripped; None when the tag
    pair is missing); the think-action format leaves them None."""

    command: str
    is_valid: bool
    switch: str | None = None
    subgoal: str | None = None


def check_answer_format(answer_format: Any) -> None:
    """Refuse an unknown ``answer_format`` in one line naming the allowed values."""
    if not isinstance(answer_format, str) or answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


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


def _as_text(output: Any) -> str:
    if not isinstance(output, str):
        return "" if output is None else str(output)
    return output


def _action_block(lowered: str) -> str | None:
    """The text between the first ``<action>`` and the first ``</action>`` after it, else None."""
    start = lowered.find("<action>")
    end = lowered.find("</action>", start + len("<action>")) if start != -1 else -1
    return lowered[start + len("<action>") : end] if start != -1 and end != -1 else None


def _block(output: str, tag: str) -> str | None:
    """The stripped text between the first ``<tag>`` and the first ``</tag>`` after it, else None."""
    start = output.find(f"<{tag}>")
    end = output.find(f"</{tag}>", start + len(tag) + 2) if start != -1 else -1
    return output[start + len(tag) + 2 : end].strip() if start != -1 and end != -1 else None


def parse_action(output: str, *, require_tags: bool = True) -> ParsedAction:
    """Extract the command from a think-action output; never raises.

    With ``require_tags=False`` (small from-scratch models, e.g. KeyChest) an output without an
    ``<action>`` block is taken whole as the command and counts as valid if no longer than a command
    (:data:`MAX_COMMAND_CHARS`). In every format an output with control characters (a NUL byte) or CJK
    characters is invalid.
    """
    output = _as_text(output)
    lowered = output.lower()
    block = _action_block(lowered)
    if block is not None:
        command = normalize_command(block)
        is_valid = "<think>" in output and "</think>" in output if require_tags else True
    elif require_tags:
        return ParsedAction(normalize_command(lowered[-MALFORMED_TAIL_CHARS:]), False)
    else:  # the whole output is the command: one no longer than any command is
        command, is_valid = normalize_command(lowered), len(output.strip()) <= MAX_COMMAND_CHARS
    return ParsedAction(command, is_valid and not is_malformed_text(output))


def is_malformed_text(output: str) -> bool:
    """CJK characters, or control characters (a NUL byte, an escape) other than tabs and line breaks:
    an output holding any is invalid in every env, role and format, whatever its tags say, so that
    ``invalid_rate`` means one thing across envs (docs/environments.md)."""
    return bool(_CJK.search(output)) or any(
        unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in output
    )


def parse_plan_execute(output: str) -> ParsedAction:
    """Parse a plan-execute answer (HiPER's agent format, docs/hiper.md); never raises.

    Valid as HiPER's env projection has it: the ``<switch>``, ``<subgoal>`` and ``<action>`` tag pairs
    are all present, the switch text is exactly KEEP or SWITCH (surrounding whitespace aside, so
    "keep" is invalid) and the output has no CJK or control characters. The switch and subgoal tags
    are matched as written in the prompt (lower case); their order is not checked. Without an
    ``<action>`` block the command is the output's tail, as :func:`parse_action` keeps it (never
    executed: invalid).
    HAE reads the switch text with its own, laxer rule (``hgpo_rllib.advantages.hae.parse_switch``).
    """
    output = _as_text(output)
    lowered = output.lower()
    block = _action_block(lowered)
    switch, subgoal = _block(output, "switch"), _block(output, "subgoal")
    command = normalize_command(block if block is not None else lowered[-MALFORMED_TAIL_CHARS:])
    is_valid = (
        block is not None and switch in SWITCH_WORDS and subgoal is not None and not is_malformed_text(output)
    )
    return ParsedAction(command, is_valid, switch, subgoal)


def current_subgoal(step_infos: Sequence[Mapping[str, Any]]) -> str | None:
    """The subgoal a plan-execute prompt shows next: the ``<subgoal>`` text of the latest valid turn,
    None before any (the prompt then says "None").

    HiPER's prompt shows the previous turn's subgoal text (docs/hiper.md, "The plan-execute answer
    format"; a KEEP is meant to copy it, a SWITCH replaces it). An invalid turn is not executed here,
    so it leaves the subgoal as it was too. ``step_infos`` are an episode's ``info`` dicts in order
    (reset first); infos without a subgoal (the think-action format) give None.
    """
    for info in reversed(step_infos):
        if info.get("is_action_valid") and info.get(SUBGOAL_INFO) is not None:
            return info[SUBGOAL_INFO]
    return None


# --------------------------------------------------------------------------- team roles' tags
def has_think(output: str) -> bool:
    """The reference's think rule (:func:`parse_action`): both tags present."""
    return "<think>" in output and "</think>" in output


def tag_text(output: str, tag: str) -> str | None:
    """The text between the first ``<tag>`` and the first ``</tag>`` after it (tags in any case),
    lower-cased and normalised as commands are; None when the pair is missing."""
    lowered = output.lower()
    start = lowered.find(f"<{tag}>")
    end = lowered.find(f"</{tag}>", start + len(tag) + 2) if start != -1 else -1
    return normalize_command(lowered[start + len(tag) + 2 : end]) if start != -1 and end != -1 else None


def parse_tagged(
    output: str, tag: str, *, require_think: bool, choices: Sequence[str] | None = None
) -> ParsedAction:
    """A role answer in ``<tag>`` (a verdict, a subgoal): valid when the tag holds text (one of
    ``choices`` when given), the think tags are there if required and the output has no CJK or control
    characters (:func:`is_malformed_text`). Without the tag the command is the
    output's tail, as :func:`parse_action` keeps it."""
    text = tag_text(output, tag)
    if text is None:
        return ParsedAction(normalize_command(output.lower()[-MALFORMED_TAIL_CHARS:]), False)
    is_valid = (
        bool(text)
        and (choices is None or text in choices)
        and (has_think(output) or not require_think)
        and not is_malformed_text(output)
    )
    return ParsedAction(text, is_valid)

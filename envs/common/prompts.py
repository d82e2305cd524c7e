"""Pieces shared by every environment's prompt template (docs/hgpo_algorithm.md §5.1).

The history window shows the last ``history_length`` (observation, action) records, numbered by their
absolute step (1-based), exactly as verl-agent's ``SimpleMemory.fetch`` formats them.
"""

from __future__ import annotations

from collections.abc import Sequence

HistoryRecord = tuple[str, str]  # (observation the action was taken on, the executed command)


def format_history(history: Sequence[HistoryRecord], history_length: int) -> tuple[str, int]:
    """Return the formatted last ``history_length`` records and how many were shown."""
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length}")
    records = list(history)
    recent = records[max(0, len(records) - history_length) :]
    first = len(records) - len(recent) + 1
    lines = [
        f"[Observation {first + j}: '{obs}', Action {first + j}: '{action}']"
        for j, (obs, action) in enumerate(recent)
    ]
    return "\n".join(lines), len(recent)


def history_fields(
    history: Sequence[HistoryRecord], history_length: int, step_index: int
) -> dict[str, object]:
    """The history placeholders of the reference's with-history templates (docs/hgpo_algorithm.md §5.1):
    ``step_count``, ``history_length`` (records shown), ``action_history`` and ``current_step``."""
    action_history, shown = format_history(history, history_length)
    return {
        "step_count": step_index,
        "history_length": shown,
        "action_history": action_history,
        "current_step": step_index + 1,
    }

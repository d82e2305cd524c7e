"""Pieces shared by every environment's prompt template (hgpo_algorithm.md §5.1).

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

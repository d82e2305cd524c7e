"""A Gymnasium text space that RLlib and vector envs can batch.

Gymnasium batches ``Text`` observations into a tuple of ``str``, which RLlib's ``unbatch`` then walks
character by character (docs/rllib_notes.md §4). ``TextSpace`` batches into a 1-D numpy object array
instead, and accepts any string up to ``max_length`` (an LLM's output is arbitrary text).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array


class TextSpace(gym.spaces.Text):
    """Any ``str`` of at most ``max_length`` characters (no charset restriction)."""

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=min_length, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


@concatenate.register(TextSpace)
def _concatenate_text(space: TextSpace, items, out):  # noqa: ARG001 - signature fixed by gymnasium
    batch = np.empty(len(items), dtype=object)
    batch[:] = list(items)
    return batch


@create_empty_array.register(TextSpace)
def _empty_text_array(space: TextSpace, n: int = 1, fn=np.zeros):  # noqa: ARG001
    batch = np.empty(n, dtype=object)
    batch[:] = [""] * n
    return batch

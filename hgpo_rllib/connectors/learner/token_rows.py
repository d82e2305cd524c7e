"""The learner's token batch: every step's frozen sampling-time tokens, dynamically padded (numpy).

Shared by every algorithm's learner connector: the prompt token ids the sampler saw (so the learner
trains on exactly those), the response ids and mask, and the sampling log-probs as ``old_logp``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from hgpo_rllib.columns import (
    ALLOWED_IDS,
    OLD_LOGP,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_IDS,
    RESP_LOGP,
    RESP_MASK,
)


def _left_padded(rows: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Stack 1-D token arrays right-aligned into ``[N, longest]`` ids and a 0/1 mask."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    width = int(lengths.max(initial=1))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows)), lengths)
    col_of = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    col_of += np.repeat(width - lengths, lengths)
    ids[row_of, col_of] = np.concatenate(rows) if len(rows) else []
    mask[row_of, col_of] = 1
    return ids, mask


def token_rows(episodes: Sequence[SingleAgentEpisode], pad_id: int) -> dict[str, np.ndarray]:
    """Prompt/response tokens, masks and sampling log-probs of every step, dynamically padded.

    Prompts are left-padded to the batch's longest prompt; response columns that are padding in
    every row are trimmed (docs/rllib_notes.md §4, "Trim all-PAD columns").
    """
    prompts = [p for ep in episodes for p in ep.get_extra_model_outputs(PROMPT_IDS)]
    prompt_ids, prompt_mask = _left_padded(prompts, pad_id)
    resp_ids = np.stack([a for ep in episodes for a in ep.get_actions()]).astype(np.int64)
    resp_mask = np.stack([m for ep in episodes for m in ep.get_extra_model_outputs(RESP_MASK)])
    resp_logp = np.stack([lp for ep in episodes for lp in ep.get_extra_model_outputs(RESP_LOGP)])
    used = np.flatnonzero(resp_mask.any(axis=0))
    width = int(used[-1]) + 1 if used.size else 1
    optional = {}
    if episodes and ALLOWED_IDS in episodes[0].extra_model_outputs:
        allowed = [np.asarray(a) for ep in episodes for a in ep.get_extra_model_outputs(ALLOWED_IDS)]
        optional[ALLOWED_IDS] = np.full((len(allowed), max(len(a) for a in allowed)), -1, dtype=np.int64)
        for i, row in enumerate(allowed):
            optional[ALLOWED_IDS][i, : len(row)] = row
    return {
        **optional,
        PROMPT_IDS: prompt_ids,
        PROMPT_MASK: prompt_mask,
        RESP_IDS: resp_ids[:, :width],
        RESP_MASK: resp_mask[:, :width].astype(np.int64),
        OLD_LOGP: resp_logp[:, :width].astype(np.float32),
        WEIGHTS_SEQ_NO: np.asarray(
            [w for ep in episodes for w in ep.get_extra_model_outputs(WEIGHTS_SEQ_NO)], dtype=np.int64
        ),
    }

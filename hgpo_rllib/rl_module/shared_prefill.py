"""A group's shared prompt prefilled once in HF generation (issue 63).

The rollouts of a group sample from one prompt (all of them at a group's first step, often later too),
and HF ``generate`` prefills every row. Here each distinct prompt of the batch is prefilled once, its
KV cache and last-token logits are copied to the rows that repeat it, and decoding goes on as
``generate``'s own loop does: the same forwards on the same [B, ...] inputs, the same logits
processors, the same sampler calls in the same order. So with the same torch seed the tokens and
log-probs are the unshared path's (``tests/rl_module/test_shared_prefill.py``: tokens equal, log-probs
within 1e-5 in float32; on this CPU bitwise equal, for SmolLM2-135M too, ``benchmarks/prefill_once.py``).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, LogitsProcessorList, PreTrainedModel


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct prompts among left-padded rows (equal ids and equal mask) and each row's index
    among them: ``ids == distinct_ids[inverse]``."""
    width = ids.shape[1]
    rows, inverse = torch.unique(torch.cat([ids, mask], 1), dim=0, return_inverse=True)
    return rows[:, :width], rows[:, width:], inverse


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions as ``generate`` numbers left-padded rows: from 0 at the first real token."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


def model_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """The attention mask ``generate`` passes: none where nothing is padding (another kernel path)."""
    return None if bool(mask.all()) else mask


def prefill_once(
    lm: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor] | None:
    """Every row's KV cache and last-token logits [B, V] (float32), each distinct prompt's states
    computed once; None where no prompt repeats (nothing to share: ``generate`` runs as it is).

    The output layer runs on all B rows' last states, as in ``generate``: a CPU matmul of a few rows
    rounds differently with their number (on the distinct rows, SmolLM2-135M's logits were 4e-5 off),
    while the prompt's states came out bitwise equal."""
    distinct_ids, distinct_mask, inverse = distinct_rows(ids, mask)
    if len(distinct_ids) == len(ids):
        return None
    cache = DynamicCache(config=lm.config.get_text_config(decoder=True))
    hidden = lm.get_decoder()(
        input_ids=distinct_ids,
        attention_mask=model_mask(distinct_mask),
        position_ids=position_ids(distinct_mask),
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    cache.reorder_cache(inverse)
    return cache, lm.get_output_embeddings()(hidden[inverse, -1:])[:, -1].float()


def decode(
    lm: PreTrainedModel,
    ids: torch.Tensor,
    mask: torch.Tensor,
    cache: DynamicCache,
    logits: torch.Tensor,
    processors: LogitsProcessorList,
    *,
    sampling: bool,
    max_new_tokens: int,
    stop_token_ids: list[int],
    pad_token_id: int,
) -> torch.Tensor:
    """Response tokens [B, L] from the prompts' cache and last logits, step by step as ``generate``'s
    loop: process, sample (or argmax), pad the rows that stopped; L < max_new_tokens if all stopped."""
    attention = model_mask(mask)
    positions = position_ids(mask)[:, -1:]
    stops = torch.tensor(stop_token_ids, dtype=torch.long, device=ids.device)
    unfinished = torch.ones(len(ids), dtype=torch.bool, device=ids.device)
    tokens = ids
    for step in range(max_new_tokens):
        scores = processors(tokens, logits)
        if sampling:
            new = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            new = torch.argmax(scores, dim=-1)
        new = torch.where(unfinished, new, pad_token_id)
        tokens = torch.cat([tokens, new[:, None]], dim=-1)
        unfinished &= ~torch.isin(new, stops)
        if step + 1 == max_new_tokens or not unfinished.any():
            break
        positions = positions + 1
        if attention is not None:
            attention = torch.cat([attention, attention.new_ones((len(ids), 1))], dim=-1)
        logits = (
            lm(
                input_ids=new[:, None],
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            .logits[:, -1]
            .float()
        )
    return tokens[:, ids.shape[1] :]

"""The one generation interface of the policy, and its Hugging Face ``generate`` implementation.

The RLModule hands a :class:`Generator` token ids and gets back sampled tokens with the log-probs of
the distribution it sampled from; which engine does it (HF ``generate`` here, vLLM in
:mod:`hgpo_rllib.rl_module.vllm_generation`) is invisible to the module otherwise. Both sample from
``softmax(logits / temperature)`` with no top-k/top-p and report that distribution's log-probs, so the
learner can reproduce them exactly (docs/rllib_notes.md §4). :class:`HFGenerator` prefills each
distinct prompt of a batch once (:mod:`~hgpo_rllib.rl_module.shared_prefill`).
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    PreTrainedModel,
    TemperatureLogitsWarper,
)

from hgpo_rllib.rl_module.logprobs import MASKED_LOGIT
from hgpo_rllib.rl_module.shared_prefill import decode, prefill_once


class Generated(NamedTuple):
    """One response per prompt, right-padded: tokens and log-probs [B, L] (L <= max_new_tokens), and
    each row's length [B] (tokens past it, and past a row's first stop token, are padding)."""

    tokens: torch.Tensor
    logp: torch.Tensor
    lengths: torch.Tensor


class Generator(abc.ABC):
    """Samples responses for left-padded prompts; holds the weights it samples with."""

    @abc.abstractmethod
    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        temperature: float,
        max_new_tokens: int,
        stop_token_ids: list[int],
        pad_token_id: int,
        allowed: torch.Tensor | None = None,
        min_new_tokens: int = 0,
    ) -> Generated:
        """Sample at ``temperature`` (0: greedy, log-probs at temperature 1). ``allowed`` is a boolean
        mask of the tokens each row may emit, [V] for every row or [B, V] per row (None: all); no
        stop token is sampled before ``min_new_tokens`` tokens, and the log-probs are those of that
        restricted distribution."""

    @abc.abstractmethod
    def load_weights(self, lm: PreTrainedModel) -> int:
        """Sample with ``lm``'s current weights from now on; returns the bytes copied (0 if none)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the engine holds outside this process; idempotent."""


def gather_logp(logp_all: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Pick each token's log-prob; ids may arrive as int32 from numpy episodes, gather needs int64."""
    return logp_all.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def trim_left_padding(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop leading columns that are padding in every row (prompts may arrive padded to a fixed width)."""
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else 0
    return ids[:, start:], mask[:, start:]


class _AllowedTokens(LogitsProcessor):
    """Restricts sampling to allowed tokens: a [V] mask for every row, or a [B, V] mask per row."""

    def __init__(self, allowed: torch.Tensor):
        self.allowed = allowed

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(~self.allowed.to(scores.device), MASKED_LOGIT)


class _SampledLogProbs(LogitsProcessor):
    """Last processor of ``generate``: records each sampled token's log-prob, not the full scores.

    A step's token is only known at the next step (it is the last column of ``input_ids`` then), so
    one step's processed scores [B, V] are kept until then; ``output_scores`` would keep all L of them.
    """

    def __init__(self) -> None:
        self._logp: list[torch.Tensor] = []
        self._pending: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self._logp.append(gather_logp(self._pending.log_softmax(-1), input_ids[:, -1]))
        self._pending = scores
        return scores

    def logp(self, resp: torch.Tensor) -> torch.Tensor:
        """Log-probs [B, L] of the generated tokens ``resp`` (generate may drop trailing steps)."""
        steps = list(self._logp)
        if len(steps) < resp.shape[1] and self._pending is not None:
            steps.append(gather_logp(self._pending.log_softmax(-1), resp[:, len(steps)]))
        if len(steps) < resp.shape[1]:
            raise RuntimeError(f"recorded {len(steps)} sampling steps for {resp.shape[1]} generated tokens")
        return torch.stack(steps[: resp.shape[1]], dim=1)


class HFGenerator(Generator):
    """One batched ``generate`` call of the module's own model (CPU default; any device).

    HF runs a caller's logits processors before its own temperature/top-k/top-p warpers, so the
    temperature is applied here, as a processor ahead of the log-prob recorder, and ``generate`` is
    left with nothing to warp (temperature 1, top_k 0, top_p 1, a clean generation_config): the
    recorder then sees exactly the distribution the sampler draws from.

    With ``share_prefill``, a batch whose rows repeat a prompt (a group's rollouts) prefills each
    distinct prompt once and decodes as ``generate`` would: the same tokens and log-probs.
    """

    def __init__(self, lm: PreTrainedModel, share_prefill: bool = True):
        self.lm = lm
        self.share_prefill = share_prefill

    def load_weights(self, lm: PreTrainedModel) -> int:
        self.lm = lm  # the module's model itself: nothing to copy
        return 0

    def close(self) -> None:
        """Nothing to release: generation runs in this process, on the module's own model."""

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        temperature: float,
        max_new_tokens: int,
        stop_token_ids: list[int],
        pad_token_id: int,
        allowed: torch.Tensor | None = None,
        min_new_tokens: int = 0,
    ) -> Generated:
        sampling = temperature > 0
        # HF's own processors (the stop tokens' -inf before min_new_tokens) run before the caller's,
        # so the recorder sees the distribution sampled from.
        gen_config = GenerationConfig(
            do_sample=sampling,
            **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sampling else {}),
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            use_cache=True,
            eos_token_id=stop_token_ids,
            pad_token_id=pad_token_id,
        )
        device = self.lm.device
        recorder = _SampledLogProbs()
        processors = LogitsProcessorList(
            ([] if allowed is None else [_AllowedTokens(allowed)])
            + ([TemperatureLogitsWarper(float(temperature))] if sampling and temperature != 1.0 else [])
            + [recorder]
        )
        ids, mask = prompt_ids.to(device), prompt_mask.to(device)
        prefilled = prefill_once(self.lm, ids, mask) if self.share_prefill else None
        if prefilled is None:
            sequences = self.lm.generate(
                input_ids=ids, attention_mask=mask, generation_config=gen_config, logits_processor=processors
            )
            resp = sequences[:, ids.shape[1] :]
        else:
            # generate's own processor for min_new_tokens, ahead of the caller's as generate runs it.
            early_stop = (
                [MinNewTokensLengthLogitsProcessor(ids.shape[1], min_new_tokens, stop_token_ids, device)]
                if min_new_tokens and stop_token_ids
                else []
            )
            resp = decode(
                self.lm,
                ids,
                mask,
                *prefilled,
                LogitsProcessorList([*early_stop, *processors]),
                sampling=sampling,
                max_new_tokens=max_new_tokens,
                stop_token_ids=stop_token_ids,
                pad_token_id=pad_token_id,
            )
        # Rows that stop early are padded after their stop token, so every row's length is L.
        lengths = torch.full((resp.shape[0],), resp.shape[1], device=resp.device)
        return Generated(resp, recorder.logp(resp), lengths)

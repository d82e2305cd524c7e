"""HiPER's critic (Peng et al. 2026, ``docs/hiper.md`` §Critic): a causal-LM trunk with three linear
value heads, low (executor), high (planner) and termination (switch), read at response positions.

The authors load a separate critic model as a token classifier with three labels; its value at
response index j is the trunk's output at the token *before* response token j (the state the policy
was in when it wrote token j). :meth:`ThreeHeadCritic.forward` returns exactly that grid, ``[N, T, 3]``,
for stored prompt + response rows, and :func:`read_values` picks each row's three positions.

The trunk is a separate model by default: a local causal-LM directory (a smaller one than the actor
works, as the authors ran a 1.5B critic for a 7B actor) or, for tests and CPU demos, a random-init
tiny Qwen2 on the actor's own tokenizer. Its tokenizer must be the actor's: the value positions are
token positions. Our addition, ``"policy"``, puts the heads on the policy's own trunk: no second
model's weights, gradients and optimizer state, but the value loss then also moves the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from hgpo_rllib.rl_module.config import TINY_PRESET, read_model_config
from hgpo_rllib.rl_module.generation import trim_left_padding
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.rl_module.tokenizer import build_tiny_model

#: The heads, in the order of the last dimension of the critic's output.
VALUE_HEADS = ("low", "high", "term")


class ThreeHeadCritic(torch.nn.Module):
    """A transformer trunk and one linear layer with a value per head."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int, seed: int = 0):
        super().__init__()
        self.trunk = trunk
        self.heads = torch.nn.Linear(hidden_size, len(VALUE_HEADS))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            torch.nn.init.normal_(self.heads.weight, std=0.02)  # a token classifier's initialisation
            torch.nn.init.zeros_(self.heads.bias)

    def forward(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        resp_ids: torch.Tensor,
        resp_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Values ``[N, T, 3]``: at response index j, the heads on the trunk's output at the token
        before response token j (index 0: the prompt's last token). Positions as the policy's."""
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids, prompt_mask)
        input_ids = torch.cat([prompt_ids.long(), resp_ids.long()], dim=1)
        attention_mask = torch.cat([prompt_mask.long(), resp_mask.long()], dim=1)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        hidden = self.trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        width = resp_ids.shape[1]
        return self.heads(hidden[:, -(width + 1) : -1].to(self.heads.weight.dtype))


def read_values(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Each row's value of each head at its own response index: ``values`` ``[N, T, 3]``,
    ``positions`` ``[N, 3]`` (ints; -1 where a head has no position in that row, read as 0) -> ``[N, 3]``."""
    index = positions.clamp(min=0).long().unsqueeze(1)  # [N, 1, 3]
    picked = values.gather(1, index).squeeze(1)
    return torch.where(positions >= 0, picked, torch.zeros_like(picked))


def trunk_of(lm: torch.nn.Module) -> torch.nn.Module:
    """The transformer of a causal LM, without its LM head."""
    return getattr(lm, lm.base_model_prefix)


def build_critic(
    critic: str,
    *,
    actor_tokenizer: PreTrainedTokenizerBase,
    tiny_model: Mapping[str, Any],
    seed: int,
    dtype: torch.dtype = torch.float32,
) -> ThreeHeadCritic:
    """``critic``: a causal LM whose tokenizer is the actor's, named as ``model_config["model"]`` takes
    it (a directory, cached model id, GGUF file or short name), or ``"tiny-qwen2"`` (a random-init
    Qwen2 sized by ``tiny_model`` on the actor's tokenizer)."""
    if critic == TINY_PRESET:
        lm = build_tiny_model(actor_tokenizer, tiny_model, seed + 1)  # not the actor's init
        trunk = trunk_of(lm)
    else:
        check_critic_tokenizer(critic, actor_tokenizer)
        # The transformer alone: a causal-LM checkpoint's LM head is never loaded.
        trunk = AutoModel.from_pretrained(
            local_model_dir(critic), local_files_only=True, dtype=dtype, use_safetensors=True
        )
    return ThreeHeadCritic(trunk, trunk.config.hidden_size, seed).to(dtype)


def check_critic_tokenizer(critic: str, actor_tokenizer: PreTrainedTokenizerBase) -> None:
    """A ValueError unless the model ``critic`` (any name :func:`local_model_dir` resolves) has the
    actor's tokenizer (same vocabulary and special tokens): the critic reads its values at the actor's
    token positions."""
    directory = local_model_dir(critic)
    read_model_config(directory)  # a clear error if it is not a model directory
    theirs = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if theirs.get_vocab() != actor_tokenizer.get_vocab() or theirs.all_special_tokens != (
        actor_tokenizer.all_special_tokens
    ):
        raise ValueError(
            f"model_config['critic']={critic!r} has another tokenizer than the policy's; HiPER reads "
            "the critic's values at the policy's token positions, so both need the same tokenizer"
        )

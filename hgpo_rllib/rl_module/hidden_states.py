"""The hidden states that predict each response token, by the two routes the learner's passes take.

- :func:`row_states`: one left-padded row per step, as ``generate`` saw it (the unshared pass);
- :func:`packed_states`: one forward over prefix trees (:mod:`~hgpo_rllib.rl_module.prefix_sharing`),
  each row's states gathered from its path through its tree (issue 29: each shared prompt once);
- :func:`response_states`: the one or the other, as a micro-batch's packing says.

Plain torch and Transformers (no RLlib), so the GPU kernel checks of ``benchmarks/tree_attention.py``
run them where RLlib is not installed.
"""

from __future__ import annotations

import torch

from hgpo_rllib.rl_module.generation import trim_left_padding
from hgpo_rllib.rl_module.prefix_sharing import PrefixPacking

#: Attention implementations that take a custom [N, 1, L, L] mask (the prefix trees'); flash
#: attention does not, so there the learner runs the unshared rows.
TREE_MASK_ATTENTION = ("sdpa", "eager")


def row_states(
    backbone: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    resp_ids: torch.Tensor,
    resp_mask: torch.Tensor,
) -> torch.Tensor:
    """[N, T, H] states predicting ``resp_ids``, one padded row per step.

    position_ids = cumsum(mask) - 1 makes left-padded rows see the same positions as in ``generate``.
    The columns that are padding in every row are not computed: the prompts' leading ones and the
    responses' trailing ones (their states are zeros; a causal model's earlier states do not see
    them), so rows of about one length pad to about that length.
    """
    prompt_ids, prompt_mask = trim_left_padding(prompt_ids, prompt_mask)
    width = resp_ids.shape[1]
    used = resp_mask.any(dim=0).nonzero()
    kept = int(used[-1]) + 1 if len(used) else 0
    input_ids = torch.cat([prompt_ids.long(), resp_ids[:, :kept].long()], dim=1)
    attention_mask = torch.cat([prompt_mask.long(), resp_mask[:, :kept].long()], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    hidden = backbone(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state
    states = hidden[:, -(kept + 1) : -1]
    if kept == width:
        return states
    return torch.cat([states, states.new_zeros(len(states), width - kept, states.shape[-1])], dim=1)


def packed_states(backbone: torch.nn.Module, packing: PrefixPacking, device: torch.device) -> torch.Tensor:
    """[N, T, H] states predicting ``resp_ids``, gathered from one forward over the prefix trees;
    the gather's backward adds up the gradients of rows that share a state."""
    attend = torch.from_numpy(packing.attend).to(device).unsqueeze(1)
    if backbone.config._attn_implementation == "eager":  # eager adds the mask to the scores
        attend = torch.zeros(attend.shape, device=device).masked_fill(~attend, torch.finfo().min)
    hidden = backbone(
        input_ids=torch.from_numpy(packing.input_ids).to(device),
        attention_mask=attend,
        position_ids=torch.from_numpy(packing.position_ids).to(device),
        use_cache=False,
    ).last_hidden_state
    predictor = torch.from_numpy(packing.predictor).to(device)
    flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, predictor.reshape(-1))
    return flat.reshape(*predictor.shape, hidden.shape[-1])


def response_states(
    backbone: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    resp_ids: torch.Tensor,
    resp_mask: torch.Tensor,
    packing: PrefixPacking | None,
) -> torch.Tensor:
    """[N, T, H] states predicting ``resp_ids``: from the prefix trees of ``packing``, or from the
    plain rows where there is none (on the token batch's device)."""
    if packing is None:
        return row_states(backbone, prompt_ids, prompt_mask, resp_ids, resp_mask)
    return packed_states(backbone, packing, resp_ids.device)

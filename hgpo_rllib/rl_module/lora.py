"""LoRA for LLMRLModule, through PEFT: adapters on the learner, merged weights for everyone else.

``model_config["lora"] = {"r": 16, "alpha": 32, "target_modules": "all-linear", "dropout": 0.0}``
(every key optional but ``r``). The learner trains the adapters only; the KL reference is the same
model with the adapters disabled, so no second copy of the weights exists. Env runners receive
merged weights (W + scale * B A, computed without touching the base), so they generate with a plain
model; checkpoints hold the adapters only (the base model's path is in the module's config), and
:func:`hgpo_rllib.evaluation.export_merged` writes a merged Hugging Face model directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from transformers import PreTrainedModel

ADAPTER = "default"
#: Marks a module state that holds adapters only (RLModule checkpoints, learner -> learner).
ADAPTER_MARK = "lora_"


def add_adapters(lm: PreTrainedModel, lora: Mapping[str, Any]) -> PeftModel:
    """Wrap ``lm`` with fresh LoRA adapters (B = 0, so the policy starts as the base); base frozen."""
    config = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],
        target_modules=lora["target_modules"],
        lora_dropout=lora["dropout"],
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(lm, config)


def _plain_key(name: str) -> str:
    """``base_model.model.X.base_layer.weight`` -> ``X.weight``: the name in the unwrapped model."""
    name = name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


@torch.no_grad()
def merged_state_dict(model: PeftModel) -> dict[str, torch.Tensor]:
    """The plain model's state with every adapter folded in, computed aside: the base is untouched."""
    deltas = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
            deltas[_plain_key(f"{name}.weight")] = module.get_delta_weight(ADAPTER)
    merged = {}
    for name, tensor in model.state_dict().items():
        if ADAPTER_MARK in name:
            continue
        key = _plain_key(name)
        merged[key] = tensor + deltas[key].to(tensor.dtype) if key in deltas else tensor
    return merged


def adapter_state_dict(model: PeftModel) -> dict[str, torch.Tensor]:
    """Only the adapter weights (what a LoRA checkpoint holds)."""
    return {k: v for k, v in model.state_dict().items() if ADAPTER_MARK in k}


def merge_adapter_state(
    lm: PreTrainedModel, lora: Mapping[str, Any] | None, adapters: Mapping[str, torch.Tensor]
) -> PreTrainedModel:
    """Fold a checkpoint's adapters (PEFT names) into a plain model; returns the plain merged model."""
    if not lora:
        raise ValueError("the state holds LoRA adapters but model_config['lora'] is not set")
    model = add_adapters(lm, lora)
    result = model.load_state_dict(dict(adapters), strict=False)
    missing = [k for k in result.missing_keys if ADAPTER_MARK in k]
    if result.unexpected_keys or missing:
        raise ValueError(
            f"LoRA adapters do not match model_config['lora']={dict(lora)}: unexpected "
            f"{result.unexpected_keys[:3]}, missing {missing[:3]}"
        )
    return model.merge_and_unload()

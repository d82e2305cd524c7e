"""LoRA for LLMRLModule, through PEFT: adapters on the learner, merged weights for everyone else.

``model_config["lora"] = {"r": 16, "alpha": 32, "target_modules": "all-linear", "dropout": 0.0}``
(every key optional but ``r``). The learner trains the adapters only; the KL reference is the same
model with the adapters disabled, so no second copy of the weights exists. Env runners receive
merged weights (W + scale * B A, computed without touching the base), so they generate with a plain
model; checkpoints hold the adapters only (the base model's path is in the module's config), and
:func:`export_merged` writes a merged Hugging Face model directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from transformers import PreTrainedModel

LORA_KEYS = ("r", "alpha", "target_modules", "dropout")
ADAPTER = "default"
#: Marks a module state that holds adapters only (RLModule checkpoints, learner -> learner).
ADAPTER_MARK = "lora_"


def normalize_lora(value: Any) -> dict[str, Any] | None:
    """Validate ``model_config["lora"]`` and fill defaults (alpha = 2 r, all linear layers, no dropout)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"model_config['lora']={value!r} is invalid: expected a dict with keys {LORA_KEYS}")
    unknown = sorted(set(value) - set(LORA_KEYS))
    if unknown:
        raise ValueError(f"model_config['lora'] has unknown key(s) {unknown}; known keys: {list(LORA_KEYS)}")
    r = value.get("r")
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"model_config['lora']['r']={r!r} is invalid: expected an int >= 1")
    out = {
        "r": r,
        "alpha": value.get("alpha", 2 * r),
        "target_modules": value.get("target_modules", "all-linear"),
        "dropout": value.get("dropout", 0.0),
    }
    if not isinstance(out["alpha"], (int, float)) or isinstance(out["alpha"], bool) or out["alpha"] <= 0:
        raise ValueError(f"model_config['lora']['alpha']={out['alpha']!r} is invalid: expected a number > 0")
    targets = out["target_modules"]
    if targets != "all-linear" and not (
        isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets)
    ):
        raise ValueError(f"model_config['lora']['target_modules']={targets!r} is invalid: expected "
                         "'all-linear' or a non-empty list of module names (e.g. ['q_proj', 'v_proj'])")
    if not isinstance(out["dropout"], (int, float)) or not 0 <= out["dropout"] < 1:
        raise ValueError(f"model_config['lora']['dropout']={out['dropout']!r} is invalid: expected [0, 1)")
    if isinstance(targets, tuple):
        out["target_modules"] = list(targets)
    return out


def add_adapters(lm: PreTrainedModel, lora: Mapping[str, Any]) -> PeftModel:
    """Wrap ``lm`` with fresh LoRA adapters (B = 0, so the policy starts as the base); base frozen."""
    config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], target_modules=lora["target_modules"],
                        lora_dropout=lora["dropout"], bias="none", task_type="CAUSAL_LM")
    return get_peft_model(lm, config)


def base_model(model: PeftModel) -> PreTrainedModel:
    """The wrapped transformers model (its linear layers still carry the adapters)."""
    return model.get_base_model()


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
        raise ValueError(f"LoRA adapters do not match model_config['lora']={dict(lora)}: unexpected "
                         f"{result.unexpected_keys[:3]}, missing {missing[:3]}")
    return model.merge_and_unload()


def export_merged(checkpoint: str | Path, output_dir: str | Path) -> Path:
    """Write a merged Hugging Face model directory (weights, config, tokenizer) from an HGPO checkpoint.

    ``checkpoint`` is an algorithm checkpoint directory (as ``rllib evaluate`` takes). The result
    loads with ``AutoModelForCausalLM.from_pretrained`` and serves with vLLM like any base model.
    """
    from hgpo_rllib.evaluation import CheckpointPolicy

    out = Path(output_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"export_merged: {out} exists and is not empty")
    module = CheckpointPolicy(checkpoint).module
    lm = module.lm.merge_and_unload() if isinstance(module.lm, PeftModel) else module.lm
    lm.save_pretrained(out)
    module.tokenizer.save_pretrained(out)
    return out

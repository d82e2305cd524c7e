"""The ``model_config`` of :class:`~hgpo_rllib.rl_module.LLMRLModule`, validated without loading a model.

Pure Python (no torch, no transformers): the algorithm config validates a user's model settings here,
in the driver, before any process loads weights.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hgpo_rllib.checks import is_int, is_number, is_text_list
from hgpo_rllib.run_records import read_record

TINY_PRESET = "tiny-qwen2"
#: ``torch_dtype`` names (rl_module/models.py maps them to torch dtypes).
DTYPE_NAMES = ("float32", "bfloat16", "float16")
INFERENCE_BACKENDS = ("auto", "hf", "vllm")
#: vllm.LLM arguments the module sets itself (sampling and weight sync depend on them).
VLLM_MANAGED_ARGS = (
    "model",
    "dtype",
    "seed",
    "max_model_len",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "skip_tokenizer_init",
    "generation_config",
    "logprobs_mode",
    "worker_extension_cls",
)
LORA_KEYS = ("r", "alpha", "target_modules", "dropout")
#: Module settings the algorithm config owns (``training()`` / ``debugging(seed=...)``) and passes on,
#: so module and algorithm agree; a user's model_config must not set them.
ALGORITHM_OWNED_KEYS = (
    "max_prompt_tokens",
    "max_new_tokens",
    "min_new_tokens",
    "temperature",
    "eval_temperature",
    "kl_coeff",
    "seed",
    "share_prompt_prefixes",
)
#: The tiny preset's Qwen2 architecture (``tiny_model`` overrides it). Qwen2 attention needs
#: head_dim % 8 == 0 on GPU kernels (vLLM): 128 / 4 heads = 32.
TINY_MODEL_DEFAULTS: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "attention_dropout": 0.0,
    "max_position_embeddings": 32768,
}


def read_model_config(model: str | os.PathLike) -> dict[str, Any]:
    """The ``config.json`` of the local Hugging Face model directory ``model``, or one clear error
    naming the missing (or corrupt) file: the model's size and positions are read from it alone."""
    path = Path(model).expanduser() / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"model_config['model']={str(model)!r} is neither the preset {TINY_PRESET!r} nor a local "
            f"Hugging Face model directory: {path} does not exist"
        )
    return read_record(path)


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
        raise ValueError(
            f"model_config['lora']['target_modules']={targets!r} is invalid: expected "
            "'all-linear' or a non-empty list of module names (e.g. ['q_proj', 'v_proj'])"
        )
    if not isinstance(out["dropout"], (int, float)) or not 0 <= out["dropout"] < 1:
        raise ValueError(f"model_config['lora']['dropout']={out['dropout']!r} is invalid: expected [0, 1)")
    if isinstance(targets, tuple):
        out["target_modules"] = list(targets)
    return out


#: ``model_config["critic"]`` for HiPER's heads on the policy's own trunk (ours, not the authors').
POLICY_TRUNK = "policy"


@dataclasses.dataclass(frozen=True)
class LLMModuleConfig:
    """The validated ``model_config`` of an LLMRLModule (all keys optional)."""

    model: str = TINY_PRESET
    tiny_model: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tokenizer_corpus: Sequence[str] | None = None
    tokenizer_vocab_size: int = 1024
    max_prompt_tokens: int = 4096
    max_new_tokens: int = 512
    # No stop token before this many response tokens (= max_new_tokens: responses of a fixed length).
    min_new_tokens: int = 0
    temperature: float = 1.0
    eval_temperature: float = 0.4
    inference_backend: str = "auto"
    kl_coeff: float = 0.0
    torch_dtype: str = "float32"
    seed: int = 0
    vllm_gpu_memory_utilization: float = 0.5
    vllm_engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # HF generation prefills each distinct prompt of a batch once (rows of a group repeat it); vLLM
    # has its own prefix cache.
    share_prompt_prefill: bool = True
    action_vocabulary: Sequence[str] | None = None
    constrain_to_admissible: bool = False
    # Memory levers (experiments/memory_plan.py plans them): LoRA adapters, gradient checkpointing,
    # log-probs and entropy over at most this many response tokens at a time (None: all at once), the
    # frozen reference model kept on CPU.
    lora: Mapping[str, Any] | None = None
    gradient_checkpointing: bool = False
    logprob_chunk_tokens: int | None = 1024
    reference_on_cpu: bool = False
    # The learner's passes compute each shared prompt prefix once (rl_module/prefix_sharing.py).
    share_prompt_prefixes: bool = False
    # HiPER's critic (rl_module/critic.py; only LLMCriticRLModule reads these): a local model
    # directory with the policy's tokenizer, "tiny-qwen2" sized by critic_tiny_model, or "policy"
    # (heads on the policy's own trunk).
    critic: str | None = None
    critic_tiny_model: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any] | None) -> LLMModuleConfig:
        """Reject unknown keys (a typo would otherwise silently fall back to a default)."""
        raw = dict(model_config or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"model_config has unknown key(s) {unknown}; known keys: {sorted(known)}")
        return cls(**raw)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora", normalize_lora(self.lora))  # defaults filled in, or a clear error
        corpus = self.tokenizer_corpus
        checks = [
            (
                "model",
                isinstance(self.model, str) and self.model != "",
                f"{TINY_PRESET!r} or a model directory",
            ),
            ("tiny_model", isinstance(self.tiny_model, Mapping), "a dict of Qwen2Config overrides"),
            (
                "tiny_model",
                self.model == TINY_PRESET or not self.tiny_model,
                f"no overrides unless {TINY_PRESET!r}",
            ),
            (
                "tokenizer_corpus",
                corpus is None or is_text_list(corpus),
                "a list of str",
            ),
            ("tokenizer_vocab_size", is_int(self.tokenizer_vocab_size), "an int"),
            (
                "action_vocabulary",
                self.action_vocabulary is None
                or is_text_list(self.action_vocabulary)
                and len(self.action_vocabulary) > 0
                and all(self.action_vocabulary),
                "None or a non-empty list of non-empty str",
            ),
            (
                "max_prompt_tokens",
                is_int(self.max_prompt_tokens) and self.max_prompt_tokens > 0,
                "an int > 0",
            ),
            ("max_new_tokens", is_int(self.max_new_tokens) and self.max_new_tokens > 0, "an int > 0"),
            (
                "min_new_tokens",
                is_int(self.min_new_tokens)
                and self.min_new_tokens >= 0
                and (not is_int(self.max_new_tokens) or self.min_new_tokens <= self.max_new_tokens),
                "an int in [0, max_new_tokens]",
            ),
            (
                "temperature",
                is_number(self.temperature) and self.temperature > 0,
                "> 0 (exploration samples)",
            ),
            (
                "eval_temperature",
                is_number(self.eval_temperature) and self.eval_temperature >= 0,
                ">= 0 (0: greedy)",
            ),
            (
                "inference_backend",
                self.inference_backend in INFERENCE_BACKENDS,
                f"one of {INFERENCE_BACKENDS}",
            ),
            ("kl_coeff", is_number(self.kl_coeff) and self.kl_coeff >= 0, "a number >= 0"),
            ("torch_dtype", self.torch_dtype in DTYPE_NAMES, f"one of {DTYPE_NAMES}"),
            ("seed", is_int(self.seed), "an int"),
            ("constrain_to_admissible", isinstance(self.constrain_to_admissible, bool), "a bool"),
            (
                "vllm_engine_args",
                isinstance(self.vllm_engine_args, Mapping)
                and all(isinstance(k, str) for k in self.vllm_engine_args)
                and not set(self.vllm_engine_args) & set(VLLM_MANAGED_ARGS),
                f"a dict of further vllm.LLM arguments, none of {VLLM_MANAGED_ARGS}",
            ),
            (
                "vllm_gpu_memory_utilization",
                is_number(self.vllm_gpu_memory_utilization) and 0 < self.vllm_gpu_memory_utilization <= 1,
                "a number in (0, 1]",
            ),
            ("share_prompt_prefill", isinstance(self.share_prompt_prefill, bool), "a bool"),
            ("gradient_checkpointing", isinstance(self.gradient_checkpointing, bool), "a bool"),
            (
                "logprob_chunk_tokens",
                self.logprob_chunk_tokens is None
                or is_int(self.logprob_chunk_tokens)
                and self.logprob_chunk_tokens > 0,
                "None or an int > 0",
            ),
            ("reference_on_cpu", isinstance(self.reference_on_cpu, bool), "a bool"),
            ("share_prompt_prefixes", isinstance(self.share_prompt_prefixes, bool), "a bool"),
            (
                "critic",
                self.critic != POLICY_TRUNK or not self.lora,
                "a separate critic with LoRA (LoRA adapts the policy only; heads on its trunk would "
                "train the frozen base)",
            ),
            (
                "critic",
                self.critic is None or isinstance(self.critic, str) and self.critic != "",
                f"None, {TINY_PRESET!r}, {POLICY_TRUNK!r} or a model directory",
            ),
            (
                "critic_tiny_model",
                isinstance(self.critic_tiny_model, Mapping)
                and (self.critic == TINY_PRESET or not self.critic_tiny_model),
                f"a dict of Qwen2Config overrides, only with critic={TINY_PRESET!r}",
            ),
            (
                "reference_on_cpu",
                not (self.reference_on_cpu and self.lora),
                "False with LoRA (the reference is the base with adapters disabled: no copy to place)",
            ),
        ]
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(
                    f"model_config[{key!r}]={getattr(self, key)!r} is invalid: expected {expected}"
                )

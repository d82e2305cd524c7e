"""The LLM policy as an RLlib RLModule (≈ ``rllib/core/rl_module/``).

- :mod:`~hgpo_rllib.rl_module.config`: ``model_config`` keys, validated without loading a model;
- :mod:`~hgpo_rllib.rl_module.apis`: :class:`TokenPolicyAPI`, what the connectors ask of a policy;
- :mod:`~hgpo_rllib.rl_module.llm_rl_module`: :class:`LLMRLModule`, the policy itself;
- :mod:`~hgpo_rllib.rl_module.prompts`: each step's prompt fitted to the prompt budget (fewer history
  records first), for RL and the SFT warm start alike;
- :mod:`~hgpo_rllib.rl_module.models` and :mod:`~hgpo_rllib.rl_module.tokenizer`: loading a local
  Hugging Face model, or building the random-init ``"tiny-qwen2"`` preset;
- :mod:`~hgpo_rllib.rl_module.generation` (HF ``generate``) and
  :mod:`~hgpo_rllib.rl_module.vllm_generation` (vLLM): the one generator interface and its engines;
- :mod:`~hgpo_rllib.rl_module.logprobs`: per-token log-probs and entropies, chunked;
- :mod:`~hgpo_rllib.rl_module.lora`: LoRA adapters through PEFT.
"""

from hgpo_rllib._imports import lazy_getattr
from hgpo_rllib.torchvision_check import check_torchvision

check_torchvision()  # before any module of this package imports transformers

__all__ = ["LLMModuleConfig", "LLMRLModule", "TokenPolicyAPI"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "LLMRLModule": "hgpo_rllib.rl_module.llm_rl_module",
        "LLMModuleConfig": "hgpo_rllib.rl_module.config",
        "TokenPolicyAPI": "hgpo_rllib.rl_module.apis",
    },
)

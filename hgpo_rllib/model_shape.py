"""The sizes of a decoder-only transformer with a gated MLP (Llama, Qwen2, SmolLM2), from its config (pure).

Why one type: the learner's FLOP count (:mod:`~hgpo_rllib.learner_flops`) and the memory plan
(:mod:`~hgpo_rllib.experiments.memory_items`) count the same weights, so both read them from one
shape and one table of a decoder layer's linear layers (:data:`LAYER_MATRICES`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hgpo_rllib.rl_module.config import read_model_config

#: The linear layers of one decoder layer (Llama and Qwen2 names), as LoRA targets name them.
LAYER_MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: LoRA's target for every linear layer but the head (PEFT's ``"all-linear"``).
LORA_ALL_LINEAR = "all-linear"
#: The config keys a shape needs (the others have defaults).
_NEEDED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes: what its FLOPs and its memory depend on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  #: biases on q, k and v (Qwen2)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any, source: str = "config") -> ModelShape:
        """From a Hugging Face config: its ``config.json`` as a dict, or a ``PretrainedConfig``;
        one error naming the sizes ``source`` lacks."""

        def get(key: str, default: Any = None) -> Any:
            value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
            return default if value is None else value

        missing = [key for key in _NEEDED if get(key) is None]
        if missing:
            raise ValueError(f"{source} lacks {missing}: the model's shape needs a decoder-only LM config")
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        return cls(
            layers=int(get("num_hidden_layers")),
            hidden=hidden,
            intermediate=int(get("intermediate_size")),
            heads=heads,
            kv_heads=int(get("num_key_value_heads", heads)),
            head_dim=int(get("head_dim", hidden // heads)),
            vocab=int(get("vocab_size")),
            tie_word_embeddings=bool(get("tie_word_embeddings", False)),
            qkv_bias=bool(get("attention_bias", get("model_type") == "qwen2")),
        )

    @classmethod
    def from_model_dir(cls, model_dir: str | os.PathLike) -> ModelShape:
        """From a model directory's ``config.json`` (a directory holding only that file is enough)."""
        return cls.from_config(
            read_model_config(model_dir), str(Path(model_dir).expanduser() / "config.json")
        )

    @property
    def attention_width(self) -> int:
        """``d``: the query heads' width, heads x head_dim (keys and values are read at this width)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """The key (and value) heads' width, kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """The KV cache of one token: a key and a value per layer."""
        return 2 * self.layers * self.kv_width * dtype_bytes

    def matrices(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer."""
        q, kv = self.attention_width, self.kv_width
        h, i = self.hidden, self.intermediate
        shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
        return dict(zip(LAYER_MATRICES, shapes, strict=True))

    @property
    def linear_weights(self) -> int:
        """``W``: the decoder's linear weights (non-embedding), all layers."""
        return self.layers * sum(a * b for a, b in self.matrices().values())

    @property
    def head_weights(self) -> int:
        """The LM head's weights (``hidden x vocab``), tied to the embeddings or not."""
        return self.hidden * self.vocab

    def layer_params(self) -> int:
        """One decoder layer's parameters: its linear weights, two RMSNorms and the q/k/v biases."""
        bias = self.attention_width + 2 * self.kv_width if self.qkv_bias else 0
        return sum(a * b for a, b in self.matrices().values()) + 2 * self.hidden + bias

    def num_params(self) -> int:
        """All parameters: the layers, the embeddings (and an untied head) and the final norm."""
        embeddings = self.head_weights * (1 if self.tie_word_embeddings else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden

    def lora_weights(self, r: int, targets: str | Iterable[str] = LORA_ALL_LINEAR) -> int:
        """LoRA's adapter weights, ``r (in + out)`` per adapted matrix over all layers (the head is
        never adapted: PEFT's ``"all-linear"`` leaves the output layer out)."""
        if targets == LORA_ALL_LINEAR:
            targets = LAYER_MATRICES
        names = {targets} if isinstance(targets, str) else set(targets)
        return self.layers * sum(r * (a + b) for name, (a, b) in self.matrices().items() if name in names)

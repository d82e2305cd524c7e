"""The settings of a warm start (``rllib sft``): what it is made of, with the defaults of ``rllib sft``
and of :func:`~hgpo_rllib.warm_start.trainer.train_warm_start`, as its settings record keeps them
(:mod:`hgpo_rllib.warm_start.format`), and their checks."""

from __future__ import annotations

import dataclasses
from typing import Any

import envs
from hgpo_rllib.rl_module.models import TORCH_DTYPES
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, SYSTEM_AND_USER, check_prompt_turns
from hgpo_rllib.warm_start.pretrained import based_lr, lora_settings

#: The from-scratch model: 4 layers, hidden 256 (about 3.7M parameters with a 2k vocabulary), sized
#: so that an epoch over a few thousand ~450-token examples takes minutes on 2 CPU cores.
MODEL_DEFAULTS: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
}
#: The learning rate from scratch (a pretrained base's: :func:`~hgpo_rllib.warm_start.pretrained.based_lr`).
TINY_LR = 1e-3
#: The settings of a pretrained base (recorded, and accepted, with one only).
BASE_SETTINGS = ("lora_rank", "full_finetune", "dtype")
#: Settings recorded only when they are not their default (the records before them lack them).
RECORDED_WHEN_SET = ("role", "whole_words", "prompt_turns")


@dataclasses.dataclass(frozen=True)
class SFTSettings:
    """What a warm start is made of; the defaults of ``rllib sft`` and of
    :func:`~hgpo_rllib.warm_start.trainer.train_warm_start`."""

    env: str
    episodes: int
    env_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    history_length: int = 2
    #: How the prompt reaches the chat template: one user turn, or a system and a user turn
    #: (:data:`~hgpo_rllib.rl_module.prompts.PROMPT_TURNS`); recorded only when it is the latter.
    prompt_turns: str = ONE_USER_TURN
    #: "expert" (any env) or "searcher" (where the env has one); None: the env's
    #: (``WarmStartFacts.demonstrator``: ALFWorld's searcher, else the expert).
    demonstrator: str | None = None
    seed: int = 0
    max_prompt_tokens: int = 1024
    max_new_tokens: int = 96
    vocab_size: int = 2048
    #: Qwen2Config overrides of :data:`MODEL_DEFAULTS`.
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    epochs: float = 3.0
    batch_size: int = 8
    #: None: :data:`TINY_LR` from scratch, :func:`~hgpo_rllib.warm_start.pretrained.based_lr` for a base.
    lr: float | None = None
    train_on_prompt: bool = False
    #: A team env's role whose turns to learn (one LLM per role); None: every role's (a shared LLM).
    role: str | None = None
    #: The tokenizer keeps the env's whole words (:func:`envs.get_tokenizer_whole_words`: WebShop's
    #: product ids) as single tokens.
    whole_words: bool = False
    #: A pretrained model to fine-tune instead of the tiny one: anything ``model_config["model"]``
    #: takes (a short name, a GGUF file, a model directory or id).
    base: str | None = None
    #: A base's LoRA rank (None: :data:`~hgpo_rllib.warm_start.pretrained.DEFAULT_LORA_RANK`).
    lora_rank: int | None = None
    #: Train every weight of the base instead of a LoRA adapter.
    full_finetune: bool = False
    #: The base's dtype while training ("float32"; "bfloat16" where the CPU has native bf16).
    dtype: str = "float32"

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return TINY_LR if self.base is None else based_lr(self.full_finetune)

    def record(self) -> dict[str, Any]:
        """The settings as the output directory records them (defaults filled in; ``role``,
        ``whole_words`` and ``prompt_turns`` only when set, and a base's settings only with a base, so
        the warm starts recorded before them still match)."""
        env_name = envs.get_env_spec(self.env).name
        # The env's demonstration settings: training tasks and the paper's step limits.
        facts = envs.env_facts(env_name, self.env_config).warm_start
        record = {
            **dataclasses.asdict(self),
            "env": env_name,
            "env_config": {**facts.env_config, **self.env_config},
            "demonstrator": self.demonstrator or facts.demonstrator,
            "model": {**MODEL_DEFAULTS, **self.model},
            "lr": self.learning_rate,
        }
        for key in BASE_SETTINGS:
            del record[key]
        if self.base is None:
            del record["base"]
        else:  # the base replaces the tiny model and its tokenizer
            del record["model"], record["vocab_size"]
            record["lora"] = lora_settings(self.lora_rank, self.full_finetune)
            record["dtype"] = self.dtype
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key in RECORDED_WHEN_SET:
            if record[key] == defaults[key]:
                del record[key]
        return record

    def check(self) -> None:
        if (
            self.episodes < 1
            or self.history_length < 0
            or self.epochs <= 0
            or self.batch_size < 1
            or self.learning_rate <= 0
        ):
            raise ValueError(
                f"need episodes >= 1 (got {self.episodes}), batch_size >= 1 ({self.batch_size}), "
                f"history_length >= 0 ({self.history_length}), epochs > 0 ({self.epochs}) "
                f"and lr > 0 ({self.learning_rate})"
            )
        # Settings of the other kind of model, by their `rllib sft` flags.
        base_given = {
            "--lora-rank": self.lora_rank is not None,
            "--full-finetune": self.full_finetune,
            "--dtype": self.dtype != SFTSettings.dtype,
        }
        tiny_given = {
            "--tiny-model": bool(self.model),
            "--vocab-size": self.vocab_size != SFTSettings.vocab_size,
            "--whole-words": self.whole_words,
        }
        if self.base is None:
            given = [flag for flag, set_ in base_given.items() if set_]
            if given:
                raise ValueError(f"{given[0]} applies to a pretrained base (--model) only")
        else:
            given = [flag for flag, set_ in tiny_given.items() if set_]
            if given:
                raise ValueError(f"{given[0]} applies to the tiny model only, not with --model {self.base}")
            if self.full_finetune and self.lora_rank is not None:
                raise ValueError("--lora-rank applies to LoRA, not with --full-finetune")
            if self.lora_rank is not None and self.lora_rank < 1:
                raise ValueError(f"--lora-rank must be >= 1, got {self.lora_rank}")
            if self.dtype not in TORCH_DTYPES:
                raise ValueError(f"--dtype {self.dtype!r} is invalid: expected one of {sorted(TORCH_DTYPES)}")
        if check_prompt_turns(self.prompt_turns) == SYSTEM_AND_USER:
            envs.get_prompt_turns_renderer(self.env, self.env_config)  # a team's prompts: one line
        roles = getattr(envs.env_class(self.env, self.env_config), "ROLES", None)
        if self.role is not None and self.role not in (roles or ()):
            where = f"one of {', '.join(roles)}" if roles else f"none: {self.env!r} is not a team env"
            raise ValueError(f"role {self.role!r} is invalid: expected {where}")

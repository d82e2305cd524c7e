"""``rllib sft``: a warm start from a demonstrator's play (:mod:`hgpo_rllib.warm_start`): the tiny
model from scratch, or with ``--model`` a pretrained base (:mod:`hgpo_rllib.warm_start.pretrained`)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import envs
from hgpo_rllib.cli.args import count, json_dict
from hgpo_rllib.rl_module.models import TORCH_DTYPES
from hgpo_rllib.rl_module.prompts import PROMPT_TURNS
from hgpo_rllib.warm_start.cache import build_phases
from hgpo_rllib.warm_start.dagger import DaggerSettings, train_dagger
from hgpo_rllib.warm_start.pretrained import DEFAULT_LORA_RANK, FULL_FINETUNE_LR, LORA_LR
from hgpo_rllib.warm_start.sft_settings import TINY_LR, SFTSettings
from hgpo_rllib.warm_start.trainer import train_warm_start

_SFT = {f.name: f.default for f in dataclasses.fields(SFTSettings)}
_DAGGER = {f.name: f.default for f in dataclasses.fields(DaggerSettings)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rllib sft`` (defaults: :class:`SFTSettings`, :class:`DaggerSettings`)."""
    parser.add_argument("--env", required=True, choices=sorted([*envs.ENV_SPECS, *envs.TEAM_ENV_SPECS]))
    parser.add_argument("--episodes", type=count(1), required=True, help="demonstration episodes to play")
    parser.add_argument("--output", required=True, help="model directory to write (rerun to resume)")
    parser.add_argument(
        "--demonstrator",
        choices=["expert", "searcher"],
        help="default: searcher on alfworld, expert elsewhere (webshop has a searcher too: it decides "
        "from the page alone, the expert from the goal)",
    )
    parser.add_argument("--env-config", type=json_dict, default={}, help="env settings as JSON")
    parser.add_argument(
        "--role",
        help="team envs (docs/drmas.md): learn this role's turns only, for one LLM per role "
        "(default: every role's turns, for one shared LLM)",
    )
    parser.add_argument(
        "--answer-format",
        choices=envs.ANSWER_FORMATS,
        help="the env_config's answer_format: the policy's answers, and so the demonstrations "
        "(plan_execute: HiPER's <switch><subgoal><action>, docs/hiper.md); default: the env's, think_action",
    )
    parser.add_argument(
        "-k",
        "--history-length",
        type=count(0),
        default=_SFT["history_length"],
        help="K of the prompt (as in RL)",
    )
    parser.add_argument(
        "--prompt-turns",
        choices=PROMPT_TURNS,
        default=_SFT["prompt_turns"],
        help="user: the env's template as one user turn (the paper's, verbatim); system_user: its task "
        "and instructions as the chat template's system turn, the history and observation as the user "
        "turn (as RL's .training(prompt_turns=...); docs/models.md)",
    )
    parser.add_argument("--epochs", type=float, default=_SFT["epochs"])
    parser.add_argument("--batch-size", type=count(1), default=_SFT["batch_size"])
    parser.add_argument(
        "--lr",
        type=float,
        help=f"default: {TINY_LR} from scratch, {LORA_LR} for a base's LoRA adapter, "
        f"{FULL_FINETUNE_LR} for its full fine-tuning",
    )
    parser.add_argument(
        "--train-on-prompt",
        action="store_true",
        help="language-model loss on the prompt tokens too (teaches a from-scratch model "
        "to read its prompt: the history and admissible actions repeat observed text)",
    )
    parser.add_argument("--max-minutes", type=float, help="stop training after this many minutes")
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute each layer's activations in the backward pass instead of keeping them: less "
        "memory for a slower step, the same result up to float rounding (not part of the warm start's "
        "settings; docs/models.md)",
    )
    parser.add_argument("--max-prompt-tokens", type=count(1), default=_SFT["max_prompt_tokens"])
    parser.add_argument(
        "--max-new-tokens",
        type=count(1),
        default=_SFT["max_new_tokens"],
        help="longest response the policy writes",
    )
    parser.add_argument(
        "--vocab-size",
        type=count(1),
        default=_SFT["vocab_size"],
        help="size of the locally trained tokenizer",
    )
    parser.add_argument(
        "--whole-words",
        action="store_true",
        help="the tokenizer keeps the env's whole words as single tokens (webshop: its product ids, "
        "so that choosing a product is copying one token)",
    )
    parser.add_argument(
        "--model",
        dest="base",
        help="a pretrained base to fine-tune (anything model_config['model'] takes: smollm2-135m-instruct, "
        "a .gguf file, a model directory or cached id); its own tokenizer and chat template; the output "
        "is a LoRA adapter of it (docs/models.md). Default: the tiny model from scratch",
    )
    parser.add_argument(
        "--tiny-model",
        dest="model",
        type=json_dict,
        default={},
        help="the tiny model's Qwen2Config overrides as JSON",
    )
    parser.add_argument(
        "--lora-rank",
        type=count(1),
        help=f"the base's LoRA rank (default {DEFAULT_LORA_RANK}; alpha = 2 rank)",
    )
    parser.add_argument(
        "--full-finetune",
        action="store_true",
        help="train every weight of the base instead of a LoRA adapter",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(TORCH_DTYPES),
        default=_SFT["dtype"],
        help="the base's dtype while training (bfloat16 only where the CPU has native bf16: AVX512_BF16/AMX)",
    )
    parser.add_argument(
        "--save-steps",
        type=count(1),
        default=200,
        help="checkpoint every N optimiser steps (and at least every 10 minutes)",
    )
    parser.add_argument("--seed", type=count(0), default=_SFT["seed"])
    parser.add_argument("--workers", type=count(1), default=1, help="processes playing demonstrations")
    parser.add_argument(
        "--dagger-rounds",
        type=count(0),
        default=_DAGGER["rounds"],
        help="then DAgger: the model plays new tasks and learns the demonstrator's answers "
        "in the states it reached (each round is a model directory inside --output)",
    )
    parser.add_argument(
        "--dagger-episodes",
        type=count(1),
        default=_DAGGER["episodes"],
        help="tasks the model plays per round",
    )
    parser.add_argument("--dagger-epochs", type=float, default=_DAGGER["epochs"])
    parser.add_argument("--dagger-lr", type=float, default=_DAGGER["lr"])


def run(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = {name: getattr(args, name) for name in _SFT}
    if args.answer_format is not None:  # only when given: recipes that do not name it keep their digest
        named = args.env_config.get("answer_format", args.answer_format)
        if named != args.answer_format:
            raise ValueError(f"--answer-format {args.answer_format} contradicts --env-config's {named!r}")
        settings["env_config"] = {**args.env_config, "answer_format": args.answer_format}
    SFTSettings(**settings).check()  # before the base is converted for the estimates
    if args.dagger_rounds and settings["base"] is not None:
        raise ValueError("--dagger-rounds applies to the tiny model only, not yet with --model")
    if args.dagger_rounds and hasattr(envs.env_class(args.env, args.env_config), "ROLES"):
        raise ValueError(f"--dagger-rounds applies to single-agent envs only, not the team env {args.env!r}")
    dagger = {
        "rounds": args.dagger_rounds,
        "episodes": args.dagger_episodes,
        "epochs": args.dagger_epochs,
        "lr": args.dagger_lr,
    }
    clock = build_phases(
        SFTSettings(**settings), DaggerSettings(**dagger) if args.dagger_rounds else None, args.workers
    )
    runtime = {
        "max_minutes": args.max_minutes,
        "save_steps": args.save_steps,
        "gradient_checkpointing": args.gradient_checkpointing,
        "clock": clock,
    }
    out = train_warm_start(
        args.output, workers=args.workers, reuse_finished=args.dagger_rounds > 0, **runtime, **settings
    )
    if args.dagger_rounds:
        out = train_dagger(out, **dagger, **runtime)
    print(f"Warm start written to {out}; use it with model_config={{'model': '{out}'}}")
    return 0

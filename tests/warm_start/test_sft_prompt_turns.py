"""``rllib sft --prompt-turns system_user`` (a warm start that prompts in a system and a user turn, as RL
then does) and ``--gradient-checkpointing`` (less memory, the same fit): what each changes of a warm
start's identity, records and loss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import MICRO, sft_args

import envs
from hgpo_rllib import cli
from hgpo_rllib.evaluation import CheckpointPolicy
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD
from hgpo_rllib.evaluation.rollout import new_episode
from hgpo_rllib.rl_module.lora import add_adapters
from hgpo_rllib.rl_module.prompts import chat_prompt
from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer
from hgpo_rllib.warm_start.cache import (
    recipe_directory,
    recipe_record,
    shipped_warm_start,
    warm_start_recipe,
)
from hgpo_rllib.warm_start.format import DEMONSTRATIONS, SFT_CONFIG
from hgpo_rllib.warm_start.sft_dataset import Examples
from hgpo_rllib.warm_start.trainer import fit

#: The shipped CPU main job's warm start, and WebShop's tiny recipe, as named before either option.
ALFWORLD_MAIN = "warm_starts/alfworld-94e6db4769/dagger-eabffa2b-2"
WEBSHOP_TINY = "warm_starts/webshop-2e0aeda873"


def test_only_a_system_turn_changes_a_recipes_warm_start_and_checkpointing_never_does() -> None:
    main, webshop = warm_start_recipe("alfworld", 2), warm_start_recipe("webshop")
    assert str(recipe_directory(main)) == ALFWORLD_MAIN and str(recipe_directory(webshop)) == WEBSHOP_TINY
    assert warm_start_recipe("alfworld", 2, prompt_turns="user") == main  # the default adds nothing
    for same in ({**main, "prompt_turns": "user"}, {**main, "gradient_checkpointing": True}):
        assert str(recipe_directory(same)) == ALFWORLD_MAIN
        assert shipped_warm_start(same) == shipped_warm_start(main) is not None  # the shipped one still
    assert "prompt_turns" not in recipe_record(main)
    split = warm_start_recipe("alfworld", 2, prompt_turns="system_user")
    assert split == {**main, "prompt_turns": "system_user"}
    assert recipe_directory(split).parent.name != "alfworld-94e6db4769" and shipped_warm_start(split) is None
    assert recipe_record(split)["prompt_turns"] == "system_user"
    with pytest.raises(ValueError, match=r"prompt_turns='system' is invalid"):
        warm_start_recipe("alfworld", 2, prompt_turns="system")


def test_a_system_turn_warm_start_learns_and_plays_the_prompts_rl_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its demonstrations store [system, user] prompts and its records say so; a run resumes with or
    without gradient checkpointing (no setting) but not in one user turn; and RL's prompt pipeline
    built from the warm start renders the training prompt token for token."""
    out = tmp_path / "split"
    split = ("--prompt-turns", "system_user")
    assert cli.main(sft_args(out, *split, "--gradient-checkpointing", "--max-minutes", "0")) == 0
    settings = json.loads((out / SFT_CONFIG).read_text())
    assert not settings["finished"] and settings["prompt_turns"] == "system_user"
    assert "gradient_checkpointing" not in settings
    assert cli.main(sft_args(out)) == 2
    assert "other settings (prompt_turns was 'system_user', now None)" in capsys.readouterr().err
    assert cli.main(sft_args(out, *split)) == 0  # resumed without checkpointing, and finished
    assert json.loads((out / SFT_CONFIG).read_text())["finished"]
    assert json.loads((out / POLICY_RECORD).read_text())["prompt_turns"] == "system_user"
    first = json.loads((out / DEMONSTRATIONS).read_text().splitlines()[0])
    system, user = first["steps"][0]["prompt"]
    assert system == f"Task: {envs.keychest.env.TASK}" and user.startswith("Now: You are in")
    policy = CheckpointPolicy(out)
    assert policy.config.prompt_turns == "system_user"
    observation, info = envs.make_env("keychest", settings["env_config"]).reset(seed=first["task_seed"])
    batch = policy.prompt_pipeline(
        rl_module=policy.module, batch={}, episodes=[new_episode(observation, info)], explore=False
    )
    tokenizer = policy.module.tokenizer
    expected = tokenizer(chat_prompt(tokenizer, (system, user)), add_special_tokens=False)["input_ids"]
    assert batch["prompt_ids"][0][batch["prompt_mask"][0].bool()].tolist() == expected
    assert tokenizer.decode(expected).startswith(
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
    )


def _fit_once(tmp_path: Path, name: str, lora: bool, gradient_checkpointing: bool) -> tuple[Any, dict]:
    """Two optimiser steps of the micro model (with LoRA adapters or not) on the same 8 examples of
    96 tokens; the second step's loss follows the first step's gradients."""
    tokenizer = build_tiny_tokenizer(["go north", "take key", "open the chest"], 300)
    lm = build_tiny_model(tokenizer, MICRO, seed=0).train()
    if lora:
        torch.manual_seed(0)
        lm = add_adapters(lm, {"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.0})
    generator = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(8):
        ids = torch.randint(3, len(tokenizer), (96,), generator=generator).tolist()
        rows.append({"input_ids": ids, "attention_mask": [1] * 96, "labels": [-100] * 48 + ids[48:]})
    examples = Examples(rows, [48] * 8, [False] * 8, [48] * 8)
    summary = fit(
        lm,
        tokenizer,
        examples,
        tmp_path / name,
        epochs=1.0,
        batch_size=4,
        lr=1e-2,
        seed=0,
        save_steps=100,
        max_minutes=None,
        gradient_checkpointing=gradient_checkpointing,
    )
    return lm, summary


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_fits_the_same_within_float_rounding(tmp_path: Path, lora: bool) -> None:
    plain_lm, plain = _fit_once(tmp_path, "plain", lora, gradient_checkpointing=False)
    checkpointed_lm, checkpointed = _fit_once(tmp_path, "checkpointed", lora, gradient_checkpointing=True)
    models = [lm.get_base_model() if lora else lm for lm in (plain_lm, checkpointed_lm)]
    assert [model.is_gradient_checkpointing for model in models] == [False, True]
    assert plain["optimizer_steps"] == checkpointed["optimizer_steps"] == 2
    assert abs(plain["train_loss"] - checkpointed["train_loss"]) < 1e-5
    trained = [name for name, p in plain_lm.named_parameters() if p.requires_grad]
    assert trained and (not lora or all("lora_" in name for name in trained))
    after = dict(checkpointed_lm.named_parameters())
    for name, weight in plain_lm.named_parameters():
        assert torch.allclose(weight, after[name], atol=1e-6), name

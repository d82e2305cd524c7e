"""The files of a warm-start directory written by ``rllib sft`` (a leaf module).

The directory is a Hugging Face model directory (weights, ``config.json``, tokenizer files) usable as
``model_config["model"]``, plus :data:`SFT_CONFIG`: the env, prompt and training settings it was made
with, which ``rllib evaluate DIR`` and RL from the warm start read. Its demonstrations and ``Trainer``
checkpoints live beside them, so an interrupted build resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hgpo_rllib.checks import is_int, is_number
from hgpo_rllib.rl_module.prompts import PROMPT_TURNS
from hgpo_rllib.run_records import read_record

SFT_CONFIG = "hgpo_sft.json"
DEMONSTRATIONS = "demonstrations.jsonl"
CHECKPOINTS = "checkpoints"
#: What a warm start's settings record must hold to play and prompt like it was trained.
PLAY_SETTINGS = ("env", "env_config", "history_length", "max_prompt_tokens", "max_new_tokens")
#: What each setting a policy plays by must be (of those a settings record holds): the check and its words.
PLAY_SETTING_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "format": (lambda v: is_int(v) and v >= 1, "an int >= 1"),
    "env": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "env_class": (lambda v: v is None or (isinstance(v, str) and v != ""), "a 'module:Class' string or null"),
    "env_config": (lambda v: isinstance(v, dict), "a JSON object"),
    "history_length": (lambda v: is_int(v) and v >= 0, "an int >= 0"),
    "prompt_turns": (lambda v: v in PROMPT_TURNS, f"one of {PROMPT_TURNS}"),
    "max_prompt_tokens": (lambda v: is_int(v) and v >= 1, "an int >= 1"),
    "max_new_tokens": (lambda v: is_int(v) and v >= 1, "an int >= 1"),
    "eval_temperature": (lambda v: is_number(v) and v >= 0, "a number >= 0"),
}


def response_text(thought: str, command: str) -> str:
    """A demonstrated answer in the reference's format (docs/hgpo_algorithm.md §5.1)."""
    return f"<think>{thought}</think><action>{command}</action>"


def plan_execute_text(subgoal: str, command: str, current_subgoal: str | None) -> str:
    """A demonstrated answer in HiPER's plan-execute format (docs/hiper.md): KEEP with the subgoal
    copied exactly while the demonstrator's phase still has the subgoal the prompt shows
    (``current_subgoal``), else SWITCH to it. Deriving the switch from the prompt's subgoal, not from
    the demonstrator's previous step, keeps labels of the model's own states (DAgger) consistent too.
    The subgoal is stripped, as the env records it, so a KEEP matches exactly."""
    subgoal = subgoal.strip()
    switch = "KEEP" if subgoal == current_subgoal else "SWITCH"
    return f"<switch>{switch}</switch><subgoal>{subgoal}</subgoal><action>{command}</action>"


def is_warm_start(path: Path) -> bool:
    return (path / SFT_CONFIG).is_file()


def read_settings(path: Path) -> dict[str, Any]:
    """The settings record of the warm-start directory ``path``; one clear error when it is missing,
    corrupt or lacks what playing needs."""
    settings = read_record(path / SFT_CONFIG)
    missing = [key for key in PLAY_SETTINGS if key not in settings]
    if missing:
        raise ValueError(
            f"{path / SFT_CONFIG} lacks {missing}: it is not a warm start written by `rllib sft`"
        )
    return check_play_settings(path / SFT_CONFIG, settings)


def check_play_settings(record: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings``, read from ``record``, once each play setting it holds is of its type (a received
    record is data, checked before anything plays by it); else a ValueError naming the field."""
    for key, (valid, expected) in PLAY_SETTING_TYPES.items():
        if key in settings and not valid(settings[key]):
            raise ValueError(f"{record}: {key} must be {expected}, got {settings[key]!r}")
    return settings

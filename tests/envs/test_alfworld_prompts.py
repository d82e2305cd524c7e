"""The ALFWorld prompt renderer (verl-agent templates) and the tokenizer corpus."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from envs import get_prompt_renderer, get_tokenizer_corpus
from envs.alfworld.env import ALFWorldEnv
from envs.alfworld.prompts import ALFWORLD_TEMPLATE_NO_HIS, render_prompt, tokenizer_corpus
from envs.common.prompts import PromptContext

INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags. \n"  # verl-agent's space before the newline
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags.\n"
)


def test_first_step_uses_the_no_history_template() -> None:
    admissible = ["look", "help", "go to fridge 1"]
    prompt = render_prompt(
        PromptContext("put a apple in fridge.", [], "You are in the middle of a room.", admissible, 0, 2)
    )
    assert prompt == (
        "\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your current observation is: You are in the middle of a room.\n"
        "Your admissible actions of the current situation are: ['look'\n 'go to fridge 1'].\n\n" + INSTRUCTION
    )


def test_later_steps_show_the_last_k_records() -> None:
    history = [("obs one", "look"), ("obs two", "go to fridge 1"), ("obs three", "open fridge 1")]
    prompt = render_prompt(
        PromptContext("put a apple in fridge.", history, "obs four", ["close fridge 1", "help"], 3, 2)
    )
    assert prompt == (
        "\nYou are an expert agent operating in the ALFRED Embodied Environment. "
        "Your task is to: put a apple in fridge.\n"
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations "
        "and the corresponding actions you took: [Observation 2: 'obs two', Action 2: 'go to fridge 1']\n"
        "[Observation 3: 'obs three', Action 3: 'open fridge 1']\n"
        "You are now at step 4 and your current observation is: obs four\n"
        "Your admissible actions of the current situation are: ['close fridge 1'].\n\n" + INSTRUCTION
    )


def test_history_length_zero_always_uses_the_no_history_template() -> None:
    history = [("a", "look"), ("b", "inventory")]
    prompt = render_prompt(PromptContext("task.", history, "c", ["look"], 2, 0))
    assert prompt == ALFWORLD_TEMPLATE_NO_HIS.format(current_observation="c", admissible_actions="'look'")


def test_history_must_hold_every_earlier_step() -> None:
    with pytest.raises(ValueError, match="history"):
        render_prompt(PromptContext("task.", [("a", "look")], "b", ["look"], 2, 2))


def test_registry_exposes_renderer_and_corpus() -> None:
    assert get_prompt_renderer("alfworld") is render_prompt
    assert get_tokenizer_corpus("hgpo/ALFWorld-v0") == tokenizer_corpus()


def test_a_tokenizer_trained_on_the_corpus_covers_real_prompts() -> None:
    corpus = tokenizer_corpus()
    assert corpus and all(isinstance(t, str) and t for t in corpus)
    joined = "\n".join(corpus)
    words = ("move", "put", "in/on", "sinkbasin", "desklamp", "Your task is to:", "<action>", "Nothing")
    for word in words:
        assert word in joined
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["[UNK]"]))
    env = ALFWorldEnv(split="eval_out_of_distribution", source="generated")
    obs, info = env.reset(seed=0)
    history = []
    for command in env.expert_plan()[:3]:
        history.append((obs, command))
        obs, *_, info = env.step(f"<think>ok</think><action>{command}</action>")
    prompt = render_prompt(
        PromptContext(info["task"], history, obs, info["admissible_actions"], len(history), 2)
    )
    assert "[UNK]" not in tokenizer.encode(prompt).tokens

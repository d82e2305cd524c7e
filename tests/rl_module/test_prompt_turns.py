"""``prompt_turns="system_user"``: each env's template split into a system turn (task, instructions) and
a user turn (history, observation, actions), rendered by the tiny model's and SmolLM2's chat templates;
the prompt budget shortens the user turn only (hgpo_rllib.rl_module.prompts, docs/models.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

import envs
from envs.alfworld import prompts as alfworld
from envs.common.prompts import DEFAULT_TEMPLATE_INSTRUCTION, PromptContext, PromptTurns
from envs.keychest import prompts as keychest
from envs.webshop import prompts as webshop
from hgpo_rllib.connectors.env_to_module.history_window import prompt_connector
from hgpo_rllib.evaluation.rollout import new_episode
from hgpo_rllib.rl_module.prompts import (
    FittedPrompt,
    HistoryPrompt,
    chat_prompt,
    fit_prompts,
    system_tokens,
)
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

TASK = "open the chest"
FIRST = PromptContext(TASK, [], "You are in the hall.", ["go east", "take key"], 0, 2)
HISTORY = [("You are in the den.", "take key"), ("A key.", "go west")]
LATER = PromptContext(TASK, HISTORY, "You are in the hall.", ["go east", "open chest"], 2, 2)
#: KeyChest's split of FIRST with the tag instruction.
SYSTEM = f"Task: {TASK}\n{keychest.TAG_INSTRUCTION}"
USER = "Now: You are in the hall.\nActions: go east | take key"


# ------------------------------------------------------------------------------------ the templates
def test_keychest_and_the_default_template_split_their_lines_into_the_two_turns() -> None:
    assert keychest.render_prompt_turns(FIRST, require_tags=True) == PromptTurns(SYSTEM, USER)
    assert (
        keychest.render_prompt(FIRST, require_tags=True)
        == f"Task: {TASK}\n{USER}\n{keychest.TAG_INSTRUCTION}"
    )
    later = keychest.render_prompt_turns(LATER, answer_format="plan_execute")
    assert later == PromptTurns(
        f"Task: {TASK}\n{keychest.PLAN_TAG_INSTRUCTION}",
        "History:\n[Observation 1: 'You are in the den.', Action 1: 'take key']\n"
        "[Observation 2: 'A key.', Action 2: 'go west']\n"
        "Now: You are in the hall.\nActions: go east | open chest\nSubgoal: None",
    )
    default = envs.default_prompt_turns(FIRST)
    assert default == PromptTurns(
        f"Your task is to: {TASK}\n{DEFAULT_TEMPLATE_INSTRUCTION}",
        "You are now at step 1 and your current observation is: You are in the hall.\n"
        "Your admissible actions of the current situation are: ['go east', 'take key'].",
    )
    assert (
        envs.default_prompt(FIRST)
        == f"Your task is to: {TASK}\n{default.user}\n{DEFAULT_TEMPLATE_INSTRUCTION}"
    )


def test_the_papers_templates_keep_their_lines_verbatim_in_the_user_turn() -> None:
    """ALFWorld's and WebShop's user turn is the reference template's text after its opening (and
    task) line, verbatim; the system turn is that opening with the task and the closing instruction,
    the same at every step (ALFWorld's no-history template has no task line: the split adds it)."""
    a_first, a_later = alfworld.render_prompt_turns(FIRST), alfworld.render_prompt_turns(LATER)
    opening = f"You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {TASK}"
    instruction = alfworld._INSTRUCTION
    assert a_first.system == a_later.system == f"{opening}\n{instruction.strip()}"
    assert alfworld.render_prompt(LATER) == f"\n{opening}\n{a_later.user}\n\n{instruction}"
    assert a_first.user == (
        "Your current observation is: You are in the hall.\n"
        "Your admissible actions of the current situation are: ['go east'\n 'take key']."
    )
    assert alfworld.render_prompt(FIRST).endswith(f"\n{a_first.user}\n\n{instruction}")
    w_first, w_later = webshop.render_prompt_turns(FIRST), webshop.render_prompt_turns(LATER)
    w_opening = "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment."
    assert (
        w_first.system
        == w_later.system
        == f"{w_opening}\nYour task is to: {TASK}.\n{webshop._INSTRUCTION.strip()}"
    )
    assert webshop.render_prompt(LATER) == (
        f"\n{w_opening}\nYour task is to: {TASK}.\n{w_later.user}\n\n{webshop._INSTRUCTION}"
    )
    assert webshop.render_prompt(FIRST).endswith(f"\n{w_first.user}\n\n{webshop._INSTRUCTION}")


def test_the_connector_renders_turns_whose_fewer_records_keep_the_system_turn() -> None:
    env = envs.make_env("keychest", {"require_tags": True})
    observation, info = env.reset(seed=0)
    episode = new_episode(observation, info)
    for command in ("go north", "go south", "go north"):
        observation, reward, terminated, truncated, info = env.step(
            f"<think></think><action>{command}</action>"
        )
        episode.add_env_step(observation, command, reward, infos=info)
    one_turn = prompt_connector("keychest", {"require_tags": True}, 2).prompt(episode)
    split = prompt_connector("keychest", {"require_tags": True}, 2, "system_user").prompt(episode)
    assert len(split.renderings) == len(one_turn.renderings) == 2  # K = 2, then one record
    system = f"Task: {envs.keychest.env.TASK}\n{keychest.TAG_INSTRUCTION}"
    for turns, text in zip(split.renderings, one_turn.renderings, strict=True):
        assert turns.system == system
        assert text == f"Task: {envs.keychest.env.TASK}\n{turns.user}\n{keychest.TAG_INSTRUCTION}"
    assert split.renderings[0].user.startswith("History:\n[Observation 2:")
    assert split.renderings[1].user.startswith("History:\n[Observation 3:")
    with pytest.raises(
        ValueError, match=r"prompt_turns='both' is invalid: expected one of \('user', 'system_user'\)"
    ):
        prompt_connector("keychest", {}, 2, "both")
    with pytest.raises(ValueError, match="the prompts of 'keychest_team' have no system/user split"):
        prompt_connector("keychest_team", {}, 2, "system_user")


# ------------------------------------------------------------------------------ the chat templates
@pytest.fixture(scope="module")
def tiny_tokenizer() -> Any:
    return build_tiny_tokenizer(envs.get_tokenizer_corpus("keychest"), 600)


def test_the_tiny_models_chatml_renders_the_two_turns(tiny_tokenizer: Any) -> None:
    tok = tiny_tokenizer
    text = chat_prompt(tok, (SYSTEM, USER))
    assert text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]

    def piece(part: str) -> list[int]:
        return tok(part, add_special_tokens=False)["input_ids"]

    # Three turns, each starting with <|im_start|> (id 1), the two prompt turns ending with <|im_end|> (2).
    system_turn = piece(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")
    assert ids == system_turn + piece(f"<|im_start|>user\n{USER}<|im_end|>\n") + piece(
        "<|im_start|>assistant\n"
    )
    assert (ids[0], ids.count(1), ids.count(2)) == (1, 3, 2)
    assert system_tokens(tok, (SYSTEM, USER)) == len(system_turn + piece("<|im_start|>user\n"))
    # One user turn, as before: no system turn at all in plain ChatML.
    assert chat_prompt(tok, USER) == f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    # A template that rewrites the user's text: the head ends with the system turn's text.
    shouting = build_tiny_tokenizer(["go north"], 300)
    shouting.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if m['role'] == 'system' "
        "else m['content'] | upper }}<|im_end|>\n{% endfor %}"
    )
    head = shouting(f"<|im_start|>system\n{SYSTEM}", add_special_tokens=False)["input_ids"]
    assert system_tokens(shouting, (SYSTEM, USER)) == len(head)


def test_a_split_prompt_over_the_budget_drops_records_then_cuts_the_user_turn_only(
    tiny_tokenizer: Any,
) -> None:
    tok = tiny_tokenizer
    context = dataclasses.replace(LATER, task=envs.keychest.env.TASK)
    turns = tuple(
        keychest.render_prompt_turns(dataclasses.replace(context, history_length=k), require_tags=True)
        for k in (2, 1)
    )
    prompt = HistoryPrompt(turns)
    full, one = (tok(chat_prompt(tok, t), add_special_tokens=False)["input_ids"] for t in turns)
    assert fit_prompts(tok, [prompt], len(full)) == [FittedPrompt(full, 0, 0)]
    assert fit_prompts(tok, [prompt], len(full) - 1) == [FittedPrompt(one, 1, 0)]
    system = system_tokens(tok, turns[1])
    limit = system + 8  # under twice the system turn: the head is the whole system turn, not half the budget
    assert limit // 2 < system
    (cut,) = fit_prompts(tok, [prompt], limit)
    assert cut == FittedPrompt(one[:system] + one[-8:], 1, len(one) - limit)
    assert tok.decode(cut.ids[:system]).endswith(f"{keychest.TAG_INSTRUCTION}<|im_end|>\n<|im_start|>user\n")
    with pytest.raises(
        ValueError, match=rf"the system turn alone takes {system} tokens of the {system}-token prompt budget"
    ):
        fit_prompts(tok, [prompt], system)


def test_a_model_without_a_chat_template_refuses_a_system_turn_in_one_line() -> None:
    tok = build_tiny_tokenizer(["go north"], 300)
    tok.chat_template = None
    assert chat_prompt(tok, USER) == USER  # one user turn: the text itself, as before
    with pytest.raises(
        ValueError, match=r"has no chat template, so no system turn: prompt_turns='system_user'"
    ):
        chat_prompt(tok, (SYSTEM, USER))


#: SmolLM2's ids of the split FIRST prompt (system turn up to the user turn's header: the first 31).
SMOLLM2_IDS = [
    1, 9690, 198, 22188, 42, 1440, 260, 8349, 198, 16817, 281, 2067, 17400, 46, 22577, 17400, 18128, 965,
    2988, 281, 2067, 4667, 46, 22577, 4667, 19369, 2, 198, 1, 4093, 198,
    2696, 42, 1206, 359, 281, 260, 9516, 30, 198, 43507, 42, 685, 6251, 2504, 1188, 1646, 2, 198, 1, 520,
    9531, 198,
]  # fmt: skip


def test_smollm2s_template_takes_the_system_turn_in_place_of_its_default_one(smollm2_dir: Path) -> None:
    """SmolLM2's template puts its own system prompt before a lone user turn; a split prompt's system
    turn replaces it. Over the budget, the system turn stays whole and the user turn is cut."""
    tok = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    split = keychest.render_prompt_turns(FIRST, require_tags=True)
    text = chat_prompt(tok, split)
    assert text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok(text, add_special_tokens=False)["input_ids"] == SMOLLM2_IDS
    assert system_tokens(tok, split) == 31
    assert chat_prompt(tok, keychest.render_prompt(FIRST, require_tags=True)).startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        f"<|im_start|>user\nTask: {TASK}\n"
    )
    (cut,) = fit_prompts(tok, [split], 40)
    assert cut == FittedPrompt(SMOLLM2_IDS[:31] + SMOLLM2_IDS[-9:], 0, len(SMOLLM2_IDS) - 40)

"""The examples a warm start learns (``rllib sft``): the won demonstration steps, tokenized with the
prompts fitted to RL's prompt budget, and the checks and summary line before training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

import envs
from hgpo_rllib.rl_module.prompts import fit_prompts, prompt_token_limit, rendering_text
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer
from hgpo_rllib.warm_start.demonstrations import FEWER_RECORDS, step_prompt
from hgpo_rllib.warm_start.sft_settings import SFTSettings

IGNORE_INDEX = -100


class Examples(torch.utils.data.Dataset):
    """Tokenized steps; ``prompt_tokens`` as kept, ``prompt_cut`` whether a prompt did not fit the
    prompt budget whole, ``answer_tokens`` without the end-of-turn token."""

    def __init__(
        self,
        rows: list[dict[str, list[int]]],
        prompt_tokens: list[int],
        prompt_cut: list[bool],
        answer_tokens: list[int],
    ):
        self.rows = rows
        self.prompt_tokens = prompt_tokens
        self.prompt_cut = prompt_cut
        self.answer_tokens = answer_tokens

    @property
    def lengths(self) -> list[int]:
        return [len(row["input_ids"]) for row in self.rows]

    @property
    def cut_prompts(self) -> int:
        """How many prompts left out history records (or tokens) to fit the prompt budget."""
        return sum(self.prompt_cut)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.rows[index]


def sft_prompt_limit(max_prompt_tokens: int, max_new_tokens: int, model: Mapping[str, Any]) -> int:
    """The prompt budget RL gives the warm start's model (``model``: its Qwen2Config settings)."""
    return prompt_token_limit(max_prompt_tokens, max_new_tokens, model.get("max_position_embeddings"))


def tokenize_examples(
    tokenizer: Any, steps: Sequence[dict[str, Any]], max_prompt_tokens: int, train_on_prompt: bool = False
) -> Examples:
    """Prompt as the policy reads it (chat template, fitted to the ``max_prompt_tokens`` budget by RL's
    own :func:`~hgpo_rllib.rl_module.prompts.fit_prompts`: the oldest history records go first) +
    response + end-of-turn; labels on the response and its end-of-turn token, and on the prompt too
    with ``train_on_prompt``.

    A step recorded before demonstrations stored their prompts' shorter renderings fits only if its
    whole prompt does: RL would leave out history records that such a record cannot show."""
    prompts = [step_prompt(step) or step["prompt"] for step in steps]
    fitted = fit_prompts(tokenizer, prompts, max_prompt_tokens)
    old = sum(step_prompt(step) is None and f.cut for step, f in zip(steps, fitted, strict=True))
    if old:
        raise ValueError(
            f"{old} demonstration steps were recorded before demonstrations stored their prompts with "
            f"fewer history records (no {FEWER_RECORDS!r}), and their prompts do not fit "
            f"max_prompt_tokens={max_prompt_tokens} whole: collect the demonstrations again (a new "
            "--output) or raise --max-prompt-tokens"
        )
    rows, answer_tokens = [], []
    for step, prompt in zip(steps, fitted, strict=True):
        response = tokenizer(step["response"], add_special_tokens=False)["input_ids"]
        answer_tokens.append(len(response))
        response.append(tokenizer.eos_token_id)
        rows.append(
            {
                "input_ids": prompt.ids + response,
                "attention_mask": [1] * (len(prompt.ids) + len(response)),
                "labels": (prompt.ids if train_on_prompt else [IGNORE_INDEX] * len(prompt.ids)) + response,
            }
        )
    return Examples(rows, [len(f.ids) for f in fitted], [f.cut for f in fitted], answer_tokens)


def check_answers_fit(examples: Examples, max_new_tokens: int) -> None:
    """Refuse, before any training, demonstrations whose answers the policy could not write: it stops
    after ``max_new_tokens``, so a longer answer teaches an action it never reaches (every such step
    of a WebShop pilot ended as an invalid action)."""
    longest = max(examples.answer_tokens, default=0)
    if longest > max_new_tokens:
        over = sum(n > max_new_tokens for n in examples.answer_tokens)
        raise ValueError(
            f"{over} of {len(examples)} demonstration answers are longer than max_new_tokens="
            f"{max_new_tokens} (the longest has {longest} tokens): the policy would stop before their "
            f"action; rerun with --max-new-tokens {longest} or more"
        )


def describe_examples(examples: Examples, max_prompt_tokens: int) -> str:
    """One line on what is about to be learned, and how many prompts the prompt budget cut."""
    cut = examples.cut_prompts
    line = (
        f"{len(examples)} examples: prompts of {round(sum(examples.prompt_tokens) / len(examples))} tokens "
        f"on average, answers up to {max(examples.answer_tokens)}"
    )
    if cut:
        line += (
            f"; {cut} prompts ({100 * cut / len(examples):.0f}%) do not fit max_prompt_tokens="
            f"{max_prompt_tokens} whole and leave out their oldest history records (or, down to one, "
            "tokens from their middle), as RL's do"
        )
    return line


def won_steps(
    records: list[dict[str, Any]], sft: SFTSettings, record: dict[str, Any]
) -> list[dict[str, str]]:
    """The steps of won episodes (only those are worth imitating; of a team, the role's turns or every
    turn)."""
    role = record.get("role")
    steps = [step for r in records if r["won"] for step in r["steps"] if role in (None, step.get("role"))]
    if not steps:
        raise RuntimeError(
            f"{record['demonstrator']!r} won none of the {sft.episodes} episodes: nothing to learn"
        )
    return steps


def demonstration_examples(
    records: list[dict[str, Any]], sft: SFTSettings, record: dict[str, Any]
) -> tuple[Any, Examples]:
    """The from-scratch tokenizer, trained on the env's text and the demonstrations, and the examples
    of the won episodes' steps."""
    steps = won_steps(records, sft, record)
    played = (rendering_text(s["prompt"]) + s["response"] for s in steps)
    corpus = [*envs.get_tokenizer_corpus(record["env"]), *played]
    whole_words = envs.get_tokenizer_whole_words(record["env"]) if record.get("whole_words") else ()
    tokenizer = build_tiny_tokenizer(corpus, sft.vocab_size, whole_words)
    limit = sft_prompt_limit(sft.max_prompt_tokens, sft.max_new_tokens, record["model"])
    return tokenizer, tokenize_examples(tokenizer, steps, limit, sft.train_on_prompt)

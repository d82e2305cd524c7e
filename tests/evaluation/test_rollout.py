"""The evaluation's episode loop (``hgpo_rllib.evaluation.rollout``): what a record names of its task,
the shares of its turns that were cut, and its transcript."""

from __future__ import annotations

import numpy as np
from helpers import cutting_policy

import envs
from hgpo_rllib.columns import LENGTH_CUT, PROMPT_CUT
from hgpo_rllib.evaluation import play, random_policy
from hgpo_rllib.evaluation.rollout import TRANSCRIPT, Answers, EpisodeSlot, task_seeds


def test_a_webshop_record_names_the_goal_its_task_seed_drew() -> None:
    """Evaluation seed 123's first task seeds draw test goals 143, 451 and 4 (``goal_index``, so a
    table can say which goals it played); an env that reports no goal index gets no such column."""
    records = play("webshop", {"split": "test", "max_steps": 1}, random_policy(0), task_seeds(123, 3))
    assert [(r["task_seed"], r["goal_index"]) for r in records] == [
        (123_000_369, 143),
        (123_000_370, 451),
        (123_000_371, 4),
    ]
    assert "goal_index" not in play("keychest", {}, random_policy(0), task_seeds(123, 1))[0]


def test_each_answers_flags_go_with_its_own_episode() -> None:
    """The flags of :class:`Answers` are per answer: here the second task's answers are length-cut
    and every first turn's prompt is cut, so over 2 turns the shares are 0.0 or 1.0, and 0.5."""
    first, second = task_seeds(1, 2)

    def policy(slots: list[EpisodeSlot]) -> Answers:
        return Answers(
            ["<think>t</think><action>look</action>"] * len(slots),
            {
                LENGTH_CUT: [slot.result["task_seed"] == second for slot in slots],
                PROMPT_CUT: [slot.steps == 0 for slot in slots],
            },
        )

    records = play("keychest", {"max_steps": 2}, policy, [first, second])
    assert [(r["steps"], r["length_cut_rate"], r["prompt_cut_rate"]) for r in records] == [
        (2, 0.0, 0.5),
        (2, 1.0, 0.5),
    ]


def test_an_llm_policy_reports_its_cut_turns_and_a_baseline_none() -> None:
    """The cutting policy's answers all reach ``max_new_tokens`` and its prompts all exceed the
    budget: both shares are 1.0, counted from the module's flags as training counts them. A baseline
    generates nothing to cut: NaN, not 0."""
    records = play("keychest", {"max_steps": 3}, cutting_policy().reseed(0), task_seeds(1, 2))
    assert [(r["length_cut_rate"], r["prompt_cut_rate"]) for r in records] == [(1.0, 1.0)] * 2
    (baseline,) = play("keychest", {"max_steps": 3}, random_policy(0), task_seeds(1, 1))
    assert np.isnan(baseline["length_cut_rate"]) and np.isnan(baseline["prompt_cut_rate"])


def test_a_transcript_holds_each_turn_the_policy_saw_and_answered() -> None:
    """Two turns of a scripted policy: each turn's observation is the env's text (the first is the
    reset's, the second what the first answer led to), its answer verbatim and its reward; the
    observation the episode ended on comes last. Without ``with_transcripts`` a record has none."""
    answers = iter(["<think>a</think><action>look</action>", "<think>b</think><action>inventory</action>"])

    def policy(slots: list[EpisodeSlot]) -> list[str]:
        return [next(answers) for _ in slots]

    (seed,) = task_seeds(1, 1)
    (record,) = play("keychest", {"max_steps": 2}, policy, [seed], with_transcripts=True)
    env = envs.make_env("keychest", {"max_steps": 2})
    first, _ = env.reset(seed=seed)
    second, reward_1, *_ = env.step("<think>a</think><action>look</action>")
    last, reward_2, *_ = env.step("<think>b</think><action>inventory</action>")
    assert record[TRANSCRIPT] == {
        "turns": [
            {"observation": first, "answer": "<think>a</think><action>look</action>", "reward": reward_1},
            {
                "observation": second,
                "answer": "<think>b</think><action>inventory</action>",
                "reward": reward_2,
            },
        ],
        "final_observation": last,
    }
    assert TRANSCRIPT not in play("keychest", {"max_steps": 2}, random_policy(0), [seed])[0]

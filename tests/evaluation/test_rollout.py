"""The evaluation's episode loop (``hgpo_rllib.evaluation.rollout``): what a record names of its task."""

from __future__ import annotations

from hgpo_rllib.evaluation import play, random_policy
from hgpo_rllib.evaluation.rollout import task_seeds


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

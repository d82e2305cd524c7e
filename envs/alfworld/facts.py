"""ALFWorld's facts (:class:`~envs.common.facts.EnvFacts`): its evaluation splits and task
categories, its searcher's warm start, and the paper's settings for it."""

from __future__ import annotations

from typing import Any

from envs.common.facts import DemonstrationCost, EnvFacts, EvaluationFacts, PaperFacts, WarmStartFacts

#: The CPU main job's warm start (issue 11): the searcher's play of 800 training games, 1.5 epochs of
#: the default model with loss on the prompt too, then two DAgger rounds on 96 more games each.
ALFWORLD_WARM_START: dict[str, Any] = {
    "env": "alfworld",
    "episodes": 800,
    "epochs": 1.5,
    "demonstrator": "searcher",
    "train_on_prompt": True,
    "dagger": {"rounds": 2, "episodes": 96},
}

#: SmolLM2-135M-Instruct's ALFWorld warm start (docs/models.md): a LoRA adapter (rank 16) of the
#: searcher's play of 128 training games, one epoch with the loss on the answers only. Sized by
#: scripts/pilot_sft_pretrained.py (the searcher won 30 of 30 games, 14.3 steps each, examples of 620
#: tokens at K = 2, 2 of 429 prompts over 1,000 tokens): about 1.1M trained tokens, some 4 h on 2
#: cores in float32; more distinct games rather than a second pass over the same ones.
ALFWORLD_SMOLLM2_WARM_START: dict[str, Any] = {
    "env": "alfworld",
    "base": "smollm2-135m-instruct",
    "episodes": 128,
    "demonstrator": "searcher",
    "epochs": 1.0,
    "batch_size": 4,
    "history_length": 2,
    "max_prompt_tokens": 1000,
}

ALFWORLD_FACTS = EnvFacts(
    evaluation=EvaluationFacts(
        splits={
            "in": ("eval_in_distribution",),
            "out": ("eval_out_of_distribution",),
            "all": ("eval_in_distribution", "eval_out_of_distribution"),
        },
        default_split="out",
        category_column="task_type",
        categories=("Pick", "Look", "Clean", "Heat", "Cool", "Pick2"),
        fixed_games=True,
    ),
    warm_start=WarmStartFacts(
        env_config={"split": "train", "max_steps": 50},
        demonstrator="searcher",
        searcher="envs.alfworld.searcher:Searcher",
        # 800 searcher games in about 21 minutes with 2 processes, 10,991 steps of about 490 tokens (K = 2).
        cost=DemonstrationCost(3.2, 13.7, 490),
        recipe=ALFWORLD_WARM_START,
        base_recipes={"smollm2-135m-instruct": ALFWORLD_SMOLLM2_WARM_START},
    ),
    paper=PaperFacts(
        max_steps=50,
        validation_env_config={"split": "eval_in_distribution"},
        micro_batch={"paper-1.5b": 16, "paper-7b": 8},
        adv_mode="mean_std_norm",
        minibatch_size=256,
        hiper_keep_penalty=-0.3,
        hiper_bootstrap_truncated=True,
    ),
)
#: Its planner/executor team (envs/alfworld/team.py).
ALFWORLD_TEAM_FACTS = ALFWORLD_FACTS.of_team()

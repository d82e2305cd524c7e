"""WebShop's facts (:class:`~envs.common.facts.EnvFacts`): evaluated on its test goals with its score,
its searcher's warm start, and the paper's settings for it."""

from __future__ import annotations

from typing import Any

from envs.common.facts import DemonstrationCost, EnvFacts, EvaluationFacts, PaperFacts, WarmStartFacts

#: WebShop's warm start (issue 30), at the paper's WebShop K = 4: the searcher's play of 1,500 training
#: goals (it wins about 57% of them, deciding from the page alone: envs/webshop/searcher.py), 1.5
#: epochs with the prompt loss; prompts of up to 3,584 tokens, answers of up to 128 (its longest, a
#: search, has 106); its tokenizer keeps the product ids whole (an imitator that had to copy them as
#: ten characters wrote ids no page showed). The privileged expert's 1,000 goals (answers up to 224)
#: won 0 of 32 test goals (docs/results/webshop_warm_start.md).
WEBSHOP_WARM_START: dict[str, Any] = {
    "env": "webshop",
    "episodes": 1500,
    "demonstrator": "searcher",
    "epochs": 1.5,
    "history_length": 4,
    "train_on_prompt": True,
    "max_prompt_tokens": 3584,
    "max_new_tokens": 128,
    "whole_words": True,
}

#: SmolLM2-135M-Instruct's WebShop warm start (docs/models.md, "The WebShop warm start"): a LoRA
#: adapter (rank 16) of the searcher's play of 320 training goals (about 160 won, 760 steps), 1.5
#: epochs with the loss on the answers only (the base already reads); K = 2 and prompts of up to
#: 1,000 tokens (the oldest history records go first): about 4 h on 2 cores in float32.
WEBSHOP_SMOLLM2_WARM_START: dict[str, Any] = {
    "env": "webshop",
    "base": "smollm2-135m-instruct",
    "episodes": 320,
    "demonstrator": "searcher",
    "epochs": 1.5,
    "batch_size": 4,
    "history_length": 2,
    "max_prompt_tokens": 1000,
}

WEBSHOP_FACTS = EnvFacts(
    # The test goals (0-499), verl-agent's evaluation split.
    evaluation=EvaluationFacts(env_config={"split": "test"}, score_columns=("score",)),
    warm_start=WarmStartFacts(
        env_config={"max_steps": 15},
        searcher="envs.webshop.searcher:Searcher",
        expert_subgoal="envs.webshop.expert:expert_subgoal",
        # 1,000 expert goals in 4 s, 939 won, 4,861 steps of about 1,380 tokens (K = 4).
        cost=DemonstrationCost(0.005, 4.9, 1380),
        # 4: the searcher's thoughts are fixed sentences (they copied titles and prices, and the
        # imitator rambled on in prompt text: docs/results/webshop_warm_start.md).
        demonstration_format=4,
        recipe=WEBSHOP_WARM_START,
        base_recipes={"smollm2-135m-instruct": WEBSHOP_SMOLLM2_WARM_START},
    ),
    paper=PaperFacts(
        max_steps=30,
        validation_env_config={"split": "test"},
        micro_batch={"paper-1.5b": 4, "paper-7b": 2},
        adv_mode="mean_norm",
        minibatch_size=64,
        hiper_keep_penalty=-3.5,
        hiper_bootstrap_truncated=False,  # WebShop pays only for a bought item
    ),
)
#: Its verifier/searcher/buyer team (envs/webshop/team.py).
WEBSHOP_TEAM_FACTS = WEBSHOP_FACTS.of_team()

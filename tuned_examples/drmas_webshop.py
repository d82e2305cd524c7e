"""Dr. MAS on WebShop: a verifier, a searcher and a buyer (three LLM agents) on RLlib's multi-agent API.

    rllib train file tuned_examples/drmas_webshop.py
    rllib train file tuned_examples/drmas_webshop.py --llm-sharing shared
    rllib train file tuned_examples/drmas_webshop.py --llm-sharing shared --normalize-by trajectory \\
        --estimator grpo

Every game turn the verifier says whether there is enough information to buy (``<verify>yes|no``);
"no" lets the searcher search or look at items, "yes" lets the buyer choose and buy (docs/drmas.md).
The team's reward is the WebShop reward. Roles map to modules with ``policy_mapping_fn``: one LLM
per role (default) or one shared; advantages are normalised per agent (Dr. MAS) unless
``--normalize-by trajectory``. The CPU default is the pipeline demo with tiny random-init LLMs;
``--warm-start DIR`` starts each role from ``<dir>/<role>`` (``rllib sft --env webshop_team --role
<role> --output <dir>/<role>``), or the shared LLM from ``<dir>`` (docs/drmas.md).
"""

from typing import Any

from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.naming import config_run_name
from hgpo_rllib.experiments.settings import ESTIMATOR_SETTINGS, TEAM_SETTINGS, RunSettings
from hgpo_rllib.experiments.teams import team_config

SETTINGS = ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start", *TEAM_SETTINGS)


def experiment(settings: RunSettings) -> dict[str, Any]:
    # Advantages divided by their group's std, Dr. MAS's default (norm_by_std=True): per-agent scales are
    # what agent-wise normalisation equalises (docs/drmas.md §The advantage rules). Five optimiser steps per
    # module and iteration, each on a fifth of its rows, as the authors' search scripts
    # (ppo_mini_update_num=5; docs/drmas.md §Per-module updates).
    config = team_config(
        "webshop_team", {"max_steps": 6}, settings, adv_mode="mean_std_norm", minibatches_per_module=5
    )
    prefix = f"drmas_webshop_{settings.llm_sharing}_"
    return {
        "config": config,
        "stop": {"training_iteration": settings.iterations},
        "checkpoint_freq": settings.checkpoint_freq,
        "name": lambda c: f"{prefix}{c.normalize_by}_{settings.name_tag}{config_run_name(c)}",
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

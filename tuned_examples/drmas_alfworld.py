"""Dr. MAS on ALFWorld: a planner and an executor (two LLM agents) on RLlib's multi-agent API.

    rllib train file tuned_examples/drmas_alfworld.py
    rllib train file tuned_examples/drmas_alfworld.py --llm-sharing shared

The planner writes the next subgoal (``<subgoal>``) at the start, when the executor reports it done
or failed (``<report>``), and every few executor turns; the executor acts on it (docs/drmas.md). The
team's reward is the game's. Roles map to modules with ``policy_mapping_fn``: one LLM per role
(default) or one shared; advantages are normalised per agent (Dr. MAS) unless
``--normalize-by trajectory``. The CPU default is the pipeline demo with tiny random-init LLMs;
``--warm-start DIR`` starts each role from ``<dir>/<role>`` (``rllib sft --env alfworld_team --role
<role> --output <dir>/<role>``), or the shared LLM from ``<dir>`` (docs/drmas.md).
"""

from typing import Any

from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.naming import config_run_name
from hgpo_rllib.experiments.settings import ESTIMATOR_SETTINGS, TEAM_SETTINGS, RunSettings
from hgpo_rllib.experiments.teams import team_config

SETTINGS = ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start", *TEAM_SETTINGS)


def experiment(settings: RunSettings) -> dict[str, Any]:
    config = team_config("alfworld_team", {"max_steps": 8}, settings)
    prefix = f"drmas_alfworld_{settings.llm_sharing}_"
    return {
        "config": config,
        "stop": {"training_iteration": settings.iterations},
        "checkpoint_freq": settings.checkpoint_freq,
        "name": lambda c: f"{prefix}{c.normalize_by}_{settings.name_tag}{config_run_name(c)}",
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

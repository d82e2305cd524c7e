"""Dr. MAS on ALFWorld: a planner and an executor (two LLM agents) on RLlib's multi-agent API.

    rllib train file tuned_examples/drmas_alfworld.py
    HGPO_LLM_SHARING=shared rllib train file tuned_examples/drmas_alfworld.py

The planner writes the next subgoal (``<subgoal>``) at the start, when the executor reports it done
or failed (``<report>``), and every few executor turns; the executor acts on it (docs/drmas.md). The
team's reward is the game's. Roles map to modules with ``policy_mapping_fn``: one LLM per role
(default) or one shared; advantages are normalised per agent (Dr. MAS) unless
``HGPO_NORMALIZE_BY=trajectory``. The CPU default is the pipeline demo with tiny random-init LLMs;
``HGPO_WARM_START=<dir>`` starts each role from ``<dir>/<role>`` (``rllib sft --env alfworld_team --role
<role> --output <dir>/<role>``), or the shared LLM from ``<dir>`` (docs/drmas.md).
"""

from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.presets import RunSettings, team_config

settings = RunSettings.from_env()
config = team_config("alfworld_team", {"max_steps": 8}, settings)
stop = {"training_iteration": settings.iterations}
checkpoint_freq = settings.checkpoint_freq
name = f"drmas_alfworld_{settings.llm_sharing}_{settings.normalize_by}_{settings.run_name}"

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

"""HGPO on KeyChest with a random-init tiny model: the CPU learning benchmark (minutes on 2 cores).

    rllib train file tuned_examples/hgpo_keychest.py            # or: python tuned_examples/hgpo_keychest.py
    rllib train file tuned_examples/hgpo_keychest.py --estimator gigpo    # baselines are one switch away

KeyChest hides whether the agent carries the key: only the history window tells the two visits of
the chest room apart. The tiny model knows no language, so it answers in the env's command words
(``action_vocabulary``, one token each) chosen among the step's admissible actions
(``constrain_to_admissible``): at the start it is the uniform-random admissible policy. It trains
its own tiny model, so it takes no --model or --warm-start.
"""

from typing import Any

from envs.keychest.env import COMMANDS
from hgpo_rllib import HGPOConfig
from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.naming import run_name
from hgpo_rllib.experiments.settings import ESTIMATOR_SETTINGS, RunSettings

SETTINGS = ESTIMATOR_SETTINGS
GROUP_SIZE, GROUPS = 8, 16


def experiment(settings: RunSettings) -> dict[str, Any]:
    config = (
        HGPOConfig()
        # 5 rooms, maps from a pool of 8 (a fixed game set, as ALFWorld's training games are).
        .environment("keychest", env_config={"max_steps": 10, "num_rooms": 5, "num_layouts": 8})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=GROUP_SIZE * GROUPS)
        .rl_module(model_config={"action_vocabulary": list(COMMANDS), "constrain_to_admissible": True})
        .training(
            **settings.training(),
            group_size=GROUP_SIZE,
            groups_per_iteration=GROUPS,
            lr=[[0, 1e-3], [40_000, 1e-4]],  # linear decay over ~60 iterations' env steps: steadier late
            minibatch_size=32,
            micro_batch_size=32,
            num_epochs=2,
            max_new_tokens=1,
            max_prompt_tokens=256,
            kl_coeff=0.0,
            entropy_coeff=0.0,
        )
        # Success rate over exactly one iteration's episodes.
        .reporting(metrics_num_episodes_for_smoothing=GROUP_SIZE * GROUPS)
        .debugging(seed=0)
    )
    return {
        "config": config,
        "stop": {"training_iteration": 150},
        "checkpoint_freq": 10,  # and at the end; `rllib train file ... --resume` continues from the last
        # No "demo" tag: KeyChest has no warm start to tell demo and real runs apart.
        "name": run_name("keychest_"),
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

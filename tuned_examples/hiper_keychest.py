"""HiPER on KeyChest with a random-init tiny policy and critic: the CPU comparison with HGPO and GRPO
(benchmarks/learning_keychest.py; docs/hiper.md).

    rllib train file tuned_examples/hiper_keychest.py

The same env, episodes per iteration, model size, learning rate and step budget as
``hgpo_keychest.py``, in the plan-execute format: the tiny model knows no language, so each whole
block is one token of its vocabulary (both switch blocks, the subgoals "take the key" and "open the
chest" that KeyChest's expert pursues, one action block per command), generation is restricted to the
blocks of the step's admissible actions, and an answer is three tokens, which must still hold one
block of each kind to be valid (the format is learned, HGPO's one-token commands need none).
"""

from typing import Any

from envs.keychest.env import PLAN_EXECUTE_BLOCKS
from hgpo_rllib import HiPERConfig
from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.naming import run_name
from hgpo_rllib.experiments.settings import RunSettings

SETTINGS = ("history_length",)
EPISODES = 128  # hgpo_keychest.py's 16 groups of 8


def experiment(settings: RunSettings) -> dict[str, Any]:
    config = (
        HiPERConfig()
        .environment(
            "keychest",
            env_config={"max_steps": 10, "num_rooms": 5, "num_layouts": 8, "answer_format": "plan_execute"},
        )
        .env_runners(num_env_runners=1, num_envs_per_env_runner=EPISODES)
        .rl_module(
            model_config={"action_vocabulary": list(PLAN_EXECUTE_BLOCKS), "constrain_to_admissible": True}
        )
        .training(
            history_length=settings.history_length,
            groups_per_iteration=EPISODES,
            lr=[[0, 1e-3], [40_000, 1e-4]],
            critic_lr=1e-3,
            minibatch_size=32,
            micro_batch_size=32,
            num_epochs=2,
            max_new_tokens=4,
            max_prompt_tokens=256,
            kl_coeff=0.0,
            entropy_coeff=0.0,
        )
        .reporting(metrics_num_episodes_for_smoothing=EPISODES)
        .debugging(seed=0)
    )
    return {
        "config": config,
        "stop": {"training_iteration": 150},
        "checkpoint_freq": 10,
        "name": run_name("keychest_hiper_"),
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

"""HGPO on WebShop (pure-Python text env over the WebShop data files; set WEBSHOP_DATA_DIR).

    WEBSHOP_DATA_DIR=/data/webshop rllib train file tuned_examples/hgpo_webshop.py
    WEBSHOP_DATA_DIR=/data/webshop python tuned_examples/hgpo_webshop.py \
        --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct -k 4

The CPU default runs the pipeline with a tiny random-init model; the paper presets use the
published settings (hgpo_algorithm.md §5: mean_norm advantages, 30 steps, minibatch 64).
"""

from hgpo_rllib import HGPOConfig
from hgpo_rllib.presets import PAPER_ITERATIONS, RunSettings, apply_paper_preset, run_as_script

settings = RunSettings.from_env()

if settings.preset == "cpu":
    GROUP_SIZE, GROUPS = 4, 2
    config = (
        HGPOConfig()
        .environment("webshop", env_config={"max_steps": 10, "require_tags": False})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=GROUP_SIZE * GROUPS)
        .rl_module(model_config={"constrain_to_admissible": True})
        .training(
            **settings.training(),
            adv_mode="mean_norm",
            group_size=GROUP_SIZE,
            groups_per_iteration=GROUPS,
            lr=1e-3,
            minibatch_size=64,
            micro_batch_size=16,
            max_new_tokens=12,
            max_prompt_tokens=1024,
            kl_coeff=0.0,
        )
        .debugging(seed=0)
    )
    stop = {"training_iteration": 5}
else:
    config = apply_paper_preset(HGPOConfig(), "webshop", settings)
    stop = {"training_iteration": PAPER_ITERATIONS}
name = f"webshop_{settings.run_name}"

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

"""HiPER on ALFWorld (docs/hiper.md): one LLM plans (keeps or switches a subgoal) and acts every turn,
trained with Hierarchical Advantage Estimation and a three-head critic.

    rllib train file tuned_examples/hiper_alfworld.py --warm-start none     # CPU: or --warm-start DIR
    rllib train file tuned_examples/hiper_alfworld.py --preset paper-7b --model /models/Qwen2.5-7B-Instruct \\
        --critic /models/Qwen2.5-1.5B-Instruct

On CPU, ``--warm-start none`` (the default) runs the pipeline demo: a random-init tiny policy and
critic that write plan-execute answers (invalid ones: they know no language) through every piece in
minutes. ``--warm-start DIR`` starts from an ``rllib sft`` model directory trained in the format
(``rllib sft --env alfworld --env-config '{"answer_format": "plan_execute"}' ...``), its critic a copy
of the warm start (or ``--critic``) with three fresh heads. The paper presets use the authors'
settings (docs/hiper.md §Hyperparameters: 128 episodes of up to 50 steps per iteration, lr 1e-6
policy / 1e-5 critic, keep penalty -0.3) on the GPU layout of the HGPO presets, and need local model
directories for the policy and the critic (``--critic``).
"""

from typing import Any

from hgpo_rllib import HiPERConfig
from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.cpu import tiny_hiper_config, warm_start_cpu_config
from hgpo_rllib.experiments.naming import run_name
from hgpo_rllib.experiments.paper import hiper_paper_config
from hgpo_rllib.experiments.settings import RunSettings

SETTINGS = ("preset", "model", "history_length", "warm_start", "critic")


def experiment(settings: RunSettings) -> dict[str, Any]:
    demo = settings.preset == "cpu" and (settings.warm_start is None or settings.demo)
    if settings.preset != "cpu":
        settings.refuse(["warm_start"], f"to --preset {settings.preset}: it starts from --model")
        config = hiper_paper_config("alfworld", settings)
    elif demo:
        settings.refuse(
            ["model", "critic"], "to the CPU demo: its policy and critic are tiny random-init ones"
        )
        config = tiny_hiper_config("alfworld", {"split": "train", "max_steps": 15}, settings)
    else:
        settings.refuse(["model"], "on CPU: the run starts from --warm-start")
        config = warm_start_cpu_config(
            settings.warm_start, {"history_length": settings.history_length}, algorithm=HiPERConfig()
        ).training(critic_lr=1e-4)
        # The critic starts from the warm start's weights unless --critic names another model, as the
        # authors start theirs from the actor's base model.
        model_config = config.user_model_config()
        config.rl_module(model_config={**model_config, "critic": settings.critic or model_config["model"]})
    return {
        "config": config,
        "stop": {"training_iteration": settings.iterations},
        "checkpoint_freq": settings.checkpoint_freq,
        "name": run_name(f"hiper_alfworld_{'demo_' if demo else settings.name_tag}"),
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

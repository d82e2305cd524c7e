"""HiPER on WebShop (docs/hiper.md): plan-execute answers, HAE and a three-head critic.

    rllib train file tuned_examples/hiper_webshop.py                   # CPU: the pipeline demo
    rllib train file tuned_examples/hiper_webshop.py --preset paper-1.5b \\
        --model /models/Qwen2.5-1.5B-Instruct
        --critic /models/Qwen2.5-1.5B-Instruct

The CPU default runs a random-init tiny policy and critic through every piece in minutes (it knows no
language, so its answers are invalid). The paper presets use the authors' WebShop settings
(docs/hiper.md §Hyperparameters: keep penalty -3.5, no bootstrap of truncated episodes, 50 steps).
"""

from typing import Any

from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.cpu import tiny_hiper_config
from hgpo_rllib.experiments.naming import run_name
from hgpo_rllib.experiments.paper import hiper_paper_config
from hgpo_rllib.experiments.settings import RunSettings

SETTINGS = ("preset", "model", "history_length", "critic")


def experiment(settings: RunSettings) -> dict[str, Any]:
    if settings.preset == "cpu":
        settings.refuse(
            ["model", "critic"], "to the CPU demo: its policy and critic are tiny random-init ones"
        )
        config = tiny_hiper_config("webshop", {"max_steps": 10}, settings).training(
            keep_penalty=-3.5, bootstrap_truncated=False
        )
    else:
        config = hiper_paper_config("webshop", settings)
    tag = "demo_" if settings.preset == "cpu" else settings.name_tag
    return {
        "config": config,
        "stop": {"training_iteration": settings.iterations},
        "checkpoint_freq": settings.checkpoint_freq,
        "name": run_name(f"hiper_webshop_{tag}"),
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

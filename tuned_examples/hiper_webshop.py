"""HiPER on WebShop (docs/hiper.md): plan-execute answers, HAE and a three-head critic.

    rllib train file tuned_examples/hiper_webshop.py                   # CPU: the pipeline demo
    python tuned_examples/hiper_webshop.py --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct \\
        --critic /models/Qwen2.5-1.5B-Instruct

The CPU default runs a random-init tiny policy and critic through every piece in minutes (it knows no
language, so its answers are invalid). The paper presets use the authors' WebShop settings
(docs/hiper.md §Hyperparameters: keep penalty -3.5, no bootstrap of truncated episodes, 50 steps).
"""

from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.presets import (
    RunSettings,
    hiper_paper_config,
    tiny_hiper_config,
)

settings = RunSettings.from_env()
if settings.preset == "cpu":
    config = tiny_hiper_config("webshop", {"max_steps": 10}, settings).training(
        keep_penalty=-3.5, bootstrap_truncated=False
    )
else:
    config = hiper_paper_config("webshop", settings)
stop = {"training_iteration": settings.iterations}
checkpoint_freq = settings.checkpoint_freq
name = (
    f"hiper_webshop_{'demo_' if settings.preset == 'cpu' else ''}{settings.preset}_k{settings.history_length}"
)

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))

"""A Tensorboard layout for every trial: the Custom Scalars dashboard (Tensorboard's own plugin) opens
on what a user of the paper's runs watches, grouped, instead of ~150 cards in alphabetical order.

Tune writes each result as scalars tagged ``ray/tune/<key>`` (its TBX logger); the layout's charts
pick tags by regular expression, so per-task-type and per-level series appear as they are reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import tune

TAG = "ray/tune/"
LEARNER = f"{TAG}learners/[^/]+/"

#: category -> chart -> tag regexes (``Multiline`` charts of the Custom Scalars plugin).
LAYOUT: dict[str, dict[str, list[str]]] = {
    "1 success": {
        "success rate": [
            f"{TAG}env_runners/success_rate(_smoothed)?$",
            f"{TAG}evaluation/env_runners/success_rate$",
        ],
        "success by task type": [f"{TAG}env_runners/success_rate_by_task/.*"],
        "return (and WebShop's score)": [f"{TAG}env_runners/(episode_return|score)_mean(_smoothed)?$"],
    },
    "2 episodes": {
        "episode length": [f"{TAG}env_runners/episode_len_mean(_smoothed)?$"],
        "invalid actions, env errors": [f"{TAG}env_runners/(invalid_action|env_error)_rate(_smoothed)?$"],
    },
    "3 advantages by level": {
        "advantage mean / std / |A|": [f"{LEARNER}advantage_(mean|std|abs_mean)$"],
        "per level |A|": [f"{LEARNER}level\\d+_advantage_.*"],
        "per level group size": [f"{LEARNER}level\\d+_group_size_mean$"],
        "singleton fraction": [f"{LEARNER}(level\\d+|all_levels)_singleton_frac$"],
    },
    "4 policy update": {
        "KL to the reference (kl_coeff > 0 only)": [f"{LEARNER}kl$"],
        "entropy": [f"{LEARNER}entropy$"],
        "clip fraction": [f"{LEARNER}(dual_)?clip_frac$"],
        "policy loss": [f"{LEARNER}policy_loss$"],
    },
    "5 time": {
        "phase seconds": [f"{TAG}iteration_seconds/.*"],
        "generated tokens/s": [f"{TAG}env_runners/generated_tokens_per_s$"],
        "groups sampled / runner failures": [f"{TAG}num_groups_sampled$", f"{TAG}num_env_runner_failures$"],
    },
}


def write_layout(logdir: str | Path) -> None:
    """Write :data:`LAYOUT` as an events file in ``logdir`` (Tensorboard merges a run's files)."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(logdir), filename_suffix=".layout")
    layout = {
        category: {title: ["Multiline", tags] for title, tags in charts.items()}
        for category, charts in LAYOUT.items()
    }
    writer.add_custom_scalars(layout)
    writer.close()


class TensorboardLayout(tune.Callback):
    """Writes the layout into each trial's directory when the trial starts (once per directory)."""

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        trial.init_local_path()
        if not any(Path(trial.local_path).glob("*.layout")):
            write_layout(trial.local_path)

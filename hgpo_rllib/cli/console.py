"""What ``rllib train file`` prints while a run goes on: one line per trial iteration with the
numbers a user watches (success, return, episode length, invalid actions, generation speed, time).
The full results go to the trial's files (``result.json``, ``progress.csv``, Tensorboard); ``-v``
brings back Tune's own tables."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray import tune
from ray.tune.utils import flatten_dict

#: (label, result key, format) of each number on the line; numbers a run does not report are left out.
#: ``*_smoothed``: over the last ``metrics_num_episodes_for_smoothing`` episodes.
LINE_COLUMNS = (
    ("success", "env_runners/success_rate_smoothed", "{:.1%}"),
    ("return", "env_runners/episode_return_mean_smoothed", "{:.3g}"),
    ("score", "env_runners/score_mean_smoothed", "{:.3g}"),
    ("ep len", "env_runners/episode_len_mean_smoothed", "{:.1f}"),
    ("invalid", "env_runners/invalid_action_rate_smoothed", "{:.1%}"),
    ("tokens/s", "env_runners/generated_tokens_per_s", "{:,.0f}"),
    ("eval success", "evaluation/env_runners/success_rate", "{:.1%}"),
    ("s", "time_this_iter_s", "{:.1f}"),
)


def iteration_line(result: Mapping[str, Any], trial_name: str | None = None) -> str:
    """``[trial] iter N | success 12.5% | return 0.125 | ... | s 8.1``."""
    flat = flatten_dict(dict(result), delimiter="/")
    parts = [f"iter {flat.get('training_iteration', '?')}"]
    for label, key, fmt in LINE_COLUMNS:
        value = flat.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            parts.append(f"{label} {fmt.format(value)}")
    return (f"{trial_name} " if trial_name else "") + " | ".join(parts)


class IterationLines(tune.Callback):
    """Prints :func:`iteration_line` for every result (naming the trial when a run has several)."""

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        print(iteration_line(result, str(trial) if len(trials) > 1 else None), flush=True)

"""The warm start (``rllib sft``): supervised fine-tuning on a demonstrator's play, then DAgger, so that
RL on CPU starts from a model that can already act. Paper-adjacent: the HGPO paper starts from
Qwen2.5-Instruct; CPU runs need a small model that has learned the task's format first.

- :mod:`~hgpo_rllib.warm_start.format`: the files of a warm-start directory;
- :mod:`~hgpo_rllib.warm_start.demonstrations`: demonstrators and their rendered play;
- :mod:`~hgpo_rllib.warm_start.sft_settings`: what a warm start is made of;
- :mod:`~hgpo_rllib.warm_start.sft_dataset`: the examples it learns;
- :mod:`~hgpo_rllib.warm_start.trainer`: the from-scratch model's supervised training;
- :mod:`~hgpo_rllib.warm_start.dagger`: DAgger rounds;
- :mod:`~hgpo_rllib.warm_start.cache`: the envs' recipes (their ``WarmStartFacts.recipe``), built once
  into a cache.
"""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["build_warm_start", "train_dagger", "train_warm_start", "warm_start_path", "warm_start_recipe"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "build_warm_start": "hgpo_rllib.warm_start.cache",
        "warm_start_path": "hgpo_rllib.warm_start.cache",
        "warm_start_recipe": "hgpo_rllib.warm_start.cache",
        "train_warm_start": "hgpo_rllib.warm_start.trainer",
        "train_dagger": "hgpo_rllib.warm_start.dagger",
    },
)

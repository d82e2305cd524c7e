"""The paper's evaluation protocol (``rllib evaluate``): playing policies on fixed evaluation tasks
(:mod:`~hgpo_rllib.evaluation.rollout`), loading trained policies
(:mod:`~hgpo_rllib.evaluation.policy_loading`), the shareable policy folder
(:mod:`~hgpo_rllib.evaluation.policy_folder`), the tables over seeds
(:mod:`~hgpo_rllib.evaluation.protocol`; its output directory, :mod:`~hgpo_rllib.evaluation.output_dir`;
how fast it played, :mod:`~hgpo_rllib.evaluation.throughput`) and teams
(:mod:`~hgpo_rllib.evaluation.team`)."""

from hgpo_rllib._imports import lazy_getattr

_ROLLOUT = "hgpo_rllib.evaluation.rollout"
_LOADING = "hgpo_rllib.evaluation.policy_loading"
_PROTOCOL = "hgpo_rllib.evaluation.protocol"
_FOLDER = "hgpo_rllib.evaluation.policy_folder"

__all__ = [
    "CheckpointPolicy",
    "DEFAULT_SEEDS",
    "EpisodeSlot",
    "Policy",
    "TASK_SEED_STRIDE",
    "evaluate",
    "expert_policy",
    "export_merged",
    "export_policy",
    "load_policy",
    "play",
    "random_policy",
    "summarize",
]

__getattr__ = lazy_getattr(
    __name__,
    {
        "EpisodeSlot": _ROLLOUT,
        "Policy": _ROLLOUT,
        "TASK_SEED_STRIDE": _ROLLOUT,
        "expert_policy": _ROLLOUT,
        "random_policy": _ROLLOUT,
        "play": _ROLLOUT,
        "CheckpointPolicy": _LOADING,
        "export_merged": _LOADING,
        "export_policy": _FOLDER,
        "load_policy": _FOLDER,
        "DEFAULT_SEEDS": _PROTOCOL,
        "DEFAULT_EPISODES": "hgpo_rllib.evaluation.output_dir",
        "evaluate": _PROTOCOL,
        "summarize": _PROTOCOL,
    },
)

"""Deprecated path (0.2.0): the warm start lives in :mod:`hgpo_rllib.warm_start` (and the RL-from-warm-
start preset in :mod:`hgpo_rllib.experiments.presets`, the policy loading in :mod:`hgpo_rllib.evaluation`)."""

from envs.alfworld.facts import ALFWORLD_WARM_START  # noqa: F401
from envs.common.facts import DEMONSTRATION_FORMAT  # noqa: F401
from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.evaluation.policy_loading import config_for_warm_start as warm_start_config  # noqa: F401
from hgpo_rllib.evaluation.policy_loading import inference_module as warm_start_module  # noqa: F401
from hgpo_rllib.evaluation.rollout import TASK_SEED_STRIDE  # noqa: F401
from hgpo_rllib.experiments.presets import warm_start_cpu_config  # noqa: F401
from hgpo_rllib.warm_start.cache import build_warm_start as cached_warm_start  # noqa: F401
from hgpo_rllib.warm_start.dagger import collect_dagger_states, train_dagger  # noqa: F401
from hgpo_rllib.warm_start.demonstrations import (  # noqa: F401
    Demonstrator,
    ExpertDemonstrator,
    collect_demonstrations,
    demonstrator_answer,
    make_demonstrator,
    play_demonstration,
    prompt_renderer,
)
from hgpo_rllib.warm_start.format import CHECKPOINTS, DEMONSTRATIONS, SFT_CONFIG, response_text  # noqa: F401
from hgpo_rllib.warm_start.trainer import (  # noqa: F401
    MODEL_DEFAULTS,
    tokenize_examples,
    train_warm_start,
)

warn_moved_module(__name__, "hgpo_rllib.warm_start")

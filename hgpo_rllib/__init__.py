"""HGPO (Hierarchy-of-Groups Policy Optimization) for LLM agents, as a Ray RLlib algorithm.

``from hgpo_rllib import HGPO, HGPOConfig`` imports RLlib and registers the algorithm with Ray Tune
as "HGPO" (``tune.Tuner("HGPO", ...)``); ``HiPER, HiPERConfig`` likewise (docs/hiper.md). The maths
(:mod:`hgpo_rllib.advantages`) imports no Ray,
so this package loads RLlib only when an algorithm is asked for. ``load_policy(DIR)`` loads a shared
policy folder (safetensors and JSON, no pickle) that acts on an env's observations. The README's
"Layout" section maps the sub-packages. Importing it sets how long torch's OpenMP threads spin
while waiting, unless you did (:mod:`hgpo_rllib.openmp`), and makes the module paths that checkpoints
of 0.1.0 pickle resolve (:mod:`hgpo_rllib.checkpoint_paths`).
"""

from hgpo_rllib import checkpoint_paths
from hgpo_rllib._imports import lazy_getattr
from hgpo_rllib.openmp import wait_briefly

wait_briefly()  # before anything loads torch
checkpoint_paths.install()

__version__ = "0.3.0"
__all__ = ["HGPO", "HGPOConfig", "HiPER", "HiPERConfig", "load_policy"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "HGPO": "hgpo_rllib.algorithms.hgpo.hgpo",
        "HGPOConfig": "hgpo_rllib.algorithms.hgpo.hgpo",
        "HiPER": "hgpo_rllib.algorithms.hiper.hiper",
        "HiPERConfig": "hgpo_rllib.algorithms.hiper.hiper",
        "load_policy": "hgpo_rllib.evaluation.policy_folder",
    },
)

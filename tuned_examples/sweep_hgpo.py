"""A Ray Tune sweep over the estimator, the history length K and HGPO's weight exponent alpha.

    rllib train file tuned_examples/sweep_hgpo.py --max-concurrent-trials 1

It sweeps the KeyChest example's config (CPU, minutes per trial): GRPO, GiGPO, and HGPO with alpha 0
and 1 (GRPO and GiGPO ignore alpha, so it is swept for HGPO only: Tune's ``points_to_evaluate``, one
sample each), each at K = 2 and 4, 8 trials. Every trial writes Tensorboard events and is named from
its settings (e.g. ``k2_hgpo_alpha1.0_base0_<id>``). Point ``base`` at another tuned example to sweep
that one instead.
"""

from pathlib import Path

from ray import tune

from hgpo_rllib.experiments.experiment_file import load_experiment_file

base = load_experiment_file(Path(__file__).with_name("hgpo_keychest.py"))
config = base.config
points_to_evaluate = [
    {"estimator": "grpo"},
    {"estimator": "gigpo"},
    {"estimator": "hgpo", "length_weight_alpha": 0.0},
    {"estimator": "hgpo", "length_weight_alpha": 1.0},
]
param_space = {"history_length": tune.grid_search([2, 4])}
stop = {"training_iteration": 30}
checkpoint_freq = base.checkpoint_freq
name = "sweep_keychest"

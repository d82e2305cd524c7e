"""The learner's frozen passes (issue 29): the old-log-prob pass is skipped where the update is one
optimiser step (its own forward is then the old policy's), and kept otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keychest_config

from hgpo_rllib.columns import OLD_LOGP, SAMPLER_LOGP, TOKEN_COLUMNS
from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp


class _Unused:
    def forward_train(self, batch):  # noqa: ANN001, ANN201
        raise AssertionError("the old-log-prob pass ran")


@pytest.mark.parametrize(
    ("rows", "single_step_rows", "recomputed"), [(4, 4, False), (5, 4, True), (4, 0, True)]
)
def test_the_pass_runs_only_where_the_update_has_several_steps(rows, single_step_rows, recomputed):
    batch = {OLD_LOGP: np.full((rows, 3), -0.5, dtype=np.float32)}
    batch |= {column: np.zeros((rows, 3), dtype=np.int64) for column in TOKEN_COLUMNS}
    piece = RecomputeOldLogp(single_step_rows=single_step_rows)
    if recomputed:
        with pytest.raises(AssertionError, match="pass ran"):
            piece.fill(_Unused(), batch)
    else:
        piece.fill(_Unused(), batch)
        assert OLD_LOGP not in batch and batch[SAMPLER_LOGP].shape == (rows, 3)


@pytest.mark.usefixtures("ray_session")  # the session's 4-CPU Ray, not one of this machine's size
def test_a_one_step_update_uses_its_own_forward_as_the_old_policy():
    """KeyChest, one minibatch: no old-log-prob pass, the ratio is exactly 1, and the sampler's
    log-probs still match the learner's."""
    algo = keychest_config(remote_runners=0, minibatch_size=4096, kl_coeff=0.0).build_algo()
    try:
        learner = algo.train()["learners"]["default_policy"]
    finally:
        algo.stop()
    assert "old_logp_s" not in learner
    assert learner["num_optimizer_steps"] == 1
    assert learner["ratio_mean"] == pytest.approx(1.0, abs=1e-7) and learner["clip_frac"] == 0
    assert learner["logp_gap_vs_sampler"] < 1e-4


@pytest.mark.usefixtures("ray_session")
def test_every_optimizer_steps_gradient_norm_is_reported():
    """RLlib keeps the last step's pre-clip norm; the update reports each step's (Dr. MAS compares
    gradient-norm spikes per module) and their maximum."""
    algo = keychest_config(remote_runners=0, kl_coeff=0.0).build_algo()
    try:
        algo.train()
        result = algo.train()  # the second iteration's steps only
        learner = result["learners"]["default_policy"]
    finally:
        algo.stop()
    norms = learner["grad_norm_per_step"]
    assert len(norms) == learner["num_optimizer_steps"] > 1
    assert norms[-1] == pytest.approx(learner["gradients_default_optimizer_global_norm"])
    assert learner["grad_norm_max"] == max(norms) and len(set(norms)) == len(norms)
    # The rows' real tokens, and their rate over the update (logged by the algorithm).
    assert learner["num_row_tokens"] > 0 and result["learners"]["__all_modules__"]["learner_tokens_per_s"] > 0

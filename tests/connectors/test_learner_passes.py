"""The learner's frozen passes (issue 29): the old-log-prob pass is skipped where the update is one
optimiser step (its own forward is then the old policy's), and kept otherwise; with
``recompute_old_logp="auto"`` (issue 63, item 5) also where the sampler's log-probs matched the
learner's in the last update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import keychest_config, run_python

from hgpo_rllib.columns import OLD_LOGP, PROMPT_IDS, RESP_LOGP, SAMPLER_LOGP, TOKEN_COLUMNS
from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp


class _Unused:
    def forward_train(self, batch):  # noqa: ANN001, ANN201
        raise AssertionError("the old-log-prob pass ran")


def _rows(rows: int) -> dict[str, np.ndarray]:
    batch = {OLD_LOGP: np.full((rows, 3), -0.5, dtype=np.float32)}
    return batch | {column: np.zeros((rows, 3), dtype=np.int64) for column in TOKEN_COLUMNS}


@pytest.mark.parametrize(
    ("rows", "single_step_rows", "recomputed"), [(4, 4, False), (5, 4, True), (4, 0, True)]
)
def test_the_pass_runs_only_where_the_update_has_several_steps(rows, single_step_rows, recomputed):
    batch = _rows(rows)
    piece = RecomputeOldLogp(single_step_rows=single_step_rows)
    if recomputed:
        with pytest.raises(AssertionError, match="pass ran"):
            piece.fill("default_policy", _Unused(), batch)
    else:
        piece.fill("default_policy", _Unused(), batch)
        assert OLD_LOGP not in batch and batch[SAMPLER_LOGP].shape == (rows, 3)


@pytest.mark.parametrize(
    ("threshold", "last_gap", "from_sampler"),
    [
        (None, 1e-9, False),  # recompute_old_logp=True: always the pass
        (1e-4, None, False),  # "auto", first update: nothing measured yet
        (1e-4, 1e-4, True),  # at the threshold: the sampler's
        (1e-4, 1.01e-4, False),  # above it: the pass
        (1e-4, math.nan, False),
    ],
)
def test_auto_keeps_the_samplers_log_probs_only_where_the_last_gap_was_within_the_threshold(
    threshold, last_gap, from_sampler
):
    batch = _rows(5)
    piece = RecomputeOldLogp(gap_threshold=threshold)
    piece.remember_gaps({} if last_gap is None else {"default_policy": last_gap})
    if from_sampler:
        assert piece.fill("default_policy", _Unused(), batch) is False
        assert SAMPLER_LOGP not in batch and (batch[OLD_LOGP] == -0.5).all()
    else:
        with pytest.raises(AssertionError, match="pass ran"):
            piece.fill("default_policy", _Unused(), batch)
    # A one-step update takes its own forward whatever the gap.
    one_step = RecomputeOldLogp(single_step_rows=5, gap_threshold=threshold)
    one_step.remember_gaps({"default_policy": 0.0})
    batch = _rows(5)
    assert one_step.fill("default_policy", _Unused(), batch) is False and OLD_LOGP not in batch


class _Scorer:
    """Scores each row as minus its number / 10 (its prompt ids hold the number), recording the
    rows of each chunk."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    def forward_train(self, batch):  # noqa: ANN001, ANN201
        rows = batch[PROMPT_IDS][:, 0]
        self.chunks.append(rows.tolist())
        return {"logp": -rows[:, None].float().expand(-1, 3) / 10}


def test_the_pass_scores_only_the_computed_rows_in_each_minibatchs_own_chunks():
    """10 rows in minibatches cut at 0, 4, 8 and 10, chunks of 2: the computed rows are scored in
    chunks that never cross a minibatch's cut (the training micro-batches), the others keep the
    sampler's log-probs."""
    numbers = torch.arange(10)[:, None].expand(-1, 3).clone()
    batch = {OLD_LOGP: torch.full((10, 3), -0.5)} | {column: numbers.clone() for column in TOKEN_COLUMNS}
    computed = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 0, 1], dtype=torch.bool)
    piece = RecomputeOldLogp(
        chunk_rows=2, computed_rows=lambda mid, rows: computed, spans=lambda n: [0, 4, 8, n]
    )
    scorer = _Scorer()
    assert piece.fill("default_policy", scorer, batch) is True
    assert scorer.chunks == [[0, 2], [3], [5, 6], [7], [9]]
    expected = torch.where(computed, -torch.arange(10).float() / 10, torch.tensor(-0.5))
    assert torch.equal(batch[OLD_LOGP], expected[:, None].expand(-1, 3))
    assert torch.equal(batch[SAMPLER_LOGP], torch.full((10, 3), -0.5))


def test_without_a_threshold_no_gap_is_kept():
    piece = RecomputeOldLogp()
    piece.remember_gaps({"default_policy": 0.0})
    assert piece.last_gaps == {} and not piece.sampler_matches("default_policy")


LEARNERS = """
import multiprocessing as mp
import torch.distributed as dist
from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp

def learner(rank, gaps, results):
    dist.init_process_group("gloo", init_method="file://STORE", rank=rank, world_size=2)
    piece = RecomputeOldLogp(gap_threshold=1e-4)
    piece.remember_gaps(gaps, ["a", "b", "c"], "cpu")
    results.put((rank, piece.last_gaps, [piece.sampler_matches(m) for m in "abc"]))
    dist.destroy_process_group()

context = mp.get_context("fork")
results = context.Queue()
gaps = [{"a": 1e-5, "b": 2e-4}, {"a": 3e-5}]  # learner 1 measured no gap of module b; none of c
workers = [context.Process(target=learner, args=(rank, gaps[rank], results)) for rank in (0, 1)]
for worker in workers:
    worker.start()
print(sorted(results.get(timeout=60) for _ in workers))
for worker in workers:
    worker.join(timeout=60)
"""


def test_several_learners_decide_by_the_largest_gap_any_of_them_measured(tmp_path):
    """Two gloo processes with different gaps end with the same ones, each module's largest, and
    the same decisions: module a within the threshold, b above it, c never measured."""
    child = run_python(LEARNERS.replace("STORE", str(tmp_path / "store")), timeout=120)
    agreed = {"a": 3e-5, "b": 2e-4}
    assert child.stdout.strip() == str([(0, agreed, [True, False, False]), (1, agreed, [True, False, False])])


def _perturbed(pack_response, shift: float):  # noqa: ANN001, ANN202
    """A sampler whose log-probs are off by ``shift`` nats (valid tokens only; the rest stay 0)."""

    def pack(*args):  # noqa: ANN002, ANN202
        out = pack_response(*args)
        out[RESP_LOGP] = out[RESP_LOGP] - shift * out["resp_mask"]
        return out

    return pack


@pytest.mark.usefixtures("ray_session")
def test_auto_uses_the_samplers_log_probs_while_they_match_and_recomputes_when_they_do_not():
    """KeyChest, float32 HF sampling, two epochs (several optimiser steps): "auto" runs the pass on
    the first update; on the second it takes the sampler's log-probs (their gap, ~1e-7 here, was
    within 1e-4) and its loss equals the recomputing run's within 1e-6. A sampler 0.5 nats off is
    measured on the update that trained on its rows, and the next update runs the pass again."""
    losses, learners = {}, {}
    for mode in (True, "auto"):
        algo = keychest_config(
            remote_runners=0, kl_coeff=0.0, num_epochs=2, recompute_old_logp=mode
        ).build_algo()
        try:
            learners[mode] = [algo.train()["learners"]["default_policy"] for _ in range(2)]
            if mode == "auto":
                module = algo.env_runner.module
                module._pack_response = _perturbed(module._pack_response, 0.5)
                learners[mode] += [algo.train()["learners"]["default_policy"] for _ in range(2)]
        finally:
            algo.stop()
        losses[mode] = [learner["policy_loss"] for learner in learners[mode]]
    recomputed, auto = learners[True], learners["auto"]
    assert [learner["num_optimizer_steps"] for learner in auto[:2]] == [6, 6]
    assert "old_logp_from_sampler" not in recomputed[1] and recomputed[1]["old_logp_s"] > 0
    assert [learner["old_logp_from_sampler"] for learner in auto] == [0, 1, 1, 0]
    ran = [not math.isnan(learner.get("old_logp_s", math.nan)) for learner in auto]
    assert ran == [True, False, False, True]
    assert auto[0]["logp_gap_vs_sampler"] < 1e-6 and auto[1]["logp_gap_vs_sampler"] < 1e-6
    assert (
        abs(auto[2]["logp_gap_vs_sampler"] - 0.5) < 1e-3 and abs(auto[3]["logp_gap_vs_sampler"] - 0.5) < 1e-3
    )
    assert losses["auto"][0] == losses[True][0]  # the same first update, pass and all
    assert abs(losses["auto"][1] - losses[True][1]) < 1e-6


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

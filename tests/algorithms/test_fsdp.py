"""Sharded learners (``learner_sharding="fsdp"``, FSDP2 on CPU/gloo): the weights really are sharded,
training and weight sync work, one update equals DDP's, checkpoints round-trip exactly; bf16 mixed
precision and state exchange with replicated learners on a one-rank group (issue 12, item 2)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers import (
    GROUP_SIZE,
    TINY_MODEL,
    assert_same_tree,
    keychest_config,
    learner_weights,
    optimizer_state,
)
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

import envs
from hgpo_rllib import HGPO, HGPOConfig
from hgpo_rllib.env_runner import GroupedEnvRunner

pytestmark = pytest.mark.usefixtures("ray_session")

# Two learners, minibatches of 4 rows each in micro-batches of 2 (gradient accumulation runs too).
# grad_clip below the tiny model's gradient norm (about 1e-4): clipping acts on the (sharded) gradients.
TWO_LEARNERS = {"groups_per_iteration": 4, "minibatch_size": 8, "micro_batch_size": 2, "grad_clip": 2e-5}
GRAD_NORM = "gradients_default_optimizer_global_norm"


def sharded_config(sharding: str = "fsdp", offload: bool = False) -> HGPOConfig:
    config = keychest_config(**TWO_LEARNERS, learner_sharding=sharding, learner_offload=offload)
    # Half a CPU each: the DDP learners of the comparison fit next to the FSDP algorithm's (4 CPUs).
    return config.learners(num_learners=2, num_cpus_per_learner=0.5)


@pytest.fixture(scope="module")
def fsdp_algo() -> Any:
    algo = sharded_config().build_algo()
    yield algo
    algo.stop()


def policy_weights(group: Any) -> dict[str, np.ndarray]:
    return group.get_state(components="learner/rl_module")["learner"]["rl_module"]["default_policy"]


def adam_state(group: Any) -> dict[str, Any]:
    return group.get_state(components="learner/optimizer")["learner"]["optimizer"][
        "default_policy_default_optimizer"
    ]["state"]


def test_one_fsdp_update_matches_one_ddp_update(fsdp_algo: HGPO) -> None:
    """Same initial weights, same batch, same dealing of groups: the sharded update equals DDP's to
    float rounding, with two micro-batches per minibatch (accumulation) and active clipping: the
    global norm of the sharded gradients is the full one, and clipping scales AdamW's first moments.
    With ``learner_offload`` every unit gets FSDP2's CPUOffloadPolicy (unpinned: no accelerator here,
    where the shards stay on the CPU anyway) and the update equals the resident one."""

    def offload_policies(learner: Any) -> frozenset[str]:
        """The offload policy of every FSDP unit of a learner's module (FSDP2 keeps it in its unit
        state, which has no public getter); nested, so Ray pickles it by value."""
        from torch.distributed.fsdp import FSDPModule

        module = learner.module["default_policy"]
        return frozenset(
            type(unit._get_fsdp_state()._fsdp_param_group.offload_policy).__name__
            for unit in module.modules()
            if isinstance(unit, FSDPModule)
        )

    (episodes,) = fsdp_algo.env_runner_group.foreach_env_runner(
        lambda er: er.sample(num_episodes=TWO_LEARNERS["groups_per_iteration"] * GROUP_SIZE),
        local_env_runner=False,
    )
    config = sharded_config("none")
    ddp = config.build_learner_group(env=envs.make_env(config.env, config.env_config))
    update = {"episodes": episodes, "minibatch_size": config.minibatch_size_per_learner, "num_epochs": 1}
    try:
        before = policy_weights(ddp)
        ddp_norms = [float(r["default_policy"][GRAD_NORM]) for r in ddp.update(**update)]
        ddp_after, ddp_optim = policy_weights(ddp), adam_state(ddp)
    finally:
        ddp.shutdown()
    fsdp = fsdp_algo.learner_group
    assert_same_tree(policy_weights(fsdp), before)
    fsdp_norms = [float(r["default_policy"][GRAD_NORM]) for r in fsdp.update(**update)]
    fsdp_after, fsdp_optim = policy_weights(fsdp), adam_state(fsdp)
    print(f"global gradient norms: DDP {ddp_norms}, FSDP {fsdp_norms}")
    assert min(ddp_norms) > 2 * TWO_LEARNERS["grad_clip"]  # clipping halves the gradients at least
    np.testing.assert_allclose(fsdp_norms, ddp_norms, rtol=1e-4)
    moved = max(float(np.abs(ddp_after[k] - before[k]).max()) for k in before)
    gap = max(float(np.abs(ddp_after[k] - fsdp_after[k]).max()) for k in before)
    print(f"largest weight change {moved:.3g}, largest FSDP - DDP difference {gap:.3g}")
    assert moved > 1e-4 and gap < 1e-3 * moved, (moved, gap)
    # The gathered AdamW state is numbered as DDP's (checkpoints are interchangeable) and holds the same
    # moments; the second moments are squares of gradients, so they get a relative tolerance.
    assert ddp_optim.keys() == fsdp_optim.keys() and ddp_optim["param_groups"] == fsdp_optim["param_groups"]
    for i, moments in ddp_optim["state"].items():
        for name, value in moments.items():
            np.testing.assert_allclose(fsdp_optim["state"][i][name], value, rtol=1e-3, atol=1e-9)

    resident = [r.get() for r in fsdp.foreach_learner(offload_policies).result_or_errors]
    assert resident == [{"OffloadPolicy"}] * 2
    config = sharded_config(offload=True)
    offloaded = config.build_learner_group(env=envs.make_env(config.env, config.env_config))
    try:
        policies = [r.get() for r in offloaded.foreach_learner(offload_policies).result_or_errors]
        assert policies == [{"CPUOffloadPolicy"}] * 2
        assert_same_tree(policy_weights(offloaded), before)
        offload_norms = [float(r["default_policy"][GRAD_NORM]) for r in offloaded.update(**update)]
        offload_after, offload_optim = policy_weights(offloaded), adam_state(offloaded)
    finally:
        offloaded.shutdown()
    np.testing.assert_allclose(offload_norms, fsdp_norms, rtol=1e-6)
    gap = max(float(np.abs(offload_after[k] - fsdp_after[k]).max()) for k in before)
    print(f"largest offloaded - resident FSDP difference {gap:.3g}")
    assert gap < 1e-6 * moved, (moved, gap)
    for i, moments in fsdp_optim["state"].items():
        for name, value in moments.items():
            np.testing.assert_allclose(offload_optim["state"][i][name], value, rtol=1e-5, atol=1e-12)


def test_fsdp_learners_shard_train_sync_and_checkpoint_exactly(fsdp_algo: HGPO, tmp_path: Any) -> None:
    def local_shards(learner: Any) -> dict[str, tuple[int, int, int, str]]:
        """Per parameter: (elements held here, elements in all, rows, type); nested, so Ray pickles
        it by value (the learner actors cannot import this test module)."""
        return {
            name: (
                p.to_local().numel() if hasattr(p, "to_local") else p.numel(),
                p.numel(),
                len(p),
                type(p).__name__,
            )
            for name, p in learner.module["default_policy"].named_parameters()
        }

    algo = fsdp_algo
    learner = algo.train()["learners"]["default_policy"]
    assert learner["num_groups"] == TWO_LEARNERS["groups_per_iteration"]
    assert np.isfinite(learner["policy_loss"]) and learner["num_optimizer_steps"] >= 1
    shards = [r.get() for r in algo.learner_group.foreach_learner(local_shards).result_or_errors]
    assert len(shards) == 2 and shards[0].keys() == shards[1].keys()
    for name in shards[0]:
        (held0, total, rows, kind), (held1, *_) = shards[0][name], shards[1][name]
        # Each learner holds half of the rows (one more on rank 0 if their number is odd).
        assert kind == "DTensor" and held0 + held1 == total and held0 - held1 in (0, total // rows), name
    full = learner_weights(algo)  # gathered from the two shards
    (synced,) = algo.env_runner_group.foreach_env_runner(
        lambda er: er.module.get_state(), local_env_runner=False
    )
    assert synced.keys() == {k for k in full if not k.startswith("ref_lm.")}
    assert_same_tree(synced, {k: full[k] for k in synced})  # the runners got exactly these weights
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    saved_optim = optimizer_state(algo)
    assert saved_optim["default_policy_default_optimizer"]["state"]["state"]  # moments were saved
    restored = HGPO.from_checkpoint(path)
    try:
        assert_same_tree(learner_weights(restored), full)
        assert_same_tree(optimizer_state(restored), saved_optim)
        assert restored.train()["training_iteration"] == algo.iteration + 1
    finally:
        restored.stop()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.learners(num_learners=1), "learner_sharding.*num_learners=1"),
        (lambda c: c.rl_module(model_config={**TINY_MODEL, "lora": {"r": 4}}), "learner_sharding.*lora"),
        (
            lambda c: c.training(learner_sharding="none", learner_offload=True),
            "learner_offload=True is invalid.*learner_sharding='none'.*needs learner_sharding='fsdp'",
        ),
        (lambda c: c.training(learner_offload="yes"), "learner_offload='yes' is invalid: expected True or"),
    ],
)
def test_validate_refuses_fsdp_without_two_learners_or_with_lora(change: Any, message: str) -> None:
    sharded_config().validate()
    with pytest.raises(ValueError, match=message):
        change(sharded_config()).validate()


@pytest.fixture
def one_rank_group() -> Any:
    """A gloo process group of this process alone: a learner built here shards over one rank."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_bf16_sharded_learner_keeps_float32_shards_computes_like_the_sampler_and_shares_state(
    one_rank_group: None,
) -> None:
    """bf16 with FSDP2's MixedPrecisionPolicy: float32 master shards and AdamW state (lr 1e-6 still
    moves nearly every weight), compute on bf16 gathered weights, as the bf16 env runner samples, so
    the learner's log-probs are closer to the sampler's than the replicated learner's (float32
    weights under autocast). Gradient checkpointing runs inside the sharded layers. Replicated and
    sharded learners load each other's weights and optimizer state exactly."""
    model_config = {**TINY_MODEL, "torch_dtype": "bfloat16", "gradient_checkpointing": True}

    def config(sharding: str) -> HGPOConfig:
        return keychest_config(
            remote_runners=0, groups_per_iteration=2, lr=1e-6, learner_sharding=sharding
        ).rl_module(model_config=model_config)

    sampler = GroupedEnvRunner(config=config("none"), worker_index=1)
    try:
        episodes = sampler.sample(num_episodes=2 * GROUP_SIZE)
    finally:
        sampler.stop()
    gaps, learners = {}, {}
    for sharding in ("none", "fsdp"):
        env = envs.make_env("keychest", {"max_steps": 4})
        learner = learners[sharding] = config(sharding).build_learner(env=env)
        module = learner.module["default_policy"]
        # A sharded module gathers and scatters its full weights through its weight gatherer.
        assert (module.unwrapped().weight_gatherer is not None) == (sharding == "fsdp")
        before = {k: v.copy() for k, v in module.get_state().items() if not k.startswith("ref_lm.")}
        metrics = learner.update(episodes=episodes, num_epochs=1)["default_policy"]
        gaps[sharding] = metrics["logp_gap_vs_sampler"]
        after = module.get_state()
        changed = sum(int((before[k] != after[k]).sum()) for k in before)
        assert changed > 0.9 * sum(v.size for v in before.values()), (sharding, changed)
        (optim,) = learner._named_optimizers.values()
        moments = {t.dtype for state in optim.state.values() for t in state.values() if t.dim() > 0}
        assert moments == {torch.float32}
    kinds = {type(p).__name__ for p in module.parameters()}
    assert kinds == {"DTensor"} and {p.to_local().dtype for p in module.lm.parameters()} == {torch.float32}
    print(f"log-prob gap to the bf16 sampler: replicated {gaps['none']:.3g}, sharded {gaps['fsdp']:.3g}")
    assert gaps["fsdp"] < gaps["none"]

    components = ["rl_module", "optimizer"]
    states = {name: copy.deepcopy(lr.get_state(components=components)) for name, lr in learners.items()}
    for state in states.values():  # equal sequence numbers would make set_state() keep its own weights
        del state[WEIGHTS_SEQ_NO]
    for source, target in (("none", "fsdp"), ("fsdp", "none")):
        learners[target].set_state(states[source])
        loaded = learners[target].get_state(components=components)
        assert_same_tree({k: v for k, v in loaded.items() if k != WEIGHTS_SEQ_NO}, states[source])

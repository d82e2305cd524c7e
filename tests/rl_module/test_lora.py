"""LoRA through PEFT: adapters train, the base stays bit-identical, checkpoints hold adapters only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import CORPUS, TINY_MODEL, build, keychest_config, train_batch
from transformers import AutoModelForCausalLM

from hgpo_rllib.evaluation import CheckpointPolicy, evaluate, export_merged
from hgpo_rllib.rl_module.config import normalize_lora

pytestmark = pytest.mark.usefixtures("ray_session")


def test_lora_settings_fill_defaults_and_reject_bad_values() -> None:
    defaults = {"r": 8, "alpha": 16, "target_modules": "all-linear", "dropout": 0.0}
    assert normalize_lora({"r": 8}) == defaults
    bad_values = [
        ({"alpha": 2}, "'r'"),
        ({"r": 0}, "'r'"),
        ({"r": 4, "rank": 2}, "rank"),
        ({"r": 4, "target_modules": []}, "target_modules"),
        ({"r": 4, "dropout": 1.5}, "dropout"),
    ]
    for bad, key in bad_values:
        with pytest.raises(ValueError, match=key):
            normalize_lora(bad)


def test_learner_trains_adapters_only_and_the_reference_is_the_base() -> None:
    module = build(lora={"r": 4}, kl_coeff=0.01)
    assert not hasattr(module, "ref_lm") and module.uses_lora
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    prompts = module.encode_prompts(["go", CORPUS[1]])
    batch = train_batch(prompts, module.forward_exploration(prompts))
    ref = module.compute_ref_logp(batch)
    # B = 0 at the start: policy == base; after changing B the policy moves and the reference does not.
    torch.testing.assert_close(module.forward_train(batch)["logp"], ref)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    assert (module.forward_train(batch)["logp"] - ref).abs().max() > 1e-3
    torch.testing.assert_close(module.compute_ref_logp(batch), ref)
    # Env runners get merged weights under the plain model's names, and act like the learner.
    runner = build(inference_only=True, lora={"r": 4}, kl_coeff=0.01)
    merged = module.get_state(inference_only=True)
    assert set(merged) == set(runner.state_dict())
    runner.set_state(merged)
    # W + BA rounds differently from W x + B(A x): float32 log-probs of ~-6 agree to a few 1e-5 (in
    # the full suite 2.9e-5, alone exactly), far below the 1e-3 the adapters moved them above.
    torch.testing.assert_close(
        runner._forward_train(batch)["logp"], module.forward_train(batch)["logp"], atol=1e-4, rtol=1e-5
    )
    # Checkpoint state: the adapters only, which an inference-only module folds into its base.
    adapters = module.get_state()
    assert adapters and all("lora_" in k for k in adapters)
    fresh = build(inference_only=True, lora={"r": 4}, kl_coeff=0.01)
    fresh.set_state(adapters)
    torch.testing.assert_close(
        fresh._forward_train(batch)["logp"], module.forward_train(batch)["logp"], atol=1e-4, rtol=1e-5
    )


def _weights(algo: Any) -> dict[str, np.ndarray]:
    module = algo.learner_group._learner.module["default_policy"].unwrapped()
    return {k: v.detach().clone().numpy() for k, v in module.state_dict().items()}


def test_one_keychest_iteration_changes_adapters_only_and_checkpoints_are_small(tmp_path: Path) -> None:
    lora_algo = (
        keychest_config(remote_runners=0, kl_coeff=0.01)
        .rl_module(model_config={**TINY_MODEL, "lora": {"r": 8}})
        .build_algo()
    )
    full_algo = keychest_config(remote_runners=0, kl_coeff=0.01).build_algo()
    try:
        before = _weights(lora_algo)
        result = lora_algo.train()
        after = _weights(lora_algo)
        changed = {k for k in before if not np.array_equal(before[k], after[k])}
        assert changed and all("lora_" in k for k in changed)  # base bit-identical
        assert any("lora_B" in k for k in changed)
        assert np.isfinite(result["learners"]["default_policy"]["kl"])
        lora_ckpt = lora_algo.save_to_path(tmp_path / "lora")
        full_ckpt = full_algo.save_to_path(tmp_path / "full")
        weights = Path("learner_group", "learner", "rl_module", "default_policy", "module_state.pkl")
        assert (Path(lora_ckpt) / weights).stat().st_size * 10 < (Path(full_ckpt) / weights).stat().st_size
        # rllib evaluate plays the LoRA checkpoint; export_merged writes a plain HF model dir.
        summary = evaluate(
            lora_ckpt,
            env="keychest",
            seeds=[1],
            episodes=2,
            output=tmp_path / "eval",
            baselines=(),
            env_config={"max_steps": 4},
        )
        assert list(summary["policy"]) == ["checkpoint"]
        out = export_merged(lora_ckpt, tmp_path / "merged")
        merged = AutoModelForCausalLM.from_pretrained(out)
        policy = CheckpointPolicy(lora_ckpt).module
        state = policy.get_state(inference_only=True)
        want = {k.removeprefix("lm."): torch.as_tensor(v) for k, v in state.items()}
        assert merged.state_dict().keys() == want.keys()
        for name, tensor in merged.state_dict().items():
            torch.testing.assert_close(tensor, want[name])
        base_key = next(k for k in before if k.endswith("q_proj.base_layer.weight"))
        plain_key = base_key.removeprefix("lm.base_model.model.").replace(".base_layer", "")
        assert not torch.equal(merged.state_dict()[plain_key], torch.as_tensor(before[base_key]))
    finally:
        lora_algo.stop()
        full_algo.stop()

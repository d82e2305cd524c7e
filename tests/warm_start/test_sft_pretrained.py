"""``rllib sft --model NAME`` (hgpo_rllib.warm_start.pretrained): a warm start of a pretrained base,
its own tokenizer and chat template, a LoRA adapter keyed by the base's sha256, loaded everywhere as the
merged model (hgpo_rllib.rl_module.model_sources), refused over another base.

The real-model run here is WebShop's searcher, 4 episodes (2 won), K = 2, prompts cut to 512 tokens,
2 optimiser steps of 1 example, trained in two sessions (stopped by the time limit, then resumed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from hgpo_rllib import cli
from hgpo_rllib.evaluation import CheckpointPolicy, evaluate
from hgpo_rllib.evaluation.policy_folder import export_policy
from hgpo_rllib.evaluation.policy_loading import config_for_warm_start, inference_module
from hgpo_rllib.rl_module import model_sources
from hgpo_rllib.rl_module.model_sources import ADAPTER_FILES, ADAPTER_RECORD, local_model_dir, model_sha256
from hgpo_rllib.rl_module.models import chat_prompt
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.phases import fit_seconds
from hgpo_rllib.warm_start.pretrained import DEFAULT_LORA_RANK, based_lr
from hgpo_rllib.warm_start.sft_settings import SFTSettings
from hgpo_rllib.warm_start.shipping import copy_in_bf16


def based_args(out: Path, *extra: str) -> list[str]:
    return [
        "sft",
        "--env",
        "webshop",
        "--model",
        "smollm2-135m-instruct",
        "--demonstrator",
        "searcher",
        "-k",
        "2",
        "--episodes",
        "4",  # the searcher wins tasks 2 and 3: 7 examples
        "--output",
        str(out),
        "--max-prompt-tokens",
        "512",
        "--batch-size",
        "1",
        "--epochs",
        "0.25",
        "--save-steps",
        "1",
        *extra,
    ]


@pytest.fixture(scope="module")
def based(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's WebShop warm start: one optimiser step, stopped by the time limit, then resumed."""
    out = tmp_path_factory.mktemp("sft") / "smol"
    assert cli.main(based_args(out, "--max-minutes", "0")) == 0
    first = json.loads((out / SFT_CONFIG).read_text())
    assert first["optimizer_steps"] == 1 and not first["finished"]
    assert cli.main(based_args(out)) == 0
    return out


def test_a_based_warm_start_is_a_lora_adapter_of_its_base_keyed_by_its_sha256(
    based: Path, smollm2_dir: Path
) -> None:
    record = json.loads((based / SFT_CONFIG).read_text())
    assert record["finished"] and record["optimizer_steps"] == 2 and record["episodes_won"] >= 1
    assert record["base"] == "smollm2-135m-instruct" and record["dtype"] == "float32"
    assert record["lora"]["r"] == DEFAULT_LORA_RANK and record["lr"] == based_lr(full_finetune=False)
    assert "model" not in record and "vocab_size" not in record  # the tiny model's settings
    assert (
        record["base_sha256"]
        == model_sha256(smollm2_dir)
        == json.loads((smollm2_dir / model_sources.SOURCE_RECORD).read_text())["sha256"]
    )
    assert json.loads((based / ADAPTER_RECORD).read_text())["base_sha256"] == record["base_sha256"]
    assert (based / "adapter_model.safetensors").is_file() and not (based / "model.safetensors").exists()
    assert record["trainable_parameters"] < record["parameters"] / 20  # the adapters alone
    # The base's own tokenizer and chat template, prompts as the policy renders them.
    assert (based / "tokenizer.json").read_bytes() == (smollm2_dir / "tokenizer.json").read_bytes()


def test_the_adapter_folder_loads_as_the_merged_model_everywhere_a_model_loads(
    based: Path, smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = local_model_dir(str(based))
    assert merged.parent == model_sources.models_dir() and (merged / "model.safetensors").is_file()
    monkeypatch.setattr(model_sources, "merge_adapter", lambda *a: pytest.fail("merged twice"))
    assert local_model_dir(str(based)) == merged
    trained, base = load_file(merged / "model.safetensors"), load_file(smollm2_dir / "model.safetensors")
    assert trained.keys() == base.keys()
    changed = [k for k in base if not torch.equal(trained[k], base[k])]
    assert changed and all("proj" in k for k in changed)  # LoRA targets the projections only
    # As RL, `rllib evaluate` and policy folders load it: model_config={"model": <the folder>}.
    module = inference_module(config_for_warm_start(based))
    assert module.lm.config.vocab_size == 49152 and module.tokenizer.chat_template
    prompt = module.tokenizer(chat_prompt(module.tokenizer, "Find a red shirt."), return_tensors="pt")
    with torch.no_grad():
        out = module.lm.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert out.shape[1] > prompt["input_ids"].shape[1]
    assert CheckpointPolicy(based).config.history_length == 2


def test_a_shipped_adapter_is_its_bf16_copy_and_loads_over_its_base(based: Path, tmp_path: Path) -> None:
    """scripts/ship_warm_start.py's copy of a base's warm start: the adapter's weights in bf16 beside
    its records and tokenizer, none of the Trainer's files; runs merge it into the float32 base."""
    shipped = tmp_path / "shipped"
    copy_in_bf16(based, shipped)
    assert not (shipped / "checkpoints").exists() and not (shipped / "model.safetensors").exists()
    assert (shipped / ADAPTER_RECORD).read_bytes() == (based / ADAPTER_RECORD).read_bytes()
    weights, original = load_file(shipped / ADAPTER_FILES[1]), load_file(based / ADAPTER_FILES[1])
    assert weights.keys() == original.keys() and {w.dtype for w in weights.values()} == {torch.bfloat16}
    policy = CheckpointPolicy(shipped)
    assert policy.module.lm.dtype == torch.float32 and policy.config.history_length == 2


def test_an_adapter_is_refused_in_one_line_over_another_base(based: Path, tmp_path: Path) -> None:
    other = tmp_path / "adapter"
    shutil.copytree(based, other, ignore=shutil.ignore_patterns("checkpoints", "*.jsonl"))
    record = json.loads((other / ADAPTER_RECORD).read_text())
    (other / ADAPTER_RECORD).write_text(json.dumps({**record, "base_sha256": "0" * 64}))
    with pytest.raises(ValueError, match=r"LoRA adapter of another base \(sha256 000000000000\)") as err:
        local_model_dir(str(other))
    assert "\n" not in str(err.value)
    (other / ADAPTER_RECORD).write_text(json.dumps({**record, "base": str(tmp_path / "nowhere")}))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        local_model_dir(str(other))
    (other / ADAPTER_RECORD).write_text(json.dumps({"base": ["smollm2-135m-instruct"]}))
    with pytest.raises(ValueError, match="must name the base and its base_sha256"):
        local_model_dir(str(other))


def test_based_settings_are_refused_without_a_base_and_tiny_ones_with_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(tmp_path / "a")]
    for extra, words in [
        (["--full-finetune"], "--full-finetune"),
        (["--lora-rank", "4"], "--lora-rank"),
        (["--dtype", "bfloat16"], "--dtype"),
    ]:
        assert cli.main([*tiny, *extra]) == 2
        assert f"{words} applies to a pretrained base (--model) only" in capsys.readouterr().err
    based = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(tmp_path / "b"), "--model", "x"]
    for extra, words in [
        (["--tiny-model", '{"hidden_size": 32}'], "--tiny-model"),
        (["--vocab-size", "300"], "--vocab-size"),
        (["--whole-words"], "--whole-words"),
        (["--full-finetune", "--lora-rank", "4"], "--lora-rank"),
    ]:
        assert cli.main([*based, *extra]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_tiny_models_records_and_estimates_are_unchanged_and_a_bases_scale_with_it() -> None:
    tiny = SFTSettings(env="keychest", episodes=2).record()
    assert not {"base", "lora", "dtype", "full_finetune", "lora_rank"} & set(tiny) and tiny["lr"] == 1e-3
    lengths = [500] * 8
    assert fit_seconds(lengths, 1.0, parameters=None) == fit_seconds(lengths, 1.0)
    small, large = (fit_seconds(lengths, 1.0, parameters=n) for n in (135_000_000, 270_000_000))
    assert large == pytest.approx(2 * small) and small > 20 * fit_seconds(lengths, 1.0)


@pytest.mark.slow
def test_rllib_evaluate_and_export_take_the_adapter_folder(based: Path, tmp_path: Path) -> None:
    """``rllib evaluate`` plays it on WebShop test goals; ``rllib export`` writes its merged weights as
    a policy folder and, its base being a GGUF file, as a GGUF file too."""
    summary = evaluate(
        based, seeds=[123], episodes=1, output=tmp_path / "eval", baselines=[], env_config={"max_steps": 2}
    )
    assert list(summary["policy"]) == ["checkpoint"]
    assert len(pd.read_csv(tmp_path / "eval" / "episodes.csv")) == 1
    out = export_policy(based, tmp_path / "export", gguf_type="f16")
    merged = load_file(local_model_dir(str(based)) / "model.safetensors")
    exported = load_file(out / "model.safetensors")
    assert all(torch.equal(exported[k], merged[k]) for k in merged)
    assert (out / "export.f16.gguf").is_file()


@pytest.mark.slow
def test_full_finetuning_writes_a_plain_model_directory(smollm2_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "full"
    assert cli.main(based_args(out, "--full-finetune")) == 0  # 2 steps: the first one's rate is 0 (warm-up)
    record = json.loads((out / SFT_CONFIG).read_text())
    assert record["lora"] is None and record["lr"] == based_lr(full_finetune=True)
    assert record["trainable_parameters"] == record["parameters"] and record["optimizer_steps"] == 2
    assert not (out / ADAPTER_RECORD).exists() and local_model_dir(str(out)) == out
    trained, base = load_file(out / "model.safetensors"), load_file(smollm2_dir / "model.safetensors")
    assert not torch.equal(trained["model.norm.weight"], base["model.norm.weight"])  # not only projections
    assert inference_module(config_for_warm_start(out)).lm.config.vocab_size == 49152

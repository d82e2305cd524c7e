"""The evaluation protocol (``hgpo_rllib.evaluation.protocol``): the shares of cut turns beside the
invalid rate in its tables; a policy played in another dtype is another evaluation, and a record from
before the dtype was recorded is the policy's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import DATA, ROOT, cutting_policy

import envs
from hgpo_rllib.evaluation import evaluate, protocol
from hgpo_rllib.evaluation.output_dir import changed_evaluation
from hgpo_rllib.evaluation.policy_folder import export_policy
from hgpo_rllib.run_records import read_record

#: The shipped WebShop warm start's evaluation (benchmarks/table1.py reuses it), recorded before the
#: dtype and engine were.
SHIPPED_EVALUATION = ROOT / "docs" / "results" / "webshop_shipped_warm_start_eval_smollm2-135m-instruct"


def test_the_tables_give_a_policys_cut_turns_and_none_for_a_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy evaluated is the cutting one (every answer length-cut, every prompt cut): its
    per-seed rows say 1.0 for both; the random baseline's are empty (NaN), not 0."""
    policy = cutting_policy()
    monkeypatch.setattr(protocol, "CheckpointPolicy", lambda checkpoint, **kwargs: policy)
    out = tmp_path / "eval"
    summary = evaluate(
        tmp_path / "cutting", env="keychest", seeds=[1, 2], episodes=2, output=out, baselines=["random"]
    )
    per_seed = pd.read_csv(out / "per_seed.csv")
    assert list(per_seed.columns) == [
        "policy",
        "seed",
        "success",
        "steps",
        "invalid_rate",
        "length_cut_rate",
        "prompt_cut_rate",
    ]
    trained, random = per_seed[per_seed.policy == "checkpoint"], per_seed[per_seed.policy == "random"]
    assert trained.length_cut_rate.tolist() == [1.0, 1.0] and trained.prompt_cut_rate.tolist() == [1.0, 1.0]
    assert random.length_cut_rate.isna().all() and random.prompt_cut_rate.isna().all()
    rates = summary.set_index("policy")[["length_cut_rate", "prompt_cut_rate"]]
    assert rates.loc["checkpoint"].tolist() == ["1.0 ± 0.0", "1.0 ± 0.0"]
    assert rates.loc["random"].isna().all()  # summary.csv leaves them empty
    episodes = pd.read_csv(out / "episodes.csv")
    assert np.isnan(episodes[episodes.policy == "random"].length_cut_rate).all()


def test_the_committed_episodes_without_cut_rates_summarize_with_nan_for_them() -> None:
    """An evaluation's ``episodes.csv`` from before the cut rates (a committed result), read as the
    output directory reads it, summarizes as it did, with NaN for the two rates."""
    committed = ROOT / "docs" / "results" / "webshop_shipped_warm_start_eval_smollm2-135m-instruct"
    episodes = pd.read_csv(committed / "episodes.csv", keep_default_na=False)
    assert "length_cut_rate" not in episodes
    facts = envs.env_facts("webshop", {"split": "test"}).evaluation
    per_seed, _ = protocol.summarize(episodes, facts)
    assert per_seed.length_cut_rate.isna().all() and per_seed.prompt_cut_rate.isna().all()
    before = pd.read_csv(committed / "per_seed.csv")
    pd.testing.assert_frame_equal(per_seed.drop(columns=["length_cut_rate", "prompt_cut_rate"]), before)


def test_a_record_from_before_the_dtype_was_recorded_is_the_policys_own_evaluation() -> None:
    saved = {k: v for k, v in read_record(SHIPPED_EVALUATION / "evaluation.json").items() if k != "splits"}
    assert "torch_dtype" not in saved and "inference_backend" not in saved
    shipped = ROOT / "hgpo_rllib" / "warm_start" / "shipped" / "webshop-ca143eb9a6"
    settings = protocol.evaluation_settings("webshop", 100, {"max_steps": 15}, shipped)
    assert (settings["torch_dtype"], settings["inference_backend"]) == (None, None)
    assert changed_evaluation(saved, settings) == []
    in_bf16 = protocol.evaluation_settings("webshop", 100, {"max_steps": 15}, shipped, torch_dtype="bfloat16")
    assert changed_evaluation(saved, in_bf16) == ["torch_dtype was None, now 'bfloat16'"]
    on_vllm = protocol.evaluation_settings(
        "webshop", 100, {"max_steps": 15}, shipped, inference_backend="vllm"
    )
    assert changed_evaluation(saved, on_vllm) == ["inference_backend was None, now 'vllm'"]


@pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")  # the 0.1.0 checkpoint
def test_a_policy_played_in_bfloat16_is_another_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny KeyChest policy folder (float32) played in bfloat16 plays with its weights in bfloat16
    and records it; it reuses nothing of its float32 evaluation nor resumes into it, and the float32
    one asked for by name is the policy's own evaluation."""
    folder = export_policy(DATA / "checkpoints" / "keychest_hgpo_0.1.0", tmp_path / "policy")
    played: list[set[torch.dtype]] = []
    play = protocol.play

    def weighed(env_name: str, config: dict[str, Any], policy: Any, tasks: Any, **kwargs: Any) -> Any:
        played.append({parameter.dtype for parameter in policy.module.lm.parameters()})
        return play(env_name, config, policy, tasks, **kwargs)

    monkeypatch.setattr(protocol, "play", weighed)
    common = {"env": "keychest", "seeds": [1], "episodes": 1, "baselines": (), "env_config": {"max_steps": 2}}
    own, in_bf16 = tmp_path / "own", tmp_path / "bf16"
    evaluate(folder, output=own, **common)
    capsys.readouterr()
    evaluate(folder, output=in_bf16, reuse=[own], torch_dtype="bfloat16", **common)
    assert played == [{torch.float32}, {torch.bfloat16}]  # played again, not copied
    changed = "torch_dtype was None, now 'bfloat16'"
    assert f"{own}: another evaluation ({changed}); nothing reused from it\n" in capsys.readouterr().out
    record = read_record(in_bf16 / "evaluation.json")
    assert (record["torch_dtype"], record["inference_backend"]) == ("bfloat16", None)
    assert read_record(own / "evaluation.json")["torch_dtype"] is None
    speed = json.loads((in_bf16 / "throughput.json").read_text())["policies"]["checkpoint"]
    assert (speed["torch_dtype"], speed["inference_backend"]) == ("bfloat16", "hf")
    assert (
        "- the checkpoint plays in bfloat16 with hf (not its own)\n" in (in_bf16 / "summary.md").read_text()
    )
    assert "- the checkpoint plays in float32 with hf (its own)\n" in (own / "summary.md").read_text()
    with pytest.raises(FileExistsError, match=changed):
        evaluate(folder, output=own, torch_dtype="bfloat16", **common)
    evaluate(folder, output=own, torch_dtype="float32", inference_backend="hf", **common)
    assert len(played) == 2  # the policy's own dtype and engine by name: its own evaluation, finished

"""The evaluation protocol's tables (``hgpo_rllib.evaluation.protocol``): the shares of cut turns
beside the invalid rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT, cutting_policy

import envs
from hgpo_rllib.evaluation import evaluate, protocol


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

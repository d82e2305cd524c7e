"""``rllib evaluate`` on ALFWorld's and WebShop's evaluation splits (defaults, labels, whole splits)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hgpo_rllib import cli
from hgpo_rllib.cli import build_parser
from hgpo_rllib.evaluation import DEFAULT_EPISODES, evaluate, protocol

GENERATED = {"source": "generated"}


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict, int]]:
    """Replace the episode loop: record (env, env_config, episodes) and return lost episodes."""
    calls: list[tuple[str, dict, int]] = []

    def record(env_name, env_config, policy, task_seeds, **kwargs):
        calls.append((env_name, dict(env_config), len(task_seeds)))
        return [
            {
                "task_seed": s,
                "task_type": "Pick",
                "won": False,
                "steps": 1,
                "invalid_rate": 0.0,
                "score": 0.0,
                "env_error": "",
            }
            for s in task_seeds
        ]

    monkeypatch.setattr(protocol, "play", record)
    return calls


def test_defaults_are_the_whole_out_of_distribution_split(tmp_path: Path, played: list) -> None:
    evaluate(None, env="alfworld", seeds=[1, 2], output=tmp_path, baselines=["random"], env_config=GENERATED)
    assert [(c["split"], n) for _, c, n in played] == [("eval_out_of_distribution", 134)] * 2
    assert "split `eval_out_of_distribution` (134 games, all played)" in (tmp_path / "summary.md").read_text()
    assert set(pd.read_csv(tmp_path / "summary.csv")["split"]) == {"eval_out_of_distribution"}


def test_split_all_labels_each_split(tmp_path: Path, played: list) -> None:
    summary = evaluate(
        None,
        env="alfworld",
        split="all",
        seeds=[1],
        episodes=3,
        output=tmp_path,
        baselines=["random"],
        env_config=GENERATED,
    )
    assert [(c["split"], n) for _, c, n in played] == [
        ("eval_in_distribution", 3),
        ("eval_out_of_distribution", 3),
    ]
    assert list(summary["split"]) == ["eval_in_distribution", "eval_out_of_distribution"]
    per_seed = pd.read_csv(tmp_path / "per_seed.csv")
    assert list(per_seed["split"]) == ["eval_in_distribution", "eval_out_of_distribution"]
    text = (tmp_path / "summary.md").read_text()
    assert "split `eval_in_distribution` (140 games): 3 episodes" in text


def test_an_earlier_evaluation_of_one_split_is_reused_only_with_the_same_settings(
    tmp_path: Path, played: list
) -> None:
    common = {"env": "alfworld", "seeds": [1], "baselines": ["random"], "env_config": GENERATED}
    evaluate(None, split="out", episodes=3, output=tmp_path / "out_only", **common)
    played.clear()  # through `rllib evaluate --reuse`
    args = ["evaluate", "--env", "alfworld", "--split", "all", "--seeds", "1", "--episodes", "3"]
    args += [
        "--baselines",
        "random",
        "--env-config",
        '{"source": "generated"}',
        "--output",
        str(tmp_path / "both"),
    ]
    assert cli.main([*args, "--reuse", str(tmp_path / "out_only")]) == 0
    assert [c["split"] for _, c, _ in played] == ["eval_in_distribution"]  # `out` was copied
    throughput = json.loads((tmp_path / "both" / "throughput.json").read_text())
    assert throughput["policies"]["random"]["episodes"] == 3  # the 3 copied took no time here
    both = pd.read_csv(tmp_path / "both" / "episodes.csv")
    earlier = pd.read_csv(tmp_path / "out_only" / "episodes.csv")
    pd.testing.assert_frame_equal(
        both[both["split"] == "eval_out_of_distribution"].reset_index(drop=True), earlier
    )
    assert list(pd.read_csv(tmp_path / "both" / "per_seed.csv")["split"]) == [
        "eval_in_distribution",
        "eval_out_of_distribution",
    ]
    refused = [*args[:-1], str(tmp_path / "refused"), "--reuse", str(tmp_path / "nothing")]
    assert cli.main(refused) == 2 and not (tmp_path / "refused").exists()  # not an evaluation output
    played.clear()  # another number of games: nothing of the earlier output is the same evaluation
    evaluate(
        None, split="all", episodes=2, output=tmp_path / "other", reuse=[tmp_path / "out_only"], **common
    )
    assert [c["split"] for _, c, _ in played] == ["eval_in_distribution", "eval_out_of_distribution"]


def test_webshop_evaluates_on_its_test_goals(tmp_path: Path, played: list) -> None:
    evaluate(None, env="webshop", seeds=[1], output=tmp_path, baselines=["random"])
    assert [(c["split"], n) for _, c, n in played] == [("test", DEFAULT_EPISODES)]


def test_bad_split_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        evaluate(None, env="alfworld", split="valid", output=tmp_path, baselines=["random"])


def test_cli_split_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["evaluate", "--env", "alfworld", "--output", "x"])
    assert args.split is None and args.episodes is None  # evaluate() picks "out" and the whole split
    assert (
        parser.parse_args(["evaluate", "--env", "alfworld", "--split", "all", "--output", "x"]).split == "all"
    )
    # The choices are the env's (EvaluationFacts.splits): checked once the env is known.
    refused = ["evaluate", "--env", "alfworld", "--split", "seen", "--output", str(tmp_path / "x")]
    assert cli.main(refused) == 2 and not (tmp_path / "x").exists()
    assert "split must be one of ['all', 'in', 'out'], got 'seen'" in capsys.readouterr().err
    assert cli.main(["evaluate", "--env", "webshop", "--split", "in", "--output", str(tmp_path / "x")]) == 2
    assert "--split applies to envs with split choices" in capsys.readouterr().err


@pytest.mark.slow
def test_real_episodes_on_both_splits(tmp_path: Path) -> None:
    summary = evaluate(
        None,
        env="alfworld",
        split="all",
        seeds=[1],
        episodes=2,
        output=tmp_path,
        baselines=["expert"],
        env_config=GENERATED,
    )
    assert list(summary["split"]) == ["eval_in_distribution", "eval_out_of_distribution"]
    assert (pd.read_csv(tmp_path / "per_seed.csv")["success"] == 100).all()

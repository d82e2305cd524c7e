"""``rllib evaluate``'s levers of how a checkpoint plays (``--dtype``, ``--inference-backend``) and
``--transcripts``: typed flags, passed to :func:`~hgpo_rllib.evaluation.protocol.evaluate` as
keywords; bad values are one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from hgpo_rllib import cli
from hgpo_rllib.cli import evaluate as command


def run_cli(args: list[str]) -> int:
    """``cli.main`` as the shell sees it: argparse's usage errors exit through SystemExit."""
    try:
        return cli.main(args)
    except SystemExit as exc:
        return int(exc.code)


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keywords each ``rllib evaluate`` passes to ``evaluate`` (nothing is played)."""
    calls: list[dict[str, Any]] = []

    def record(checkpoint: str | None, **kwargs: Any) -> pd.DataFrame:
        calls.append({"checkpoint": checkpoint, **kwargs})
        return pd.DataFrame({"policy": ["checkpoint"]})

    monkeypatch.setattr(command, "evaluate", record)
    return calls


def test_the_dtype_and_engine_flags_reach_evaluate_as_keywords(
    tmp_path: Path, evaluated: list[dict[str, Any]]
) -> None:
    out = str(tmp_path / "o")
    assert run_cli(["evaluate", "policy", "--output", out]) == 0
    assert (
        run_cli(["evaluate", "policy", "--output", out, "--dtype", "bfloat16", "--inference-backend", "vllm"])
        == 0
    )
    assert run_cli(["evaluate", "policy", "--output", out, "--dtype", "cpu"]) == 0
    played = [(call["torch_dtype"], call["inference_backend"]) for call in evaluated]
    assert played == [(None, None), ("bfloat16", "vllm"), ("cpu", None)]


def test_the_transcripts_flag_reaches_evaluate(tmp_path: Path, evaluated: list[dict[str, Any]]) -> None:
    out = str(tmp_path / "o")
    assert run_cli(["evaluate", "policy", "--output", out]) == 0
    assert run_cli(["evaluate", "policy", "--output", out, "--transcripts"]) == 0
    assert [call["transcripts"] for call in evaluated] == [False, True]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--dtype", "float16"],
            "--dtype: invalid choice: 'float16' (choose from 'float32', 'bfloat16', 'cpu')",
        ),
        (
            ["--inference-backend", "auto"],
            "--inference-backend: invalid choice: 'auto' (choose from 'hf', 'vllm')",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_choices(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["evaluate", "policy", "--output", str(tmp_path / "o"), *flags]) == 2
    assert capsys.readouterr().err == f"rllib evaluate: error: argument {message} (see --help)\n"


def test_a_dtype_without_a_checkpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["evaluate", "--env", "keychest", "--baselines", "random", "--output", str(tmp_path / "o")]
    assert run_cli([*args, "--dtype", "bfloat16"]) == 2
    assert capsys.readouterr().err == (
        "rllib: error: --dtype and --inference-backend choose how a checkpoint plays: give one\n"
    )
    assert not (tmp_path / "o").exists()

"""A user's own env, in the user's own file, trained by ``rllib train file`` and played by ``rllib
evaluate`` with no edit of the package (issue 26): examples/own_env.py, which the README quotes and links."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, own_stderr, train_args

from hgpo_rllib import cli
from hgpo_rllib.algorithms.checkpoints import ENV_RECORD
from hgpo_rllib.run_records import read_record

EXAMPLE = ROOT / "examples" / "own_env.py"


def test_the_readme_links_the_example_and_quotes_it_as_it_is() -> None:
    """The README's own-env paragraph links the example and quotes a few of its lines verbatim (its
    end: registration and config), not the whole file."""
    readme = (ROOT / "README.md").read_text()
    assert "](examples/own_env.py)" in readme
    after = readme.split("](examples/own_env.py)", 1)[1]
    quoted = after.split("```python\n", 1)[1].split("```", 1)[0]
    example = EXAMPLE.read_text()
    assert quoted in example, "the README's lines of examples/own_env.py differ from the file"
    assert "register_env(" in quoted and len(quoted.splitlines()) < len(example.splitlines()) // 3


@pytest.mark.usefixtures("ray_session")
def test_an_env_of_the_users_own_file_trains_and_is_evaluated_without_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli.main(train_args(EXAMPLE, out, "--checkpoint-freq", "5", name=None)) == 0
    (trial,) = [d for d in (out / "guess_hgpo").iterdir() if d.is_dir()]
    progress = pd.read_csv(trial / "progress.csv")
    assert progress["training_iteration"].tolist() == [1, 2, 3, 4, 5]
    assert (progress["num_groups_sampled"] == 2).all()
    checkpoint = trial / "checkpoint_000000"
    assert read_record(checkpoint / ENV_RECORD) == {
        "env": "guess",
        "env_class": f"{EXAMPLE.resolve()}:GuessEnv",
    }
    # A new process, which never ran the example: the checkpoint names its env's class.
    evaluation = subprocess.run(
        [sys.executable, "-m", "hgpo_rllib.cli", "evaluate", str(checkpoint), "--seeds", "1"]
        + ["--episodes", "4", "--output", str(tmp_path / "eval")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    episodes = pd.read_csv(tmp_path / "eval" / "episodes.csv")
    assert sorted(set(episodes["policy"])) == ["checkpoint", "random"]  # GuessEnv has no expert
    assert len(episodes) == 8 and set(episodes["task_type"]) == {"guess"}


def test_an_unknown_env_is_one_line_naming_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["evaluate", "--env", "gues", "--output", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    (line,) = own_stderr(capsys.readouterr().err).strip().splitlines()
    assert "unknown environment 'gues'" in line and "alfworld (hgpo/ALFWorld-v0)" in line

"""Which earlier output an evaluation is the same as (its own, to resume; another's, to reuse): a
policy folder by its weights, wherever it lies; an algorithm checkpoint by its path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import DATA, play_interrupted_after
from safetensors.torch import load_file, save_file

from hgpo_rllib.evaluation import evaluate, protocol
from hgpo_rllib.evaluation.output_dir import changed_evaluation
from hgpo_rllib.evaluation.policy_folder import export_policy
from hgpo_rllib.evaluation.policy_loading import CTOR_FILE, MODULES_DIR
from hgpo_rllib.evaluation.rollout import task_seeds
from hgpo_rllib.rl_module.model_sources import weights_digest
from hgpo_rllib.run_records import read_record

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: The folder is exported from the committed checkpoint, saved by 0.1.0: its pickles name moved modules.
pytestmark = pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")
FOLDER = {
    "env": "keychest",
    "episodes": 2,
    "env_config": {"max_steps": 10},
    "checkpoint": "/ship/policy",
    "policy_weights": "aaaa",
}


def test_a_digest_decides_the_match_and_a_path_only_without_one() -> None:
    assert changed_evaluation(FOLDER, {**FOLDER, "checkpoint": "/clone/policy"}) == []
    assert changed_evaluation(FOLDER, {**FOLDER, "policy_weights": "bbbb"}) == [
        "policy_weights was 'aaaa', now 'bbbb'"
    ]
    # A record from before digests were recorded cannot vouch for the weights at its path.
    before = {k: v for k, v in FOLDER.items() if k != "policy_weights"}
    assert changed_evaluation(before, FOLDER) == ["policy_weights was None, now 'aaaa'"]
    # An algorithm checkpoint (no digest) is its path, in old records too.
    checkpoint = {**FOLDER, "policy_weights": None}
    assert changed_evaluation(before, checkpoint) == []
    assert changed_evaluation(before, {**checkpoint, "checkpoint": "/other"}) == [
        "checkpoint was '/ship/policy', now '/other'"
    ]
    assert changed_evaluation(FOLDER, checkpoint) == ["policy_weights was 'aaaa', now None"]


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the episode loop: record each played (policy, seed) and return lost episodes."""
    calls: list[str] = []

    def record(env_name, env_config, policy, task_seeds, *, desc, **kwargs):
        calls.append(desc)
        return [
            {"task_seed": s, "won": False, "steps": 1, "invalid_rate": 0.0, "env_error": ""}
            for s in task_seeds
        ]

    monkeypatch.setattr(protocol, "play", record)
    return calls


def test_a_policy_folder_is_the_same_evaluation_by_its_weights_wherever_it_lies(
    tmp_path: Path, played: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = export_policy(CHECKPOINT, tmp_path / "ship" / "policy")
    common = {
        "env": "keychest",
        "seeds": [1],
        "episodes": 2,
        "baselines": (),
        "env_config": {"max_steps": 10},
    }
    first = tmp_path / "first"
    evaluate(folder, output=first, **common)
    assert played == ["checkpoint seed 1"]
    digest = weights_digest(folder)
    assert read_record(first / "evaluation.json") == {
        **FOLDER,
        "checkpoint": str(folder),
        "policy_weights": digest,
        "torch_dtype": None,
        "inference_backend": None,
        "splits": [None],
    }
    clone = Path(shutil.copytree(folder, tmp_path / "clone" / "policy"))
    played.clear()
    capsys.readouterr()
    evaluate(clone, output=tmp_path / "second", reuse=[first], **common)
    assert played == []  # the same weights at another path: copied
    assert capsys.readouterr().out.startswith(f"checkpoint seed 1: 2 episodes copied from {first}\n")
    second = read_record(tmp_path / "second" / "evaluation.json")
    assert (second["checkpoint"], second["policy_weights"]) == (str(clone), digest)
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "second" / "episodes.csv"), pd.read_csv(first / "episodes.csv")
    )
    evaluate(clone, output=first, **{**common, "seeds": [1, 2]})  # resumed from the clone
    assert played == ["checkpoint seed 2"]
    assert read_record(first / "evaluation.json")["checkpoint"] == str(folder)  # as first recorded
    (weights_file,) = clone.glob("*.safetensors")
    weights = load_file(weights_file)
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1.0
    save_file(weights, weights_file, metadata={"format": "pt"})
    other = weights_digest(clone)
    played.clear()
    capsys.readouterr()
    evaluate(clone, output=tmp_path / "third", reuse=[first], **common)
    assert played == ["checkpoint seed 1"]  # other weights at the path the second one reused from
    changed = f"policy_weights was {digest!r}, now {other!r}"
    assert capsys.readouterr().out.startswith(
        f"{first}: another evaluation ({changed}); nothing reused from it\n"
    )
    with pytest.raises(FileExistsError, match=changed):
        evaluate(clone, output=first, **common)


def test_an_output_written_before_the_cut_rates_resumes_and_reads_them_as_nan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 1 is played as before the cut rates were recorded (no columns); seed 2 with one episode
    that reports none (an empty cell once written) and one that reports them; seed 3 after a rerun
    has read both back. Each seed's rate is the mean over the episodes that report one."""
    rates = {1: [{}, {}], 2: [{}, {"length_cut_rate": 0.5, "prompt_cut_rate": 0.25}]}
    rates[3] = [{"length_cut_rate": 1.0, "prompt_cut_rate": 0.0}] * 2

    def record(env_name, env_config, policy, task_seeds, *, desc, **kwargs):
        seed = int(desc.split()[-1])
        return [
            {"task_seed": s, "won": False, "steps": 1, "invalid_rate": 0.0, "env_error": "", **cut}
            for s, cut in zip(task_seeds, rates[seed], strict=True)
        ]

    monkeypatch.setattr(protocol, "play", record)
    common = {"env": "keychest", "episodes": 2, "baselines": ["random"], "output": tmp_path}
    evaluate(None, seeds=[1], **common)
    assert "length_cut_rate" not in pd.read_csv(tmp_path / "episodes.csv")
    evaluate(None, seeds=[1, 2], **common)
    summary = evaluate(None, seeds=[1, 2, 3], **common)
    per_seed = pd.read_csv(tmp_path / "per_seed.csv")
    assert per_seed.seed.tolist() == [1, 2, 3]
    assert per_seed.length_cut_rate.tolist()[1:] == [0.5, 1.0] and np.isnan(per_seed.length_cut_rate[0])
    assert per_seed.prompt_cut_rate.tolist()[1:] == [0.25, 0.0] and np.isnan(per_seed.prompt_cut_rate[0])
    assert summary[["length_cut_rate", "prompt_cut_rate"]].values.tolist() == [["0.75 ± 0.25", "0.12 ± 0.12"]]


def test_transcripts_hold_each_saved_game_once_across_an_interrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two of four games are saved, then the run stops; a third game's transcript was written but
    not its record (a stop between the two writes). The resume drops that transcript, plays the
    other two games, and the file ends with one line per game: the record of ``episodes.csv`` plus
    as many turns as it took steps, in strict JSON (the baseline's cut rates null, not NaN). An
    evaluation without ``transcripts`` writes no folder."""
    out = tmp_path / "eval"
    settings = {"env": "keychest", "seeds": [1], "episodes": 4, "output": out, "baselines": ["random"]}
    play = protocol.play
    monkeypatch.setattr(protocol, "play", play_interrupted_after(2))
    with pytest.raises(KeyboardInterrupt):
        evaluate(None, transcripts=True, **settings)
    transcripts = out / "transcripts" / "random-seed1.jsonl"
    before = transcripts.read_text().splitlines()
    saved = {json.loads(line)["task_seed"] for line in before}
    unsaved = next(task for task in task_seeds(1, 4) if task not in saved)
    stray = json.dumps({**json.loads(before[0]), "task_seed": unsaved})
    transcripts.write_text("".join(f"{line}\n" for line in [*before, stray]))
    monkeypatch.setattr(protocol, "play", play)
    evaluate(None, transcripts=True, **settings)

    lines = transcripts.read_text().splitlines()
    assert lines[:2] == before
    strict = [json.loads(line, parse_constant=pytest.fail) for line in lines]  # no NaN: any reader's JSON
    games = {game["task_seed"]: game for game in strict}
    assert len(lines) == 4 and sorted(games) == task_seeds(1, 4)
    for row in pd.read_csv(out / "episodes.csv").itertuples():
        game = games[row.task_seed]
        assert (game["won"], game["steps"], len(game["turns"])) == (row.won, row.steps, row.steps)
    evaluate(None, **{**settings, "output": tmp_path / "plain"})
    assert not (tmp_path / "plain" / "transcripts").exists()


def test_a_team_is_refused_transcripts(tmp_path: Path) -> None:
    """A team's episodes are multi-agent: ``transcripts`` is refused in one line, before any load."""
    (tmp_path / MODULES_DIR).mkdir(parents=True)
    (tmp_path / CTOR_FILE).touch()
    with pytest.raises(ValueError, match="a team's are not recorded"):
        evaluate(tmp_path, output=tmp_path / "eval", baselines=[], transcripts=True)

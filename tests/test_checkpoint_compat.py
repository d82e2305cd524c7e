"""Checkpoints of hgpo-rllib 0.1.0 still load: restored at their iteration with their weights, trained on,
and evaluated by ``rllib evaluate``, with a DeprecationWarning naming each moved module.

``tests/data/checkpoints/keychest_hgpo_0.1.0/`` was saved by the pre-0.2.0 code (before the package was
split into sub-packages) with ``tests/data/checkpoints/make_keychest_hgpo_0.1.0.py``: one iteration of
HGPO on KeyChest with the tiny model (2 groups of 2 episodes, lr 1e-3, kl_coeff 0.01). Its pickles name
the old module paths (``hgpo_rllib.hgpo.HGPOConfig``, ``hgpo_rllib.callbacks.HGPOMetricsCallback``, ...),
which the 0.2.0 re-export shims resolve.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from helpers import DATA, assert_policy_moved, assert_same_tree, learner_weights, optimizer_steps
from ray.rllib.core.rl_module.rl_module import RLModule

from hgpo_rllib import HGPO, cli
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.env_runner.metrics_callback import EpisodeMetricsCallback
from hgpo_rllib.evaluation.policy_loading import MODULE_DIR

pytestmark = pytest.mark.usefixtures("ray_session")

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: The old module paths the checkpoint's pickles name, and where each moved (the shims' warnings).
MOVED = {
    "hgpo_rllib.hgpo": "hgpo_rllib.algorithms.hgpo",
    "hgpo_rllib.callbacks": "hgpo_rllib.env_runner.metrics_callback",
    "hgpo_rllib.torch.hgpo_torch_learner": "hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner",
    "hgpo_rllib.learner_group": "hgpo_rllib.algorithms.learner_group",
    "hgpo_rllib.connectors.history_window": "hgpo_rllib.connectors.env_to_module.history_window",
    "hgpo_rllib.connectors.decode_actions": "hgpo_rllib.connectors.module_to_env.text_actions",
}
LR = 1e-3  # the checkpoint's learning rate


@pytest.fixture
def old_checkpoint(tmp_path: Path) -> Path:
    """A copy of the 0.1.0 checkpoint (training and evaluation must not write into tests/data)."""
    assert (CHECKPOINT / "rllib_checkpoint.json").is_file()
    return Path(shutil.copytree(CHECKPOINT, tmp_path / "keychest_hgpo_0.1.0"))


@pytest.fixture
def restored(old_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HGPO, list[str]]]:
    """The 0.1.0 checkpoint restored by ``HGPO.from_checkpoint``, and the DeprecationWarnings that
    restoring it raised in this process.

    A shim warns when it is imported, once per process: if an earlier test already imported one, it
    would warn no more. So the shims are taken out of ``sys.modules`` for this test (and put back
    after it), and unpickling the checkpoint imports them afresh."""
    for old in MOVED:
        monkeypatch.delitem(sys.modules, old, raising=False)
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
    # The pickled config and algorithm name the old paths; they resolve to the 0.2.0 classes.
    assert type(algo) is HGPO and isinstance(algo.config, HGPOConfig)
    assert algo.config.callbacks_class is EpisodeMetricsCallback
    assert (algo.config.env, algo.config.group_size, algo.config.groups_per_iteration) == ("keychest", 2, 2)
    assert (algo.config.lr, algo.config.kl_coeff) == (LR, 0.01)
    # Loading named the new homes of the moved modules it imported.
    assert any(
        m.startswith("hgpo_rllib.hgpo moved to hgpo_rllib.algorithms.hgpo in hgpo-rllib 0.2.0")
        for m in messages
    ), messages
    assert any(
        m.startswith("hgpo_rllib.callbacks moved to hgpo_rllib.env_runner.metrics_callback") for m in messages
    )
    for message in messages:  # every module shim's warning names an old path and its new one
        if "; import from " in message:
            old = message.split(" moved to ")[0]
            assert old in MOVED and message.startswith(f"{old} moved to {MOVED[old]} "), message

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
    assert cli.main(args) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["checkpoint"]
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 4 and set(episodes["seed"]) == {123}
    assert episodes["steps"].between(1, 4).all()  # the checkpoint's env_config: max_steps 4

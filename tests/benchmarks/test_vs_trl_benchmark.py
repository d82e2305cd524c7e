"""Checks of ``benchmarks/vs_trl.py`` without TRL's environment: the task's reward, the prompts both
sides get, the settings table, the result table, and this package's side for one tiny update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import benchmark_module

from hgpo_rllib.rl_module.models import load_tokenizer
from hgpo_rllib.rl_module.prompts import chat_prompt

vs_trl = benchmark_module("vs_trl")
task = benchmark_module("vs_trl_task")
ours = benchmark_module("vs_trl_ours")

GOAL = "Find me double sided pillows, 28 x 28, and price lower than 30.00 dollars"


def first_page(thing: str, price: int) -> dict[str, Any]:
    """WebShop's first page of a goal (envs/webshop/pages.py), without loading the shop."""
    goal = f"Find me {thing}, and price lower than {price}.00 dollars"
    return {
        "task": goal,
        "observation": f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search",
        "actions": ["search[<your query>]", "click[search]"],
    }


PAGES = [
    first_page("red shoes", 30),
    first_page("a long lasting bottle of perfume with size: 6.76 fl oz", 100),
    first_page("machine washable pillows", 40),
    first_page("gluten free snacks in a pack of 12", 20),
    first_page("a wooden wall art for the living room", 60),
    first_page("black women's shorts with high waist, size: 3x-large", 30),
]


@pytest.mark.parametrize(
    ("answer", "reward"),
    [
        ("<think>pillows</think><action>search[Double sided pillows 28 x 28]</action>", 5 / 14),
        ("<think></think><action>search[pillows under 30 dollars]</action>", 3 / 14),
        ("<think>a</think><action>SEARCH[ Pillows ]</action> and text after it", 1 / 14),
        ("<think>x</think><action>search[]</action>", 0.0),
        ("<think>x</think><action>click[search]</action>", 0.0),
        ("search[double sided pillows]", 0.0),  # no tags: malformed
        ("<think>x</think><action>search[double sided pillows 28 x 28]", 0.0),  # unclosed: malformed
    ],
)
def test_the_reward_is_the_share_of_the_goals_words_in_a_well_formed_search(
    answer: str, reward: float
) -> None:
    # 14 distinct words: find me double sided pillows 28 x and price lower than 30 00 dollars.
    assert task.answer_reward(answer, GOAL) == reward


def test_this_packages_env_pays_the_same_reward_in_one_step() -> None:
    env = ours.FirstSearchStep(rows=[[GOAL, "WebShop [SEP] Search", ["search[<your query>]"]]])
    env.reset(seed=0)
    answer = "<think>pillows</think><action>search[pillows 28 x 28]</action>"
    _, reward, terminated, truncated, _ = env.step(answer)
    assert reward == task.answer_reward(answer, GOAL) == 3 / 14 and (terminated, truncated) == (True, False)
    env.reset(seed=0)
    assert env.step("no tags")[1:4] == (0.0, False, True)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vs_trl.tiny_model_dir(PAGES, tmp_path_factory.mktemp("tiny"), seed=0)


def test_groups_share_a_prompt_and_the_control_shares_none(tiny_dir: Path) -> None:
    tokenizer = load_tokenizer(tiny_dir)
    shared = vs_trl.build_batches(PAGES, tokenizer, batches=2, groups=2, group_size=3, distinct=False)
    assert [[row["task"] for row in batch] for batch in shared] == [
        [PAGES[0]["task"]] * 3 + [PAGES[1]["task"]] * 3,
        [PAGES[2]["task"]] * 3 + [PAGES[3]["task"]] * 3,
    ]
    control = vs_trl.build_batches(PAGES, tokenizer, batches=1, groups=2, group_size=3, distinct=True)
    assert [row["task"] for row in control[0]] == [page["task"] for page in PAGES]
    row = control[0][0]
    assert row["prompt"] == chat_prompt(tokenizer, vs_trl.rendered(PAGES[0]))
    assert row["prompt"].startswith(
        "<|im_start|>user\n\nYou are an expert autonomous agent operating in the WebShop"
    )
    assert f"Your task is to: {PAGES[0]['task']}." in row["prompt"]
    # TRL tokenizes a plain prompt with special tokens on, this package with them off: the same ids.
    assert (
        tokenizer(text=[row["prompt"]])["input_ids"][0]
        == tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    )


def test_every_setting_is_listed_and_the_unmatched_ones_are_named() -> None:
    spec = task.Spec(model="m", model_dir="/m", batches=[[{}] * 16], micro_batch_size=4, new_tokens=32)
    rows = task.settings_rows(spec, "3000")
    assert len(rows) == 32 and len({row["setting"] for row in rows}) == 32
    unmatched = [row["setting"] for row in rows if not row["matched"].startswith("yes")]
    assert unmatched == [
        "dual clip",
        "LM head",
        "advantage",
        "shared prompts in the learner",
        "weight copy",
        "processes",
    ]
    by_name = {row["setting"]: row for row in rows}
    assert by_name["micro-batch"]["TRL"] == "`per_device_train_batch_size=4`, `gradient_accumulation_steps=4`"
    assert by_name["completion length"]["this package"] == "`min_new_tokens = max_new_tokens = 32`"
    assert (
        by_name["rows with zero advantage"]["this package"] == "computed (`skip_zero_advantage_rows=False`)"
    )
    no_sharing = task.Spec(model="m", model_dir="/m", batches=[[{}] * 16], share_prompt_prefixes=False)
    assert {row["setting"]: row for row in task.settings_rows(no_sharing, "3000")}[
        "shared prompts in the learner"
    ]["matched"] == "yes"


def _updates(seconds: list[float], real_tokens: int) -> list[dict[str, float]]:
    return [
        {
            "generation_s": s / 4,
            "update_s": 3 * s / 4,
            "total_s": s,
            "generation_positions": 100,
            "learner_positions": 10 * s,
            "real_tokens": real_tokens,
        }
        for s in seconds
    ]


def test_the_result_table_takes_medians_of_the_measured_updates_and_ratios_per_workload() -> None:
    runs = [
        {"block": block, "workload": workload, "side": side, "updates": _updates(seconds, 90)}
        for block in range(2)
        for workload, factor in (("group prompts", 1), ("distinct prompts", 2))
        for side, seconds in (
            ("TRL", [99.0, 8.0, 12.0]),
            ("this package", [99.0, 2.0 * factor, 4.0 * factor]),
        )
    ]
    frame = vs_trl.measured_frame(runs)
    assert len(frame) == 16 and 99.0 not in frame.total_s.tolist()  # warm-ups left out
    medians, ratios = vs_trl.summary(frame)
    assert medians[["workload", "side", "total_s", "learner_positions"]].values.tolist() == [
        ["group prompts", "TRL", 10.0, 100.0],
        ["group prompts", "this package", 3.0, 30.0],
        ["distinct prompts", "TRL", 10.0, 100.0],
        ["distinct prompts", "this package", 6.0, 60.0],
    ]
    assert ratios.to_dict("records") == [
        {
            "workload": "group prompts",
            "generation s (ours / TRL)": 0.3,
            "update s (ours / TRL)": 0.3,
            "s per update (ours / TRL)": 0.3,
        },
        {
            "workload": "distinct prompts",
            "generation s (ours / TRL)": 0.6,
            "update s (ours / TRL)": 0.6,
            "s per update (ours / TRL)": 0.6,
        },
    ]
    assert vs_trl.same_rows(frame)
    runs[1]["updates"][2]["real_tokens"] = 91
    assert not vs_trl.same_rows(vs_trl.measured_frame(runs))
    assert isinstance(medians, pd.DataFrame)


def tiny_spec(tiny_dir: Path, batches: int, distinct: bool, shared: bool = True) -> task.Spec:
    """2 groups of 2 rows per update, 4 new tokens."""
    rows = vs_trl.build_batches(PAGES, load_tokenizer(tiny_dir), batches, 2, 2, distinct)
    return task.Spec(
        model="tiny",
        model_dir=str(tiny_dir),
        batches=rows,
        group_size=2,
        micro_batch_size=2,
        new_tokens=4,
        share_prompt_prefixes=shared,
    )


@pytest.mark.usefixtures("ray_session")
def test_this_packages_runner_plays_the_rows_in_order(tiny_dir: Path) -> None:
    spec = tiny_spec(tiny_dir, batches=2, distinct=False)
    algo = ours.build_config(spec).build_algo()
    try:
        for batch in spec.batches:
            episodes = algo.env_runner.sample(num_episodes=4, explore=True)
            assert [episode.get_infos(0)["task"] for episode in episodes] == [row["task"] for row in batch]
    finally:
        algo.stop()


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize(("shared", "learner_positions"), [(False, 716), (True, 366)])
def test_one_tiny_update_of_this_package_counts_its_tokens(
    tiny_dir: Path, shared: bool, learner_positions: int
) -> None:
    spec = tiny_spec(tiny_dir, batches=1, distinct=False, shared=shared)
    tokenizer = load_tokenizer(tiny_dir)
    lengths = [
        len(tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]) for row in spec.batches[0]
    ]
    assert lengths == [162, 162, 188, 188]
    (update,) = ours.run_block(spec)
    # Generation: the 2 distinct prompts prefilled once, left-padded to 188, then 3 more steps of one
    # token for each of the 4 rows; the learner: each micro-batch is one group (no padding), its
    # prompt once with prefix sharing (170 + 196).
    assert update["generation_positions"] == 2 * 188 + 4 * 3
    assert update["real_tokens"] == sum(lengths) + 4 * 4 == 716
    assert update["learner_positions"] == learner_positions
    assert update["total_s"] >= update["generation_s"] + update["update_s"] > 0

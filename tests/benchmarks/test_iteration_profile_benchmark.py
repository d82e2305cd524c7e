"""Checks of ``benchmarks/iteration_profile.py`` without running an algorithm: each variant's settings
over the experiment file's config, the result file's name and the table (issue 63, item 5)."""

from __future__ import annotations

import math

import pytest
from helpers import TUNED, benchmark_module

bench = benchmark_module("iteration_profile")


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("default", (False, True, True, 2)),  # the KeyChest example: 2 epochs of its own
        ("baseline", (False, False, True, 2)),
        ("float32", (False, True, True, 2)),
        ("plain", (False, False, True, 2)),
        ("buckets", (False, True, True, 2)),
        ("shared", (True, True, True, 2)),
        ("recompute", (False, True, True, 2)),
        ("auto", (False, True, "auto", 2)),
    ],
)
def test_each_variant_sets_its_levers_over_the_experiments_config(variant, expected):
    args = bench.parse_args(["--config", '{"micro_batch_size": 8}', "-k", "1", "--variants", variant])
    config = bench.build_config(args, variant)
    settings = ("share_prompt_prefixes", "length_buckets", "recompute_old_logp", "num_epochs")
    assert tuple(getattr(config, name) for name in settings) == expected
    assert (config.micro_batch_size, config.history_length) == (8, 1)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [("default", ("bfloat16", True)), ("baseline", ("float32", False)), ("float32", ("float32", True))],
)
def test_the_baseline_and_float32_variants_set_the_modules_dtype_and_prefill(variant, expected):
    args = bench.parse_args(
        ["--config", '{"model_config": {"torch_dtype": "bfloat16"}}', "--variants", variant]
    )
    model_config = bench.build_config(args, variant).user_model_config()
    assert (model_config["torch_dtype"], model_config.get("share_prompt_prefill", True)) == expected
    assert model_config["constrain_to_admissible"]  # merged key by key: the experiment's settings stay


def test_the_vllm_variant_samples_with_vllm_in_the_experiments_dtype():
    args = bench.parse_args(
        ["--config", '{"model_config": {"torch_dtype": "bfloat16"}}', "--variants", "vllm"]
    )
    model_config = bench.build_config(args, "vllm").user_model_config()
    assert (model_config["inference_backend"], model_config["torch_dtype"]) == ("vllm", "bfloat16")
    default = bench.build_config(args, "default").user_model_config()
    assert default.get("inference_backend", "auto") == "auto"


@pytest.mark.parametrize(("variant", "skips"), [("default", True), ("baseline", False), ("noskip", False)])
def test_the_baseline_and_noskip_variants_compute_the_rows_of_zero_advantage(variant, skips):
    config = bench.build_config(bench.parse_args(["--variants", variant]), variant)
    assert config.skip_zero_advantage_rows is skips


def test_the_result_file_is_named_by_experiment_model_and_variants():
    assert bench.result_name(bench.parse_args([])) == "iteration_profile_hgpo_keychest"
    argv = ["--experiment", str(TUNED / "hgpo_webshop.py"), "--model", "smollm2-135m-instruct"]
    args = bench.parse_args([*argv, "--variants", "recompute", "auto"])
    assert bench.result_name(args) == "iteration_profile_hgpo_webshop_smollm2-135m-instruct_recompute_auto"


def test_the_table_gives_each_variants_seconds_share_and_ratio_to_the_first():
    def run(update: float, old_logp: float, from_sampler: float) -> dict[str, float]:
        keys = [key for _, key in bench.PHASES] + ["step rows", *bench.LEARNER, *bench.ALL_MODULES]
        means = dict.fromkeys(keys, 1.0)
        means |= {"iteration": 10.0, "learner update": update, "old log-probs": old_logp}
        means |= {"learner_peak_fraction": 0.25}
        return means | {"old_logp_from_sampler": from_sampler}

    table = bench.print_table({"recompute": run(6.0, 2.0, math.nan), "auto": run(4.5, 0.0, 1.0)})
    lines = table.splitlines()
    assert lines[0] == "| phase | recompute: s (share, x recompute) | auto: s (share, x recompute) |"
    assert "| learner update, total | 6.0000 (60.00%) | 4.5000 (45.00%, 0.750x) |" in lines
    assert "|   old log-probs (no grad) | 2.0000 (20.00%) | 0.0000 (0.00%, 0.000x) |" in lines
    assert "| old_logp_from_sampler | nan | 1 |" in lines
    assert "| learner_peak_fraction | 0.25 | 0.25 |" in lines


def test_a_learner_metric_is_averaged_over_the_iterations_that_report_it():
    # An update whose rows all carry advantage 0 runs no pass, so it reports no FLOP rate.
    means = bench.reported_means(
        {"learner_peak_fraction": [0.5, math.nan, 0.25], "logp_gap_vs_sampler": [math.nan]}
    )
    assert means == {
        "learner_peak_fraction": 0.375,
        "learner_peak_fraction iterations": 2,
        "logp_gap_vs_sampler": pytest.approx(math.nan, nan_ok=True),
        "logp_gap_vs_sampler iterations": 0,
    }
    run = means | {"iterations": 3}
    assert bench.metric_cell(run, "learner_peak_fraction") == "0.375 (2 of 3 iterations)"
    assert (
        bench.metric_cell(run | {"learner_peak_fraction iterations": 3}, "learner_peak_fraction") == "0.375"
    )

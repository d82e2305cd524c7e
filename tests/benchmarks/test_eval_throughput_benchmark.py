"""Checks of ``benchmarks/eval_throughput.py``: the ratios and lever shares it reports, its table (with
the bfloat16 lever and vLLM in bfloat16), the answers it compares across paths (exactly in the policy's
own dtype, counted in another), and one tiny run of every HF path, bfloat16 included, on WebShop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import benchmark_module

bench = benchmark_module("eval_throughput")


def test_ratios_are_over_the_baseline() -> None:
    assert bench.ratios({"one": 80.0, "batched": 320.0, "prefilled": 200.0}, "one") == {
        "one": 1.0,
        "batched": 4.0,
        "prefilled": 2.5,
    }


def test_each_lever_takes_its_log_share_of_the_chained_speed_up() -> None:
    shares = bench.lever_shares({"continuous batching": 4.0, "prefill once": 2.0})  # 8x in all
    exact = {"continuous batching": 2 / 3, "prefill once": 1 / 3}
    assert shares == {lever: pytest.approx(share, rel=1e-12) for lever, share in exact.items()}
    assert bench.lever_shares({"continuous batching": 3.0, "prefill once": 1.0}) == {
        "continuous batching": 1.0,
        "prefill once": 0.0,
    }
    assert bench.lever_shares({"continuous batching": 2.0, "prefill once": 0.5}) == {  # no speed-up
        "continuous batching": None,
        "prefill once": None,
    }


def _result(seconds: float, tokens: int, answers: dict[int, list[str]], won: int = 3) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "episodes": 8,
        "steps": 40,
        "won": won,
        "tokens": tokens,
        "answers": answers,
        "warm_up_s": 2.0,
        "load": "0.5/0.4/0.3 / 1.0/0.6/0.4",
    }


SAME = {1: ["search[a]", "click[b]"], 2: ["search[c]"]}
#: 8 goals in 360 s (80 an hour), 90 s (4x), 45 s (2x more) and vLLM in 60 s (0.75x the default).
CANNED = {
    "one episode at a time (baseline)": _result(360.0, 3600, SAME),
    "continuous batching, 8 in flight": _result(90.0, 3600, SAME),
    "+ prefill once (rllib evaluate's default)": _result(45.0, 3600, SAME),
    "vLLM's CPU build, 8 in flight": _result(60.0, 3000, {**SAME, 2: ["search[d]"]}),
}


#: The same, then the default path in bfloat16 in 18 s (2.5x more: 20x in all) and vLLM in bfloat16 in
#: 24 s (0.75x HF's bfloat16 path); in bfloat16 one episode's answers differ, and one more goal is won.
IN_BF16 = {
    **{name: result for name, result in CANNED.items() if not name.startswith("vLLM")},
    "+ bfloat16 (rllib evaluate --dtype bfloat16)": _result(18.0, 3600, {**SAME, 2: ["search[e]"]}, won=4),
    "vLLM's CPU build in bfloat16, 8 in flight": _result(24.0, 3000, SAME),
}


def test_the_table_gives_each_path_its_rate_ratio_and_lever_share() -> None:
    rows = bench.table(bench.paths(8, vllm=True), CANNED).splitlines()[2:]
    assert rows == [
        "| one episode at a time (baseline) | 8 | 40 | 360.0 | 80.0 | 10.0 | 1.00x | - | - | - | 2.0 "
        "| 0.5/0.4/0.3 / 1.0/0.6/0.4 |",
        "| continuous batching, 8 in flight | 8 | 40 | 90.0 | 320.0 | 40.0 | 4.00x | continuous batching "
        "| 4.00x | 67% | 2.0 | 0.5/0.4/0.3 / 1.0/0.6/0.4 |",
        "| + prefill once (rllib evaluate's default) | 8 | 40 | 45.0 | 640.0 | 80.0 | 8.00x | prefill once "
        "| 2.00x | 33% | 2.0 | 0.5/0.4/0.3 / 1.0/0.6/0.4 |",
        "| vLLM's CPU build, 8 in flight | 8 | 40 | 60.0 | 480.0 | 50.0 | 6.00x | vLLM instead of HF "
        "| 0.75x | - | 2.0 | 0.5/0.4/0.3 / 1.0/0.6/0.4 |",
    ]
    assert bench.differing_episodes(CANNED, "one episode at a time (baseline)") == {
        "one episode at a time (baseline)": 0,
        "continuous batching, 8 in flight": 0,
        "+ prefill once (rllib evaluate's default)": 0,
        "vLLM's CPU build, 8 in flight": 1,
    }


def test_the_bfloat16_lever_is_the_third_of_the_chain_and_vllm_plays_in_it() -> None:
    chosen = bench.paths(8, vllm=True, dtype="bfloat16")
    assert [(path.lever, path.dtype, path.backend) for path in chosen] == [
        (None, None, "hf"),
        ("continuous batching", None, "hf"),
        ("prefill once", None, "hf"),
        ("bfloat16", "bfloat16", "hf"),
        (None, "bfloat16", "vllm"),
    ]
    rows = bench.table(chosen, IN_BF16).splitlines()[2:]
    assert [row.split(" | ")[6:10] for row in rows] == [  # vs baseline, lever, step, share
        ["1.00x", "-", "-", "-"],
        ["4.00x", "continuous batching", "4.00x", "46%"],  # log 4 / log 20
        ["8.00x", "prefill once", "2.00x", "23%"],
        ["20.00x", "bfloat16", "2.50x", "31%"],
        ["15.00x", "vLLM instead of HF", "0.75x", "-"],  # beside HF in bfloat16
    ]
    assert rows[3] == (
        "| + bfloat16 (rllib evaluate --dtype bfloat16) | 8 | 40 | 18.0 | 1,600.0 | 200.0 | 20.00x "
        "| bfloat16 | 2.50x | 31% | 2.0 | 0.5/0.4/0.3 / 1.0/0.6/0.4 |"
    )
    differ = bench.differing_episodes(IN_BF16, "one episode at a time (baseline)")
    assert bench.answers_report(chosen, IN_BF16, differ) == (
        "Same answers on every path in the policy's own dtype: yes, every episode's answers equal the "
        "baseline's (40 steps, 3 goals won).\n\n"
        "In bfloat16 (other rounding, other answers allowed): + bfloat16 (rllib evaluate --dtype bfloat16): "
        "1 of 8 episodes' answers differ from the baseline's; 4 goals won (baseline 3).\n\n"
        "In bfloat16 (other rounding, other answers allowed): vLLM's CPU build in bfloat16, 8 in flight: "
        "0 of 8 episodes' answers differ from the baseline's; 3 goals won (baseline 3).\n"
    )


def test_a_path_whose_answers_differ_fails_the_run_after_writing_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "play_path", lambda policy, env, config, tasks, path, own: CANNED[path.name])
    argv = ["--model", "tiny-qwen2", "--goals", "8", "--vllm", "--output", str(tmp_path)]
    with pytest.raises(SystemExit, match="the levers changed the answers"):
        bench.main(argv)
    text = (tmp_path / "eval_throughput_webshop.md").read_text()
    assert text.rstrip().endswith(
        "Same answers on every path in the policy's own dtype: **no**; episodes whose answers differ from "
        "the baseline's: vLLM's CPU build, 8 in flight 1."
    )


def test_a_path_in_bfloat16_may_differ_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "play_path", lambda policy, env, config, tasks, path, own: IN_BF16[path.name])
    argv = [
        "--model",
        "tiny-qwen2",
        "--goals",
        "8",
        "--vllm",
        "--dtype",
        "bfloat16",
        "--output",
        str(tmp_path),
    ]
    assert bench.main(argv)["differing"]["+ bfloat16 (rllib evaluate --dtype bfloat16)"] == 1
    text = (tmp_path / "eval_throughput_webshop_bfloat16.md").read_text()
    assert "tiny-qwen2 (zero-shot) in float32 on webshop `test`" in text
    assert "1 of 8 episodes' answers differ from the baseline's; 4 goals won (baseline 3)." in text
    with pytest.raises(SystemExit):  # the policy's own dtype is no other path
        bench.main([*argv, "--dtype", "float32"])


def test_every_hf_path_plays_the_same_episodes_on_the_tiny_preset(tmp_path: Path) -> None:
    """The float32 levers give the baseline's answers; the bfloat16 path plays the same goals with the
    weights in bfloat16 (on a CPU without native bfloat16 too, emulated: the tiny model is cheap)."""
    argv = ["--model", "tiny-qwen2", "--goals", "3", "--batch-size", "2", "--max-steps", "2"]
    result = bench.main([*argv, "--dtype", "bfloat16", "--output", str(tmp_path)])
    chosen = bench.paths(2, vllm=False, dtype="bfloat16")
    assert list(result["results"]) == [path.name for path in chosen]
    assert [result["differing"][path.name] for path in chosen[:3]] == [0, 0, 0]
    assert result["differing"][chosen[3].name] in range(4)
    for played in result["results"].values():
        assert played["episodes"] == 3 and played["steps"] == 3 * 2  # a random model never buys
        assert sorted(played["answers"]) == bench.task_seeds(123, 3) and played["tokens"] >= 6
    text = (tmp_path / "eval_throughput_webshop_bfloat16.md").read_text()
    assert "Same answers on every path in the policy's own dtype: yes" in text and "CPU: " in text
    assert (
        "`uptime` at the start: " in text and "In bfloat16 (other rounding, other answers allowed): " in text
    )
    assert "| continuous batching, 2 in flight | 3 | 6 |" in text
    assert "| + bfloat16 (rllib evaluate --dtype bfloat16) | 3 | 6 |" in text

"""Checks of ``benchmarks/prefill_once.py`` on the tiny preset: its batch repeats each group's prompt
with left padding, and both paths it times give the same tokens and log-probs."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers import benchmark_module

bench = benchmark_module("prefill_once")


def test_group_batch_repeats_one_prompt_per_group_left_padded() -> None:
    ids, mask = bench.group_batch(groups=2, group_size=3, prompt_tokens=20, vocab=400)
    assert mask.sum(1).tolist() == [20, 20, 20, 13, 13, 13]
    assert torch.equal(ids[0], ids[2]) and torch.equal(ids[3], ids[5]) and not torch.equal(ids[0], ids[3])
    assert (ids[3:, :7] == 0).all() and (mask[3:, :7] == 0).all()


def test_both_paths_agree_and_the_table_is_written(tmp_path: Path) -> None:
    argv = ["--tiny", "--group-size", "3", "--prompt-tokens", "24", "--new-tokens", "3", "--repeats", "2"]
    result = bench.main([*argv, "--output", str(tmp_path)])
    assert result["token_mismatches"] == 0 and result["logp_gap"] <= 1e-5
    assert list(result["medians"]) == ["every row prefilled", "prefilled once per prompt"]
    assert all(len(medians) == 4 for medians in result["medians"].values())  # seconds x 2, faults x 2
    text = (tmp_path / "prefill_once.md").read_text()
    assert "| prefilled once per prompt |" in text and "CPU: " in text and "`uptime` before: " in text
    assert "| page faults (prefill) | page faults (decode) |" in text and "GLIBC_TUNABLES=" in text
    # Each group's 24-token prompt once, against its 3 rows' 72 (the second group's 17 tokens).
    assert result["computed_prompt_tokens"] == {"every row prefilled": 123, "prefilled once per prompt": 41}


def test_the_vllm_row_gives_whole_calls_against_the_plain_path() -> None:
    """vLLM reports no prefill of its own: its row has the call's seconds, the tokens it made per
    second and its speed-up over every row prefilled."""
    result = {
        "medians": {
            "every row prefilled": (3.0, 8.0, 1500, 0),
            "prefilled once per prompt": (1.0, 4.0, 20, 7),
        },
        "vllm": {"start_s": 90.0, "call_s": 2.0, "generated": 30},
    }
    computed = {"every row prefilled": 400, "prefilled once per prompt": 200}
    rows = bench.table(
        result, rows=4, prompt_tokens=400, computed_tokens=computed, new_tokens=8
    ).splitlines()[2:]
    assert rows == [
        "| every row prefilled | 3.00 | 400 | 7.500 | 133 | 5.00 | 6 | 8.00 | 4 | 1.00x | 1,500 | 0 |",
        "| prefilled once per prompt | 1.00 | 200 | 5.000 | 400 | 3.00 | 9 | 4.00 | 8 | 2.00x | 20 | 7 |",
        "| vLLM (CPU build), prefix caching | - | - | - | - | - | - | 2.00 | 15 | 4.00x | - | - |",
    ]


def test_dtype_loads_the_model_in_it_and_the_table_names_it(tmp_path: Path) -> None:
    """``--dtype bfloat16``: the model (and vLLM's row, were it asked) compute in bf16, as a CPU with
    native bf16 runs them; the table says so."""
    lm, model_dir, name = bench.load_model(tiny=True, dtype="bfloat16")
    assert {p.dtype for p in lm.parameters()} == {torch.bfloat16} and name.endswith("bfloat16)")
    assert model_dir is None  # the tiny preset lives in memory
    argv = ["--tiny", "--group-size", "2", "--prompt-tokens", "16", "--new-tokens", "2", "--repeats", "1"]
    bench.main([*argv, "--dtype", "bfloat16", "--output", str(tmp_path), "--name", "bf16"])
    assert (tmp_path / "bf16.md").read_text().count("tiny-qwen2 (random init, bfloat16);") == 1

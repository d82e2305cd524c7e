"""The learner's FLOP meter and its matmul probe (issue 63, item 2; algorithms/torch/flop_meter.py and
matmul_rate.py): the probe times the learner's compute dtype alone, over fewer tokens where that dtype
is emulated; a set ``learner_matmul_gflops`` runs no probe; and a learner's metrics equal the formula
(tests/core/test_learner_flops.py) for the rows it trained on. Nothing here is timed: the clocks are
fakes and the probe is replaced where a learner starts."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import keychest_config

from hgpo_rllib.algorithms.torch import flop_meter, matmul_rate
from hgpo_rllib.algorithms.torch.flop_meter import FlopMeter
from hgpo_rllib.columns import PROMPT_MASK, RESP_MASK
from hgpo_rllib.learner_flops import row_pass_tokens, update_flops
from hgpo_rllib.model_shape import ModelShape

#: SmolLM2-135M's and Qwen2.5-1.5B's shapes (the probe's product: [tokens, hidden] x [hidden, intermediate]).
SMOLLM2 = ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152)
QWEN_1_5B = ModelShape(
    layers=28, hidden=1536, intermediate=8960, heads=12, kv_heads=2, head_dim=128, vocab=151936
)


@pytest.fixture
def native_bf16(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Set whether the CPU has native bfloat16 (``native_bf16(True)``), as matmul_rate reads it."""
    return lambda native: monkeypatch.setattr(matmul_rate, "cpu_has_native_bf16", lambda: native)


def test_which_dtypes_are_emulated(native_bf16) -> None:  # noqa: ANN001
    native_bf16(False)
    assert matmul_rate.emulated(torch.bfloat16) and matmul_rate.emulated(torch.float16, "cpu")
    assert not matmul_rate.emulated(torch.float32)
    assert not matmul_rate.emulated(torch.bfloat16, "cuda:0")
    native_bf16(True)
    assert not matmul_rate.emulated(torch.bfloat16)


def test_a_dtype_the_cpu_emulates_is_said_in_one_line(native_bf16, capsys) -> None:  # noqa: ANN001
    """The learner says so where a policy trains in bfloat16 that the CPU emulates (once per dtype,
    float32 policies beside it say nothing); nothing on a CPU with native bf16 or on a GPU."""
    from helpers import build

    from hgpo_rllib.algorithms.torch.text_agent_torch_learner import say_if_emulated

    native_bf16(False)
    line = (
        "note: this CPU has no native bfloat16 (AVX512_BF16 or AMX): the learner trains in bfloat16 "
        "emulated, slower than in float32"
    )
    assert matmul_rate.emulation_note(torch.bfloat16, "cpu", "the learner trains") == line
    assert matmul_rate.emulation_note(torch.float32, "cpu", "the learner trains") is None
    assert matmul_rate.emulation_note(torch.bfloat16, "cuda:0", "the learner trains") is None
    bf16 = build(torch_dtype="bfloat16")
    policies = {"a": bf16, "b": build(), "c": bf16}
    capsys.readouterr()
    say_if_emulated(policies, torch.device("cpu"))
    assert capsys.readouterr().err == f"{line} (model_config['torch_dtype']='float32' is faster here)\n"
    say_if_emulated(policies, torch.device("cuda"))
    native_bf16(True)
    say_if_emulated(policies, torch.device("cpu"))
    assert capsys.readouterr().err == ""


def test_the_probes_tokens(native_bf16) -> None:  # noqa: ANN001
    native_bf16(False)
    # float32: 2048 tokens make 3.6 GFLOP at SmolLM2's MLP, within 4; Qwen2.5-1.5B's: 4e9 / (2 x 1536 x 8960).
    assert matmul_rate.probe_tokens(SMOLLM2, torch.float32, "cpu") == 2048
    assert matmul_rate.probe_tokens(QWEN_1_5B, torch.float32, "cpu") == 145
    # Emulated bfloat16: 0.25 GFLOP, 0.25e9 / (2 x 576 x 1536) = 141.3; at least 16.
    assert matmul_rate.probe_tokens(SMOLLM2, torch.bfloat16, "cpu") == 141
    assert matmul_rate.probe_tokens(QWEN_1_5B, torch.bfloat16, "cpu") == 16
    # Native bfloat16 keeps float32's budget; a GPU always takes the full micro-batch.
    native_bf16(True)
    assert matmul_rate.probe_tokens(SMOLLM2, torch.bfloat16, "cpu") == 2048
    assert matmul_rate.probe_tokens(QWEN_1_5B, torch.bfloat16, "cuda:0") == 2048


def test_the_probe_times_one_product_in_the_dtype_it_is_given_once(monkeypatch, native_bf16) -> None:  # noqa: ANN001
    native_bf16(False)
    calls = []
    monkeypatch.setattr(
        matmul_rate, "matmul_gflops", lambda *args, **kwargs: calls.append((args, kwargs)) or 7.0
    )
    matmul_rate._probe.cache_clear()
    try:
        assert matmul_rate.probe_gflops(SMOLLM2, torch.bfloat16, "cpu") == 7.0
        assert matmul_rate.probe_gflops(SMOLLM2, torch.bfloat16, "cpu") == 7.0  # cached
        assert calls == [((141, 576, 1536, torch.bfloat16, "cpu"), {"repeats": 3})]
    finally:
        matmul_rate._probe.cache_clear()


def test_the_rate_of_a_product_by_a_fake_clock(monkeypatch) -> None:  # noqa: ANN001
    """Every clock reading 1/64 s later: the warm-up's 1/64 s makes 2 calls per repeat (>= 0.02 s), so
    a product takes 1/128 s, and [16, 8] x [8, 32] (8,192 FLOPs) runs at 8192 x 128 / 1e9 GFLOP/s."""
    ticks = itertools.count()
    monkeypatch.setattr(matmul_rate, "time", SimpleNamespace(perf_counter=lambda: next(ticks) / 64))
    assert matmul_rate.matmul_gflops(16, 8, 32, torch.float32, repeats=3) == 8192 * 128 / 1e9
    assert next(ticks) == 2 + 3 * 2  # the warm-up's two readings and each repeat's two


def test_a_set_rate_runs_no_probe(monkeypatch) -> None:  # noqa: ANN001
    def no_probe(*args: object) -> float:
        raise AssertionError("probed although learner_matmul_gflops was set")

    monkeypatch.setattr(flop_meter, "probe_gflops", no_probe)
    cpu = torch.device("cpu")
    assert FlopMeter({}, cpu, 12.5).matmul_gflops == 12.5
    assert FlopMeter({}, cpu, 0).matmul_gflops is None


def test_the_probe_takes_the_largest_policys_compute_dtype(monkeypatch) -> None:  # noqa: ANN001
    policies = {
        "small": SimpleNamespace(model_shape=SMOLLM2, compute_dtype=torch.float32),
        "large": SimpleNamespace(model_shape=QWEN_1_5B, compute_dtype=torch.bfloat16),
    }
    probed = []
    monkeypatch.setattr(FlopMeter, "_policies", lambda self: policies)
    monkeypatch.setattr(flop_meter, "probe_gflops", lambda *args: probed.append(args) or 3.0)
    assert FlopMeter({}, torch.device("cpu"), None).matmul_gflops == 3.0
    assert probed == [(QWEN_1_5B, torch.bfloat16, "cpu")]


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize(
    ("training", "kinds", "probe"),
    [
        ({}, ("trained", "forward", "reference"), 40.0),  # several minibatches, a KL reference; probed
        ({"minibatch_size": 4096, "kl_coeff": 0.0, "learner_matmul_gflops": 50.0}, ("trained",), None),
    ],
)
def test_the_learner_reports_its_flops_and_fraction(monkeypatch, training, kinds, probe) -> None:  # noqa: ANN001
    """The learner's FLOPs equal the formula's for the rows it trained on, with the passes that ran
    (plain rows: each row's counts add up, whatever the micro-batches). Its clock reads 2 s per
    update and its probe (float32: the tiny model's dtype) gives ``probe``, so the rates are exact."""
    from hgpo_rllib.connectors.learner.prompt_sharing import PromptSharing

    seen, probed = [], []
    call = PromptSharing.__call__

    def recording(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        batch = call(self, **kwargs)
        seen.append({k: np.array(batch["default_policy"][k]) for k in (PROMPT_MASK, RESP_MASK)})
        return batch

    monkeypatch.setattr(PromptSharing, "__call__", recording)
    monkeypatch.setattr(flop_meter, "probe_gflops", lambda *args: probed.append(args) or probe)
    ticks = itertools.count()
    monkeypatch.setattr(flop_meter, "time", SimpleNamespace(perf_counter=lambda: 2.0 * next(ticks)))
    algo = keychest_config(remote_runners=0, **training).build_algo()
    try:
        result = algo.train()["learners"]
        shape = algo.learner_group._learner.module["default_policy"].unwrapped().model_shape
    finally:
        algo.stop()
    assert probed == ([(shape, torch.float32, "cpu")] if probe else [])
    (rows,) = seen
    counts = row_pass_tokens(rows[PROMPT_MASK], rows[RESP_MASK])
    flops = update_flops(shape, dict.fromkeys(kinds, counts))
    assert result["default_policy"]["learner_flops"] == flops
    everything, rate = result["__all_modules__"], flops / 2.0 / 1e9
    assert everything["learner_gflops_per_s"] == rate
    machine = probe or training["learner_matmul_gflops"]
    assert everything["matmul_gflops_per_s"] == machine
    assert everything["learner_peak_fraction"] == rate / machine

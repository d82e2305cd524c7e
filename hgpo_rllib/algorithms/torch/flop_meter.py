"""The learner's FLOPs per update, its achieved rate and the fraction of the machine's (issue 63).

The policies count what each of their log-prob passes computed (``LLMRLModule.take_pass_tokens``);
:class:`FlopMeter` times the update on this learner and turns the counts into FLOPs with the formula of
:mod:`hgpo_rllib.learner_flops` (docs/throughput.md, "The machine's limit"), and into the padding of the
passes' inputs (``learner_padding_frac``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.utils.typing import ModuleID

from hgpo_rllib.algorithms.torch.matmul_rate import probe_gflops
from hgpo_rllib.columns import (
    LEARNER_FLOPS,
    LEARNER_GFLOPS_PER_S,
    LEARNER_PADDING_FRAC,
    LEARNER_PEAK_FRACTION,
    MATMUL_GFLOPS_PER_S,
)
from hgpo_rllib.learner_flops import PassTokens, update_flops
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule


class FlopMeter:
    """Per update (:meth:`start`, then :meth:`log`): each policy's ``learner_flops`` and
    ``learner_padding_frac`` (over all its passes), and all policies' ``learner_gflops_per_s`` over
    this learner's update time with ``learner_peak_fraction`` of ``matmul_gflops_per_s``. HiPER's
    critic is not counted (its passes are not the policy's)."""

    def __init__(self, module: MultiRLModule, device: torch.device, matmul_gflops: float | None):
        self.module = module
        self.device = device
        self.matmul_gflops = self._machine_rate(matmul_gflops)
        self._start = 0.0

    def _policies(self) -> dict[ModuleID, LLMRLModule]:
        modules = {mid: module.unwrapped() for mid, module in self.module.items()}
        return {mid: module for mid, module in modules.items() if isinstance(module, LLMRLModule)}

    def _machine_rate(self, setting: float | None) -> float | None:
        """The setting (``learner_matmul_gflops``; 0: none; no probe runs), else measured here at the
        largest policy's main matmul in its compute dtype and no other (:func:`probe_gflops`; bfloat16
        only where it trains in bfloat16): the learner's own device, threads and dtype, which a figure
        taken on the driver's machine would not be."""
        if setting is not None:
            return float(setting) or None
        policies = self._policies().values()
        if not policies:
            return None
        largest = max(policies, key=lambda module: module.model_shape.linear_weights)
        return probe_gflops(largest.model_shape, largest.compute_dtype, str(self.device))

    def start(self) -> None:
        """An update begins (before its connector pipeline, whose passes count)."""
        for module in self._policies().values():
            module.take_pass_tokens()
        self._start = time.perf_counter()

    def log(self, metrics: Any) -> None:
        """The update ended: log its FLOPs and rates into the learner's ``metrics``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - self._start
        total = 0
        for module_id, module in self._policies().items():
            passes = module.take_pass_tokens()
            if passes:
                flops = update_flops(module.model_shape, passes, module.lora_weights)
                metrics.log_value((module_id, LEARNER_FLOPS), flops, window=1)
                total += flops
                counts = sum(passes.values(), PassTokens())
                if counts.positions:
                    padding = 1.0 - counts.tokens / counts.positions
                    metrics.log_value((module_id, LEARNER_PADDING_FRAC), padding, window=1)
        if not total or seconds <= 0:
            return
        rate = total / seconds / 1e9
        metrics.log_value((ALL_MODULES, LEARNER_GFLOPS_PER_S), rate, window=1)
        if self.matmul_gflops:
            metrics.log_value((ALL_MODULES, MATMUL_GFLOPS_PER_S), self.matmul_gflops, window=1)
            metrics.log_value((ALL_MODULES, LEARNER_PEAK_FRACTION), rate / self.matmul_gflops, window=1)

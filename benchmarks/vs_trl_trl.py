"""TRL's side of ``benchmarks/vs_trl.py``: ``GRPOTrainer`` (trl 1.16.0) on the same rows, in TRL's own
virtual environment (``benchmarks/requirements-trl.txt``), for one block of a
:class:`~vs_trl_task.Spec`.

Each group's prompt is a dataset item, which TRL's sampler repeats ``num_generations`` times in
order; a group's rows take their own prompt and goal from the item (``row_prompts``, ``row_goals``:
all the same, except in the distinct-prompt control). Generation is timed around
``_generate_and_score_completions`` (sampling, rewards, advantages), the update is the rest of the
optimizer step (``on_step_begin`` to ``on_step_end``); the positions the model computes are counted
by a hook on its decoder, in generation and in the learner apart.

Run by ``vs_trl.py``: ``TRL_PYTHON benchmarks/vs_trl_trl.py SPEC.json OUT.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from vs_trl_task import (  # benchmarks/ is on sys.path when run as a script
    CLIP,
    ENTROPY_COEFF,
    GRAD_CLIP,
    KL_COEFF,
    TEMPERATURE,
    WEIGHT_DECAY,
    Spec,
    answer_reward,
)


def search_reward(completions: list[str], goal: list[str], **kwargs: Any) -> list[float]:
    """The task's reward (``vs_trl_task.answer_reward``) of each completion against its row's goal."""
    return [answer_reward(text, g) for text, g in zip(completions, goal, strict=True)]


class TimedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that gives each row its own prompt, times generation and counts the positions
    its model computes and the real tokens it learns on."""

    def __init__(self, *args: Any, group_size: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group_size = group_size
        self.counts: Counter = Counter()
        self.phase = "learner"
        backbone = getattr(self.model, self.model.base_model_prefix)
        backbone.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        shape = ids.shape if ids is not None else kwargs["inputs_embeds"].shape[:2]
        self.counts[f"{self.phase}_positions"] += shape.numel()

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        g = self.group_size
        rows = [
            {**x, "prompt": x["row_prompts"][i % g], "goal": x["row_goals"][i % g]}
            for i, x in enumerate(inputs)
        ]
        self.phase, start = "generation", time.perf_counter()
        try:
            return super()._generate_and_score_completions(rows)
        finally:
            self.counts["generation_s"] += time.perf_counter() - start
            self.phase = "learner"

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        self.counts["real_tokens"] += int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        return super()._compute_loss(model, inputs)


class StepTimer(TrainerCallback):
    """One record per optimizer step, in the shape of ``vs_trl_ours.run_block``'s."""

    def __init__(self, trainer_counts: Counter):
        self.counts = trainer_counts
        self.updates: list[dict[str, float]] = []
        self.start = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.counts.clear()
        self.start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        total = time.perf_counter() - self.start
        self.updates.append(
            {
                "generation_s": self.counts["generation_s"],
                "update_s": total - self.counts["generation_s"],
                "total_s": total,
                "generation_positions": self.counts["generation_positions"],
                "learner_positions": self.counts["learner_positions"],
                "real_tokens": self.counts["real_tokens"],
            }
        )


def dataset(spec: Spec) -> Dataset:
    """One item per group, in the spec's order."""
    g = spec.group_size
    items = []
    for batch in spec.batches:
        for start in range(0, len(batch), g):
            rows = batch[start : start + g]
            items.append(
                {
                    "prompt": rows[0]["prompt"],
                    "goal": rows[0]["task"],
                    "row_prompts": [row["prompt"] for row in rows],
                    "row_goals": [row["task"] for row in rows],
                }
            )
    return Dataset.from_list(items)


def grpo_config(spec: Spec, output_dir: str) -> GRPOConfig:
    """The settings of ``vs_trl_task.settings_rows``' TRL column."""
    b, m, c = spec.batch_size, spec.micro_batch_size, spec.new_tokens
    return GRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=m,
        gradient_accumulation_steps=b // m,
        steps_per_generation=b // m,
        num_generations=spec.group_size,
        max_completion_length=c,
        generation_kwargs={"min_new_tokens": c},
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        learning_rate=spec.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=WEIGHT_DECAY,
        max_grad_norm=GRAD_CLIP,
        optim="adamw_torch",
        beta=KL_COEFF,
        loss_type="dapo",
        epsilon=CLIP,
        num_iterations=1,
        entropy_coef=ENTROPY_COEFF,
        scale_rewards="group",
        max_steps=len(spec.batches),
        shuffle_dataset=False,
        seed=spec.seed,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def main() -> None:
    spec = Spec.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(spec.threads)
    tokenizer = AutoTokenizer.from_pretrained(spec.model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        spec.model_dir, local_files_only=True, dtype=torch.float32, use_safetensors=True
    )
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = TimedGRPOTrainer(
            model=model,
            reward_funcs=[search_reward],
            args=grpo_config(spec, output_dir),
            train_dataset=dataset(spec),
            processing_class=tokenizer,
            group_size=spec.group_size,
        )
        timer = StepTimer(trainer.counts)
        trainer.add_callback(timer)
        trainer.train()
    Path(sys.argv[2]).write_text(json.dumps(timer.updates))


if __name__ == "__main__":
    main()

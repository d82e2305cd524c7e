"""Supervised fine-tuning of the warm start (``rllib sft``): a small Qwen2-shaped model trained from
scratch on the demonstrations, or a pretrained base (``base``: :mod:`~hgpo_rllib.warm_start.pretrained`),
with transformers' ``Trainer``.

From scratch, the tokenizer is trained locally on the env's text and the demonstrations; the loss is on
the response tokens (and, with ``train_on_prompt``, on the prompt too, which is what taught the small
model to read its prompt). The output is a Hugging Face model directory for ``model_config["model"]`` plus its
settings record (:mod:`hgpo_rllib.warm_start.format`). ``Trainer`` checkpoints under ``checkpoints/``
make an interrupted run resume. What a warm start is made of is :mod:`~hgpo_rllib.warm_start.sft_settings`;
the examples it learns, :mod:`~hgpo_rllib.warm_start.sft_dataset`.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import DataCollatorForSeq2Seq, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

import envs
from hgpo_rllib.evaluation.policy_folder import policy_record
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD
from hgpo_rllib.rl_module.model_sources import local_model_dir, model_sha256
from hgpo_rllib.rl_module.prompts import prompt_token_limit
from hgpo_rllib.rl_module.tokenizer import build_tiny_model
from hgpo_rllib.run_records import (
    changed_settings,
    exclusive_directory,
    holds_other_files,
    read_record,
    write_record,
)
from hgpo_rllib.warm_start.demonstrations import collect_demonstrations
from hgpo_rllib.warm_start.format import CHECKPOINTS, DEMONSTRATIONS, SFT_CONFIG
from hgpo_rllib.warm_start.pretrained import base_model, base_tokenizer, write_adapter_record
from hgpo_rllib.warm_start.sft_dataset import (
    IGNORE_INDEX,
    Examples,
    check_answers_fit,
    demonstration_examples,
    describe_examples,
    sft_prompt_limit,
    tokenize_examples,
    won_steps,
)
from hgpo_rllib.warm_start.sft_settings import RECORDED_WHEN_SET, SFTSettings

if TYPE_CHECKING:
    from hgpo_rllib.warm_start.phases import BuildClock

#: A Trainer checkpoint is saved at least this often (and every ``save_steps`` optimiser steps).
SAVE_EVERY_MINUTES = 10.0


def open_run(output: Path, settings: dict[str, Any], reuse_finished: bool = False) -> dict[str, Any]:
    """Start the run's settings record in ``output``, or check it against the record of the run being
    resumed (or, with ``reuse_finished``, of a finished run to build on); returns the record."""
    path = output / SFT_CONFIG
    if not path.exists() and holds_other_files(output):
        raise FileExistsError(
            f"{output} already holds other files and no `rllib sft` run; choose a new or empty --output"
        )
    if path.exists():
        saved = read_record(path)
        if saved.get("finished") and not reuse_finished:
            raise FileExistsError(f"{output} already holds a finished warm start; choose a new --output")
        # A setting recorded only when set counts too when the saved run has it and this one does not.
        keys = [*settings, *(k for k in RECORDED_WHEN_SET if k in saved and k not in settings)]
        changed = changed_settings(saved, settings, keys=keys)
        if changed:
            state = "a finished" if saved.get("finished") else "an unfinished"
            raise ValueError(
                f"{output} holds {state} run with other settings ({'; '.join(changed)}); "
                "rerun with the same settings to resume it, or choose a new --output"
            )
        return saved
    output.mkdir(parents=True, exist_ok=True)
    write_record(path, {**settings, "finished": False})
    return settings


def _time_limit_callback(minutes: float) -> Any:
    class TimeLimit(TrainerCallback):
        """Stops (and saves) once ``minutes`` of training have passed in this process."""

        def __init__(self) -> None:
            self.start = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if time.monotonic() - self.start > minutes * 60:
                control.should_training_stop = True
                control.should_save = True
            return control

    return TimeLimit()


class _SaveEvery(TrainerCallback):
    """Saves a Trainer checkpoint once ``minutes`` have passed since the last one, whatever
    ``save_steps`` says: long-prompt runs take many seconds a step, and a stop should cost at most
    minutes of training."""

    def __init__(self, minutes: float) -> None:
        self.seconds = minutes * 60
        self.last = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if time.monotonic() - self.last >= self.seconds:
            control.should_save = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.last = time.monotonic()
        return control


class _SaveOnCtrlC(TrainerCallback):
    """The first Ctrl-C (SIGINT) lets the current optimiser step finish, saves a Trainer checkpoint
    and stops, so a rerun resumes at that step instead of the last ``save_steps`` checkpoint; a
    second Ctrl-C stops at once. Installed only in the main thread (where Python runs handlers)."""

    def __init__(self) -> None:
        self.interrupted = False

    def handle(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        print("\nCtrl-C: saving after this optimiser step (Ctrl-C again to stop at once) ...", flush=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.interrupted:
            control.should_save = True
            control.should_training_stop = True
        return control


def fit(
    lm: Any,
    tokenizer: Any,
    examples: Examples,
    out: Path,
    *,
    epochs: float,
    batch_size: int,
    lr: float,
    seed: int,
    save_steps: int,
    max_minutes: float | None,
    gradient_checkpointing: bool = False,
) -> dict[str, Any]:
    """Train ``lm`` on ``examples`` with transformers' ``Trainer`` (resuming from ``out/checkpoints``
    if a run was interrupted), save model and tokenizer to ``out``; returns the run's summary.
    ``gradient_checkpointing`` recomputes each decoder layer's activations in the backward pass
    (non-reentrant, so LoRA's frozen base passes gradients on; transformers makes the embeddings'
    output require grad): less memory, the same gradients up to float rounding."""

    tokenizer.padding_side = "right"  # positions 0.. for every row while training
    args = TrainingArguments(
        output_dir=str(out / CHECKPOINTS),
        per_device_train_batch_size=batch_size,
        num_train_epochs=epochs,
        learning_rate=lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.03,
        weight_decay=0.01,
        logging_steps=10,
        save_steps=save_steps,
        save_total_limit=2,
        report_to="none",
        use_cpu=True,
        seed=seed,
        dataloader_num_workers=0,
        # Batches of similar lengths: a batch is padded to its longest example, and WebShop's K = 4
        # prompts range from a few hundred to thousands of tokens.
        train_sampling_strategy="group_by_length",
        gradient_checkpointing=gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if gradient_checkpointing else None,
    )
    ctrl_c = _SaveOnCtrlC()
    trainer = Trainer(
        model=lm,
        args=args,
        train_dataset=examples,
        data_collator=DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=IGNORE_INDEX),
        processing_class=tokenizer,
        callbacks=[ctrl_c, _SaveEvery(SAVE_EVERY_MINUTES)]
        + ([] if max_minutes is None else [_time_limit_callback(max_minutes)]),
    )
    resume = any((out / CHECKPOINTS).glob("checkpoint-*"))
    started = time.monotonic()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, ctrl_c.handle) if main_thread else None
    try:
        result = trainer.train(resume_from_checkpoint=True if resume else None)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    if ctrl_c.interrupted:
        raise KeyboardInterrupt  # the checkpoint is saved; the caller says how to resume
    trainer.save_model(str(out))
    tokenizer.padding_side = "left"  # as the policy pads its prompts
    tokenizer.save_pretrained(str(out))
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return {
        # A run stopped by --max-minutes is usable but unfinished: rerunning it trains on.
        "finished": trainer.state.global_step >= trainer.state.max_steps,
        "examples": len(examples),
        "mean_prompt_tokens": round(sum(examples.prompt_tokens) / len(examples), 1),
        "parameters": sum(p.numel() for p in lm.parameters()),
        "trainable_parameters": sum(p.numel() for p in lm.parameters() if p.requires_grad),
        "optimizer_steps": trainer.state.global_step,
        "epochs_done": round(trainer.state.epoch or 0.0, 3),
        "train_seconds_this_session": round(time.monotonic() - started, 1),
        # None (JSON null, not the non-standard NaN) when the run was shorter than the logging interval.
        "final_loss": losses[-1] if losses else None,
        "train_loss": result.training_loss,
    }


def fitted_fraction(out: Path) -> float:
    """How much of the fit into ``out`` its latest ``Trainer`` checkpoint holds (0 without one): the
    part a resumed fit does not do again."""
    checkpoints = out / CHECKPOINTS
    last = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    state_file = Path(last) / "trainer_state.json" if last else None
    if state_file is None or not state_file.is_file():
        return 0.0
    state = json.loads(state_file.read_text())
    return min(1.0, state["global_step"] / state["max_steps"]) if state.get("max_steps") else 0.0


def train_warm_start(
    output: str | Path,
    *,
    max_minutes: float | None = None,
    save_steps: int = 200,
    gradient_checkpointing: bool = False,
    workers: int = 1,
    reuse_finished: bool = False,
    clock: BuildClock | None = None,
    **settings: Any,
) -> Path:
    """Collect demonstrations, train the model, and write the model directory ``output``.

    ``settings`` are the fields of :class:`SFTSettings`. With ``reuse_finished``, a finished run of
    the same settings in ``output`` is kept as it is; ``max_minutes`` stops training early (the
    directory is usable but unfinished: rerunning trains on). ``clock`` announces the phases.
    ``gradient_checkpointing`` (:func:`fit`) is how the fit runs, not what it makes: it is not recorded,
    and a run resumes with or without it.
    """

    sft = SFTSettings(**settings)
    sft.check()
    if (max_minutes or 0) < 0:
        raise ValueError(f"need max_minutes >= 0, got {max_minutes}")
    out = Path(output).expanduser()
    wanted = sft.record()
    envs.check_env_config(wanted["env"], wanted["env_config"])  # before anything is written
    if sft.base is not None:  # the base converted (once) now; resuming over another base is refused
        wanted["base_sha256"] = model_sha256(local_model_dir(sft.base))
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--output {out} is a file; give a directory for the model")
    with exclusive_directory(out, "`rllib sft`"):
        record = open_run(out, wanted, reuse_finished)
        if not record.get("finished"):
            _train(
                out,
                sft,
                record,
                workers=workers,
                save_steps=save_steps,
                max_minutes=max_minutes,
                gradient_checkpointing=gradient_checkpointing,
                clock=clock,
            )
    return out


def _train(
    out: Path,
    sft: SFTSettings,
    record: dict[str, Any],
    *,
    workers: int,
    save_steps: int,
    max_minutes: float | None,
    gradient_checkpointing: bool,
    clock: BuildClock | None,
) -> None:
    """Collect the demonstrations, train, and record the summary (the body of :func:`train_warm_start`)."""
    if clock is not None:
        clock.start("demonstrations")
    records = play_demonstrations(out, sft, record, workers)
    if sft.base is None:
        tokenizer, examples = demonstration_examples(records, sft, record)
        limit = sft_prompt_limit(sft.max_prompt_tokens, sft.max_new_tokens, record["model"])
    else:  # the base's own tokenizer and chat template, and its context
        base_dir = local_model_dir(sft.base)
        tokenizer = base_tokenizer(base_dir)
        context = read_record(base_dir / "config.json").get("max_position_embeddings")
        limit = prompt_token_limit(sft.max_prompt_tokens, sft.max_new_tokens, context)
        examples = tokenize_examples(tokenizer, won_steps(records, sft, record), limit, sft.train_on_prompt)
    check_answers_fit(examples, sft.max_new_tokens)
    print(describe_examples(examples, limit), flush=True)
    if sft.base is None:
        lm = build_tiny_model(tokenizer, record["model"], sft.seed)
    else:
        lm = base_model(base_dir, sft.dtype, record["lora"], sft.seed)
    if clock is not None:
        parameters = None if sft.base is None else sum(p.numel() for p in lm.parameters())
        clock.start_fit("SFT", examples.lengths, sft.epochs, fitted_fraction(out), parameters)
    summary = fit(
        lm,
        tokenizer,
        examples,
        out,
        epochs=sft.epochs,
        batch_size=sft.batch_size,
        lr=sft.learning_rate,
        seed=sft.seed,
        save_steps=save_steps,
        max_minutes=max_minutes,
        gradient_checkpointing=gradient_checkpointing,
    )
    if record.get("lora") is not None:
        write_adapter_record(out, record)
    write_run_record(out, {**record, "episodes_won": sum(r["won"] for r in records), **summary})


def play_demonstrations(
    out: Path, sft: SFTSettings, record: dict[str, Any], workers: int = 1
) -> list[dict[str, Any]]:
    """The demonstrations of the run in ``out`` (settings ``sft``, settings record ``record``): those
    already in its file, the rest played now in ``workers`` processes."""
    return collect_demonstrations(
        out / DEMONSTRATIONS,
        record["env"],
        record["env_config"],
        episodes=sft.episodes,
        history_length=sft.history_length,
        prompt_turns=sft.prompt_turns,
        demonstrator=record["demonstrator"],
        seed=sft.seed,
        workers=workers,
    )


def write_run_record(out: Path, record: dict[str, Any]) -> None:
    """The run's settings record; once it is finished, ``out`` is a policy folder too (its play
    settings in JSON beside the safetensors weights)."""
    write_record(out / SFT_CONFIG, record)
    if record.get("finished"):
        write_record(out / POLICY_RECORD, policy_record(record["env"], record))

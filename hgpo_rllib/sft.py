"""Warm start by supervised fine-tuning on expert play (``rllib sft``).

A demonstrator plays training tasks; every step becomes one example whose prompt is rendered by the
very connector code RL uses (:func:`~hgpo_rllib.connectors.history_window.episode_prompt_text` with
the renderer, K and env-config keywords of ``HGPOConfig._prompt_connector``, then the chat template of
:func:`~hgpo_rllib.rl_module.chat_prompt`), so RL later sees byte-identical prompts. The response is
``<think>thought</think><action>command</action>``; thoughts are templates over what the agent sees.
A small Qwen2-shaped model is trained from scratch (tokenizer trained locally on the env's text and
the demonstrations) with transformers' ``Trainer``, loss on response tokens (and, with
``train_on_prompt``, on the prompt too). The output is a Hugging Face model directory for
``model_config["model"]``, plus ``hgpo_sft.json`` (its env and prompt settings, which ``rllib
evaluate DIR`` reads).

Optional DAgger rounds (``--dagger-rounds``) follow: the model plays new training tasks and is
fine-tuned on the demonstrator's answers in the states it reached, which expert play alone never
shows (its own detours, invented receptacles, repeated failures).

Everything is resumable: demonstrations are appended per episode to ``demonstrations.jsonl`` and the
``Trainer`` checkpoints under ``checkpoints/`` (of the warm start, and of each DAgger round in its own
directory inside it); rerunning the same command continues.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

import envs
from hgpo_rllib.connectors.history_window import episode_prompt_text
from hgpo_rllib.rl_module import chat_prompt
from hgpo_rllib.tokenizer import build_tiny_model, build_tiny_tokenizer

SFT_CONFIG = "hgpo_sft.json"
DEMONSTRATIONS = "demonstrations.jsonl"
CHECKPOINTS = "checkpoints"
#: The from-scratch model: 4 layers, hidden 256 (about 3.7M parameters with a 2k vocabulary), sized
#: so that an epoch over a few thousand ~450-token examples takes minutes on 2 CPU cores.
MODEL_DEFAULTS: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
}
#: Default env settings per env: training tasks, and the paper's step limits.
DEFAULT_ENV_CONFIG = {
    "alfworld": {"split": "train", "max_steps": 50},
    "webshop": {"max_steps": 15},
    "keychest": {"max_steps": 10},
}
#: The CPU main job's warm start (issue 11): the searcher's play of 800 training games, 1.5 epochs of
#: the default model with loss on the prompt too, then one DAgger round on 96 more games.
#: ``rllib train file tuned_examples/hgpo_alfworld.py`` builds it on first use.
ALFWORLD_WARM_START: dict[str, Any] = {
    "env": "alfworld", "episodes": 800, "epochs": 1.5, "demonstrator": "searcher", "train_on_prompt": True,
    "dagger": {"rounds": 1, "episodes": 96},
}
#: Part of every cached warm start's name: bump it when a demonstrator's thoughts or commands change,
#: so the main job builds a new warm start instead of reusing one trained on the old texts.
DEMONSTRATION_FORMAT = 3
# Task seeds of training seed s are s * stride + i (as rllib evaluate does for its seeds).
TASK_SEED_STRIDE = 1_000_003
IGNORE_INDEX = -100


class Demonstrator(Protocol):
    """Chooses the next step from what the agent has seen: (thought, command)."""

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]: ...


class ExpertDemonstrator:
    """The env's own expert (``expert_action()``); its thought only restates the chosen command."""

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]:
        command = env.unwrapped.expert_action() or "look"
        return f"The next step of my task is to {command}.", command


def make_demonstrator(env_name: str, name: str, history_length: int = 2) -> Demonstrator:
    """``expert`` (any env) or ``searcher`` (ALFWorld: decides from the prompt's last
    ``history_length`` steps alone, searching receptacles in a fixed order)."""
    if name == "expert":
        return ExpertDemonstrator()
    if name == "searcher":
        if env_name != "alfworld":
            raise ValueError(f"demonstrator 'searcher' exists for alfworld only, not {env_name!r}")
        from envs.alfworld.searcher import Searcher

        return Searcher(history_length)
    raise ValueError(f"unknown demonstrator {name!r}; choose 'expert' or 'searcher'")


def response_text(thought: str, command: str) -> str:
    return f"<think>{thought}</think><action>{command}</action>"


def prompt_renderer(env_name: str, env_config: dict[str, Any], history_length: int) -> Callable[[Any], str]:
    """episode -> prompt text, through the same connector settings RL builds from this config."""
    from hgpo_rllib import HGPOConfig

    connector = (
        HGPOConfig().environment(env_name, env_config=env_config).training(history_length=history_length)
    )._prompt_connector()
    return lambda episode: episode_prompt_text(
        episode, connector.render_prompt, connector.history_length, connector.render_kwargs
    )


def play_demonstration(
    env: Any, demonstrator: Demonstrator, render: Callable[[Any], str], task_seed: int
) -> dict[str, Any]:
    """One episode: every step's rendered prompt and the demonstrator's response."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    observation, info = env.reset(seed=task_seed)
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observation, infos=info)
    observations, commands, steps = [observation], [], []
    done = False
    while not done:
        thought, command = demonstrator.act(env, observations, commands, info["admissible_actions"])
        answer = response_text(thought, command)
        steps.append({"prompt": render(episode), "response": answer})
        observation, reward, terminated, truncated, info = env.step(answer)
        episode.add_env_step(
            observation, answer, reward, infos=info, terminated=terminated, truncated=truncated
        )
        observations.append(observation)
        commands.append(info["command"])
        done = terminated or truncated
    return {
        "task_seed": task_seed,
        "task_type": info.get("task_type", ""),
        "won": bool(info["won"]),
        "steps": steps,
    }


_worker: dict[str, Any] = {}


def _start_worker(env_name: str, env_config: dict[str, Any], history_length: int, demonstrator: str) -> None:
    """Each collecting process plays with its own env and demonstrator."""
    _worker["env"] = envs.make_env(env_name, env_config)
    _worker["actor"] = make_demonstrator(env_name, demonstrator, history_length)
    _worker["render"] = prompt_renderer(env_name, env_config, history_length)


def _play_task(task_seed: int) -> dict[str, Any]:
    return play_demonstration(_worker["env"], _worker["actor"], _worker["render"], task_seed)


def collect_demonstrations(
    path: Path,
    env_name: str,
    env_config: dict[str, Any],
    *,
    episodes: int,
    history_length: int,
    demonstrator: str,
    seed: int,
    workers: int = 1,
) -> list[dict[str, Any]]:
    """Play ``episodes`` tasks in ``workers`` processes, appending each finished one to ``path`` (JSON
    lines); tasks already there are not played again. Returns the records in task order."""
    from concurrent.futures import ProcessPoolExecutor

    seeds = [seed * TASK_SEED_STRIDE + i for i in range(episodes)]
    lines = path.read_text().splitlines() if path.exists() else []
    done = {record["task_seed"]: record for record in map(json.loads, lines)}
    todo = [s for s in seeds if s not in done]
    init = (env_name, env_config, history_length, demonstrator)
    with (
        path.open("a") as out,
        tqdm(total=episodes, initial=episodes - len(todo), desc="demonstrations", unit="ep") as progress,
        ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=init) as pool,
    ):
        for record in pool.map(_play_task, todo) if todo else ():
            out.write(json.dumps(record) + "\n")
            out.flush()
            done[record["task_seed"]] = record
            progress.update()
            progress.set_postfix(won=sum(r["won"] for r in done.values()),
                                 steps=sum(len(r["steps"]) for r in done.values()))
    return [done[s] for s in seeds]


class _Examples(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict[str, list[int]]], prompt_tokens: list[int]):
        self.rows = rows
        self.prompt_tokens = prompt_tokens

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.rows[index]


def tokenize_examples(
    tokenizer: Any, steps: Sequence[dict[str, str]], max_prompt_tokens: int, train_on_prompt: bool = False
) -> _Examples:
    """Prompt as the policy reads it (chat template, last ``max_prompt_tokens`` tokens) + response +
    end-of-turn; labels on the response and its end-of-turn token, and on the prompt too with
    ``train_on_prompt``."""
    rows, prompt_tokens = [], []
    for step in steps:
        prompt = tokenizer(chat_prompt(tokenizer, step["prompt"]), add_special_tokens=False)["input_ids"]
        prompt = prompt[-max_prompt_tokens:]
        response = tokenizer(step["response"], add_special_tokens=False)["input_ids"]
        response.append(tokenizer.eos_token_id)
        rows.append({
            "input_ids": prompt + response,
            "attention_mask": [1] * (len(prompt) + len(response)),
            "labels": (prompt if train_on_prompt else [IGNORE_INDEX] * len(prompt)) + response,
        })
        prompt_tokens.append(len(prompt))
    return _Examples(rows, prompt_tokens)


def _time_limit_callback(minutes: float) -> Any:
    from transformers import TrainerCallback

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


def _settings_file(output: Path, settings: dict[str, Any], reuse_finished: bool = False) -> dict[str, Any]:
    """Write the run's settings, or check them against those of the run being resumed (or, with
    ``reuse_finished``, of a finished run to build on)."""
    path = output / SFT_CONFIG
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("finished") and not reuse_finished:
            raise FileExistsError(f"{output} already holds a finished warm start; choose a new --output")
        changed = sorted(k for k in settings if saved.get(k) != settings[k])
        if changed:
            state = "a finished" if saved.get("finished") else "an unfinished"
            raise ValueError(
                f"{output} holds {state} run with other settings ({', '.join(changed)}); "
                "rerun with the same settings to resume it, or choose a new --output"
            )
        return saved
    output.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**settings, "finished": False}, indent=2))
    return settings


def _fit(
    lm: Any,
    tokenizer: Any,
    examples: _Examples,
    out: Path,
    *,
    epochs: float,
    batch_size: int,
    lr: float,
    seed: int,
    save_steps: int,
    max_minutes: float | None,
) -> dict[str, Any]:
    """Train ``lm`` on ``examples`` with transformers' ``Trainer`` (resuming from ``out/checkpoints``
    if a run was interrupted), save model and tokenizer to ``out``; returns the run's summary."""
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

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
    )
    trainer = Trainer(
        model=lm,
        args=args,
        train_dataset=examples,
        data_collator=DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=IGNORE_INDEX),
        processing_class=tokenizer,
        callbacks=None if max_minutes is None else [_time_limit_callback(max_minutes)],
    )
    resume = any((out / CHECKPOINTS).glob("checkpoint-*"))
    started = time.monotonic()
    result = trainer.train(resume_from_checkpoint=True if resume else None)
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
        "optimizer_steps": trainer.state.global_step,
        "epochs_done": round(trainer.state.epoch or 0.0, 3),
        "train_seconds_this_session": round(time.monotonic() - started, 1),
        "final_loss": losses[-1] if losses else math.nan,
        "train_loss": result.training_loss,
    }


def _write_summary(out: Path, summary: dict[str, Any]) -> None:
    (out / SFT_CONFIG).write_text(json.dumps(summary, indent=2))


def train_warm_start(
    output: str | Path,
    *,
    env: str,
    episodes: int,
    env_config: dict[str, Any] | None = None,
    history_length: int = 2,
    demonstrator: str = "expert",
    seed: int = 0,
    max_prompt_tokens: int = 1024,
    max_new_tokens: int = 96,
    vocab_size: int = 2048,
    model: dict[str, Any] | None = None,
    epochs: float = 3.0,
    batch_size: int = 8,
    lr: float = 1e-3,
    train_on_prompt: bool = False,
    max_minutes: float | None = None,
    save_steps: int = 200,
    workers: int = 1,
    reuse_finished: bool = False,
) -> Path:
    """Collect demonstrations, train the model, and write the model directory ``output`` (with
    ``reuse_finished``, a finished run of the same settings there is kept as it is)."""
    env_name = envs.get_env_spec(env).name
    if episodes < 1 or history_length < 0 or epochs <= 0 or batch_size < 1 or (max_minutes or 0) < 0:
        raise ValueError(
            f"need episodes >= 1 (got {episodes}), batch_size >= 1 ({batch_size}), history_length >= 0 "
            f"({history_length}), epochs > 0 ({epochs}) and max_minutes >= 0 ({max_minutes})"
        )
    out = Path(output).expanduser()
    env_config = {**DEFAULT_ENV_CONFIG.get(env_name, {}), **(env_config or {})}
    settings = _settings_file(out, {
        "env": env_name,
        "env_config": env_config,
        "history_length": history_length,
        "max_prompt_tokens": max_prompt_tokens,
        "max_new_tokens": max_new_tokens,
        "episodes": episodes,
        "demonstrator": demonstrator,
        "seed": seed,
        "vocab_size": vocab_size,
        "model": {**MODEL_DEFAULTS, **(model or {})},
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "train_on_prompt": train_on_prompt,
    }, reuse_finished)
    if settings.get("finished"):
        return out
    records = collect_demonstrations(
        out / DEMONSTRATIONS, env_name, env_config, episodes=episodes, history_length=history_length,
        demonstrator=demonstrator, seed=seed, workers=workers,
    )
    # Only won episodes are demonstrations worth imitating.
    steps = [step for record in records if record["won"] for step in record["steps"]]
    if not steps:
        raise RuntimeError(f"{demonstrator!r} won none of the {episodes} episodes: nothing to learn")
    corpus = [*envs.get_tokenizer_corpus(env_name), *(s["prompt"] + s["response"] for s in steps)]
    tokenizer = build_tiny_tokenizer(corpus, vocab_size)
    examples = tokenize_examples(tokenizer, steps, max_prompt_tokens, train_on_prompt)
    lm = build_tiny_model(tokenizer, settings["model"], seed)
    summary = _fit(lm, tokenizer, examples, out, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                   save_steps=save_steps, max_minutes=max_minutes)
    _write_summary(out, {**settings, "episodes_won": sum(r["won"] for r in records), **summary})
    return out


def _dagger_settings(episodes: int, epochs: float, lr: float) -> tuple[dict[str, Any], str]:
    """The settings of DAgger rounds over ``base`` and the digest that names their directories."""
    if episodes < 1 or epochs <= 0 or lr <= 0:
        raise ValueError(f"need dagger episodes >= 1 (got {episodes}), epochs > 0 ({epochs}), lr > 0 ({lr})")
    dagger = {"dagger_episodes": episodes, "dagger_epochs": epochs, "dagger_lr": lr}
    digest = hashlib.sha256(json.dumps(dagger, sort_keys=True).encode()).hexdigest()[:8]
    return dagger, digest


def demonstrator_answer(demonstrator: Demonstrator, slot: Any) -> tuple[str, str]:
    """The demonstrator's (thought, command) in the state of a running episode (an
    :class:`~hgpo_rllib.evaluation.EpisodeSlot`), from what the agent has seen so far."""
    observations = list(slot.episode.get_observations())
    commands = [info["command"] for info in slot.episode.get_infos()[1:]]
    return demonstrator.act(slot.env, observations, commands, slot.info["admissible_actions"])


def collect_dagger_states(model_dir: Path, path: Path, task_seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The model of ``model_dir`` plays ``task_seeds`` as ``rllib evaluate`` plays them (its own prompts,
    sampling at its evaluation temperature); every state it reaches becomes an example whose response
    is the demonstrator's in that state (DAgger, Ross et al. 2011: the imitator learns to recover from
    its own mistakes, which expert play never shows). Written to ``path`` once; a rerun reads it."""
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    from hgpo_rllib.evaluation import CheckpointPolicy, EpisodeSlot, play

    settings = json.loads((model_dir / SFT_CONFIG).read_text())
    env_name, env_config, k = settings["env"], settings["env_config"], settings["history_length"]
    policy = CheckpointPolicy(model_dir).reseed(settings["seed"])
    demonstrator = make_demonstrator(env_name, settings["demonstrator"], k)
    render = prompt_renderer(env_name, env_config, k)
    steps: dict[int, list[dict[str, str]]] = {}

    def labelled(slots: list[EpisodeSlot]) -> list[str]:
        for slot in slots:
            thought, command = demonstrator_answer(demonstrator, slot)
            steps.setdefault(slot.result["task_seed"], []).append(
                {"prompt": render(slot.episode), "response": response_text(thought, command)}
            )
        return policy(slots)

    records = play(env_name, env_config, labelled, task_seeds, desc="DAgger: the model plays")
    records = [{**record, "states": steps[record["task_seed"]]} for record in records]
    partial = path.with_suffix(".partial")
    partial.write_text("".join(json.dumps(record) + "\n" for record in records))
    partial.replace(path)
    return records


def train_dagger(
    base: str | Path,
    *,
    rounds: int,
    episodes: int = 96,
    epochs: float = 1.0,
    lr: float = 3e-4,
    max_minutes: float | None = None,
    save_steps: int = 200,
    reuse_finished: bool = False,
) -> Path:
    """``rounds`` rounds of DAgger on the finished warm start ``base``: in round r the latest model plays
    ``episodes`` new training tasks, the demonstrator labels the states it reached, and the model is
    fine-tuned for ``epochs`` on every round's states so far plus as many demonstration steps. Round r
    is the model directory ``base/dagger-DIGEST-r`` (DIGEST names these settings); returns the last."""
    base = Path(base).expanduser()
    if rounds < 1:
        raise ValueError(f"need dagger rounds >= 1, got {rounds}")
    base_settings = json.loads((base / SFT_CONFIG).read_text()) if (base / SFT_CONFIG).is_file() else {}
    if not base_settings.get("finished"):
        raise ValueError(f"{base} holds no finished warm start to run DAgger on")
    dagger, digest = _dagger_settings(episodes, epochs, lr)
    # What a round keeps of its warm start: how it plays and prompts, and how it is trained.
    kept = {k: base_settings[k] for k in ("env", "env_config", "history_length", "max_prompt_tokens",
                                          "max_new_tokens", "demonstrator", "seed", "batch_size",
                                          "train_on_prompt")}
    demonstrations = [step for line in (base / DEMONSTRATIONS).read_text().splitlines()
                      if (record := json.loads(line))["won"] for step in record["steps"]]
    first_task = kept["seed"] * TASK_SEED_STRIDE + base_settings["episodes"]  # after the demonstrations'
    states: list[dict[str, str]] = []
    previous = base
    for round_ in range(1, rounds + 1):
        out = base / f"dagger-{digest}-{round_}"
        last = round_ == rounds
        settings = _settings_file(out, {**kept, **dagger, "dagger_round": round_},
                                  reuse_finished=reuse_finished or not last)
        seeds = range(first_task + (round_ - 1) * episodes, first_task + round_ * episodes)
        records = collect_dagger_states(previous, out / "dagger_states.jsonl", seeds)
        states += [state for record in records for state in record["states"]]
        if not settings.get("finished"):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            rng = random.Random(kept["seed"] + round_)
            replay = rng.sample(demonstrations, min(len(states), len(demonstrations)))
            tokenizer = AutoTokenizer.from_pretrained(previous)
            examples = tokenize_examples(tokenizer, states + replay, kept["max_prompt_tokens"],
                                         kept["train_on_prompt"])
            lm = AutoModelForCausalLM.from_pretrained(previous)
            summary = _fit(lm, tokenizer, examples, out, epochs=epochs, batch_size=kept["batch_size"],
                           lr=lr, seed=kept["seed"], save_steps=save_steps, max_minutes=max_minutes)
            _write_summary(out, {
                **settings, **summary, "dagger_states": len(states),
                # How the model that played this round did on its training tasks.
                "played_won": sum(r["won"] for r in records), "played": len(records),
            })
            if not summary["finished"]:
                return out
        previous = out
    return previous


def cached_warm_start(recipe: dict[str, Any], cache_dir: str | Path | None = None) -> Path:
    """The finished warm start of ``recipe`` (keyword arguments of :func:`train_warm_start`, and
    optionally ``dagger``: keyword arguments of :func:`train_dagger`), built first, or finished if an
    earlier build was interrupted. It lives under ``cache_dir`` (default ``$HGPO_CACHE`` or
    ``~/.cache/hgpo_rllib``) in a directory named after the digest of the recipe without ``dagger``, so
    recipes that differ only in their DAgger rounds share the warm start they start from."""
    root = Path(cache_dir or os.environ.get("HGPO_CACHE") or "~/.cache/hgpo_rllib").expanduser()
    recipe = dict(recipe)
    dagger = recipe.pop("dagger", None)
    key = json.dumps([DEMONSTRATION_FORMAT, recipe], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    out = root / "warm_starts" / f"{recipe['env']}-{digest}"
    settings = out / SFT_CONFIG
    if not (settings.is_file() and json.loads(settings.read_text()).get("finished")):
        print(f"Building the warm start {out} (first use only; interrupted builds resume) ...", flush=True)
        train_warm_start(out, workers=os.cpu_count() or 1, **recipe)
    return train_dagger(out, reuse_finished=True, **dagger) if dagger else out


def warm_start_config(model_dir: str | Path) -> Any:
    """The ``HGPOConfig`` (env, prompt settings, model) of a warm-start directory."""
    from hgpo_rllib import HGPOConfig

    path = Path(model_dir).expanduser().resolve()
    settings = json.loads((path / SFT_CONFIG).read_text())
    return (
        HGPOConfig()
        .environment(settings["env"], env_config=settings["env_config"])
        .rl_module(model_config={"model": str(path)})
        .training(
            history_length=settings["history_length"],
            max_prompt_tokens=settings["max_prompt_tokens"],
            max_new_tokens=settings["max_new_tokens"],
        )
    )


def warm_start_cpu_config(model_dir: str | Path, training: dict[str, Any]) -> Any:
    """RL from a warm start on CPU: free-text generation (no admissible-action or vocabulary
    constraint), 2 groups of 4, the warm start's env and prompt settings. ``training`` holds the
    estimator settings; its history length must be the warm start's K (the prompts it learned).
    A small learning rate and a KL penalty to the warm start keep RL near it: 30 minutes of HGPO took
    the ALFWorld warm start from 18.75% to 25.0% on unseen games with these, to 2.08% at lr 1e-4
    without KL (README, "ALFWorld on CPU")."""
    config = warm_start_config(model_dir)
    if training.get("history_length", config.history_length) != config.history_length:
        raise ValueError(
            f"history_length={training['history_length']} differs from the warm start's K="
            f"{config.history_length} in {model_dir}; use the same K (HGPO_K) or another warm start"
        )
    group_size, groups = 4, 2
    return (
        config.env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .training(
            **training,
            group_size=group_size,
            groups_per_iteration=groups,
            lr=1e-5,
            minibatch_size=64,
            micro_batch_size=8,
            kl_coeff=0.05,
        )
        .debugging(seed=0)
        # The progress table's smoothed metrics cover the last 4 iterations (8 tasks).
        .reporting(metrics_num_episodes_for_smoothing=4 * group_size * groups)
    )


def warm_start_module(config: Any) -> Any:
    """The policy module of ``warm_start_config(...)``, for inference."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envs.common.spaces import TextSpace
    from hgpo_rllib.rl_module import LLMRLModule

    spec = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=TextSpace(),
        action_space=TextSpace(),
        inference_only=True,
        model_config=config.model_config,
    )
    return spec.build().eval()


def add_arguments(parser: argparse.ArgumentParser, json_dict: Callable[[str], dict[str, Any]]) -> None:
    """The options of ``rllib sft``."""
    parser.add_argument("--env", required=True, choices=sorted(envs.ENV_SPECS))
    parser.add_argument("--episodes", type=int, required=True, help="demonstration episodes to play")
    parser.add_argument("--output", required=True, help="model directory to write (rerun to resume)")
    parser.add_argument("--demonstrator", choices=["expert", "searcher"],
                        help="default: searcher on alfworld, expert elsewhere")
    parser.add_argument("--env-config", type=json_dict, default={}, help="env settings as JSON")
    parser.add_argument("-k", "--history-length", type=int, default=2, help="K of the prompt (as in RL)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--train-on-prompt", action="store_true",
                        help="language-model loss on the prompt tokens too (teaches a from-scratch model "
                             "to read its prompt: the history and admissible actions repeat observed text)")
    parser.add_argument("--max-minutes", type=float, help="stop training after this many minutes")
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--max-new-tokens", type=int, default=96, help="longest response the policy writes")
    parser.add_argument("--vocab-size", type=int, default=2048, help="size of the locally trained tokenizer")
    parser.add_argument("--model", type=json_dict, default={}, help="Qwen2Config overrides as JSON")
    parser.add_argument("--save-steps", type=int, default=200, help="checkpoint every N optimiser steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes playing demonstrations")
    parser.add_argument("--dagger-rounds", type=int, default=0,
                        help="then DAgger: the model plays new tasks and learns the demonstrator's answers "
                             "in the states it reached (each round is a model directory inside --output)")
    parser.add_argument("--dagger-episodes", type=int, default=96, help="tasks the model plays per round")
    parser.add_argument("--dagger-epochs", type=float, default=1.0)
    parser.add_argument("--dagger-lr", type=float, default=3e-4)


def run_from_args(args: argparse.Namespace) -> int:
    out = train_warm_start(
        args.output,
        env=args.env,
        episodes=args.episodes,
        env_config=args.env_config,
        history_length=args.history_length,
        demonstrator=args.demonstrator or ("searcher" if args.env == "alfworld" else "expert"),
        seed=args.seed,
        max_prompt_tokens=args.max_prompt_tokens,
        max_new_tokens=args.max_new_tokens,
        vocab_size=args.vocab_size,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        train_on_prompt=args.train_on_prompt,
        max_minutes=args.max_minutes,
        save_steps=args.save_steps,
        workers=args.workers,
        reuse_finished=args.dagger_rounds > 0,
    )
    if args.dagger_rounds:
        out = train_dagger(
            out, rounds=args.dagger_rounds, episodes=args.dagger_episodes, epochs=args.dagger_epochs,
            lr=args.dagger_lr, max_minutes=args.max_minutes, save_steps=args.save_steps,
        )
    print(f"Warm start written to {out}; use it with model_config={{'model': '{out}'}}")
    return 0

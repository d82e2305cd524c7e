"""DAgger rounds after the warm start (Ross et al., 2011): the model plays new training tasks as
``rllib evaluate`` plays them, the demonstrator labels every state it reached, and the model is
fine-tuned on those labels plus as many demonstration steps. Expert play alone never shows the model's
own detours, invented receptacles and repeated failures; its own play does.

Each round is a model directory ``dagger-DIGEST-r`` inside the warm start (DIGEST names the rounds'
settings); the states a round collected are written once, so a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer

from hgpo_rllib.evaluation.policy_loading import CheckpointPolicy
from hgpo_rllib.evaluation.rollout import EpisodeSlot, play, read_played_episodes, task_seeds
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, model_context_length, prompt_token_limit
from hgpo_rllib.run_records import exclusive_directory, read_record, write_atomically
from hgpo_rllib.warm_start.demonstrations import (
    demonstrated_response,
    make_demonstrator,
    prompt_fields,
    prompt_renderer,
)
from hgpo_rllib.warm_start.format import DEMONSTRATIONS, SFT_CONFIG, read_settings
from hgpo_rllib.warm_start.phases import BuildClock, dagger_phase
from hgpo_rllib.warm_start.sft_dataset import check_answers_fit, tokenize_examples
from hgpo_rllib.warm_start.trainer import fit, fitted_fraction, open_run, write_run_record


@dataclasses.dataclass(frozen=True)
class DaggerSettings:
    """DAgger rounds over a finished warm start; the defaults of ``rllib sft --dagger-*``."""

    rounds: int = 0
    #: Tasks the model plays per round.
    episodes: int = 96
    epochs: float = 1.0
    lr: float = 3e-4

    def record(self) -> dict[str, Any]:
        """The rounds' settings as their directories record them."""
        return {"dagger_episodes": self.episodes, "dagger_epochs": self.epochs, "dagger_lr": self.lr}

    def digest(self) -> str:
        """Names the rounds' directories (``dagger-DIGEST-r``)."""
        return hashlib.sha256(json.dumps(self.record(), sort_keys=True).encode()).hexdigest()[:8]

    def check(self) -> None:
        if self.rounds < 1 or self.episodes < 1 or self.epochs <= 0 or self.lr <= 0:
            raise ValueError(
                f"need dagger rounds >= 1 (got {self.rounds}), episodes >= 1 ({self.episodes}), "
                f"epochs > 0 ({self.epochs}), lr > 0 ({self.lr})"
            )


def collect_dagger_states(model_dir: Path, path: Path, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The model of ``model_dir`` plays the tasks ``seeds`` as ``rllib evaluate`` plays them (its own prompts,
    sampling at its evaluation temperature); every state it reaches becomes an example whose response
    is the demonstrator's in that state (DAgger, Ross et al. 2011: the imitator learns to recover from
    its own mistakes, which expert play never shows). Each game is appended to ``path`` + ``.partial``
    as it ends, so an interrupted round plays only the games it had not finished; ``path`` is written
    once all are, and a rerun reads it."""
    if path.exists():
        return list(read_played_episodes(path).values())
    partial = path.with_suffix(".partial")
    games = read_played_episodes(partial)
    remaining = [seed for seed in seeds if seed not in games]
    if remaining:
        settings = read_settings(model_dir)
        env_name, env_config, k = settings["env"], settings["env_config"], settings["history_length"]
        policy = CheckpointPolicy(model_dir).reseed(settings["seed"] + len(games))
        demonstrator = make_demonstrator(env_name, settings["demonstrator"], k, env_config)
        render = prompt_renderer(env_name, env_config, k, settings.get("prompt_turns", ONE_USER_TURN))
        steps: dict[int, list[dict[str, str]]] = {}

        def labelled(slots: list[EpisodeSlot]) -> list[str]:
            # In the env's answer format: a plan-execute label keeps or switches the subgoal that the
            # model's own prompt shows.
            for slot in slots:
                response = demonstrated_response(demonstrator, slot.env, slot.episode)
                steps.setdefault(slot.result["task_seed"], []).append(
                    {**prompt_fields(render(slot.episode)), "response": response}
                )
            return policy(slots)

        with partial.open("a") as saved:

            def save(record: dict[str, Any]) -> None:
                game = {**record, "states": steps.pop(record["task_seed"])}
                saved.write(json.dumps(game) + "\n")
                saved.flush()
                games[game["task_seed"]] = game

            saved_before = f" ({len(games)} of {len(seeds)} games saved before)" if games else ""
            play(
                env_name,
                env_config,
                labelled,
                remaining,
                desc=f"DAgger: the model plays{saved_before}",
                on_episode_end=save,
            )
    records = [games[seed] for seed in seeds]
    write_atomically(path, "".join(json.dumps(record) + "\n" for record in records))
    partial.unlink(missing_ok=True)
    return records


def train_dagger(
    base: str | Path,
    *,
    max_minutes: float | None = None,
    save_steps: int = 200,
    gradient_checkpointing: bool = False,
    reuse_finished: bool = False,
    clock: BuildClock | None = None,
    **settings: Any,
) -> Path:
    """``rounds`` rounds of DAgger on the finished warm start ``base`` (``settings``: the fields of
    :class:`DaggerSettings`): in round r the latest model plays ``episodes`` new training tasks, the
    demonstrator labels the states it reached, and the model is fine-tuned for ``epochs`` on every
    round's states so far plus as many demonstration steps. Round r is the model directory
    ``base/dagger-DIGEST-r``; returns the last. ``clock`` announces each round's two phases;
    ``gradient_checkpointing``: as :func:`~hgpo_rllib.warm_start.trainer.fit` (not recorded)."""
    dagger = DaggerSettings(**settings)
    dagger.check()
    base = Path(base).expanduser()
    base_settings = read_record(base / SFT_CONFIG) if (base / SFT_CONFIG).is_file() else {}
    if not base_settings.get("finished"):
        raise ValueError(f"{base} holds no finished warm start to run DAgger on")
    if "base" in base_settings:  # its rounds would fine-tune the merged model, not its adapter
        raise ValueError(
            f"{base} is a warm start of a pretrained base: DAgger rounds apply to the tiny model only"
        )
    # What a round keeps of its warm start: how it plays and prompts, and how it is trained.
    kept = {
        k: base_settings[k]
        for k in (
            "env",
            "env_config",
            "history_length",
            "max_prompt_tokens",
            "max_new_tokens",
            "demonstrator",
            "seed",
            "batch_size",
            "train_on_prompt",
        )
    }
    if "prompt_turns" in base_settings:  # recorded only when not one user turn
        kept["prompt_turns"] = base_settings["prompt_turns"]
    demonstrations = [
        step
        for line in (base / DEMONSTRATIONS).read_text().splitlines()
        if (record := json.loads(line))["won"]
        for step in record["steps"]
    ]
    with exclusive_directory(base, "`rllib sft` DAgger round"):
        return _play_and_train_rounds(
            base,
            dagger,
            kept,
            demonstrations,
            first_task=base_settings["episodes"],  # the first task after the demonstrations'
            max_minutes=max_minutes,
            save_steps=save_steps,
            gradient_checkpointing=gradient_checkpointing,
            reuse_finished=reuse_finished,
            clock=clock,
        )


def _play_and_train_rounds(
    base: Path,
    dagger: DaggerSettings,
    kept: dict[str, Any],
    demonstrations: list[dict[str, str]],
    *,
    first_task: int,
    max_minutes: float | None,
    save_steps: int,
    gradient_checkpointing: bool,
    reuse_finished: bool,
    clock: BuildClock | None,
) -> Path:
    """The rounds of :func:`train_dagger`, under its lock; returns the last round's directory."""
    episodes, digest = dagger.episodes, dagger.digest()
    states: list[dict[str, str]] = []
    previous = base
    for round_ in range(1, dagger.rounds + 1):
        out = base / f"dagger-{digest}-{round_}"
        last = round_ == dagger.rounds
        settings = open_run(
            out,
            {**kept, **dagger.record(), "dagger_round": round_},
            reuse_finished=reuse_finished or not last,
        )
        seeds = task_seeds(kept["seed"], episodes, start=first_task + (round_ - 1) * episodes)
        if clock is not None and not settings.get("finished"):
            clock.start(dagger_phase(round_, "play"))
        records = collect_dagger_states(previous, out / "dagger_states.jsonl", seeds)
        states += [state for record in records for state in record["states"]]
        if not settings.get("finished"):
            rng = random.Random(kept["seed"] + round_)
            replay = rng.sample(demonstrations, min(len(states), len(demonstrations)))
            tokenizer = AutoTokenizer.from_pretrained(previous)
            lm = AutoModelForCausalLM.from_pretrained(previous)
            limit = prompt_token_limit(
                kept["max_prompt_tokens"], kept["max_new_tokens"], model_context_length(lm.config)
            )
            examples = tokenize_examples(tokenizer, states + replay, limit, kept["train_on_prompt"])
            check_answers_fit(examples, kept["max_new_tokens"])
            if clock is not None:
                phase = dagger_phase(round_, "SFT")
                clock.start_fit(phase, examples.lengths, dagger.epochs, fitted_fraction(out))
            summary = fit(
                lm,
                tokenizer,
                examples,
                out,
                epochs=dagger.epochs,
                batch_size=kept["batch_size"],
                lr=dagger.lr,
                seed=kept["seed"],
                save_steps=save_steps,
                max_minutes=max_minutes,
                gradient_checkpointing=gradient_checkpointing,
            )
            write_run_record(
                out,
                {
                    **settings,
                    **summary,
                    "dagger_states": len(states),
                    # How the model that played this round did on its training tasks.
                    "played_won": sum(r["won"] for r in records),
                    "played": len(records),
                },
            )
            if not summary["finished"]:
                return out
        previous = out
    return previous

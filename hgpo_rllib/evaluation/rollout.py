"""Playing policies on text envs, a batch of episodes at a time: the evaluation protocol's inner loop,
also used by DAgger (the model plays, the demonstrator labels the states it reached).

A policy maps running episodes (:class:`EpisodeSlot`) to answers; one that generates them with an LLM
returns :class:`Answers`, whose flags say which answers were length-cut and which prompts were cut.
Task seeds of evaluation or demonstration seed s are ``s * TASK_SEED_STRIDE + i``, disjoint across
seeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from tqdm.auto import tqdm

import envs
from hgpo_rllib.columns import LENGTH_CUT_RATE, PROMPT_CUT_RATE
from hgpo_rllib.env_runner.metrics_callback import EpisodeOutcome, episode_outcome
from hgpo_rllib.run_records import write_atomically

TASK_SEED_STRIDE = 1_000_003
#: The record key of an episode's transcript, where :func:`play` keeps one (``with_transcripts``).
TRANSCRIPT = "transcript"


def task_seeds(seed: int, count: int, start: int = 0) -> list[int]:
    """The task seeds ``start .. start + count - 1`` of seed ``seed``."""
    return [seed * TASK_SEED_STRIDE + i for i in range(start, start + count)]


@dataclass
class EpisodeSlot:
    """One running episode: its env, and the steps so far as an RLlib episode (for the prompt)."""

    env: gym.Env
    episode: SingleAgentEpisode  # what the prompt connector reads
    info: dict[str, Any]
    steps: int = 0
    invalid: int = 0
    done: bool = False
    result: dict[str, Any] = field(default_factory=dict)


class Answers(list[str]):
    """A generating policy's answers (the texts, a list as every policy returns) with what its
    generation says of each: ``flags`` maps a per-step flag (``columns.LENGTH_CUT``,
    ``columns.PROMPT_CUT``) to one value per answer. :func:`play` stores them with each step, as the
    training env runner stores the module's outputs, so that evaluation counts cut turns as training
    does (:func:`~hgpo_rllib.env_runner.metrics_callback.episode_outcome`)."""

    def __init__(self, texts: Iterable[str], flags: Mapping[str, Iterable[bool]]):
        super().__init__(texts)
        self.flags = {key: [bool(flag) for flag in values] for key, values in flags.items()}


Policy = Callable[[list[EpisodeSlot]], list[str]]


def cut_rates(outcome: EpisodeOutcome) -> dict[str, float]:
    """The record columns of an episode's cut turns (its shares of length-cut answers and cut
    prompts); NaN where its steps carry no flags (a baseline's: nothing generated, nothing cut)."""
    return {
        LENGTH_CUT_RATE: np.nan if outcome.length_cut_rate is None else outcome.length_cut_rate,
        PROMPT_CUT_RATE: np.nan if outcome.prompt_cut_rate is None else outcome.prompt_cut_rate,
    }


def expert_policy(slots: list[EpisodeSlot]) -> list[str]:
    """The env's privileged expert, answering in the well-formed tagged format."""
    answers = []
    for slot in slots:
        command = slot.env.unwrapped.expert_action() or "look"
        answers.append(f"<think>expert</think><action>{command}</action>")
    return answers


def random_policy(seed: int) -> Policy:
    """Uniformly random admissible actions (well-formed), seeded."""
    rng = np.random.default_rng(seed)

    def act(slots: list[EpisodeSlot]) -> list[str]:
        answers = []
        for slot in slots:
            actions = slot.info.get("admissible_actions") or ["look"]
            answers.append(f"<think>random</think><action>{actions[rng.integers(len(actions))]}</action>")
        return answers

    return act


def read_played_episodes(path: Path) -> dict[int, dict[str, Any]]:
    """The episodes an earlier run wrote to ``path``, by task seed. A last line cut short by a crash
    (no newline at the end) is dropped from the file, so that episode is played again; any other
    line that is not JSON is a ValueError naming the file and the line."""
    if not path.exists():
        return {}
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        print(f"{path}: dropping its last line, cut short by an interrupted run", flush=True)
        lines.pop()
        write_atomically(path, "".join(line + "\n" for line in lines))
    played = {}
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path} line {number} is not JSON ({exc}); delete that line to replay it"
            ) from None
        played[record["task_seed"]] = record
    return played


def transcript(episode: SingleAgentEpisode) -> dict[str, Any]:
    """What the policy saw and said: each turn's observation (the env's text, before the prompt
    connector adds the task and history), answer and reward, then the observation the episode ended
    on."""
    observations, answers, rewards = episode.get_observations(), episode.get_actions(), episode.get_rewards()
    turns = [
        {"observation": observation, "answer": answer, "reward": float(reward)}
        for observation, answer, reward in zip(observations[:-1], answers, rewards, strict=True)
    ]
    return {"turns": turns, "final_observation": observations[-1]}


def new_episode(observation: str, info: dict[str, Any]) -> SingleAgentEpisode:
    """An RLlib episode started at ``observation`` (the prompt connector reads episodes)."""
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observation, infos=info)
    return episode


def play(
    env_name: str,
    env_config: dict[str, Any],
    policy: Policy,
    task_seeds: Sequence[int],
    *,
    reset_options: dict[str, Any] | None = None,
    batch_size: int = 16,
    desc: str = "",
    on_episode_end: Callable[[dict[str, Any]], None] | None = None,
    with_transcripts: bool = False,
) -> list[dict[str, Any]]:
    """Play one episode per task seed, up to ``batch_size`` at a time; one record each, in task order.

    A slot whose episode ends starts the next task at once (continuous batching), so one long episode
    does not hold up a whole batch. ``on_episode_end`` gets each record as its episode ends (to save
    finished games as they come). A record names its task: ``task_seed``, ``task_type`` and, where the
    env reports one, ``goal_index`` (the goal a WebShop task seed drew). Its ``score`` and the env's
    other score columns (``EvaluationFacts.score_columns``) are the final ``info``'s, else ``won``.
    ``length_cut_rate`` and ``prompt_cut_rate`` are the shares of its turns whose answer was
    length-cut and whose prompt was cut, as training counts them, from a policy's :class:`Answers`
    (NaN for a policy that returns plain texts: a baseline generates nothing to cut).
    ``with_transcripts``: each record also holds the episode's :func:`transcript` under
    :data:`TRANSCRIPT`."""
    records: dict[int, dict[str, Any]] = {}
    scores = dict.fromkeys(("score", *envs.env_facts(env_name, env_config).evaluation.score_columns))
    progress = tqdm(total=len(task_seeds), desc=desc or env_name, unit="ep", leave=False)
    pool = [envs.make_env(env_name, env_config) for _ in range(min(batch_size, len(task_seeds)))]
    todo = list(enumerate(task_seeds))[::-1]

    def start(env: gym.Env) -> EpisodeSlot:
        index, seed = todo.pop()
        observation, info = env.reset(seed=int(seed), options=reset_options)
        slot = EpisodeSlot(env, new_episode(observation, info), info)
        slot.result = {
            "index": index,
            "task_seed": int(seed),
            "task_type": info.get("task_category", info["task_type"]),
            # Which of its goals the task seed drew, where the env says (WebShop: ``goal_index``).
            **({"goal_index": info["goal_index"]} if info.get("goal_index") is not None else {}),
        }
        return slot

    active = [start(env) for env in pool]
    while active:
        answers = policy(active)
        flags = answers.flags if isinstance(answers, Answers) else {}
        for row, (slot, answer) in enumerate(zip(active, answers, strict=True)):
            observation, reward, terminated, truncated, info = slot.env.step(answer)
            slot.episode.add_env_step(
                observation,
                answer,
                reward,
                infos=info,
                terminated=terminated,
                truncated=truncated,
                extra_model_outputs={key: values[row] for key, values in flags.items()},
            )
            slot.info, slot.steps = info, slot.steps + 1
            slot.invalid += not info["is_action_valid"]
            if terminated or truncated:
                slot.done = True
                slot.result.update(
                    won=bool(info["won"]),
                    steps=slot.steps,
                    invalid_rate=slot.invalid / slot.steps,
                    **cut_rates(episode_outcome(slot.episode)),
                    **{column: float(info.get(column, float(info["won"]))) for column in scores},
                    env_error=info.get("env_error", ""),
                )
                if with_transcripts:
                    slot.result[TRANSCRIPT] = transcript(slot.episode)
                records[slot.result.pop("index")] = slot.result
                if on_episode_end is not None:
                    on_episode_end(slot.result)
                progress.update()
        active = [slot if not slot.done else start(slot.env) for slot in active if not slot.done or todo]
    progress.close()
    for env in pool:
        env.close()
    return [records[i] for i in range(len(task_seeds))]

"""Demonstrations for the warm start: a demonstrator plays training tasks, and every step becomes one
example whose prompt is rendered by the very connector code RL uses.

The prompt comes from :func:`~hgpo_rllib.connectors.env_to_module.history_window.prompt_connector` with the
env, K and env-config keywords RL uses. Each step stores the prompt (``"prompt"``) and its renderings with
fewer of the oldest history records (``"prompt_fewer_records"``), so the SFT fits it to the prompt budget with
RL's own function (:func:`~hgpo_rllib.rl_module.prompts.fit_prompts`, chat template included) and RL later
sees byte-identical prompts. The response is ``<think>thought</think><action>command</action>``; thoughts are
templates over what the agent sees. With the env setting ``answer_format="plan_execute"`` (HiPER,
docs/hiper.md) it is ``<switch>..</switch><subgoal>..</subgoal><action>command</action>`` instead: the subgoal
names the demonstrator's current phase, and the env, which gets that text as its action, records the switch
and subgoal in its infos, so the connector shows the current subgoal in the next prompt as in RL. In a team
env (docs/drmas.md) the env's expert team plays, every turn's prompt is the acting role's, rendered from that
role's own episode inside RLlib's ``MultiAgentEpisode`` as the team's env runner renders it, and each example
names its role. Demonstrations are appended per finished episode, so an interrupted collection resumes.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from tqdm.auto import tqdm

import envs
from envs.common.actions import PLAN_EXECUTE, THINK_ACTION, current_subgoal
from envs.common.team_env import ALL, TeamTextEnv
from envs.file_import import load_object
from hgpo_rllib.connectors.env_to_module.history_window import prompt_connector
from hgpo_rllib.evaluation.rollout import EpisodeSlot, new_episode, read_played_episodes, task_seeds
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, HistoryPrompt
from hgpo_rllib.warm_start.format import plan_execute_text, response_text


class Demonstrator(Protocol):
    """Chooses the next step from what the agent has seen: (thought, command), and, for the
    plan-execute format, the subgoal of the phase that step belongs to."""

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]: ...

    def subgoal(
        self,
        env: Any,
        observations: Sequence[str],
        commands: Sequence[str],
        admissible: Sequence[str],
        command: str,
    ) -> str:
        """The subgoal of the phase that ``command`` (what :meth:`act` chose in this same state)
        serves; it changes exactly when the phase does (the answer then switches)."""
        ...


class ExpertDemonstrator:
    """The env's own expert (``expert_action()``); its thought only restates the chosen command.
    ``subgoal_of`` (the env's ``WarmStartFacts.expert_subgoal``) names its phases; without one (an env
    whose expert has none) it can demonstrate the think-action format only."""

    def __init__(self, subgoal_of: Callable[[Any, str], str] | None = None, env_name: str = ""):
        self.subgoal_of = subgoal_of
        self.env_name = env_name

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]:
        command = env.unwrapped.expert_action() or "look"
        return f"The next step of my task is to {command}.", command

    def subgoal(
        self,
        env: Any,
        observations: Sequence[str],
        commands: Sequence[str],
        admissible: Sequence[str],
        command: str,
    ) -> str:
        if self.subgoal_of is None:
            raise ValueError(
                f"the expert of {self.env_name or 'this env'!r} names no subgoals, which "
                f"answer_format={PLAN_EXECUTE!r} demonstrations need (its WarmStartFacts.expert_subgoal "
                "is None; use the searcher where the env has one)"
            )
        return self.subgoal_of(env.unwrapped, command)


def make_demonstrator(
    env_name: str, name: str, history_length: int = 2, env_config: dict[str, Any] | None = None
) -> Demonstrator:
    """``expert`` (any env) or ``searcher`` (where the env's ``WarmStartFacts.searcher`` names one:
    decides from what the prompt shows, its last ``history_length`` steps included: ALFWorld's
    searches receptacles in a fixed order, WebShop's buys the result that best matches the
    instruction)."""
    facts = envs.env_facts(env_name, env_config).warm_start
    if name == "expert":
        subgoals = facts.expert_subgoal
        return ExpertDemonstrator(load_object(subgoals) if subgoals else None, env_name)
    if name == "searcher":
        if facts.searcher is None:
            raise ValueError(
                f"{env_name!r} has no demonstrator 'searcher' (its WarmStartFacts.searcher is None)"
            )
        return load_object(facts.searcher)(history_length)
    raise ValueError(f"unknown demonstrator {name!r}; choose 'expert' or 'searcher'")


def prompt_renderer(
    env_name: str, env_config: dict[str, Any], history_length: int, prompt_turns: str = ONE_USER_TURN
) -> Callable[[Any], HistoryPrompt]:
    """episode -> prompt, through the same connector settings RL builds from this config."""
    return prompt_connector(env_name, env_config, history_length, prompt_turns).prompt


#: A demonstration step's key for its prompt's renderings with 1, 2, ... fewer history records.
FEWER_RECORDS = "prompt_fewer_records"


def prompt_fields(prompt: HistoryPrompt) -> dict[str, Any]:
    """How a demonstration step stores its prompt (:func:`step_prompt` reads it back); a prompt split
    into turns is stored as [system, user] lists."""
    return {"prompt": prompt.renderings[0], FEWER_RECORDS: list(prompt.renderings[1:])}


def step_prompt(step: dict[str, Any]) -> HistoryPrompt | None:
    """A stored step's prompt; None for a step recorded before its shorter renderings were stored
    (only its whole prompt is known)."""
    if FEWER_RECORDS not in step:
        return None
    renderings = (step["prompt"], *step[FEWER_RECORDS])
    return HistoryPrompt(tuple(r if isinstance(r, str) else tuple(r) for r in renderings))


def _seen(episode: Any) -> tuple[list[str], list[str], Sequence[str]]:
    """What the agent has seen of a running episode: its observations, the commands executed (as the
    env reports them) and the current admissible actions."""
    infos = episode.get_infos()
    commands = [info["command"] for info in infos[1:]]
    return list(episode.get_observations()), commands, infos[-1]["admissible_actions"]


def demonstrator_answer(demonstrator: Demonstrator, slot: EpisodeSlot) -> tuple[str, str]:
    """The demonstrator's (thought, command) in the state of a running episode, from what the agent
    has seen so far."""
    return demonstrator.act(slot.env, *_seen(slot.episode))


def demonstrated_response(demonstrator: Demonstrator, env: Any, episode: Any) -> str:
    """The demonstrator's whole answer in the state of a running ``episode`` of ``env``, in the env's
    own answer format (so the env, given it as the action, parses and records it as RL's answers):
    ``<think>``/``<action>``, or plan-execute with the switch decided against the subgoal the prompt
    shows (:func:`envs.current_subgoal` of the episode's infos, as the connector reads it)."""
    observations, commands, admissible = _seen(episode)
    thought, command = demonstrator.act(env, observations, commands, admissible)
    if getattr(env.unwrapped, "answer_format", THINK_ACTION) != PLAN_EXECUTE:
        return response_text(thought, command)
    subgoal = demonstrator.subgoal(env, observations, commands, admissible, command)
    return plan_execute_text(subgoal, command, current_subgoal(episode.get_infos()))


def play_demonstration(
    env: Any, demonstrator: Demonstrator, render: Callable[[Any], HistoryPrompt], task_seed: int
) -> dict[str, Any]:
    """One episode: every step's rendered prompt and the demonstrator's response."""
    observation, info = env.reset(seed=task_seed)
    episode = new_episode(observation, info)
    steps = []
    done = False
    while not done:
        answer = demonstrated_response(demonstrator, env, episode)
        steps.append({**prompt_fields(render(episode)), "response": answer})
        observation, reward, terminated, truncated, info = env.step(answer)
        episode.add_env_step(
            observation, answer, reward, infos=info, terminated=terminated, truncated=truncated
        )
        done = terminated or truncated
    return {
        "task_seed": task_seed,
        "task_type": info.get("task_type", ""),
        "won": bool(info["won"]),
        "steps": steps,
    }


def play_team_demonstration(
    env: TeamTextEnv, render: Callable[[Any], HistoryPrompt], task_seed: int
) -> dict[str, Any]:
    """One team episode played by the env's expert team: every turn's acting role, its prompt
    (rendered from the role's own episode, as RL renders it) and the expert's answer."""
    observations, infos = env.reset(seed=task_seed)
    episode = MultiAgentEpisode(
        observation_space=gym.spaces.Dict(env.observation_spaces),
        action_space=gym.spaces.Dict(env.action_spaces),
    )
    episode.add_env_reset(observations=observations, infos=infos)
    steps = []
    done = False
    while not done:
        (role,) = observations
        answer = env.expert_action(role)
        steps.append(
            {"role": role, **prompt_fields(render(episode.agent_episodes[role])), "response": answer}
        )
        observations, rewards, terminateds, truncateds, infos = env.step({role: answer})
        episode.add_env_step(
            observations, {role: answer}, rewards, infos, terminateds=terminateds, truncateds=truncateds
        )
        done = terminateds[ALL] or truncateds[ALL]
    outcome = infos[role]
    return {
        "task_seed": task_seed,
        "task_type": outcome.get("task_type", ""),
        "won": bool(outcome["won"]),
        "steps": steps,
    }


_worker: dict[str, Any] = {}


def _start_worker(
    env_name: str, env_config: dict[str, Any], history_length: int, prompt_turns: str, demonstrator: str
) -> None:
    """Each collecting process plays with its own env and demonstrator. Ctrl-C is the parent's to
    handle (it saves what has finished and prints how to resume): the workers ignore it, instead of
    each printing a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker["env"] = envs.make_env(env_name, env_config)
    _worker["render"] = prompt_renderer(env_name, env_config, history_length, prompt_turns)
    if not isinstance(_worker["env"], TeamTextEnv):
        _worker["actor"] = make_demonstrator(env_name, demonstrator, history_length, env_config)
    elif demonstrator != "expert":
        raise ValueError(f"a team env's demonstrator is its expert team, not {demonstrator!r}")


def _play_task(task_seed: int) -> dict[str, Any]:
    if isinstance(_worker["env"], TeamTextEnv):
        return play_team_demonstration(_worker["env"], _worker["render"], task_seed)
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
    prompt_turns: str = ONE_USER_TURN,
) -> list[dict[str, Any]]:
    """Play ``episodes`` tasks in ``workers`` processes, appending each finished one to ``path`` (JSON
    lines); tasks already there are not played again. Returns the records in task order."""
    seeds = task_seeds(seed, episodes)
    done = read_played_episodes(path)
    todo = [s for s in seeds if s not in done]
    init = (env_name, env_config, history_length, prompt_turns, demonstrator)
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=init)
    try:
        with (
            path.open("a") as out,
            tqdm(total=episodes, initial=episodes - len(todo), desc="demonstrations", unit="ep") as progress,
        ):
            for record in pool.map(_play_task, todo) if todo else ():
                out.write(json.dumps(record) + "\n")
                out.flush()
                done[record["task_seed"]] = record
                progress.update()
                progress.set_postfix(
                    won=sum(r["won"] for r in done.values()),
                    steps=sum(len(r["steps"]) for r in done.values()),
                )
    finally:  # on Ctrl-C: the games being played end, the queued ones never start
        pool.shutdown(wait=True, cancel_futures=True)
    return [done[s] for s in seeds]

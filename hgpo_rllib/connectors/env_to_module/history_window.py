"""Env-to-module: each step's prompt from the episode's own history window (docs/hgpo_algorithm.md §5.1).

The prompt is the env's own template (``envs.get_prompt_renderer``) over one
:class:`~envs.common.prompts.PromptContext`: the task, the earlier (observation, command) records (the
template shows the last ``history_length`` = K of them), the current raw observation and the
admissible actions, as verl-agent's memory manager builds it, and, for HiPER's plan-execute answer
format, the subgoal in force (the latest valid turn's ``<subgoal>``, read back from the episode's
infos; docs/hiper.md), and in a team env (docs/drmas.md) the acting role and what its teammates said
since the last game step. In a team env each role's episode is its own turns, so the history window
shows the role's own (observation, command) records.

The module gets each step's prompt as a :class:`~hgpo_rllib.rl_module.prompts.HistoryPrompt`: the
template's text with the window, then with one, two, ... fewer of the oldest shown records (down to
one). ``TokenPolicyAPI.encode_prompts`` takes the first that fits the prompt budget after the
model's chat template (a prompt over it loses its oldest whole records first, never the task or the
template's opening), left-pads the batch and says which prompts were cut (``prompt_cut``). With
``prompt_turns="system_user"`` each rendering is the template's (system, user) turns
(``envs.get_prompt_turns_renderer``): the task and instructions, then the window and the observation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override

import envs
from envs.common.actions import current_subgoal
from envs.common.prompts import PromptContext, prompt_settings
from hgpo_rllib.columns import ALLOWED_IDS
from hgpo_rllib.rl_module.apis import TokenPolicyAPI
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, HistoryPrompt, Rendering, check_prompt_turns

PromptRenderer = Callable[..., Rendering]


def episode_context(episode: SingleAgentEpisode, history_length: int) -> PromptContext:
    """What the template shows for the episode's next action.

    History record j pairs the observation of step j with the command executed on it, which the
    env reports as ``info["command"]`` of the following step. The current subgoal is carried the
    same way, from the infos (None unless the env plays the plan-execute format).
    """
    observations = episode.get_observations()
    infos = episode.get_infos()
    steps = len(observations) - 1
    history = [(observations[j], infos[j + 1]["command"]) for j in range(steps)]
    info = infos[-1]
    return PromptContext(
        info["task"],
        history,
        observations[-1],
        info["admissible_actions"],
        steps,
        history_length,
        current_subgoal=current_subgoal(infos),
        role=info.get("role"),
        team_context=tuple(info.get("team_context", ())),
    )


def episode_prompt(
    episode: SingleAgentEpisode,
    render_prompt: PromptRenderer,
    history_length: int,
    render_kwargs: Mapping[str, Any] | None = None,
) -> HistoryPrompt:
    """The prompt for the episode's next action: rendered with the history window K, then with one,
    two, ... fewer of the oldest shown records, down to one (never none: a template's no-history
    form may be another template, without the task, as ALFWorld's)."""
    context = episode_context(episode, history_length)
    kwargs = render_kwargs or {}
    fewer = range(min(history_length, context.step) - 1, 0, -1)
    return HistoryPrompt(
        (
            render_prompt(context, **kwargs),
            *(render_prompt(dataclasses.replace(context, history_length=k), **kwargs) for k in fewer),
        )
    )


def episode_prompt_text(
    episode: SingleAgentEpisode,
    render_prompt: PromptRenderer,
    history_length: int,
    render_kwargs: Mapping[str, Any] | None = None,
) -> Rendering:
    """The prompt text (or its turns) for the episode's next action, with the whole history window."""
    return render_prompt(episode_context(episode, history_length), **(render_kwargs or {}))


class HistoryWindowPrompt(ConnectorV2):
    """Emits ``prompt_ids``/``prompt_mask`` for the given (active) episodes, one row each, and
    ``allowed_ids`` (each step's admissible-action tokens) when the module constrains to them; in the
    plan-execute format, the tokens of the switch blocks, the vocabulary's subgoal blocks and the
    admissible actions' blocks (:func:`envs.plan_execute_blocks`)."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        render_prompt: PromptRenderer,
        history_length: int,
        render_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.render_prompt = render_prompt
        self.history_length = history_length
        self.render_kwargs = dict(render_kwargs or {})

    def prompt(self, episode: SingleAgentEpisode) -> HistoryPrompt:
        """The episode's next prompt, with its renderings of fewer records (before the chat template)."""
        return episode_prompt(episode, self.render_prompt, self.history_length, self.render_kwargs)

    def prompt_text(self, episode: SingleAgentEpisode) -> Rendering:
        """The rendered prompt of the episode's next step (before the chat template)."""
        return episode_prompt_text(episode, self.render_prompt, self.history_length, self.render_kwargs)

    @override(ConnectorV2)
    def __call__(
        self,
        *,
        rl_module: TokenPolicyAPI,
        batch: dict[str, Any],
        episodes: Sequence[SingleAgentEpisode],
        **kwargs: Any,
    ) -> dict[str, Any]:
        batch.update(rl_module.encode_prompts([self.prompt(ep) for ep in episodes]))
        if rl_module.constrains_to_admissible:
            admissible = [ep.get_infos(-1)["admissible_actions"] for ep in episodes]
            if self.render_kwargs.get("answer_format") == envs.PLAN_EXECUTE:  # whole blocks (tiny model)
                subgoals = envs.subgoals_of_blocks(rl_module.action_vocabulary or ())
                admissible = [envs.plan_execute_blocks(subgoals, actions) for actions in admissible]
            batch[ALLOWED_IDS] = rl_module.allowed_ids(admissible)
        return batch


def prompt_connector(
    env: str, env_config: Mapping[str, Any], history_length: int, prompt_turns: str = ONE_USER_TURN
) -> HistoryWindowPrompt:
    """The env's own prompt template with the history window K, as one text or, with ``prompt_turns=
    "system_user"``, split into a system and a user turn. ``env_config`` entries that the template
    also takes as keyword arguments (e.g. KeyChest's ``require_tags``) are passed on, so prompt and
    env agree."""
    if check_prompt_turns(prompt_turns) == ONE_USER_TURN:
        render = envs.get_prompt_renderer(env, env_config)
    else:
        render = envs.get_prompt_turns_renderer(env, env_config)
    return HistoryWindowPrompt(
        render_prompt=render,
        history_length=history_length,
        render_kwargs=prompt_settings(render, env_config),
    )

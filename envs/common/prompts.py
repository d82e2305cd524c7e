"""Pieces shared by every environment's prompt template (docs/hgpo_algorithm.md §5.1).

The history window shows the last ``history_length`` (observation, action) records, numbered by their
absolute step (1-based), exactly as verl-agent's ``SimpleMemory.fetch`` formats them. A template takes
the env's ``answer_format`` as a keyword argument: the plan-execute format (HiPER, docs/hiper.md)
closes the prompt with the current subgoal and the three-tag rules (:func:`answer_instruction`).

A template may also come split into chat turns (:class:`PromptTurns`, the option
``prompt_turns="system_user"`` of docs/models.md): its task and instructions as the system turn, its
history window, current observation and admissible actions as the user turn. The system turn is then the
same at every step of an episode, and fitting a prompt to its budget only ever shortens the user turn.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from envs.common.actions import THINK_ACTION, check_answer_format

HistoryRecord = tuple[str, str]  # (observation the action was taken on, the executed command)


@dataclass(frozen=True)
class PromptContext:
    """Everything a prompt template may show for one step (the history-window connector builds it).

    An env's template is a function of this one argument (``render_prompt(context)``), so new fields
    (``current_subgoal``, a team's ``role`` and ``team_context``) are added, with defaults, without
    breaking existing templates.
    """

    task: str
    history: Sequence[HistoryRecord]  #: every earlier step's (observation, executed command)
    observation: str  #: the current raw observation
    admissible_actions: Sequence[str]
    step: int  #: steps already taken (0 at the first prompt)
    history_length: int  #: K: how many of the latest records the template shows
    #: The plan-execute format's subgoal in force (:func:`~envs.common.actions.current_subgoal`);
    #: None before there is one. Think-action templates ignore it. A planner/executor team shows its
    #: subgoal in force here (``info["subgoal"]``).
    current_subgoal: str | None = None
    #: The role that acts in a team env (:mod:`envs.common.team_env`, its ``info["role"]``); a team's
    #: template picks the role's own prompt by it. None for single-agent envs.
    role: str | None = None
    #: What the role's teammates said since the last game step, as ``(role, text)`` pairs (a team env's
    #: ``info["team_context"]``); empty for single-agent envs.
    team_context: Sequence[tuple[str, str]] = ()


class PromptTurns(NamedTuple):
    """A prompt as two chat turns: ``system`` holds the task and the instructions, ``user`` the
    history window, the current observation and the admissible actions."""

    system: str
    user: str


DEFAULT_TEMPLATE_INSTRUCTION = (
    "Think step by step inside <think> </think> tags, then give your next action inside "
    "<action> </action> tags."
)

# HiPER's plan-execute rules (docs/hiper.md, "The plan-execute answer format"), in our words.
PLAN_EXECUTE_INSTRUCTION = (
    "Your current subgoal is: {current_subgoal}\n"
    "Answer with exactly these three tagged blocks, in this order, and nothing else (no reasoning "
    "outside them):\n"
    "<switch>KEEP or SWITCH</switch>: KEEP to go on with the current subgoal, SWITCH to set a new one.\n"
    "<subgoal>...</subgoal>: after KEEP, the current subgoal copied exactly; after SWITCH, a new short "
    "subgoal that a few actions can reach (one part of the task, not the whole task).\n"
    "<action>...</action>: exactly one admissible action, your next step towards the subgoal."
)


def shown_subgoal(context: PromptContext) -> str:
    """The current subgoal as a prompt shows it: "None" before there is one, as in HiPER's prompts."""
    return "None" if context.current_subgoal is None else context.current_subgoal


def answer_instruction(context: PromptContext, answer_format: str, think_action: str) -> str:
    """The prompt's closing instruction: the template's own ``think_action`` text, or for the
    plan-execute format the current subgoal and the rules of its three tags."""
    check_answer_format(answer_format)
    if answer_format == THINK_ACTION:
        return think_action
    return PLAN_EXECUTE_INSTRUCTION.format(current_subgoal=shown_subgoal(context))


def default_prompt(context: PromptContext, *, answer_format: str = THINK_ACTION) -> str:
    """The prompt of an env without its own template: the task, the last K records, the current
    observation and the admissible actions (when the env lists them), in the shape of §5.1's."""
    task, situation, instruction = _default_parts(context, answer_format)
    return "\n".join([task, *situation, instruction])


def default_prompt_turns(context: PromptContext, *, answer_format: str = THINK_ACTION) -> PromptTurns:
    """:func:`default_prompt` as chat turns: its task line and closing instruction as the system turn,
    the lines between as the user turn."""
    task, situation, instruction = _default_parts(context, answer_format)
    return PromptTurns(f"{task}\n{instruction}", "\n".join(situation))


def _default_parts(context: PromptContext, answer_format: str) -> tuple[str, list[str], str]:
    """:func:`default_prompt`'s task line, the lines of its situation, and its closing instruction."""
    lines = []
    records, shown = format_history(context.history, context.history_length)
    if context.step > 0 and shown:
        lines += [
            f"Prior to this step, you have already taken {context.step} step(s). Below are the most "
            f"recent {shown} observations and the corresponding actions you took:",
            records,
        ]
    lines.append(
        f"You are now at step {context.step + 1} and your current observation is: {context.observation}"
    )
    if context.admissible_actions:
        actions = ", ".join(f"'{action}'" for action in context.admissible_actions)
        lines.append(f"Your admissible actions of the current situation are: [{actions}].")
    instruction = answer_instruction(context, answer_format, DEFAULT_TEMPLATE_INSTRUCTION)
    return f"Your task is to: {context.task}", lines, instruction


def format_history(history: Sequence[HistoryRecord], history_length: int) -> tuple[str, int]:
    """Return the formatted last ``history_length`` records and how many were shown."""
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length}")
    records = list(history)
    recent = records[max(0, len(records) - history_length) :]
    first = len(records) - len(recent) + 1
    lines = [
        f"[Observation {first + j}: '{obs}', Action {first + j}: '{action}']"
        for j, (obs, action) in enumerate(recent)
    ]
    return "\n".join(lines), len(recent)


def history_fields(
    history: Sequence[HistoryRecord], history_length: int, step_index: int
) -> dict[str, object]:
    """The history placeholders of the reference's with-history templates (docs/hgpo_algorithm.md §5.1):
    ``step_count``, ``history_length`` (records shown), ``action_history`` and ``current_step``."""
    action_history, shown = format_history(history, history_length)
    return {
        "step_count": step_index,
        "history_length": shown,
        "action_history": action_history,
        "current_step": step_index + 1,
    }


def prompt_settings(render: Callable[..., str], env_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``env_config`` entries a template also takes as keyword-only arguments (e.g. KeyChest's
    ``require_tags``), so prompt and env agree."""
    params = inspect.signature(render).parameters
    return {
        k: v
        for k, v in dict(env_config or {}).items()
        if k in params and params[k].kind is inspect.Parameter.KEYWORD_ONLY
    }

"""The verl-agent ALFWorld prompt (docs/hgpo_algorithm.md §5.1) and text to build a tiny tokenizer from.

The templates are verl-agent's ``ALFWORLD_TEMPLATE_NO_HIS`` / ``ALFWORLD_TEMPLATE`` verbatim. The
admissible actions are formatted as the reference's ``build_text_obs`` does: each quoted with single
quotes, ``'help'`` dropped, joined by ``"\\n "`` (a newline and a space). With
``answer_format="plan_execute"`` (HiPER) the same text closes with the current subgoal and the
three-tag rules instead of the think/action instruction
(:func:`~envs.common.prompts.answer_instruction`). Split into chat turns
(:func:`render_prompt_turns`), the with-history template's opening line (with the task) and the
closing instruction are the system turn; the template's other lines, verbatim, the user turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import alfworld.gen.constants as alfred
from alfworld.gen.goal_library import gdict

from envs.alfworld.logic import GRAMMARS, TASK_TYPES, grammar_template
from envs.common.actions import THINK_ACTION
from envs.common.prompts import PromptContext, PromptTurns, answer_instruction, history_fields

# verl-agent's closing instruction; note its space before the first newline ("tags. \n").
_INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags.\n"
)

# The templates' text before their closing instruction.
_SITUATION_NO_HIS = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

"""  # noqa: E501 - verbatim reference text

_SITUATION = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

"""  # noqa: E501 - verbatim reference text

ALFWORLD_TEMPLATE_NO_HIS = _SITUATION_NO_HIS + _INSTRUCTION
ALFWORLD_TEMPLATE = _SITUATION + _INSTRUCTION
# The chat turns' pieces: the opening line with the task, and the lines after the opening.
_OPENING, _USER = _SITUATION.strip().split("\n", 1)
_USER_NO_HIS = _SITUATION_NO_HIS.strip().split("\n", 1)[1]

ADMISSIBLE_SEPARATOR = "\n "


def format_admissible(admissible_actions: Sequence[str]) -> str:
    return ADMISSIBLE_SEPARATOR.join(f"'{a}'" for a in admissible_actions if a != "help")


def render_prompt(context: PromptContext, *, answer_format: str = THINK_ACTION) -> str:
    """The prompt for one step; ``context.history`` holds the (observation, command) pairs of all
    earlier steps."""
    c = context
    instruction = answer_instruction(c, answer_format, _INSTRUCTION)
    fields = _fields(c)
    if "action_history" not in fields:
        return _SITUATION_NO_HIS.format(**fields) + instruction
    return _SITUATION.format(task_description=c.task, **fields) + instruction


def render_prompt_turns(context: PromptContext, *, answer_format: str = THINK_ACTION) -> PromptTurns:
    """:func:`render_prompt` as chat turns: the opening line with the task and the closing instruction
    as the system turn (the same at every step), the history, observation and actions as the user turn."""
    c = context
    instruction = answer_instruction(c, answer_format, _INSTRUCTION)
    fields = _fields(c)
    user = _USER.format(**fields) if "action_history" in fields else _USER_NO_HIS.format(**fields)
    return PromptTurns(f"{_OPENING.format(task_description=c.task)}\n{instruction.strip()}", user)


def _fields(context: PromptContext) -> dict[str, object]:
    """The template's fields but the task: the current observation, the admissible actions and, after
    the first step with K > 0, the history's (the no-history template has none)."""
    c = context
    if c.step != len(c.history):
        raise ValueError(f"history must hold all {c.step} earlier steps, got {len(c.history)}")
    fields: dict[str, object] = {
        "current_observation": c.observation,
        "admissible_actions": format_admissible(c.admissible_actions),
    }
    if c.step > 0 and c.history_length > 0:
        fields.update(history_fields(c.history, c.history_length, c.step))
    return fields


def tokenizer_corpus() -> list[str]:
    """Representative ALFWorld text: prompts, grammar, object and receptacle names, sample turns."""
    objects = sorted({o.lower() for o in alfred.OBJECTS if not o.endswith("Sliced")})
    receptacles = sorted({r.lower() for r in alfred.RECEPTACLES})
    tasks = [
        template.format(obj=o.lower(), recep=r.lower(), toggle=r.lower(), mrecep="")
        for task_type in TASK_TYPES
        for template in gdict[task_type]["templates"]
        for o, r in zip(sorted(alfred.OBJECTS)[::7], sorted(alfred.RECEPTACLES), strict=False)
    ]
    seen = ", ".join(f"a {o} {i % 3 + 1}" for i, o in enumerate(objects[:12]))
    commands = [
        f"{verb.format(o=f'{o} {i % 3 + 1}', r=f'{r} {i % 4 + 1}')}"
        for i, (o, r) in enumerate(zip(objects, receptacles * 4, strict=False))
        for verb in (
            "go to {r}",
            "open {r}",
            "close {r}",
            "take {o} from {r}",
            "move {o} to {r}",
            "put {o} in/on {r}",
            "examine {r}",
            "use {o}",
            "heat {o} with {r}",
            "cool {o} with {r}",
            "clean {o} with {r}",
            "slice {o} with {r}",
        )
    ] + ["look", "inventory", "help"]
    observations = [
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
        f"you see {', '.join(f'a {r} 1' for r in receptacles)}.\n\nYour task is to: {tasks[0]}.",
        f"You arrive at countertop 1. On the countertop 1, you see {seen}.",
        f"You arrive at loc 7. On the countertop 1, you see {seen}.",
        f"You open the drawer 2. The drawer 2 is open. In it, you see {seen}.",
        "You arrive at fridge 1. The fridge 1 is closed.",
        *(f"You arrive at cabinet {n}. The cabinet {n} is closed." for n in range(1, 12)),
        *(f"You arrive at loc {n}. The drawer {n % 9 + 1} is closed." for n in range(0, 100, 11)),
        "You pick up the apple 1 from the countertop 1.",
        "You move the apple 1 to the countertop 1.",
        "You put the apple 1 in/on the countertop 1.",
        "You heat the apple 1 using the microwave 1.",
        "You cool the apple 1 using the fridge 1.",
        "You clean the apple 1 using the sinkbasin 1.",
        "You turn on the desklamp 1.",
        "You are carrying: a apple 1.",
        "Nothing happens.",
    ]
    history = list(zip(observations[1:4], commands[:3], strict=True))
    prompts = [
        render_prompt(PromptContext(tasks[0], [], observations[0], commands[:30], 0, 2)),
        render_prompt(PromptContext(tasks[1], history, observations[4], commands[30:60], len(history), 2)),
        "<think>I need to find the apple first, so I will check the countertop.</think>"
        "<action>go to countertop 1</action>",
    ]
    return prompts + tasks + commands + observations + [grammar_template(g) for g in GRAMMARS]

"""KeyChest's prompt: the ALFWorld template (docs/hgpo_algorithm.md §5.1) cut down for tiny word-level models.

Like the reference, the prompt holds the task, the last K (observation, action) records when there is
history, the current observation and the admissible actions. Unlike it, it states no step count
("you have already taken N steps"): on KeyChest's short solutions the step number alone would tell
whether the key is carried, and the task exists to make that knowable only from the history (the
"context inconsistency" HGPO addresses). With ``history_length=0`` the prompts of the chest room with
and without the key are therefore identical. With ``answer_format="plan_execute"`` (HiPER) the prompt
also shows the current subgoal and a one-line statement of the three tags. Split into chat turns
(:func:`render_prompt_turns`), the task line and the instruction are the system turn, the other lines the
user turn.
"""

from __future__ import annotations

from envs.common.actions import PLAN_EXECUTE, THINK_ACTION, check_answer_format
from envs.common.prompts import PromptContext, PromptTurns, format_history, shown_subgoal
from envs.keychest.env import COMMANDS, TASK, all_observation_texts

TAG_INSTRUCTION = "Think in <think> </think>, then answer in <action> </action>."
# HiPER's three tags (docs/hiper.md, "The plan-execute answer format"), as briefly as the rest.
PLAN_TAG_INSTRUCTION = (
    "Answer <switch>KEEP or SWITCH</switch><subgoal>...</subgoal><action>...</action>: KEEP goes on "
    "with the subgoal (copy it), SWITCH sets a new short one; the action is one of the actions."
)


def render_prompt(
    context: PromptContext, *, require_tags: bool = False, answer_format: str = THINK_ACTION
) -> str:
    """Render one step's prompt; ``require_tags`` adds the ``<think>``/``<action>`` instruction,
    ``answer_format="plan_execute"`` the current subgoal and the three-tag one instead."""
    task, situation, instruction = _parts(context, require_tags, answer_format)
    return "\n".join([task, *situation, *instruction])


def render_prompt_turns(
    context: PromptContext, *, require_tags: bool = False, answer_format: str = THINK_ACTION
) -> PromptTurns:
    """:func:`render_prompt` as chat turns: the task line and the instruction (if any) as the system
    turn, the history, observation, actions and subgoal as the user turn."""
    task, situation, instruction = _parts(context, require_tags, answer_format)
    return PromptTurns("\n".join([task, *instruction]), "\n".join(situation))


def _parts(
    context: PromptContext, require_tags: bool, answer_format: str
) -> tuple[str, list[str], list[str]]:
    """The prompt's task line, the lines of its situation, and its closing instruction's lines."""
    check_answer_format(answer_format)
    c = context
    lines = []
    if c.step > 0 and c.history_length > 0:
        records, shown = format_history(c.history, c.history_length)
        if shown:
            lines += ["History:", records]
    lines += [f"Now: {c.observation}", f"Actions: {' | '.join(c.admissible_actions)}"]
    instruction = []
    if answer_format == PLAN_EXECUTE:
        lines.append(f"Subgoal: {shown_subgoal(c)}")
        instruction.append(PLAN_TAG_INSTRUCTION)
    elif require_tags:
        instruction.append(TAG_INSTRUCTION)
    return f"Task: {c.task}", lines, instruction


def tokenizer_corpus() -> list[str]:
    """Every text the env and its prompt produce, so a tokenizer trained on it covers everything.

    Besides each observation and command on its own, one prompt shows every observation as a history
    record (records numbered 1 to a few hundred, beyond any practical ``max_steps``), with each command
    as an action, and the tag instruction; each command also appears as a well-formed tagged answer.
    """
    observations = all_observation_texts()
    history = [(obs, COMMANDS[i % len(COMMANDS)]) for i, obs in enumerate(observations)]
    prompt = render_prompt(
        PromptContext(TASK, history, observations[0], COMMANDS, len(history), len(history)), require_tags=True
    )
    answers = [f"<think></think><action>{command}</action>" for command in COMMANDS]
    return [TASK, *observations, *COMMANDS, *answers, prompt]

"""KeyChest's prompt: the ALFWorld template (docs/hgpo_algorithm.md §5.1) cut down for tiny word-level models.

Like the reference, the prompt holds the task, the last K (observation, action) records when there is
history, the current observation and the admissible actions. Unlike it, it states no step count
("you have already taken N steps"): on KeyChest's short solutions the step number alone would tell
whether the key is carried, and the task exists to make that knowable only from the history (the
"context inconsistency" HGPO addresses). With ``history_length=0`` the prompts of the chest room with
and without the key are therefore identical.
"""

from __future__ import annotations

from envs.common.prompts import PromptContext, format_history
from envs.keychest.env import COMMANDS, TASK, all_observation_texts

TAG_INSTRUCTION = "Think in <think> </think>, then answer in <action> </action>."


def render_prompt(context: PromptContext, *, require_tags: bool = False) -> str:
    """Render one step's prompt; ``require_tags`` adds the ``<think>``/``<action>`` instruction."""
    c = context
    lines = [f"Task: {c.task}"]
    if c.step > 0 and c.history_length > 0:
        records, shown = format_history(c.history, c.history_length)
        if shown:
            lines += ["History:", records]
    lines += [f"Now: {c.observation}", f"Actions: {' | '.join(c.admissible_actions)}"]
    if require_tags:
        lines.append(TAG_INSTRUCTION)
    return "\n".join(lines)


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

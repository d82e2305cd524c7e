"""WebShop's prompt, as verl-agent's ``WebshopEnvironmentManager`` builds it (templates quoted verbatim).

What verl-agent feeds the templates, reproduced by :func:`render_prompt`:

* the task is the instruction text;
* an observation is shown without its header: the ``[SEP]`` fields after the instruction, each in
  single quotes, re-joined by ``" [SEP] "`` (the page unchanged when it lacks the instruction, as the
  purchase page does). History records show their observations the same way;
* the admissible actions are listed one per line, each as ``'action',``;
* step 0, or ``history_length == 0``, uses the no-history template; later steps show the last
  ``history_length`` records (:func:`~envs.common.prompts.format_history`), the number of steps taken
  and the current step number. Upstream verl-agent drops the history from prompts over 13,000
  characters; the HGPO recipe removed that fallback (docs/hgpo_algorithm.md §5.1), and so do we: the
  model's ``max_prompt_tokens`` budget bounds the length instead (the oldest records go first);
* with ``answer_format="plan_execute"`` (HiPER) the same text closes with the current subgoal and the
  three-tag rules instead of the think/action instruction (:func:`~envs.common.prompts.answer_instruction`);
* split into chat turns (:func:`render_prompt_turns`), the with-history template's opening and task
  lines and the closing instruction are the system turn, its other lines, verbatim, the user turn.
"""

from __future__ import annotations

import os

from envs.common.actions import THINK_ACTION
from envs.common.prompts import PromptContext, PromptTurns, answer_instruction, history_fields
from envs.webshop import pages

# The templates' text before their closing instruction, and the instruction.
_SITUATION_NO_HIS = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

"""  # noqa: W291 - verl-agent's text, trailing spaces included

_SITUATION = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

"""  # noqa: W291, E501 - verl-agent's text, trailing spaces included

_INSTRUCTION = """Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""  # noqa: W291, E501 - verl-agent's text, trailing spaces included

WEBSHOP_TEMPLATE_NO_HIS = _SITUATION_NO_HIS + _INSTRUCTION
WEBSHOP_TEMPLATE = _SITUATION + _INSTRUCTION
# The chat turns' pieces: the opening and task lines, and the lines after them.
_OPENING, _TASK, _USER = _SITUATION.strip().split("\n", 2)
_USER_NO_HIS = _SITUATION_NO_HIS.strip().split("\n", 2)[2]


def format_observation(observation: str, task: str) -> str:
    """verl-agent's ``format_obs``: the fields after the instruction, quoted; else the raw page."""
    fields = observation.split(pages.SEP)
    if task not in fields:
        return observation
    return pages.SEP.join(f"'{field}'" for field in fields[fields.index(task) + 1 :])


def render_prompt(context: PromptContext, *, answer_format: str = THINK_ACTION) -> str:
    """The prompt of step ``context.step`` (steps already taken); ``context.history`` holds every
    earlier step."""
    c = context
    instruction = answer_instruction(c, answer_format, _INSTRUCTION)
    fields = _fields(c)
    template = _SITUATION if "action_history" in fields else _SITUATION_NO_HIS
    return template.format(task_description=c.task, **fields) + instruction


def render_prompt_turns(context: PromptContext, *, answer_format: str = THINK_ACTION) -> PromptTurns:
    """:func:`render_prompt` as chat turns: the opening and task lines and the closing instruction as
    the system turn (the same at every step), the history, page and actions as the user turn."""
    c = context
    instruction = answer_instruction(c, answer_format, _INSTRUCTION)
    fields = _fields(c)
    user = (_USER if "action_history" in fields else _USER_NO_HIS).format(**fields)
    system = f"{_OPENING}\n{_TASK.format(task_description=c.task)}\n{instruction.strip()}"
    return PromptTurns(system, user)


def _fields(context: PromptContext) -> dict[str, object]:
    """The template's fields but the task: the current page, the admissible actions and, after the
    first step with K > 0, the history's (the no-history template has none)."""
    c = context
    fields: dict[str, object] = {
        "current_observation": format_observation(c.observation, c.task),
        "available_actions": "\n".join(f"'{action}'," for action in c.admissible_actions),
    }
    if c.step > 0 and c.history_length > 0:
        records = [(format_observation(obs, c.task), command) for obs, command in c.history]
        fields.update(history_fields(records, c.history_length, c.step))
    return fields


def tokenizer_corpus(data_dir: str | os.PathLike[str] | None = None, num_episodes: int = 20) -> list[str]:
    """Text to train a tiny test tokenizer on: templates, page words and real prompts.

    On the data (``data_dir``, ``$WEBSHOP_DATA_DIR`` or the shipped catalog), the scripted buyer plays
    the first ``num_episodes`` goals and every prompt and answer is included, plus the title and option
    values of every tenth product.
    """
    fixed = [
        WEBSHOP_TEMPLATE_NO_HIS,
        WEBSHOP_TEMPLATE,
        "WebShop",
        "Instruction:",
        pages.SEARCH_BUTTON,
        pages.BACK_TO_SEARCH,
        pages.NEXT_PAGE,
        pages.PREV_PAGE,
        pages.BUY_NOW,
        *pages.SUB_PAGES,
        "Page 1 (Total results: 50)",
        "Price: $19.99 to $27.99",
        "Rating: N.A.",
        "search[<your query>]",
        pages.done_page("B000000000", {"color": "black"}, 1.0).text,
    ]
    # Imported here so that rendering prompts does not load the search stack (NLTK, SciPy).
    from envs.webshop.env import WebShopEnv
    from envs.webshop.expert import play_episode

    env = WebShopEnv(data_dir=data_dir)
    shop = env.shop
    corpus = list(fixed)
    for index in range(min(num_episodes, len(shop.goals))):
        episode = play_episode(env, options={"goal_index": index})
        task = episode.infos[0]["task"]
        for step, answer in enumerate(episode.answers):
            history = [(episode.observations[t], episode.infos[t + 1]["command"]) for t in range(step)]
            corpus.append(
                render_prompt(
                    PromptContext(
                        task,
                        history,
                        episode.observations[step],
                        episode.infos[step]["admissible_actions"],
                        step,
                        2,
                    )
                )
            )
            corpus.append(answer)
    for product in shop.products[::10]:
        corpus.append(product["Title"])
        corpus += [value for values in product["options"].values() for value in values]
    return corpus


def tokenizer_whole_words(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The catalog's product ids as the pages show them and as click commands write them (lower case).

    A tiny tokenizer that keeps them whole makes choosing a product one token to copy from the prompt;
    split, an id is ten tokens (the BPE pre-tokenizer isolates every digit) among ten look-alike ids per
    page, which a few-million-parameter imitator did not learn to copy (docs/results/webshop_warm_start.md).
    """
    from envs.webshop.data import load_shop

    asins = [product["asin"] for product in load_shop(data_dir).products]
    return list(dict.fromkeys([*asins, *(asin.lower() for asin in asins)]))

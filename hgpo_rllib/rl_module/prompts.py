"""One step's prompt as the model reads it, fitted to the prompt budget (docs/models.md, "Prompts that
do not fit").

The history-window connector hands the module a :class:`HistoryPrompt`: the env template's rendering
of the step with its history window and, after it, the same template with one, two, ... fewer of the
oldest records shown. :func:`fit_prompts` takes the first rendering whose chat-formatted tokens fit
the budget (:func:`prompt_token_limit`), so an over-long prompt loses its oldest whole history
records first, never the task, the instructions or the template's opening. A prompt that does not
fit even with one record (a huge observation) loses tokens from its middle: its first half-budget
of tokens (the opening and the task; at least the whole system turn) and its last (the observation's
end, the closing instruction and the chat template's generation prompt) stay.

The renderings stop at one record: a template's no-history form may be another template (ALFWorld's
has no task line), and a fitted prompt never loses its task. The SFT warm start tokenizes its
examples with these same functions, so it learns on the very prompts RL shows.

A rendering is the template's text, sent as one user turn (:data:`ONE_USER_TURN`, the paper's templates
verbatim), or with ``prompt_turns=`` :data:`SYSTEM_AND_USER` its ``(system, user)`` turns: the task and
instructions, then the history, current observation and admissible actions. Every rendering of a step
has the same system turn, and a prompt cut in its middle keeps the whole system turn in its head.

Pure Python over a Hugging Face tokenizer (no torch): the connectors import :class:`HistoryPrompt`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

#: ``prompt_turns``: the template as one user turn (the default), or split into a system turn (task
#: and instructions) and a user turn (history, current observation, admissible actions).
ONE_USER_TURN = "user"
SYSTEM_AND_USER = "system_user"
PROMPT_TURNS = (ONE_USER_TURN, SYSTEM_AND_USER)
#: One rendering of a prompt: a text (one user turn) or its (system, user) turns.
Rendering = str | tuple[str, str]


@dataclass(frozen=True)
class HistoryPrompt:
    """A step's prompt, ``renderings[i]`` showing the ``i`` oldest records of its history window
    fewer than ``renderings[0]`` (the prompt as the template renders it with the whole window)."""

    renderings: tuple[Rendering, ...]

    def __post_init__(self) -> None:
        if not self.renderings or not all(map(_is_rendering, self.renderings)):
            raise ValueError(
                "a HistoryPrompt needs at least one rendered text or (system, user) pair, got "
                f"{self.renderings!r}"
            )


def _is_rendering(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(text, str) for text in value)


def check_prompt_turns(value: Any) -> str:
    """``prompt_turns``, or a one-line ValueError naming the two it may be."""
    if value not in PROMPT_TURNS:
        raise ValueError(f"prompt_turns={value!r} is invalid: expected one of {PROMPT_TURNS}")
    return value


def rendering_text(prompt: Rendering | list[str]) -> str:
    """A rendering as one text (its turns joined by a newline; a stored pair reads back as a list):
    what a tiny tokenizer is trained on."""
    return prompt if isinstance(prompt, str) else "\n".join(prompt)


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt's token ids within the budget: how many history records it left out
    (``records_dropped``) and how many tokens its middle lost (``tokens_cut``)."""

    ids: list[int]
    records_dropped: int
    tokens_cut: int

    @property
    def cut(self) -> bool:
        """Whether the prompt lost anything to the budget (what the ``prompt_cut_rate`` metric counts)."""
        return self.records_dropped > 0 or self.tokens_cut > 0


def chat_prompt(tokenizer: Any, prompt: Rendering) -> str:
    """A rendered prompt as the model reads it: one user turn in the chat template, if it has one
    (the paper's templates verbatim, as one user message), or a system and a user turn. A template
    that cannot render them (a received or edited one, one without a system role) or that drops the
    system turn is one line naming its file, not Jinja's traceback; so is a pair for a model without a
    chat template."""
    if isinstance(prompt, str):
        if not tokenizer.chat_template:
            return prompt
        messages = [{"role": "user", "content": prompt}]
    else:
        if not tokenizer.chat_template:
            raise ValueError(
                f"{tokenizer.name_or_path}: the model has no chat template, so no system turn: "
                f"prompt_turns={SYSTEM_AND_USER!r} needs one (use {ONE_USER_TURN!r})"
            )
        messages = [{"role": "system", "content": prompt[0]}, {"role": "user", "content": prompt[1]}]
    turns = "a user turn" if len(messages) == 1 else "a system and a user turn"
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except jinja2.TemplateError as exc:
        raise ValueError(
            f"{chat_template_file(tokenizer)}: the chat template cannot render {turns} "
            f"({type(exc).__name__}: {exc})"
        ) from None
    if len(messages) == 2 and prompt[0].strip() not in text:
        raise ValueError(
            f"{chat_template_file(tokenizer)}: the chat template drops the system turn: "
            f"prompt_turns={SYSTEM_AND_USER!r} needs a template with a system role (use {ONE_USER_TURN!r})"
        )
    return text


def chat_template_file(tokenizer: Any) -> Path:
    """Where the tokenizer's chat template came from: its folder's ``chat_template.jinja`` when there
    is one, else the ``chat_template`` of its ``tokenizer_config.json``."""
    folder = Path(tokenizer.name_or_path)
    jinja = folder / "chat_template.jinja"
    return jinja if jinja.is_file() else folder / "tokenizer_config.json"


def prompt_token_limit(max_prompt_tokens: int, max_new_tokens: int, context_length: int | None) -> int:
    """The prompt budget: ``max_prompt_tokens``, and no more than the model's context
    (``max_position_embeddings``; None: unknown) leaves for ``max_new_tokens`` of answer."""
    if context_length is None:
        return max_prompt_tokens
    limit = min(max_prompt_tokens, context_length - max_new_tokens)
    if limit < 1:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's context of "
            f"{context_length} tokens; lower max_new_tokens"
        )
    return limit


def model_context_length(model_config: Any) -> int | None:
    """The positions a Hugging Face model config allows (None when it does not say)."""
    return getattr(model_config, "max_position_embeddings", None)


def as_history_prompt(prompt: HistoryPrompt | Rendering) -> HistoryPrompt:
    """A plain text (or pair of turns) is a prompt without records to leave out."""
    return prompt if isinstance(prompt, HistoryPrompt) else HistoryPrompt((prompt,))


def fit_prompts(
    tokenizer: Any, prompts: Sequence[HistoryPrompt | Rendering], limit: int
) -> list[FittedPrompt]:
    """Each prompt's chat-formatted token ids within ``limit`` tokens (the module docstring's rule).

    The full renderings are tokenized as one batch; only a prompt over the budget tokenizes its
    shorter renderings, one at a time, until one fits."""
    if limit < 1:
        raise ValueError(f"the prompt budget must be >= 1 token, got {limit}")
    prompts = [as_history_prompt(p) for p in prompts]
    firsts = _token_ids(tokenizer, [p.renderings[0] for p in prompts])
    return [_fit(tokenizer, prompt, ids, limit) for prompt, ids in zip(prompts, firsts, strict=True)]


def _token_ids(tokenizer: Any, prompts: Sequence[Rendering]) -> list[list[int]]:
    if not prompts:
        return []
    chats = [chat_prompt(tokenizer, prompt) for prompt in prompts]
    return tokenizer(chats, add_special_tokens=False)["input_ids"]


def system_tokens(tokenizer: Any, prompt: Rendering) -> int:
    """How many of the chat-formatted prompt's first tokens come before its user turn's text: the
    system turn and the user turn's header (0 for a prompt of one user turn). A template that rewrites
    the user's text so that it cannot be found: up to the end of the system turn's text."""
    if isinstance(prompt, str):
        return 0
    chat = chat_prompt(tokenizer, prompt)
    system, user = (text.strip() for text in prompt)
    start = chat.rfind(user) if user else -1
    if start < 0:  # chat_prompt checked that the system turn's text is there
        start = chat.index(system) + len(system)
    return len(tokenizer(chat[:start], add_special_tokens=False)["input_ids"])


def _fit(tokenizer: Any, prompt: HistoryPrompt, ids: list[int], limit: int) -> FittedPrompt:
    dropped = 0
    while len(ids) > limit and dropped + 1 < len(prompt.renderings):
        dropped += 1
        (ids,) = _token_ids(tokenizer, [prompt.renderings[dropped]])
    if len(ids) <= limit:
        return FittedPrompt(list(ids), dropped, 0)
    system = system_tokens(tokenizer, prompt.renderings[dropped])
    if system >= limit:
        raise ValueError(
            f"the system turn alone takes {system} tokens of the {limit}-token prompt budget: raise "
            f"max_prompt_tokens or use prompt_turns={ONE_USER_TURN!r}"
        )
    head = max(limit // 2, system)
    return FittedPrompt(ids[:head] + ids[len(ids) - (limit - head) :], dropped, len(ids) - limit)

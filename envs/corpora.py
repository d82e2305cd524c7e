"""The text a tiny test model's tokenizer is trained on, per env: a built-in env's corpus function, a
user's env class's ``tokenizer_corpus()``, else the text of a few seeded random episodes
(:func:`played_corpus`); and the words it may keep whole (``rllib sft --whole-words``).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Mapping
from typing import Any

from envs.common.prompts import PromptContext, prompt_settings
from envs.file_import import load_object
from envs.registry import builtin_spec, env_class, env_config_key, get_prompt_renderer, make_env


def get_tokenizer_corpus(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> list[str]:
    """Text covering what the env and its prompt produce (to build a tiny test tokenizer from);
    computed once per process and env."""
    return list(_tokenizer_corpus(name_or_id, env_config_key(env_config)))


@functools.cache
def _tokenizer_corpus(name_or_id: str, config_key: str) -> tuple[str, ...]:
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return tuple(load_object(spec.tokenizer_corpus)())
    env_config = json.loads(config_key)
    own = getattr(env_class(name_or_id, env_config), "tokenizer_corpus", None)
    return tuple(own() if own is not None else played_corpus(name_or_id, env_config))


def get_tokenizer_whole_words(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> list[str]:
    """Texts a tiny tokenizer may keep whole (``rllib sft --whole-words``): the built-in env's
    ``tokenizer_whole_words`` function's, a user's env class's ``tokenizer_whole_words()``, else none."""
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return list(load_object(spec.tokenizer_whole_words)()) if spec.tokenizer_whole_words else []
    own = getattr(env_class(name_or_id, env_config), "tokenizer_whole_words", None)
    return list(own()) if own is not None else []


def played_corpus(
    name_or_id: str, env_config: Mapping[str, Any] | None = None, *, episodes: int = 5, max_steps: int = 20
) -> list[str]:
    """The text of a few episodes with seeded random admissible actions: tasks, observations,
    actions, tagged answers and every step's prompt (deterministic when the env is)."""
    env = make_env(name_or_id, env_config)
    render = get_prompt_renderer(name_or_id, env_config)
    kwargs = prompt_settings(render, env_config)
    texts: list[str] = []
    try:
        for seed in range(episodes):
            rng = random.Random(seed)
            observation, info = env.reset(seed=seed)
            history: list[tuple[str, str]] = []
            for step in range(max_steps):
                actions = list(info.get("admissible_actions") or [])
                context = PromptContext(info.get("task", ""), history, observation, actions, step, 2)
                texts += [context.task, observation, *actions, render(context, **kwargs)]
                command = rng.choice(actions) if actions else "look"
                answer = f"<think></think><action>{command}</action>"
                texts.append(answer)
                history.append((observation, command))
                observation, _, terminated, truncated, info = env.step(answer)
                if terminated or truncated:
                    texts.append(observation)
                    break
    finally:
        env.close()
    return list(dict.fromkeys(texts))

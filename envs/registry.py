"""One place that names every environment: Gymnasium ids, RLlib (Tune) names, prompts, tokenizer text.

Imports of the game engines are lazy, so ``import envs`` stays cheap on every Ray worker.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class EnvSpec:
    name: str  #: RLlib / Tune name (``config.environment(name)``)
    gym_id: str  #: Gymnasium id (``gymnasium.make(gym_id)``)
    entry_point: str  #: "module:Class" of the environment
    prompt_renderer: str  #: "module:function" (task, history, obs, admissible, step, K) -> str
    tokenizer_corpus: str  #: "module:function" () -> list[str], text to build a tiny tokenizer from


ENV_SPECS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec(
            "alfworld",
            "hgpo/ALFWorld-v0",
            "envs.alfworld.env:ALFWorldEnv",
            "envs.alfworld.prompts:render_prompt",
            "envs.alfworld.prompts:tokenizer_corpus",
        ),
        EnvSpec(
            "webshop",
            "hgpo/WebShop-v0",
            "envs.webshop.env:WebShopEnv",
            "envs.webshop.prompts:render_prompt",
            "envs.webshop.prompts:tokenizer_corpus",
        ),
        EnvSpec(
            "keychest",
            "hgpo/KeyChest-v0",
            "envs.keychest.env:KeyChestEnv",
            "envs.keychest.prompts:render_prompt",
            "envs.keychest.prompts:tokenizer_corpus",
        ),
    )
}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_env_spec(name_or_id: str) -> EnvSpec:
    """Look an environment up by its RLlib name or its Gymnasium id."""
    for spec in ENV_SPECS.values():
        if name_or_id in (spec.name, spec.gym_id):
            return spec
    known = ", ".join(f"{s.name} ({s.gym_id})" for s in ENV_SPECS.values())
    raise ValueError(f"unknown environment {name_or_id!r}; known: {known}")


def get_prompt_renderer(name_or_id: str) -> Callable[..., str]:
    return _load(get_env_spec(name_or_id).prompt_renderer)


def get_tokenizer_corpus(name_or_id: str) -> list[str]:
    return list(_load(get_env_spec(name_or_id).tokenizer_corpus)())


def make_env(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> gym.Env:
    """Build an environment from an RLlib ``env_config`` (an ``EnvContext`` is a dict too)."""
    spec = get_env_spec(name_or_id)
    return _load(spec.entry_point)(**dict(env_config or {}))


def check_env_config(name_or_id: str, env_config: Mapping[str, Any] | None) -> None:
    """Refuse, before any process starts, an ``env_config`` the env would refuse when built (a key it
    does not take, a bad value): a ValueError naming the setting. Builds nothing."""
    if env_config is not None and not isinstance(env_config, Mapping):
        raise ValueError(f"env_config must be a dict, got {type(env_config).__name__}")
    env_class = _load(get_env_spec(name_or_id).entry_point)
    env_class.check_config(dict(env_config or {}))


def register_all() -> None:
    """Register every env with Gymnasium and with Tune (for RLlib); safe to call repeatedly."""
    for spec in ENV_SPECS.values():
        if spec.gym_id not in gym.registry:
            gym.register(id=spec.gym_id, entry_point=spec.entry_point, disable_env_checker=True)
    try:
        from ray.tune.registry import register_env
    except ImportError:  # Ray is optional for plain Gymnasium use
        return
    for spec in ENV_SPECS.values():
        register_env(spec.name, lambda env_config, _name=spec.name: make_env(_name, env_config))

"""One place that resolves every environment: the package's own (Gymnasium ids, RLlib names, prompts,
tokenizer text) and a user's, named the way RLlib users name envs.

An env is named by a built-in name or Gymnasium id (``alfworld``, ``hgpo/WebShop-v0``), a name the
user registered with Tune (``ray.tune.registry.register_env(name, creator)``, RLlib's convention) or
with Gymnasium (``gym.register``), or a ``module:Class`` path (the module may be a ``.py`` file's
path). A user's env is a :class:`~envs.common.text_env.TextEnv` subclass; its prompt is its class's
``render_prompt(context)`` if it has one, else :func:`~envs.common.prompts.default_prompt` (split into
chat turns: its ``render_prompt_turns(context)``, else :func:`~envs.common.prompts.default_prompt_turns`
for a class without a template of its own), and the
tiny model's tokenizer text is its class's ``tokenizer_corpus()`` if it has one, else the text of a
few seeded random episodes (:mod:`envs.corpora`); a path's ``.py`` file is imported by
:mod:`envs.file_import`. Tune keeps registered creators in the Ray cluster (so every worker of a
run finds them) and pickles them by value when they come from a script or an experiment file. A file
meant to be received (a policy folder, a warm start) names its env as data: :func:`adopt_received_env`
resolves it only without importing anything the file names.

The built-in team envs (:data:`TEAM_ENV_SPECS`: ``webshop_team``, ``alfworld_team``, ``keychest_team``,
docs/drmas.md) are RLlib multi-agent envs (:mod:`envs.common.team_env`) and resolve, build and
register like the others (a ``MultiAgentEnv`` is a ``gymnasium.Env``, and RLlib itself registers its
multi-agent envs with Gymnasium). They are kept apart from :data:`ENV_SPECS`, the single-agent text
envs, on each of which the single-agent pipeline (SFT, the plan-execute format, the TextEnv contract)
runs.

Imports of the game engines are lazy, so ``import envs`` stays cheap on every Ray worker.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envs.common.facts import EnvFacts
from envs.common.prompts import PromptTurns, default_prompt, default_prompt_turns
from envs.common.text_env import TextEnv
from envs.file_import import load_object, module_file

EnvCreator = Callable[[Mapping[str, Any]], gym.Env]


@dataclass(frozen=True)
class EnvSpec:
    """A built-in environment."""

    name: str  #: RLlib / Tune name (``config.environment(name)``)
    gym_id: str  #: Gymnasium id (``gymnasium.make(gym_id)``)
    entry_point: str  #: "module:Class" of the environment
    #: "module:attr" of its :class:`~envs.common.facts.EnvFacts` (the class's ``FACTS``), read without
    #: importing the game engine
    facts: str
    prompt_renderer: str  #: "module:function" (PromptContext, **env settings) -> str
    tokenizer_corpus: str  #: "module:function" () -> list[str], text to build a tiny tokenizer from
    #: "module:function" () -> list[str], texts a tiny tokenizer may keep as single tokens (names the
    #: model copies from the page, e.g. WebShop's product ids); None: none.
    tokenizer_whole_words: str | None = None
    #: "module:function" (PromptContext, **env settings) -> PromptTurns, the template split into chat
    #: turns; None: the env's prompts have no such split.
    prompt_turns_renderer: str | None = None


ENV_SPECS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec(
            "alfworld",
            "hgpo/ALFWorld-v0",
            "envs.alfworld.env:ALFWorldEnv",
            "envs.alfworld.facts:ALFWORLD_FACTS",
            "envs.alfworld.prompts:render_prompt",
            "envs.alfworld.prompts:tokenizer_corpus",
            prompt_turns_renderer="envs.alfworld.prompts:render_prompt_turns",
        ),
        EnvSpec(
            "webshop",
            "hgpo/WebShop-v0",
            "envs.webshop.env:WebShopEnv",
            "envs.webshop.facts:WEBSHOP_FACTS",
            "envs.webshop.prompts:render_prompt",
            "envs.webshop.prompts:tokenizer_corpus",
            "envs.webshop.prompts:tokenizer_whole_words",
            prompt_turns_renderer="envs.webshop.prompts:render_prompt_turns",
        ),
        EnvSpec(
            "keychest",
            "hgpo/KeyChest-v0",
            "envs.keychest.env:KeyChestEnv",
            "envs.keychest.facts:KEYCHEST_FACTS",
            "envs.keychest.prompts:render_prompt",
            "envs.keychest.prompts:tokenizer_corpus",
            prompt_turns_renderer="envs.keychest.prompts:render_prompt_turns",
        ),
    )
}

#: Turn-based teams of roles over the games above (:class:`~envs.common.team_env.TeamTextEnv`).
TEAM_ENV_SPECS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec(
            "alfworld_team",
            "hgpo/ALFWorldTeam-v0",
            "envs.alfworld.team:ALFWorldTeamEnv",
            "envs.alfworld.facts:ALFWORLD_TEAM_FACTS",
            "envs.alfworld.team:render_prompt",
            "envs.alfworld.team:tokenizer_corpus",
        ),
        EnvSpec(
            "webshop_team",
            "hgpo/WebShopTeam-v0",
            "envs.webshop.team:WebShopTeamEnv",
            "envs.webshop.facts:WEBSHOP_TEAM_FACTS",
            "envs.webshop.team:render_prompt",
            "envs.webshop.team:tokenizer_corpus",
        ),
        EnvSpec(
            "keychest_team",
            "hgpo/KeyChestTeam-v0",
            "envs.keychest.team:KeyChestTeamEnv",
            "envs.keychest.facts:KEYCHEST_TEAM_FACTS",
            "envs.keychest.team:render_prompt",
            "envs.keychest.team:tokenizer_corpus",
        ),
    )
}


def builtin_specs() -> list[EnvSpec]:
    """Every built-in env: the single-agent ones, then the teams."""
    return [*ENV_SPECS.values(), *TEAM_ENV_SPECS.values()]


def builtin_spec(name_or_id: str) -> EnvSpec | None:
    """The built-in env of that RLlib name or Gymnasium id, or None."""
    for spec in builtin_specs():
        if name_or_id in (spec.name, spec.gym_id):
            return spec
    return None


def get_env_spec(name_or_id: str) -> EnvSpec:
    """Look a built-in environment up by its RLlib name or its Gymnasium id."""
    spec = builtin_spec(name_or_id)
    if spec is None:
        raise ValueError(f"unknown environment {name_or_id!r}; {_known()}")
    return spec


def _known() -> str:
    builtins = ", ".join(f"{s.name} ({s.gym_id})" for s in builtin_specs())
    return (
        f"the built-in ones: {builtins}; or a name registered with ray.tune.registry.register_env or "
        "gymnasium.register, or a 'module:Class' path"
    )


def _tune_creator(name: str) -> EnvCreator | None:
    """The creator registered with Tune under ``name``, if any (Tune offers no public lookup)."""
    try:
        from ray.tune.registry import ENV_CREATOR, _global_registry
    except ImportError:  # Ray is optional for plain Gymnasium use
        return None
    if _global_registry.contains(ENV_CREATOR, name):
        return _global_registry.get(ENV_CREATOR, name)
    return None


def _make_builtin(name: str, env_config: Mapping[str, Any]) -> gym.Env:
    return load_object(get_env_spec(name).entry_point)(**dict(env_config))


def _make_from_gym_spec(spec: gym.envs.registration.EnvSpec, env_config: Mapping[str, Any]) -> gym.Env:
    return gym.make(spec, **dict(env_config))


def _make_from_class(env_class: type, env_config: Mapping[str, Any]) -> gym.Env:
    return env_class(**dict(env_config))


def env_creator(name_or_id: str) -> EnvCreator:
    """A picklable function ``env_config -> env`` for any env name (see the module docstring); Tune's
    registrations come first, as RLlib's own lookup has them."""
    if not isinstance(name_or_id, str) or not name_or_id:
        raise ValueError(f"an env is named by a non-empty string, got {name_or_id!r}")
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return functools.partial(_make_builtin, spec.name)
    creator = _tune_creator(name_or_id)
    if creator is not None:
        return creator
    if name_or_id in gym.registry:
        return functools.partial(_make_from_gym_spec, gym.spec(name_or_id))
    if ":" in name_or_id:
        env_class = load_object(name_or_id)
        if not (isinstance(env_class, type) and issubclass(env_class, gym.Env)):
            raise ValueError(f"{name_or_id!r} is not a gymnasium.Env class")
        return functools.partial(_make_from_class, env_class)
    raise ValueError(f"unknown environment {name_or_id!r}; {_known()}")


def make_env(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> gym.Env:
    """Build an environment from an RLlib ``env_config`` (an ``EnvContext`` is a dict too)."""
    return env_creator(name_or_id)(dict(env_config or {}))


def env_name(name_or_id: str) -> str:
    """The name runs and records use: a built-in env's RLlib name, else the name as given."""
    spec = builtin_spec(name_or_id)
    return spec.name if spec is not None else name_or_id


def env_config_key(env_config: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(env_config or {}), sort_keys=True, default=repr)


def env_class(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> type:
    """The env's class: imported for built-ins, paths and Gymnasium classes; otherwise (a Tune
    creator) the class of one env built with ``env_config``."""
    return _env_class(name_or_id, env_config_key(env_config))


@functools.cache
def _env_class(name_or_id: str, config_key: str) -> type:
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return load_object(spec.entry_point)
    creator = env_creator(name_or_id)
    if isinstance(creator, functools.partial) and creator.func is _make_from_class:
        return creator.args[0]
    if isinstance(creator, functools.partial) and creator.func is _make_from_gym_spec:
        entry = creator.args[0].entry_point
        if isinstance(entry, type):
            return entry
        if isinstance(entry, str):
            return load_object(entry)
    env = creator(json.loads(config_key))
    try:
        return type(env.unwrapped)
    finally:
        env.close()


def env_facts(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> EnvFacts:
    """What generic code knows of the env (:mod:`envs.common.facts`): its class's ``FACTS``, the
    defaults for a class that declares none (a built-in env's without importing its engine)."""
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return load_object(spec.facts)
    return getattr(env_class(name_or_id, env_config), "FACTS", EnvFacts())


def env_class_path(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> str:
    """``module:Class`` of the env (``file.py:Class`` for a class of a file imported by path, such
    as an experiment file), so a record can name an env that a later process has not registered."""
    cls = env_class(name_or_id, env_config)
    file = module_file(cls.__module__)
    return f"{file or cls.__module__}:{cls.__qualname__}"


def get_prompt_renderer(name_or_id: str, env_config: Mapping[str, Any] | None = None) -> Callable[..., str]:
    """The env's prompt template: ``render(context: PromptContext, **env settings) -> str``."""
    spec = builtin_spec(name_or_id)
    if spec is not None:
        return load_object(spec.prompt_renderer)
    return getattr(env_class(name_or_id, env_config), "render_prompt", None) or default_prompt


def get_prompt_turns_renderer(
    name_or_id: str, env_config: Mapping[str, Any] | None = None
) -> Callable[..., PromptTurns]:
    """The env's prompt template split into chat turns: ``render(context, **env settings) ->
    PromptTurns`` (the task and instructions as the system turn); one line for an env without one."""
    spec = builtin_spec(name_or_id)
    if spec is not None:
        if spec.prompt_turns_renderer is None:
            raise ValueError(
                f"the prompts of {spec.name!r} have no system/user split (a team's roles prompt in one "
                "user turn): use prompt_turns='user'"
            )
        return load_object(spec.prompt_turns_renderer)
    cls = env_class(name_or_id, env_config)
    own = getattr(cls, "render_prompt_turns", None)
    if own is None and getattr(cls, "render_prompt", None) is not None:
        raise ValueError(
            f"{cls.__qualname__} has its own render_prompt but no render_prompt_turns (context) -> "
            "envs.PromptTurns: give it one to split its prompts into system and user turns"
        )
    return own or default_prompt_turns


def check_env_config(name_or_id: str, env_config: Mapping[str, Any] | None) -> None:
    """Refuse, before any process starts, an env that does not follow the text-env contract (``info``
    keys, any text an action) or an ``env_config`` it would refuse when built (a key it does not take,
    a bad value): a ValueError naming what is wrong. Builds nothing for built-ins and classes (each
    checks its settings without building); a Tune creator's env is built once."""
    if env_config is not None and not isinstance(env_config, Mapping):
        raise ValueError(f"env_config must be a dict, got {type(env_config).__name__}")
    try:
        cls = env_class(name_or_id, env_config)
    except ValueError:
        raise
    except Exception as exc:  # the user's creator refused the settings
        raise ValueError(f"building {name_or_id!r} failed: {type(exc).__name__}: {exc}") from exc
    if not issubclass(cls, TextEnv) and not _is_team_env(cls):
        raise ValueError(
            f"env {name_or_id!r} is a {cls.__module__}.{cls.__qualname__}, not a subclass of "
            "envs.common.text_env.TextEnv (the contract the prompt connector and runners rely on) or "
            "of envs.common.team_env.TeamTextEnv"
        )
    cls.check_config(dict(env_config or {}))


def _is_team_env(cls: type) -> bool:
    """Whether ``cls`` is a team env (imported here: the team layer loads RLlib, which single-agent
    use of this package does not need)."""
    from envs.common.team_env import TeamTextEnv

    return issubclass(cls, TeamTextEnv)


def adopt_env(name: str, class_path: str | None) -> None:
    """Make ``name`` resolvable in this process from a record's ``module:Class`` path when nothing
    here registered it: a checkpoint of a user's env (the user's own: a checkpoint is pickles, which run
    code anyway), played by a process that never ran the user's experiment file. A name that resolves
    already is left alone. Received files use :func:`adopt_received_env`."""
    try:
        env_creator(name)
        return
    except ValueError:
        if not class_path:
            raise
    from ray.tune.registry import register_env

    register_env(name, env_creator(class_path))


def adopt_received_env(name: str, class_path: str | None) -> bool:
    """:func:`adopt_env` for a file meant to be received (a policy folder, a warm start), which must run no
    code: ``name`` is resolved only when that imports nothing the file names. That is when it is built in
    or registered in this process (Tune, Gymnasium), or when it (or, for another name, ``class_path``) is
    the class of a built-in env (this package's code, not the file's) or of a module this process has
    imported already. False otherwise: the user names the env (docs/reliability.md)."""
    if builtin_spec(name) is not None or _tune_creator(name) is not None or name in gym.registry:
        return True
    if ":" in name:
        return _loads_without_running_code(name)
    if not class_path or not _loads_without_running_code(class_path):
        return False
    adopt_env(name, class_path)
    return True


def _loads_without_running_code(path: str) -> bool:
    """Whether ``module:Class`` loads without running code that is new to this process."""
    module = path.rpartition(":")[0]
    return path in {spec.entry_point for spec in builtin_specs()} or module in sys.modules


def register_with_tune(name_or_id: str) -> None:
    """Register a Gymnasium-only name or a ``module:Class`` path with Tune under itself, so RLlib's
    env runners (which look names up in Tune's registry) build it on every worker; built-in names and
    Tune's own are left as they are."""
    if builtin_spec(name_or_id) is not None or _tune_creator(name_or_id) is not None:
        return
    creator = env_creator(name_or_id)
    from ray.tune.registry import register_env

    register_env(name_or_id, creator)


def register_all() -> None:
    """Register every built-in env with Gymnasium and with Tune (for RLlib); safe to call repeatedly."""
    for spec in builtin_specs():
        if spec.gym_id not in gym.registry:
            gym.register(id=spec.gym_id, entry_point=spec.entry_point, disable_env_checker=True)
    try:
        from ray.tune.registry import register_env
    except ImportError:  # Ray is optional for plain Gymnasium use
        return
    for spec in builtin_specs():
        register_env(spec.name, functools.partial(_make_builtin, spec.name))

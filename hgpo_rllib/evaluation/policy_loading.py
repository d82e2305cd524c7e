"""A trained policy ready to play: from an algorithm checkpoint or a warm-start directory.

:class:`CheckpointPolicy` puts the policy's RLModule behind the very prompt connector it was trained with
(same template, K, chat format and ``env_config``), samples at its ``eval_temperature`` and returns the
decoded answers, in its own dtype and engine or in those the evaluation asks for (``rllib evaluate
--dtype/--inference-backend``). :func:`export_merged` writes a plain Hugging Face model directory from
a checkpoint.
"""

from __future__ import annotations

import functools
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec

import envs
from envs.common.spaces import TextSpace
from hgpo_rllib.algorithms.checkpoints import ENV_RECORD
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.algorithms.text_agent import TextAgentConfig
from hgpo_rllib.algorithms.torch.matmul_rate import emulation_note
from hgpo_rllib.columns import ACTION_TEXT, LENGTH_CUT, PROMPT_CUT, RESP_MASK
from hgpo_rllib.evaluation.rollout import Answers, EpisodeSlot
from hgpo_rllib.rl_module.config import LLMModuleConfig
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule
from hgpo_rllib.rl_module.model_sources import weights_digest
from hgpo_rllib.rl_module.models import TORCH_DTYPES, cpu_dtype, resolve_inference_backend
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN
from hgpo_rllib.run_records import read_record
from hgpo_rllib.warm_start.format import (
    PLAY_SETTINGS,
    SFT_CONFIG,
    check_play_settings,
    is_warm_start,
    read_settings,
)

#: Where an algorithm checkpoint keeps its modules, and the single-agent policy's (RLlib's layout).
MODULES_DIR = Path("learner_group") / "learner" / "rl_module"
MODULE_DIR = MODULES_DIR / DEFAULT_MODULE_ID
CTOR_FILE = "class_and_ctor_args.pkl"
#: The play settings of a policy folder (:mod:`~hgpo_rllib.evaluation.policy_folder`).
POLICY_RECORD = "hgpo_policy.json"
#: The newest policy-folder layout this version reads.
POLICY_FORMAT = 1
#: The dtypes a policy can be played in; "cpu": :func:`~hgpo_rllib.rl_module.models.cpu_dtype`
#: (bfloat16 where the CPU multiplies it natively, else float32).
PLAY_DTYPES = ("float32", "bfloat16", "cpu")
#: The engines a policy can be played with: HF ``generate`` or vLLM.
PLAY_BACKENDS = ("hf", "vllm")


def read_policy_settings(path: Path) -> dict[str, Any]:
    """The play settings of a policy folder (:data:`POLICY_RECORD`) or, for a warm start written
    before policy folders existed, of its ``rllib sft`` record."""
    if not (path / POLICY_RECORD).is_file():
        return read_settings(path)
    settings = read_record(path / POLICY_RECORD)
    missing = [key for key in ("format", *PLAY_SETTINGS) if key not in settings]
    if missing:
        raise ValueError(f"{path / POLICY_RECORD} lacks {missing}: it is not a policy folder")
    check_play_settings(path / POLICY_RECORD, settings)
    if settings["format"] > POLICY_FORMAT:
        raise ValueError(
            f"{path} is a policy folder of format {settings['format']}; this hgpo-rllib reads up to "
            f"{POLICY_FORMAT}: upgrade it"
        )
    return settings


def is_policy_folder(path: Path) -> bool:
    """A folder of safetensors weights and JSON settings: an `rllib export` or an `rllib sft` output."""
    return (path / POLICY_RECORD).is_file() or is_warm_start(path)


def policy_weights(path: Path) -> str | None:
    """What the policy at ``path`` is, for telling evaluations apart: a policy folder's (or warm
    start's) :func:`~hgpo_rllib.rl_module.model_sources.weights_digest`, the same for a copy anywhere
    (its play settings are taken to come with its weights, as ``rllib sft`` and ``rllib export`` write
    them together); None for an algorithm checkpoint: its module state is a pickle, which tells its
    weights only once unpickled (and may hold a LoRA module's adapter alone, its base named
    elsewhere), so the checkpoint is known by its path."""
    return weights_digest(path) if is_policy_folder(path) else None


def check_trained_env(source: str | Path, env: str, trained_on: str, env_config: Mapping[str, Any]) -> None:
    """Refuse ``env`` (the user's) for a policy trained on another env (``trained_on``, by name)."""
    if envs.env_name(env) != trained_on and env != envs.env_class_path(trained_on, env_config):
        raise ValueError(f"{source} was trained on {trained_on}; evaluate it with --env {trained_on}")


def received_env(path: Path, settings: Mapping[str, Any], env: str | None) -> str:
    """The env the policy folder or warm start ``path`` plays. Received folders run no code: the env
    its ``settings`` name is taken when this process resolves it without importing anything the folder
    names (:func:`envs.adopt_received_env`), and ``env``, the user's, must then be that one; otherwise
    the user's ``env`` is played, and without one the folder is refused."""
    named, class_path = settings["env"], settings.get("env_class")
    if envs.adopt_received_env(named, class_path):
        if env is not None:
            check_trained_env(path, env, envs.env_name(named), settings["env_config"])
        return named
    if env is None:
        record = path / (POLICY_RECORD if (path / POLICY_RECORD).is_file() else SFT_CONFIG)
        of_class = f" of class {class_path!r}" if class_path else ""
        raise ValueError(
            f"{record}: names env {named!r}{of_class}, which is neither built in nor registered in this "
            "process; received folders run no code: pass --env <module:Class or file.py:Class> (or "
            "load_policy(dir, env=...)) if you trust it"
        )
    envs.env_creator(env)  # the user's: an unknown name is one line naming the known ones
    return env


def config_for_warm_start(
    model_dir: str | Path,
    settings: Mapping[str, Any] | None = None,
    algorithm: AlgorithmConfig | None = None,
    env: str | None = None,
) -> AlgorithmConfig:
    """The config (env, prompt settings, model) of a policy folder or warm-start directory, from its
    settings record or, for one that is still to be built, from ``settings`` (the record it will have);
    ``algorithm`` is the fresh config to fill (default ``HGPOConfig()``); ``env``: the user's, for a
    folder whose env this process does not know (:func:`received_env`)."""
    path = Path(model_dir).expanduser().resolve()
    settings = read_policy_settings(path) if settings is None else settings
    temperature = {"eval_temperature": settings["eval_temperature"]} if "eval_temperature" in settings else {}
    return (
        (algorithm or HGPOConfig())
        .environment(received_env(path, settings, env), env_config=settings["env_config"])
        .rl_module(model_config={"model": str(path)})
        .training(
            history_length=settings["history_length"],
            prompt_turns=settings.get("prompt_turns", ONE_USER_TURN),
            max_prompt_tokens=settings["max_prompt_tokens"],
            max_new_tokens=settings["max_new_tokens"],
            **temperature,
        )
    )


def play_dtype(torch_dtype: str | None) -> str | None:
    """The dtype of :data:`PLAY_DTYPES` named ``torch_dtype``: "cpu" is
    :func:`~hgpo_rllib.rl_module.models.cpu_dtype` (None stays None: the policy's own)."""
    return cpu_dtype() if torch_dtype == "cpu" else torch_dtype


def played_as(
    own_dtype: str, own_backend: str, torch_dtype: str | None, inference_backend: str | None
) -> dict[str, str | None]:
    """What an evaluation asks of a policy that plays in ``own_dtype`` with ``own_backend`` (resolved):
    ``torch_dtype`` ("cpu": :func:`~hgpo_rllib.rl_module.models.cpu_dtype`) and ``inference_backend``
    where they differ from its own, None where they do not or are not given: an evaluation asking for
    what the policy plays anyway is the policy's own evaluation. An engine that cannot run here (vLLM
    not installed) is a ValueError: one line from ``rllib evaluate``."""
    if torch_dtype is not None and torch_dtype not in PLAY_DTYPES:
        raise ValueError(f"dtype must be one of {PLAY_DTYPES}, got {torch_dtype!r}")
    if inference_backend is not None and inference_backend not in PLAY_BACKENDS:
        raise ValueError(f"inference backend must be one of {PLAY_BACKENDS}, got {inference_backend!r}")
    if inference_backend is not None:
        try:
            resolve_inference_backend(inference_backend)
        except (ImportError, RuntimeError) as exc:
            raise ValueError(str(exc)) from None
    dtype = play_dtype(torch_dtype)
    return {
        "torch_dtype": None if dtype == own_dtype else dtype,
        "inference_backend": None if inference_backend == own_backend else inference_backend,
    }


def weights_dtype(module: LLMRLModule) -> str:
    """The dtype the module's policy weights are in, by name: what it plays in. A restored algorithm
    checkpoint's module is the learner's: float32 masters when fully fine-tuned, the frozen base in
    its ``torch_dtype`` under LoRA (whose float32 adapters are folded into it to play)."""
    dtype = next(module.lm.parameters()).dtype
    return next(name for name, known in TORCH_DTYPES.items() if known == dtype)


def say_if_emulated(module: LLMRLModule) -> None:
    """One line where ``module`` generates in bfloat16 on a CPU that emulates it (slower than float32)."""
    device = "cuda" if module.backend == "vllm" and torch.cuda.is_available() else "cpu"
    if note := emulation_note(TORCH_DTYPES[weights_dtype(module)], device, "the policy plays"):
        print(note, file=sys.stderr)


def save_merged_model_dir(module: LLMRLModule, out: Path) -> None:
    """Save the module's model (LoRA adapters merged into the weights) as safetensors and its
    tokenizer: a plain Hugging Face model directory."""
    lm = module.lm.merge_and_unload() if isinstance(module.lm, PeftModel) else module.lm
    lm.save_pretrained(out, safe_serialization=True)
    module.tokenizer.save_pretrained(out)


def inference_module(config: AlgorithmConfig) -> LLMRLModule:
    """The policy module of ``config``, for inference (no reference model, no optimizer)."""
    spec = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=TextSpace(),
        action_space=TextSpace(),
        inference_only=True,
        model_config=config.model_config,
    )
    return spec.build().eval()


@functools.cache
def say_pickle_trust_once() -> None:
    print(
        "note: RLlib checkpoints are pickles, which can run code when loaded: evaluate only checkpoints "
        "you made or trust; share policies as `rllib export` folders (docs/reliability.md)",
        file=sys.stderr,
    )


def _unreadable(path: Path, exc: Exception) -> ValueError:
    return ValueError(
        f"{path} cannot be loaded ({type(exc).__name__}: {exc}); the checkpoint is truncated or "
        "corrupt: evaluate an earlier checkpoint_* of the same run"
    )


#: What a truncated or corrupt checkpoint raises while loading (pickle, torch, missing files).
_DAMAGE = (pickle.UnpicklingError, EOFError, KeyError, AttributeError, RuntimeError, OSError)


def _config_from_ctor_file(file: Path, saved: Any) -> AlgorithmConfig:
    """The algorithm config in a checkpoint's :data:`CTOR_FILE` as RLlib writes it (``saved`` holds the
    algorithm's ``ctor_args_and_kwargs``: the config is the first argument or the ``config`` keyword),
    of an algorithm of this package; else a ValueError naming ``file``."""
    ctor = saved.get("ctor_args_and_kwargs") if isinstance(saved, dict) else None
    if not (
        isinstance(ctor, (tuple, list))
        and len(ctor) == 2
        and isinstance(ctor[0], (tuple, list))
        and isinstance(ctor[1], dict)
    ):
        raise ValueError(f"{file}: holds no RLlib algorithm's ctor_args_and_kwargs; it is not a checkpoint")
    args, kwargs = ctor
    config = kwargs.get("config", args[0] if args else None)
    if isinstance(config, dict):
        try:
            config = AlgorithmConfig.from_state(config)
        except (*_DAMAGE, TypeError, ValueError) as exc:
            raise _unreadable(file, exc) from None
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{file}: the checkpoint holds no algorithm config")
    if not isinstance(config, TextAgentConfig):
        algorithm = type(config).__name__.removesuffix("Config")
        raise ValueError(
            f"{file}: a checkpoint of {algorithm}, not of an algorithm of hgpo-rllib (HGPO, HiPER): "
            "it has no text policy to play or export"
        )
    return config


def load_checkpoint_config(path: Path) -> AlgorithmConfig:
    """The algorithm config of the checkpoint at ``path``, its env made known to this process. A
    truncated, corrupt or foreign file is one ValueError naming it, not a traceback from deep inside
    pickle."""
    say_pickle_trust_once()
    file = path / CTOR_FILE
    try:
        with file.open("rb") as f:
            saved = pickle.load(f)
    except _DAMAGE as exc:
        raise _unreadable(file, exc) from None
    config = _config_from_ctor_file(file, saved)
    if (path / ENV_RECORD).is_file():  # checkpoints of 0.1.0 have none (built-in envs only)
        record = read_record(path / ENV_RECORD)
        envs.adopt_env(record["env"], record.get("env_class"))
    return config


def _load_rllib_checkpoint(path: Path, module_dir: Path, env: str | None) -> tuple[AlgorithmConfig, RLModule]:
    """The config and inference module of an algorithm checkpoint (refused before its weights load
    when ``env``, the user's, is not the env it was trained on)."""
    config = load_checkpoint_config(path)
    if env is not None:
        check_trained_env(path, env, envs.env_name(str(config.env)), config.env_config)
    try:
        module = RLModule.from_checkpoint(module_dir, inference_only=True)
    except _DAMAGE as exc:
        raise _unreadable(path, exc) from None
    return config, module.eval()


class CheckpointPolicy:
    """A trained policy: an algorithm checkpoint's RLModule behind its own prompt connector, or a
    warm-start model directory of ``rllib sft`` behind the prompt settings it was trained with."""

    def __init__(
        self,
        checkpoint: str | Path,
        env_config: dict[str, Any] | None = None,
        env: str | None = None,
        *,
        torch_dtype: str | None = None,
        inference_backend: str | None = None,
    ):
        """``env_config`` entries override the checkpoint's; prompts and the caller's env both use
        the merged ``self.env_config``, so the two cannot disagree (e.g. on ``require_tags``). ``env``,
        the user's, must be the env the policy was trained on; for a policy folder whose env this
        process does not know, it is the env played (received folders run no code). ``torch_dtype``
        (one of :data:`PLAY_DTYPES`) and ``inference_backend`` (one of :data:`PLAY_BACKENDS`) play the
        policy in another dtype or engine than its own (None: its own); ``self.overrides`` keeps those
        that differ from its own (:func:`played_as`). A policy folder's module is built in them, an
        algorithm checkpoint's restored one cast to them (:meth:`LLMRLModule.play_in`)."""
        path = Path(checkpoint).expanduser().resolve()
        if not path.exists():
            raise FileNotFoundError(
                f"{path} does not exist: expected an algorithm checkpoint or a policy folder"
            )
        if is_policy_folder(path):
            config = config_for_warm_start(path, env=env)
            own = LLMModuleConfig.from_model_config(config.model_config)  # built inference-only in it
            own_backend = resolve_inference_backend(own.inference_backend)
            self.overrides = played_as(own.torch_dtype, own_backend, torch_dtype, inference_backend)
            changed = {key: value for key, value in self.overrides.items() if value is not None}
            if changed:
                config.rl_module(model_config={**config.model_config, **changed})
            module = inference_module(config)
        else:
            ctor_file, module_dir = path / CTOR_FILE, path / MODULE_DIR
            if not ctor_file.is_file() or not module_dir.is_dir():
                raise FileNotFoundError(
                    f"{path} is not an algorithm checkpoint (no {CTOR_FILE}) nor a policy folder "
                    f"(no {POLICY_RECORD} or {SFT_CONFIG})"
                )
            config, module = _load_rllib_checkpoint(path, module_dir, env)
            own_dtype = weights_dtype(module)
            self.overrides = played_as(own_dtype, module.backend, torch_dtype, inference_backend)
            # Always: the restored module is the learner's, whose LoRA adapters are folded in to play.
            module.play_in(
                self.overrides["torch_dtype"] or own_dtype,
                self.overrides["inference_backend"] or module.backend,
            )
        say_if_emulated(module)
        self._attach(config, module, env_config or {})

    @classmethod
    def from_config(cls, config: AlgorithmConfig) -> CheckpointPolicy:
        """The policy of ``config``'s own model, untrained (a base model played zero-shot, as
        ``benchmarks/eval_throughput.py`` plays SmolLM2)."""
        policy = cls.__new__(cls)
        policy.overrides = {"torch_dtype": None, "inference_backend": None}
        policy._attach(config, inference_module(config), {})
        return policy

    def _attach(self, config: AlgorithmConfig, module: RLModule, env_config: dict[str, Any]) -> None:
        self.env_config = {**dict(config.env_config), **env_config}
        self.config = config.copy(copy_frozen=False).environment(env_config=self.env_config)
        self.module = module
        self.prompt_pipeline = self.config.build_env_to_module_connector()
        self.generated_tokens = 0  # the answers' tokens so far (the evaluation's tokens per second)

    @property
    def engine(self) -> dict[str, str]:
        """What the policy plays in: its weights' dtype and its module's resolved ``inference_backend``."""
        return {"torch_dtype": weights_dtype(self.module), "inference_backend": self.module.backend}

    def reseed(self, seed: int) -> CheckpointPolicy:
        """Seed the sampler for one evaluation seed."""
        torch.manual_seed(seed)
        return self

    def __call__(self, slots: list[EpisodeSlot]) -> Answers:
        return self.answers([slot.episode for slot in slots])

    def answers(self, episodes: list[Any]) -> Answers:
        """The policy's answers to the running RLlib episodes' current prompts, with the module's
        flags of each (length-cut answer, cut prompt) for the evaluation's cut rates."""
        batch = self.prompt_pipeline(rl_module=self.module, batch={}, episodes=episodes, explore=False)
        out = self.module.forward_inference(batch)
        self.generated_tokens += int(out[RESP_MASK].sum())
        flags = {key: out[key].tolist() for key in (LENGTH_CUT, PROMPT_CUT) if key in out}
        return Answers(out[ACTION_TEXT], flags)


def export_merged(checkpoint: str | Path, output_dir: str | Path) -> Path:
    """Write a merged Hugging Face model directory (weights, config, tokenizer) from a checkpoint.

    ``checkpoint`` is an algorithm checkpoint directory or a policy folder (as ``rllib evaluate``
    takes). The result loads with ``AutoModelForCausalLM.from_pretrained`` and serves with vLLM like
    any base model.
    """
    out = Path(output_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"export_merged: {out} exists and is not empty")
    save_merged_model_dir(CheckpointPolicy(checkpoint).module, out)
    return out

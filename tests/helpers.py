"""Helpers shared by several test modules, imported as ``from helpers import ...`` (pytest puts ``tests/``
on ``sys.path``). Heavy imports (torch, RLlib) happen inside the functions that need them, so the pure
tests (advantages, data files) stay light."""

from __future__ import annotations

import copy
import importlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from envs.webshop.data import read_json
from hgpo_rllib.advantages import step_returns_and_scores

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

    from hgpo_rllib.algorithms.hgpo.hgpo import HGPO, HGPOConfig
    from hgpo_rllib.algorithms.hiper.hiper import HiPERConfig
    from hgpo_rllib.evaluation.policy_loading import CheckpointPolicy
    from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TUNED = ROOT / "tuned_examples"
DATA = TESTS / "data"
BENCHMARKS = ROOT / "benchmarks"
#: The scripts users run: ``benchmarks/*.py`` and ``scripts/*.py``.
SCRIPT_FILES = sorted([*BENCHMARKS.glob("*.py"), *(ROOT / "scripts").glob("*.py")])


def benchmark_module(name: str) -> Any:
    """A script of ``benchmarks/`` imported as a module: they import their siblings (``results_file``,
    ``machine``) by name, so ``benchmarks/`` goes on ``sys.path`` (last: it shadows nothing)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return importlib.import_module(name)


#: A line the session's Ray forwards from a worker: ``(Name pid=N) ...``, maybe in colour.
RAY_WORKER_LINE = re.compile(r"(\x1b\[\d+m)?\(")


def own_stderr(err: str) -> str:
    """Captured stderr without the lines Ray forwards from its workers: the session's cluster outlives
    each test, and a worker's line (an actor that failed in an earlier test, say) can arrive in any
    later test's capture."""
    return "".join(line for line in err.splitlines(keepends=True) if not RAY_WORKER_LINE.match(line))


# ------------------------------------------------------------------------------ test data files
def run_python(code: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a child process (``subprocess.run`` keywords: ``env``, ``cwd``, ``input``,
    ``timeout``); its failure fails the test here, with the child's stderr in the message."""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, **kwargs)
    assert child.returncode == 0, f"the child exited with {child.returncode}:\n{child.stderr}"
    return child


def golden_cases(estimator: str) -> list[dict[str, Any]]:
    """The reference's advantage cases for "grpo", "gigpo" or "hgpo" (docs/hgpo_algorithm.md §8)."""
    return read_json(DATA / "golden" / f"{estimator}_cases.json.xz")["cases"]


def webshop_golden(name: str) -> dict[str, Any]:
    """One of the fixtures made by running the original WebShop code (tests/data/README.md)."""
    return read_json(DATA / "webshop" / f"webshop_{name}.json.xz")


# ------------------------------------------------------------------- random advantage batches
#: Hypothesis settings of the advantage property tests.
SETTINGS = settings(max_examples=60, deadline=None)


class Batch(NamedTuple):
    group_ids: list[str]
    traj_ids: list[str]
    step_idx: list[int]
    obs: list[str]
    step_returns: np.ndarray
    episode_scores: np.ndarray


@st.composite
def batches(draw: Any, max_groups: int = 3, max_trajs: int = 4, max_len: int = 7) -> Batch:
    """Rows of random walks over 3 symbols, in shuffled order. Rewards are dyadic and the
    penalty is 0.25 so that every return is exact and 'equal' means equal."""
    rows = []
    for group in range(draw(st.integers(1, max_groups))):
        for traj in range(draw(st.integers(1, max_trajs))):
            length = draw(st.integers(1, max_len))
            obs = draw(st.lists(st.sampled_from("ABC"), min_size=length, max_size=length))
            rewards = draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, 10.0]), min_size=length, max_size=length))
            valid = draw(st.lists(st.booleans(), min_size=length, max_size=length))
            rows += [
                (f"g{group}", f"g{group}t{traj}", t, obs[t], rewards[t], valid[t]) for t in range(length)
            ]
    rows = draw(st.permutations(rows))
    groups, trajs, steps, obs, rewards, valid = (list(column) for column in zip(*rows, strict=True))
    returns, scores = step_returns_and_scores(trajs, steps, rewards, valid, 0.5, invalid_penalty=0.25)
    return Batch(groups, trajs, steps, obs, returns, scores)


# --------------------------------------------------------------------------- the tiny policy
CORPUS = [
    f"You arrive at drawer {i}. On the drawer {i}, you see a mug {i % 3}.\n"
    f"go north\ngo south\ntake mug {i % 3} from drawer {i}\nopen drawer {i}"
    for i in range(300)
]


def build(inference_only: bool = False, **model_config: Any) -> LLMRLModule:
    """Build the module the way RLlib does (spec -> build); text spaces are unused by the module."""
    import gymnasium as gym
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule

    spec = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=gym.spaces.Text(max_length=4096),
        action_space=gym.spaces.Text(max_length=4096),
        inference_only=inference_only,
        model_config={"tokenizer_corpus": CORPUS, "max_new_tokens": 16, **model_config},
    )
    return spec.build()


def train_batch(prompts: dict[str, torch.Tensor], out: dict[str, Any]) -> dict[str, torch.Tensor]:
    from ray.rllib.core.columns import Columns

    return {**prompts, "resp_ids": out[Columns.ACTIONS], "resp_mask": out["resp_mask"]}


# ---------------------------------------------------------------------- HGPO on KeyChest
#: The smallest Qwen2 the tests build (policies, critics, warm starts): they check plumbing, not learning.
MICRO = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
TINY_MODEL = {"tiny_model": MICRO, "tokenizer_vocab_size": 400}
GROUP_SIZE = 2
GROUPS = 3


def keychest_config(*, remote_runners: int = 1, **training: Any) -> HGPOConfig:
    """Small but complete: 3 groups of 2 episodes, <= 4 steps, 8-token responses."""
    from hgpo_rllib import HGPOConfig

    settings = {
        "group_size": GROUP_SIZE,
        "groups_per_iteration": GROUPS,
        "max_new_tokens": 8,
        "max_prompt_tokens": 160,
        "minibatch_size": 8,
        "micro_batch_size": 4,
        "lr": 1e-3,
        **training,
    }
    return (
        HGPOConfig()
        .environment("keychest", env_config={"max_steps": 4})
        .env_runners(
            num_env_runners=remote_runners,
            num_envs_per_env_runner=2 * GROUP_SIZE,
            create_local_env_runner=remote_runners == 0,
        )
        .rl_module(model_config=TINY_MODEL)
        .training(**settings)
        .debugging(seed=0)
    )


def cutting_policy() -> CheckpointPolicy:
    """The tiny random-init KeyChest policy with every answer length-cut (it may not end an answer
    before ``max_new_tokens``: ``min_new_tokens`` is the same) and every prompt cut (KeyChest's
    shortest prompt is longer than 16 tokens), outside Ray."""
    from hgpo_rllib.evaluation.policy_loading import CheckpointPolicy

    config = keychest_config(remote_runners=0, max_new_tokens=2, min_new_tokens=2, max_prompt_tokens=16)
    return CheckpointPolicy.from_config(config)


def play_interrupted_after(
    games: int, of_pass: str | None = None, calls: list[tuple[Any, list[int]]] | None = None
) -> Any:
    """``evaluation.protocol.play`` stopped by Ctrl-C once ``games`` games of the pass named
    ``of_pass`` (its ``desc``; any pass if None) have ended and been saved: an evaluation interrupted
    mid-seed. Each call's ``desc`` and task seeds go to ``calls``. Patch it in with monkeypatch."""
    from hgpo_rllib.evaluation import protocol

    play = protocol.play

    def interrupted(*args: Any, on_episode_end: Any, **kwargs: Any) -> Any:
        desc = kwargs.get("desc")
        if calls is not None:
            calls.append((desc, list(args[3])))
        ended = []

        def end(record: dict[str, Any]) -> None:
            on_episode_end(record)
            ended.append(record)
            if of_pass in (None, desc) and len(ended) == games:
                raise KeyboardInterrupt

        return play(*args, on_episode_end=end, **kwargs)

    return interrupted


#: vLLM's engine settings in tests: eager mode skips vLLM's compilation at start-up (and, with the
#: explicit KV cache size the module gives a CPU engine, its memory profiling).
VLLM_ENGINE_ARGS = {"enforce_eager": True}
#: The tiny model with 32-wide heads: vLLM's CPU attention has no kernel for 16.
TINY_VLLM_MODEL = {**TINY_MODEL, "tiny_model": {**TINY_MODEL["tiny_model"], "hidden_size": 64}}

#: HiPER's tiny policy with a tiny critic beside it.
TINY_HIPER_MODEL = {**TINY_MODEL, "critic_tiny_model": MICRO}


def hiper_keychest_config(**training: Any) -> HiPERConfig:
    """HiPER on KeyChest in plan-execute answers, local runner: 4 episodes of <= 3 steps, a tiny
    policy and critic."""
    from hgpo_rllib import HiPERConfig

    return (
        HiPERConfig()
        .environment("keychest", env_config={"max_steps": 3, "answer_format": "plan_execute"})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, create_local_env_runner=True)
        .rl_module(model_config=TINY_HIPER_MODEL)
        .training(
            groups_per_iteration=4,
            max_new_tokens=16,
            max_prompt_tokens=200,
            minibatch_size=8,
            micro_batch_size=4,
            lr=1e-3,
            critic_lr=1e-3,
            **training,
        )
        .debugging(seed=0)
    )


#: The KeyChest team's roles (``keychest_team``).
TEAM_ROLES = ("planner", "executor")


def keychest_team_config(*, shared: bool, **training: Any) -> HGPOConfig:
    """Dr. MAS's KeyChest planner/executor team, local runner: one tiny LLM per role, or one
    (``shared``) serving both; 2 groups of 2, agent-wise normalisation."""
    import functools

    from hgpo_rllib import HGPOConfig
    from hgpo_rllib.experiments.teams import SHARED_MODULE_ID, role_module

    modules = {SHARED_MODULE_ID} if shared else set(TEAM_ROLES)
    return (
        HGPOConfig()
        .environment("keychest_team", env_config={"max_steps": 4})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, create_local_env_runner=True)
        .multi_agent(policies=modules, policy_mapping_fn=functools.partial(role_module, shared))
        .rl_module(model_config=TINY_MODEL)
        .training(
            group_size=2,
            groups_per_iteration=2,
            max_new_tokens=8,
            max_prompt_tokens=160,
            minibatch_size=64,
            micro_batch_size=8,
            lr=1e-3,
            normalize_by="agent",
            **training,
        )
        .debugging(seed=0)
    )


def learner_weights(algo: HGPO, module_id: str = "default_policy") -> dict[str, np.ndarray]:
    """A copy of one module's learner state (a LoRA module's: its adapters): a local learner's state
    arrays share memory with its live parameters."""
    state = algo.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]
    return copy.deepcopy(state[module_id])


def optimizer_state(algo: HGPO) -> Any:
    return copy.deepcopy(algo.learner_group.get_state(components="learner/optimizer")["learner"]["optimizer"])


def assert_same_tree(a: Any, b: Any) -> None:
    """Exact equality of nested dicts/lists of arrays, tensors and scalars."""
    import torch

    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tree(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_tree(x, y)
    elif isinstance(a, (np.ndarray, torch.Tensor)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    else:
        assert a == b


def max_abs_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(np.asarray(a[k]) - np.asarray(b[k])).max()) for k in a)


#: The largest change one AdamW step (betas 0.9, 0.999) can make to a weight, in units of the learning
#: rate: |m_hat / sqrt(v_hat)| <= (1 - beta1) / sqrt(1 - beta2) (Kingma & Ba 2015, §2.1), 1 at step 1.
ADAM_STEP_BOUND = 0.1 / np.sqrt(1e-3)


def assert_policy_moved(
    before: dict[str, np.ndarray], after: dict[str, np.ndarray], *, lr: float, optimizer_steps: int
) -> None:
    """An update really moved the policy, by what AdamW can do: every change is finite; the largest
    is at least half a step of ``lr`` (AdamW's first step moves every weight with a gradient by about
    ``lr``; float rounding is ~1e-9) and at most ``optimizer_steps`` maximal steps (plus 1% for weight
    decay); the frozen reference model (``ref_lm.*``) did not move at all."""
    assert optimizer_steps >= 1 and before.keys() == after.keys()
    # Each tensor's largest change, one float64 difference at a time: a real model's all at once
    # would take 8 bytes per parameter.
    changes: dict[str, float] = {}
    for k in before:
        change = np.abs(np.subtract(after[k], before[k], dtype=np.float64))
        assert np.isfinite(change).all(), f"weight {k} became non-finite"
        changes[k] = float(change.max())
    largest = max(change for k, change in changes.items() if not k.startswith("ref_lm."))
    bound = 1.01 * ADAM_STEP_BOUND * lr * optimizer_steps
    assert 0.5 * lr <= largest <= bound, f"largest change {largest:.3g}, not in [{0.5 * lr}, {bound:.3g}]"
    assert all(change == 0.0 for k, change in changes.items() if k.startswith("ref_lm."))


def optimizer_steps(*results: dict[str, Any]) -> int:
    """Optimizer steps taken in the iterations of these ``algo.train()`` results."""
    return sum(int(r["learners"]["default_policy"]["num_optimizer_steps"]) for r in results)


# ---------------------------------------------------------------------- experiment files
EXPERIMENT = textwrap.dedent(
    """
    from ray import tune
    from envs.keychest.env import COMMANDS
    from hgpo_rllib import HGPOConfig

    config = (
        HGPOConfig()
        .environment("keychest", env_config={{"max_steps": 4}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
        .rl_module(model_config={{
            "tiny_model": {{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "num_key_value_heads": 1}},
            "tokenizer_vocab_size": 400,
            "action_vocabulary": list(COMMANDS),
            "constrain_to_admissible": True,
        }})
        .training(group_size=2, groups_per_iteration=2, max_new_tokens=1, max_prompt_tokens=160,
                  minibatch_size=8, micro_batch_size=8, lr=1e-3, kl_coeff=0.0)
        .debugging(seed=0)
    )
    stop = {{"training_iteration": {stop_iteration}}}
    {extra}
    """
)


#: HiPER's counterpart: plan-execute answers, a tiny policy and a tiny critic.
HIPER_EXPERIMENT = textwrap.dedent(
    """
    from hgpo_rllib import HiPERConfig

    micro = {{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1}}
    config = (
        HiPERConfig()
        .environment("keychest", env_config={{"max_steps": 4, "answer_format": "plan_execute"}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
        .rl_module(model_config={{"tiny_model": micro, "critic_tiny_model": micro,
                                  "tokenizer_vocab_size": 400}})
        .training(groups_per_iteration=4, max_new_tokens=8, max_prompt_tokens=200,
                  minibatch_size=8, micro_batch_size=8, lr=1e-3, critic_lr=1e-3, kl_coeff=0.0)
        .debugging(seed=0)
    )
    stop = {{"training_iteration": {stop_iteration}}}
    {extra}
    """
)


#: Dr. MAS's counterpart: the KeyChest planner/executor team, one tiny LLM per role, agent-wise groups.
TEAM_EXPERIMENT = textwrap.dedent(
    """
    import functools
    from hgpo_rllib import HGPOConfig
    from hgpo_rllib.experiments.teams import role_module

    config = (
        HGPOConfig()
        .environment("keychest_team", env_config={{"max_steps": 4}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
        .multi_agent(policies={{"planner", "executor"}},
                     policy_mapping_fn=functools.partial(role_module, False))
        .rl_module(model_config={{
            "tiny_model": {{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "num_key_value_heads": 1}},
            "tokenizer_vocab_size": 400,
        }})
        .training(group_size=2, groups_per_iteration=2, max_new_tokens=8, max_prompt_tokens=160,
                  minibatch_size=64, micro_batch_size=8, lr=1e-3, kl_coeff=0.0, normalize_by="agent")
        .debugging(seed=0)
    )
    stop = {{"training_iteration": {stop_iteration}}}
    {extra}
    """
)
#: HGPO with overlapped sampling (issue 29): the runners sample during the update.
ASYNC_EXPERIMENT = EXPERIMENT.replace("{extra}", "config.training(async_sampling=True)\n{extra}")
#: The experiment files ``write_experiment`` writes, and the algorithm class each one trains.
EXPERIMENTS = {
    "HGPO": (EXPERIMENT, "HGPO"),
    "HGPO-async": (ASYNC_EXPERIMENT, "HGPO"),
    "HiPER": (HIPER_EXPERIMENT, "HiPER"),
    "DrMAS": (TEAM_EXPERIMENT, "HGPO"),
}


def sft_args(out: Path, *extra: str) -> list[str]:
    """``rllib sft`` of a micro KeyChest warm start into ``out`` (2 episodes, 1 epoch), plus ``extra``."""
    return [
        "sft",
        "--env",
        "keychest",
        "--episodes",
        "2",
        "--output",
        str(out),
        "--tiny-model",
        json.dumps(MICRO),
        "--vocab-size",
        "300",
        "--max-new-tokens",
        "72",  # KeyChest's answers take up to 67 tokens of the 300-token vocabulary
        "--batch-size",
        "4",
        "--epochs",
        "1",
        *extra,
    ]


def crash_once_lines(marker: Path, iteration: int) -> str:
    """Experiment-file lines: a callback that raises in ``iteration`` the first time only (``marker``,
    a file it creates, remembers the crash), for tests of ``rllib train file --resume``."""
    return textwrap.dedent(f"""
        def crash_once(*, algorithm, result, **kwargs):
            marker = {str(marker)!r}
            if result["training_iteration"] == {iteration} and not __import__("os").path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("simulated crash")

        config.callbacks(on_train_result=crash_once)
    """)


def crashing_tuned_example(
    tmp_path: Path, example: str, *, stop_iteration: int, crash_at: int, checkpoint_freq: int | None = None
) -> tuple[Path, Path]:
    """An experiment file that runs ``tuned_examples/<example>`` (its settings, config, name and
    checkpoint frequency, or ``checkpoint_freq``) for ``stop_iteration`` iterations and crashes once in
    ``crash_at``; returns the file and the crash marker."""
    marker = tmp_path / "crashed"
    freq = "run['checkpoint_freq']" if checkpoint_freq is None else str(checkpoint_freq)
    path = tmp_path / f"crashing_{example}"
    crash = textwrap.indent(crash_once_lines(marker, crash_at), "    ")
    path.write_text(
        textwrap.dedent(f"""
        import runpy
        example = runpy.run_path({str(TUNED / example)!r})
        SETTINGS = example["SETTINGS"]

        def experiment(settings):
            run = example["experiment"](settings)
            config = run["config"]
        """)
        + crash
        + f"    stop = {{'training_iteration': {stop_iteration}}}\n"
        + f"    return {{**run, 'checkpoint_freq': {freq}, 'stop': stop}}\n"
    )
    return path, marker


def write_experiment(
    tmp_path: Path, extra: str = "", algorithm: str = "HGPO", *, stop_iteration: int = 2
) -> Path:
    """A tiny KeyChest experiment file for ``rllib train file`` (``extra``: more lines at the end) of
    ``algorithm``, a key of :data:`EXPERIMENTS` ("HGPO", "HGPO-async", "HiPER", or "DrMAS": the
    two-role team), that stops after ``stop_iteration`` iterations."""
    path = tmp_path / "experiment.py"
    path.write_text(EXPERIMENTS[algorithm][0].format(extra=extra, stop_iteration=stop_iteration))
    return path


def train_args(path: Path, storage: Path, *extra: str, name: str | None = "run") -> list[str]:
    """``rllib train file`` of the experiment file ``path`` into ``storage``, as the experiment
    ``name`` (None: the file's own), plus the ``extra`` flags."""
    named = [] if name is None else ["--name", name]
    return ["train", "file", str(path), "--storage-path", str(storage), *named, *extra]


# ------------------------------------------------------------------ a GGUF file of the tiny policy
def write_qwen2_gguf(lm: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, file: Path) -> Path:
    """``lm`` and its byte-level BPE tokenizer as a float32 GGUF file of architecture qwen2, written with
    gguf's writer and tensor-name map as llama.cpp's converter writes one (tied output not stored)."""
    import gguf

    config = lm.config
    writer = gguf.GGUFWriter(file, "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    added = {token["id"]: token for token in state["added_tokens"]}
    by_id = {i: text for text, i in state["model"]["vocab"].items()} | {
        i: t["content"] for i, t in added.items()
    }
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([by_id[i] for i in range(len(by_id))])
    writer.add_token_types(
        [
            gguf.TokenType.NORMAL
            if i not in added
            else gguf.TokenType.CONTROL
            if added[i]["special"]
            else gguf.TokenType.USER_DEFINED
            for i in range(len(by_id))
        ]
    )
    writer.add_token_merges([" ".join(pair) for pair in state["model"]["merges"]])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, tensor in lm.state_dict().items():
        if name != "lm_head.weight" or not config.tie_word_embeddings:
            writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return file

"""Evaluation throughput (issue 63 item 6): goals per hour of ``rllib evaluate``'s own loop (its
policy and :func:`~hgpo_rllib.evaluation.rollout.play`) with one episode at a time against its levers.

The same ``--goals`` evaluation goals (WebShop's test goals, or ALFWorld's unseen games with ``--env
alfworld``; the task seeds of evaluation seed ``--seed``) are played greedily, capped at ``--max-steps``,
on each path:

1. one episode at a time, HF ``generate`` (the baseline);
2. continuous batching: ``--batch-size`` episodes in flight (at most ``--goals``), one generation
   call answering all of them, a finished episode's slot starting the next goal at once (prefill-once
   off);
3. the same with each distinct prompt prefilled once (``share_prompt_prefill``): ``rllib evaluate``'s
   default path;
4. with ``--dtype bfloat16`` (or ``cpu``: bfloat16 where the CPU has it natively), the default path
   in that dtype (``rllib evaluate --dtype``): a third lever, the weights cast once the policy's own
   dtype is done with;
5. with ``--vllm``, vLLM's CPU build (prefix caching) at the same batch size, in ``--dtype`` where one
   is given (one vLLM row: each path takes minutes), else in the policy's own dtype.

Each path first plays one step of the first goal untimed (warm-up; vLLM's engine starts there, its
seconds reported apart). A path's seconds are its whole play, env steps included. The table gives
goals per hour, generated tokens per second, each path's ratio to the baseline and, for the chained
levers (batching, prefill once, the dtype), each one's step and share of their speed-up (``log step /
log total``, so the shares of chained speed-ups add up to 1). The levers in the policy's own dtype must
not change the answers: their answers are compared with the baseline's, episode by episode, and the
script fails (after writing its table) where one differs. A path in another dtype rounds otherwise and
cannot give the same answers: the episodes whose answers differ and the goals won beside the
baseline's are reported for it, without failing.

The model is ``smollm2-135m-instruct`` in float32, zero-shot (K = 2, prompts of up to 768 tokens,
answers of up to 64, as its CPU runs), or ``--policy PATH`` (a warm start, policy folder or checkpoint,
played at its own prompt settings; greedy here whatever its ``eval_temperature``); ``--model
tiny-qwen2`` checks the plumbing. Run on idle cores (an estimated 30-45 minutes on 2 cores at the
defaults, plus vLLM's engine start; each further path 5-10 minutes):
``python benchmarks/eval_throughput.py --vllm --dtype bfloat16``. Writes
``docs/results/eval_throughput_<env>.md`` (``_<policy folder name>`` added for ``--policy``,
``_<dtype>`` for ``--dtype``) or into ``--output``; records the CPU and the load.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any

import hgpo_rllib  # noqa: F401  first: it sets OpenMP's short spin before torch loads (docs/throughput.md)
from hgpo_rllib.help_text import doc_summary

# isort: split
import torch
from machine import cpu_line, load, uptime
from results_file import RESULTS_DIR, write_result  # benchmarks/ is on sys.path as a script

import envs
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.algorithms.torch.matmul_rate import emulated
from hgpo_rllib.evaluation.output_dir import eval_splits
from hgpo_rllib.evaluation.policy_loading import PLAY_DTYPES, CheckpointPolicy, play_dtype
from hgpo_rllib.evaluation.rollout import EpisodeSlot, Policy, play, task_seeds
from hgpo_rllib.experiments.cpu import REAL_MODEL_CPU_TRAINING
from hgpo_rllib.rl_module.models import TORCH_DTYPES

REAL_MODEL = "smollm2-135m-instruct"
#: vLLM's CPU engine as benchmarks/prefill_once.py starts it: eager, 1 GiB of KV cache.
VLLM_ENGINE = {"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30}


@dataclasses.dataclass(frozen=True)
class PlayPath:
    """One way of playing the goals; ``lever``: what it adds to the path before it (the levers'
    chain); ``dtype``: another dtype than the policy's own (None: its own)."""

    name: str
    batch_size: int
    backend: str
    share_prefill: bool
    lever: str | None = None
    dtype: str | None = None


def paths(in_flight: int, vllm: bool, dtype: str | None = None) -> list[PlayPath]:
    """The baseline, the default path's two levers in turn (``in_flight`` episodes at once), the
    default path in ``dtype`` where one is given, and vLLM (in ``dtype``) where asked. The paths in
    ``dtype`` come last: the weights, once cast to it, are not cast back."""
    chosen = [
        PlayPath("one episode at a time (baseline)", 1, "hf", False),
        PlayPath(
            f"continuous batching, {in_flight} in flight", in_flight, "hf", False, "continuous batching"
        ),
        PlayPath("+ prefill once (rllib evaluate's default)", in_flight, "hf", True, "prefill once"),
    ]
    if dtype is not None:
        chosen.append(
            PlayPath(f"+ {dtype} (rllib evaluate --dtype {dtype})", in_flight, "hf", True, dtype, dtype)
        )
    if vllm:
        name = f"vLLM's CPU build{'' if dtype is None else f' in {dtype}'}, {in_flight} in flight"
        chosen.append(PlayPath(name, in_flight, "vllm", True, dtype=dtype))
    return chosen


def ratios(rates: dict[str, float], baseline: str) -> dict[str, float]:
    """Each rate over the baseline's."""
    return {name: rate / rates[baseline] for name, rate in rates.items()}


def lever_shares(steps: dict[str, float]) -> dict[str, float | None]:
    """Each lever's share of the speed-up its chained ``steps`` (ratios) multiply to: ``log step /
    log product``; None where the product is 1 (no speed-up to share)."""
    total = sum(math.log(step) for step in steps.values())
    return {lever: (math.log(step) / total if total != 0 else None) for lever, step in steps.items()}


def set_generation(policy: CheckpointPolicy, path: PlayPath, own_dtype: str) -> None:
    """Play greedily on ``path``'s engine, dtype (``own_dtype``: the policy's) and prefill setting, as
    ``rllib evaluate --dtype/--inference-backend`` does (:meth:`LLMRLModule.play_in`): the weights are
    cast where the dtype changes, the module's generation settings replaced and its engine restarted
    (the next answer starts the new one)."""
    module = policy.module
    module.play_in(path.dtype or own_dtype, path.backend)
    module.llm_config = dataclasses.replace(
        module.llm_config,
        eval_temperature=0.0,
        share_prompt_prefill=path.share_prefill,
        vllm_gpu_memory_utilization=0.3,
        vllm_engine_args=VLLM_ENGINE,
    )


def recording(policy: Policy, answers: dict[int, list[str]]) -> Policy:
    """``policy``, keeping every answer under its episode's task seed."""

    def act(slots: list[EpisodeSlot]) -> list[str]:
        given = policy(slots)
        for slot, answer in zip(slots, given, strict=True):
            answers.setdefault(slot.result["task_seed"], []).append(answer)
        return given

    return act


def play_path(
    policy: CheckpointPolicy,
    env_name: str,
    env_config: dict[str, Any],
    tasks: list[int],
    path: PlayPath,
    own_dtype: str,
) -> dict[str, Any]:
    """Warm up, then play ``tasks`` on ``path``: seconds, episodes, steps, generated tokens, each
    episode's answers, the warm-up's seconds and the load before and after."""
    set_generation(policy, path, own_dtype)
    started = time.perf_counter()
    play(env_name, {**env_config, "max_steps": 1}, policy, tasks[:1], batch_size=1, desc="warm-up")
    warm_up = time.perf_counter() - started
    answers: dict[int, list[str]] = {}
    load_before, tokens_before = load(), policy.generated_tokens
    started = time.perf_counter()
    records = play(
        env_name, env_config, recording(policy, answers), tasks, batch_size=path.batch_size, desc=path.name
    )
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "episodes": len(records),
        "steps": sum(record["steps"] for record in records),
        "won": sum(record["won"] for record in records),
        "tokens": policy.generated_tokens - tokens_before,
        "answers": answers,
        "warm_up_s": warm_up,
        "load": f"{load_before} / {load()}",
    }


def differing_episodes(results: dict[str, dict[str, Any]], baseline: str) -> dict[str, int]:
    """Per path, the episodes whose answers differ from the baseline's."""
    reference = results[baseline]["answers"]
    return {
        name: sum(result["answers"].get(task) != answers for task, answers in reference.items())
        for name, result in results.items()
    }


def answers_report(chosen: list[PlayPath], results: dict[str, dict[str, Any]], differ: dict[str, int]) -> str:
    """Whether the paths in the policy's own dtype gave the baseline's answers, and for each path in
    another dtype, its episodes whose answers differ and its goals won beside the baseline's."""
    baseline = results[chosen[0].name]
    own = [path.name for path in chosen if path.dtype is None]
    if all(differ[name] == 0 for name in own):
        lines = [
            "Same answers on every path in the policy's own dtype: yes, every episode's answers equal the "
            f"baseline's ({baseline['steps']} steps, {baseline['won']} goals won)."
        ]
    else:
        lines = [
            "Same answers on every path in the policy's own dtype: **no**; episodes whose answers differ "
            "from the baseline's: "
            + ", ".join(f"{name} {differ[name]}" for name in own if differ[name])
            + "."
        ]
    for path in chosen:
        if path.dtype is not None:
            lines.append(
                f"In {path.dtype} (other rounding, other answers allowed): {path.name}: "
                f"{differ[path.name]} of {baseline['episodes']} episodes' answers differ from the "
                f"baseline's; {results[path.name]['won']} goals won (baseline {baseline['won']})."
            )
    return "\n\n".join(lines) + "\n"


def table(chosen: list[PlayPath], results: dict[str, dict[str, Any]]) -> str:
    """Markdown rows per path: goals per hour, generated tokens per second, the ratio to the
    baseline, the lever the path adds with its step and its share of the chained levers' speed-up."""
    rates = {name: 3600 * r["episodes"] / r["seconds"] for name, r in results.items()}
    baseline = chosen[0].name
    vs_baseline = ratios(rates, baseline)
    steps, previous = {}, baseline
    for path in chosen[1:]:
        if path.lever is not None:
            steps[path.lever] = rates[path.name] / rates[previous]
            previous = path.name
    shares = lever_shares(steps)
    chain_end = previous
    lines = [
        "| path | goals | steps | play s | goals/hour | generated tok/s | vs baseline | lever | step "
        "| share of the levers' speed-up | warm-up s | load before / after |",
        "|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|---|",
    ]
    for path in chosen:
        result = results[path.name]
        if path.lever is not None:
            share = shares[path.lever]
            lever = f"{path.lever} | {steps[path.lever]:.2f}x | {'-' if share is None else f'{share:.0%}'}"
        elif path.backend == "vllm":
            lever = f"vLLM instead of HF | {rates[path.name] / rates[chain_end]:.2f}x | -"
        else:
            lever = "- | - | -"
        lines.append(
            f"| {path.name} | {result['episodes']} | {result['steps']} | {result['seconds']:.1f} "
            f"| {rates[path.name]:,.1f} | {result['tokens'] / result['seconds']:,.1f} "
            f"| {vs_baseline[path.name]:.2f}x | {lever} | {result['warm_up_s']:.1f} | {result['load']} |"
        )
    return "\n".join(lines)


def load_policy(args: argparse.Namespace) -> CheckpointPolicy:
    """The policy of ``--policy``, else ``--model`` zero-shot at the real model's CPU prompt settings."""
    config = {"max_steps": args.max_steps}
    if args.policy is not None:
        return CheckpointPolicy(args.policy, env_config=config, env=args.env)
    return CheckpointPolicy.from_config(
        HGPOConfig()
        .environment(args.env or "webshop", env_config=config)
        .rl_module(model_config={"model": args.model, "torch_dtype": "float32"})
        .training(
            history_length=2,
            max_prompt_tokens=REAL_MODEL_CPU_TRAINING["max_prompt_tokens"],
            max_new_tokens=REAL_MODEL_CPU_TRAINING["max_new_tokens"],
        )
    )


def result_name(args: argparse.Namespace, env_name: str) -> str:
    """``eval_throughput_<env>[_<policy folder>][_<dtype>]``: a run with another dtype path does not
    replace the result of one without."""
    policy = f"_{args.policy.resolve().name}" if args.policy is not None else ""
    dtype = f"_{args.dtype}" if args.dtype is not None else ""
    return f"eval_throughput_{env_name}{policy}{dtype}"


def main(argv: list[str] | None = None, results_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--env", choices=["webshop", "alfworld"], help="default: the policy's, else webshop")
    parser.add_argument("--goals", type=int, default=8, help="evaluation goals played on every path")
    parser.add_argument("--seed", type=int, default=123, help="evaluation seed (its task seeds)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="episodes in flight at most (rllib evaluate's; --goals caps it)",
    )
    parser.add_argument("--max-steps", type=int, default=15, help="steps per episode at most")
    parser.add_argument("--model", default=REAL_MODEL, help="played zero-shot (tiny-qwen2: plumbing only)")
    parser.add_argument("--policy", type=Path, help="a warm start, policy folder or checkpoint instead")
    parser.add_argument(
        "--dtype",
        choices=PLAY_DTYPES,
        help="add the default path in this dtype (cpu: bfloat16 where native, else float32); vLLM "
        "plays in it",
    )
    parser.add_argument("--vllm", action="store_true", help="add vLLM's CPU build as the last path")
    parser.add_argument("--output", type=Path, default=results_dir)
    args = parser.parse_args(argv)
    if args.goals < 2 or args.batch_size < 2 or args.max_steps < 1:
        parser.error(
            "--goals and --batch-size must be >= 2 (one at a time is the baseline), --max-steps >= 1"
        )
    load_start = uptime()
    policy = load_policy(args)
    own_dtype = policy.engine["torch_dtype"]
    dtype = play_dtype(args.dtype)
    if dtype == own_dtype:
        parser.error(f"--dtype {args.dtype} is {dtype}, the policy's own dtype: no other path to play")
    if dtype is not None and emulated(TORCH_DTYPES[dtype]):
        print(f"note: this CPU emulates {dtype} (no AVX512_BF16 or AMX): its paths play slower than float32")
    env_name = envs.env_name(str(policy.config.env))
    facts = envs.env_facts(env_name, policy.env_config).evaluation
    split = eval_splits(env_name, facts, None, policy.env_config)[0]
    env_config = {**facts.env_config, **policy.env_config, **({} if split is None else {"split": split})}
    tasks = task_seeds(args.seed, args.goals)
    chosen = paths(min(args.batch_size, args.goals), args.vllm, dtype)
    results = {}
    try:
        for path in chosen:
            results[path.name] = play_path(policy, env_name, env_config, tasks, path, own_dtype)
    finally:
        policy.module.close_generator()
    differ = differing_episodes(results, chosen[0].name)
    model = str(args.policy) if args.policy is not None else f"{args.model} (zero-shot)"
    same = all(differ[path.name] == 0 for path in chosen if path.dtype is None)
    native = (
        "" if dtype is None else f" {dtype}: {'emulated' if emulated(TORCH_DTYPES[dtype]) else 'native'}."
    )
    report = (
        f"{model} in {own_dtype} on {env_name} `{split}`: {args.goals} goals (the task seeds of seed "
        f"{args.seed}), greedy, at most {args.max_steps} steps; {torch.get_num_threads()} torch thread(s), "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}.\n\n"
        f"CPU: {cpu_line()}.{native}\n\n`uptime` at the start: {load_start}; at the end: {uptime()}.\n\n"
        f"{table(chosen, results)}\n\n{answers_report(chosen, results, differ)}"
    )
    print(report)
    write_result(result_name(args, env_name), "Evaluation throughput", report, args.output)
    if not same:
        raise SystemExit("the levers changed the answers (see the lines under the table)")
    return {"results": results, "differing": differ}


if __name__ == "__main__":
    main()

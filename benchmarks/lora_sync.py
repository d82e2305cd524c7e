"""LoRA policy updates into vLLM: merged weights (what env runners get today) vs vLLM's own LoRA adapters.

Why: with ``model_config["lora"]`` the learner trains adapters only, yet each sync sends env runners the
full merged model (``lora.merged_state_dict`` then ``VLLMGenerator.load_weights``). vLLM can instead
serve the base model and load just the adapter (a few MB) per update, at the price of LoRA kernels in
every forward. This measures both on a random Qwen2.5-0.5B-shaped model (bf16) with r=16, alpha=32
adapters on all linear layers, B perturbed away from zero so the adapter changes the outputs:

* merged: merge aside, load into the env runner's plain model, ``VLLMGenerator.load_weights``;
* adapters: ``save_pretrained`` to /dev/shm, then ``add_lora`` of a new ``LoRARequest`` (the previous
  one removed) on an engine started with ``enable_lora=True``;

then the generation throughput of each engine (``--prompts`` x ``--new-tokens``, greedy), and whether
the two paths agree: greedy tokens and their log-probs for the same adapter state.

Run: ``nice -n 10 python benchmarks/lora_sync.py [--syncs 3]``. Writes docs/results/lora_sync.md.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from peft import PeftModel
from results_file import write_result  # benchmarks/ is on sys.path when run as a script
from transformers import PreTrainedModel
from vllm import LLM, SamplingParams
from vllm.lora.request import LoRARequest
from weight_sync import random_05b_model

from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.config import normalize_lora
from hgpo_rllib.rl_module.lora import add_adapters, merged_state_dict
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer
from hgpo_rllib.rl_module.vllm_generation import VLLMGenerator

LORA = normalize_lora({"r": 16, "alpha": 32})
DTYPE = "bfloat16"
# As benchmarks/weight_sync.py: eager mode and a fixed KV cache skip compilation and memory profiling.
ENGINE_ARGS = {"enforce_eager": True, "kv_cache_memory_bytes": 256 << 20}
MAX_MODEL_LEN = 256


@torch.no_grad()
def perturb_adapters(model: PeftModel, generator: torch.Generator) -> None:
    """One policy update's worth of change: every lora_B (zero at start) and lora_A moved."""
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.add_(torch.randn(p.shape, generator=generator).to(p.dtype), alpha=0.02)
        elif "lora_A" in name:
            p.add_(torch.randn(p.shape, generator=generator).to(p.dtype), alpha=1e-3)


def updates(syncs: int) -> list[torch.Generator]:
    """The random streams of the policy updates (warm-up + ``syncs``), fresh so both paths get the same."""
    return [torch.Generator().manual_seed(100 + i) for i in range(syncs + 1)]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def generate(
    llm: LLM, prompts: list[list[int]], new_tokens: int, lora: LoRARequest | None = None
) -> tuple[list[list[int]], list[list[float]], float]:
    """Greedy responses, their tokens' log-probs and the decode throughput (new tokens / s)."""
    params = SamplingParams(
        temperature=0.0,
        max_tokens=new_tokens,
        min_tokens=new_tokens,
        ignore_eos=True,
        logprobs=0,
        detokenize=False,
    )
    start = time.perf_counter()
    outputs = llm.generate(
        [{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False, lora_request=lora
    )
    seconds = time.perf_counter() - start
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    logps = [
        [step[t].logprob for step, t in zip(o.outputs[0].logprobs, toks, strict=True)]
        for o, toks in zip(outputs, tokens, strict=True)
    ]
    return tokens, logps, sum(map(len, tokens)) / seconds


def measure_merged(
    policy: PeftModel,
    runner_lm: PreTrainedModel,
    states: list[torch.Generator],
    prompts: list[list[int]],
    new_tokens: int,
) -> tuple[list[list[int]], list[list[float]], tuple[str, float, float, float, float, int]]:
    """Merged weights through the project's sync path: sync times, then greedy generation."""
    engine = VLLMGenerator(
        runner_lm,
        None,
        dtype=DTYPE,
        gpu_memory_utilization=0.5,
        max_model_len=MAX_MODEL_LEN,
        sampling_seed=0,
        engine_args=ENGINE_ARGS,
    )

    nbytes = 0

    def merged_sync() -> None:
        nonlocal nbytes
        runner_lm.load_state_dict(merged_state_dict(policy))
        nbytes = engine.load_weights(runner_lm)

    seconds = []
    for i, gen in enumerate(states):
        perturb_adapters(policy, gen)
        took = timed(merged_sync)
        if i:
            seconds.append(took)
        print(f"merged sync {i}: {took:.2f} s", flush=True)
    generate(engine._llm, prompts, 2)  # warm-up (the engine is private: the same LLM, sampled directly)
    tokens, logps, tps = generate(engine._llm, prompts, new_tokens)
    print(f"merged weights: {tps:.1f} tokens/s", flush=True)
    row = ("merged weights", statistics.median(seconds), min(seconds), max(seconds), tps, nbytes)
    return tokens, logps, row


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--syncs", type=int, default=3, help="timed syncs per path (after a warm-up one)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    tokenizer = build_tiny_tokenizer(None, 1024, ())
    prompts = torch.randint(
        3, 1024, (args.prompts, args.prompt_tokens), generator=torch.Generator().manual_seed(1)
    ).tolist()
    policy = add_adapters(random_05b_model(), LORA)  # the learner's model
    runner_lm = random_05b_model()  # the env runner's plain model (same seed: same base)
    rows = []

    # (a) merged weights through the project's sync path.
    merged_tokens, merged_logps, row = measure_merged(
        policy, runner_lm, updates(args.syncs), prompts, args.new_tokens
    )
    rows.append(row)
    gc.collect()  # the merged engine's processes are gone before the LoRA engine starts

    # (b) the base model in an engine with LoRA enabled; each update is a new adapter.
    base_dir = tempfile.TemporaryDirectory(prefix="hgpo-lora-base-", dir="/dev/shm")
    adapter_root = tempfile.TemporaryDirectory(prefix="hgpo-lora-", dir="/dev/shm")
    random_05b_model().save_pretrained(base_dir.name)
    tokenizer.save_pretrained(base_dir.name)
    policy = add_adapters(random_05b_model(), LORA)  # replayed from the start: the same updates
    error = ""
    try:
        llm = LLM(
            model=base_dir.name,
            dtype=DTYPE,
            max_model_len=MAX_MODEL_LEN,
            seed=0,
            skip_tokenizer_init=True,
            generation_config="vllm",
            logprobs_mode="processed_logprobs",
            enable_lora=True,
            max_lora_rank=LORA["r"],
            max_loras=1,
            **ENGINE_ARGS,
        )
    except Exception as err:  # the CPU build may refuse LoRA: record exactly how
        error = f"{type(err).__name__}: {err}"
        print(f"vLLM with enable_lora=True failed: {error}")
    if not error:
        request: LoRARequest | None = None

        def adapter_sync(lora_id: int) -> None:
            nonlocal request
            path = f"{adapter_root.name}/{lora_id}"
            policy.save_pretrained(path)
            if request is not None:
                llm.llm_engine.remove_lora(request.lora_int_id)
            request = LoRARequest(f"policy-{lora_id}", lora_id, path)
            if not llm.llm_engine.add_lora(request):
                raise RuntimeError(f"vLLM did not load the adapter {path}")

        seconds = []
        for i, gen in enumerate(updates(args.syncs)):
            perturb_adapters(policy, gen)
            took = timed(lambda i=i: adapter_sync(i + 1))
            if i:
                seconds.append(took)
            print(f"adapter sync {i}: {took:.2f} s", flush=True)
        generate(llm, prompts, 2, request)
        lora_tokens, lora_logps, lora_tps = generate(llm, prompts, args.new_tokens, request)
        adapter_bytes = sum(p.nbytes for n, p in policy.named_parameters() if "lora_" in n)
        rows.append(
            (
                "vLLM LoRA adapters",
                statistics.median(seconds),
                min(seconds),
                max(seconds),
                lora_tps,
                adapter_bytes,
            )
        )
        _, _, base_tps = generate(llm, prompts, args.new_tokens)
        del llm
        gc.collect()

    table = [
        "| path | bytes per sync | median sync s | min s | max s | generation tokens/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    table += [
        f"| {name} | {nbytes / 1e6:.1f} MB | {med:.2f} | {lo:.2f} | {hi:.2f} | {tps:.1f} |"
        for name, med, lo, hi, tps, nbytes in rows
    ]
    notes = [
        f"\n{args.syncs} timed syncs per path after a warm-up one; generation: {args.prompts} prompts "
        f"of {args.prompt_tokens} random tokens x {args.new_tokens} new tokens, greedy, one batch. "
        f"Model: random Qwen2.5-0.5B shape, {DTYPE}; LoRA r={LORA['r']}, alpha={LORA['alpha']}, "
        "all linear layers."
    ]
    if error:
        notes.append(f"\nvLLM's CPU build refused `enable_lora=True`: `{error}`")
    else:
        notes.append(f"\nThe LoRA engine without an adapter (base model): {base_tps:.1f} tokens/s.")
        same = sum(a == b for a, b in zip(merged_tokens, lora_tokens, strict=True))
        first = max(abs(a[0] - b[0]) for a, b in zip(merged_logps, lora_logps, strict=True))
        agree = []  # log-prob differences up to each pair's first different token (same context)
        for a, b, ta, tb in zip(merged_logps, lora_logps, merged_tokens, lora_tokens, strict=True):
            for x, y, u, v in zip(a, b, ta, tb, strict=True):
                agree.append(abs(x - y))
                if u != v:
                    break
        notes.append(
            f"\nAgreement (same adapter state): {same}/{len(prompts)} greedy responses identical; "
            f"first token's log-prob differs by at most {first:.4f} nats; up to each pair's "
            f"first different token, max |log-prob difference| {max(agree):.4f} nats, mean "
            f"{statistics.fmean(agree):.4f}."
        )
    text = "\n".join(table) + "\n" + "".join(notes)
    print("\n" + text)
    write_result("lora_sync", "LoRA sync to vLLM: merged weights vs vLLM LoRA adapters", text)


if __name__ == "__main__":
    main()

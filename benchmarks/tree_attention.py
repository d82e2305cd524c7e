"""Shared prompt prefixes on GPU kernels: the learner's training pass as prefix trees against plain rows.

Why (issue 29 item 1, docs/throughput.md): on the CPU main job (3.5M parameters, ~475-token prompts)
prefix trees save ~10% of the tokens and no wall time, since a dense attention kernel computes every
(query, key) pair of a packed sequence, masked or not. Where sharing should pay is the paper's shape:
a 1.5B model, prompts of 1-2k tokens, groups of 8 that share the task's opening and often the whole
prompt. There sdpa takes the tree mask through its memory-efficient kernel (flash attention takes no
custom mask). This measures, per micro-batch scenario, the training forward and backward (log-probs and
entropies of the response tokens, the loss's backward) of the plain rows and of the packed trees
(``hgpo_rllib.rl_module.hidden_states``, the learner's own code): median seconds, real tokens per
second, tokens computed, padding, peak memory; and, on one scenario, how far the two paths' per-token
log-probs and gradients differ in float32 and under bfloat16 autocast (the learner's mixed precision).

Needs torch and Transformers only (random token ids, random-init weights from a ``config.json``), so it
runs on a GPU machine without RLlib. The packing uses the learner's cost rule; a scenario where the
rule keeps the plain rows says so.

Run: ``python benchmarks/tree_attention.py --device cuda`` (Qwen2.5-1.5B's shape; writes
``docs/results/tree_attention_<device>.md`` and ``.csv``, or into ``--output``). On CPU, small:
``python benchmarks/tree_attention.py --device cpu --config tiny --prompt-tokens 96 --response-tokens 8``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from results_file import RESULTS_DIR, write_result, write_rows  # benchmarks/ is on sys.path as a script
from transformers import AutoModelForCausalLM, PretrainedConfig, Qwen2Config

from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.config import TINY_MODEL_DEFAULTS
from hgpo_rllib.rl_module.hidden_states import response_states
from hgpo_rllib.rl_module.logprobs import token_logp_entropy
from hgpo_rllib.rl_module.prefix_sharing import PrefixPacking, attention_pair_cost, pack_shared_prefixes

CONFIGS = Path(__file__).resolve().parents[1] / "hgpo_rllib" / "model_configs"
#: (name, fraction of the prompt every row of the micro-batch shares, rows per distinct prompt).
SCENARIOS = (
    ("nothing shared", 0.0, 1),
    ("opening 30%", 0.3, 1),
    ("opening 60%", 0.6, 1),
    ("opening 30%, pairs", 0.3, 2),
    ("opening 60%, fours", 0.6, 4),
)
AGREEMENT_SCENARIO = "opening 60%, fours"
TOKENS = ("prompt_ids", "prompt_mask", "resp_ids", "resp_mask")


def model_config(name: str) -> PretrainedConfig:
    """``tiny`` (the CPU tests' preset) or a folder of ``hgpo_rllib/model_configs`` / any path with a
    ``config.json``."""
    if name == "tiny":
        return Qwen2Config(**TINY_MODEL_DEFAULTS, vocab_size=1024)
    folder = CONFIGS / name if (CONFIGS / name).is_dir() else Path(name)
    return Qwen2Config.from_json_file(folder / "config.json")


def micro_batch(
    rng: np.random.Generator,
    rows: int,
    prompt_tokens: int,
    response_tokens: int,
    shared_fraction: float,
    copies: int,
    vocab: int,
) -> dict[str, np.ndarray]:
    """Rows of one group as the learner's token batch holds them (left-padded prompts, right-padded
    responses): every prompt starts with the same ``shared_fraction`` of ``prompt_tokens`` (the task
    and template), ``copies`` rows carry each distinct prompt (rollouts that walked the same path),
    prompt and response lengths vary by +-10% and +-30% around their means."""
    opening = rng.integers(1, vocab, int(shared_fraction * prompt_tokens))
    prompts, responses = [], []
    for n in range(rows):
        if n % copies == 0:
            rest = rng.integers(1, vocab, max(1, int(prompt_tokens * rng.uniform(0.9, 1.1)) - len(opening)))
            prompt = np.concatenate([opening, rest])
        prompts.append(prompt)
        responses.append(rng.integers(1, vocab, max(1, int(response_tokens * rng.uniform(0.7, 1.3)))))
    batch = {
        "prompt_ids": np.zeros((rows, max(map(len, prompts))), dtype=np.int64),
        "resp_ids": np.zeros((rows, max(map(len, responses))), dtype=np.int64),
    }
    batch["prompt_mask"], batch["resp_mask"] = (
        np.zeros_like(batch["prompt_ids"]),
        np.zeros_like(batch["resp_ids"]),
    )
    for n, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        batch["prompt_ids"][n, -len(prompt) :], batch["prompt_mask"][n, -len(prompt) :] = prompt, 1
        batch["resp_ids"][n, : len(response)], batch["resp_mask"][n, : len(response)] = response, 1
    return batch


def token_logp(
    model: torch.nn.Module,
    tokens: dict[str, torch.Tensor],
    packing: PrefixPacking | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs and entropies of the responses, as ``LLMRLModule._token_logp`` computes
    them (autocast to ``dtype`` over float32 weights)."""
    backbone, device = getattr(model, model.base_model_prefix), tokens["resp_ids"].device
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        states = response_states(backbone, *(tokens[k] for k in TOKENS), packing)
        return token_logp_entropy(
            states, model.get_output_embeddings(), tokens["resp_ids"], tokens["resp_mask"], temperature=1.0
        )


def training_pass(
    model: torch.nn.Module, tokens: dict[str, torch.Tensor], packing: PrefixPacking | None, dtype: torch.dtype
) -> torch.Tensor:
    """The loss's forward and backward (a token-mean policy-gradient surrogate plus the entropy);
    the log-probs, detached."""
    logp, entropy = token_logp(model, tokens, packing, dtype)
    mask = tokens["resp_mask"]
    ((logp * tokens["weights"] + 0.01 * entropy) * mask).sum().div(mask.sum()).backward()
    return logp.detach()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], object], device: torch.device, warmups: int, repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` calls after ``warmups``, the device synchronised around each."""
    for _ in range(warmups):
        run()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def peak_memory_gib(device: torch.device, run: Callable[[], object]) -> float:
    if device.type != "cuda":
        return float("nan")
    torch.cuda.reset_peak_memory_stats(device)
    run()
    return torch.cuda.max_memory_allocated(device) / 2**30


def on_device(batch: dict[str, np.ndarray], device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    tokens = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
    generator = torch.Generator().manual_seed(seed)
    tokens["weights"] = torch.randn(batch["resp_ids"].shape, generator=generator).to(device)
    return tokens


def scenario_rows(
    model: torch.nn.Module, args: argparse.Namespace, device: torch.device, pair_cost: float
) -> list[dict]:
    """Per scenario: both paths' median seconds per training pass, tokens/s and peak memory."""
    rng = np.random.default_rng(args.seed)
    vocab = model.config.vocab_size
    rows = []
    for name, shared_fraction, copies in SCENARIOS:
        batch = micro_batch(
            rng, args.rows, args.prompt_tokens, args.response_tokens, shared_fraction, copies, vocab
        )
        tokens = on_device(batch, device, args.seed)
        real = int(batch["prompt_mask"].sum() + batch["resp_mask"].sum())
        plan_start = time.perf_counter()
        packing = pack_shared_prefixes(*(batch[k] for k in TOKENS), pair_cost)
        plan_s = time.perf_counter() - plan_start
        paths = {"plain rows": None}
        if packing is not None:
            paths["prefix trees"] = packing
        for path, chosen in paths.items():

            def run(chosen: PrefixPacking | None = chosen, tokens: dict = tokens) -> None:
                model.zero_grad(set_to_none=True)
                training_pass(model, tokens, chosen, args.dtype)

            seconds = statistics.median(timed(run, device, args.warmups, args.repeats))
            computed = real if chosen is None else chosen.computed_tokens
            width = sum(batch[k].shape[1] for k in ("prompt_ids", "resp_ids"))
            positions = args.rows * width if chosen is None else chosen.input_ids.size
            rows.append(
                {
                    "scenario": name,
                    "path": path,
                    "rows": args.rows,
                    "real_tokens": real,
                    "computed_tokens": computed,
                    "padding_frac": round(1 - computed / positions, 3),
                    "sequence_length": int(width if chosen is None else chosen.input_ids.shape[1]),
                    "seconds": round(seconds, 4),
                    "seconds_vs_plain": 1.0,
                    "real_tokens_per_s": round(real / seconds),
                    "peak_gib": round(peak_memory_gib(device, run), 2),
                    "plan_s": round(plan_s, 4) if chosen is not None else 0.0,
                }
            )
        if packing is None:
            print(f"{name}: the cost rule keeps the plain rows (sharing saves less than it costs)")
        else:
            rows[-1]["seconds_vs_plain"] = round(rows[-1]["seconds"] / rows[-2]["seconds"], 3)
    return rows


def agreement_rows(
    model: torch.nn.Module, args: argparse.Namespace, device: torch.device, pair_cost: float
) -> list[dict]:
    """Plain vs packed on one micro-batch: per-token log-probs (max |difference|) and gradients
    (||difference|| / ||plain||) in float32 and under bfloat16 autocast, and each path's bf16
    log-probs against the float32 plain ones."""
    name, shared_fraction, copies = next(s for s in SCENARIOS if s[0] == AGREEMENT_SCENARIO)
    rng = np.random.default_rng(args.seed + 1)
    batch = micro_batch(
        rng,
        args.rows,
        args.prompt_tokens,
        args.response_tokens,
        shared_fraction,
        copies,
        model.config.vocab_size,
    )
    packing = pack_shared_prefixes(*(batch[k] for k in TOKENS), pair_cost)
    if packing is None:
        raise SystemExit(f"the cost rule packs nothing in {name!r}: no agreement to measure")
    tokens = on_device(batch, device, args.seed)
    mask = tokens["resp_mask"].bool()
    rows, reference = [], None
    for dtype in (torch.float32, torch.bfloat16):
        model.zero_grad(set_to_none=True)
        plain_logp = training_pass(model, tokens, None, dtype)[mask]
        plain_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
        packed_logp = training_pass(model, tokens, packing, dtype)[mask]
        packed_grads = [p.grad for p in model.parameters() if p.grad is not None]
        # Norms per tensor, summed in float64: no second copy of the gradients (a 7B model's are 30 GB).
        difference = sum(
            float((a - b).double().norm() ** 2) for a, b in zip(plain_grads, packed_grads, strict=True)
        )
        plain_norm = sum(float(a.double().norm() ** 2) for a in plain_grads)
        del plain_grads, packed_grads
        reference = plain_logp if reference is None else reference  # float32 comes first
        rows.append(
            {
                "scenario": name,
                "dtype": str(dtype).removeprefix("torch."),
                "logp_max_abs_diff_paths": float((plain_logp - packed_logp).abs().max()),
                "grad_rel_diff_paths": (difference / plain_norm) ** 0.5,
                "plain_logp_max_abs_err_vs_fp32": float((plain_logp - reference).abs().max()),
                "packed_logp_max_abs_err_vs_fp32": float((packed_logp - reference).abs().max()),
                "response_tokens": int(mask.sum()),
            }
        )
    model.zero_grad(set_to_none=True)
    return rows


def markdown(rows: list[dict]) -> str:
    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g")


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--config", default="qwen2.5-1.5b", help="tiny, a folder of hgpo_rllib/model_configs, or a path"
    )
    parser.add_argument("--attention", default="sdpa", choices=("sdpa", "eager"))
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=("bfloat16", "float32"),
        help="autocast dtype of the timed passes",
    )
    parser.add_argument("--rows", type=int, default=8, help="rows per micro-batch (one group)")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--response-tokens", type=int, default=50)
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--agreement",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compare the paths' log-probs and gradients (float32 needs ~4x the weights' memory)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="folder for the .md and .csv")
    args = parser.parse_args()
    args.dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 in the agreement check
    config = model_config(args.config)
    with device:
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=args.attention, dtype=torch.float32
        )
    pair_cost = attention_pair_cost(config)
    label = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({torch.get_num_threads()} threads)"
    )
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{label}: {parameters / 1e9:.2f}B parameters, pair_cost {pair_cost:.2g}")
    timing = scenario_rows(model, args, device, pair_cost)
    agreement = agreement_rows(model, args, device, pair_cost) if args.agreement else []
    stem = f"tree_attention_{'cpu' if device.type == 'cpu' else label.split()[-1].lower()}"
    write_rows(args.output / f"{stem}.csv", timing)
    if agreement:
        write_rows(args.output / f"{stem}_agreement.csv", agreement)
    title = (
        f"Prefix trees vs plain rows, training pass, {args.config} ({args.attention}, autocast "
        f"{str(args.dtype).removeprefix('torch.')}) on {label}"
    )
    tables = "\n\n".join(markdown(rows) for rows in (timing, agreement) if rows)
    write_result(stem, title, tables, directory=args.output)
    print(tables)


if __name__ == "__main__":
    main()

"""This machine's matmul rates at a model's shapes, in float32 and bfloat16: the learner's ceiling.

Run: ``python benchmarks/machine_limit.py`` (SmolLM2-135M, micro-batches of 4 x 512 tokens, both
dtypes, torch threads = the cores this process may use). ``--model`` takes a short name
(``smollm2-135m-instruct``), a model directory, a ``config.json`` or a shipped config
(``qwen2.5-1.5b``, from ``hgpo_rllib/model_configs/``). For each distinct linear layer of the model and
the LM head it times the forward product ``X W`` and the backward's two (``dY W^T``, ``X^T dY``): the
median of ``--repeats`` timed repeats after a warm-up (``algorithms/torch/matmul_rate.py``), and sums
up, per dtype, the rate of a trained token's decoder matmuls (each layer's products weighted by their
FLOPs). The CPU's model name and flags (AVX2, AVX-512, AVX512-BF16, AMX-BF16: bfloat16 is
native only with the last two), torch's version, the threads and ``uptime`` before and after go with
the table into ``docs/results/<name>.{md,csv}``. Run it on idle cores: another busy process lowers
every figure (the load average says how busy the machine was).

Where torch emulates a dtype (bfloat16 on a CPU without AVX512-BF16 or AMX:
:func:`~hgpo_rllib.algorithms.torch.matmul_rate.emulated`, ~40x slower than float32 on an AVX2 CPU,
and the LM head's products slower still), its products are cut to about ``--emulated-gflop`` GFLOP
each (fewer tokens, at least 16: the emulated rate hardly depends on them) and timed
``--emulated-repeats`` times, so that the dtype takes a minute rather than an hour; its rows say
"emulated".
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from machine import SPEED_FLAGS, cpu_description, load, uptime
from results_file import RESULTS_DIR, write_result, write_rows

from hgpo_rllib.algorithms.torch.matmul_rate import emulated, fitted_tokens, matmul_gflops
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.learner_flops import matmul_shapes
from hgpo_rllib.model_shape import ModelShape

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "hgpo_rllib" / "model_configs"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def model_config(model: str) -> dict:
    """The model's ``config.json``: a shipped config's name, a config file, a model directory or a
    short name (:func:`~hgpo_rllib.rl_module.model_sources.local_model_dir`)."""
    path = Path(model)
    if (SHIPPED_CONFIGS / model / "config.json").is_file():
        path = SHIPPED_CONFIGS / model / "config.json"
    elif not path.exists():
        from hgpo_rllib.rl_module.model_sources import local_model_dir

        path = local_model_dir(model)
    return json.loads((path / "config.json" if path.is_dir() else path).read_text())


def products(
    shape: ModelShape, tokens: int, emulates: bool, emulated_gflop: float
) -> list[tuple[str, int, int, int]]:
    """The products to time (:func:`matmul_shapes`): over ``tokens`` tokens, or where the dtype is
    emulated, over as many as make about ``emulated_gflop`` GFLOP per product (:func:`fitted_tokens`)."""
    fit = (lambda weights: fitted_tokens(weights, tokens, emulated_gflop)) if emulates else None
    return matmul_shapes(shape, tokens, fit)


def decoder_rate(rows: list[dict], dtype: str) -> float:
    """A trained token's decoder matmuls (the head aside): their FLOPs per token over their time per
    token, each product weighted by its FLOPs per token (its rows may time fewer tokens)."""
    mine = [r for r in rows if r["dtype"] == dtype and not r["matmul"].startswith("lm_head")]
    # Products named "q_proj/o_proj ..." stand for both matrices of that shape.
    flops = [
        2 * r["m"] * r["k"] * r["n"] / r["tokens"] * (r["matmul"].split(" ")[0].count("/") + 1) for r in mine
    ]
    return sum(flops) / sum(f / r["gflops_per_s"] for f, r in zip(flops, mine, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=4, help="rows of a micro-batch (default 4)")
    parser.add_argument("--row-tokens", type=int, default=512, help="tokens per row (default 512)")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--emulated-repeats", type=int, default=1, help="repeats of an emulated dtype (default 1)"
    )
    parser.add_argument("--emulated-gflop", type=float, default=0.5, help="GFLOP per emulated product (0.5)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name", default="machine_limit", help="result files docs/results/<name>.*")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    shape = ModelShape.from_config(model_config(args.model))
    tokens = args.rows * args.row_tokens
    cpu, flags = cpu_description()
    start_uptime = uptime()
    print(f"uptime at the start: {start_uptime}")
    rows = []
    for dtype in args.dtypes:
        emulates = emulated(DTYPES[dtype], args.device)
        repeats = min(args.repeats, args.emulated_repeats) if emulates else args.repeats
        for name, m, k, n in products(shape, tokens, emulates, args.emulated_gflop):
            rate = matmul_gflops(m, k, n, DTYPES[dtype], args.device, repeats)
            row = {"model": args.model, "dtype": dtype, "emulated": emulates, "matmul": name}
            row |= {"tokens": k if name.endswith("weight grad") else m, "m": m, "k": k, "n": n}
            row |= {
                "gflop": round(2 * m * k * n / 1e9, 3),
                "gflops_per_s": round(rate, 2),
                "repeats": repeats,
            }
            rows.append(row | {"load": load()})
            print(
                f"{dtype:9} {name:38} [{m}, {k}] x [{k}, {n}]  {rate:8.2f} GFLOP/s  load {rows[-1]['load']}"
            )
    end_uptime = uptime()

    def label(dtype: str) -> str:
        return f"{dtype}, emulated" if any(r["emulated"] for r in rows if r["dtype"] == dtype) else dtype

    emulated_repeats = min(args.repeats, args.emulated_repeats)
    emulated_note = (
        f" Emulated: no native support on this CPU (AVX512-BF16 or AMX-BF16), each product cut to about "
        f"{args.emulated_gflop} GFLOP (its tokens column) and timed {emulated_repeats} time(s) after "
        "the warm-up (median of those)."
        if any(r["emulated"] for r in rows)
        else ""
    )
    lines = [
        f"Model `{args.model}` ({shape.layers} layers, hidden {shape.hidden}, MLP {shape.intermediate}, "
        f"vocabulary {shape.vocab}), {tokens} tokens per product ({args.rows} x {args.row_tokens}); "
        f"CPU {cpu}, flags: {', '.join(flags) or 'none of ' + ', '.join(SPEED_FLAGS)}; "
        f"torch {torch.__version__}, {args.threads} threads, device {args.device}. "
        f"Median of {args.repeats} repeats after a warm-up.{emulated_note}",
        "",
        f"`uptime` at the start: `{start_uptime}`; at the end: `{end_uptime}`.",
        "",
        "| dtype | a trained token's decoder matmuls, GFLOP/s |",
        "|---|---:|",
        *(f"| {label(dtype)} | {decoder_rate(rows, dtype):.2f} |" for dtype in args.dtypes),
        "",
        "| dtype | matmul | tokens | m | k | n | GFLOP | GFLOP/s | repeats | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *(
            f"| {label(r['dtype'])} | {r['matmul']} | {r['tokens']} | {r['m']} | {r['k']} | {r['n']} | "
            f"{r['gflop']} | {r['gflops_per_s']} | {r['repeats']} | {r['load']} |"
            for r in rows
        ),
    ]
    table = "\n".join(lines)
    print(table)
    write_rows(args.results_dir / f"{args.name}.csv", rows)
    write_result(args.name, "The machine's matmul rates at a model's shapes", table, args.results_dir)


if __name__ == "__main__":
    main()

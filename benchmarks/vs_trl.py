"""This package against TRL's ``GRPOTrainer`` on the same single-turn task, side by side (issue 63, item 7).

Why: TRL is what most users would reach for, and it computes each of a group's completions with its
full prompt, in generation and in training; this package can compute a group's shared prompt once
(``share_prompt_prefixes``). The claim to test is seconds per update on the same work, with the
tokens each side computed, and a control with nothing to share, so that a difference can be traced
to sharing or to the rest.

The task is WebShop's first step: a goal's search page in (the no-history template, chat-templated
by this package's prompt code once, the same text handed to TRL as a plain prompt), one answer of
exactly ``--new-tokens`` tokens out, rewarded by the share of the goal's words in the search query
when the answer is well-formed (``vs_trl_task.answer_reward``). Each update takes ``--groups``
groups of 8 rows; in the control ("distinct prompts") every row of an update has its own goal.

Each side runs in its own process and virtual environment (this package: ``vs_trl_ours.py``, RLlib's
Python API; TRL: ``vs_trl_trl.py`` under ``--trl-python``), one block at a time: a warm-up update and
``--updates`` measured ones. Blocks alternate (TRL, then this package, for each workload, ``--blocks``
times). The table gives medians over the measured updates: seconds of generation, of the update (the
learner, and this package's weight sync), of the whole update, and per update the positions the model
computed in generation and in the learner (padding included, counted by a hook on the decoder) and
the rows' real tokens (prompts and completions). Every setting, matched or not, is listed below it.

Run: ``python benchmarks/vs_trl.py --trl-python .venv-trl/bin/python [--model tiny|smollm2-135m-instruct]
[--updates 3] [--blocks 2]`` (TRL's environment: ``python3 -m venv .venv-trl &&
.venv-trl/bin/pip install -r benchmarks/requirements-trl.txt``). Writes ``docs/results/vs_trl.md`` and
``vs_trl.json`` (``vs_trl_tiny.*`` for the tiny model), with the CPU and the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from machine import cpu_line, uptime
from results_file import RESULTS_DIR, write_result  # benchmarks/ is on sys.path when run as a script
from tqdm import tqdm
from vs_trl_task import Spec, settings_rows

from envs.common.prompts import PromptContext
from envs.webshop.prompts import render_prompt
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.openmp import SPIN_COUNT
from hgpo_rllib.rl_module.models import load_tokenizer
from hgpo_rllib.rl_module.prompts import chat_prompt

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
SMOLLM2 = "smollm2-135m-instruct"
#: The workloads: a group shares its goal's prompt, or (the control) every row has its own.
WORKLOADS = {"group prompts": False, "distinct prompts": True}
#: Each side's worker script, in the order a block runs them.
SIDES = {"TRL": "vs_trl_trl.py", "this package": "vs_trl_ours.py"}
#: The prompt's history window (this package's default; the first step shows no history anyway).
HISTORY_LENGTH = 2
#: Median columns of the result table.
SECONDS = ("generation_s", "update_s", "total_s")
TOKENS = ("generation_positions", "learner_positions", "real_tokens")
HEADINGS = {
    "generation_s": "generation s",
    "update_s": "update s",
    "total_s": "s per update",
    "generation_positions": "generation: positions computed",
    "learner_positions": "learner: positions computed",
    "real_tokens": "real tokens (prompts + completions)",
}
FLOAT_FORMATS = (".2f",) * len(SECONDS) + (".1f",) * len(TOKENS)
#: A 1-minute load above this at the start marks the result as taken on a loaded machine.
LOADED = 0.5


def webshop_pages(count: int) -> list[dict[str, Any]]:
    """The first search page of ``count`` goals of WebShop's training split, in order."""
    from envs.webshop.env import WebShopEnv  # loads the shop (seconds)

    env = WebShopEnv()
    pages = []
    for index in env.goal_range[:count]:
        observation, info = env.reset(options={"goal_index": index})
        pages.append(
            {"task": info["task"], "observation": observation, "actions": info["admissible_actions"]}
        )
    return pages


def rendered(page: dict[str, Any]) -> str:
    """The page's prompt as this package's prompt connector renders the first step."""
    context = PromptContext(page["task"], [], page["observation"], page["actions"], 0, HISTORY_LENGTH)
    return render_prompt(context)


def build_batches(
    pages: list[dict[str, Any]], tokenizer: Any, batches: int, groups: int, group_size: int, distinct: bool
) -> list[list[dict[str, Any]]]:
    """``batches`` updates of ``groups * group_size`` rows from ``pages`` in order: one page per group
    (its rows share the prompt), or with ``distinct`` one per row. Each row carries the chat-templated
    prompt the model reads (``prompt``)."""
    size = groups * group_size
    out = []
    for n in range(batches):
        if distinct:
            chosen = pages[n * size : (n + 1) * size]
        else:
            chosen = [page for page in pages[n * groups : (n + 1) * groups] for _ in range(group_size)]
        out.append([{**page, "prompt": chat_prompt(tokenizer, rendered(page))} for page in chosen])
    return out


def tiny_model_dir(pages: list[dict[str, Any]], directory: Path, seed: int) -> Path:
    """A random-init tiny Qwen2 and a tokenizer trained on the pages' prompts, saved as a Hugging Face
    directory both sides load (for checking the plumbing, not for timing)."""
    from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer([rendered(page) for page in pages], 1024)
    build_tiny_model(tokenizer, {}, seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def worker_env(threads: int) -> dict[str, str]:
    """The environment of both sides' processes: the same threads and OpenMP waiting, this checkout on
    the path, nothing fetched from the Hub."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT", str(SPIN_COUNT)),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def run_block(python: str, side: str, spec: Spec, workdir: Path) -> list[dict[str, float]]:
    """One block of one side in its own process: its per-update records (the first is the warm-up)."""
    spec_file, out_file = workdir / "spec.json", workdir / "out.json"
    spec_file.write_text(spec.dumps())
    out_file.unlink(missing_ok=True)
    command = [python, str(BENCHMARKS / SIDES[side]), str(spec_file), str(out_file)]
    subprocess.run(command, check=True, env=worker_env(spec.threads), cwd=ROOT)
    return json.loads(out_file.read_text())


def measured_frame(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per measured update (each block's warm-up left out)."""
    rows = [
        {"workload": run["workload"], "side": run["side"], "block": run["block"], "update": n, **update}
        for run in runs
        for n, update in enumerate(run["updates"])
        if n > 0
    ]
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Medians per workload and side, and this package's over TRL's per workload."""
    order = {name: n for n, name in enumerate([*WORKLOADS, *SIDES])}
    medians = (
        frame.groupby(["workload", "side"])[[*SECONDS, *TOKENS]]
        .median()
        .reset_index()
        .sort_values(["workload", "side"], key=lambda column: column.map(order))
        .reset_index(drop=True)
    )
    ratios = []
    for workload, rows in medians.groupby("workload", sort=False):
        ours, trl = (rows[rows.side == side].iloc[0] for side in ("this package", "TRL"))
        ratios.append(
            {
                "workload": workload,
                **{f"{HEADINGS[key]} (ours / TRL)": ours[key] / trl[key] for key in SECONDS},
            }
        )
    return medians, pd.DataFrame(ratios)


def same_rows(frame: pd.DataFrame) -> bool:
    """Whether every measured update learned on the same real tokens on both sides (the same prompt ids
    and completion lengths)."""
    tokens = frame.pivot_table(index=["workload", "block", "update"], columns="side", values="real_tokens")
    return bool((tokens["TRL"] == tokens["this package"]).all())


def report(
    runs: list[dict[str, Any]],
    spec: Spec,
    settings_table: list[dict[str, str]],
    cpu: str,
    loads: list[str],
) -> str:
    """The result file's text: the medians, the ratios, the machine and every setting."""
    frame = measured_frame(runs)
    medians, ratios = summary(frame)
    settings = pd.DataFrame(settings_table)
    unmatched = settings[~settings.matched.str.startswith("yes")].setting.tolist()
    measured = {len(run["updates"]) - 1 for run in runs}
    blocks = max(run["block"] for run in runs) + 1
    return "\n".join(
        [
            f"Model {spec.model}; {spec.batch_size} rows per update ({spec.batch_size // spec.group_size} "
            f"groups of {spec.group_size}), {spec.new_tokens} new tokens per row; {blocks} block(s) per side "
            f"and workload, each a warm-up and {'/'.join(map(str, sorted(measured)))} measured update(s); "
            "medians over the measured updates.",
            "",
            f"CPU: {cpu}.",
            f"Load before: `{loads[0]}`; after: `{loads[1]}`.",
            "",
            medians.rename(columns=HEADINGS).to_markdown(index=False, floatfmt=("", "", *FLOAT_FORMATS)),
            "",
            ratios.to_markdown(index=False, floatfmt=".3f"),
            "",
            f"Same real tokens on both sides in every update: {'yes' if same_rows(frame) else 'NO'}.",
            "",
            "Settings (every one; `matched` says why where not):",
            "",
            settings.to_markdown(index=False),
            "",
            f"Not matched: {', '.join(unmatched) if unmatched else 'none'}.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--trl-python", required=True, help="python of TRL's virtual environment")
    parser.add_argument("--model", choices=["tiny", SMOLLM2], default=SMOLLM2)
    parser.add_argument("--updates", type=int, default=3, help="measured updates per block (after a warm-up)")
    parser.add_argument("--blocks", type=int, default=2, help="blocks per side and workload, alternating")
    parser.add_argument("--groups", type=int, default=2, help="groups of 8 rows per update")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64, help="every completion's length")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch threads per side"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--share-prompt-prefixes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="this package's learner computes each shared prompt prefix once",
    )
    args = parser.parse_args()
    group_size, batches = 8, args.updates + 1
    loads, load_before = [uptime()], os.getloadavg()[0]
    cpu = cpu_line()
    pages = webshop_pages(batches * args.groups * group_size)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as tmp:
        workdir = Path(tmp)
        if args.model == "tiny":
            model_dir = tiny_model_dir(pages, workdir / "tiny-model", args.seed)
        else:
            from hgpo_rllib.rl_module.model_sources import local_model_dir

            model_dir = local_model_dir(SMOLLM2)
        tokenizer = load_tokenizer(Path(model_dir))
        specs = {
            workload: Spec(
                model=args.model,
                model_dir=str(model_dir),
                batches=build_batches(pages, tokenizer, batches, args.groups, group_size, distinct),
                group_size=group_size,
                micro_batch_size=args.micro_batch_size,
                new_tokens=args.new_tokens,
                lr=args.lr,
                threads=args.threads,
                seed=args.seed,
                share_prompt_prefixes=args.share_prompt_prefixes,
            )
            for workload, distinct in WORKLOADS.items()
        }
        pythons = {"TRL": args.trl_python, "this package": sys.executable}
        plan = [
            (block, workload, side)
            for block in range(args.blocks)
            for workload in WORKLOADS
            for side in SIDES
        ]
        for block, workload, side in tqdm(plan, desc="blocks", unit="block"):
            updates = run_block(pythons[side], side, specs[workload], workdir)
            runs.append({"block": block, "workload": workload, "side": side, "updates": updates})
            tqdm.write(f"{workload}, {side}: " + ", ".join(f"{u['total_s']:.1f} s" for u in updates))
    loads.append(uptime())
    spec = specs["group prompts"]
    settings = settings_rows(spec, worker_env(args.threads)["GOMP_SPINCOUNT"])
    text = report(runs, spec, settings, cpu, loads)
    print(text)
    name = "vs_trl" if args.model == SMOLLM2 else f"vs_trl_{args.model}"
    title = f"This package vs TRL's GRPOTrainer, WebShop's first step ({args.model})"
    if load_before > LOADED:
        title += f": LOADED machine (1-min load {load_before:.1f} at the start), timings pessimistic"
    write_result(name, title, text)
    record = {"cpu": cpu, "loads": loads, "args": vars(args), "settings": settings, "runs": runs}
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Memory levers at Qwen2.5-0.5B's width on CPU: measured peak memory vs the memory plan's prediction.

Run: ``python benchmarks/scale.py [--layers 2] [--rows 2] [--prompt 256] [--response 128]``.
The model is Qwen2.5-0.5B's architecture (hidden 896, MLP 4864, 14 heads / 2 KV heads, 151,936-token
vocabulary: hgpo_rllib/model_configs/qwen2.5-0.5b) with random weights, cut to ``--layers`` of its
24 decoder layers so a full fine-tuning step fits the shared 2-core test machine (the plan is per
layer, so the comparison holds per layer). Each row of the table runs in a fresh process:

* **learner update**: one micro-batch of ``rows`` x (prompt + response) tokens through
  ``LLMRLModule.forward_train`` (log-probs and entropies), a policy-gradient-style loss, backward and
  one AdamW step, in float32, with or without LoRA (r 16, all linear layers), gradient checkpointing
  and chunked log-probs (``logprob_chunk_tokens`` 64);
* **sampling wave**: ``forward_exploration`` (HF ``generate``) of ``rows`` prompts.

Peak = the largest resident set during the phase minus the process's size before the model was
built (sampled every 5 ms); the prediction is :func:`hgpo_rllib.experiments.memory_items.learner_items` /
``env_runner_items`` for the same settings with ``on_cpu`` (CPU attention materialises its scores
and CPU AdamW steps tensor by tensor). Prints a Markdown table and writes ``docs/results/scale.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hgpo_rllib.help_text import doc_summary

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # name: (lora, gradient checkpointing, chunked log-probs)
    "full": (False, False, False),
    "full + chunked": (False, False, True),
    "full + checkpointing + chunked": (False, True, True),
    "LoRA": (True, False, False),
    "LoRA + checkpointing + chunked": (True, True, True),
}
CHUNK = 64
LORA_R = 16


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Largest resident set while the block runs (a 5 ms sampling thread)."""

    def __enter__(self) -> PeakRSS:
        self.peak, self._stop = _rss(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _model_dir(layers: int, workdir: Path) -> Path:
    """A random-init model of Qwen2.5-0.5B's shape (``layers`` layers) with the tiny tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR
    from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

    path = workdir / "model"
    if not path.is_dir():
        config = json.loads((MODEL_CONFIGS_DIR / "qwen2.5-0.5b" / "config.json").read_text())
        config.update(num_hidden_layers=layers, max_window_layers=layers, torch_dtype="float32")
        tokenizer = build_tiny_tokenizer(["go north", "take key", "open chest"] * 10, 512, ())
        config.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        config["bos_token_id"] = None
        AutoModelForCausalLM.from_config(Qwen2Config(**config)).save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs one (phase, variant) in this fresh process and returns measured and predicted bytes."""
    import gymnasium as gym
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from hgpo_rllib.experiments import memory_items as memory
    from hgpo_rllib.model_shape import ModelShape
    from hgpo_rllib.rl_module import LLMRLModule

    torch.manual_seed(0)
    lora, checkpointing, chunked = VARIANTS[args.variant]
    model_config = {
        "model": str(args.model_dir),
        "max_prompt_tokens": args.prompt,
        "max_new_tokens": args.response,
        "gradient_checkpointing": checkpointing,
        "logprob_chunk_tokens": CHUNK if chunked else None,
        **({"lora": {"r": LORA_R}} if lora else {}),
    }
    base = _rss()
    module = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=gym.spaces.Text(8),
        action_space=gym.spaces.Text(8),
        inference_only=args.phase == "sampling",
        model_config=model_config,
    ).build()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # give loading's scratch memory back before measuring
    vocab = 500  # ids the tiny tokenizer knows
    prompt_ids = torch.randint(3, vocab, (args.rows, args.prompt))
    prompts = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids)}
    shape = ModelShape.from_model_dir(args.model_dir)
    if args.phase == "sampling":
        module.eval()
        start = time.perf_counter()
        with PeakRSS() as peak:
            out = module.forward_exploration(prompts)
        seconds = time.perf_counter() - start
        tokens = int(out["resp_mask"].sum())
        items, _ = memory.env_runner_items(
            shape,
            torch_dtype="float32",
            vllm=False,
            gpu_bytes=0,
            vllm_utilization=0,
            num_envs=args.rows,
            seq_tokens=args.prompt + args.response,
        )
    else:
        module.train()
        resp = torch.randint(3, vocab, (args.rows, args.response))
        batch = {**prompts, "resp_ids": resp, "resp_mask": torch.ones_like(resp)}
        params = [p for p in module.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-6)
        start = time.perf_counter()
        with PeakRSS() as peak:
            out = module.forward_train(batch)
            advantages = torch.randn(args.rows, 1)
            loss = -(out["logp"] * advantages).mean() - 0.001 * out["entropy"].mean()
            loss.backward()
            optimizer.step()
        seconds = time.perf_counter() - start
        tokens = args.rows * (args.prompt + args.response)
        settings = memory.LearnerSettings(
            torch_dtype="float32",
            lora_r=LORA_R if lora else None,
            gradient_checkpointing=checkpointing,
            logprob_chunk_tokens=CHUNK if chunked else None,
            reference=False,
            micro_batch_rows=args.rows,
            prompt_tokens=args.prompt,
            response_tokens=args.response,
            on_cpu=True,
        )
        items = memory.learner_items(shape, settings)
    return {
        "phase": args.phase,
        "variant": args.variant,
        "measured": peak.peak - base,
        "predicted": sum(i.bytes for i in items),
        "tokens_per_s": tokens / seconds,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--phase", choices=["update", "sampling"], help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(child(args)))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="hgpo-scale-") as tmp:
        model_dir = _model_dir(args.layers, Path(tmp))
        runs = [("update", v) for v in VARIANTS] + [("sampling", "full")]
        for phase, variant in runs:
            cmd = [
                sys.executable,
                __file__,
                "--phase",
                phase,
                "--variant",
                variant,
                "--model-dir",
                str(model_dir),
                "--rows",
                str(args.rows),
                "--prompt",
                str(args.prompt),
                "--response",
                str(args.response),
            ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    lines = [
        f"Qwen2.5-0.5B shape, {args.layers} of 24 layers, random init, float32 on CPU "
        f"({os.cpu_count()} cores); "
        f"micro-batch {args.rows} x ({args.prompt} prompt + {args.response} response) tokens; "
        f"LoRA r={LORA_R} all-linear; chunk {CHUNK} tokens",
        "",
        "| phase | variant | measured peak (MB) | plan (MB) | plan / measured | tokens/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['phase']} | {r['variant']} | {r['measured'] / 1e6:,.0f} | {r['predicted'] / 1e6:,.0f} | "
            f"{r['predicted'] / r['measured']:.2f} | {r['tokens_per_s']:,.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    (ROOT / "docs" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs" / "results" / "scale.md").write_text(text + "\n")


if __name__ == "__main__":
    main()

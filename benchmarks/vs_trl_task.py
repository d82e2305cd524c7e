"""What both sides of ``benchmarks/vs_trl.py`` share: the task's reward, the run's settings (a
:class:`Spec`, handed to each side's process as JSON) and the table of every setting.

Standard library only: TRL's side imports this module in its own virtual environment, which has none
of this package's dependencies. The answer's format is judged by ``envs/common/actions.py`` (standard
library only too), loaded by its path because importing the ``envs`` package needs gymnasium.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Settings both sides use as they are (the :class:`Spec` holds the ones a run chooses).
TEMPERATURE = 1.0
CLIP = 0.2
KL_COEFF = 0.0
ENTROPY_COEFF = 0.0
WEIGHT_DECAY = 0.0
GRAD_CLIP = 1.0
SEARCH = re.compile(r"search\[(.*)\]", re.DOTALL)
WORD = re.compile(r"[a-z0-9]+")


def _actions() -> Any:
    """``envs/common/actions.py`` as a module of its own (registered first: its dataclasses look their
    module up in ``sys.modules``)."""
    name = "vs_trl_actions"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "envs" / "common" / "actions.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


def query_reward(command: str, goal: str) -> float:
    """The share of the goal's distinct words (lower-case letters and digits) found in a
    ``search[query]`` command's query; 0 for any other command."""
    match = SEARCH.fullmatch(command.strip())
    if match is None:
        return 0.0
    wanted = set(WORD.findall(goal.lower()))
    return len(wanted & set(WORD.findall(match[1].lower()))) / len(wanted)


def answer_reward(answer: str, goal: str) -> float:
    """The reward of a whole answer: :func:`query_reward` of its command when it is well-formed
    (``<think>...</think><action>...</action>``, as the env judges it), else 0."""
    parsed = _actions().parse_action(answer, require_tags=True)
    return query_reward(parsed.command, goal) if parsed.is_valid else 0.0


@dataclasses.dataclass(frozen=True)
class Spec:
    """One block of one side: the model, the batches (the first one a warm-up) and the settings a run
    chooses. A row is ``{"task", "observation", "actions", "prompt"}``: the WebShop goal, its search
    page and admissible actions (what this package's env serves), and the prompt as the model reads it
    (the chat-templated text TRL is given)."""

    model: str
    model_dir: str
    batches: list[list[dict[str, Any]]]
    group_size: int = 8
    micro_batch_size: int = 8
    new_tokens: int = 64
    lr: float = 1e-6
    threads: int = 2
    seed: int = 0
    share_prompt_prefixes: bool = True

    @property
    def batch_size(self) -> int:
        return len(self.batches[0])

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def loads(cls, text: str) -> Spec:
        return cls(**json.loads(text))


def settings_rows(spec: Spec, spin_count: str) -> list[dict[str, str]]:
    """Every setting of the comparison: this package's value, TRL's, and whether they match (or why
    not)."""
    b, m, c, g = spec.batch_size, spec.micro_batch_size, spec.new_tokens, spec.group_size
    yes = "yes"
    rows = [
        ("weights", spec.model, spec.model, yes),
        ("fine-tuning", "full (no LoRA)", "full (no `peft_config`)", yes),
        ("dtype", "`torch_dtype='float32'`", "float32 model, `bf16=False`", yes),
        ("attention", "sdpa", "sdpa", yes),
        ("gradient checkpointing", "off", "`gradient_checkpointing=False`", yes),
        (
            "prompts",
            "WebShop's first-step template, chat-templated",
            "the same text as a plain prompt",
            "yes (same token ids, checked per run)",
        ),
        ("group size", f"`group_size={g}`", f"`num_generations={g}`", yes),
        ("rows per update", f"`groups_per_iteration={b // g}` ({b} rows)", f"generation batch of {b}", yes),
        (
            "micro-batch",
            f"`micro_batch_size={m}`",
            f"`per_device_train_batch_size={m}`, `gradient_accumulation_steps={b // m}`",
            yes,
        ),
        (
            "updates per batch",
            f"one (`minibatch_size={b}`, `num_epochs=1`)",
            f"one (`num_iterations=1`, `steps_per_generation={b // m}`)",
            yes,
        ),
        (
            "completion length",
            f"`min_new_tokens = max_new_tokens = {c}`",
            f"`max_completion_length={c}`, `min_new_tokens={c}`",
            yes,
        ),
        (
            "sampling",
            f"temperature {TEMPERATURE}, no top-k/top-p",
            f"`temperature={TEMPERATURE}`, top-k 0, top-p 1",
            yes,
        ),
        ("KL coefficient", f"`kl_coeff={KL_COEFF}` (no reference model)", f"`beta={KL_COEFF}` (none)", yes),
        (
            "loss normalisation",
            "token mean over the batch's tokens (micro-batches accumulated)",
            '`loss_type="dapo"` (the generation batch\'s tokens; "bnpo" averages micro-batch means)',
            yes,
        ),
        ("clip", f"`clip_param={CLIP}`", f"`epsilon={CLIP}`", yes),
        (
            "rows with zero advantage",
            "computed (`skip_zero_advantage_rows=False`)",
            "computed",
            yes,
        ),
        ("dual clip", "3.0", "none", "no (inactive: one step per batch, ratio 1)"),
        (
            "entropy",
            f"`entropy_coeff={ENTROPY_COEFF}` (computed as a metric)",
            f"`entropy_coef={ENTROPY_COEFF}` (computed as a metric)",
            yes,
        ),
        (
            "LM head",
            "response positions only, chunks recomputed in the backward",
            "every position on CPU (response positions only on CUDA/XPU), tiles recomputed in the backward",
            "no (TRL's CPU path)",
        ),
        (
            "advantage",
            "GRPO: (r - mean) / (std + 1e-6) per group",
            '`scale_rewards="group"`: std + 1e-4',
            "no (epsilon only)",
        ),
        ("reward", "`answer_reward` (vs_trl_task.py) in the env", "the same function", yes),
        ("format penalty", "`invalid_action_penalty=0`", "none", yes),
        ("optimiser", "torch AdamW (unfused on CPU)", '`optim="adamw_torch"`', yes),
        ("learning rate", f"{spec.lr}, constant", f'{spec.lr}, `lr_scheduler_type="constant"`', yes),
        ("weight decay", f"{WEIGHT_DECAY}", f"{WEIGHT_DECAY}", yes),
        ("gradient clip", f"global norm {GRAD_CLIP}", f"`max_grad_norm={GRAD_CLIP}`", yes),
        (
            "generation engine",
            "HF `generate`, the batch left-padded to its longest prompt",
            "the same: TRL's fastest on CPU (continuous batching: 100x slower, ignores `min_new_tokens`)",
            yes,
        ),
        (
            "shared prompts in the learner",
            f"`share_prompt_prefixes={spec.share_prompt_prefixes}`",
            "none",
            "no (this package's lever)" if spec.share_prompt_prefixes else yes,
        ),
        (
            "weight copy",
            "the runner's model is a copy: one weight sync per update (timed in the update)",
            "one model samples and learns",
            "no (a cost of ours)",
        ),
        (
            "threads per process",
            f"{spec.threads} (`torch.set_num_threads`, OMP_NUM_THREADS, GOMP_SPINCOUNT={spin_count})",
            "the same",
            yes,
        ),
        (
            "processes",
            "one (local env runner and learner) beside Ray's runtime (GCS, raylet)",
            "one",
            "no (Ray's idle processes)",
        ),
        ("seed", str(spec.seed), str(spec.seed), yes),
    ]
    return [dict(zip(("setting", "this package", "TRL", "matched"), row, strict=True)) for row in rows]

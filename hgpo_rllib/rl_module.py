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
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
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
)

from hgpo_rllib.tokenizer import build_tiny_model, build_tiny_tokenizer

TINY_PRESET = "tiny-qwen2"
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
INFERENCE_BACKENDS = ("auto", "hf", "vllm")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text_list(value: Any) -> bool:
    is_list = isinstance(value, Sequence) and not isinstance(value, str)
    return is_list and all(isinstance(t, str) for t in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    action_vocabulary: Sequence[str] | None = None
    constrain_to_admissible: bool = False

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
                "vllm_gpu_memory_utilization",
                _is_number(self.vllm_gpu_memory_utilization) and 0 < self.vllm_gpu_memory_utilization <= 1,
                "a number in (0, 1]",
            ),
        ]
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(
                    f"model_config[{key!r}]={getattr(self, key)!r} is invalid: expected {expected}"
                )


def resolve_inference_backend(name: str) -> str:
    """Map "auto" | "hf" | "vllm" to the backend used here; "vllm" fails early if it cannot run.

    Only ``importlib.util.find_spec`` is used, so vLLM is never imported unless it is selected.
    """
    if name == "hf":
        return "hf"
    has_cuda = torch.cuda.is_available()
    has_vllm = importlib.util.find_spec("vllm") is not None
    if name == "auto":
        return "vllm" if has_cuda and has_vllm else "hf"
    if name != "vllm":
        raise ValueError(
            f"model_config['inference_backend']={name!r} is invalid: expected {INFERENCE_BACKENDS}"
        )
    if not has_cuda:
        raise RuntimeError(
            "model_config['inference_backend']='vllm' needs a CUDA GPU, but torch.cuda.is_available() is "
            "False here; use 'hf' (or 'auto') on CPU machines"
        )
    if not has_vllm:
        raise ImportError(
            "model_config['inference_backend']='vllm' but the vllm package is not installed; "
            "install it with `pip install 'hgpo-rllib[vllm]'` or use 'hf'"
        )
    return "vllm"


def _load_lm(cfg: LLMModuleConfig) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, str | None]:
    """Return (tokenizer, model, model directory or None for the in-memory tiny preset)."""
    dtype = TORCH_DTYPES[cfg.torch_dtype]
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


# Masked logits: exp() underflows to exactly 0 while p * log p stays finite (-inf would give NaN).
_MASKED_LOGIT = -1e9


#: Optional per-row column: token ids [B, A] a row may emit (-1 pads), from its admissible actions.
ALLOWED_IDS = "allowed_ids"


class _AllowedTokens(LogitsProcessor):
    """Restricts sampling to allowed tokens: a [V] mask for every row, or a [B, V] mask per row."""

    def __init__(self, allowed: torch.Tensor):
        self.allowed = allowed

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(~self.allowed.to(scores.device), _MASKED_LOGIT)


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
        self.tokenizer, self.lm, self._model_dir = _load_lm(self.llm_config)
        self.tokenizer.padding_side = "left"
        gen_eos = self.lm.generation_config.eos_token_id
        eos = {self.tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])}
        self.eos_token_ids = sorted(i for i in eos if i is not None)
        # A checkpoint's generation_config.json (e.g. Qwen's top_k=20, top_p=0.8, repetition_penalty)
        # would otherwise fill every sampling knob not set per call, and bias the sampled distribution.
        self.lm.generation_config = GenerationConfig(
            eos_token_id=self.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id
        )
        if self.llm_config.kl_coeff > 0 and not self.inference_only:
            self.ref_lm = copy.deepcopy(self.lm).requires_grad_(False).eval()
        self._vllm = None  # started lazily: only env runners generate, learners never need an engine
        self.allowed_tokens = self._allowed_token_mask()

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

        ``output_scores`` are the logits after every processor, i.e. the distribution actually sampled
        from; with top_k=0 / top_p=1 and a clean generation_config that is exactly logits/temperature.
        """
        sampling = temperature > 0
        gen_config = GenerationConfig(
            do_sample=sampling,
            **({"temperature": float(temperature), "top_k": 0, "top_p": 1.0} if sampling else {}),
            max_new_tokens=self.llm_config.max_new_tokens,
            use_cache=True,
            output_scores=True,
            return_dict_in_generate=True,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        device = self.lm.device
        processors = LogitsProcessorList([] if allowed is None else [_AllowedTokens(allowed)])
        out = self.lm.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            generation_config=gen_config,
            logits_processor=processors,
        )
        resp = out.sequences[:, ids.shape[1] :]
        logp = torch.stack(
            [_gather_logp(s.float().log_softmax(-1), resp[:, t]) for t, s in enumerate(out.scores)], dim=1
        )
        return resp, logp, torch.full((resp.shape[0],), resp.shape[1], device=resp.device)

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
            )
        return self._vllm

    # ---------------------------------------------------------------------------------- training
    def _response_logits(self, lm: PreTrainedModel, batch: dict[str, Any]) -> torch.Tensor:
        """Temperature-scaled logits [N, T, V] predicting each response token, as during sampling.

        position_ids = cumsum(mask) - 1 makes left-padded rows see the same positions as in
        ``generate``; logits_to_keep computes the LM head only over the response positions.
        """
        prompt_ids, prompt_mask = _trim_left_padding(batch["prompt_ids"], batch["prompt_mask"])
        resp_ids, resp_mask = batch["resp_ids"], batch["resp_mask"]
        input_ids = torch.cat([prompt_ids.long(), resp_ids.long()], dim=1)
        attention_mask = torch.cat([prompt_mask.long(), resp_mask.long()], dim=1)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        width = resp_ids.shape[1]
        logits = lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=width + 1,
        ).logits[:, :-1]
        logits = logits.float() / self.llm_config.temperature
        allowed = self._logit_mask(batch, logits.device)
        if allowed is not None:
            logits = logits.masked_fill(
                ~(allowed if allowed.dim() == 1 else allowed[:, None, :]), _MASKED_LOGIT
            )
        return logits

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Per-token log-probs and entropies of ``resp_ids`` (0 where ``resp_mask`` is 0)."""
        logp_all = self._response_logits(self.lm, batch).log_softmax(-1)
        mask = batch["resp_mask"].to(logp_all.dtype)
        logp = _gather_logp(logp_all, batch["resp_ids"])
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return {"logp": logp * mask, "entropy": entropy * mask}

    def compute_ref_logp(self, batch: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probs [N, T] of ``resp_ids`` under the frozen initial weights (for the KL term)."""
        if not hasattr(self, "ref_lm"):
            raise RuntimeError(
                "compute_ref_logp needs the frozen reference model, which exists only on learners "
                f"(inference_only=False) with model_config['kl_coeff'] > 0; here kl_coeff="
                f"{self.llm_config.kl_coeff}, inference_only={self.inference_only}"
            )
        with torch.no_grad():
            logp = _gather_logp(self._response_logits(self.ref_lm, batch).log_softmax(-1), batch["resp_ids"])
        return logp * batch["resp_mask"].to(logp.dtype)

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

        With ``inference_only=True`` (weight sync to env runners) the reference model is left out.
        """
        state = self.state_dict()
        if inference_only and not self.inference_only:
            skip = tuple(f"{attr}." for attr in self.get_non_inference_attributes())
            state = {k: v for k, v in state.items() if not k.startswith(skip)}
        return {
            k: (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
            for k, v in state.items()
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the weights; a running vLLM engine gets the new weights too."""
        super().set_state(state)
        if self._vllm is not None:
            self._vllm.load_weights(self.lm)

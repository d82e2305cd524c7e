"""LLMRLModule: a Hugging Face causal LM as an RLlib (new API stack) RLModule for text agents.

Env runners call ``forward_exploration`` / ``forward_inference`` to generate one response per
prompt through the module's :class:`~hgpo_rllib.rl_module.generation.Generator` (HF ``generate`` on
CPU, vLLM on GPU); learners call ``forward_train`` to get per-token log-probs and entropies of stored
responses. Both sides use the same temperature-scaled distribution and the same position ids, so on
one device the learner reproduces the sampler's log-probs exactly (the "log-prob gap" is ~1e-6); see
``docs/rllib_notes.md`` §4 and §5.6.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from peft import PeftModel
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from transformers import GenerationConfig

from hgpo_rllib.columns import (
    ACTION_TEXT,
    ALLOWED_IDS,
    LENGTH_CUT,
    PROMPT_CUT,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_IDS,
    RESP_LOGP,
    RESP_MASK,
    TOKEN_COLUMNS,
)
from hgpo_rllib.learner_flops import PassKind, PassTokens, row_pass_tokens
from hgpo_rllib.model_shape import ModelShape
from hgpo_rllib.rl_module.apis import TokenPolicyAPI
from hgpo_rllib.rl_module.config import LLMModuleConfig
from hgpo_rllib.rl_module.engine_weights import ENGINE_WEIGHTS, EngineWeights
from hgpo_rllib.rl_module.generation import Generator, HFGenerator, trim_left_padding
from hgpo_rllib.rl_module.hidden_states import TREE_MASK_ATTENTION, response_states
from hgpo_rllib.rl_module.logprobs import token_logp_entropy
from hgpo_rllib.rl_module.lora import (
    ADAPTER_MARK,
    adapter_state_dict,
    add_adapters,
    merge_adapter_state,
    merged_state_dict,
)
from hgpo_rllib.rl_module.models import TORCH_DTYPES, load_lm, resolve_inference_backend
from hgpo_rllib.rl_module.prefix_sharing import PrefixPacking, attention_pair_cost, pack_shared_prefixes
from hgpo_rllib.rl_module.prompts import (
    HistoryPrompt,
    Rendering,
    fit_prompts,
    model_context_length,
    prompt_token_limit,
)


class WeightGatherer(Protocol):
    """Full weights of a module whose parameters are sharded over several learners (a collective)."""

    def full_state_dict(self, module: torch.nn.Module) -> dict[str, torch.Tensor]: ...

    def load_full_state_dict(self, module: torch.nn.Module, state: Mapping[str, Any]) -> None: ...


class LLMRLModule(TorchRLModule, InferenceOnlyAPI, TokenPolicyAPI):
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
        self.tokenizer, self.lm, self._model_dir = load_lm(self.llm_config, weights_dtype)
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
        self._generator: Generator | None = None  # made on first use: learners never generate
        #: Set by a learner that shards this module's parameters (FSDP, algorithms/torch/fsdp.py).
        self.weight_gatherer: WeightGatherer | None = None
        self.allowed_tokens = self._allowed_token_mask()
        #: What this module's log-prob passes computed, by kind, since the learner last took it.
        self.pass_tokens: dict[PassKind, PassTokens] = {}

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

    @property
    def uses_lora(self) -> bool:
        """True on a learner whose model carries LoRA adapters."""
        return isinstance(self.lm, PeftModel)

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id

    @property
    def constrains_to_admissible(self) -> bool:
        return self.llm_config.constrain_to_admissible

    @property
    def action_vocabulary(self) -> Sequence[str] | None:
        return self.llm_config.action_vocabulary

    def trained_models(self) -> list[torch.nn.Module]:
        """The causal LMs whose decoder layers a sharded learner shards: the policy and, when it lives
        with it on the device, the frozen reference."""
        return [self.lm] + ([self.ref_lm] if hasattr(self, "ref_lm") else [])

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
    @property
    def prompt_token_limit(self) -> int:
        """The prompt budget: ``max_prompt_tokens``, within what the model's context leaves the answer."""
        cfg = self.llm_config
        context = model_context_length(self.lm.config)
        return prompt_token_limit(cfg.max_prompt_tokens, cfg.max_new_tokens, context)

    def encode_prompts(self, prompts: Sequence[HistoryPrompt | Rendering]) -> dict[str, torch.Tensor]:
        """Chat-format (one user turn, or a system and a user turn), fit to the prompt budget (fewer
        history records first: :mod:`~hgpo_rllib.rl_module.prompts`), left-pad; ``prompt_cut`` flags
        the prompts that did not fit whole."""
        fitted = fit_prompts(self.tokenizer, prompts, self.prompt_token_limit)
        rows = [f.ids for f in fitted]
        width = max((len(r) for r in rows), default=0)
        prompt_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                prompt_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
                prompt_mask[i, width - len(row) :] = 1
        prompt_cut = torch.tensor([f.cut for f in fitted], dtype=torch.bool)
        return {PROMPT_IDS: prompt_ids, PROMPT_MASK: prompt_mask, PROMPT_CUT: prompt_cut}

    # -------------------------------------------------------------------------------- generation
    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._generate(batch, self.llm_config.temperature)

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._generate(batch, self.llm_config.eval_temperature)

    def _generate(self, batch: dict[str, Any], temperature: float) -> dict[str, Any]:
        out_device = batch[PROMPT_IDS].device
        ids, mask = trim_left_padding(batch[PROMPT_IDS].long(), batch[PROMPT_MASK].long())
        generated = self.generator().generate(
            ids,
            mask,
            temperature=temperature,
            max_new_tokens=self.llm_config.max_new_tokens,
            stop_token_ids=self.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            allowed=self._logit_mask(batch, self.lm.device),
            min_new_tokens=self.llm_config.min_new_tokens,
        )
        out = self._pack_response(*(t.to(out_device) for t in generated))
        # Stored with the step: the learner applies the same restriction; the metrics count cut prompts.
        for key in (ALLOWED_IDS, PROMPT_CUT):
            if key in batch:
                out[key] = torch.as_tensor(batch[key]).to(out_device)
        return out

    def _pack_response(self, resp: torch.Tensor, logp: torch.Tensor, lengths: torch.Tensor) -> dict[str, Any]:
        """Right-pad to max_new_tokens; mask everything after the first EOS or beyond a row's length.
        A row that reached max_new_tokens without an EOS is ``length_cut``.

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
            RESP_MASK: resp_mask,
            RESP_LOGP: resp_logp,
            ACTION_TEXT: self.tokenizer.batch_decode(resp_ids.tolist(), skip_special_tokens=True),
            LENGTH_CUT: ((is_eos * keep).sum(1) == 0) & (lengths >= width),
        }

    def generator(self) -> Generator:
        """The generation engine of ``inference_backend``, started on first use."""
        if self._generator is None:
            if self.backend == "vllm":
                from hgpo_rllib.rl_module.vllm_generation import VLLMGenerator  # needs vllm installed

                cfg = self.llm_config
                self._generator = VLLMGenerator(
                    self.lm,
                    self._model_dir,
                    dtype=cfg.torch_dtype,
                    gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                    max_model_len=self.prompt_token_limit + cfg.max_new_tokens,
                    # Not cfg.seed (that fixes the tiny init, identical everywhere): sampling randomness
                    # follows this process's torch seed, as on the HF path, so env runners differ.
                    sampling_seed=torch.initial_seed() % 2**31,
                    engine_args=cfg.vllm_engine_args,
                )
            else:
                self._generator = HFGenerator(self.lm, share_prefill=self.llm_config.share_prompt_prefill)
        return self._generator

    def play_in(self, torch_dtype: str, inference_backend: str) -> None:
        """Generate in ``torch_dtype`` with ``inference_backend`` from now on (an evaluation's levers,
        ``rllib evaluate --dtype/--inference-backend``, on a module restored as it was saved): the
        policy's weights are cast, ``llm_config`` and ``model_config`` say so, and the next answer
        starts the engine anew. A restored learner's LoRA adapters are folded into the weights first
        (in their own dtype, then cast), as the env runners' copies hold them: vLLM loads a plain
        model's weights. For playing only: a training learner's float32 masters stay float32."""
        backend = resolve_inference_backend(inference_backend)  # before anything changes
        self.model_config = {
            **self.model_config,
            "torch_dtype": torch_dtype,
            "inference_backend": inference_backend,
        }
        self.llm_config = dataclasses.replace(
            self.llm_config, torch_dtype=torch_dtype, inference_backend=inference_backend
        )
        self.backend = backend
        self.compute_dtype = TORCH_DTYPES[torch_dtype]
        if isinstance(self.lm, PeftModel):
            self.lm = self.lm.merge_and_unload()
        self.lm.to(self.compute_dtype)
        self.close_generator()

    def close_generator(self) -> None:
        """Shut the generation engine down (an env runner's ``stop``); a later call starts a new one."""
        if self._generator is not None:
            self._generator.close()
            self._generator = None

    # ---------------------------------------------------------------------------------- training
    @property
    def model_shape(self) -> ModelShape:
        """The model's sizes, for the learner's FLOP count (:mod:`hgpo_rllib.learner_flops`)."""
        model = self.lm.get_base_model() if isinstance(self.lm, PeftModel) else self.lm
        return ModelShape.from_config(model.config)

    @property
    def lora_weights(self) -> int | None:
        """The LoRA adapters' weights (``r (in + out)`` per adapted matrix, as PEFT matched them), or
        None for full fine-tuning."""
        if not self.uses_lora:
            return None
        return sum(p.numel() for name, p in self.lm.named_parameters() if ADAPTER_MARK in name)

    def take_pass_tokens(self) -> dict[PassKind, PassTokens]:
        """What the log-prob passes computed since the last call, by kind; starts a new count."""
        taken, self.pass_tokens = self.pass_tokens, {}
        return taken

    def _count_pass(self, kind: PassKind, batch: dict[str, Any], packing: PrefixPacking | None) -> None:
        resp_mask = batch[RESP_MASK]
        if packing is None:
            counts = row_pass_tokens(batch[PROMPT_MASK].cpu().numpy(), resp_mask.cpu().numpy())
        else:
            counts = PassTokens(
                packing.computed_tokens, packing.attention_pairs, int(resp_mask.sum()), packing.input_ids.size
            )
        self.pass_tokens[kind] = self.pass_tokens.get(kind, PassTokens()) + counts

    def _token_logp(
        self, lm: torch.nn.Module, batch: dict[str, Any], with_entropy: bool, kind: PassKind
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs and entropies [N, T] of ``resp_ids`` at the exploration temperature.

        The backbone gives hidden states (:mod:`hgpo_rllib.rl_module.hidden_states`); the LM head runs
        only on valid response positions, ``logprob_chunk_tokens`` at a time
        (:mod:`hgpo_rllib.rl_module.logprobs`). What the pass computes is counted under ``kind``
        (:meth:`take_pass_tokens`).
        """
        resp_ids, resp_mask = batch[RESP_IDS], batch[RESP_MASK]
        model = lm.get_base_model() if isinstance(lm, PeftModel) else lm
        backbone = getattr(model, model.base_model_prefix)
        device = resp_ids.device  # the batch's, not the model's: offloaded shards sit on the CPU
        packing = self._prefix_packing(model, batch)
        self._count_pass(kind, batch, packing)
        # Learners: float32 master weights, the forward in the compute dtype (no-op for float32).
        mixed = self.compute_dtype != torch.float32
        with torch.autocast(device.type, dtype=self.compute_dtype, enabled=mixed):
            states = response_states(backbone, *(batch[k] for k in TOKEN_COLUMNS), packing)
            return token_logp_entropy(
                states,
                model.get_output_embeddings(),
                resp_ids,
                resp_mask,
                temperature=self.llm_config.temperature,
                allowed=self._logit_mask(batch, states.device),
                stop_ids=self.eos_token_ids,
                min_new_tokens=self.llm_config.min_new_tokens,
                chunk_tokens=self.llm_config.logprob_chunk_tokens,
                with_entropy=with_entropy,
            )

    def _prefix_packing(self, model: torch.nn.Module, batch: dict[str, Any]) -> PrefixPacking | None:
        """The rows as prefix trees when ``share_prompt_prefixes`` is on, the model's attention takes a
        custom mask (sdpa, eager) and the rows share anything; else None (the unshared pass)."""
        if not self.llm_config.share_prompt_prefixes:
            return None
        if model.config._attn_implementation not in TREE_MASK_ATTENTION:
            return None
        tokens = (batch[k].cpu().numpy() for k in TOKEN_COLUMNS)  # the order the packing takes them in
        return pack_shared_prefixes(*tokens, self.attention_pair_cost)

    @property
    def attention_pair_cost(self) -> float:
        """The model's attention cost per (query, key) pair relative to a token's linear layers
        (what :mod:`~hgpo_rllib.rl_module.prefix_sharing` weighs a longer packed sequence by)."""
        return attention_pair_cost(self.lm.config)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Per-token log-probs and entropies of ``resp_ids`` (0 where ``resp_mask`` is 0)."""
        kind = "trained" if torch.is_grad_enabled() else "forward"
        logp, entropy = self._token_logp(self.lm, batch, with_entropy=True, kind=kind)
        return {"logp": logp, "entropy": entropy}

    def compute_ref_logp(self, batch: dict[str, Any]) -> torch.Tensor:
        """Per-token log-probs [N, T] of ``resp_ids`` under the frozen initial weights (for the KL term):
        the base with adapters disabled (LoRA), the CPU copy (``reference_on_cpu``) or ``ref_lm``."""
        with torch.no_grad():
            if self.uses_lora:
                with self.lm.disable_adapter():
                    return self._token_logp(self.lm, batch, with_entropy=False, kind="reference")[0]
            if hasattr(self, "_cpu_reference"):
                device = batch[RESP_IDS].device
                on_cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                reference = self._cpu_reference[0]
                return self._token_logp(reference, on_cpu, with_entropy=False, kind="reference")[0].to(device)
            if hasattr(self, "ref_lm"):
                return self._token_logp(self.ref_lm, batch, with_entropy=False, kind="reference")[0]
        raise RuntimeError(
            "compute_ref_logp needs the frozen reference model, which exists only on learners "
            f"(inference_only=False) with model_config['kl_coeff'] > 0; here kl_coeff="
            f"{self.llm_config.kl_coeff}, inference_only={self.inference_only}"
        )

    # ------------------------------------------------------------------------------ state sync
    def _weights(self, inference_only: bool) -> dict[str, torch.Tensor]:
        """The module's weights by state-dict name. With ``inference_only`` (weight sync to env runners)
        the reference model is left out and LoRA adapters are merged; otherwise (checkpoints) a LoRA
        model gives its adapters only. A sharded module gathers its full weights, a collective of all
        learners: rank 0 gets them, the others nothing."""
        if self.uses_lora:
            lora_state = merged_state_dict(self.lm) if inference_only else adapter_state_dict(self.lm)
            state = {f"lm.{k}": v for k, v in lora_state.items()}
        elif self.weight_gatherer is not None:
            state = self.weight_gatherer.full_state_dict(self)
        else:
            state = self.state_dict()
        if inference_only and not self.inference_only:
            skip = tuple(f"{attr}." for attr in self.get_non_inference_attributes())
            state = {k: v for k, v in state.items() if not k.startswith(skip)}
        return state

    def get_state(
        self,
        components: Any = None,
        *,
        not_components: Any = None,
        inference_only: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """TorchRLModule.get_state (see :meth:`_weights`), but bfloat16 weights become float32 arrays
        (numpy has no bf16). Weight syncs send :meth:`engine_weights` instead."""
        return {
            k: (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
            for k, v in self._weights(inference_only).items()
        }

    def engine_weights(self) -> dict[str, EngineWeights]:
        """What a weight sync sends a runner's module (:meth:`set_state` takes it): the inference
        weights in the runners' dtype (``torch_dtype``), 2 bytes per parameter in bfloat16, tied
        weights once. A sharded learner of rank > 0 gets an empty one."""
        weights = EngineWeights.from_state(self._weights(inference_only=True), self.compute_dtype)
        return {ENGINE_WEIGHTS: weights}

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the weights (a state dict of arrays or :meth:`engine_weights`); a running vLLM engine gets
        the new weights too. A plain (inference-only) module given adapters only (a LoRA checkpoint)
        folds them into its base weights."""
        if ENGINE_WEIGHTS in state:
            # Views of the object store's copy, loaded as they are: RLlib's set_state would first
            # turn every bfloat16 tensor into a float32 copy (convert_to_torch_tensor).
            self.load_state_dict(state[ENGINE_WEIGHTS].tensors(), strict=self.inference_only)
        elif not self.uses_lora and any(ADAPTER_MARK in k for k in state):
            adapters = {k.removeprefix("lm."): torch.as_tensor(v) for k, v in state.items()}
            self.lm = merge_adapter_state(self.lm, self.llm_config.lora, adapters)
        elif self.weight_gatherer is not None:  # every learner is given the full weights, keeps its shard
            self.weight_gatherer.load_full_state_dict(self, state)
        else:
            super().set_state(state)
        if self._generator is not None:
            self._generator.load_weights(self.lm)

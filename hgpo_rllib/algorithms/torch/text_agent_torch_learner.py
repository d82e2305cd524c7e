"""The text-agent algorithms' torch learner: micro-batched token-mean updates, AdamW, metrics and FSDP.

A minibatch may be processed as several forward/backward passes of ``micro_batch_size`` rows; every
pass divides by the minibatch's token count (over all learners), so the accumulated and averaged
gradient is exactly the token mean's (:mod:`~hgpo_rllib.algorithms.torch.token_loss`). AdamW (weight
decay) and global-norm gradient clipping (``config.grad_clip``) then take one step. With
``skip_zero_advantage_rows`` the passes leave out the rows whose policy loss is 0 whatever the weights
(zero advantage on every loss token, where that term is the whole loss): the divisor still counts
their tokens, so the loss and gradient are unchanged, and a minibatch left with no row steps on a
zero gradient.

Several learners either hold whole replicas (DDP, RLlib's default) or, with ``learner_sharding="fsdp"``,
1/N of every weight, gradient and optimizer moment (FSDP2, :mod:`hgpo_rllib.algorithms.torch.fsdp`).
DDP all-reduces once per minibatch (``no_sync`` on all but the last micro-batch); FSDP reduce-scatters
after every micro-batch into the sharded float32 gradients: skipping that sync would keep a full
unsharded gradient per learner between micro-batches, the memory sharding exists to save.
A multi-agent system's learner whose groups hold no turn of some module in a minibatch still joins
that module's synchronisations with idle rows that carry no loss (DDP; docs/drmas.md).
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter, defaultdict
from typing import Any

import torch
import tree
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY, WEIGHTS_SEQ_NO
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.torch_utils import convert_to_torch_tensor
from ray.rllib.utils.typing import ModuleID, StateDict

from hgpo_rllib.algorithms.text_agent_learner import TextAgentLearner
from hgpo_rllib.algorithms.torch import fsdp
from hgpo_rllib.algorithms.torch.flop_meter import FlopMeter
from hgpo_rllib.algorithms.torch.matmul_rate import emulation_note
from hgpo_rllib.algorithms.torch.token_loss import (
    behaviour_weights,
    non_finite_terms,
    rows_with_gradient,
    token_loss_terms,
)
from hgpo_rllib.columns import (
    ADVANTAGES,
    BEHAVIOUR_WEIGHT_CAPPED_KEY,
    BEHAVIOUR_WEIGHT_KEY,
    CLIP_FRAC_KEY,
    DUAL_CLIP_FRAC_KEY,
    GRAD_NORM_MAX_KEY,
    GRAD_NORM_PER_STEP_KEY,
    IDLE_MINIBATCHES_KEY,
    KL_KEY,
    LEARNER_ROWS_SKIPPED_FRAC,
    LEARNER_TOKENS_SKIPPED_FRAC,
    LOGP_GAP_KEY,
    LOSS_MASK,
    NUM_OPTIMIZER_STEPS,
    OLD_LOGP,
    POLICY_STALENESS_KEY,
    PROMPT_IDS,
    PROMPT_MASK,
    RATIO_MEAN_KEY,
    REF_LOGP,
    RESP_IDS,
    RESP_MASK,
    SAMPLER_LOGP,
)
from hgpo_rllib.host_memory import release_freed_memory
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule

#: The loss terms reported as token means over an update.
_TOKEN_MEAN_KEYS = (
    POLICY_LOSS_KEY,
    ENTROPY_KEY,
    KL_KEY,
    CLIP_FRAC_KEY,
    DUAL_CLIP_FRAC_KEY,
    RATIO_MEAN_KEY,
    BEHAVIOUR_WEIGHT_KEY,
    BEHAVIOUR_WEIGHT_CAPPED_KEY,
)


def say_if_emulated(module: MultiRLModule, device: torch.device) -> None:
    """One line per dtype where a policy trains in one this CPU emulates: a bfloat16 run resumed on a
    CPU without native bf16, or bfloat16 asked for there, is otherwise only much slower."""
    policies = [m.unwrapped() for m in module.values() if isinstance(m.unwrapped(), LLMRLModule)]
    for dtype in sorted({policy.compute_dtype for policy in policies}, key=str):
        if note := emulation_note(dtype, device, "the learner trains"):
            print(f"{note} (model_config['torch_dtype']='float32' is faster here)", file=sys.stderr)


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens that get loss: ``loss_mask`` where the advantage piece sets one (HiPER trains only
    its three blocks), else every response token."""
    return batch[LOSS_MASK] if LOSS_MASK in batch else batch[RESP_MASK]


def _numpy_compatible(value: Any) -> Any:
    """bfloat16 tensors as float32 (exact), everything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16:
        return value.float()
    return value


class TextAgentTorchLearner(TextAgentLearner, TorchLearner):
    """Token-mean clipped policy gradient with dual clip, k3 KL and entropy bonus (verl's actor); the
    algorithm subclass supplies the advantage piece (:meth:`TextAgentLearner.advantage_connector`)."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        # Per module (one per role of a multi-agent system; DEFAULT_MODULE_ID otherwise).
        self._token_sums: dict[ModuleID, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # The rows and their real tokens the training passes were given and left out, over the update.
        self._row_counts: dict[ModuleID, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._minibatch_tokens: dict[ModuleID, torch.Tensor] = {}
        self._num_minibatches = 0
        self._grad_norms: dict[ModuleID, list[float]] = defaultdict(list)
        self._idle_minibatches: dict[ModuleID, int] = defaultdict(int)
        self._module_steps: Counter[ModuleID] = Counter()  # the minibatches each module was in
        self._flop_meter = FlopMeter(self.module, self._device, self.config.learner_matmul_gflops)
        if self.first_learner:  # every learner computes in the same dtypes: one line per run
            say_if_emulated(self.module, self._device)

    @property
    def first_learner(self) -> bool:
        """The lone learner or rank 0 of several: the one that says what all of them share."""
        return not self.distributed or torch.distributed.get_rank() == 0

    @property
    def sharded(self) -> bool:
        """True when the learners shard the model (``learner_sharding="fsdp"``)."""
        return self.config.learner_sharding == "fsdp"

    @override(TorchLearner)
    def _make_module(self) -> MultiRLModule:
        """RLlib's module on this learner's device, sharded (FSDP2) when ``learner_sharding="fsdp"``.

        Sharding replaces the parameters, so it must happen before ``configure_optimizers()`` builds
        AdamW over them; RLlib has no public hook between the two, and ``Learner._make_module``'s
        docstring invites overriding it for steps of module construction.
        """
        module = super()._make_module()
        if self.sharded:
            for rl_module in module.values():
                fsdp.shard_llm_module(rl_module, self._device, offload=self.config.learner_offload)
        return module

    @override(TorchLearner)
    def _make_modules_ddp_if_necessary(self) -> None:
        """RLlib's DDP wrapping, unless the module is sharded (it synchronises its own gradients)."""
        if not self.sharded:
            super()._make_modules_ddp_if_necessary()

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        """AdamW over the trainable weights (the frozen reference model has none)."""
        params = [p for p in self.get_parameters(self._module[module_id]) if p.requires_grad]
        # Fused on GPU: the foreach default allocates a temporary the size of all trained weights per step.
        fused = bool(params) and all(p.is_cuda for p in params)
        optimizer = torch.optim.AdamW(params, weight_decay=config.weight_decay, fused=fused or None)
        self.register_optimizer(
            module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=config.lr
        )

    @override(TorchLearner)
    def _get_optimizer_state(self) -> StateDict:
        """TorchLearner's, except that bfloat16 state is saved as float32 (numpy has no bfloat16).

        The cast is exact, and ``Optimizer.load_state_dict`` casts the state back to the parameters'
        dtype on restore. (Learners keep float32 master weights, so this guards custom setups.)
        Sharded learners save the full state, keyed by parameter names, gathered on rank 0 (a
        collective: all learners call this; the others return empty states).
        """
        states = {}
        for name, optim in self._named_optimizers.items():
            module_id = self._optimizer_name_to_module[name]
            module = self.module[module_id]
            state = fsdp.full_optimizer_state(module, optim) if self.sharded else optim.state_dict()
            states[name] = {
                "module_id": module_id,
                "state": convert_to_numpy(tree.map_structure(_numpy_compatible, state)),
            }
        return states

    @override(TorchLearner)
    def _set_optimizer_state(self, state: StateDict) -> None:
        """TorchLearner's; sharded learners each keep their shard of the full state."""
        if not self.sharded:
            return super()._set_optimizer_state(state)
        for name, saved in state.items():
            full = {**saved["state"], "state": convert_to_torch_tensor(saved["state"]["state"])}
            module = self.module[saved["module_id"]]
            fsdp.load_full_optimizer_state(module, self._named_optimizers[name], full)

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self._token_sums.clear()
        self._row_counts.clear()
        self._grad_norms.clear()
        self._idle_minibatches.clear()
        self._module_steps.clear()
        self._num_minibatches = 0
        self._flop_meter.start()

    @override(TorchLearner)
    def postprocess_gradients_for_module(
        self, *, module_id: ModuleID, config: Any = None, module_gradients_dict: dict[str, Any]
    ) -> dict[str, Any]:
        """RLlib's clipping, which logs the last step's pre-clip global norm only; every step's is
        kept for ``grad_norm_per_step`` and ``grad_norm_max`` (Dr. MAS's stability measure, §2)."""
        if not module_gradients_dict:
            # Not in this minibatch (PerModuleMiniBatches): RLlib would log the norm of no gradients
            # as this module's last step.
            return {}
        grads = super().postprocess_gradients_for_module(
            module_id=module_id, config=config, module_gradients_dict=module_gradients_dict
        )
        for name, _ in self.get_optimizers_for_module(module_id):
            norm = self.metrics.peek((module_id, f"gradients_{name}_global_norm"), default=None)
            if norm is not None:
                self._grad_norms[module_id].append(float(norm))
        return grads

    @override(TorchLearner)
    def _compute_off_policyness(self, batch: dict[str, Any]) -> None:
        """RLlib's ``diff_num_grad_updates_vs_sampler_policy`` (1 when on-policy: RLlib counts the
        update under way), as a mean over the tokens that get loss (RLlib's own indexes a row column
        with a token mask), and ``policy_staleness``: versions between the weights that sampled a row
        and those this update starts from (0 on-policy, 1 with ``async_sampling``)."""
        for mid, rows in batch.items():
            if WEIGHTS_SEQ_NO not in rows:
                continue
            tokens = loss_mask(rows).sum(dim=-1).float()
            versions_behind = (self._weights_seq_no - rows[WEIGHTS_SEQ_NO]).float()
            lag = (versions_behind * tokens).sum() / tokens.sum().clamp(min=1)
            self.metrics.log_value((mid, DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY), float(lag), window=1)
            self.metrics.log_value((mid, POLICY_STALENESS_KEY), float(lag) - 1.0, window=1)

    @override(TorchLearner)
    def _uncompiled_update(self, batch: dict[str, Any], **kwargs: Any) -> tuple[Any, Any, dict]:
        """One optimiser step per module on its minibatch rows, in micro-batches of its
        ``micro_batch_size`` rows (per-module overrides apply: Dr. MAS's per-agent micro-batches),
        less the rows it need not compute (:meth:`computed_rows`), whose tokens still count in the
        token mean's divisor."""
        self._compute_off_policyness(batch)
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        batch = self._with_idle_rows(batch)
        total: dict[ModuleID, torch.Tensor] = {}
        fwd_out: dict[ModuleID, Any] = {}
        for mid, rows in batch.items():
            self._minibatch_tokens[mid] = self._mean_tokens_per_learner(loss_mask(rows))
            rows = self._rows_to_compute(mid, rows)
            num_rows = len(rows[ADVANTAGES])
            if not num_rows:
                total[mid] = torch.zeros((), device=self._device)
                self._zero_gradients(mid)
                continue
            step = self.config.get_config_for_module(mid).micro_batch_size or num_rows
            starts = range(0, num_rows, step)
            for start in starts:
                micro = {mid: {k: v[start : start + step] for k, v in rows.items()}}
                with contextlib.ExitStack() as stack:
                    # DDP: all-reduce once, after the module's last micro-batch.
                    if self.distributed and not self.sharded and start != starts[-1]:
                        stack.enter_context(self.module[mid].no_sync())
                    fwd_out.update(self.module.forward_train(micro))
                    loss = self.compute_losses(fwd_out={mid: fwd_out[mid]}, batch=micro)[mid]
                    loss.backward()
                total[mid] = total.get(mid, 0.0) + loss.detach()
        self._num_minibatches += 1
        self._module_steps.update(batch.keys())
        grads = {pid: p.grad for pid, p in self._params.items() if p.grad is not None}
        self.apply_gradients(self.postprocess_gradients(grads))
        return fwd_out, total, {}

    @override(TextAgentLearner)
    def computed_rows(self, module_id: ModuleID, rows: dict[str, Any]) -> torch.Tensor | None:
        """With :meth:`skips_zero_advantage_rows`: the rows with a non-zero advantage on a loss token
        (:func:`rows_with_gradient`); else None (every row)."""
        if not self.skips_zero_advantage_rows(module_id):
            return None
        return rows_with_gradient(rows[ADVANTAGES], loss_mask(rows))

    def _rows_to_compute(self, module_id: ModuleID, rows: dict[str, Any]) -> dict[str, Any]:
        """``rows`` less those :meth:`computed_rows` leaves out, counted for the skipped-row metrics.
        Their loss tokens count in ``policy_loss``'s divisor: their policy loss is 0."""
        real = rows[PROMPT_MASK].sum(dim=-1) + rows[RESP_MASK].sum(dim=-1)
        counts = self._row_counts[module_id]
        counts["rows"] += len(real)
        counts["tokens"] += float(real.sum())
        computed = self.computed_rows(module_id, rows)
        if computed is None:
            return rows
        skipped = ~computed
        counts["skipped_rows"] += float(skipped.sum())
        counts["skipped_tokens"] += float(real[skipped].sum())
        sums = self._token_sums[module_id]
        sums["skipped_loss_tokens"] += float(loss_mask(rows)[skipped].sum())
        sums[POLICY_LOSS_KEY] += 0.0  # reported even where every row was left out
        if not skipped.any():
            return rows
        index = torch.nonzero(computed).squeeze(-1)
        return {key: value[index] for key, value in rows.items()}

    def _zero_gradients(self, module_id: ModuleID) -> None:
        """Zero gradients for the parameters of ``module_id``'s optimisers that have none: its
        minibatch computed no row, and AdamW would skip a parameter without a gradient, where a zero
        one still moves it by its momentum and decays it (the policy's backward reaches every weight,
        so these are the parameters a computed pass would have given a zero gradient)."""
        for _, optimizer in self.get_optimizers_for_module(module_id):
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)

    def _mean_tokens_per_learner(self, mask: torch.Tensor) -> torch.Tensor:
        """The loss tokens of this minibatch over all learners, divided by their number: a learner's
        summed loss divided by it, then averaged by DDP or FSDP, is the token mean over all of them."""
        tokens = mask.sum().float()
        if self.distributed:
            torch.distributed.all_reduce(tokens)
            tokens = tokens / torch.distributed.get_world_size()
        return tokens.clamp(min=1e-8)  # no loss token anywhere: every loss is 0, any divisor will do

    def _with_idle_rows(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A multi-agent minibatch on several (DDP) learners: every module some learner trains in this
        minibatch is in every learner's batch, as many rows as the others (RLlib's cyclic minibatches
        give each present module the same count), so each learner runs the same passes and gradient
        all-reduces per module, in the same (sorted) module order. A learner without that module's
        rows gets idle rows: one pad token each, no loss, hence zero gradient. A module no learner
        has rows of is skipped by all."""
        if not self.distributed or len(self.module) < 2:
            return batch
        module_ids = sorted(self.module.keys())
        present = torch.tensor([float(mid in batch) for mid in module_ids], device=self._device)
        torch.distributed.all_reduce(present)
        num_rows = max(len(rows[ADVANTAGES]) for rows in batch.values())
        template = next(iter(batch.values()))
        ordered = {}
        for mid, count in zip(module_ids, present.tolist(), strict=True):
            if mid in batch:
                ordered[mid] = batch[mid]
            elif count > 0:
                ordered[mid] = self._idle_rows(mid, template, num_rows)
                self._idle_minibatches[mid] += 1
        return ordered

    def _idle_rows(self, module_id: ModuleID, template: dict[str, Any], num_rows: int) -> dict[str, Any]:
        """``num_rows`` rows of a pad-token prompt and response with no loss (``LOSS_MASK`` 0), in
        ``template``'s devices. The response token is a valid one: its log-prob is computed, so the
        backward reaches every weight (with zero gradient) and DDP's all-reduce fires."""
        device = template[ADVANTAGES].device
        pad = self.module[module_id].unwrapped().pad_token_id
        ids = torch.full((num_rows, 1), pad, dtype=torch.long, device=device)
        zeros = torch.zeros((num_rows, 1), device=device)
        rows = {PROMPT_IDS: ids, PROMPT_MASK: torch.ones_like(ids), RESP_IDS: ids.clone()}
        rows |= {RESP_MASK: torch.ones_like(ids), LOSS_MASK: torch.zeros_like(ids), ADVANTAGES: zeros}
        rows |= {key: zeros.clone() for key in (OLD_LOGP, REF_LOGP, SAMPLER_LOGP) if key in template}
        return rows

    @override(TorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: dict[str, Any],
        fwd_out: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        mask = loss_mask(batch).to(torch.float32)
        # Without OLD_LOGP the update is one optimiser step and this forward is the old policy's.
        old_logp = batch[OLD_LOGP] if OLD_LOGP in batch else fwd_out["logp"].detach()
        terms = token_loss_terms(
            logp=fwd_out["logp"],
            old_logp=old_logp,
            advantages=batch[ADVANTAGES],
            ref_logp=batch[REF_LOGP] if config.kl_coeff > 0 else None,
            clip_param=config.clip_param,
            dual_clip=config.dual_clip,
        )
        entropy = fwd_out["entropy"]
        sampler_logp = batch[SAMPLER_LOGP] if SAMPLER_LOGP in batch else old_logp
        pg = terms.pg
        weights = capped = None
        if config.async_sampling:  # rows of an older policy: the decoupled objective (token_loss)
            weights, capped = behaviour_weights(old_logp, sampler_logp, config.behaviour_weight_cap)
            pg = pg * weights
        per_token = pg - config.entropy_coeff * entropy
        if terms.kl is not None:
            per_token = per_token + config.kl_coeff * terms.kl
        first = self._num_minibatches == 0
        self._accumulate(
            module_id,
            mask,
            {
                POLICY_LOSS_KEY: pg,
                ENTROPY_KEY: entropy,
                KL_KEY: terms.kl,
                CLIP_FRAC_KEY: terms.clipped,
                DUAL_CLIP_FRAC_KEY: terms.dual_clipped,
                RATIO_MEAN_KEY: terms.ratio,
                BEHAVIOUR_WEIGHT_KEY: weights,
                BEHAVIOUR_WEIGHT_CAPPED_KEY: capped,
                LOGP_GAP_KEY: (fwd_out["logp"] - sampler_logp).abs() if first else None,
            },
        )
        loss = (per_token * mask).sum() / self._minibatch_tokens[module_id]
        if not torch.isfinite(loss):  # stop before backward(): no NaN/inf reaches the weights
            bad = non_finite_terms(
                mask,
                {
                    "policy_loss": pg,
                    f"kl_coeff * kl (kl_coeff={config.kl_coeff})": (
                        None if terms.kl is None else config.kl_coeff * terms.kl
                    ),
                    f"entropy_coeff * entropy (entropy_coeff={config.entropy_coeff})": (
                        config.entropy_coeff * entropy
                    ),
                    "logp (the learner's log-probs)": fwd_out["logp"],
                    "old_logp": old_logp,
                    "ref_logp": batch[REF_LOGP] if config.kl_coeff > 0 else None,
                    "advantages": batch[ADVANTAGES],
                },
            )
            raise FloatingPointError(
                f"learner: non-finite loss ({float(loss.detach())}) in minibatch "
                f"{self._num_minibatches + 1} "
                f"of this update; non-finite terms: {', '.join(bad) or 'none alone (their sum overflows)'}. "
                "The update stops before this minibatch's optimiser step; a huge lr, kl_coeff or "
                "entropy_coeff, or weights that are already non-finite, cause this."
            )
        return loss

    def _accumulate(
        self, module_id: ModuleID, mask: torch.Tensor, values: dict[str, torch.Tensor | None]
    ) -> None:
        """Token-weighted sums over the whole update, per module, reported as token means at its end."""
        sums = self._token_sums[module_id]
        with torch.no_grad():
            tokens = float(mask.sum())
            sums["tokens"] += tokens
            if self._num_minibatches == 0:
                sums["first_minibatch_tokens"] += tokens
            for key, value in values.items():
                if value is not None:
                    sums[key] += float((value * mask).sum())

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        self._flop_meter.log(self.metrics)
        gaps = {}
        for module_id, sums in self._token_sums.items():
            tokens = max(sums["tokens"], 1.0)
            # The rows left out have a policy loss of 0; every other mean is over the computed rows.
            all_tokens = max(sums["tokens"] + sums["skipped_loss_tokens"], 1.0)
            for key in _TOKEN_MEAN_KEYS:
                if key in sums:
                    mean = sums[key] / (all_tokens if key == POLICY_LOSS_KEY else tokens)
                    self.metrics.log_value((module_id, key), mean, window=1)
            if LOGP_GAP_KEY in sums:
                gaps[module_id] = sums[LOGP_GAP_KEY] / max(sums["first_minibatch_tokens"], 1.0)
                self.metrics.log_value((module_id, LOGP_GAP_KEY), gaps[module_id], window=1)
            self.metrics.log_value((module_id, NUM_OPTIMIZER_STEPS), self._module_steps[module_id], window=1)
            if self.distributed and len(self.module) > 1:
                idle = self._idle_minibatches.get(module_id, 0)
                self.metrics.log_value((module_id, IDLE_MINIBATCHES_KEY), idle, window=1)
        for module_id, counts in self._row_counts.items():
            rows_frac = counts["skipped_rows"] / max(counts["rows"], 1.0)
            tokens_frac = counts["skipped_tokens"] / max(counts["tokens"], 1.0)
            self.metrics.log_value((module_id, LEARNER_ROWS_SKIPPED_FRAC), rows_frac, window=1)
            self.metrics.log_value((module_id, LEARNER_TOKENS_SKIPPED_FRAC), tokens_frac, window=1)
        # Every learner's norms are the same (computed after the gradient all-reduce, or over the
        # full sharded gradient); RLlib cannot merge one list per learner, so the first one reports it.
        for module_id, norms in self._grad_norms.items():
            for norm in norms if self.first_learner else ():
                self.metrics.log_value((module_id, GRAD_NORM_PER_STEP_KEY), norm, reduce="item_series")
            self.metrics.log_value((module_id, GRAD_NORM_MAX_KEY), max(norms), window=1)
        if self.old_logp_pass is not None:  # recompute_old_logp="auto" decides by them next update
            over_learners = sorted(self.module.keys()) if self.distributed else None
            self.old_logp_pass.remember_gaps(gaps, over_learners, self._device)
        # The update's activations are freed; on CPU their heap pages stay resident unless handed back.
        release_freed_memory()

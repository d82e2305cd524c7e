"""Framework-agnostic learner logic of the text-agent algorithms: the learner connector pipeline
(docs/rllib_notes.md §3.2, §5.4).

As PPO appends its GAE piece in ``PPOLearner.build()``, a text-agent learner appends, after any user pieces:

1. the algorithm's advantage piece (:meth:`TextAgentLearner.advantage_connector`): complete rollout
   groups -> token rows + advantages (numpy), computed on the learner's whole batch before RLlib
   minibatches it (docs/hgpo_algorithm.md §1.1 step 6);
2. :class:`PromptSharing`: how much the batch's prompts share (metrics) and the rows' order: with
   ``share_prompt_prefixes`` token order, so that micro-batches share prompts; else, with
   ``length_buckets``, by length inside each minibatch (:meth:`TextAgentLearner.minibatch_spans`), so
   that each micro-batch pads to about its own rows' length;
3. RLlib's ``NumpyToTensor`` (onto the learner's device);
4. :class:`RecomputeOldLogp` when ``recompute_old_logp`` is True (the default) or "auto": the
   learner's own log-probs before the update as the PPO ratio's denominator, no gradient ("auto":
   the sampler's where they matched the learner's in the last update), over the rows the update
   computes (:meth:`TextAgentLearner.computed_rows`: ``skip_zero_advantage_rows``);
5. :class:`ReferenceLogp` when ``kl_coeff > 0``: frozen reference log-probs, no gradient.

An update called with a progress ticket (``LearnerGroup.update(..., progress=ticket)``) reports its
planned and finished minibatches to the driver's progress line (:mod:`hgpo_rllib.progress`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable
from typing import Any

import ray
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.utils.annotations import OverrideToImplementCustomLogic, override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator
from ray.rllib.utils.typing import ModuleID

from hgpo_rllib.algorithms.per_module_minibatches import PerModuleMiniBatches, minibatch_bounds
from hgpo_rllib.columns import FORCE_WEIGHTS
from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp, ReferenceLogp
from hgpo_rllib.connectors.learner.prompt_sharing import PromptSharing
from hgpo_rllib.progress import LEARNING, PROGRESS_KWARG, ProgressTicket, reported_minibatches
from hgpo_rllib.rl_module.apis import TokenPolicyAPI


def planned_minibatches(minibatches: Iterable) -> int:
    """How many minibatches an update's iterator yields: :class:`PerModuleMiniBatches`' steps;
    RLlib's cyclic iterator's ``num_total_minibatches`` if set, else enough to cover its largest
    module ``num_epochs`` times; 1 for RLlib's dummy iterator (the whole batch once). RLlib's
    iterators do not say; their settings are read from their (private) attributes, as of Ray 2.60."""
    if isinstance(minibatches, PerModuleMiniBatches):
        return minibatches.num_steps
    if isinstance(minibatches, MiniBatchCyclicIterator):
        if minibatches._num_total_minibatches:
            return minibatches._num_total_minibatches
        size, epochs = minibatches._minibatch_size, minibatches._num_epochs
        return max(
            math.ceil(epochs * len(rows) / size) for rows in minibatches._batch.policy_batches.values()
        )
    return 1


class TextAgentLearner(Learner, abc.ABC):
    """Adds the advantage and frozen log-prob pieces to the learner connector; the loss lives in the
    framework subclass."""

    @override(Learner)
    def build(self) -> None:
        super().build()
        if self._learner_connector is None:  # only with aggregator actors, which validation rejects
            raise ValueError(
                "a text-agent learner needs the Learner's connector pipeline (no aggregator actors)"
            )
        self._learner_connector.append(self.advantage_connector())
        self._learner_connector.append(
            PromptSharing(
                micro_batch_size={
                    mid: self.config.get_config_for_module(mid).micro_batch_size for mid in self.module.keys()
                },
                reorder=self.config.share_prompt_prefixes,
                length_spans=self.minibatch_spans if self.config.length_buckets else None,
            )
        )
        self._learner_connector.append(NumpyToTensor(as_learner_connector=True, device=self._device))
        #: The old-log-prob pass (None without ``recompute_old_logp``); "auto" decides by the gaps the
        #: framework learner hands it after each update.
        self.old_logp_pass: RecomputeOldLogp | None = None
        if self.config.recompute_old_logp:
            # One epoch over one minibatch is one optimiser step: its forward is the old policy's.
            # Sharded learners always run the pass: its all-gathers must happen on every learner,
            # and each would decide by its own row count.
            if self.config.num_epochs > 1 or self.config.learner_sharding == "fsdp":
                single_step_rows = 0
            elif self.config.minibatches_per_module:  # one step per module, or per row below that
                single_step_rows = math.inf if self.config.minibatches_per_module == 1 else 1
            else:
                single_step_rows = self.config.minibatch_size_per_learner or math.inf
            auto = self.config.recompute_old_logp == "auto"
            self.old_logp_pass = RecomputeOldLogp(
                chunk_rows=self.config.micro_batch_size,
                single_step_rows=single_step_rows,
                gap_threshold=self.config.old_logp_gap_threshold if auto else None,
                computed_rows=self.computed_rows,
                spans=self.minibatch_spans,
            )
            self._learner_connector.append(self.old_logp_pass)
        if self.config.kl_coeff > 0:
            self._learner_connector.append(ReferenceLogp(chunk_rows=self.config.micro_batch_size))

    def skips_zero_advantage_rows(self, module_id: ModuleID) -> bool:
        """Whether the update leaves out ``module_id``'s rows with a zero advantage on every loss token
        (``skip_zero_advantage_rows``): only where the clipped policy term is the module's whole loss
        (``kl_coeff`` and ``entropy_coeff`` 0), there such a row adds exactly nothing, and on one
        learner (several would run different numbers of passes and gradient collectives)."""
        config = self.config.get_config_for_module(module_id)
        return bool(
            config.skip_zero_advantage_rows
            and config.kl_coeff == 0
            and config.entropy_coeff == 0
            and not self.distributed
        )

    @OverrideToImplementCustomLogic
    @abc.abstractmethod
    def computed_rows(self, module_id: ModuleID, rows: dict[str, Any]) -> Any | None:
        """Which of ``module_id``'s ``rows`` (tensors) the update computes, as a boolean mask over
        them; None for every row (:meth:`skips_zero_advantage_rows`)."""

    def minibatch_spans(self, num_rows: int) -> list[int] | None:
        """Where every epoch's minibatches cut a module's ``num_rows`` rows (``length_buckets``):
        reordering rows inside these spans leaves each minibatch's rows, hence its token-mean loss and
        gradient, as they were. A lone learner's :class:`PerModuleMiniBatches` cut at
        :func:`minibatch_bounds`; several learners' cyclic minibatches at multiples of their size
        only where it divides the rows (else a minibatch wraps round to the first rows). None where
        no cut holds for every epoch (rows shuffled per epoch, or a wrapping minibatch)."""
        config = self.config
        if config.shuffle_batch_per_epoch and config.num_epochs > 1:
            return None
        size = config.minibatch_size_per_learner
        if self.distributed:
            return None if size and num_rows % size else minibatch_bounds(num_rows, size, None)
        return minibatch_bounds(num_rows, size, config.minibatches_per_module)

    @override(Learner)
    def _create_iterator_if_necessary(
        self,
        *,
        training_data: TrainingData,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        **kwargs: Any,
    ) -> Iterable:
        """On a lone learner, each module steps through its own rows, each row once per epoch, the
        last minibatch shorter (:class:`PerModuleMiniBatches`): RLlib's cyclic minibatches repeat
        rows to fill the last one (24 rows in minibatches of 10 trained 6 of them twice; issue 62,
        item 6) and, in a team, a smaller module's rows to match the largest. Several DDP learners
        keep RLlib's cyclic minibatches, which step them in lock-step (a learner past its rows cannot
        take an empty step: RLlib's update refuses a minibatch of no rows). RLlib has no public hook
        for the minibatch iterator; this keeps its batch building (the connector pipeline,
        ``should_module_be_updated``) by asking it for the whole batch as one minibatch. With a
        progress ticket (``progress=``) the minibatches are reported as they are done
        (:func:`~hgpo_rllib.progress.reported_minibatches`)."""
        progress: ProgressTicket | None = kwargs.pop(PROGRESS_KWARG, None)
        minibatches = self._minibatches(
            training_data=training_data,
            num_total_minibatches=num_total_minibatches,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch,
            **kwargs,
        )
        if progress is None:
            return minibatches
        planned = planned_minibatches(minibatches)
        return reported_minibatches(minibatches, planned, num_epochs, progress.reporter(LEARNING))

    def _minibatches(
        self,
        *,
        training_data: TrainingData,
        num_total_minibatches: int,
        num_epochs: int,
        minibatch_size: int | None,
        shuffle_batch_per_epoch: bool,
        **kwargs: Any,
    ) -> Iterable:
        per_module = self.config.minibatches_per_module
        if training_data.data_iterators or self.distributed:
            return super()._create_iterator_if_necessary(
                training_data=training_data,
                num_total_minibatches=num_total_minibatches,
                num_epochs=num_epochs,
                minibatch_size=minibatch_size,
                shuffle_batch_per_epoch=shuffle_batch_per_epoch,
                **kwargs,
            )
        batch = next(iter(super()._create_iterator_if_necessary(training_data=training_data)), None)
        if batch is None:
            return {}
        return PerModuleMiniBatches(
            batch,
            minibatch_size=minibatch_size,
            minibatches_per_module=per_module,
            num_epochs=num_epochs,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch and num_epochs > 1,
        )

    def runner_weights(self, *, force: bool = False) -> dict[str, Any]:
        """What a weight sync sends the env runners, in the shape of ``get_state(inference_only=True)``
        (modules and weights version): a text policy's weights in the runners' dtype
        (``engine_weights``), any other module's inference state. ``force``: the runners load them
        whatever their own version (after a restore to an earlier checkpoint)."""
        modules = {}
        for module_id, module in self.module.items():
            module = module.unwrapped()
            modules[module_id] = (
                module.engine_weights()
                if isinstance(module, TokenPolicyAPI)
                else module.get_state(inference_only=True)
            )
        return {COMPONENT_RL_MODULE: modules, WEIGHTS_SEQ_NO: self._weights_seq_no, FORCE_WEIGHTS: force}

    def put_runner_weights(self, *, force: bool = False) -> ray.ObjectRef:
        """:meth:`runner_weights` put into Ray's object store by this learner: the runners fetch them
        from there (zero-copy on this node), not through the driver."""
        return ray.put(self.runner_weights(force=force))

    @OverrideToImplementCustomLogic
    @abc.abstractmethod
    def advantage_connector(self) -> ConnectorV2:
        """The piece that turns complete episodes into the token batch with advantages."""

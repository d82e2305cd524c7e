"""What every algorithm of this package shares: an LLM policy acting in text envs, trained on whole
rollout groups with a token-level clipped loss.

:class:`TextAgentConfig` wires RLlib's new API stack for text (docs/rllib_notes.md §1, §9): grouped env
runners, the history-window prompt connector, the text-action connector, the LLM RLModule, a learner
group that never splits a rollout group, and the generation and loss settings. :class:`TextAgent`
runs one iteration (docs/rllib_notes.md §5.1): sample ``groups_per_iteration`` whole groups on the env
runners (:mod:`~hgpo_rllib.algorithms.runner_pool`), one learner update on all of them, then a weight
sync that waits for every runner; with ``async_sampling`` the next iteration's groups are sampled
during the update (docs/throughput.md). While an iteration samples or learns it prints a progress
line every ``progress_interval_s`` seconds (:mod:`hgpo_rllib.progress`). An algorithm (HGPO, ...) adds
its advantage estimator through its learner class and its own settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.common.tensor_to_numpy import TensorToNumpy
from ray.rllib.core import ALL_MODULES, COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)
from ray.train.constants import DEFAULT_STORAGE_PATH

import envs
from hgpo_rllib.algorithms import model_checks, validation
from hgpo_rllib.algorithms.checkpoints import (
    load_or_older,
    mark_saving_owner,
    remove_orphaned_checkpoint_copies,
    write_env_record,
)
from hgpo_rllib.algorithms.learner_group import GroupShardingLearnerGroup
from hgpo_rllib.algorithms.runner_pool import RunnerPool
from hgpo_rllib.columns import (
    FORCE_WEIGHTS,
    ITERATION_SECONDS,
    LEARNER_TOKENS_PER_S,
    NUM_GROUPS_SAMPLED,
    NUM_ROW_TOKENS,
    TASK_GENERATORS,
)
from hgpo_rllib.connectors.env_to_module.history_window import HistoryWindowPrompt, prompt_connector
from hgpo_rllib.connectors.module_to_env.text_actions import TextActionsToEnv
from hgpo_rllib.env_runner.grouped_env_runner import GroupedEnvRunner
from hgpo_rllib.env_runner.grouped_multi_agent_env_runner import GroupedMultiAgentEnvRunner
from hgpo_rllib.env_runner.metrics_callback import EpisodeMetricsCallback
from hgpo_rllib.errors import error_line
from hgpo_rllib.progress import LEARNING, PROGRESS_KWARG, IterationProgress
from hgpo_rllib.rl_module.config import ALGORITHM_OWNED_KEYS, TINY_PRESET
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN


class TextAgentConfig(AlgorithmConfig):
    """Settings every text-agent algorithm shares; defaults are the HGPO paper's (docs/hgpo_algorithm.md §5).

    Besides :meth:`training`, the RLlib settings relied on: ``lr`` 1e-6, ``grad_clip`` 1.0 (global
    norm), ``minibatch_size`` 256 rows per optimiser step (over all learners), ``num_epochs`` 1, no
    shuffling, ``gamma`` 0.95; env runners are :class:`~hgpo_rllib.env_runner.GroupedEnvRunner` s
    whose ``num_envs_per_env_runner`` must be a multiple of ``group_size`` (that many groups run in
    lock-step per wave); the driver keeps no model copy (``create_local_env_runner=False``), so
    ``num_env_runners`` must be >= 1 unless you set ``create_local_env_runner=True``. Evaluation runs
    with ``explore=False`` (the module samples at ``eval_temperature``) and groups of one episode.

    Fault tolerance (``.env_runners(sample_timeout_s=...)``, ``.fault_tolerance(...)``): one call
    to an env runner (sampling its share of groups, or a weight sync) may take ``sample_timeout_s``
    seconds (default 1800; None = no limit); a runner that raises, dies or runs out of time loses
    its share, which is sampled again on the other runners in the same iteration (or, with none
    left, on restarted ones, waiting at most ``env_runner_restore_timeout_s``).
    ``num_consecutive_env_runner_failures_tolerance`` (default 2) consecutive iterations that
    cannot complete their batch are tolerated; the next one raises with the runners' errors.

    Model choice lives in ``.rl_module(model_config=...)``: ``model`` ("tiny-qwen2", a random-init
    test model whose tokenizer is trained on the env's texts, or a local Hugging Face directory),
    ``torch_dtype``, ``inference_backend`` ("auto" | "hf" | "vllm"), ``vllm_engine_args``, memory
    levers (:class:`~hgpo_rllib.rl_module.config.LLMModuleConfig`). Generation lengths, temperatures
    and ``kl_coeff`` are training settings, passed on to the module.
    """

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        # The prompt's history window K (docs/hgpo_algorithm.md §5.1).
        self.history_length = 2
        self.gamma = 0.95
        self.invalid_action_penalty = 0.1
        # Rollouts.
        self.group_size = 8
        self.groups_per_iteration = 16
        # Loss and optimiser (§5).
        self.clip_param = 0.2
        self.dual_clip = 3.0
        self.kl_coeff = 0.01
        self.entropy_coeff = 0.001
        self.weight_decay = 0.01
        self.recompute_old_logp: bool | str = True
        self.old_logp_gap_threshold = 1e-4
        self.async_sampling = False
        self.behaviour_weight_cap = 2.0
        self.share_prompt_prefixes = False
        self.length_buckets = True
        self.skip_zero_advantage_rows = True
        self.weight_transfer = "engine_dtype"
        self.lr = 1e-6
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.minibatch_size = 256
        self.minibatches_per_module = None
        self.micro_batch_size = 16
        self.num_epochs = 1
        self.shuffle_batch_per_epoch = False
        self.learner_sharding = "none"
        self.learner_offload = False
        self.learner_matmul_gflops = None
        # Generation.
        self.prompt_turns = ONE_USER_TURN
        self.max_prompt_tokens = 4096
        self.max_new_tokens = 512
        self.min_new_tokens = 0
        self.temperature = 1.0
        self.eval_temperature = 0.4
        # RLlib plumbing for text envs (docs/rllib_notes.md §1, §9).
        self.env_runner_cls = GroupedEnvRunner
        self.num_env_workers = 0
        self.num_env_runners = 1
        self.num_envs_per_env_runner = 8
        self.create_local_env_runner = False
        self.batch_mode = "complete_episodes"
        self.episodes_to_numpy = False  # prompts have different lengths per step
        self.add_default_connectors_to_env_to_module_pipeline = False
        self.add_default_connectors_to_module_to_env_pipeline = False
        self.add_default_connectors_to_learner_pipeline = False
        self.callbacks_class = EpisodeMetricsCallback
        self.evaluation_config = {"explore": False}
        # Fault tolerance: an LLM iteration samples for minutes, so RLlib's 60 s would be too short.
        self.sample_timeout_s = 1800.0
        self.num_consecutive_env_runner_failures_tolerance = 2
        # A progress line inside iterations longer than this (hgpo_rllib/progress.py).
        self.progress_interval_s = 30.0

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        history_length: int = NotProvided,
        group_size: int = NotProvided,
        groups_per_iteration: int = NotProvided,
        invalid_action_penalty: float = NotProvided,
        clip_param: float = NotProvided,
        dual_clip: float = NotProvided,
        kl_coeff: float = NotProvided,
        entropy_coeff: float = NotProvided,
        weight_decay: float = NotProvided,
        micro_batch_size: int | None = NotProvided,
        minibatches_per_module: int | None = NotProvided,
        recompute_old_logp: bool | str = NotProvided,
        old_logp_gap_threshold: float = NotProvided,
        async_sampling: bool = NotProvided,
        behaviour_weight_cap: float = NotProvided,
        share_prompt_prefixes: bool = NotProvided,
        length_buckets: bool = NotProvided,
        skip_zero_advantage_rows: bool = NotProvided,
        prompt_turns: str = NotProvided,
        max_prompt_tokens: int = NotProvided,
        max_new_tokens: int = NotProvided,
        min_new_tokens: int = NotProvided,
        temperature: float = NotProvided,
        eval_temperature: float = NotProvided,
        learner_sharding: str = NotProvided,
        learner_offload: bool = NotProvided,
        learner_matmul_gflops: float | None = NotProvided,
        **kwargs: Any,
    ) -> TextAgentConfig:
        """Sets the shared training settings (plus RLlib's: ``gamma``, ``lr``, ``minibatch_size``, ...).

        Args:
            history_length: K (default 2): past (observation, action) records shown in the prompt.
            group_size: n, episodes per rollout group, all on one task (default 8).
            groups_per_iteration: Rollout groups (tasks) per training iteration (default 16).
            invalid_action_penalty: Subtracted from a format-invalid step's return and episode
                score, after discounting (default 0.1, docs/hgpo_algorithm.md §1.1).
            clip_param: PPO ratio clip epsilon (default 0.2).
            dual_clip: For A < 0 the per-token loss is capped at -A * dual_clip (default 3.0).
            kl_coeff: Weight of the k3 KL to the frozen initial model (default 0.01); 0 disables the
                term and no reference model is built.
            entropy_coeff: Weight of the entropy bonus (default 0.001).
            weight_decay: AdamW weight decay (default 0.01).
            micro_batch_size: Rows per forward/backward pass (default 16); a minibatch is
                processed in such passes with gradient accumulation (exact token mean); also the
                chunk size of the reference and old log-prob passes. None = the whole minibatch at
                once. Each pass's input leaves out the columns that are padding in all its rows.
            minibatches_per_module: Optimiser steps per epoch of every module, each on a near-equal
                share of its own rows, whatever their number (Dr. MAS's adaptive mini-batch,
                ``ppo_mini_update_num``: 1 for math, 5 for search); default None: minibatches of
                ``minibatch_size`` rows. Either way a learner with several modules (a team) steps
                each through its own rows, each row once per epoch (docs/drmas.md §Per-module updates).
            recompute_old_logp: The PPO ratio's old log-probs are the learner's own, computed on the
                whole batch before the update (default True, as verl); False uses the sampler's,
                which differ slightly with vLLM or bf16 and so clip spuriously. The sampler's are
                compared with the learner's in ``logp_gap_vs_sampler`` either way (its first
                minibatch, mean absolute per token). "auto": the sampler's where they matched in
                the last update (that gap at most ``old_logp_gap_threshold``), saving the no-grad
                pass over the batch; the learner's on the first update and wherever the gap was
                larger. Each update reports which (``old_logp_from_sampler``, 1 = the sampler's);
                several learners decide by the largest gap any of them measured, so all alike. Not
                with ``async_sampling``. An update of one optimiser step never runs the pass.
            old_logp_gap_threshold: With ``recompute_old_logp="auto"``: the largest
                ``logp_gap_vs_sampler`` at which the sampler's log-probs stand for the old policy's
                (default 1e-4; float32 HF sampling measures ~3e-6 on SmolLM2-135M, bf16 or vLLM ~0.04).
            async_sampling: Overlapped sampling (default False): the env runners sample the next
                iteration's groups (whole groups, with the weights of one version before) while the
                learner trains on this iteration's, and the weight sync follows both. The loss
                corrects for the one-version lag with truncated importance weights
                (:mod:`~hgpo_rllib.algorithms.torch.token_loss`; needs ``recompute_old_logp``); the
                lag is the learner metric ``policy_staleness`` (docs/throughput.md).
            behaviour_weight_cap: With ``async_sampling``: the cap C of each token's importance
                weight ``min(pi_proximal / pi_behaviour, C)`` (default 2.0, verl's truncated
                importance sampling).
            share_prompt_prefixes: The learner sorts the batch's rows by their tokens and, in each
                pass over a micro-batch, computes every prompt prefix its rows share once (prefix
                trees with a tree attention mask, :mod:`hgpo_rllib.rl_module.prefix_sharing`); the
                log-probs and gradients equal the unshared pass's (default False).
            length_buckets: Without ``share_prompt_prefixes``: each minibatch's rows sorted by length
                before they are cut into micro-batches, so that each micro-batch pads to about its
                own rows' length (default True). A minibatch keeps its rows, so its token-mean loss
                and gradient are unchanged (float rounding aside); the padding the passes computed
                is the learner metric ``learner_padding_frac``. Rows shuffled per epoch
                (``shuffle_batch_per_epoch``) keep their order.
            skip_zero_advantage_rows: The learner's passes (training and old log-probs) leave out
                the rows whose advantage is 0 on every loss token, e.g. every row of a rollout group
                whose episodes all scored alike (default True). Only for a module whose loss is the
                clipped policy term alone (``kl_coeff`` and ``entropy_coeff`` 0; not HiPER, whose
                critic trains on every row) and on one learner (several would run different numbers
                of passes and gradient collectives); per-module overrides apply. There such a row's
                loss is 0 whatever its ratio, so the loss and gradient are unchanged: each minibatch
                keeps its rows and still divides by all their loss tokens, and a minibatch left with
                no row steps AdamW on a zero gradient. The learner metrics
                ``learner_rows_skipped_frac`` and ``learner_tokens_skipped_frac`` report what was
                left out (of the rows, and of their real tokens), ``learner_flops`` what was
                computed; ``policy_loss`` stays the mean over all loss tokens, while the other token
                means (``entropy``, ``clip_frac``, ``ratio_mean``, ``logp_gap_vs_sampler``, ...)
                become means over the computed rows' tokens.
            prompt_turns: How a prompt reaches the model's chat template: "user" (default: the env's
                template as one user turn, the paper's templates verbatim) or "system_user" (its task
                and instructions as the system turn, the same at every step, and the history, current
                observation and admissible actions as the user turn; docs/models.md). A prompt over
                the budget shortens its user turn only.
            max_prompt_tokens: Prompt budget in tokens (default 4096; at most the model's context
                less ``max_new_tokens``); a longer prompt leaves out its oldest history records first
                (:mod:`hgpo_rllib.rl_module.prompts`).
            max_new_tokens: Longest response in tokens (default 512).
            min_new_tokens: Shortest response in tokens (default 0): no stop token is sampled
                before it, and the learner scores the same distribution (the stop tokens masked at
                those positions). ``min_new_tokens = max_new_tokens`` makes every response that long
                (a fixed cost per row, as ``benchmarks/vs_trl.py`` needs; each such response is
                length-cut, so set ``invalid_action_penalty=0`` if the env's rewards should stand alone).
            temperature: Sampling temperature while training (default 1.0); the learner scores
                tokens at the same temperature.
            eval_temperature: Sampling temperature with ``explore=False`` (default 0.4; 0 = greedy).
            learner_sharding: "none" (default: every learner holds the whole model, DDP) or "fsdp"
                (FSDP2: the float32 master weights, gradients, AdamW state and the GPU reference
                sharded over ``num_learners`` >= 2 learners, each decoder layer gathered only while
                it runs; full fine-tuning only, not with ``model_config['lora']``), see
                :mod:`hgpo_rllib.algorithms.torch.fsdp`. The memory plan divides accordingly.
            learner_offload: With ``learner_sharding="fsdp"``: keep each learner's shards (float32
                master weights, gradients, reference) and AdamW state in host RAM and step AdamW
                there (FSDP2's ``CPUOffloadPolicy``, as the paper's 7B runs offload); the GPU holds
                the layers being gathered, activations and the head. Default False. Slower updates
                (host-device copies every layer, AdamW on the CPU); with CPU learners it changes nothing.
            learner_matmul_gflops: The matmul rate (GFLOP/s) the learner's achieved rate is reported
                against (``learner_peak_fraction``, docs/throughput.md). None (default): each learner
                measures it when it starts, at its model's main matmul in its compute dtype alone on
                its device and threads (~0.3 s at 135M parameters on 2 CPU cores in float32, ~1 s in
                bfloat16 the CPU emulates); a number: that rate and no probe, e.g. the idle figure of
                ``benchmarks/machine_limit.py`` when the run shares its machine; 0: no fraction.

        ``minibatch_size`` (RLlib) is rows per optimiser step summed over all learners (default
        256, must divide evenly among ``num_learners``); ``num_epochs`` passes over the batch.
        """
        super().training(**kwargs)
        return self._set_provided(locals())

    def _set_provided(self, arguments: dict[str, Any]) -> Any:
        """Set the keyword arguments a ``training()`` caller provided (RLlib marks the others
        ``NotProvided``); returns the config, as RLlib's setters do."""
        for name, value in arguments.items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)
        return self

    @override(AlgorithmConfig)
    def env_runners(
        self,
        *,
        num_env_workers: int = NotProvided,
        weight_transfer: str = NotProvided,
        **kwargs: Any,
    ) -> TextAgentConfig:
        """RLlib's env-runner settings, plus:

        Args:
            num_env_workers: Worker processes per env runner that reset and step its sub-envs
                concurrently (default 0: in the runner's own process).
            weight_transfer: How the learner's weights reach the runners after each update:
                "engine_dtype" (default: 2 bytes per parameter in bfloat16, put into the object store
                by the learner, fetched by each runner without a driver hop, docs/throughput.md) or
                "float32_state" (RLlib's ``get_state`` route through the driver, 4 bytes per
                parameter; the baseline of ``benchmarks/weight_sync.py``).
        """
        super().env_runners(**kwargs)
        return self._set_provided({"num_env_workers": num_env_workers, "weight_transfer": weight_transfer})

    @override(AlgorithmConfig)
    def reporting(self, *, progress_interval_s: float = NotProvided, **kwargs: Any) -> TextAgentConfig:
        """RLlib's reporting settings (``metrics_num_episodes_for_smoothing``, ...), plus:

        Args:
            progress_interval_s: While an iteration samples or learns, a line every this many
                seconds with its progress: episodes finished of those requested and generated
                tokens/s while sampling, pass and minibatch while learning (default 30; 0: none).
                An iteration shorter than this prints none (:mod:`hgpo_rllib.progress`).
        """
        super().reporting(**kwargs)
        return self._set_provided({"progress_interval_s": progress_interval_s})

    @override(AlgorithmConfig)
    def multi_agent(self, **kwargs: Any) -> TextAgentConfig:
        """RLlib's multi-agent settings (``policies``, ``policy_mapping_fn``, ...) for a multi-agent
        text system (a team env, docs/drmas.md): roles map to modules, one shared LLM or one per role.
        A multi-agent config samples with :class:`GroupedMultiAgentEnvRunner` (unless another runner
        class was chosen); per-module settings go through ``.rl_module(rl_module_spec=...)`` (model,
        size) and ``algorithm_config_overrides_per_module`` (``lr``, ``micro_batch_size``)."""
        super().multi_agent(**kwargs)
        if self.is_multi_agent and self.env_runner_cls is GroupedEnvRunner:
            self.env_runner_cls = GroupedMultiAgentEnvRunner
        return self

    # ------------------------------------------------------------------------- RLlib wiring
    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=LLMRLModule)

    @property
    @override(AlgorithmConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        """Generation settings, ``kl_coeff`` and seed go to the module; the tiny test model also
        gets the env's tokenizer corpus."""
        auto = {key: getattr(self, key) for key in ALGORITHM_OWNED_KEYS if key != "seed"}
        if self.seed is not None:
            auto["seed"] = int(self.seed)
        user = self.user_model_config()
        if user.get("model", TINY_PRESET) == TINY_PRESET and "tokenizer_corpus" not in user:
            name = self.envs_name()
            if name is not None and self._env_is_usable(name):
                try:
                    auto["tokenizer_corpus"] = envs.get_tokenizer_corpus(name, self.env_config)
                except Exception as error:  # the user's env: its constructor or its play raised
                    raise ValueError(
                        f"env {name!r} could not play the texts the tiny model's tokenizer is trained "
                        f"on: {error_line(error)}"
                    ) from error
        return super()._model_config_auto_includes | auto

    def _env_is_usable(self, name: str) -> bool:
        """Whether the env is a text env that takes ``env_config`` (else ``validate()`` names what is
        wrong, and no tokenizer corpus can be played from it)."""
        try:
            envs.check_env_config(name, self.env_config)
        except ValueError:
            return False
        return True

    def user_model_config(self) -> dict[str, Any]:
        """``model_config`` as the user set it, without the keys the algorithm adds."""
        mc = self._model_config
        return dict(mc) if isinstance(mc, dict) else dataclasses.asdict(mc)

    def envs_name(self) -> str | None:
        """``config.env`` as an env the ``envs`` registry resolves (a built-in, a name registered
        with Tune or Gymnasium, a ``module:Class`` path), or None if it is something else."""
        if not isinstance(self.env, str):
            return None
        try:
            envs.env_creator(self.env)
        except ValueError:
            return None
        return envs.env_name(self.env)

    def prompt_connector(self) -> HistoryWindowPrompt:
        """The env's prompt template with this config's history window and env settings."""
        return prompt_connector(self.env, self.env_config, self.history_length, self.prompt_turns)

    @override(AlgorithmConfig)
    def build_env_to_module_connector(self, env: Any = None, spaces: Any = None, device: Any = None) -> Any:
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        pipeline.append(self.prompt_connector())
        return pipeline

    @override(AlgorithmConfig)
    def build_module_to_env_connector(self, env: Any = None, spaces: Any = None) -> Any:
        pipeline = super().build_module_to_env_connector(env=env, spaces=spaces)
        pipeline.append(TensorToNumpy())
        pipeline.append(TextActionsToEnv())
        return pipeline

    @override(AlgorithmConfig)
    def build_learner_group(
        self,
        *,
        env: Any = None,
        spaces: Any = None,
        rl_module_spec: Any = None,
        placement_group: Any = None,
    ) -> GroupShardingLearnerGroup:
        """RLlib's LearnerGroup, except that rollout groups are never split (docs/rllib_notes.md §5.5)."""
        if rl_module_spec is None:
            rl_module_spec = self.get_multi_rl_module_spec(env=env, spaces=spaces)
        return GroupShardingLearnerGroup(
            config=self.copy(), module_spec=rl_module_spec, placement_group=placement_group
        )

    @property
    def minibatch_size_per_learner(self) -> int | None:
        """``minibatch_size`` is global (the paper's ppo_mini_batch_size); each learner's share."""
        if not self.minibatch_size:
            return None
        return self.minibatch_size // max(1, self.num_learners)

    # ------------------------------------------------------------------------- validation
    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        for error in self.setting_errors() or model_checks.memory_errors(self):
            self._value_error(f"{type(self).__name__}: {error}")

    def setting_errors(self) -> list[str]:
        """Every invalid setting, each message naming the setting and the value; an algorithm
        extends the list with its own."""
        return validation.text_agent_errors(self)


class TextAgent(Algorithm):
    """Sample whole rollout groups -> one learner update on all of them -> sync weights to the runners."""

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        if isinstance(config.env, str):  # a gym.register or module:Class name: to RLlib's lookup
            envs.register_with_tune(config.env)
        # Its board actor starts while the runners and learners are built.
        self.progress = IterationProgress(config.progress_interval_s)
        try:
            super().setup(config)
        except Exception as error:
            self.progress.close()
            failure = self._env_runner_start_failure()
            if failure is None:
                raise
            raise RuntimeError(failure) from error
        self.runner_pool = RunnerPool(self.config, self.progress)
        # async_sampling: the groups sampled during the last update, trained on next.
        self._sampled_episodes: list[Any] | None = None
        self._trained_task_generators: dict[int, dict] | None = None
        remove_orphaned_checkpoint_copies(Path(tempfile.gettempdir()))

    def _env_runner_start_failure(self) -> str | None:
        """Why an env runner could not start (its env or module raised in its constructor), in one
        line: RLlib only logs that error, then fails on the runner's absence (``IndexError``)."""
        runners = getattr(self, "env_runner_group", None)
        if runners is None:
            return None
        manager = runners._worker_manager
        for result in manager.foreach_actor(lambda runner: runner.assert_healthy(), healthy_only=False):
            if not result.ok:
                return f"an env runner could not start (env {self.config.env!r}): {error_line(result.get())}"
        return None

    @override(Algorithm)
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """RLlib's save, with the housekeeping of :mod:`hgpo_rllib.algorithms.checkpoints`: a copy
        saved in the temp dir names its owner, for the next algorithm started on the host to remove
        if the trial is killed meanwhile; the env's name and class go into the checkpoint, so it
        plays (``rllib evaluate``) where the env is not registered."""
        mark_saving_owner(checkpoint_dir)
        super().save_checkpoint(checkpoint_dir)
        write_env_record(checkpoint_dir, self.config)

    @override(Algorithm)
    def cleanup(self) -> None:
        """Stop as RLlib does, then remove the log directory Ray 2.60 makes in ``~/ray_results`` for
        every algorithm built outside Tune if it is still empty (nothing writes there), so scripts
        and benchmarks leave no empty directories behind. Tune's trial directories stay, and
        ``rmdir`` itself refuses a directory something was written into. The progress board stops too."""
        super().cleanup()
        self.progress.close()
        logdir = Path(self.logdir)
        if logdir.parent == Path(DEFAULT_STORAGE_PATH):
            with contextlib.suppress(OSError):  # not empty, or already gone
                logdir.rmdir()

    @override(Algorithm)
    def training_step(self) -> None:
        """Sample -> update -> weight sync; with ``async_sampling`` the next iteration's groups are
        sampled during the update (by the weights before it) and the update trains on the groups
        sampled during the previous one. A progress line every ``progress_interval_s`` seconds."""
        with self.progress.iteration(self.iteration + 1):
            self._sample_update_sync()

    def _sample_update_sync(self) -> None:
        if self._sampled_episodes is None:  # synchronous, or the first iteration of an async run
            self._sampled_episodes = self._sample()
        episodes, self._sampled_episodes = self._sampled_episodes, None
        self.runner_pool.count_env_errors(episodes)
        # The runners' task generators as of the groups trained on: what a checkpoint keeps.
        self._trained_task_generators = dict(self.runner_pool.task_generators)
        if len(episodes) // self.config.group_size < max(1, self.config.num_learners):
            return  # nothing to learn from; counted when sampled
        if self.config.async_sampling:
            self.runner_pool.start_sampling(self.env_runner_group)

        update_kwargs: dict[str, Any] = {
            "num_epochs": self.config.num_epochs,
            "shuffle_batch_per_epoch": self.config.shuffle_batch_per_epoch,
        }
        # Minibatches only when the batch has more rows than one minibatch (RLlib's iterator would
        # otherwise repeat rows to fill it); never pass None (docs/rllib_notes.md §9 obstacle 9).
        if self.config.minibatch_size and self.config.minibatch_size < sum(map(len, episodes)):
            update_kwargs["minibatch_size"] = self.config.minibatch_size_per_learner
        with self._phase("learner_update", LEARNER_UPDATE_TIMER), self.progress.phase(LEARNING) as ticket:
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    )
                },
                **update_kwargs,
                **{PROGRESS_KWARG: ticket},
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        self._log_learner_tokens_per_s()

        if self.runner_pool.sampling_in_background:  # what the update did not hide of the next batch
            self._sampled_episodes = self._sample()
        with self._phase("weight_sync", SYNCH_WORKER_WEIGHTS_TIMER):
            self.sync_runner_weights()

    def _sample(self) -> list[Any]:
        """Sample a batch of whole groups, or finish the one sampling in the background (also one
        left by an update that raised), timed as the ``sampling`` phase; log its groups, failures and
        env-runner metrics; return its episodes."""
        runners, restore = self.env_runner_group, self.restore_env_runners
        with self._phase("sampling", ENV_RUNNER_SAMPLING_TIMER):
            if self.runner_pool.sampling_in_background:
                replies, failures = self.runner_pool.finish_sampling(runners, restore)
            else:
                replies, failures = self.runner_pool.sample_batch(runners, restore)
        episodes = [ep for reply in replies for ep in reply.episodes]
        num_groups = len(episodes) // self.config.group_size
        self.metrics.log_value(NUM_GROUPS_SAMPLED, num_groups, window=1)
        self.runner_pool.count_failures(num_groups, failures, self.metrics)
        if replies:
            self.metrics.aggregate([reply.metrics for reply in replies], key=ENV_RUNNER_RESULTS)
        return episodes

    def _log_learner_tokens_per_s(self) -> None:
        """The rows' real tokens (all modules, all learners) per second of this learner update."""
        seconds = self.metrics.peek((ITERATION_SECONDS, "learner_update"), default=0.0)
        modules = self.metrics.peek(LEARNER_RESULTS, default={})
        tokens = sum(values.get(NUM_ROW_TOKENS, 0) for values in modules.values() if isinstance(values, dict))
        if seconds > 0:
            self.metrics.log_value(
                (LEARNER_RESULTS, ALL_MODULES, LEARNER_TOKENS_PER_S), tokens / seconds, window=1
            )

    def sync_runner_weights(self, *, force: bool = False) -> None:
        """The learner's inference weights to every training runner. ``force``: load them even where
        a runner holds weights of a later version (after a restore to an earlier checkpoint).

        ``weight_transfer="engine_dtype"`` (default): the learner puts the weights in the runners'
        dtype into the object store itself and the runners fetch them from there (the driver handles
        a reference only). ``"float32_state"``: RLlib's route, the learner's ``get_state`` as float32
        arrays through the driver (issue 29's baseline, kept for ``benchmarks/weight_sync.py``).
        """
        if self.config.weight_transfer == "engine_dtype":
            weights: Any = self.learner_group.runner_weights(force=force)
        else:
            state = self.learner_group.get_state(
                components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True
            )[COMPONENT_LEARNER]
            weights = {k: v for k, v in state.items() if k in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO)}
            weights[FORCE_WEIGHTS] = force
        self.runner_pool.sync_weights(self.env_runner_group, weights, self.metrics)

    @contextlib.contextmanager
    def _phase(self, name: str, rllib_timer: str) -> Iterator[None]:
        """Time a phase into RLlib's timer (an EMA over iterations) and, unsmoothed, into
        ``iteration_seconds/<name>`` (this iteration's value)."""
        start = time.perf_counter()
        with self.metrics.log_time((TIMERS, rllib_timer)):
            yield
        self.metrics.log_value((ITERATION_SECONDS, name), time.perf_counter() - start, window=1)

    @override(Algorithm)
    def load_checkpoint(self, checkpoint_dir: str) -> None:
        """RLlib's restore, falling back to the newest older checkpoint of the same trial that loads
        when this one does not (a crash or a full disk cut it short): ``--resume`` then continues
        from there, says so, and re-reports the iterations after it (their rows are replaced)."""
        load_or_older(super().load_checkpoint, checkpoint_dir, lambda: self.iteration)

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group: Any) -> list[int]:
        """RLlib's restore (weights and connector states of the restarted runners), plus each
        runner's last known task-generator position, so a restarted runner plays new tasks."""
        restored = super().restore_env_runners(env_runner_group)
        if env_runner_group is self.env_runner_group:
            self.runner_pool.push_task_generators(env_runner_group, restored)
        return restored

    @override(Algorithm)
    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict:
        """RLlib's state plus the remote runners' task generators (a local runner's is part of
        its own state), so a restored algorithm does not replay the tasks already played."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        # As of the groups last trained on: groups sampled ahead (async_sampling) are not kept, so
        # a restored run samples them again, with its own weights.
        generators = self._trained_task_generators or self.runner_pool.task_generators
        if generators and self._check_component(TASK_GENERATORS, components, not_components):
            state[TASK_GENERATORS] = dict(generators)
        return state

    @override(Algorithm)
    def restore_from_path(self, path: Any, *args: Any, **kwargs: Any) -> None:
        """RLlib's restore, then the restored weights forced onto the training runners: RLlib sends
        them with the checkpoint's weights version, which runners already past it (a live algorithm
        restored to an earlier checkpoint) take as their version without loading the weights."""
        super().restore_from_path(path, *args, **kwargs)
        self.sync_runner_weights(force=True)

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self._sampled_episodes = None  # sampled ahead by other weights, from other task positions
        self._trained_task_generators = None
        if TASK_GENERATORS in state:
            self.runner_pool.task_generators = dict(state[TASK_GENERATORS])
            self.runner_pool.push_task_generators(
                self.env_runner_group, self.env_runner_group.healthy_env_runner_ids()
            )

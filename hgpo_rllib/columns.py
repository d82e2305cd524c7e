"""Every name that travels between the package's pieces: episode info keys, per-step columns, batch
columns and metric keys.

A leaf module (no imports from this package, no third-party imports), so the env runner, the
connectors, the learners, the callbacks and the tests agree on one spelling of each name without
importing each other (docs/rllib_notes.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# ----------------------------------------------------------------------------- episode info
#: Keys the env runner adds to the reset ``info`` of every episode.
GROUP_ID = "group_id"
TASK_SEED = "task_seed"
#: Multi-agent episodes: the team episode's turn (env step) at which an agent acted, stamped by
#: the runner into each agent step's extra model outputs, so the team's turn order can be rebuilt.
TURN = "turn"
#: Per-step ``info`` keys of an env playing HiPER's plan-execute answer format (``envs.TextEnv``
#: writes them; ``envs.common.actions.SWITCH_INFO`` / ``SUBGOAL_INFO``): the text inside ``<switch>``
#: (HAE's SWITCH flag is ``hgpo_rllib.advantages.hae.parse_switch`` of it) and inside ``<subgoal>``,
#: None when the tag pair is missing. The turn's validity is ``is_action_valid``, as in every format.
SWITCH_TEXT = "switch"
SUBGOAL_TEXT = "subgoal"

# ----------------------------------------------------------------------------- per-step outputs
#: Per-step extra model outputs stored in the episode by the env runner: prompt token ids without
#: padding (frozen at sampling time, so the learner trains on exactly the prompt the sampler saw),
#: the response mask and the sampling log-probs, and the decoded response text.
PROMPT_IDS = "prompt_ids"
PROMPT_MASK = "prompt_mask"
RESP_MASK = "resp_mask"
RESP_LOGP = "resp_logp"
ACTION_TEXT = "action_text"
#: Optional per-row column: token ids [B, A] a row may emit (-1 pads), from its admissible actions.
ALLOWED_IDS = "allowed_ids"
#: Per-step flags the module reports with each response (stored as extra model outputs, read by the
#: metrics callback and the step table): the prompt did not fit the prompt budget whole (it left out
#: history records or lost tokens from its middle: rl_module/prompts.py), and the response reached
#: ``max_new_tokens`` without an end-of-turn token ("length-cut"; penalised as an invalid action).
PROMPT_CUT = "prompt_cut"
LENGTH_CUT = "length_cut"

# ----------------------------------------------------------------------------- learner batch
#: Token batch columns besides the runner's (the RLModule's ``forward_train`` reads TOKEN_COLUMNS).
RESP_IDS = "resp_ids"
OLD_LOGP = "old_logp"
ADVANTAGES = "advantages"
REF_LOGP = "ref_logp"
#: The sampler's log-probs, kept next to the learner's recomputed ``old_logp``.
SAMPLER_LOGP = "sampler_logp"
#: HiPER (docs/hiper.md): the tokens that get loss [N, T] (a subset of ``resp_mask``; without it,
#: every response token does), the critic's response index per head [N, 3] (-1: no value in that
#: row), the values there before the update [N, 3] and the value targets [N, 3].
LOSS_MASK = "loss_mask"
VALUE_POSITIONS = "value_positions"
OLD_VALUES = "old_values"
VALUE_TARGETS = "value_targets"
TOKEN_COLUMNS = (PROMPT_IDS, PROMPT_MASK, RESP_IDS, RESP_MASK)
#: Present only when the module constrains generation to each step's admissible actions.
OPTIONAL_TOKEN_COLUMNS = (ALLOWED_IDS,)

# ----------------------------------------------------------------------------- metrics
#: Env runner metrics (results: ``env_runners/...``): generated (valid) response tokens, and their
#: rate during generation only.
NUM_GENERATED_TOKENS = "num_generated_tokens"
GENERATED_TOKENS_PER_S = "generated_tokens_per_s"
#: Episode metrics of the metrics callback (``env_runners/...``).
SUCCESS_RATE = "success_rate"
INVALID_ACTION_RATE = "invalid_action_rate"
ENV_ERROR_RATE = "env_error_rate"
#: Shares of an episode's turns whose response was length-cut, and whose prompt was cut (means over
#: episodes, like ``invalid_action_rate``).
LENGTH_CUT_RATE = "length_cut_rate"
PROMPT_CUT_RATE = "prompt_cut_rate"
SCORE = "score_mean"
SMOOTHED_SUFFIX = "_smoothed"
#: Algorithm metrics (results top level).
NUM_GROUPS_SAMPLED = "num_groups_sampled"
#: Env runner calls of this iteration (sampling and weight sync) that raised, died or timed out.
NUM_ENV_RUNNER_FAILURES = "num_env_runner_failures"
#: Iterations in a row, up to this one, whose sampling did not deliver ``groups_per_iteration``.
NUM_CONSECUTIVE_FAILED_ITERATIONS = "num_consecutive_failed_iterations"
#: Unsmoothed seconds of this iteration's phases: ``iteration_seconds/<phase>``.
ITERATION_SECONDS = "iteration_seconds"
#: Learner metrics (``learners/<module>/...``) besides RLlib's policy loss and entropy.
KL_KEY = "kl"
CLIP_FRAC_KEY = "clip_frac"
DUAL_CLIP_FRAC_KEY = "dual_clip_frac"
RATIO_MEAN_KEY = "ratio_mean"
#: Every optimiser step's pre-clip global gradient norm in the update (a list), and their maximum.
GRAD_NORM_PER_STEP_KEY = "grad_norm_per_step"
GRAD_NORM_MAX_KEY = "grad_norm_max"
#: Mean |logp_learner - sampler's logp| over the first minibatch of the first epoch: before any update
#: the learner must reproduce the sampler's log-probs, so this checks weight sync and token alignment
#: (with ``async_sampling`` it also measures the one version of lag between the two).
LOGP_GAP_KEY = "logp_gap_vs_sampler"
#: With ``recompute_old_logp="auto"``: 1 where this update's old log-probs were the sampler's (the last
#: gap was within ``old_logp_gap_threshold``, no old-log-prob pass), 0 where the learner's own.
OLD_LOGP_FROM_SAMPLER_KEY = "old_logp_from_sampler"
#: Padding in the inputs of the learner's passes (old log-probs, reference, training): 1 - real tokens
#: computed / input positions, over the update.
LEARNER_PADDING_FRAC = "learner_padding_frac"
#: With ``skip_zero_advantage_rows``: the fraction of an update's rows (over its minibatches and epochs)
#: its training passes left out, and of those rows' real (prompt and response) tokens.
LEARNER_ROWS_SKIPPED_FRAC = "learner_rows_skipped_frac"
LEARNER_TOKENS_SKIPPED_FRAC = "learner_tokens_skipped_frac"
NUM_OPTIMIZER_STEPS = "num_optimizer_steps"
#: Learner metric (multi-agent, several learners): minibatches in which this learner had no rows of the
#: module and ran idle rows to join the others' gradient all-reduce (averaged over learners).
IDLE_MINIBATCHES_KEY = "idle_minibatches"
#: Real (unpadded) prompt and response tokens of a module's rows, and all modules' per second of the
#: learner update (``learners/__all_modules__/learner_tokens_per_s``).
NUM_ROW_TOKENS = "num_row_tokens"
LEARNER_TOKENS_PER_S = "learner_tokens_per_s"
#: The FLOPs of a module's learner passes in an update (:mod:`hgpo_rllib.learner_flops`); all modules'
#: per second of the learner's update, the matmul rate it is measured against and the fraction of it.
LEARNER_FLOPS = "learner_flops"
LEARNER_GFLOPS_PER_S = "learner_gflops_per_s"
MATMUL_GFLOPS_PER_S = "matmul_gflops_per_s"
LEARNER_PEAK_FRACTION = "learner_peak_fraction"
#: Overlapped sampling (``async_sampling``): policy versions between the weights that sampled a row
#: and those the update starts from (token mean; 0 when on-policy); the truncated importance weights
#: of the off-policy correction (token mean) and the fraction of tokens at their cap.
POLICY_STALENESS_KEY = "policy_staleness"
BEHAVIOUR_WEIGHT_KEY = "behaviour_weight_mean"
BEHAVIOUR_WEIGHT_CAPPED_KEY = "behaviour_weight_capped_frac"

# ----------------------------------------------------------------------------- state keys
#: Env runner state key of its task-seed generator (its position and the count of groups started).
TASK_GENERATOR = "task_generator"
#: Algorithm state key: each remote env runner's task generator, by worker index.
TASK_GENERATORS = "task_generators"
#: Env runner state key: load the weights whatever the runner's weights version (a restore to an
#: earlier checkpoint), and take the version sent.
FORCE_WEIGHTS = "force_weights"


class _Episode(Protocol):
    def get_infos(self, indices: int) -> Mapping[str, Any]: ...


def step_flags(episode: Any, key: str) -> list[bool] | None:
    """The per-step flag ``key`` (``LENGTH_CUT``, ``PROMPT_CUT``) of a single-agent (or agent's)
    episode, or None when its steps carry none (recorded before the flags, or not by the module)."""
    if key not in episode.extra_model_outputs:
        return None
    return [bool(flag) for flag in episode.get_extra_model_outputs(key)]


def rewarded_validity(episode: Any) -> list[bool]:
    """Each step's validity as the reward's invalid-action penalty reads it: the env's
    ``is_action_valid``, and not length-cut (no action can be read reliably from a cut answer;
    docs/models.md, "Length-cut responses")."""
    infos = list(episode.get_infos())[1:]
    cut = step_flags(episode, LENGTH_CUT) or [False] * len(infos)
    return [bool(info["is_action_valid"]) and not c for info, c in zip(infos, cut, strict=True)]


def group_id_of(episode: _Episode) -> str:
    """The rollout-group id the env runner stamped into the episode's reset info (of a multi-agent
    episode: into each agent's first info)."""
    agent_episodes = getattr(episode, "agent_episodes", None)
    if agent_episodes is not None:
        episode = next(iter(agent_episodes.values()))
    return episode.get_infos(0)[GROUP_ID]

"""The step-wise bookkeeping class of bugs, end to end (issue 62, item 6): in ``Algorithm.train()``
every step row's advantage reaches exactly that step's response tokens in the loss (no turn masked
to 0, none counted twice), and the optimiser steps are as many as the config's minibatches.

Peers shipped this class silently (SkyRL #1492: earlier turns' advantages masked to 0). The hooks
record the episodes the advantage connector receives and the rows each loss call receives; the
expected per-token advantages are computed here by hand from the episodes' rewards, validity and
observations, with the formulas of the docs, never by the package's estimators:

- GRPO (the default run): each row's episode score (the total reward less the row's invalid-action
  penalty, which a length-cut turn gets too) normalised over its rollout group's rows with the
  unbiased std (docs/hgpo_algorithm.md §1.1, §2);
- GiGPO: GRPO's term plus the step term, the discounted return normalised over the rows of its
  group with the same anchor observation (§3);
- HGPO: the weighted items of the nested history groups, population std, exact-zero items dropped
  (§4.2-§4.4);
- HiPER: HAE's three advantages from the critic's values that the connector read, standardised per
  type over the batch and put on the switch, subgoal and action blocks (docs/hiper.md §HAE);
- a Dr. MAS team (one tiny LLM per role): agent-wise GRPO, each turn's team outcome less its own
  penalty, normalised over its agent's turns in its group (docs/drmas.md), every module stepping
  through its own rows.

GRPO runs by default; the others are ``slow`` (one ``train()`` each, ~30-60 s on 2 cores).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from helpers import MICRO, TINY_MODEL, keychest_config

from envs.keychest.env import COMMANDS, NOTHING_HAPPENS, PLAN_EXECUTE_BLOCKS, TAKE_KEY, KeyChestEnv
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.algorithms.hiper.hiper import HiPERConfig
from hgpo_rllib.algorithms.torch.text_agent_torch_learner import TextAgentTorchLearner, loss_mask
from hgpo_rllib.columns import (
    ADVANTAGES,
    LENGTH_CUT,
    OLD_VALUES,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_IDS,
    RESP_MASK,
    SWITCH_TEXT,
    TURN,
    VALUE_POSITIONS,
    group_id_of,
)
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages
from hgpo_rllib.connectors.learner.hae_advantages import HAEAdvantages
from hgpo_rllib.experiments.teams import role_module

pytestmark = pytest.mark.usefixtures("ray_session")

INVALID_PENALTY = 0.1  # the default invalid_action_penalty
EPSILON = 1e-6  # GRPO's, GiGPO's and HGPO's
GAMMA = 0.95
MINIBATCH = 10


@dataclass
class Step:
    """One turn of an episode as the hand computation reads it (an agent's turn in a team)."""

    module: str
    agent: str
    group: str
    traj: str
    t: int  # the turn's index in its episode (a team: the team turn at which the agent acted)
    obs: str  # the anchor observation acted on
    reward: float
    penalised: bool  # invalid, or length-cut
    prompt: tuple[int, ...]
    response: tuple[int, ...]  # the valid response tokens
    info: dict[str, Any]  # the info of the observation after the turn (validity, switch text)


def steps_of(episode: Any, module: str = "default_policy", agent: str = "", traj: str = "") -> list[Step]:
    infos = list(episode.get_infos())
    cut = episode.get_extra_model_outputs(LENGTH_CUT) if LENGTH_CUT in episode.extra_model_outputs else None
    prompts = episode.get_extra_model_outputs(PROMPT_IDS)
    masks = episode.get_extra_model_outputs(RESP_MASK)
    steps = []
    for t, (action, reward) in enumerate(zip(episode.get_actions(), episode.get_rewards(), strict=True)):
        response = np.asarray(action)[np.asarray(masks[t]).astype(bool)]
        steps.append(
            Step(
                module=module,
                agent=agent,
                group=group_id_of(episode),
                traj=traj or episode.id_,
                t=t,
                obs=episode.get_observations()[t],
                reward=float(reward),
                penalised=not infos[t + 1]["is_action_valid"] or bool(cut is not None and cut[t]),
                prompt=tuple(int(x) for x in prompts[t]),
                response=tuple(int(x) for x in response),
                info=infos[t + 1],
            )
        )
    return steps


def by(key: Callable[[Step], Any], steps: Sequence[Step]) -> dict[Any, list[int]]:
    """Row indices of ``steps`` per ``key``."""
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, step in enumerate(steps):
        groups[key(step)].append(i)
    return groups


def grpo_normalised(values: np.ndarray, keys: dict[Any, list[int]]) -> np.ndarray:
    """(v - mean) / (unbiased std + eps) within each key's rows; a row alone: mean 0, std 1."""
    out = np.zeros(len(values))
    for rows in keys.values():
        members = values[rows]
        mean, std = (members.mean(), members.std(ddof=1)) if len(rows) > 1 else (0.0, 1.0)
        out[rows] = (members - mean) / (std + EPSILON)
    return out


def scores(steps: Sequence[Step]) -> np.ndarray:
    """Each row's episode score: its trajectory's total reward less its own penalty (§1.1)."""
    totals = {traj: sum(steps[i].reward for i in rows) for traj, rows in by(lambda s: s.traj, steps).items()}
    return np.asarray([totals[s.traj] - INVALID_PENALTY * s.penalised for s in steps])


def returns(steps: Sequence[Step]) -> np.ndarray:
    """R_t = sum_{j >= t} gamma^(j - t) r_j, less the row's own penalty after discounting (§1.1, Q6)."""
    out = np.zeros(len(steps))
    for rows in by(lambda s: s.traj, steps).values():
        rows = sorted(rows, key=lambda i: steps[i].t)
        later = 0.0
        for i in reversed(rows):
            later = steps[i].reward + GAMMA * later
            out[i] = later - INVALID_PENALTY * steps[i].penalised
    return out


# ----------------------------------------------------------------------- the estimators, by hand
def grpo(steps: Sequence[Step]) -> np.ndarray:
    return grpo_normalised(scores(steps), by(lambda s: s.group, steps))


def gigpo(steps: Sequence[Step]) -> np.ndarray:
    """The episode term plus w = 1 times the step term over (group, anchor observation) (§3)."""
    step_term = np.zeros(len(steps))
    for rows in by(lambda s: (s.group, s.obs), steps).values():
        if len(rows) > 1:
            r = returns(steps)[rows]
            step_term[rows] = (r - r.mean()) / (r.std(ddof=1) + EPSILON)
    return grpo(steps) + step_term


def hgpo(steps: Sequence[Step], history_length: int = 2, alpha: float = 1.0) -> np.ndarray:
    """§4.4's plain loop: levels d = 1 .. min(K + 1, t + 1) keyed by the last d observations of the
    trajectory; items (R - mean) / (population std + eps) of groups of 2 or more, exact zeros
    dropped; A = sum(L^alpha a) / (sum(L^alpha) + eps) with L = d + 1."""
    r = returns(steps)
    obs = {(s.traj, s.t): s.obs for s in steps}
    members: dict[tuple, list[int]] = defaultdict(list)
    for i, s in enumerate(steps):
        for d in range(1, min(history_length + 1, s.t + 1) + 1):
            key = tuple(obs[(s.traj, t)] for t in range(s.t - d + 1, s.t + 1))
            members[(s.group, d, key)].append(i)
    items: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (_, d, _), rows in members.items():
        if len(rows) < 2:
            continue
        exact = [Fraction(float(x)) for x in r[rows]]
        mean = sum(exact) / len(exact)
        std = float(np.std(r[rows]))
        for i, x in zip(rows, exact, strict=True):
            if x != mean:
                items[i].append((d, float(x - mean) / (std + EPSILON)))
    out = np.zeros(len(steps))
    for i, its in items.items():
        weights = [(d + 1) ** alpha for d, _ in its]
        out[i] = sum(w * a for w, (_, a) in zip(weights, its, strict=True)) / (sum(weights) + EPSILON)
    return out


def agent_wise_grpo(steps: Sequence[Step]) -> np.ndarray:
    """Dr. MAS: r_i = team outcome - penalty of turn i, normalised over the (group, agent) turns."""
    outcome = {
        key: sum(steps[i].reward for i in rows)
        for key, rows in by(lambda s: (s.traj, s.agent), steps).items()
    }
    turn_rewards = np.asarray([outcome[(s.traj, s.agent)] - INVALID_PENALTY * s.penalised for s in steps])
    return grpo_normalised(turn_rewards, by(lambda s: (s.group, s.agent), steps))


def whole_response(advantages: np.ndarray, steps: Sequence[Step]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each row's advantage on every response token, all of them trained."""
    return [
        (np.full(len(s.response), a), np.ones(len(s.response), dtype=bool))
        for a, s in zip(advantages, steps, strict=True)
    ]


# ------------------------------------------------------------------------------- HiPER by hand
HAE = {"gamma": 0.9, "lam_turn": 0.8, "lam_seg": 0.7, "keep_penalty": -0.3, "keep_consistency_penalty": -0.2}


def block_spans(pieces: Sequence[str]) -> dict[str, tuple[int, int] | None]:
    """Token ranges of the first ``<tag>...</tag>`` of each block, tags included; a token is in a
    span when any of its characters is (docs/hiper.md §Token assignment)."""
    text, starts = "".join(pieces), list(np.cumsum([0, *map(len, pieces)])[:-1])
    spans: dict[str, tuple[int, int] | None] = {}
    for tag in ("switch", "subgoal", "action"):
        begin = text.find(f"<{tag}>")
        close = text.find(f"</{tag}>", begin + len(tag) + 2) if begin >= 0 else -1
        if close < 0:
            spans[tag] = None
            continue
        end = close + len(tag) + 3
        tokens = [i for i, s in enumerate(starts) if s < end and s + len(pieces[i]) > begin]
        spans[tag] = (tokens[0], tokens[-1] + 1)
    return spans


def is_switch(text: str | None) -> bool:
    """HAE's reading (§Switch parsing): missing, empty or any case of KEEP is KEEP, else SWITCH."""
    return bool(text and text.strip()) and text.strip().upper() != "KEEP"


def hiper(
    steps: Sequence[Step], spans: list[dict[str, Any]], values: np.ndarray, terminated: dict[str, bool]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """HAE (docs/hiper.md §Rewards to §Token assignment) with the critic's values V_L, V_H, V_T."""
    gamma, lam_turn, lam_seg = HAE["gamma"], HAE["lam_turn"], HAE["lam_seg"]
    a_low, a_high, a_term = (np.zeros(len(steps)) for _ in range(3))
    starts = np.zeros(len(steps), dtype=bool)
    for rows in by(lambda s: s.traj, steps).values():
        rows = sorted(rows, key=lambda i: steps[i].t)
        n_turns = len(rows)
        switch = [is_switch(steps[i].info[SWITCH_TEXT]) for i in rows]
        subgoal = [
            None if spans[i]["subgoal"] is None else steps[i].response[slice(*spans[i]["subgoal"])]
            for i in rows
        ]
        r = []
        for t, i in enumerate(rows):
            reward = steps[i].reward - INVALID_PENALTY * steps[i].penalised
            if not switch[t]:
                reward += HAE["keep_penalty"] / n_turns
                both = t >= 1 and subgoal[t] is not None and subgoal[t - 1] is not None
                if both and subgoal[t] != subgoal[t - 1]:
                    reward += HAE["keep_consistency_penalty"]
            r.append(reward)
        opens = [0] + [t for t in range(1, n_turns) if switch[t]]
        ends = [s - 1 for s in opens[1:]] + [n_turns - 1]
        v_low, v_high, v_term = (values[rows, head] for head in range(3))
        truncated_end = not terminated[steps[rows[0]].traj]
        boot = []
        for k, (s, e) in enumerate(zip(opens, ends, strict=True)):
            if k < len(opens) - 1:
                boot.append(v_high[opens[k + 1]])
            else:
                boot.append(v_high[s] if truncated_end else 0.0)
            following = 0.0
            for t in range(e, s - 1, -1):
                if t < e:
                    v_next = v_low[t + 1]
                elif k < len(opens) - 1:
                    v_next = v_high[opens[k + 1]]
                else:
                    v_next = v_low[t] if truncated_end else 0.0
                following = r[t] + gamma * v_next - v_low[t] + gamma * lam_turn * following
                a_low[rows[t]] = following
                to_end = sum(gamma ** (j - t) * r[j] for j in range(t, e + 1))
                a_term[rows[t]] = to_end + gamma ** (e - t + 1) * boot[k] - v_term[t]
        later = 0.0
        for k in reversed(range(len(opens))):
            s, e = opens[k], ends[k]
            n = e - s + 1
            segment = sum(gamma ** (j - s) * r[j] for j in range(s, e + 1))
            later = segment + gamma**n * boot[k] - v_high[s] + gamma**n * lam_seg * later
            a_high[rows[s]] = later
            starts[rows[s]] = True

    def standardised(a: np.ndarray, carriers: np.ndarray) -> np.ndarray:
        out, members = a.copy(), a[carriers]
        if len(members) and members.max() != members.min():
            out[carriers] = (members - members.mean()) / (members.std() + 1e-8)
        elif len(members):
            out[carriers] = 0.0
        return out

    has = {tag: np.asarray([s[tag] is not None for s in spans]) for tag in ("switch", "subgoal")}
    a_low = standardised(a_low, np.ones(len(steps), dtype=bool))
    a_high = standardised(a_high, starts & has["subgoal"])
    a_term = standardised(a_term, has["switch"])
    expected = []
    for i, (s, span) in enumerate(zip(steps, spans, strict=True)):
        advantage, trained = np.zeros(len(s.response)), np.zeros(len(s.response), dtype=bool)
        for block, value in (
            (span["action"] or (0, len(s.response)), a_low[i]),
            (span["switch"], a_term[i]),
            (span["subgoal"] if starts[i] else None, a_high[i]),
        ):
            if block is not None:
                advantage[block[0] : block[1]] += value
                trained[block[0] : block[1]] = True
        expected.append((advantage * trained, trained))
    return expected


# ------------------------------------------------------------------------------------ the cases
class KeyPayingKeyChest(KeyChestEnv):
    """KeyChest that also pays 1 for taking the key: a reward the tiny random policy earns within one
    iteration (a win, 10, is rare), so that returns differ within groups and discounting shows."""

    def _execute(self, command: str) -> Any:
        observation = super()._execute(command)
        if command == TAKE_KEY and observation.text != NOTHING_HAPPENS:
            return dataclasses.replace(observation, reward=observation.reward + 1.0)
        return observation


def grpo_family(estimator: str) -> Any:
    """KeyChest with 2 rooms, answers restricted to admissible commands (one token each), up to 3 of
    them per answer: valid and invalid turns, rewards, traps and cut episodes in one batch."""
    return (
        keychest_config(
            remote_runners=0,
            estimator=estimator,
            group_size=4,
            max_new_tokens=3,
            minibatch_size=MINIBATCH,
            micro_batch_size=5,
            gamma=GAMMA,
            adv_mode="mean_std_norm",
            history_length=2,
            length_weight_alpha=1.0,
            step_advantage_w=1.0,
        )
        .environment(f"{__name__}:KeyPayingKeyChest", env_config={"max_steps": 6, "num_rooms": 2})
        .env_runners(num_envs_per_env_runner=4)
        .rl_module(
            model_config={**TINY_MODEL, "action_vocabulary": list(COMMANDS), "constrain_to_admissible": True}
        )
    )


def hiper_config() -> Any:
    return (
        HiPERConfig()
        .environment(
            f"{__name__}:KeyPayingKeyChest",
            env_config={"max_steps": 6, "num_rooms": 2, "answer_format": "plan_execute"},
        )
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, create_local_env_runner=True)
        .rl_module(
            model_config={
                **TINY_MODEL,
                "critic_tiny_model": MICRO,
                "action_vocabulary": list(PLAN_EXECUTE_BLOCKS),  # every block one token
                "constrain_to_admissible": True,
            }
        )
        .training(
            groups_per_iteration=12,
            max_new_tokens=4,
            max_prompt_tokens=200,
            minibatch_size=MINIBATCH,
            micro_batch_size=5,
            lr=1e-3,
            critic_lr=1e-3,
            bootstrap_truncated=True,
            keep_penalty_mode="normalized",
            keep_consistency_requires_both=True,
            norm_adv=True,
            **HAE,
        )
        .debugging(seed=0)
    )


def team_config() -> Any:
    return (
        HGPOConfig()
        .environment("keychest_team", env_config={"max_steps": 4})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, create_local_env_runner=True)
        .multi_agent(
            policies={"planner", "executor"}, policy_mapping_fn=functools.partial(role_module, False)
        )
        .rl_module(model_config=TINY_MODEL)
        .training(
            estimator="grpo",
            normalize_by="agent",
            adv_mode="mean_std_norm",
            group_size=2,
            groups_per_iteration=3,
            max_new_tokens=8,
            max_prompt_tokens=160,
            minibatch_size=MINIBATCH,
            micro_batch_size=5,
            lr=1e-3,
        )
        .debugging(seed=0)
    )


@dataclass(frozen=True)
class Run:
    """What one ``train()`` gave the hand computation."""

    steps: list[Step]  # every turn, in the advantage connector's row order
    terminated: dict[str, bool]  # per trajectory: terminated, not truncated
    batches: list[dict[str, Any]]  # what the advantage connector returned
    algo: Any


@dataclass(frozen=True)
class Case:
    config: Callable[[], Any]
    connector: type
    #: Per row: the advantage of each response token and which response tokens are trained.
    expected: Callable[[Run], list[tuple[np.ndarray, np.ndarray]]]


def whole_responses_of(estimator: Callable[[Sequence[Step]], np.ndarray]) -> Callable[[Run], list[Any]]:
    return lambda run: whole_response(estimator(run.steps), run.steps)


def hiper_expected(run: Run) -> list[Any]:
    steps, (batch,) = run.steps, run.batches
    rows = batch["default_policy"]
    tokenizer = run.algo.env_runner.module.tokenizer
    spans = [block_spans([tokenizer.decode([t]) for t in s.response]) for s in steps]
    starts = [s.t == 0 or is_switch(s.info[SWITCH_TEXT]) for s in steps]
    # The critic's values are read where docs/hiper.md §Critic says: V_L after the subgoal block (else
    # after the switch block, else 0; at most the last token), V_H at 0 on segment starts, V_T at 0.
    low = [(span["subgoal"] or span["switch"] or (0, 0))[1] for span in spans]
    positions = [
        [min(p, len(s.response) - 1), 0 if start else -1, 0]
        for p, s, start in zip(low, steps, starts, strict=True)
    ]
    assert rows[VALUE_POSITIONS].tolist() == positions
    assert any(s is not None for span in spans for s in span.values())  # blocks were written
    return hiper(steps, spans, rows[OLD_VALUES].astype(np.float64), run.terminated)


CASES = {
    "GRPO": Case(lambda: grpo_family("grpo"), GroupAdvantages, whole_responses_of(grpo)),
    "GiGPO": Case(lambda: grpo_family("gigpo"), GroupAdvantages, whole_responses_of(gigpo)),
    "HGPO": Case(lambda: grpo_family("hgpo"), GroupAdvantages, whole_responses_of(hgpo)),
    "HiPER": Case(hiper_config, HAEAdvantages, hiper_expected),
    "Dr. MAS team": Case(team_config, GroupAdvantages, whole_responses_of(agent_wise_grpo)),
}


def episode_steps(episodes: Sequence[Any]) -> tuple[list[Step], dict[str, bool]]:
    """Every turn of ``episodes`` in the connector's row order (a team: agent by agent), and whether
    each trajectory was terminated (not truncated)."""
    steps, terminated = [], {}
    for episode in episodes:
        if hasattr(episode, "agent_episodes"):  # a team: each agent's turns, agents in name order
            for agent in sorted(episode.agent_episodes.values(), key=lambda a: str(a.agent_id)):
                turns = steps_of(agent, str(agent.module_id), str(agent.agent_id), episode.id_)
                for step, turn in zip(turns, agent.get_extra_model_outputs(TURN), strict=True):
                    step.t = int(turn)
                steps += turns
        else:
            steps += steps_of(episode)
        terminated[episode.id_] = bool(episode.is_terminated)
    return steps, terminated


@pytest.mark.parametrize(
    "name", ["GRPO", *(pytest.param(name, marks=pytest.mark.slow) for name in list(CASES)[1:])]
)
def test_each_step_row_gets_its_advantage_on_exactly_its_tokens(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    episodes: list[Any] = []
    batches: list[dict[str, Any]] = []
    losses: list[tuple[str, dict[str, np.ndarray]]] = []
    advantage_call = case.connector.__call__
    loss_call = TextAgentTorchLearner.compute_loss_for_module

    def record_episodes(self: Any, **kwargs: Any) -> Any:
        episodes.extend(kwargs["episodes"])
        batch = advantage_call(self, **kwargs)
        batches.append(dict(batch))
        return batch

    def record_loss(self: Any, **kwargs: Any) -> Any:
        batch = kwargs["batch"]
        columns = {k: batch[k] for k in (ADVANTAGES, PROMPT_IDS, PROMPT_MASK, RESP_IDS, RESP_MASK)}
        columns = {k: v.detach().cpu().numpy() for k, v in {**columns, "loss": loss_mask(batch)}.items()}
        losses.append((kwargs["module_id"], columns))
        return loss_call(self, **kwargs)

    monkeypatch.setattr(case.connector, "__call__", record_episodes)
    monkeypatch.setattr(TextAgentTorchLearner, "compute_loss_for_module", record_loss)
    config = case.config()
    algo = config.build_algo()
    try:
        result = algo.train()
        steps, terminated = episode_steps(episodes)
        expected_tokens = case.expected(Run(steps, terminated, batches, algo))
    finally:
        algo.stop()

    seen: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for module_id, batch in losses:
        for i in range(len(batch[ADVANTAGES])):
            response_tokens = batch[RESP_MASK][i].astype(bool)
            trained = batch["loss"][i].astype(bool)
            assert not (trained & ~response_tokens).any()  # no loss outside the response
            advantage = np.broadcast_to(batch[ADVANTAGES][i], response_tokens.shape)
            prompt = batch[PROMPT_IDS][i][batch[PROMPT_MASK][i].astype(bool)]
            key = (module_id, tuple(prompt.tolist()), tuple(batch[RESP_IDS][i][response_tokens].tolist()))
            seen[key].append((advantage[response_tokens].astype(np.float64), trained[response_tokens]))
    expected: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for step, tokens in zip(steps, expected_tokens, strict=True):
        expected[(step.module, step.prompt, step.response)].append(tokens)

    # Every step row reaches the loss once, with its hand-computed advantage on exactly its tokens.
    assert seen.keys() == expected.keys()
    for key, want in expected.items():
        got = seen[key]
        assert len(got) == len(want), f"{len(want)} row(s) of {key} reached the loss {len(got)} times"
        for (got_a, got_mask), (want_a, want_mask) in zip(
            sorted(got, key=lambda x: tuple(np.round(x[0], 4))),
            sorted(want, key=lambda x: tuple(np.round(x[0], 4))),
            strict=True,
        ):
            assert np.array_equal(got_mask, want_mask), (key[0], key[2], got_mask, want_mask)
            where = f"{key[0]}, response {key[2]}"
            np.testing.assert_allclose(got_a, want_a, rtol=1e-5, atol=1e-5, err_msg=where)
    assert any(a.any() for tokens in expected.values() for a, _ in tokens)  # else a zeroed turn goes unseen

    # Each module steps through its own rows once, in minibatches of at most minibatch_size rows.
    for module_id, module_rows in by(lambda s: s.module, steps).items():
        learner = result["learners"][module_id]
        for agent, agent_rows in by(lambda s: s.agent, [steps[i] for i in module_rows]).items():
            logged = learner.get(f"agent_{agent}_num_step_rows" if agent else "num_step_rows")
            assert logged in (None, len(agent_rows))  # HiPER's connector logs no row count
        assert learner["num_optimizer_steps"] == math.ceil(len(module_rows) / MINIBATCH) * config.num_epochs

"""Tests of HiPER's Hierarchical Advantage Estimation (``hae``, ``docs/hiper.md`` §HAE).

- agreement with the plain-Python transcription ``reference_hae`` on large shuffled random
  batches (seeded numpy) and on hypothesis-drawn batches;
- properties: Monte-Carlo form of the low level at gamma = lam_turn = 1, the flat (no switch,
  zero values) case, row-permutation equivariance, independence of trajectories, one-turn
  trajectories, segment starts, ret = adv + value, one-step SMDP TD at lam_seg = 0, telescoping
  at lam_seg = 1, one-step TD at lam_turn = 0, values_high read at segment starts only;
- the truncation self-bootstrap quirk and switch parsing quirk with hand-computed numbers;
- the shaped rewards of §Rewards, batch standardisation, and input validation.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, NamedTuple

import numpy as np
import pytest
from hae_reference import reference_hae, reference_step_rewards
from hypothesis import given, settings
from hypothesis import strategies as st

from hgpo_rllib.advantages import hgpo_advantages
from hgpo_rllib.advantages.hae import (
    HAEResult,
    hae_advantages,
    hae_step_rewards,
    parse_switch,
    segment_group_advantages,
    standardize,
)

SETTINGS = settings(max_examples=100, deadline=None)
TOL = 1e-10
FIELDS = [f.name for f in fields(HAEResult)]


class Batch(NamedTuple):
    traj_ids: list[str]
    step_idx: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    switches: np.ndarray
    values_low: np.ndarray
    values_high: np.ndarray
    values_term: np.ndarray

    def permuted(self, perm: np.ndarray) -> Batch:
        return Batch([self.traj_ids[i] for i in perm], *(np.asarray(col)[perm] for col in self[1:]))


def _make_batch(rows: list[tuple[Any, ...]]) -> Batch:
    columns = list(zip(*rows, strict=True))
    return Batch(
        list(columns[0]),
        np.array(columns[1], dtype=np.int64),
        np.array(columns[2], dtype=np.float64),
        np.array(columns[3], dtype=bool),
        np.array(columns[4], dtype=bool),
        *(np.array(col, dtype=np.float64) for col in columns[5:]),
    )


def random_batch(rng: np.random.Generator, n_traj: int, max_len: int = 12, p_switch: float = 0.3) -> Batch:
    """Shuffled rows of ``n_traj`` trajectories of random length, switches and values; each
    trajectory is terminated or truncated at its last turn."""
    rows = []
    for traj in range(n_traj):
        length = int(rng.integers(1, max_len + 1))
        terminated = bool(rng.random() < 0.5)
        for t in range(length):
            rows.append(
                (
                    f"traj-{traj}",
                    t,
                    float(rng.normal()),
                    terminated and t == length - 1,
                    bool(rng.random() < p_switch),
                    float(rng.normal()),
                    float(rng.normal()),
                    float(rng.normal()),
                )
            )
    perm = rng.permutation(len(rows))
    return _make_batch([rows[i] for i in perm])


def run(batch: Batch, **kwargs: Any) -> HAEResult:
    return hae_advantages(*batch, **kwargs)


def assert_matches_reference(batch: Batch, **kwargs: Any) -> None:
    got = run(batch, **kwargs)
    want = reference_hae(*(list(col) for col in batch), **kwargs)
    for name in FIELDS:
        if name == "segment_start":
            np.testing.assert_array_equal(got.segment_start, want[name])
        else:
            np.testing.assert_allclose(getattr(got, name), want[name], rtol=0, atol=TOL, err_msg=name)


def by_traj(batch: Batch) -> dict[str, np.ndarray]:
    """Input rows of each trajectory in step order."""
    out: dict[str, np.ndarray] = {}
    for traj in dict.fromkeys(batch.traj_ids):
        rows = np.flatnonzero(np.array(batch.traj_ids) == traj)
        out[traj] = rows[np.argsort(batch.step_idx[rows])]
    return out


unit = st.floats(0.05, 1.0)
value = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False)


@st.composite
def batches(draw: Any, max_trajs: int = 5, max_len: int = 12) -> Batch:
    """Shapes, switches, terminations and row order from hypothesis; the numbers (rewards and
    values, uniform in [-5, 5]) from a drawn numpy seed, which keeps drawing cheap."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = []
    for traj in range(draw(st.integers(1, max_trajs))):
        length = draw(st.integers(1, max_len))
        terminated = draw(st.booleans())
        switches = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        numbers = rng.uniform(-5.0, 5.0, size=(length, 4)).tolist()
        for t in range(length):
            r, v_low, v_high, v_term = numbers[t]
            rows.append(
                (f"t{traj}", t, r, terminated and t == length - 1, switches[t], v_low, v_high, v_term)
            )
    return _make_batch(draw(st.permutations(rows)))


hae_options = st.fixed_dictionaries(
    {"gamma": unit, "lam_turn": unit, "lam_seg": unit, "bootstrap_truncated": st.booleans()}
)


# ----------------------------------------------------------------------------- vs. reference


@pytest.mark.parametrize("seed", range(20))
def test_matches_reference_on_large_shuffled_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n_traj=60, p_switch=float(rng.uniform(0.0, 0.8)))
    options = {
        "gamma": float(rng.uniform(0.01, 1.0)) if seed % 4 else 1.0,
        "lam_turn": float(rng.uniform(0.01, 1.0)) if seed % 3 else 1.0,
        "lam_seg": float(rng.uniform(0.01, 1.0)),
        "bootstrap_truncated": bool(seed % 2),
    }
    assert_matches_reference(batch, **options)


@SETTINGS
@given(batch=batches(), options=hae_options)
def test_matches_reference_hypothesis(batch: Batch, options: dict[str, Any]) -> None:
    assert_matches_reference(batch, **options)


def test_integer_trajectory_ids_match_string_ids() -> None:
    batch = random_batch(np.random.default_rng(7), n_traj=10)
    codes = np.array([int(traj.split("-")[1]) * 7 + 3 for traj in batch.traj_ids])
    got = run(batch._replace(traj_ids=codes), lam_seg=0.7)
    want = run(batch, lam_seg=0.7)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


# ----------------------------------------------------------------------------- properties


def _monte_carlo_low(batch: Batch, rows: np.ndarray, bootstrap_truncated: bool) -> np.ndarray:
    """Sum of rewards to the segment end + bootstrap - V_L, per turn, gamma = lam_turn = 1."""
    T = len(rows)
    start = [t == 0 or bool(batch.switches[rows[t]]) for t in range(T)]
    out = np.zeros(T)
    for t in range(T):
        e = t
        while e + 1 < T and not start[e + 1]:
            e += 1
        total = sum(batch.rewards[rows[j]] for j in range(t, e + 1))
        if e + 1 < T:
            total += batch.values_high[rows[e + 1]]
        elif not batch.dones[rows[e]] and bootstrap_truncated:
            total += batch.values_low[rows[e]]
        out[t] = total - batch.values_low[rows[t]]
    return out


@SETTINGS
@given(batch=batches(), lam_seg=unit, bootstrap_truncated=st.booleans())
def test_low_level_is_monte_carlo_within_segment_at_gamma_one(
    batch: Batch, lam_seg: float, bootstrap_truncated: bool
) -> None:
    res = run(batch, gamma=1.0, lam_turn=1.0, lam_seg=lam_seg, bootstrap_truncated=bootstrap_truncated)
    for rows in by_traj(batch).values():
        np.testing.assert_allclose(
            res.adv_low[rows], _monte_carlo_low(batch, rows, bootstrap_truncated), rtol=0, atol=TOL
        )


@SETTINGS
@given(batch=batches(), lam_seg=unit, bootstrap_truncated=st.booleans())
def test_flat_trajectory_with_zero_values_gives_returns(
    batch: Batch, lam_seg: float, bootstrap_truncated: bool
) -> None:
    """No switch, a zero critic and gamma = lam_turn = 1: the low level and the termination
    return are the undiscounted return-to-go, and the single segment's A_H the trajectory
    return (for any lam_seg)."""
    zeros = np.zeros(len(batch.rewards))
    flat = batch._replace(switches=zeros.astype(bool), values_low=zeros, values_high=zeros, values_term=zeros)
    res = run(flat, gamma=1.0, lam_turn=1.0, lam_seg=lam_seg, bootstrap_truncated=bootstrap_truncated)
    for rows in by_traj(flat).values():
        to_go = np.cumsum(flat.rewards[rows][::-1])[::-1]
        np.testing.assert_allclose(res.adv_low[rows], to_go, rtol=0, atol=TOL)
        np.testing.assert_allclose(res.adv_term[rows], to_go, rtol=0, atol=TOL)
        np.testing.assert_allclose(res.ret_term[rows], to_go, rtol=0, atol=TOL)
        assert res.adv_high[rows[0]] == pytest.approx(flat.rewards[rows].sum(), abs=TOL)
        assert res.segment_start[rows].tolist() == [True] + [False] * (len(rows) - 1)
        assert not res.adv_high[rows[1:]].any()


@settings(max_examples=50, deadline=None)
@given(batch=batches(), options=hae_options, data=st.data())
def test_row_permutation_permutes_outputs(batch: Batch, options: dict[str, Any], data: st.DataObject) -> None:
    perm = np.array(data.draw(st.permutations(range(len(batch.rewards)))), dtype=np.int64)
    base = run(batch, **options)
    shuffled = run(batch.permuted(perm), **options)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(shuffled, name), getattr(base, name)[perm], err_msg=name)


@settings(max_examples=50, deadline=None)
@given(batch=batches(max_trajs=4), options=hae_options)
def test_trajectories_are_independent(batch: Batch, options: dict[str, Any]) -> None:
    together = run(batch, **options)
    for rows in by_traj(batch).values():
        alone = run(batch.permuted(rows), **options)
        for name in FIELDS:
            np.testing.assert_allclose(getattr(alone, name), getattr(together, name)[rows], rtol=0, atol=TOL)


@SETTINGS
@given(
    r=value,
    v_low=value,
    v_high=value,
    v_term=value,
    terminated=st.booleans(),
    switch=st.booleans(),
    options=hae_options,
)
def test_single_turn_trajectory(
    r: float,
    v_low: float,
    v_high: float,
    v_term: float,
    terminated: bool,
    switch: bool,
    options: dict[str, Any],
) -> None:
    res = hae_advantages(["x"], [0], [r], [terminated], [switch], [v_low], [v_high], [v_term], **options)
    gamma = options["gamma"]
    boot_low = 0.0 if terminated or not options["bootstrap_truncated"] else v_low
    boot_high = 0.0 if terminated or not options["bootstrap_truncated"] else v_high
    assert res.segment_start.tolist() == [True]
    assert res.adv_low[0] == pytest.approx(r + gamma * boot_low - v_low, abs=TOL)
    assert res.adv_high[0] == pytest.approx(r + gamma * boot_high - v_high, abs=TOL)
    assert res.ret_term[0] == pytest.approx(r + gamma * boot_high, abs=TOL)
    assert res.adv_term[0] == pytest.approx(r + gamma * boot_high - v_term, abs=TOL)


@SETTINGS
@given(batch=batches(), options=hae_options)
def test_segment_starts_and_value_identities(batch: Batch, options: dict[str, Any]) -> None:
    res = run(batch, **options)
    expected_start = batch.switches | (batch.step_idx == 0)
    np.testing.assert_array_equal(res.segment_start, expected_start)
    np.testing.assert_allclose(res.ret_low - res.adv_low, batch.values_low, rtol=0, atol=TOL)
    np.testing.assert_allclose(res.ret_term - res.adv_term, batch.values_term, rtol=0, atol=TOL)
    start = res.segment_start
    np.testing.assert_allclose(res.ret_high[start] - res.adv_high[start], batch.values_high[start], atol=TOL)
    assert not res.adv_high[~start].any() and not res.ret_high[~start].any()
    for name in FIELDS:
        arr = getattr(res, name)
        assert arr.shape == (len(batch.rewards),)
        assert arr.dtype == (bool if name == "segment_start" else np.float64)
        assert np.isfinite(arr).all()


@SETTINGS
@given(batch=batches(), gamma=unit, lam_turn=unit, bootstrap_truncated=st.booleans())
def test_lam_seg_zero_is_one_step_smdp_td(
    batch: Batch, gamma: float, lam_turn: float, bootstrap_truncated: bool
) -> None:
    """A_H(k) = R_k + gamma^n_k * boot_k - V_H(s_k) = G_T(s_k) - V_H(s_k), checked by hand."""
    res = run(batch, gamma=gamma, lam_turn=lam_turn, lam_seg=0.0, bootstrap_truncated=bootstrap_truncated)
    start = res.segment_start
    np.testing.assert_allclose(res.adv_high[start], res.ret_term[start] - batch.values_high[start], atol=TOL)
    for rows in by_traj(batch).values():
        starts = [t for t in range(len(rows)) if start[rows[t]]] + [len(rows)]
        for k, (s, nxt) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
            seg_return = sum(gamma ** (j - s) * batch.rewards[rows[j]] for j in range(s, nxt))
            if k + 2 < len(starts):
                boot = batch.values_high[rows[nxt]]
            elif not batch.dones[rows[-1]] and bootstrap_truncated:
                boot = batch.values_high[rows[s]]
            else:
                boot = 0.0
            want = seg_return + gamma ** (nxt - s) * boot - batch.values_high[rows[s]]
            assert res.adv_high[rows[s]] == pytest.approx(want, abs=TOL)


@SETTINGS
@given(batch=batches(), bootstrap_truncated=st.booleans())
def test_lam_seg_one_telescopes_to_monte_carlo(batch: Batch, bootstrap_truncated: bool) -> None:
    """gamma = lam_seg = 1: the inner V_H cancel, A_H(k) = sum of rewards from s_k on + final
    bootstrap - V_H(s_k)."""
    res = run(batch, gamma=1.0, lam_turn=0.5, lam_seg=1.0, bootstrap_truncated=bootstrap_truncated)
    for rows in by_traj(batch).values():
        starts = [t for t in range(len(rows)) if res.segment_start[rows[t]]]
        tail = 0.0
        if not batch.dones[rows[-1]] and bootstrap_truncated:
            tail = batch.values_high[rows[starts[-1]]]
        for s in starts:
            want = batch.rewards[rows[s:]].sum() + tail - batch.values_high[rows[s]]
            assert res.adv_high[rows[s]] == pytest.approx(want, abs=TOL)


@SETTINGS
@given(batch=batches(), gamma=unit, bootstrap_truncated=st.booleans())
def test_lam_turn_zero_is_one_step_td(batch: Batch, gamma: float, bootstrap_truncated: bool) -> None:
    res = run(batch, gamma=gamma, lam_turn=0.0, lam_seg=0.5, bootstrap_truncated=bootstrap_truncated)
    for rows in by_traj(batch).values():
        T = len(rows)
        for t in range(T):
            if t + 1 < T:
                nxt = rows[t + 1]
                v_next = batch.values_high[nxt] if res.segment_start[nxt] else batch.values_low[nxt]
            elif not batch.dones[rows[t]] and bootstrap_truncated:
                v_next = batch.values_low[rows[t]]
            else:
                v_next = 0.0
            want = batch.rewards[rows[t]] + gamma * v_next - batch.values_low[rows[t]]
            assert res.adv_low[rows[t]] == pytest.approx(want, abs=TOL)


@SETTINGS
@given(batch=batches(), options=hae_options, junk=st.sampled_from([np.nan, np.inf, 1e6, -3.0]))
def test_values_high_read_only_at_segment_starts(batch: Batch, options: dict[str, Any], junk: float) -> None:
    start = batch.switches | (batch.step_idx == 0)
    noisy = batch._replace(values_high=np.where(start, batch.values_high, junk))
    base, got = run(batch, **options), run(noisy, **options)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(got, name), getattr(base, name), err_msg=name)


@SETTINGS
@given(batch=batches(), options=hae_options)
def test_switch_at_turn_zero_is_redundant(batch: Batch, options: dict[str, Any]) -> None:
    first = batch.step_idx == 0
    on, off = (
        batch._replace(switches=batch.switches | first),
        batch._replace(switches=batch.switches & ~first),
    )
    a, b = run(on, **options), run(off, **options)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_zero_inputs_give_exact_zeros() -> None:
    batch = random_batch(np.random.default_rng(3), n_traj=20)
    n = len(batch.rewards)
    zero = batch._replace(
        rewards=np.zeros(n), values_low=np.zeros(n), values_high=np.zeros(n), values_term=np.zeros(n)
    )
    res = run(zero, gamma=0.9, lam_turn=0.8, lam_seg=0.7)
    for name in FIELDS[:-1]:
        assert (getattr(res, name) == 0.0).all()


# ----------------------------------------------------------------------------- quirks by hand

# One trajectory, turns 0..2, SWITCH at turn 2: segments [0, 1] and [2, 2].
QUIRK = {
    "traj_ids": ["a", "a", "a"],
    "step_idx": [0, 1, 2],
    "rewards": [1.0, 0.0, 2.0],
    "switches": [False, False, True],
    "values_low": [0.5, 0.4, 0.3],
    "values_high": [1.0, 123.0, 2.0],  # 123 is on a non-start row and must be ignored
    "values_term": [0.1, 0.2, 0.3],
}
QUIRK_OPTIONS = {"gamma": 0.9, "lam_turn": 0.5, "lam_seg": 0.8}


def _quirk(dones: list[bool], bootstrap_truncated: bool, **overrides: Any) -> HAEResult:
    return hae_advantages(
        **{**QUIRK, **overrides}, dones=dones, **QUIRK_OPTIONS, bootstrap_truncated=bootstrap_truncated
    )


def test_quirk_truncation_self_bootstrap_by_hand() -> None:
    """Spec quirk 3: a truncated episode bootstraps its last turn on V_L(t) itself (low level)
    and its last segment on V_H of that segment's own start (high level, termination)."""
    res = _quirk([False, False, False], bootstrap_truncated=True)
    # low: t=2 delta = 2 + .9*V_L(2)=.27 - .3 = 1.97; t=1 bootstraps to V_H(2): 0 + 1.8 - .4 = 1.4;
    #      t=0: 1 + .9*.4 - .5 = .86, + .9*.5*1.4 = .63 -> 1.49
    np.testing.assert_allclose(res.adv_low, [1.49, 1.4, 1.97], atol=1e-12)
    np.testing.assert_allclose(res.ret_low, [1.99, 1.8, 2.27], atol=1e-12)
    # high: seg 1: 2 + .9*V_H(2) - V_H(2) = 1.8; seg 0: R=1, n=2: 1 + .81*2 - 1 = 1.62, + .81*.8*1.8
    np.testing.assert_allclose(res.adv_high, [1.62 + 0.81 * 0.8 * 1.8, 0.0, 1.8], atol=1e-12)
    np.testing.assert_allclose(res.ret_high, [2.62 + 0.81 * 0.8 * 1.8, 0.0, 3.8], atol=1e-12)
    # termination: G(2) = 2 + .9*2 = 3.8, G(1) = .9*2 = 1.8, G(0) = 1 + .81*2 = 2.62
    np.testing.assert_allclose(res.ret_term, [2.62, 1.8, 3.8], atol=1e-12)
    np.testing.assert_allclose(res.adv_term, [2.52, 1.6, 3.5], atol=1e-12)
    # The last turn's low-level bootstrap is V_L(2), not V_H(2): moving V_H(2) leaves it alone.
    moved = _quirk([False, False, False], bootstrap_truncated=True, values_high=[1.0, 0.0, 7.0])
    assert moved.adv_low[2] == pytest.approx(1.97, abs=1e-12)
    assert moved.adv_high[2] == pytest.approx(2.0 + 0.9 * 7.0 - 7.0, abs=1e-12)


@pytest.mark.parametrize("dones, bootstrap", [([False, False, False], False), ([False, False, True], True)])
def test_quirk_no_bootstrap_when_disabled_or_terminated(dones: list[bool], bootstrap: bool) -> None:
    """Without the truncation bootstrap (WebShop's setting) or on a real termination the last
    segment's end bootstraps on 0; the inner SMDP bootstrap to V_H(2) is unaffected."""
    res = _quirk(dones, bootstrap_truncated=bootstrap)
    np.testing.assert_allclose(res.adv_low, [1.49, 1.4, 1.7], atol=1e-12)
    np.testing.assert_allclose(res.adv_high, [1.62, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.ret_term, [2.62, 1.8, 2.0], atol=1e-12)


@pytest.mark.parametrize(
    "text, switch",
    [
        (None, False),
        ("", False),
        ("   \n", False),
        ("KEEP", False),
        ("keep", False),
        (" Keep \n", False),
        ("SWITCH", True),
        ("switch", True),
        ("KEEP.", True),
        ("KEEP SWITCH", True),
        ("KEPT", True),
        ("maybe", True),
        ("<switch>KEEP</switch>", True),
    ],
)
def test_quirk_parse_switch(text: str | None, switch: bool) -> None:
    """Spec quirk 6: HAE treats missing/empty as KEEP and any non-KEEP text as SWITCH, even
    text that the env's stricter check marks invalid."""
    assert parse_switch(text) is switch


def test_quirk_parse_switch_drives_segments() -> None:
    texts = [None, "KEEP", "CONTINUE", "", "switch", " keep "]
    switches = [parse_switch(text) for text in texts]
    res = hae_advantages(["t"] * 6, range(6), [0.0] * 6, [False] * 5 + [True], switches, *[[0.0] * 6] * 3)
    assert res.segment_start.tolist() == [True, False, True, False, True, False]


def test_parse_switch_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match="text"):
        parse_switch(1)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- step rewards

# Trajectory A (4 turns): SWITCH, KEEP (invalid, subgoal changed but a span empty), KEEP, SWITCH
# (subgoal changed, but on a SWITCH turn); trajectory B (1 turn): KEEP.
REWARD_ROWS = {
    "env_rewards": [0.0, 0.0, 0.0, 10.0, 0.0],
    "is_valid": [True, False, True, True, True],
    "switches": [True, False, False, True, False],
    "traj_ids": ["A", "A", "A", "A", "B"],
    "subgoal_changed": [False, True, False, True, False],
    "subgoals_nonempty": [True, False, True, True, True],
}


def test_step_rewards_normalized_keep_penalty() -> None:
    got = hae_step_rewards(**REWARD_ROWS)
    # A: T=4, -0.3/4 = -0.075 per KEEP turn; B: T=1, -0.3; -0.1 for the invalid turn.
    np.testing.assert_allclose(got, [0.0, -0.175, -0.075, 10.0, -0.3], atol=1e-12)


def test_step_rewards_fixed_keep_penalty() -> None:
    got = hae_step_rewards(**REWARD_ROWS, keep_penalty_mode="fixed")
    np.testing.assert_allclose(got, [0.0, -0.4, -0.3, 10.0, -0.3], atol=1e-12)


def test_step_rewards_consistency_penalty_requires_both() -> None:
    rows = {**REWARD_ROWS, "subgoals_nonempty": [True, True, True, True, True]}
    both_nonempty = hae_step_rewards(**rows)
    np.testing.assert_allclose(both_nonempty, [0.0, -0.475, -0.075, 10.0, -0.3], atol=1e-12)
    lenient = hae_step_rewards(**REWARD_ROWS, keep_consistency_requires_both=False)
    np.testing.assert_allclose(lenient, [0.0, -0.475, -0.075, 10.0, -0.3], atol=1e-12)


def test_step_rewards_invalid_penalty_and_signs() -> None:
    got = hae_step_rewards(
        **REWARD_ROWS,
        invalid_penalty=0.5,
        keep_penalty=0.0,
        keep_consistency_penalty=-1.0,
        keep_consistency_requires_both=False,
    )
    np.testing.assert_allclose(got, [0.0, -1.5, 0.0, 10.0, 0.0], atol=1e-12)


def test_step_rewards_turn_zero_has_no_consistency_penalty() -> None:
    rows = {**REWARD_ROWS, "subgoal_changed": [True, True, False, True, True]}
    with_steps = hae_step_rewards(**rows, keep_consistency_requires_both=False, step_idx=[0, 1, 2, 3, 0])
    np.testing.assert_allclose(with_steps, [0.0, -0.475, -0.075, 10.0, -0.3], atol=1e-12)
    with pytest.raises(ValueError, match="step_idx"):
        hae_step_rewards(**rows, step_idx=[0, 1, 3, 4, 0])


@SETTINGS
@given(data=st.data())
def test_step_rewards_match_reference(data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=5))
    traj_ids = data.draw(st.permutations([f"t{i}" for i, n in enumerate(lengths) for _ in range(n)]))
    n = len(traj_ids)
    flags = [data.draw(st.lists(st.booleans(), min_size=n, max_size=n)) for _ in range(4)]
    rewards = data.draw(st.lists(value, min_size=n, max_size=n))
    options = data.draw(
        st.fixed_dictionaries(
            {
                "invalid_penalty": st.floats(0, 1),
                "keep_penalty": st.floats(-4, 0),
                "keep_penalty_mode": st.sampled_from(["fixed", "normalized"]),
                "keep_consistency_penalty": st.floats(-1, 0),
                "keep_consistency_requires_both": st.booleans(),
            }
        )
    )
    got = hae_step_rewards(rewards, flags[0], flags[1], traj_ids, flags[2], flags[3], **options)
    want = reference_step_rewards(rewards, flags[0], flags[1], traj_ids, flags[2], flags[3], **options)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_step_rewards_validation() -> None:
    with pytest.raises(ValueError, match="keep_penalty_mode"):
        hae_step_rewards(**REWARD_ROWS, keep_penalty_mode="average")
    with pytest.raises(ValueError, match="is_valid has 4 rows"):
        hae_step_rewards(**{**REWARD_ROWS, "is_valid": [True] * 4})
    with pytest.raises(ValueError, match="env_rewards contains non-finite"):
        hae_step_rewards(**{**REWARD_ROWS, "env_rewards": [0.0, np.nan, 0.0, 0.0, 0.0]})
    with pytest.raises(ValueError, match="switches"):
        hae_step_rewards(**{**REWARD_ROWS, "switches": [0, 1, 2, 0, 0]})
    with pytest.raises(ValueError, match="keep_penalty"):
        hae_step_rewards(**REWARD_ROWS, keep_penalty=float("inf"))
    empty = hae_step_rewards([], [], [], [], [], [])
    assert empty.shape == (0,) and empty.dtype == np.float64


# ----------------------------------------------------------------------------- standardize


def test_standardize_by_hand() -> None:
    values = np.array([1.0, 5.0, 3.0, 7.0, 2.0])
    mask = np.array([True, False, True, False, True])
    got = standardize(values, mask)
    picked = np.array([1.0, 3.0, 2.0])
    want = (picked - 2.0) / (np.sqrt(2.0 / 3.0) + 1e-8)
    np.testing.assert_allclose(got[mask], want, rtol=1e-14)
    np.testing.assert_array_equal(got[~mask], values[~mask])
    assert values.tolist() == [1.0, 5.0, 3.0, 7.0, 2.0]  # input untouched


def test_standardize_degenerate() -> None:
    assert standardize([0.1, 0.1, 0.1, 9.0], [True, True, True, False]).tolist() == [0.0, 0.0, 0.0, 9.0]
    assert standardize([4.0], [True]).tolist() == [0.0]
    assert standardize([4.0, 5.0], [False, False]).tolist() == [4.0, 5.0]
    assert standardize([], []).shape == (0,)
    assert standardize([np.nan, 1.0, 2.0], [False, True, True])[1:].tolist() == pytest.approx([-1.0, 1.0])
    with pytest.raises(ValueError, match="values contains non-finite"):
        standardize([np.nan, 1.0], [True, True])
    with pytest.raises(ValueError, match="mask has 1 rows"):
        standardize([1.0, 2.0], [True])


@SETTINGS
@given(data=st.data())
def test_standardize_zero_mean_unit_std(data: st.DataObject) -> None:
    values = np.array(data.draw(st.lists(st.floats(-100, 100), min_size=2, max_size=40)))
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values))))
    got = standardize(values, mask)
    picked = got[mask]
    if mask.sum() and np.ptp(values[mask]) > 1.0:
        assert abs(picked.mean()) < 1e-9
        assert picked.std() == pytest.approx(1.0, rel=1e-6)


# ----------------------------------------------------------------------------- validation


def test_empty_batch() -> None:
    res = hae_advantages([], [], [], [], [], [], [], [])
    for name in FIELDS:
        arr = getattr(res, name)
        assert arr.shape == (0,)
        assert arr.dtype == (bool if name == "segment_start" else np.float64)


def _valid_columns() -> dict[str, Any]:
    return {
        "traj_ids": ["a", "a", "b"],
        "step_idx": [0, 1, 0],
        "rewards": [0.0, 1.0, 2.0],
        "dones": [False, True, False],
        "switches": [False, True, False],
        "values_low": [0.0, 0.0, 0.0],
        "values_high": [0.0, 0.0, 0.0],
        "values_term": [0.0, 0.0, 0.0],
    }


@pytest.mark.parametrize("name", list(_valid_columns())[1:])
def test_mismatched_lengths_name_the_argument(name: str) -> None:
    columns = _valid_columns()
    columns[name] = columns[name][:2]
    with pytest.raises(ValueError, match=f"^{name} has 2 rows"):
        hae_advantages(**columns)


@pytest.mark.parametrize("name", ["rewards", "values_low", "values_term"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_raise(name: str, bad: float) -> None:
    columns = _valid_columns()
    columns[name] = [0.0, bad, 0.0]
    with pytest.raises(ValueError, match=f"{name} contains non-finite"):
        hae_advantages(**columns)


def test_non_finite_values_high_at_segment_start_raises() -> None:
    columns = _valid_columns()
    columns["values_high"] = [0.0, np.nan, 0.0]  # row 1 is a SWITCH turn
    with pytest.raises(ValueError, match="values_high contains non-finite"):
        hae_advantages(**columns)


@pytest.mark.parametrize(
    "steps",
    [[1, 2, 0], [0, 2, 0], [0, 0, 0], [0, -1, 0], [0, 1, 1]],
    ids=["no-zero", "gap", "duplicate", "negative", "beyond"],
)
def test_steps_must_be_zero_to_t_minus_one(steps: list[int]) -> None:
    with pytest.raises(ValueError, match="step_idx"):
        hae_advantages(**{**_valid_columns(), "step_idx": steps})


def test_done_before_last_turn_raises() -> None:
    with pytest.raises(ValueError, match="dones: input row 0 is terminated"):
        hae_advantages(**{**_valid_columns(), "dones": [True, False, False]})


@pytest.mark.parametrize(
    "name, bad",
    [
        ("dones", [0, 2, 0]),
        ("switches", [0.0, 1.0, 0.0]),
        ("step_idx", [0.0, 1.0, 0.0]),
        ("rewards", [[1.0]] * 3),
    ],
)
def test_bad_dtypes_raise(name: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=name):
        hae_advantages(**{**_valid_columns(), name: bad})


@pytest.mark.parametrize("name", ["gamma", "lam_turn", "lam_seg"])
@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_parameters_raise(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match=name):
        hae_advantages(**_valid_columns(), **{name: bad})


def test_unhashable_trajectory_ids_raise() -> None:
    with pytest.raises(TypeError, match="traj_ids"):
        hae_advantages(**{**_valid_columns(), "traj_ids": [["a"], ["a"], ["b"]]})


# ----------------------------------------------------------------------------- critic-free high level


def test_segment_groups_by_hand() -> None:
    """K = 0, mean_norm: each segment start against the starts of its rollout group with the same
    observation (HGPO's single level, weight 2 / (2 + eps)); a start alone in its group gets 0."""
    rows = [  # (group, traj, step, obs, segment start, segment return)
        ("g", "a", 0, "hall", True, 3.0),
        ("g", "a", 1, "kitchen", False, np.nan),  # KEEP turn: its return is never read
        ("g", "a", 2, "kitchen", True, 2.0),
        ("g", "b", 0, "hall", True, 1.0),
        ("g", "b", 1, "kitchen", True, 0.0),
        ("g", "b", 2, "garden", True, 5.0),
        ("h", "c", 0, "hall", True, 7.0),  # another task: not grouped with g's starts
    ]
    order = [4, 0, 6, 2, 5, 1, 3]  # rows in any order
    columns = [np.array([rows[i][j] for i in order], dtype=object) for j in range(6)]
    got = segment_group_advantages(
        columns[0],
        columns[1],
        columns[2].astype(int),
        columns[3],
        columns[4].astype(bool),
        columns[5].astype(float),
        history_length=0,
        mode="mean_norm",
    )
    weight = 2 / (2 + 1e-6)
    want = {0: 1.0 * weight, 1: 0.0, 2: 1.0 * weight, 3: -1.0 * weight, 4: -1.0 * weight, 5: 0.0, 6: 0.0}
    np.testing.assert_allclose(got, [want[i] for i in order], rtol=0, atol=1e-12)


@SETTINGS
@given(batch=batches(), data=st.data())
def test_segment_groups_are_hgpo_on_a_table_of_segment_starts(batch: Batch, data: st.DataObject) -> None:
    """The definition, with the segment table built by hand: the k-th segment start of a trajectory
    is its step k; HGPO on those rows, 0 on the other rows."""
    n = len(batch.traj_ids)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    group_of = {t: f"g{rng.integers(2)}" for t in set(batch.traj_ids)}
    groups = [group_of[t] for t in batch.traj_ids]
    obs = [f"o{v}" for v in rng.integers(0, 3, n)]
    returns = rng.normal(size=n)
    options = data.draw(
        st.fixed_dictionaries(
            {
                "history_length": st.integers(0, 3),
                "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
                "alpha": st.sampled_from([0.0, 1.0, 2.0]),
            }
        )
    )
    got = segment_group_advantages(
        groups, batch.traj_ids, batch.step_idx, obs, batch.switches, returns, **options
    )
    table: list[tuple[int, str, str, int, str, float]] = []
    for traj, traj_rows in by_traj(batch).items():
        starts = [i for t, i in enumerate(traj_rows) if t == 0 or batch.switches[i]]
        table += [(i, groups[i], traj, k, obs[i], returns[i]) for k, i in enumerate(starts)]
    picked, *columns = zip(*table, strict=True)
    want = np.zeros(n)
    want[list(picked)] = hgpo_advantages(*columns, np.zeros(len(table)), **options)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_segment_groups_refuse_non_finite_returns_on_segment_starts() -> None:
    args = (["g", "g"], ["a", "a"], [0, 1], ["x", "y"], [False, False])
    assert segment_group_advantages(*args, [1.0, np.nan]).tolist() == [0.0, 0.0]  # row 1 is no start
    with pytest.raises(ValueError, match="segment_returns contains non-finite values on segment-start rows"):
        segment_group_advantages(*args, [np.inf, 0.0])

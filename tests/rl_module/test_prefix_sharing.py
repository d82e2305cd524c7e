"""Shared prompt prefixes computed once (issue 29): the packing's trees, and log-probs, entropies and
gradients equal to the unshared pass's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import MICRO, build

from hgpo_rllib.rl_module.prefix_sharing import (
    pack_shared_prefixes,
    plan_sequences,
    plan_trees,
    sequence_cost,
)

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 11, 12],  # three rows share this whole prompt
    [5, 6, 7, 8, 9, 10, 11, 12],
    [5, 6, 7, 8, 9, 10, 11, 12],
    [5, 6, 7, 8, 9, 10, 11, 13],  # differs in its last token only
    [5, 6, 7, 30, 31],  # shares a short prefix
    [40, 41, 42, 43, 44, 45],  # shares nothing
    [50, 51],  # shares nothing, short: packed beside another tree in one sequence
]
RESPONSES = [[20, 21, 22], [20, 21, 22], [20, 23], [24], [25, 26, 27, 28], [], [52]]
#: Attention per (query, key) pair relative to a token's linear layers: large, as in a tiny model.
PAIR_COST = 0.05


def token_rows(prompts: list[list[int]], responses: list[list[int]], pad: int = 0) -> dict[str, np.ndarray]:
    """Left-padded prompts and right-padded responses, as the learner's token batch holds them."""
    prompt_width = max(map(len, prompts))
    resp_width = max(map(len, responses))
    rows: dict[str, np.ndarray] = {
        "prompt_ids": np.full((len(prompts), prompt_width), pad, dtype=np.int64),
        "prompt_mask": np.zeros((len(prompts), prompt_width), dtype=np.int64),
        "resp_ids": np.full((len(prompts), resp_width), pad, dtype=np.int64),
        "resp_mask": np.zeros((len(prompts), resp_width), dtype=np.int64),
    }
    for n, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        rows["prompt_ids"][n, prompt_width - len(prompt) :] = prompt
        rows["prompt_mask"][n, prompt_width - len(prompt) :] = 1
        rows["resp_ids"][n, : len(response)] = response
        rows["resp_mask"][n, : len(response)] = 1
    return rows


def pack(rows: dict[str, np.ndarray]):  # noqa: ANN201
    columns = ("prompt_ids", "prompt_mask", "resp_ids", "resp_mask")
    return pack_shared_prefixes(*(rows[k] for k in columns), pair_cost=PAIR_COST)


def prefixes(sequences: list[list[int]], tree: list[tuple[int, int]]) -> set[tuple[int, ...]]:
    """The distinct prefixes of a tree's rows (its nodes, counted by brute force)."""
    return {tuple(sequences[n][: d + 1]) for n, _ in tree for d in range(len(sequences[n]))}


def test_every_row_reads_its_own_tokens_on_its_path():
    packing = pack(token_rows(PROMPTS, RESPONSES))
    assert packing is not None
    width = packing.input_ids.shape[1]
    for n, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        sequence = prompt + response
        for t in range(len(response)):
            # The state predicting response token t is the sequence's token before it, at its depth,
            # and it attends to exactly the tokens before it in its own row.
            flat = packing.predictor[n, t]
            s, position = divmod(int(flat), width)
            depth = len(prompt) + t - 1
            assert packing.input_ids[s, position] == sequence[depth]
            assert packing.position_ids[s, position] == depth
            keys = np.flatnonzero(packing.attend[s, position])
            assert sorted(packing.input_ids[s, keys].tolist()) == sorted(sequence[: depth + 1])
            assert sorted(packing.position_ids[s, keys].tolist()) == list(range(depth + 1))


def test_computed_tokens_are_the_distinct_prefixes_of_each_tree():
    packing = pack(token_rows(PROMPTS, RESPONSES))
    sequences = [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    trees, sizes = plan_trees([np.asarray(s) for s in sequences], PAIR_COST)
    nodes = sum(sizes)
    distinct = sum(len(prefixes(sequences, tree)) for tree in trees)
    assert nodes == distinct == packing.computed_tokens
    assert packing.row_tokens == sum(map(len, sequences))
    # The attention pairs the FLOP count takes (hgpo_rllib.learner_flops): each node with itself and
    # its ancestors, the mask's true entries less the padding's own.
    padding = packing.input_ids.size - packing.computed_tokens
    assert packing.attention_pairs == int(packing.attend.sum()) - padding
    # The rows that share nothing stay alone, and so does the one sharing 3 of its 9 tokens: its
    # longer attention would cost more than the 3 tokens save. No tree costs more than its rows.
    assert sorted(n for tree in trees if len(tree) == 1 for n, _ in tree) == [4, 5, 6]
    for tree in trees:
        cost = sequence_cost(len(prefixes(sequences, tree)), PAIR_COST)
        assert cost <= sum(sequence_cost(len(sequences[n]), PAIR_COST) for n, _ in tree)
    # Four trees in three sequences (first fit, decreasing): the shortest shares one.
    assert packing.input_ids.shape == (3, max(sizes))


def test_the_plan_weighs_the_plain_pass_at_its_trimmed_width():
    """The plain pass drops columns that are padding in every row, so columns of left padding (a
    micro-batch cut from a batch with longer prompts) must not make packing look cheaper."""
    rows = token_rows(
        [list(range(1, 11)), [1, 2, 3, 4, 5, 6, 20, 21, 22, 23], list(range(30, 40))], [[50]] * 3
    )
    padded = {**rows}
    for key in ("prompt_ids", "prompt_mask"):
        padded[key] = np.concatenate([np.zeros((3, 3), dtype=np.int64), rows[key]], axis=1)
    # Two rows share 6 of 11 tokens: a tree of 16 beside a row of 11 costs more than 3 rows of 11.
    assert pack(rows) is None
    assert pack(padded) is None


def test_trees_fill_sequences_first_fit_decreasing():
    assert plan_sequences([5, 3, 2, 4]) == [[0], [3], [1, 2]]


def test_nothing_shared_or_another_layout_runs_the_plain_rows():
    assert pack(token_rows([[1, 2, 3], [4, 5, 6]], [[7], [8]])) is None
    rows = token_rows(PROMPTS, RESPONSES)
    rows["resp_mask"][0] = [1, 0, 1, 0]  # a hole in a response: not the token batch's layout
    assert pack(rows) is None


@pytest.mark.parametrize(("attention", "lora"), [("sdpa", None), ("eager", None), ("sdpa", {"r": 4})])
def test_log_probs_entropies_and_gradients_equal_the_unshared_pass(attention, lora):
    model = {"tiny_model": {**MICRO, "num_hidden_layers": 2}, "lora": lora}
    plain, shared = build(**model), build(**model, share_prompt_prefixes=True)
    shared.load_state_dict(plain.state_dict())
    for module in (plain, shared):
        module.lm.set_attn_implementation(attention)
    rows = {k: torch.from_numpy(v) for k, v in token_rows(PROMPTS, RESPONSES).items()}
    assert plain._prefix_packing(plain.lm, rows) is None
    assert shared._prefix_packing(shared.lm, rows) is not None
    weights = torch.randn(rows["resp_ids"].shape, generator=torch.Generator().manual_seed(0))
    outputs, grads = [], []
    for module in (plain, shared):
        out = module.forward_train(rows)
        ((out["logp"] + out["entropy"]) * weights).sum().backward()
        outputs.append(out)
        grads.append({k: p.grad.clone() for k, p in module.named_parameters() if p.grad is not None})
    mask = rows["resp_mask"].bool()
    for key in ("logp", "entropy"):
        torch.testing.assert_close(outputs[1][key][mask], outputs[0][key][mask], atol=1e-5, rtol=0)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.usefixtures("ray_session")  # the session's 4-CPU Ray, not one of this machine's size
def test_training_with_shared_prefixes_scores_as_the_sampler_did():
    """One HGPO iteration on KeyChest with ``share_prompt_prefixes``: the group's rollouts share their
    first prompts, the learner computes fewer tokens than the rows hold, and its log-probs of the
    sampled responses match the sampler's (a wrong tree would not)."""
    from helpers import keychest_config

    algo = keychest_config(remote_runners=0, share_prompt_prefixes=True, kl_coeff=0.01).build_algo()
    try:
        learner = algo.train()["learners"]["default_policy"]
    finally:
        algo.stop()
    assert learner["duplicate_prompt_row_frac"] > 0
    assert learner["learner_tokens_computed_frac"] < 1
    assert learner["logp_gap_vs_sampler"] < 1e-4

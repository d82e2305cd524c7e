"""Shared prompt prefixes computed once: token rows packed into prefix trees (numpy, no torch).

Why: the rollouts of a group start from the same state and a confident policy walks the same path for
many steps, so many of an iteration's rows carry token-identical prompts (issue 29). The learner's
three passes (old log-probs, reference log-probs, training) need each response's log-probs only, yet
an unshared batch runs every prompt token once per row.

Here the rows' token sequences (prompt, then response) are merged into prefix trees: a token is one
node per distinct prefix, its position id is its depth, and it attends to the nodes on its own path
(itself and its ancestors). Each response token is predicted from the node of the token before it,
so its log-prob and gradient equal the unshared row's: the same keys, values and positions, only
computed once (tests/rl_module/test_prefix_sharing.py checks 1e-5 in float32).

A tree is one sequence, and a dense attention kernel computes every (query, key) pair of it, masked
or not; so a row joins the tree of its lexicographic predecessor only where the tree's cost (its
tokens plus ``pair_cost`` per pair, :func:`sequence_cost`) stays below running the row alone, and
trees are packed into sequences as long as the largest one (docs/throughput.md).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from hgpo_rllib.learner_flops import tree_pairs


@dataclasses.dataclass(frozen=True)
class PrefixPacking:
    """Packed sequences (prefix trees side by side, right-padded) and where each response token's
    state is.

    ``predictor[n, t]`` is the flat index (``sequence * width + position``) of the state that
    predicts response token ``t`` of row ``n`` (0 where the response is padding).
    """

    input_ids: np.ndarray  # [S, width] int64
    position_ids: np.ndarray  # [S, width] int64 (tree depth)
    attend: np.ndarray  # [S, width, width] bool: query position may attend to key position
    predictor: np.ndarray  # [N, T] int64
    computed_tokens: int  # tree nodes (real tokens the packed pass computes)
    row_tokens: int  # real tokens of the rows (what the unshared pass computes, without padding)
    attention_pairs: int  # (query, key) pairs on the trees' paths (each node and its ancestors)


def real_sequences(
    prompt_ids: np.ndarray, prompt_mask: np.ndarray, resp_ids: np.ndarray, resp_mask: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """Each row's prompt tokens then response tokens, and its prompt length; None when a row's mask
    is not the left-padded prompt / right-padded response layout the token batch has."""
    prompt_len = prompt_mask.sum(axis=1)
    resp_len = resp_mask.sum(axis=1)
    width = prompt_mask.shape[1]
    prompt_layout = prompt_mask[np.arange(width) >= width - prompt_len[:, None]].all() if width else True
    resp_layout = (resp_mask == (np.arange(resp_mask.shape[1]) < resp_len[:, None])).all()
    if not (prompt_layout and resp_layout and (prompt_len > 0).all()):
        return None
    sequences = [
        np.concatenate([prompt_ids[n, width - prompt_len[n] :], resp_ids[n, : resp_len[n]]])
        for n in range(len(prompt_ids))
    ]
    return sequences, prompt_len


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    m = min(len(a), len(b))
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if differ.size else m


def sequence_cost(length: int, pair_cost: float) -> float:
    """The forward cost of one sequence of ``length`` tokens, in units of one token's linear layers:
    its tokens plus ``pair_cost`` per (query, key) pair of its attention (a dense or masked kernel
    computes every pair)."""
    return length + pair_cost * length * length


def plan_trees(
    sequences: Sequence[np.ndarray], pair_cost: float
) -> tuple[list[list[tuple[int, int]]], list[int]]:
    """Rows grouped into prefix trees, and each tree's node count. A tree is a list of ``(row,
    shared)`` in lexicographic order, ``shared`` being the tokens the row shares with the tree's
    previous row (its longest common prefix with any earlier row of the tree). A row joins the open
    tree where that costs less (:func:`sequence_cost`) than running it alone."""
    trees: list[list[tuple[int, int]]] = []
    sizes: list[int] = []
    previous = None
    for n in token_order(sequences):
        length = len(sequences[n])
        shared = _common_prefix(sequences[previous], sequences[n]) if previous is not None else 0
        if shared > 0:
            grown = sizes[-1] + length - shared
            alone = sequence_cost(sizes[-1], pair_cost) + sequence_cost(length, pair_cost)
            if sequence_cost(grown, pair_cost) <= alone:
                trees[-1].append((n, shared))
                sizes[-1] = grown
                previous = n
                continue
        trees.append([(n, 0)])
        sizes.append(length)
        previous = n
    return trees, sizes


def plan_sequences(sizes: Sequence[int]) -> list[list[int]]:
    """Trees (by size) packed first-fit-decreasing into sequences as long as the largest tree."""
    width = max(sizes)
    bins: list[list[int]] = []
    room: list[int] = []
    for tree in sorted(range(len(sizes)), key=lambda t: -sizes[t]):
        for b, free in enumerate(room):
            if sizes[tree] <= free:
                bins[b].append(tree)
                room[b] -= sizes[tree]
                break
        else:
            bins.append([tree])
            room.append(width - sizes[tree])
    return bins


def plan_packing(
    sequences: Sequence[np.ndarray], padded_width: int, pair_cost: float
) -> tuple[list[list[tuple[int, int]]], list[int], list[list[int]]] | None:
    """Trees, their sizes and their sequences, where running them costs less than the plain rows
    (each padded to ``padded_width``); else None."""
    trees, sizes = plan_trees(sequences, pair_cost)
    if len(trees) == len(sequences):
        return None
    bins = plan_sequences(sizes)
    packed = len(bins) * sequence_cost(max(sizes), pair_cost)
    plain = len(sequences) * sequence_cost(padded_width, pair_cost)
    return (trees, sizes, bins) if packed < plain else None


def token_order(sequences: Sequence[np.ndarray]) -> list[int]:
    """Rows in lexicographic order of their tokens: rows that share a prompt become neighbours."""
    return sorted(range(len(sequences)), key=lambda n: sequences[n].tolist())


def pack_shared_prefixes(
    prompt_ids: np.ndarray,
    prompt_mask: np.ndarray,
    resp_ids: np.ndarray,
    resp_mask: np.ndarray,
    pair_cost: float,
    pad_id: int = 0,
) -> PrefixPacking | None:
    """The rows (left-padded prompts, right-padded responses, as the learner's token batch holds
    them) packed into prefix trees, the trees into sequences; None where that would cost no less than
    the plain rows (:func:`plan_packing`) or the masks do not have that layout: the caller then runs
    the plain rows. ``pair_cost``: the model's attention cost per (query, key) pair relative to one
    token's linear layers (:func:`attention_pair_cost`)."""
    found = real_sequences(prompt_ids, prompt_mask, resp_ids, resp_mask)
    if found is None:
        return None
    sequences, prompt_len = found
    # The plain pass drops the columns that are padding in every row (hidden_states.row_states).
    plan = plan_packing(sequences, plain_width(prompt_mask, resp_mask), pair_cost)
    if plan is None:
        return None
    trees, sizes, bins = plan
    width = max(sizes)
    input_ids = np.full((len(bins), width), pad_id, dtype=np.int64)
    position_ids = np.zeros((len(bins), width), dtype=np.int64)
    # Padding attends to itself only: every query row keeps one key (no NaN from an empty softmax).
    attend = np.broadcast_to(np.eye(width, dtype=bool), (len(bins), width, width)).copy()
    predictor = np.zeros(resp_ids.shape, dtype=np.int64)
    for s, members in enumerate(bins):
        placed = 0
        for tree in members:
            start = placed
            attend[s, start : start + sizes[tree], start : start + sizes[tree]] = False
            path = np.empty(0, dtype=np.int64)
            for n, shared in trees[tree]:
                sequence = sequences[n]
                fresh = np.arange(placed, placed + len(sequence) - shared)
                path = np.concatenate([path[:shared], fresh])
                input_ids[s, fresh] = sequence[shared:]
                position_ids[s, fresh] = np.arange(shared, len(sequence))
                attend[s][np.ix_(fresh, path)] |= np.tri(len(fresh), len(sequence), k=shared, dtype=bool)
                placed += len(fresh)
                responses = len(sequence) - prompt_len[n]
                predictor[n, :responses] = s * width + path[prompt_len[n] - 1 : len(sequence) - 1]
    return PrefixPacking(
        input_ids=input_ids,
        position_ids=position_ids,
        attend=attend,
        predictor=predictor,
        computed_tokens=sum(sizes),
        row_tokens=sum(len(seq) for seq in sequences),
        attention_pairs=tree_pairs(
            (len(sequences[n]) for tree in trees for n, _ in tree), (s for tree in trees for _, s in tree)
        ),
    )


def plain_width(prompt_mask: np.ndarray, resp_mask: np.ndarray) -> int:
    """The width of the plain pass's input over these rows: their longest prompt and longest
    response (the columns that are padding in every row are dropped)."""
    if not len(prompt_mask):
        return 0
    return int(np.asarray(prompt_mask).sum(axis=1).max() + np.asarray(resp_mask).sum(axis=1).max())


def attention_pair_cost(config: Any) -> float:
    """Multiply-adds of one (query, key) pair of attention (scores and weighted values over all
    heads) per multiply-add of one token's linear layers (q, k, v, o projections and a gated MLP):
    what a token of a longer sequence costs in attention against what sharing it saves. ``config``:
    a Hugging Face model config (``hidden_size``, ``intermediate_size``, ``num_attention_heads`` and,
    with grouped-query attention, ``num_key_value_heads``)."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    kv_width = hidden // heads * getattr(config, "num_key_value_heads", heads)
    linear = hidden * (2 * hidden + 2 * kv_width) + 3 * hidden * config.intermediate_size
    return 2 * hidden / linear


def _distinct_prefixes(sequences: Sequence[np.ndarray]) -> int:
    """Nodes of the prefix tree of all ``sequences`` (each distinct prefix counted once)."""
    ordered = [sequences[n] for n in token_order(sequences)]
    shared = sum(_common_prefix(a, b) for a, b in zip(ordered, ordered[1:], strict=False))
    return sum(map(len, ordered)) - shared


def sharing_stats(
    prompt_ids: np.ndarray,
    prompt_mask: np.ndarray,
    resp_ids: np.ndarray,
    resp_mask: np.ndarray,
    micro_batch_size: int | None,
    pair_cost: float | None,
) -> dict[str, float]:
    """How much a token batch (in its row order) shares, and what the learner's passes compute.

    - ``duplicate_prompt_row_frac``: rows whose prompt equals another row's;
    - ``long_shared_prefix_row_frac``: rows sharing a prompt prefix with another row longer than the
      prefix every row shares (the template's opening);
    - ``prompt_tokens_shareable_frac``: the prompt tokens a pass computing each distinct prefix of
      the whole batch once would skip (the bound);
    - ``learner_tokens_computed_frac``: tokens the passes over micro-batches of ``micro_batch_size``
      rows compute (prefix trees, :func:`plan_packing`, unless ``pair_cost`` is None; padding
      excluded) per real token of the rows.

    The padding the passes computed is counted as they run (``learner_padding_frac``).
    """
    found = real_sequences(prompt_ids, prompt_mask, resp_ids, resp_mask)
    if found is None or not len(prompt_ids):
        return {}
    sequences, prompt_len = found
    prompts = [seq[:length] for seq, length in zip(sequences, prompt_len, strict=True)]
    copies = Counter(p.tobytes() for p in prompts)
    duplicates = sum(copies[p.tobytes()] > 1 for p in prompts) / len(prompts)
    ordered = [prompts[n] for n in token_order(prompts)]
    neighbours = [_common_prefix(a, b) for a, b in zip(ordered, ordered[1:], strict=False)]
    opening = min(neighbours, default=0)
    longest = np.zeros(len(ordered), dtype=np.int64)  # each row's longest prefix shared with another
    if neighbours:
        longest[:-1] = neighbours
        longest[1:] = np.maximum(longest[1:], neighbours)
    computed = 0
    step = micro_batch_size or len(sequences)
    for start in range(0, len(sequences), step):
        chunk = sequences[start : start + step]
        width = plain_width(prompt_mask[start : start + step], resp_mask[start : start + step])
        plan = None if pair_cost is None else plan_packing(chunk, width, pair_cost)
        computed += sum(map(len, chunk)) if plan is None else sum(plan[1])
    return {
        "duplicate_prompt_row_frac": float(duplicates),
        "long_shared_prefix_row_frac": float((longest > opening).mean()),
        "prompt_tokens_shareable_frac": 1.0 - _distinct_prefixes(prompts) / int(prompt_len.sum()),
        "learner_tokens_computed_frac": computed / sum(map(len, sequences)),
    }

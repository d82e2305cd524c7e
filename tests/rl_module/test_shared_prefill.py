"""HF generation with a group's shared prompt prefilled once (issue 63): the unshared path's tokens and
log-probs with the same seed, rows in their order, and plain ``generate`` where no prompt repeats."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers import TINY_MODEL, build

from hgpo_rllib.rl_module.generation import Generated, HFGenerator
from hgpo_rllib.rl_module.shared_prefill import distinct_rows, position_ids, prefill_once

#: A group's prompt repeated among two others of other lengths, interleaved: left padding differs.
TEXTS = [
    "go north to drawer 5 and take mug 2 from drawer 5",
    "open drawer 3",
    "go north to drawer 5 and take mug 2 from drawer 5",
    "take mug 1",
    "open drawer 3",
    "open drawer 3",
    "go north to drawer 5 and take mug 2 from drawer 5",
]


@pytest.fixture(scope="module")
def module() -> Any:
    return build(**TINY_MODEL)


def test_distinct_rows_are_equal_ids_and_equal_mask() -> None:
    pad = 0
    ids = torch.tensor([[pad, 7, 8], [4, 5, 6], [pad, 7, 8], [pad, 7, 8], [4, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])  # row 3: token 0 is real
    distinct_ids, distinct_mask, inverse = distinct_rows(ids, mask)
    assert len(distinct_ids) == 3
    assert torch.equal(distinct_ids[inverse], ids) and torch.equal(distinct_mask[inverse], mask)
    assert inverse[0] == inverse[2] and len({int(inverse[i]) for i in (0, 1, 3)}) == 3


def test_positions_start_at_each_rows_first_real_token() -> None:
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]])
    assert position_ids(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3], [0, 0, 0, 0]]


def _generate(module: Any, share: bool, ids: torch.Tensor, mask: torch.Tensor, **kwargs: Any) -> tuple:
    """Generate with seed 7, recording each model forward's input_ids shape."""
    generator = HFGenerator(module.lm, share_prefill=share)
    shapes: list[tuple] = []
    hook = module.lm.model.register_forward_pre_hook(
        lambda _, __, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    torch.manual_seed(7)
    try:
        out: Generated = generator.generate(
            ids, mask, max_new_tokens=12, pad_token_id=module.tokenizer.pad_token_id, **kwargs
        )
    finally:
        hook.remove()
    return out, shapes


def _assert_same(plain: Generated, shared: Generated) -> None:
    assert torch.equal(shared.tokens, plain.tokens) and torch.equal(shared.lengths, plain.lengths)
    assert (shared.logp - plain.logp).abs().max() <= 1e-5


@pytest.mark.parametrize(
    ("temperature", "allowed"),
    [(0.0, None), (1.0, None), (1.3, "shared"), (0.7, "per_row")],
)
def test_shared_prefill_gives_the_unshared_tokens_and_log_probs(
    module: Any, temperature: float, allowed: str | None
) -> None:
    prompts = module.encode_prompts(TEXTS)
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    rows, width = ids.shape
    vocab = module.lm.config.vocab_size
    masks = {
        None: None,
        "shared": torch.arange(vocab) % 3 != 0,
        # Rows of one prompt may differ in what they may emit.
        "per_row": torch.stack([torch.arange(vocab) % (2 + row % 3) != 0 for row in range(rows)]),
    }
    kwargs = {"temperature": temperature, "stop_token_ids": module.eos_token_ids, "allowed": masks[allowed]}
    plain, plain_shapes = _generate(module, False, ids, mask, **kwargs)
    shared, shared_shapes = _generate(module, True, ids, mask, **kwargs)
    _assert_same(plain, shared)
    # One prefill of the 3 distinct prompts, then the same decoding forwards for all 7 rows.
    assert plain_shapes[0] == (rows, width) and shared_shapes[0] == (3, width)
    assert shared_shapes[1:] == plain_shapes[1:] and plain_shapes[1] == (rows, 1)
    if temperature > 0:  # the rows of one prompt sample their own responses
        assert not torch.equal(shared.tokens[0], shared.tokens[2])


def test_rows_that_stop_are_padded_and_the_call_ends_when_all_stopped(module: Any) -> None:
    prompts = module.encode_prompts(TEXTS)
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    stop, other = module.eos_token_ids[0], 100
    # Rows 0-2 may emit only the stop token, the others it or one more: they stop at random steps.
    allowed = torch.zeros((len(ids), module.lm.config.vocab_size), dtype=torch.bool)
    allowed[:, stop], allowed[3:, other] = True, True
    kwargs = {"temperature": 5.0, "stop_token_ids": [stop], "allowed": allowed}
    plain, _ = _generate(module, False, ids, mask, **kwargs)
    shared, _ = _generate(module, True, ids, mask, **kwargs)
    _assert_same(plain, shared)
    pad = module.tokenizer.pad_token_id
    assert shared.tokens[0].tolist() == [stop] + [pad] * (shared.tokens.shape[1] - 1)
    assert 1 < shared.tokens.shape[1] < 12  # ended when the last row stopped


def test_no_stop_token_before_min_new_tokens_on_the_shared_path_either(module: Any) -> None:
    """``min_new_tokens`` (fixed-length responses) is a processor ``generate`` adds itself; the shared
    path's own loop adds the same one."""
    prompts = module.encode_prompts(TEXTS)
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    stop = module.eos_token_ids[0]
    allowed = torch.zeros((len(ids), module.lm.config.vocab_size), dtype=torch.bool)
    allowed[:, [stop, 100]] = True  # at temperature 5 a row stops within a few steps unless held
    kwargs = {"temperature": 5.0, "stop_token_ids": [stop], "allowed": allowed, "min_new_tokens": 6}
    plain, _ = _generate(module, False, ids, mask, **kwargs)
    shared, _ = _generate(module, True, ids, mask, **kwargs)
    _assert_same(plain, shared)
    assert (shared.tokens[:, :6] == 100).all() and shared.tokens.shape[1] > 6


def test_unpadded_prompts_share_too(module: Any) -> None:
    prompts = module.encode_prompts([TEXTS[1], TEXTS[1], TEXTS[1]])
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    assert bool(mask.all())
    plain, _ = _generate(module, False, ids, mask, temperature=1.0, stop_token_ids=module.eos_token_ids)
    shared, shapes = _generate(module, True, ids, mask, temperature=1.0, stop_token_ids=module.eos_token_ids)
    _assert_same(plain, shared)
    assert shapes[0] == (1, ids.shape[1])


def test_lora_adapters_share_too() -> None:
    module = build(**TINY_MODEL, lora={"r": 4})
    with torch.no_grad():  # adapters start as a no-op: make them count
        for name, weight in module.lm.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.1)
    prompts = module.encode_prompts(TEXTS)
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    plain, _ = _generate(module, False, ids, mask, temperature=1.0, stop_token_ids=module.eos_token_ids)
    shared, _ = _generate(module, True, ids, mask, temperature=1.0, stop_token_ids=module.eos_token_ids)
    _assert_same(plain, shared)


def test_nothing_is_shared_where_no_prompt_repeats(module: Any) -> None:
    prompts = module.encode_prompts(sorted(set(TEXTS)))
    ids, mask = prompts["prompt_ids"], prompts["prompt_mask"]
    assert prefill_once(module.lm, ids, mask) is None
    _, shapes = _generate(module, True, ids, mask, temperature=0.0, stop_token_ids=[])
    assert shapes[:2] == [(3, ids.shape[1]), (3, 1)]


def test_the_switch_is_a_module_setting() -> None:
    assert build(**TINY_MODEL).generator().share_prefill is True
    assert build(**TINY_MODEL, share_prompt_prefill=False).generator().share_prefill is False
    with pytest.raises(ValueError, match=r"model_config\['share_prompt_prefill'\]='yes' is invalid"):
        build(**TINY_MODEL, share_prompt_prefill="yes")

"""The learner's FLOPs per update (issue 63, item 2; hgpo_rllib/learner_flops.py): the formula on a tiny
shape by hand, the shape against real models' parameter counts, and the benchmark's matmul shapes. The
learner's metrics against the formula for its batch: tests/algorithms/test_flop_meter.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hgpo_rllib.learner_flops import (
    PassTokens,
    matmul_shapes,
    pass_flops,
    row_pass_tokens,
    tree_pairs,
    update_flops,
)
from hgpo_rllib.model_shape import ModelShape

CONFIGS = Path(__file__).resolve().parents[2] / "hgpo_rllib" / "model_configs"
#: 2 layers, width 8, MLP 16, 2 query heads and 1 key-value head of 4, vocabulary 32.
TINY = ModelShape(layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, vocab=32)
#: Two rows of 4 real tokens each (prompt 2 + response 2, prompt 3 + response 1).
PROMPT = np.array([[0, 1, 1], [1, 1, 1]])
RESPONSE = np.array([[1, 1, 0], [1, 0, 0]])


def test_the_tiny_shape_by_hand():
    # q 8x8, k and v 8x4, o 8x8, gate and up 8x16, down 16x8: 64 + 32 + 32 + 64 + 3 x 128 = 576.
    assert TINY.linear_weights == 2 * 576
    assert TINY.head_weights == 8 * 32 and TINY.attention_width == 8
    # r (in + out): q 2 x 16, k and v 2 x 12, o 2 x 16, gate, up and down 2 x 24 = 256 per layer.
    assert TINY.lora_weights(2) == 2 * 256
    assert TINY.lora_weights(2, ["q_proj", "v_proj"]) == 2 * (32 + 24)


def test_the_token_counts_of_plain_rows_and_trees():
    # 4 + 4 tokens, 10 + 10 causal pairs, 2 + 1 response tokens scored, in an input of 2 rows of 3
    # prompt and 2 response columns (the third response column is padding in both rows).
    assert row_pass_tokens(PROMPT, RESPONSE) == PassTokens(tokens=8, pairs=20, scored=3, positions=10)
    assert row_pass_tokens(PROMPT, RESPONSE) + PassTokens(1, 2, 3, 4) == PassTokens(9, 22, 6, 14)
    # A tree of a 5-token row and a 6-token row sharing its first 3: 15 + (21 - 6) pairs.
    assert tree_pairs([5, 6], [0, 3]) == 30


def test_the_flops_of_each_pass_by_hand():
    counts = PassTokens(tokens=8, pairs=20, scored=3)
    weights = 1152 * 8 + 256 * 3  # linear weights per token + head weights per scored token: 9,984
    attention = 4 * 8 * 2 * 20  # 2 d (QK^T) + 2 d (AV) per pair and layer: 1,280
    assert pass_flops(TINY, counts, "trained") == 6 * weights + 3 * attention == 63_744
    assert pass_flops(TINY, counts, "forward") == pass_flops(TINY, counts, "reference") == 21_248
    passes = {"trained": counts, "forward": counts, "reference": counts}
    assert update_flops(TINY, passes) == 63_744 + 2 * 21_248
    # LoRA (r = 2, 512 adapter weights): the base 4 W trained, the adapters 6 per weight; the
    # reference pass runs the base alone.
    adapters = TINY.lora_weights(2)
    assert (
        pass_flops(TINY, counts, "trained", adapters) == 4 * weights + 3 * attention + 6 * 512 * 8 == 68_352
    )
    assert pass_flops(TINY, counts, "forward", adapters) == 21_248 + 2 * 512 * 8
    assert pass_flops(TINY, counts, "reference", adapters) == 21_248


@pytest.mark.parametrize(
    ("config", "linear_weights"),
    [
        # SmolLM2-135M: 30 x (576^2 x 2 + 576 x 192 x 2 + 3 x 576 x 1536); + 49,152 x 576 embeddings = 134.5M.
        (
            {
                "num_hidden_layers": 30,
                "hidden_size": 576,
                "intermediate_size": 1536,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "vocab_size": 49152,
            },
            106_168_320,
        ),
        # Qwen2.5-0.5B: 0.36B non-embedding parameters (Qwen's model card), biases and norms aside.
        (json.loads((CONFIGS / "qwen2.5-0.5b" / "config.json").read_text()), 357_826_560),
    ],
)
def test_the_shape_from_a_config(config, linear_weights):
    assert ModelShape.from_config(config).linear_weights == linear_weights


def test_the_shape_counts_the_models_own_linear_layers():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    linear = sum(m.weight.numel() for m in model.model.modules() if isinstance(m, torch.nn.Linear))
    shape = ModelShape.from_config(config)
    assert shape.linear_weights == linear
    assert shape.head_weights == model.lm_head.weight.numel()


def test_the_benchmarks_matmul_shapes():
    rows = matmul_shapes(TINY, tokens=16)
    # q and o share 8x8, k and v 8x4, gate and up 8x16, down 16x8, the head 8x32: 5 shapes x 3 products.
    assert len(rows) == 15
    assert rows[:3] == [("q_proj/o_proj forward", 16, 8, 8), ("q_proj/o_proj input grad", 16, 8, 8),
                        ("q_proj/o_proj weight grad", 8, 16, 8)]  # fmt: skip
    assert rows[-3:] == [("lm_head forward", 16, 8, 32), ("lm_head input grad", 16, 32, 8),
                         ("lm_head weight grad", 8, 16, 32)]  # fmt: skip
    # A fit takes each shape's weights and gives its tokens: the token side of all three products.
    fitted = matmul_shapes(TINY, tokens=16, fit=lambda weights: 1024 // weights)
    assert [(m, k, n) for _, m, k, n in fitted[-3:]] == [(4, 8, 32), (4, 32, 8), (8, 4, 32)]
    assert [m for name, m, _, _ in fitted if name.endswith("forward")] == [16, 32, 8, 8, 4]

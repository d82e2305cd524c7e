"""What a weight sync sends (:mod:`hgpo_rllib.rl_module.engine_weights`): raw bits of one dtype, tied
storages once, views back without a copy, and the same through Ray's object store (issue 29 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
import ray
import torch

from hgpo_rllib.rl_module.engine_weights import EngineWeights, distinct_tensors


def tied_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    embedding = torch.randn(10, 4)
    return {"embed.weight": embedding, "layer.weight": torch.randn(4, 4), "head.weight": embedding}


def test_tied_tensors_are_kept_once_under_their_first_name() -> None:
    kept, aliases = distinct_tensors(tied_state())
    assert list(kept) == ["embed.weight", "layer.weight"] and aliases == {"head.weight": "embed.weight"}
    # A slice of a storage is a tensor of its own.
    base = torch.zeros(8)
    assert distinct_tensors({"a": base[:4], "b": base[4:]})[1] == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_bits_round_trip_exactly_in_the_engine_dtype(dtype: torch.dtype) -> None:
    state = tied_state()
    weights = EngineWeights.from_state(state, dtype)
    assert weights.nbytes == (40 + 16) * dtype.itemsize
    views = weights.tensors()
    assert views.keys() == state.keys() and views["head.weight"] is views["embed.weight"]
    for name, tensor in state.items():
        assert views[name].dtype == dtype and torch.equal(views[name], tensor.to(dtype)), name


def test_a_dtype_without_a_bit_carrier_is_refused() -> None:
    with pytest.raises(ValueError, match="weights can be sent as .*not torch.int64"):
        EngineWeights.from_state({"w": torch.zeros(2, dtype=torch.int64)}, torch.int64)


@pytest.mark.usefixtures("ray_session")
def test_through_the_object_store_a_reader_maps_the_stored_copy() -> None:
    weights = EngineWeights.from_state(tied_state(), torch.bfloat16)
    fetched = ray.get(ray.put(weights))
    # Zero-copy: the arrays are read-only views of the object store's buffer, not unpickled copies.
    assert all(not array.flags.writeable for array in fetched.arrays.values())
    assert all(np.array_equal(a, weights.arrays[k]) for k, a in fetched.arrays.items())
    assert torch.equal(fetched.tensors()["head.weight"], tied_state()["head.weight"].bfloat16())

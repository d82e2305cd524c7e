"""A model's weights as a weight sync sends them: in the inference engine's dtype, each storage once.

Why (issue 29, docs/throughput.md): RLlib's ``get_state`` route turns the learner's weights into float32
numpy arrays (numpy has no bfloat16), which the learner returns to the driver and the driver puts into
the object store a second time for the env runners: 4 bytes per parameter, the tied head twice, two
trips through the object store (each one a transfer between machines when they differ). Here the learner
converts once to the engine's dtype and puts the raw bits (bfloat16 viewed as int16) into Ray's object
store itself; every runner of a node maps that one copy without copying (Ray shares numpy buffers), and
reads 2 bytes per parameter. Pure torch and numpy: no Ray, no RLlib.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

import numpy as np
import torch

#: The key of an :class:`EngineWeights` in a module's state (``LLMRLModule.set_state``).
ENGINE_WEIGHTS = "engine_weights"
#: numpy dtypes that carry a torch dtype's bits (numpy has no bfloat16).
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.float32}


def distinct_tensors(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``state`` without the tensors that repeat an earlier one's storage (tied weights, e.g. Qwen's
    ``lm_head.weight`` is ``embed_tokens.weight``), and each dropped name -> the kept name it repeats.

    The first name is kept, as ``save_pretrained`` does; vLLM ties a head itself.
    """
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            kept[name] = tensor
    return kept, aliases


def engine_tensors(
    state: Mapping[str, torch.Tensor], dtype: torch.dtype
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Each distinct tensor of ``state`` on the CPU in ``dtype``, contiguous (no copy where it
    already is), and the tied names left out (:func:`distinct_tensors`)."""
    kept, aliases = distinct_tensors(state)
    return {name: t.detach().to("cpu", dtype).contiguous() for name, t in kept.items()}, aliases


@dataclasses.dataclass(frozen=True)
class EngineWeights:
    """Named tensors of one dtype, stored as numpy arrays of their bits (pickled by Ray out of band,
    so a runner's :meth:`tensors` are views of the object store's copy), plus tied names."""

    dtype: str
    arrays: dict[str, np.ndarray]
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_state(cls, state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> EngineWeights:
        """Convert each distinct tensor of ``state`` once, to ``dtype`` on the CPU (no copy where it
        already is), and keep its bits."""
        if dtype not in _BITS:
            raise ValueError(f"weights can be sent as {sorted(map(str, _BITS))}, not {dtype}")
        tensors, aliases = engine_tensors(state, dtype)
        arrays = {name: t.view(_BITS[dtype]).numpy() for name, t in tensors.items()}
        return cls(str(dtype).removeprefix("torch."), arrays, aliases)

    @property
    def nbytes(self) -> int:
        """Bytes sent: each distinct tensor once."""
        return sum(array.nbytes for array in self.arrays.values())

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every name (tied ones too) -> a read-only view of its bits as a ``dtype`` tensor."""
        dtype = getattr(torch, self.dtype)
        with warnings.catch_warnings():  # the object store's buffers are read-only; views are only read
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            views = {name: torch.from_numpy(array).view(dtype) for name, array in self.arrays.items()}
        views.update({name: views[kept] for name, kept in self.aliases.items()})
        return views

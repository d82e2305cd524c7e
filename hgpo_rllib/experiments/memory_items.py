"""The lines of a memory plan (:mod:`hgpo_rllib.experiments.memory_plan`): what one GPU of each role
holds, in bytes, for a model's shape (:class:`~hgpo_rllib.model_shape.ModelShape`, from its
``config.json`` alone) and the settings that set its memory. Per role and GPU:

* **learner**: weights in ``torch_dtype``; with a dtype below float32, an fp32 master copy of the
  trained weights (AdamW steps of lr 1e-6 vanish in bf16); fp32 gradients and AdamW's two fp32
  moments of the trained weights (all of the model, or the LoRA adapters only; fused AdamW, so the
  step itself allocates nothing on GPU); the frozen
  reference (none with LoRA, where it is the base with the adapters off, or with
  ``reference_on_cpu``); activations of one micro-batch of ``max_prompt_tokens + max_new_tokens``
  tokens per row (every decoder layer's saved tensors, or with gradient checkpointing each layer's
  input plus one layer recomputed); the vocabulary-wide log-prob and entropy tensors of the response
  tokens (all at once, or ``logprob_chunk_tokens`` at a time). ``learner_sharding="fsdp"`` divides
  weights, master, gradients, optimizer state and a GPU reference by the number of learners (FSDP2
  keeps fp32 shards and gathers in ``torch_dtype`` one layer at a time, plus the embeddings and heads);
  ``learner_offload`` moves those shards (master, gradients, AdamW state, reference) to host RAM, so
  the GPU keeps the gathered layers, activations and head, and the plan adds a host-RAM line per
  learner (several learners on one machine add up there).
* **critic** (HiPER, on the learner): a second trunk trained in full, counted like the policy
  (weights, master, gradients, AdamW, sharded alike, activations) without reference or vocabulary head.
* **env runner**: the module's own copy of the weights and, with vLLM, the engine's share of the GPU
  (``vllm_gpu_memory_utilization``): its weights, a working reserve, and the KV cache that is left,
  which must hold at least one full-length sequence; the plan reports how many fit at once.

The activation counts are ours (tensors autograd keeps per token in a Qwen2/Llama decoder layer);
``benchmarks/scale.py`` puts them next to measured peaks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hgpo_rllib.model_shape import LORA_ALL_LINEAR, ModelShape

GIB = 1024**3
GB = 10**9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: vLLM's working memory besides weights and KV cache (activations of a step, CUDA graphs, sampler).
VLLM_RESERVE_BYTES = 2 * GIB
#: Bytes per vocabulary entry and token of the log-prob/entropy head: logits in the model dtype,
#: then fp32 logits, log-softmax, probabilities, p*log p and one gradient of that size.
_HEAD_FP32_TENSORS = 5


def layer_activation_bytes_per_token(shape: ModelShape, dtype_bytes: int) -> int:
    """Tensors one decoder layer keeps for backward, per token (flash/memory-efficient attention).

    Two RMSNorms (fp32 input and output, and their model-dtype casts); q, k, v; rotary outputs
    and rotate_half copies; k and v repeated to all heads; attention output and its contiguous
    copy; the MLP's gate, up, silu(gate) and product.
    """
    h, kv, i = shape.hidden, shape.kv_width, shape.intermediate
    return dtype_bytes * (11 * h + 4 * kv + 4 * i) + 4 * 4 * h


@dataclasses.dataclass(frozen=True)
class LearnerSettings:
    """What sets a learner GPU's memory (see the module docstring)."""

    torch_dtype: str = "bfloat16"
    lora_r: int | None = None
    lora_target_modules: str | Sequence[str] = LORA_ALL_LINEAR
    gradient_checkpointing: bool = False
    logprob_chunk_tokens: int | None = 1024
    reference: bool = True
    reference_on_cpu: bool = False
    micro_batch_rows: int = 16
    prompt_tokens: int = 4096
    response_tokens: int = 512
    num_shards: int = 1
    offload: bool = False  #: sharded state in host RAM (``learner_offload``)
    #: CPU: sdpa with a mask materialises the [heads, S, S] scores, and AdamW runs tensor by tensor
    #: (two temporaries of the largest weight); on GPU the learner uses fused AdamW (none).
    on_cpu: bool = False
    #: LLMs of this shape on the learner (a multi-agent run's modules, docs/drmas.md): each holds its
    #: weights, gradients, AdamW state and reference; the modules update one after another, so one
    #: module's activations (and gathered layers) are live at a time.
    num_models: int = 1


@dataclasses.dataclass(frozen=True)
class Item:
    """One line of a plan: bytes on one GPU (and in host RAM, when offloaded) and why."""

    name: str
    bytes: int
    note: str = ""
    host_bytes: int = 0


def learner_items(shape: ModelShape, s: LearnerSettings) -> list[Item]:
    """The learner GPU's lines (shared by the plan and by ``benchmarks/scale.py``'s prediction)."""
    a = DTYPE_BYTES[s.torch_dtype]
    total = shape.num_params()
    lora = s.lora_r is not None
    trained = shape.lora_weights(s.lora_r, s.lora_target_modules) if lora else total
    shards = max(1, s.num_shards)
    offload = s.offload and shards > 1

    def sharded(name: str, size: int, note: str) -> Item:
        """A line of 1/shards of ``size`` bytes: on the GPU, or in host RAM with offload."""
        share = size // shards
        if offload:
            where = f"{share / GB:.2f} GB in host RAM (learner_offload)"
            return Item(name, 0, f"{note}; {where}" if note else where, host_bytes=share)
        return Item(name, share, note)

    items = []
    if lora:
        items.append(Item("weights (frozen base)", total * a // shards, f"{total / 1e9:.2f}B x {a} B"))
        items.append(
            Item("weights (LoRA adapters, fp32)", trained * 4 // shards, f"{trained / 1e6:.1f}M x 4 B")
        )
    elif a < 4 and shards == 1:
        items.append(Item("weights", total * a, f"{total / 1e9:.2f}B x {a} B ({s.torch_dtype})"))
        items.append(Item("fp32 master weights", total * 4, "the optimizer's copy"))
    elif shards > 1:
        note = f"1/{shards} of {total / 1e9:.2f}B x 4 B"
        items.append(sharded("weights (fp32 shards)", total * 4, note))
        # algorithms/torch/fsdp.py: one unit per decoder layer; the root unit (embeddings, head, final norm
        # of the policy and of a GPU reference) stays gathered from the first forward to the backward's end.
        models = 2 if s.reference and not s.reference_on_cpu else 1
        root = total - shape.layers * shape.layer_params()
        gathered = (2 * shape.layer_params() + models * root) * a
        items.append(
            Item(
                f"gathered weights ({s.torch_dtype})",
                gathered,
                f"two decoder layers, and the embeddings and head of {models} model(s)",
            )
        )
    else:
        items.append(Item("weights", total * 4, f"{total / 1e9:.2f}B x 4 B"))
    items.append(sharded("gradients (fp32)", trained * 4, ""))
    items.append(sharded("optimizer (AdamW, fp32)", trained * 8, "two moments"))
    if s.reference and not lora:
        if s.reference_on_cpu:
            items.append(Item("reference model", 0, "on CPU (reference_on_cpu)"))
        else:
            items.append(
                sharded(
                    "reference model",
                    total * a,
                    "frozen copy" + (f", 1/{shards} (sharded)" if shards > 1 else ""),
                )
            )
    elif s.reference:
        items.append(Item("reference model", 0, "the base with adapters disabled"))
    items = [for_each_model(item, s.num_models) for item in items]
    transient = activation_items(shape, s)
    if s.on_cpu:  # the step runs after backward has freed the activations: the larger of the two counts
        largest = shape.vocab * shape.hidden if not lora else shape.intermediate * s.lora_r
        step = Item("AdamW step temporaries", 2 * 4 * largest, "sqrt and division of the largest weight")
        if step.bytes > sum(item.bytes for item in transient):
            transient = [step]
    return items + transient


def for_each_model(item: Item, num_models: int) -> Item:
    """``item`` held once per LLM: its bytes times ``num_models``, said in its note."""
    if num_models == 1 or item.name.startswith("gathered"):  # gathered layers: one module at a time
        return item
    note = f"{item.note}; x {num_models} LLMs" if item.note else f"x {num_models} LLMs"
    return Item(item.name, item.bytes * num_models, note, item.host_bytes * num_models)


def activation_items(shape: ModelShape, s: LearnerSettings) -> list[Item]:
    """Saved activations of one micro-batch and the vocabulary-wide head tensors."""
    a = DTYPE_BYTES[s.torch_dtype]
    seq = s.prompt_tokens + s.response_tokens
    tokens = s.micro_batch_rows * seq
    per_layer = layer_activation_bytes_per_token(shape, a) * tokens
    if s.on_cpu:
        per_layer += 2 * s.micro_batch_rows * shape.heads * seq * seq * a
    if s.gradient_checkpointing:
        acts = Item(
            "activations (checkpointed)",
            shape.layers * shape.hidden * a * tokens + per_layer,
            f"layer inputs + one layer recomputed, {s.micro_batch_rows} x {seq} tokens",
        )
    else:
        acts = Item(
            "activations",
            shape.layers * per_layer,
            f"all {shape.layers} layers, {s.micro_batch_rows} x {seq} tokens",
        )
    resp_tokens = s.micro_batch_rows * s.response_tokens
    head_tokens = resp_tokens if not s.logprob_chunk_tokens else min(resp_tokens, s.logprob_chunk_tokens)
    head = Item(
        "log-prob/entropy head",
        head_tokens * shape.vocab * (a + 4 * _HEAD_FP32_TENSORS),
        f"{head_tokens} tokens x {shape.vocab} vocab"
        + (" (chunked)" if s.logprob_chunk_tokens else " (unchunked)"),
    )
    return [acts, head]


def critic_items(shape: ModelShape, s: LearnerSettings) -> list[Item]:
    """HiPER's critic on the learner (docs/hiper.md §Critic): a trunk of its own trained in full
    beside the policy, with the policy's dtype, sharding and checkpointing levers, and no reference;
    its three-value head replaces the vocabulary-wide head."""
    own = dataclasses.replace(s, reference=False, lora_r=None)
    items = [item for item in learner_items(shape, own) if item.name != "log-prob/entropy head"]
    return [dataclasses.replace(item, name=f"critic {item.name}") for item in items]


def env_runner_items(
    shape: ModelShape,
    *,
    torch_dtype: str,
    vllm: bool,
    gpu_bytes: int,
    vllm_utilization: float,
    num_envs: int,
    seq_tokens: int,
    num_models: int = 1,
) -> tuple[list[Item], list[str]]:
    """The env runner GPU's lines, and problems (a KV cache that cannot hold one sequence, engines
    that together claim more than the GPU). With ``num_models`` LLMs a runner holds each one's
    weights and, with vLLM, an engine per LLM, each claiming ``vllm_utilization`` of the GPU."""
    a = DTYPE_BYTES[torch_dtype]
    weights = shape.num_params() * a
    items = [Item("module weights (torch)", weights, "the RLModule's copy, loaded with weight syncs")]
    kv_per_seq = shape.kv_bytes_per_token(a) * seq_tokens
    problems: list[str] = []
    if vllm:
        budget = int(vllm_utilization * gpu_bytes)
        kv = budget - weights - VLLM_RESERVE_BYTES
        items += [
            Item("vLLM weights", weights, ""),
            Item("vLLM working reserve", VLLM_RESERVE_BYTES, "activations, sampler, CUDA graphs"),
            Item(
                "vLLM KV cache",
                max(kv, 0),
                f"{max(kv, 0) // kv_per_seq} of {num_envs} full-length sequences at once",
            ),
        ]
        items = [for_each_model(item, num_models) for item in items]
        if num_models * vllm_utilization > 1:
            problems.append(
                f"{num_models} vLLM engines (one per LLM) each claim vllm_gpu_memory_utilization="
                f"{vllm_utilization} of the GPU, {num_models * vllm_utilization:.2f} in all: set "
                f"model_config['vllm_gpu_memory_utilization'] <= {1 / num_models:.2f} minus the torch copies"
            )
        if kv < kv_per_seq:
            problems.append(
                f"vLLM's share of the GPU (vllm_gpu_memory_utilization={vllm_utilization}) leaves "
                f"{kv / GIB:.1f} GiB for the KV cache, less than one {seq_tokens}-token sequence "
                f"({kv_per_seq / GIB:.2f} GiB): raise model_config['vllm_gpu_memory_utilization']"
            )
    else:  # the LLMs generate one after another: one KV cache at a time
        items = [for_each_model(items[0], num_models)]
        items.append(Item("KV cache (HF generate)", kv_per_seq * num_envs, f"{num_envs} sequences"))
    return items, problems

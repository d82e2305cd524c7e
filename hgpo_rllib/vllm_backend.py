"""vLLM generation for LLMRLModule on GPU env runners.

Imported only when ``inference_backend`` resolves to "vllm" (never on CPU machines), which is why
vllm is imported at module level here. vLLM's engine runs in its own worker process, so new weights
reach it through ``collective_rpc`` on ``WeightLoaderExtension`` (the pattern of vLLM's
``examples/offline_inference/rlhf_utils.py``).
"""

from __future__ import annotations

import tempfile

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from vllm import LLM, SamplingParams


class WeightLoaderExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); runs inside the worker process."""

    def hgpo_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Load HF-named tensors; vLLM's ``load_weights`` maps them (q/k/v -> qkv_proj, tied heads, ...)."""
        self.model_runner.model.load_weights(weights=[(name, t.to(self.device)) for name, t in weights])


class VLLMGenerator:
    """A vLLM engine that samples exactly from softmax(logits / temperature) and returns its log-probs.

    ``logprobs_mode="processed_logprobs"`` makes the returned log-probs those of the tempered
    distribution actually sampled from (vLLM's default reports raw, untempered log-probs), and
    ``generation_config="vllm"`` stops a checkpoint's generation_config.json from changing top_k/top_p.
    """

    def __init__(
        self,
        lm: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_dir: str | None,
        *,
        dtype: str,
        gpu_memory_utilization: float,
        max_model_len: int,
        sampling_seed: int,
    ) -> None:
        self._tmpdir = None
        if model_dir is None:  # the in-memory tiny preset: vLLM can only load from a directory
            self._tmpdir = tempfile.TemporaryDirectory(prefix="hgpo-vllm-")
            lm.save_pretrained(self._tmpdir.name)
            tokenizer.save_pretrained(self._tmpdir.name)
        self._llm = LLM(
            model=model_dir or self._tmpdir.name,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=sampling_seed,
            enable_prefix_caching=True,
            skip_tokenizer_init=True,  # prompts arrive as token ids; responses are decoded by the module
            generation_config="vllm",
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.WeightLoaderExtension",
        )
        if model_dir is not None:  # the module's weights may already differ from the checkpoint's
            self.load_weights(lm)

    def load_weights(self, lm: PreTrainedModel) -> None:
        """Push the torch model's current weights into the engine and drop KV computed with old ones."""
        weights = [(name, t.detach().cpu()) for name, t in lm.state_dict().items()]
        self._llm.collective_rpc("hgpo_load_weights", args=(weights,))
        self._llm.reset_prefix_cache()

    def generate(
        self,
        prompts: list[list[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        stop_token_ids: list[int],
        pad_token_id: int,
        allowed_token_ids: list[list[int]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one response per prompt: (tokens [B, L], log-probs [B, L], lengths [B]), right-padded.

        ``allowed_token_ids`` holds each prompt's allowed tokens (None: the whole vocabulary).
        """
        allowed_rows = allowed_token_ids or [None] * len(prompts)
        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                min_p=0.0,
                max_tokens=max_new_tokens,
                logprobs=0,  # only the sampled token's log-prob
                stop_token_ids=stop_token_ids,
                allowed_token_ids=allowed,
                detokenize=False,
            )
            for allowed in allowed_rows
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
        return resp, logp, lengths

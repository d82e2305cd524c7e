"""The agent back out as GGUF (hgpo_rllib.rl_module.gguf_export, ``rllib export --format gguf``): a
real-model policy folder of SmolLM2 with changed ("trained") weights exports to a GGUF file that
transformers reads back into the same greedy tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from hgpo_rllib import cli
from hgpo_rllib.evaluation.policy_folder import policy_record
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD
from hgpo_rllib.rl_module.gguf_export import base_gguf, llama_rotary_layout
from hgpo_rllib.rl_module.model_sources import SOURCE_RECORD

CHECKPOINT = Path(__file__).parents[1] / "data" / "checkpoints" / "keychest_hgpo_0.1.0"
PROMPTS = ("Find me a red t-shirt under 20 dollars.", "Your task is to: put a clean mug in coffeemachine.")


def trained_policy_folder(smollm2_dir: Path, folder: Path) -> Path:
    """A policy folder of SmolLM2 whose every matrix moved by 5% of its spread (as training moves it)."""
    shutil.copytree(smollm2_dir, folder)
    weights = load_file(folder / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    moved = {
        name: w + torch.randn(w.shape, generator=generator) * w.std() * 0.05 if w.ndim == 2 else w
        for name, w in weights.items()
    }
    save_file(moved, folder / "model.safetensors", metadata={"format": "pt"})
    settings = {"env_config": {}, "history_length": 2, "max_prompt_tokens": 1024, "max_new_tokens": 32}
    (folder / POLICY_RECORD).write_text(json.dumps(policy_record("keychest", settings)))
    return folder


def greedy_tokens(model: torch.nn.Module, tokenizer: AutoTokenizer) -> list[list[int]]:
    tokens = []
    for prompt in PROMPTS:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False)
        ids = tokenizer(text + "<|im_start|>assistant\n", return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
        tokens.append(out[0, ids.shape[1] :].tolist())
    return tokens


def test_rllib_export_gguf_reproduces_the_policys_greedy_tokens(smollm2_dir: Path, tmp_path: Path) -> None:
    folder = trained_policy_folder(smollm2_dir, tmp_path / "policy")
    out = tmp_path / "exported"
    assert cli.main(["export", str(folder), str(out), "--format", "gguf"]) == 0
    exported = out / "exported.f16.gguf"
    reader = gguf.GGUFReader(exported)
    base = gguf.GGUFReader(base_gguf(smollm2_dir))
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_F16
    for key in ("tokenizer.chat_template", "tokenizer.ggml.tokens", "llama.rope.freq_base"):
        assert reader.fields[key].contents() == base.fields[key].contents()
    assert [t.name for t in reader.tensors] == [t.name for t in base.tensors]
    base_record = json.loads((smollm2_dir / SOURCE_RECORD).read_text())
    assert json.loads((out / SOURCE_RECORD).read_text()) == {
        "source": base_record["source"],
        "sha256": base_record["sha256"],
        "exported_from": str(folder.resolve()),
    }
    tokenizer = AutoTokenizer.from_pretrained(folder)
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True)
    back = AutoModelForCausalLM.from_pretrained(str(out), gguf_file=exported.name, dtype=torch.float32)
    assert greedy_tokens(back, tokenizer) == greedy_tokens(policy, tokenizer)


def test_the_rotary_layout_is_what_transformers_reverses() -> None:
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    weights = torch.arange(12 * 4, dtype=torch.float32).reshape(12, 4).numpy()
    for heads, kv_heads in ((3, 3), (3, 1)):
        stored = llama_rotary_layout(weights, kv_heads)
        assert (LlamaTensorProcessor()._reverse_permute_weights(stored, heads, kv_heads) == weights).all()
        assert not (stored == weights).all()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the 0.1.0 checkpoint names 0.2.0's moved paths
def test_gguf_export_of_a_model_from_no_gguf_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", str(CHECKPOINT), str(tmp_path / "out"), "--format", "gguf"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rllib:")]
    assert len(errors) == 1 and errors[0].endswith("model ('tiny-qwen2') was not converted from one")
    assert not (tmp_path / "out").exists()


def test_a_changed_base_file_is_refused(smollm2_dir: Path, tmp_path: Path) -> None:
    converted = tmp_path / "converted"
    converted.mkdir()
    record = json.loads((smollm2_dir / SOURCE_RECORD).read_text())
    (converted / SOURCE_RECORD).write_text(json.dumps({**record, "sha256": "0" * 64}))
    with pytest.raises(ValueError, match="is missing or changed since"):
        base_gguf(converted)
    with pytest.raises(ValueError, match="was not converted from a GGUF file"):
        base_gguf(tmp_path)

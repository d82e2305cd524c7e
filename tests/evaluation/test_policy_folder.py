"""A policy folder of a model converted from a GGUF file (hgpo_rllib.evaluation.policy_folder): the
exported folder records its base file, so it exports to GGUF again, yet is identified by its own
(trained) weights, so an adapter of the raw base is refused over it, and the reverse. The model is the
session's micro Qwen2 GGUF file (``qwen2_gguf``): it converts and exports in seconds."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from hgpo_rllib import cli
from hgpo_rllib.evaluation.policy_folder import export_policy, exported_record, policy_record
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD
from hgpo_rllib.rl_module.gguf_export import base_gguf
from hgpo_rllib.rl_module.model_sources import (
    ADAPTER_RECORD,
    SOURCE_RECORD,
    adapter_base,
    file_sha256,
    local_model_dir,
    model_sha256,
)
from hgpo_rllib.run_records import write_record


class Exported:
    """The raw conversion of the GGUF file, a trained policy folder of it and that folder's export."""

    def __init__(self, file: Path, tmp: Path):
        self.file, self.sha = file, file_sha256(file)
        self.base = local_model_dir(str(file), tmp / "cache")
        self.trained = Path(shutil.copytree(self.base, tmp / "trained"))  # the conversion's record too
        weights = load_file(self.trained / "model.safetensors")
        moved = {name: w + 0.01 for name, w in weights.items()}
        save_file(moved, self.trained / "model.safetensors", metadata={"format": "pt"})
        settings = {"env_config": {}, "history_length": 2, "max_prompt_tokens": 1024, "max_new_tokens": 32}
        write_record(self.trained / POLICY_RECORD, policy_record("keychest", settings))
        self.out = export_policy(self.trained, tmp / "exported", gguf_type="f16")
        self.own = hashlib.sha256(file_sha256(self.out / "model.safetensors").encode()).hexdigest()


@pytest.fixture(scope="module")
def exported(qwen2_gguf: tuple[Path, object, object], tmp_path_factory: pytest.TempPathFactory) -> Exported:
    return Exported(qwen2_gguf[0], tmp_path_factory.mktemp("policy_folder"))


def test_an_exported_folder_records_its_base_file_and_exports_to_gguf_again(
    exported: Exported, tmp_path: Path
) -> None:
    record = json.loads((exported.out / SOURCE_RECORD).read_text())
    assert record == {
        "source": str(exported.file),
        "sha256": exported.sha,
        "exported_from": str(exported.trained.resolve()),
    }
    assert base_gguf(exported.out) == exported.file and (exported.out / "exported.f16.gguf").is_file()
    again = tmp_path / "again"
    assert cli.main(["export", str(exported.out), str(again), "--format", "gguf", "--gguf-type", "q8_0"]) == 0
    assert json.loads((again / SOURCE_RECORD).read_text())["exported_from"] == str(exported.out.resolve())
    assert base_gguf(again) == exported.file and (again / "again.q8_0.gguf").is_file()


def test_an_exported_folder_is_identified_by_its_own_weights_the_conversion_by_its_file(
    exported: Exported,
) -> None:
    assert model_sha256(exported.base) == exported.sha
    assert model_sha256(exported.out) == exported.own != exported.sha
    # A copy of the conversion holds its record too, but maybe other weights (here it does).
    assert model_sha256(exported.trained) != exported.sha


def refusal(adapter: Path, recorded: str, base: Path, sha: str) -> str:
    return (
        f"{adapter} is a LoRA adapter of another base (sha256 {recorded[:12]}) than {str(base)!r} is here "
        f"({base}, sha256 {sha[:12]}): load it over the base it was trained on"
    )


def test_an_adapter_of_the_raw_base_is_refused_over_the_export_and_the_reverse(
    exported: Exported, tmp_path: Path
) -> None:
    """Only the base is resolved and checked here: the adapter's own files are not needed for that."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for base, recorded, accepted in [
        (exported.base, exported.sha, True),
        (exported.out, exported.sha, False),
        (exported.out, exported.own, True),
        (exported.base, exported.own, False),
    ]:
        write_record(adapter / ADAPTER_RECORD, {"base": str(base), "base_sha256": recorded})
        if accepted:
            assert adapter_base(adapter) == (base, recorded)
            continue
        with pytest.raises(ValueError) as err:
            adapter_base(adapter)
        assert str(err.value) == refusal(adapter, recorded, base, model_sha256(base))


def test_a_source_record_without_its_base_is_one_line(tmp_path: Path) -> None:
    (tmp_path / SOURCE_RECORD).write_text(json.dumps({"source": ["base.gguf"], "sha256": "0" * 64}))
    with pytest.raises(ValueError) as err:
        exported_record(tmp_path, tmp_path / "checkpoint")
    assert str(err.value) == f"{tmp_path / SOURCE_RECORD} must name the source and its sha256 as strings"

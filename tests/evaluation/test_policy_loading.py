"""A policy played in another dtype or engine than its own (``rllib evaluate --dtype
--inference-backend``): a policy folder's module is built in it, an algorithm checkpoint's restored
module cast to it, and what differs from the policy's own is kept for the evaluation's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import DATA, TINY_MODEL, TINY_VLLM_MODEL, VLLM_ENGINE_ARGS, build, keychest_config
from ray.rllib.core import DEFAULT_MODULE_ID

from hgpo_rllib.algorithms.torch import matmul_rate
from hgpo_rllib.evaluation import policy_loading
from hgpo_rllib.evaluation.policy_folder import export_policy
from hgpo_rllib.evaluation.policy_loading import CheckpointPolicy, played_as, weights_dtype
from hgpo_rllib.evaluation.rollout import play
from hgpo_rllib.rl_module.vllm_generation import VLLMGenerator

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: The committed checkpoint was saved by 0.1.0: its pickles name moved modules.
pytestmark = pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")
OWN = {"torch_dtype": None, "inference_backend": None}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A policy folder of the committed tiny KeyChest checkpoint (float32, engine "auto")."""
    return export_policy(CHECKPOINT, tmp_path_factory.mktemp("export") / "policy")


def dtypes(policy: CheckpointPolicy) -> set[torch.dtype]:
    """The dtypes of the policy's weights (a restored checkpoint's learner module also holds its frozen
    reference model, which plays no part)."""
    return {parameter.dtype for parameter in policy.module.lm.parameters()}


def test_only_what_differs_from_the_policys_own_is_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_loading, "resolve_inference_backend", lambda name: name)  # vLLM can run
    own = ("float32", "hf")
    assert played_as(*own, None, None) == OWN
    assert played_as(*own, "float32", "hf") == OWN
    assert played_as(*own, "bfloat16", "vllm") == {"torch_dtype": "bfloat16", "inference_backend": "vllm"}
    monkeypatch.setattr(policy_loading, "cpu_dtype", lambda: "bfloat16")  # a CPU with native bf16
    assert played_as(*own, "cpu", None) == {"torch_dtype": "bfloat16", "inference_backend": None}
    monkeypatch.setattr(policy_loading, "cpu_dtype", lambda: "float32")  # one without
    assert played_as(*own, "cpu", None) == OWN
    with pytest.raises(
        ValueError, match=r"dtype must be one of \('float32', 'bfloat16', 'cpu'\), got 'float16'"
    ):
        played_as(*own, "float16", None)

    def not_installed(name: str) -> str:
        raise ImportError("model_config['inference_backend']='vllm' but vLLM is not installed")

    monkeypatch.setattr(policy_loading, "resolve_inference_backend", not_installed)
    with pytest.raises(
        ValueError, match="^model_config\\['inference_backend'\\]='vllm' but vLLM is not installed$"
    ):
        played_as(*own, None, "vllm")


def test_a_policy_folder_is_built_in_the_dtype_asked_for(folder: Path) -> None:
    policy = CheckpointPolicy(folder, torch_dtype="bfloat16")
    assert dtypes(policy) == {torch.bfloat16} and policy.module.compute_dtype == torch.bfloat16
    assert policy.overrides == {"torch_dtype": "bfloat16", "inference_backend": None}
    assert policy.engine == {"torch_dtype": "bfloat16", "inference_backend": "hf"}
    own = CheckpointPolicy(folder, torch_dtype="float32", inference_backend="hf")  # its own, asked for
    assert dtypes(own) == {torch.float32} and own.overrides == OWN


def test_an_algorithm_checkpoints_module_is_cast_after_loading(folder: Path) -> None:
    """The restored module is the learner's (fully fine-tuned: float32 masters), so float32 is its own
    whatever its ``torch_dtype``; bfloat16 casts its policy weights after loading."""
    assert CheckpointPolicy(CHECKPOINT).engine == {"torch_dtype": "float32", "inference_backend": "hf"}
    policy = CheckpointPolicy(CHECKPOINT, torch_dtype="bfloat16")
    module = policy.module
    assert dtypes(policy) == {torch.bfloat16} and module.compute_dtype == torch.bfloat16
    assert (module.llm_config.torch_dtype, module.model_config["torch_dtype"]) == ("bfloat16", "bfloat16")
    assert policy.overrides == {"torch_dtype": "bfloat16", "inference_backend": None}
    assert policy.engine == {"torch_dtype": "bfloat16", "inference_backend": "hf"}
    # The same weights as the folder's, rounded once.
    from_folder = CheckpointPolicy(folder, torch_dtype="bfloat16").module.lm.state_dict()
    assert all(torch.equal(tensor, from_folder[name]) for name, tensor in module.lm.state_dict().items())


def test_a_learner_module_plays_in_float32_masters_or_under_lora_its_base_dtype() -> None:
    """What an algorithm checkpoint restores is the learner's module, so its own dtype is its weights':
    float32 masters when fully fine-tuned whatever its ``torch_dtype``, the frozen base in
    ``torch_dtype`` under LoRA (the first parameter, the embedding, is the base's)."""
    bf16 = {**TINY_MODEL, "torch_dtype": "bfloat16"}
    assert weights_dtype(build(**bf16)) == "float32"
    assert weights_dtype(build(**bf16, lora={"r": 4})) == "bfloat16"
    assert weights_dtype(build(inference_only=True, **bf16)) == "bfloat16"  # an env runner's


def notes(err: str) -> list[str]:
    """The notes among stderr's lines (Hugging Face's loading bars go there too)."""
    return [line for line in err.splitlines() if line.startswith("note:")]


def test_bfloat16_on_a_cpu_that_emulates_it_says_so_in_one_line(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(matmul_rate, "cpu_has_native_bf16", lambda: False)
    capsys.readouterr()
    CheckpointPolicy(folder)  # float32: nothing to say
    assert notes(capsys.readouterr().err) == []
    CheckpointPolicy(folder, torch_dtype="bfloat16")
    assert notes(capsys.readouterr().err) == [
        "note: this CPU has no native bfloat16 (AVX512_BF16 or AMX): the policy plays in bfloat16 "
        "emulated, slower than in float32"
    ]


def test_a_lora_checkpoint_sampled_with_hf_plays_in_bfloat16_with_vllm(
    tmp_path: Path, ray_session: None
) -> None:
    """What the real-model WebShop table asks of its checkpoints (``--eval-dtype cpu
    --eval-inference-backend vllm``): a LoRA policy trained with HF generation, restored from its
    algorithm checkpoint, cast to bfloat16 and played by a vLLM engine."""
    model = {**TINY_VLLM_MODEL, "lora": {"r": 4}, "vllm_engine_args": VLLM_ENGINE_ARGS}
    algo = keychest_config(remote_runners=0).rl_module(model_config=model).build_algo()

    def train_adapters(learner: Any) -> None:  # adapters that change the weights (B starts at 0)
        with torch.no_grad():
            for name, parameter in learner.module[DEFAULT_MODULE_ID].unwrapped().lm.named_parameters():
                if "lora_B" in name:
                    parameter.fill_(0.01)

    try:
        algo.learner_group.foreach_learner(train_adapters)
        checkpoint = algo.save_to_path(tmp_path / "checkpoint")
    finally:
        algo.stop()
    policy = CheckpointPolicy(checkpoint, torch_dtype="bfloat16", inference_backend="vllm")
    try:
        assert policy.overrides == {"torch_dtype": "bfloat16", "inference_backend": "vllm"}
        assert policy.engine == {"torch_dtype": "bfloat16", "inference_backend": "vllm"}
        # The engine loads the module's plain model: the adapters folded into the base's weights.
        base = CheckpointPolicy.from_config(
            keychest_config(remote_runners=0).rl_module(model_config=TINY_VLLM_MODEL)
        )
        name = "model.layers.0.self_attn.q_proj.weight"
        played, untrained = policy.module.lm.state_dict()[name], base.module.lm.state_dict()[name]
        assert not policy.module.uses_lora and played.dtype == torch.bfloat16
        assert not torch.equal(played, untrained.to(torch.bfloat16))
        records = play("keychest", {"max_steps": 2}, policy, [0, 1], batch_size=2)
        assert isinstance(policy.module.generator(), VLLMGenerator)
        assert [record["steps"] for record in records] == [2, 2] and policy.generated_tokens > 0
    finally:
        policy.module.close_generator()

"""Memory plan and memory levers (chunked log-probs, gradient checkpointing, CPU reference).

(The env worker pool: test_env_pool.py.)"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import CORPUS, build, train_batch
from transformers import AutoConfig, AutoModelForCausalLM

import envs
from hgpo_rllib import HGPOConfig, cli
from hgpo_rllib.experiments import memory_items, memory_plan
from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR
from hgpo_rllib.experiments.paper import apply_paper_preset, hiper_paper_config
from hgpo_rllib.experiments.settings import RunSettings
from hgpo_rllib.experiments.teams import team_config
from hgpo_rllib.model_shape import ModelShape
from hgpo_rllib.rl_module.logprobs import token_logp_entropy

# ----------------------------------------------------------------------------------- model sizes
PUBLISHED_PARAMS = {"qwen2.5-0.5b": 0.494e9, "qwen2.5-1.5b": 1.54e9, "qwen2.5-7b": 7.62e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_from_config_json_matches_transformers_and_the_model_card(name: str) -> None:
    model_dir = MODEL_CONFIGS_DIR / name
    shape = ModelShape.from_model_dir(model_dir)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    assert shape.num_params() == sum(p.numel() for p in lm.parameters())
    assert abs(shape.num_params() / PUBLISHED_PARAMS[name] - 1) < 0.01


def test_a_head_dim_of_its_own_sizes_the_attention_weights() -> None:
    """heads x head_dim != hidden (Llama's ``head_dim``): q, k, v and o follow head_dim, as the model does."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
    )  # fmt: skip
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    shape = ModelShape.from_config(config)
    assert (shape.attention_width, shape.kv_width) == (64, 32)
    # A layer: q and o 32 x 64, k and v 32 x 32, the MLP 3 x 32 x 48, two norms of 32: 10,816; two
    # layers, untied embeddings and head 2 x 64 x 32, the final norm: 25,760.
    assert shape.num_params() == sum(p.numel() for p in lm.parameters()) == 25_760
    assert shape.kv_bytes_per_token(2) == 2 * 2 * 32 * 2


def test_lora_parameter_count_matches_peft() -> None:
    from hgpo_rllib.rl_module.lora import add_adapters

    config = AutoConfig.from_pretrained(MODEL_CONFIGS_DIR / "qwen2.5-0.5b")
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    model = add_adapters(lm, {"r": 8, "alpha": 16, "target_modules": "all-linear", "dropout": 0.0})
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    shape = ModelShape.from_config(config.to_dict())
    assert shape.lora_weights(8, "all-linear") == trainable
    assert shape.lora_weights(8, ["q_proj", "v_proj"]) < trainable


def test_config_without_sizes_is_a_clear_error(tmp_path: Any) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 8}')
    with pytest.raises(ValueError, match="vocab_size"):
        ModelShape.from_model_dir(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        ModelShape.from_model_dir(tmp_path / "nowhere")


# ------------------------------------------------------------------------------------ the plan
def paper_config(preset: str, env: str = "alfworld") -> HGPOConfig:
    model = str(MODEL_CONFIGS_DIR / memory_plan.PRESET_MODELS[preset])
    return apply_paper_preset(HGPOConfig(), env, RunSettings(preset=preset, model=model))


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
@pytest.mark.parametrize("preset", ["paper-1.5b", "paper-7b"])
def test_every_paper_preset_fits_80_gb(preset: str, env: str) -> None:
    plans = memory_plan.plan_for_config(paper_config(preset, env), 80)
    assert {p.role for p in plans} == {"learner", "env runner"}
    assert memory_plan.fit_errors(plans) == []
    assert all(p.fits for p in plans)


def test_the_issue_numbers_and_the_levers_move_the_plan() -> None:
    """7B with DDP, a GPU reference and full activations is far over 80 GB (the issue's sums)."""
    config = (
        paper_config("paper-7b")
        .rl_module(
            model_config={
                "model": str(MODEL_CONFIGS_DIR / "qwen2.5-7b"),
                "torch_dtype": "bfloat16",
                "logprob_chunk_tokens": None,
            }
        )
        .training(learner_sharding="none", micro_batch_size=16)
    )
    (learner, _) = memory_plan.plan_for_config(config, 80)
    items = {item.name: item.bytes / 1e9 for item in learner.items}
    assert items["weights"] == pytest.approx(15.2, abs=0.1)  # bf16
    assert items["reference model"] == pytest.approx(15.2, abs=0.1)
    assert items["gradients (fp32)"] + items["optimizer (AdamW, fp32)"] + items["fp32 master weights"] == (
        pytest.approx(122, abs=1)
    )
    # The issue's "about 5 GB per tensor": 16 x 512 tokens x 152k vocabulary in fp32.
    per_fp32_tensor = items["log-prob/entropy head"] / (2 + 4 * memory_items._HEAD_FP32_TENSORS) * 4
    assert per_fp32_tensor == pytest.approx(5.0, abs=0.1)
    errors = memory_plan.fit_errors([learner])
    assert len(errors) == 1 and "model_config['lora']" in errors[0] and "reference_on_cpu" in errors[0]
    levers = paper_config("paper-7b")
    (fitted, _) = memory_plan.plan_for_config(levers, 80)
    assert fitted.total_bytes < learner.total_bytes / 3


def test_validate_refuses_a_layout_that_cannot_fit_and_names_the_setting() -> None:
    paper_config("paper-7b").validate()  # the preset itself passes: sharded, offloaded full fine-tuning
    replicated = paper_config("paper-7b").training(learner_sharding="none", learner_offload=False)
    with pytest.raises(ValueError, match=r"memory plan: the learner needs .*model_config\['lora'\]"):
        replicated.validate()
    # Sharding trains the full model: with LoRA it is refused.
    lora = paper_config("paper-7b")
    lora.rl_module(model_config={**lora.user_model_config(), "lora": {"r": 64}})
    with pytest.raises(ValueError, match=r"learner_sharding.*model_config\['lora'\]"):
        lora.validate()
    # Sharding without offload halves weights, gradients, AdamW state and reference, yet still misses
    # 80 GB at the paper's micro-batch; the error names the offload lever.
    sharded = paper_config("paper-7b").training(learner_offload=False)
    (learner, _) = memory_plan.plan_for_config(sharded, 80)
    items = {item.name: item.bytes / 1e9 for item in learner.items}
    assert items["weights (fp32 shards)"] == pytest.approx(15.2, abs=0.1)
    assert items["optimizer (AdamW, fp32)"] == pytest.approx(30.5, abs=0.1)
    assert items["reference model"] == pytest.approx(7.6, abs=0.1)
    assert learner.host_bytes == 0 and learner.total_bytes / 1e9 == pytest.approx(95, abs=1)
    with pytest.raises(ValueError, match="memory plan: the learner needs.*learner_offload=True"):
        sharded.validate()


def test_offload_moves_the_sharded_state_to_host_ram_and_keeps_the_rest_on_the_gpu() -> None:
    """paper-7b: the fp32 shards, gradients, AdamW moments and reference shards (the issue's sums, halved)
    leave the GPU for host RAM; gathered layers, activations and the head stay."""
    offloaded = paper_config("paper-7b")
    (learner, _) = memory_plan.plan_for_config(offloaded, 80)
    (resident, _) = memory_plan.plan_for_config(paper_config("paper-7b").training(learner_offload=False), 80)
    gpu = {item.name: item.bytes for item in learner.items}
    host = {item.name: item.host_bytes for item in learner.items}
    moved = ("weights (fp32 shards)", "gradients (fp32)", "optimizer (AdamW, fp32)", "reference model")
    for item in resident.items:
        if item.name in moved:
            assert (gpu[item.name], host[item.name]) == (0, item.bytes), item.name
        else:
            assert (gpu[item.name], host[item.name]) == (item.bytes, 0), item.name
    assert learner.host_bytes / 1e9 == pytest.approx(15.2 + 15.2 + 30.5 + 7.6, abs=0.2)
    assert learner.total_bytes / 1e9 == pytest.approx(26.9, abs=0.1) and learner.fits
    assert "host RAM per learner" in memory_plan.format_plan([learner])
    # Offload applies to sharded learners only: a replicated plan ignores it.
    single = memory_items.learner_items(
        ModelShape.from_model_dir(MODEL_CONFIGS_DIR / "qwen2.5-7b"),
        memory_items.LearnerSettings(offload=True),
    )
    assert all(item.host_bytes == 0 for item in single) and single[1].name == "fp32 master weights"


def test_vllm_share_too_small_for_one_sequence_is_refused() -> None:
    config = paper_config("paper-7b")
    config.rl_module(model_config={**config.user_model_config(), "vllm_gpu_memory_utilization": 0.2})
    errors = memory_plan.fit_errors(memory_plan.plan_for_config(config, 80))
    assert any("vllm_gpu_memory_utilization" in e and "KV cache" in e for e in errors)


def rllib_memory(*args: str) -> int:
    """``rllib memory ARGS`` through the ``rllib`` command's main function."""
    return cli.main(["memory", *args])


def test_memory_cli_prints_each_role_and_says_it_fits(capsys: pytest.CaptureFixture[str]) -> None:
    assert rllib_memory("tuned_examples/hgpo_alfworld.py", "--preset", "paper-7b") == 0
    out = capsys.readouterr().out
    assert "learner (2 GPUs)" in out and "env runner (2 GPUs)" in out and "DOES NOT FIT" not in out
    assert "vLLM KV cache" in out and "optimizer (AdamW, fp32)" in out
    small = ["tuned_examples/hgpo_alfworld.py", "--preset", "paper-7b", "--gpu-memory-gb", "30"]
    assert rllib_memory(*small) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out


@pytest.mark.parametrize("example", ["hgpo_alfworld", "hiper_alfworld", "drmas_webshop"])
def test_memory_cli_counts_a_critic_for_hiper_only(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI names a default critic for every paper preset, but only HiPER's config takes it (an
    HGPO plan once counted a 1.5B critic it does not have and said paper-1.5b did not fit)."""
    assert rllib_memory(f"tuned_examples/{example}.py", "--preset", "paper-1.5b") == 0
    out = capsys.readouterr().out
    assert ("critic weights" in out) == (example == "hiper_alfworld") and "DOES NOT FIT" not in out


def test_rllib_memory_is_a_subcommand_of_the_rllib_command(capsys: pytest.CaptureFixture[str]) -> None:
    """``rllib memory --help`` lists the plan's options; the CPU preset has nothing to plan (exit 0)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["memory", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rllib memory [-h]") and "--preset" in out and "--gpu-memory-gb" in out
    assert rllib_memory("tuned_examples/hgpo_alfworld.py") == 0
    assert capsys.readouterr().out == "no role of this config uses a GPU (CPU run): nothing to plan\n"


def test_a_model_named_as_training_names_it_is_planned_from_its_directory(
    smollm2_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GGUF short name is planned from the directory training loads (the plan once read
    ``smollm2-135m-instruct/config.json`` and refused every GPU run of a GGUF model or warm start); a
    CPU run, whose model is then the shipped warm start's adapter folder, reads no model at all."""
    gpu = ["tuned_examples/hgpo_webshop.py", "--preset", "gpu-0.5b", "--model", "smollm2-135m-instruct"]
    assert rllib_memory(*gpu) == 0
    assert "(0.13B parameters)" in capsys.readouterr().out
    assert rllib_memory("tuned_examples/hgpo_webshop.py", "--model", "smollm2-135m-instruct") == 0
    assert capsys.readouterr().out.endswith("no role of this config uses a GPU (CPU run): nothing to plan\n")
    config = paper_config("gpu-0.5b", "webshop")
    config.rl_module(model_config={**config.user_model_config(), "model": "smollm2-135m-instruct"})
    config.validate()  # the memory check of a GPU run resolves the name as the model check does
    resolved: list[str] = []
    (shared,) = memory_plan.plan_for_config(config, 80, lambda name: resolved.append(name) or smollm2_dir)
    assert resolved == ["smollm2-135m-instruct"]  # once, for the learner and both kinds of runner
    assert shared.fits and memory_plan.shape_for_config(config, lambda name: smollm2_dir).num_params() == (
        ModelShape.from_model_dir(smollm2_dir).num_params()
    )


# ------------------------------------------------------------------------- chunked log-probs
@pytest.mark.parametrize("allowed_kind", [None, "vocab", "rows"])
def test_chunked_logp_and_entropy_equal_unchunked_values_and_grads(allowed_kind: str | None) -> None:
    torch.manual_seed(0)
    rows, width, hidden, vocab = 3, 7, 16, 50
    head = torch.nn.Linear(hidden, vocab, bias=False)
    states = torch.randn(rows, width, hidden)
    tokens = torch.randint(0, vocab, (rows, width))
    mask = (torch.rand(rows, width) > 0.3).long()
    masks = {None: None, "vocab": torch.rand(vocab) > 0.5, "rows": torch.rand(rows, vocab) > 0.5}
    allowed = masks[allowed_kind]
    if allowed is not None:  # allowed tokens include the sampled ones, as in sampling
        allowed = allowed.clone()
        if allowed.dim() == 1:
            allowed[tokens.flatten()] = True
        else:
            allowed[torch.arange(rows)[:, None].expand(-1, width), tokens] = True

    def run(chunk: int | None) -> tuple[torch.Tensor, ...]:
        head.zero_grad()
        x = states.clone().requires_grad_(True)
        logp, ent = token_logp_entropy(
            x, head, tokens, mask, temperature=0.7, allowed=allowed, chunk_tokens=chunk
        )
        (logp.sum() * 0.3 + (ent * torch.arange(width)).sum()).backward()
        return logp.detach(), ent.detach(), x.grad.clone(), head.weight.grad.clone()

    # A direct [rows, width, vocab] computation as the reference.
    logits = head(states).float() / 0.7
    if allowed is not None:
        logits = logits.masked_fill(~(allowed if allowed.dim() == 1 else allowed[:, None]), -1e9)
    logp_all = logits.log_softmax(-1)
    want_logp = logp_all.gather(-1, tokens[..., None])[..., 0] * mask
    want_ent = -(logp_all.exp() * logp_all).sum(-1) * mask
    full = run(None)
    torch.testing.assert_close(full[0], want_logp)
    torch.testing.assert_close(full[1], want_ent)
    for chunk in (1, 4, 1000):
        for got, want in zip(run(chunk), full, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _grads_and_outputs(module: Any, batch: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    module.lm.zero_grad()
    out = module.forward_train(batch)
    (out["logp"].sum() + out["entropy"].sum()).backward()
    grads = {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in out.items()}, grads


def test_module_chunking_and_gradient_checkpointing_keep_values_and_grads() -> None:
    plain = build(logprob_chunk_tokens=None)
    prompts = plain.encode_prompts(["go", CORPUS[1], CORPUS[2][:40]])
    torch.manual_seed(1)
    batch = train_batch(prompts, plain.forward_exploration(prompts))
    want_out, want_grads = _grads_and_outputs(plain.train(), batch)
    for levers in ({"logprob_chunk_tokens": 5}, {"gradient_checkpointing": True, "logprob_chunk_tokens": 3}):
        module = build(**levers).train()
        module.lm.load_state_dict(plain.lm.state_dict())
        if levers.get("gradient_checkpointing"):
            assert module.lm.is_gradient_checkpointing
        out, grads = _grads_and_outputs(module, batch)
        for key in want_out:
            torch.testing.assert_close(out[key], want_out[key], rtol=1e-5, atol=1e-6)
        assert grads.keys() == want_grads.keys() and len(grads) > 10
        for name in grads:
            # Chunked sums add in another order: fp32 rounding of the largest gradients (~1e-2) is
            # ~1e-9 relative each, but a near-zero element can be off by 1e-6 absolute (seen once in
            # 40k): the bound scales with the tensor's own magnitude.
            scale = float(want_grads[name].abs().max())
            torch.testing.assert_close(grads[name], want_grads[name], rtol=1e-4, atol=1e-4 * scale + 1e-7)


def test_reference_on_cpu_gives_the_same_log_probs_and_stays_out_of_state() -> None:
    on_gpu_side = build(kl_coeff=0.01)
    on_cpu = build(kl_coeff=0.01, reference_on_cpu=True)
    assert not any(k.startswith("ref_lm.") for k in on_cpu.state_dict())
    assert any(k.startswith("ref_lm.") for k in on_gpu_side.state_dict())
    prompts = on_cpu.encode_prompts(["go", CORPUS[3]])
    batch = train_batch(prompts, on_cpu.forward_exploration(prompts))
    torch.testing.assert_close(on_cpu.compute_ref_logp(batch), on_gpu_side.compute_ref_logp(batch))
    with pytest.raises(ValueError, match="reference_on_cpu"):
        build(kl_coeff=0.01, reference_on_cpu=True, lora={"r": 4})


@pytest.mark.parametrize(
    ("key", "value"),
    [("gradient_checkpointing", "yes"), ("logprob_chunk_tokens", 0), ("reference_on_cpu", 1)],
)
def test_bad_memory_settings_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        build(**{key: value})


@pytest.mark.parametrize("env", ["alfworld", "webshop"])
@pytest.mark.parametrize("preset", ["paper-1.5b", "paper-7b"])
def test_hiper_presets_plan_the_critic_and_fit_80_gb(preset: str, env: str) -> None:
    """HiPER's presets: the authors' settings, and the critic (Qwen2.5-1.5B, as the authors paired
    with the 7B policy) in the learner's plan; both fit (paper-1.5b over two FSDP learners)."""
    model, critic = (str(MODEL_CONFIGS_DIR / memory_plan.PRESET_MODELS[p]) for p in (preset, "paper-1.5b"))
    config = hiper_paper_config(env, RunSettings(preset=preset, model=model, critic=critic))
    assert config.model_config["critic"] == critic and config.env_config["answer_format"] == "plan_execute"
    assert (config.group_size, config.groups_per_iteration, config.env_config["max_steps"]) == (1, 128, 50)
    assert (config.keep_penalty, config.bootstrap_truncated) == (
        (-3.5, False) if env == "webshop" else (-0.3, True)
    )
    assert config.learner_sharding == "fsdp" and config.num_learners == 2
    plans = memory_plan.plan_for_config(config, 80)
    (learner,) = [p for p in plans if p.role == "learner"]
    critic_lines = [item for item in learner.items if item.name.startswith("critic ")]
    assert {item.name for item in critic_lines} >= {
        "critic gradients (fp32)",
        "critic optimizer (AdamW, fp32)",
    }
    assert memory_plan.fit_errors(plans) == []
    without_critic = memory_plan.plan_for_config(
        paper_config(preset, env).learners(num_learners=2).training(learner_sharding="fsdp"), 80
    )
    assert learner.total_bytes > [p for p in without_critic if p.role == "learner"][0].total_bytes


def test_several_llms_multiply_the_held_state_but_not_one_pass_s_activations() -> None:
    """Dr. MAS with one LLM per role (docs/drmas.md): the learner holds every module's weights,
    gradients, AdamW state and reference, and updates the modules one after another; each runner
    holds every module's copy and, with vLLM, an engine per module, whose GPU shares must add up."""
    single = paper_config("paper-1.5b", "webshop")
    team = copy.deepcopy(single).multi_agent(
        policies={"verifier", "searcher", "buyer"}, policy_mapping_fn=lambda agent_id, *a, **k: agent_id
    )
    assert memory_plan.num_llms(single) == 1 and memory_plan.num_llms(team) == 3
    (one_learner, one_runner), (team_learner, team_runner) = (
        memory_plan.plan_for_config(c, 80) for c in (single, team)
    )
    one = {item.name: item.bytes for item in one_learner.items}
    three = {item.name: item.bytes for item in team_learner.items}
    assert one.keys() == three.keys()
    for name in one:
        transient = name.startswith(("activations", "log-prob", "gathered"))
        assert three[name] == (one[name] if transient else 3 * one[name]), name
    runner = {item.name: item.bytes for item in team_runner.items}
    assert runner["vLLM weights"] == 3 * {i.name: i.bytes for i in one_runner.items}["vLLM weights"]
    for share, too_much in ((0.5, True), (0.25, False)):
        shared = copy.deepcopy(team).rl_module(
            model_config={**team.user_model_config(), "vllm_gpu_memory_utilization": share}
        )
        (_, runner_plan) = memory_plan.plan_for_config(shared, 80)
        claimed = [p for p in runner_plan.problems if "3 vLLM engines" in p and "1.50 in all" in p]
        assert bool(claimed) == too_much


@pytest.mark.parametrize("env", ["webshop_team", "alfworld_team"])
@pytest.mark.parametrize(
    ("preset", "sharing"), [("paper-1.5b", "shared"), ("paper-1.5b", "separate"), ("paper-7b", "shared")]
)
def test_every_team_paper_preset_fits_80_gb(env: str, preset: str, sharing: str) -> None:
    """The Dr. MAS examples' GPU presets (docs/drmas.md): one learner (teams run on one so far), the
    game's paper settings for every role, LoRA where full fine-tuning of the team does not fit."""
    model = str(MODEL_CONFIGS_DIR / memory_plan.PRESET_MODELS[preset])
    config = team_config(env, {}, RunSettings(preset=preset, model=model, llm_sharing=sharing))
    roles = envs.env_class(env).ROLES
    assert memory_plan.num_llms(config) == (1 if sharing == "shared" else len(roles))
    assert config.num_learners == 1 and config.evaluation_num_env_runners == 1
    assert config.env_config["max_steps"] == (50 if env == "alfworld_team" else 30)
    assert ("lora" in config.user_model_config()) == (sharing == "separate" or preset == "paper-7b")
    plans = memory_plan.plan_for_config(config, 80)
    assert memory_plan.fit_errors(plans) == [] and all(p.fits for p in plans)
    assert config.validate() is None  # the whole config check, memory included


def test_a_team_of_7b_llms_one_per_role_is_refused_with_the_way_out() -> None:
    model = str(MODEL_CONFIGS_DIR / memory_plan.PRESET_MODELS["paper-7b"])
    with pytest.raises(ValueError, match="does not fit: 3 7B vLLM engines .* set --llm-sharing shared"):
        team_config("webshop_team", {}, RunSettings(preset="paper-7b", model=model))


# ------------------------------------------------------------------------- the one-GPU preset
def test_gpu_0_5b_shares_one_80_gb_gpu_and_the_plan_sums_its_three_tenants() -> None:
    """``--preset gpu-0.5b``: the learner, the env runner and the evaluation env runner hold one GPU
    (Ray shares 0.5, 0.25, 0.25), so the plan is one GPU's sum: the learner's full fine-tuning of
    Qwen2.5-0.5B at ALFWorld's micro-batch of 16 x 4,608 tokens, and per runner a torch copy and a
    vLLM engine of 0.2 of the GPU (16 GB of 80)."""
    config = paper_config("gpu-0.5b")
    (plan,) = memory_plan.plan_for_config(config, 80)
    assert (plan.role, plan.num_gpus, plan.budget_bytes) == (memory_plan.SHARED_GPU_ROLE, 1, 80 * 10**9)
    gb = {item.name: round(item.bytes / 1e9, 2) for item in plan.items}
    n = ModelShape.from_model_dir(MODEL_CONFIGS_DIR / "qwen2.5-0.5b").num_params()
    assert n == 494_032_768
    assert gb["learner: weights"] == round(2 * n / 1e9, 2) == 0.99  # bf16
    assert gb["learner: fp32 master weights"] == gb["learner: gradients (fp32)"] == 1.98
    assert gb["learner: optimizer (AdamW, fp32)"] == 3.95 and gb["learner: reference model"] == 0.99
    # 24 layer inputs of 16 x 4,608 tokens x 896 x 2 B, plus one layer recomputed (73,984 B a token).
    assert gb["learner: activations (checkpointed)"] == round((24 * 896 * 2 + 73_984) * 16 * 4608 / 1e9, 2)
    assert gb["learner: log-prob/entropy head"] == round(1024 * 151_936 * 22 / 1e9, 2) == 3.42
    for runner in ("env runner", "evaluation env runner"):
        engine = sum(v for k, v in gb.items() if k.startswith(f"{runner}: vLLM"))
        assert round(engine, 1) == 16.0  # vllm_gpu_memory_utilization=0.2 of 80 GB
        assert gb[f"{runner}: module weights (torch)"] == 0.99
    assert round(plan.total_bytes / 1e9, 1) == 55.9 and plan.fits
    assert memory_plan.fit_errors([plan]) == []
    # WebShop's micro-batch of 4 leaves more room.
    (webshop,) = memory_plan.plan_for_config(paper_config("gpu-0.5b", "webshop"), 80)
    assert round(webshop.total_bytes / 1e9, 1) == 49.4 and webshop.fits
    # The engines' shares scale with the GPU, the learner does not: on 36 GB it no longer fits, and
    # the error names the shared GPU's levers.
    (small,) = memory_plan.plan_for_config(config, 36)
    (error,) = memory_plan.fit_errors([small])
    assert error.startswith(f"the {memory_plan.SHARED_GPU_ROLE} needs 38.3 GB per GPU but has 36 GB")
    assert "vllm_gpu_memory_utilization" in error and "micro_batch_size" in error


def test_gpu_0_5b_fits_the_memory_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """``rllib memory tuned_examples/hgpo_alfworld.py --preset gpu-0.5b``: the shipped
    Qwen2.5-0.5B architecture by default, one shared GPU, fits 80 GB."""
    assert rllib_memory("tuned_examples/hgpo_alfworld.py", "--preset", "gpu-0.5b") == 0
    out = capsys.readouterr().out
    assert "(0.49B parameters)" in out and f"{memory_plan.SHARED_GPU_ROLE} (1 GPU), per GPU:" in out
    assert "evaluation env runner: vLLM KV cache" in out and "55.9" in out and "DOES NOT FIT" not in out


@pytest.mark.slow
def test_gpu_0_5b_learner_micro_batch_runs_on_a_random_init_qwen2_5_0_5b(tmp_path: Any) -> None:
    """The preset's learner module on a random-init model of Qwen2.5-0.5B's shape (its config.json,
    151,936-token vocabulary; a small tokenizer, since no Qwen tokenizer is downloaded): one
    micro-batch of the preset's 16 rows with short sequences (24 prompt + 8 response tokens), forward
    with the reference's log-probs and backward, with the preset's levers (gradient checkpointing,
    chunked head, KL reference). In float32: the preset's bf16 is for GPUs, and on a CPU without
    AVX512_BF16 bf16 is emulated (on an AVX2 machine a bf16 run was stopped unfinished after 13
    minutes). Measured 119 s (138 s with collection, peak RSS 8.1 GB) on 2 cores shared under load 8."""
    import gc
    import json

    import gymnasium as gym
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from transformers import Qwen2Config

    from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule
    from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

    architecture = json.loads((MODEL_CONFIGS_DIR / "qwen2.5-0.5b" / "config.json").read_text())
    tokenizer = build_tiny_tokenizer(CORPUS, 512)
    architecture.update(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(Qwen2Config(**architecture), torch_dtype=torch.bfloat16)
    model_dir = tmp_path / "qwen2.5-0.5b-random"
    lm.save_pretrained(model_dir)  # bf16, as the released weights
    tokenizer.save_pretrained(model_dir)
    del lm
    gc.collect()
    preset = paper_config("gpu-0.5b")
    model_config = preset.user_model_config()
    assert (model_config["torch_dtype"], preset.micro_batch_size, preset.kl_coeff) == ("bfloat16", 16, 0.01)
    config = preset.rl_module(
        model_config={**model_config, "model": str(model_dir), "torch_dtype": "float32"}
    )
    config.training(max_prompt_tokens=24, max_new_tokens=8)
    rows = config.micro_batch_size
    module = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=gym.spaces.Text(8),
        action_space=gym.spaces.Text(8),
        model_config=config.model_config,
    ).build()
    module.train()
    assert module.lm.config.vocab_size == 151_936 and module.lm.is_gradient_checkpointing
    assert sum(p.numel() for p in module.lm.parameters()) == 494_032_768
    assert module.llm_config.logprob_chunk_tokens == 1024 and hasattr(module, "ref_lm")
    prompt_ids = torch.randint(3, 500, (rows, 24))
    resp_ids = torch.randint(3, 500, (rows, 8))
    batch = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "resp_ids": resp_ids,
        "resp_mask": torch.ones_like(resp_ids),
    }
    out = module.forward_train(batch)
    ref_logp = module.compute_ref_logp(batch)
    assert out["logp"].shape == out["entropy"].shape == ref_logp.shape == (rows, 8)
    # A random init is near uniform over the vocabulary: log-probs near -log(151,936) = -11.93.
    assert -12.5 < float(out["logp"].mean()) < -11.5 and 11.0 < float(out["entropy"].mean()) < 11.94
    assert float((out["logp"] - ref_logp).abs().max()) < 1e-4  # the reference is the initial policy
    advantages = torch.linspace(-1, 1, rows).unsqueeze(1)
    kl = (out["logp"] - ref_logp).mean()
    loss = -(out["logp"] * advantages).mean() + 0.01 * kl - 0.001 * out["entropy"].mean()
    loss.backward()
    grads = [p.grad for p in module.lm.parameters() if p.requires_grad]
    assert len(grads) == 290 and all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert float(module.lm.get_output_embeddings().weight.grad.abs().sum()) > 0

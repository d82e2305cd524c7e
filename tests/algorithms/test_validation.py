"""HGPOConfig validation (hgpo_rllib.algorithms.validation, HGPOConfig.setting_errors and the shared
value checks of hgpo_rllib.checks): the paper's defaults are valid, every bad setting is named with its
value, and everything is checked before any process starts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import envs
from hgpo_rllib import HGPOConfig
from hgpo_rllib.checks import is_bool, is_int, is_lr, is_number, is_text_list
from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR

#: A Qwen2.5-1.5B model directory holding only its config.json (enough for validate()).
QWEN_1_5B = str(MODEL_CONFIGS_DIR / "qwen2.5-1.5b")


def _valid_config() -> HGPOConfig:
    return HGPOConfig().environment("keychest").env_runners(num_envs_per_env_runner=8)


def test_default_config_is_the_papers_and_valid() -> None:
    config = _valid_config()
    config.validate()
    assert (config.lr, config.weight_decay, config.grad_clip) == (1e-6, 0.01, 1.0)
    assert config.grad_clip_by == "global_norm"
    assert (config.minibatch_size, config.num_epochs, config.gamma, config.group_size) == (256, 1, 0.95, 8)
    assert (config.clip_param, config.dual_clip) == (0.2, 3.0)
    assert (config.recompute_old_logp, config.old_logp_gap_threshold, config.length_buckets) == (
        True,
        1e-4,
        True,
    )
    config.copy().training(recompute_old_logp="auto", old_logp_gap_threshold=0).validate()
    assert config.skip_zero_advantage_rows is True
    assert (config.kl_coeff, config.entropy_coeff) == (0.01, 0.001)
    assert (config.max_prompt_tokens, config.max_new_tokens, config.temperature) == (4096, 512, 1.0)
    assert (config.estimator, config.history_length, config.adv_mode, config.eval_temperature) == (
        "hgpo",
        2,
        "mean_std_norm",
        0.4,
    )
    model_config = config.model_config
    assert model_config["kl_coeff"] == 0.01 and model_config["max_new_tokens"] == 512
    assert config.min_new_tokens == model_config["min_new_tokens"] == 0
    assert model_config["tokenizer_corpus"] == envs.get_tokenizer_corpus("keychest")
    no_corpus = _valid_config().rl_module(model_config={"model": "/some/hf/dir"}).model_config
    assert "tokenizer_corpus" not in no_corpus and no_corpus["model"] == "/some/hf/dir"


BAD_SETTINGS = [
    ({"estimator": "ppo"}, "estimator"),
    ({"history_length": -1}, "history_length"),
    ({"adv_mode": "std"}, "adv_mode"),
    ({"length_weight_alpha": -1.0}, "length_weight_alpha"),
    ({"base_group": "yes"}, "base_group"),
    ({"weighting": "uniform"}, "weighting"),
    ({"weighting": "adaptive", "base_group": True}, "base_group"),
    ({"group_size": 0}, "group_size"),
    ({"groups_per_iteration": 0}, "groups_per_iteration"),
    ({"gamma": 1.5}, "gamma"),
    ({"invalid_action_penalty": -0.1}, "invalid_action_penalty"),
    ({"clip_param": 0.0}, "clip_param"),
    ({"dual_clip": 1.0}, "dual_clip"),
    ({"kl_coeff": -0.01}, "kl_coeff"),
    ({"entropy_coeff": -1.0}, "entropy_coeff"),
    ({"weight_decay": -1.0}, "weight_decay"),
    ({"lr": 0.0}, "lr"),
    ({"lr": [[0, 1e-3], [0, 1e-4]]}, "lr"),  # a schedule's steps increase
    ({"minibatch_size": 0}, "minibatch_size"),
    ({"micro_batch_size": 0}, "micro_batch_size"),
    ({"minibatches_per_module": 0}, "minibatches_per_module"),
    ({"num_epochs": 0}, "num_epochs"),
    ({"max_prompt_tokens": 0}, "max_prompt_tokens"),
    ({"prompt_turns": "system"}, "prompt_turns"),
    ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"min_new_tokens": -1}, "min_new_tokens"),
    ({"min_new_tokens": 513}, "min_new_tokens"),  # above max_new_tokens
    ({"temperature": 0.0}, "temperature"),
    ({"eval_temperature": -0.1}, "eval_temperature"),
    ({"recompute_old_logp": 1}, "recompute_old_logp"),
    ({"recompute_old_logp": "always"}, "recompute_old_logp"),
    ({"old_logp_gap_threshold": -1e-4}, "old_logp_gap_threshold"),
    ({"old_logp_gap_threshold": "1e-4"}, "old_logp_gap_threshold"),
    ({"length_buckets": 1}, "length_buckets"),
    ({"skip_zero_advantage_rows": 1}, "skip_zero_advantage_rows"),
    ({"async_sampling": True, "recompute_old_logp": "auto"}, "recompute_old_logp"),
    ({"async_sampling": 1}, "async_sampling"),
    ({"behaviour_weight_cap": 0.5}, "behaviour_weight_cap"),
    ({"learner_matmul_gflops": -1.0}, "learner_matmul_gflops"),
    ({"learner_matmul_gflops": "fast"}, "learner_matmul_gflops"),
    ({"async_sampling": True, "recompute_old_logp": False}, "recompute_old_logp"),
    ({"group_size": 3}, "num_envs_per_env_runner"),
    # Non-finite numbers would turn the weights into NaN without an error.
    *[
        ({name: value}, name)
        for value in (np.inf, -np.inf, np.nan)
        for name in (
            "length_weight_alpha",
            "step_advantage_w",
            "invalid_action_penalty",
            "kl_coeff",
            "entropy_coeff",
            "weight_decay",
            "lr",
            "temperature",
            "grad_clip",
            "dual_clip",
            "gamma",
            "clip_param",
            "behaviour_weight_cap",
            "learner_matmul_gflops",
            "old_logp_gap_threshold",
        )
    ],
    ({"lr": [[0, 1e-3], [100, np.inf]]}, "lr"),
    ({"step_advantage_w": -1.0}, "step_advantage_w"),
    ({"micro_batch_size": 32, "minibatch_size": 16}, "micro_batch_size"),
    ({"max_prompt_tokens": 10**9}, "max_prompt_tokens"),
    ({"max_prompt_tokens": 32_700}, "max_prompt_tokens"),  # + 512 new tokens > the tiny model's 32768
    ({"length_weight_alpha": 1e4, "history_length": 4}, "length_weight_alpha"),  # 6.0**1e4 overflows
]


def test_validate_accepts_a_learning_rate_schedule() -> None:
    config = _valid_config().training(lr=[[0, 1e-3], [40_000, 1e-4]])
    config.validate()
    assert config.lr == [[0, 1e-3], [40_000, 1e-4]]
    with pytest.raises(ValueError, match=r"HGPOConfig: lr=\[\[0, 0.001\], \[0, 0.0001\]\]"):
        _valid_config().training(lr=[[0, 1e-3], [0, 1e-4]]).validate()


def test_validate_accepts_numpy_scalars() -> None:
    """Tune's search spaces hand numpy scalars to the config."""
    config = _valid_config().training(
        history_length=np.int64(2),
        group_size=np.int64(2),
        gamma=np.float32(0.9),
        length_weight_alpha=np.float64(0.5),
        base_group=np.bool_(True),
        max_prompt_tokens=np.int32(512),
    )
    config.validate()
    assert config.model_config["max_prompt_tokens"] == 512


@pytest.mark.parametrize(
    ("model_config", "message"),
    [
        (
            {"tokenizer_vocab_sise": 400},
            r"model_config has unknown key\(s\) \['tokenizer_vocab_sise'\].*'tokenizer_vocab_size'",
        ),
        ({"torch_dtype": "fp8"}, r"model_config\['torch_dtype'\]='fp8'"),
        (
            {"model": "/no/such/model"},
            r"model_config\['model'\]='/no/such/model' is neither a local Hugging Face model directory",
        ),
    ],
)
def test_validate_checks_model_config_before_sampling(model_config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=rf"HGPOConfig: {message}"):
        _valid_config().rl_module(model_config=model_config).validate()


def test_validate_refuses_plan_execute_answers_constrained_to_one_admissible_action() -> None:
    """HiPER's answer format needs its <switch>/<subgoal> tags; constrained sampling emits one
    admissible action only, so every answer would be invalid."""
    config = _valid_config().environment("keychest", env_config={"answer_format": "plan_execute"})
    config.validate()
    config.rl_module(model_config={"constrain_to_admissible": True})
    with pytest.raises(ValueError, match=r"constrain_to_admissible'\]=True is invalid with env_config"):
        config.validate()


def test_validate_checks_prompt_length_against_a_model_directory(tmp_path: Any) -> None:
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    config = _valid_config().rl_module(model_config={"model": str(tmp_path)})
    with pytest.raises(ValueError, match=r"max_prompt_tokens=4096 .* exceeds the model's 2048 positions"):
        config.validate()
    config.training(max_prompt_tokens=1024, max_new_tokens=512).validate()


def test_validate_finds_a_truncated_weights_file(tmp_path: Any) -> None:
    """Issue 25, finding 11: a truncated model file failed inside the trial, 225 lines later."""
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    weights = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(1000)}, str(weights))
    config = _valid_config().rl_module(model_config={"model": str(tmp_path)})
    config.validate()
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"model.safetensors cannot be read .* it may be truncated"):
        config.validate()


@pytest.mark.parametrize(("settings", "name"), BAD_SETTINGS, ids=[f"{n}-{s}" for s, n in BAD_SETTINGS])
def test_validate_names_the_bad_setting(settings: dict[str, Any], name: str) -> None:
    config = _valid_config().training(**settings)
    with pytest.raises(ValueError, match=rf"HGPOConfig: {name}="):
        config.validate()


def test_async_sampling_needs_remote_env_runners() -> None:
    config = (
        _valid_config()
        .env_runners(num_env_runners=0, create_local_env_runner=True)
        .training(async_sampling=True)
    )
    with pytest.raises(ValueError, match=r"num_env_runners=0 is invalid: expected >= 1 with async_sampling"):
        config.validate()


def test_validate_names_an_unknown_weight_transfer() -> None:
    config = _valid_config().env_runners(weight_transfer="rdt")
    with pytest.raises(ValueError, match=r"weight_transfer='rdt' is invalid: expected one of \('engine_"):
        config.validate()


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (lambda c: c.environment("CartPole-v1"), "env"),
        (lambda c: c.env_runners(num_env_runners=0), "create_local_env_runner"),
        (lambda c: c.env_runners(episodes_to_numpy=True), "episodes_to_numpy"),
        (lambda c: c.env_runners(gym_env_vectorize_mode="async"), "gym_env_vectorize_mode"),
        (lambda c: c.learners(num_learners=3), "minibatch_size"),
        (lambda c: c.evaluation(evaluation_duration_unit="timesteps"), "evaluation_duration_unit"),
        (lambda c: c.learners(num_learners=2).training(groups_per_iteration=1), "groups_per_iteration"),
        (lambda c: c.learners(num_learners=2).training(minibatches_per_module=5), "minibatches_per_module=5"),
        (
            lambda c: c.multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda *a, **k: "a"),
            r"multi_agent\(policies=\['a', 'b'\]\) is invalid with env='keychest': it has one agent",
        ),
        (lambda c: c.environment("keychest_team"), "env='keychest_team' is a multi-agent system"),
        (
            lambda c: (
                c.environment("keychest_team")
                .multi_agent(policies={"shared"}, policy_mapping_fn=lambda *a, **k: "shared")
                .learners(num_learners=2)
                .training(learner_sharding="fsdp")
            ),
            "learner_sharding='fsdp' is not supported with multi_agent",
        ),
        (lambda c: c.rl_module(model_config={"temperature": 0.7}), "model_config"),
        (
            lambda c: c.rl_module(model_config={"model": QWEN_1_5B}).evaluation(evaluation_interval=5),
            "evaluation_num_env_runners=0",
        ),
        (
            lambda c: c.env_runners(add_default_connectors_to_module_to_env_pipeline=True),
            "add_default_connectors_to_module_to_env_pipeline",
        ),
        # Issue 25, findings 12 and 15: accepted before, failing later inside a trial or never.
        (lambda c: c.env_runners(num_env_runners=-1), "num_env_runners=-1"),
        (lambda c: c.learners(num_learners=-2), "num_learners=-2"),
        (lambda c: c.debugging(seed=1.5), "seed=1.5"),
        (
            lambda c: c.environment("keychest", env_config={"num_room": 3}),
            r"env_config=.* KeyChestEnv has no setting 'num_room' \(did you mean 'num_rooms'\?\)",
        ),
        (
            lambda c: c.environment("keychest", env_config={"require_tags": "no"}),
            r"env_config=.* require_tags must be True, False or None",
        ),
        (
            lambda c: c.environment("alfworld", env_config={"split": "eval"}),
            r"env_config=.* split must be one of",
        ),
        (
            lambda c: c.rl_module(model_config={"tiny_model": {"hiden_size": 8}}),
            r"model_config\['tiny_model'\] has unknown key\(s\) \['hiden_size'\]",
        ),
    ],
)
def test_validate_names_bad_rllib_settings(change: Any, name: str) -> None:
    with pytest.raises(ValueError, match=rf"HGPOConfig: {name}"):
        change(_valid_config()).validate()


def test_evaluation_of_the_tiny_model_or_on_env_runners_is_valid() -> None:
    """Evaluation in the driver is refused for a real model only: the tiny model may evaluate there, a
    real one on evaluation env runners of its own; either way evaluation samples without exploring."""
    tiny = _valid_config().evaluation(evaluation_interval=5)
    tiny.validate()
    assert tiny.setting_errors() == []
    assert (tiny.evaluation_interval, tiny.evaluation_num_env_runners) == (5, 0)
    evaluation = tiny.get_evaluation_config_object()
    assert evaluation.in_evaluation and evaluation.explore is False
    big = _valid_config().rl_module(model_config={"model": QWEN_1_5B})
    big.evaluation(evaluation_interval=5, evaluation_num_env_runners=1)
    big.validate()
    assert big.setting_errors() == [] and big.evaluation_num_env_runners == 1
    assert big.model_config["model"] == QWEN_1_5B and big.get_evaluation_config_object().explore is False
    # The same real model evaluated in the driver is the case that is refused.
    with pytest.raises(ValueError, match=r"HGPOConfig: evaluation_num_env_runners=0 is invalid"):
        big.evaluation(evaluation_num_env_runners=0).validate()


def test_all_validation_errors_are_reported_together() -> None:
    """HGPO's list: the shared settings' errors first, then the estimator's, then the level weights'."""
    errors = _valid_config().training(estimator="x", gamma=2.0).setting_errors()
    assert [e.split("=")[0] for e in errors] == ["gamma", "estimator"]
    config = _valid_config().training(adv_mode="x", gamma=2.0, length_weight_alpha=1e4, history_length=4)
    errors = config.setting_errors()
    assert [e.split("=")[0] for e in errors] == ["gamma", "adv_mode", "length_weight_alpha"]
    assert "L**alpha overflow" in errors[-1]
    with pytest.raises(ValueError, match=r"HGPOConfig: gamma=2\.0 is invalid"):
        config.validate()  # validate() raises with them (RLlib's first one first)


def test_value_checks_accept_numpy_scalars_and_refuse_bools_and_non_finite_numbers() -> None:
    assert is_int(3) and is_int(np.int64(3)) and not is_int(True) and not is_int(np.bool_(True))
    assert not is_int(3.0) and not is_int("3")
    assert is_number(0.5) and is_number(np.float32(0.5)) and is_number(2)
    assert not any(is_number(v) for v in (True, np.inf, -np.inf, np.nan, "1", None))
    assert is_bool(False) and is_bool(np.bool_(True)) and not is_bool(0) and not is_bool("no")
    assert is_text_list(["a", "b"]) and is_text_list(()) and not is_text_list("ab") and not is_text_list([1])
    assert is_lr(1e-6) and is_lr([[0, 1e-3], [100, 1e-4]]) and is_lr(((0, 1e-3),))
    for bad in (0.0, -1e-3, np.inf, [], [[1, 1e-3]], [[0, 1e-3], [0, 1e-4]], [[0, 0.0]], [[0, 1e-3, 5]]):
        assert not is_lr(bad), bad


@pytest.mark.parametrize(
    ("setter", "values", "message"),
    [
        ("training", {"train_batch_size": -5}, r"train_batch_size=-5 is invalid: expected an int >= 1"),
        (
            "learners",
            {"num_gpus_per_learner": -1},
            r"num_gpus_per_learner=-1 is invalid: expected a number >= 0",
        ),
        ("env_runners", {"num_cpus_per_env_runner": -0.5}, r"num_cpus_per_env_runner=-0.5 is invalid"),
        ("debugging", {"seed": -1}, r"seed=-1 is invalid: expected None or an int >= 0"),
        (
            "reporting",
            {"metrics_num_episodes_for_smoothing": 0},
            r"metrics_num_episodes_for_smoothing=0 is invalid: expected an int >= 1",
        ),
        (
            "reporting",
            {"progress_interval_s": -1},
            r"progress_interval_s=-1 is invalid: expected a number >= 0 \(0: no progress lines\)",
        ),
        ("reporting", {"progress_interval_s": True}, r"progress_interval_s=True is invalid"),
        (
            "evaluation",
            {"evaluation_interval": -1},
            r"evaluation_interval=-1 is invalid: expected None or an int",
        ),
        (
            "rl_module",
            {"model_config": {"tiny_model": {"hidden_size": -1}}},
            r"model_config\['tiny_model'\] \{'hidden_size': -1\} is invalid: these sizes must be ints >= 1",
        ),
        (
            "rl_module",
            {"model_config": {"tiny_model": {"num_hidden_layers": 0, "num_attention_heads": 2.5}}},
            r"\{'num_hidden_layers': 0, 'num_attention_heads': 2\.5\} is invalid",
        ),
    ],
)
def test_validate_refuses_settings_it_used_to_accept(
    setter: str, values: dict[str, Any], message: str
) -> None:
    """Issue 62's probes: each of these was accepted by validate() and failed later or silently."""
    config = getattr(_valid_config(), setter)(**values)
    with pytest.raises(ValueError, match=message):
        config.validate()


def _model_dir_with_a_tokenizer(path: Any) -> Any:
    """A model directory validate() accepts: a config.json and a small tokenizer with a chat template."""
    from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

    (path / "config.json").write_text('{"max_position_embeddings": 8192}')
    tokenizer = build_tiny_tokenizer(["go north", "take key"], 300)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(path)
    return path


#: A model directory's broken tokenizer or chat template: (file, content, what the one line says).
BROKEN_TOKENIZERS = {
    "tokenizer.json not JSON": ("tokenizer.json", "{", r"tokenizer\.json is not valid JSON \(Expecting"),
    "tokenizer.json of another shape": (
        "tokenizer.json",
        '{"model": 3}',
        r"tokenizer\.json: the tokenizer cannot be loaded from it \(KeyError",
    ),
    "chat template syntax": (
        "chat_template.jinja",
        "{% if %}",
        r"chat_template\.jinja: the chat template cannot render a user turn \(TemplateSyntaxError",
    ),
    "chat template raises": (
        "chat_template.jinja",
        "{{ raise_exception('no user turns here') }}",
        r"chat_template\.jinja: the chat template cannot render a user turn \(TemplateError: no user turns",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_TOKENIZERS))
def test_validate_names_a_broken_tokenizer_or_chat_template_in_one_line(tmp_path: Any, case: str) -> None:
    """Issue 62: a corrupt tokenizer was refused without being named, and a broken chat template ended
    in a Jinja traceback inside the runners; validate() opens both, as the runners will."""
    model = _model_dir_with_a_tokenizer(tmp_path)
    config = _valid_config().rl_module(model_config={"model": str(model)})
    config.validate()
    file, content, message = BROKEN_TOKENIZERS[case]
    (model / file).write_text(content)
    with pytest.raises(ValueError, match=message) as raised:
        config.validate()
    # One line naming the file (RLlib adds its own line on how to skip validation).
    assert str(model / file) in str(raised.value).splitlines()[0]


#: Chat templates that cannot take the task and instructions as a system turn, and what the line says.
NO_SYSTEM_ROLE = {
    # Gemma's kind: refuses a system message.
    "refuses": (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
        "supported') }}{% endif %}{{ m['content'] }}{% endfor %}",
        r"chat_template\.jinja: the chat template cannot render a system and a user turn \(TemplateError: "
        "System role not supported",
    ),
    # Drops it silently.
    "drops": (
        "{% for m in messages %}{% if m['role'] != 'system' %}{{ m['content'] }}{% endif %}{% endfor %}",
        r"chat_template\.jinja: the chat template drops the system turn: prompt_turns='system_user' needs",
    ),
}


@pytest.mark.parametrize("case", list(NO_SYSTEM_ROLE))
def test_validate_refuses_a_system_turn_the_chat_template_cannot_hold(tmp_path: Any, case: str) -> None:
    """prompt_turns='system_user' with a template without a system role is one line in the driver; the
    same model prompts in one user turn (the default)."""
    model = _model_dir_with_a_tokenizer(tmp_path)
    template, message = NO_SYSTEM_ROLE[case]
    (model / "chat_template.jinja").write_text(template)
    config = _valid_config().rl_module(model_config={"model": str(model)})
    config.validate()
    with pytest.raises(ValueError, match=message) as raised:
        config.training(prompt_turns="system_user").validate()
    assert str(model / "chat_template.jinja") in str(raised.value).splitlines()[0]


def test_validate_refuses_a_system_turn_for_a_team_env() -> None:
    """A team's role prompts have no system/user split: one line naming the env."""
    config = (
        HGPOConfig()
        .environment("keychest_team")
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared")
        .training(prompt_turns="system_user")
    )
    with pytest.raises(
        ValueError,
        match=r"prompt_turns='system_user' is invalid: the prompts of 'keychest_team' have no system/user",
    ):
        config.validate()

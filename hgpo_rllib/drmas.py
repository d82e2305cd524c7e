"""Dr. MAS (docs/drmas.md): teams of LLM agents trained on RLlib's multi-agent API, advantages
normalised per agent. This module is its code map, and holds no code: each piece lives in the layer
it belongs to (tests/test_architecture.py keeps the imports pointing down), and a test checks that
every path named here exists.

Envs (the team contract and the systems; ``import envs`` registers them):

- :mod:`envs.common.team_env`: :class:`~envs.common.team_env.TeamTextEnv`, several roles playing one
  text game in turns, and :func:`~envs.common.team_env.play_team`, one episode of the expert team;
- :mod:`envs.common.planner_executor`: :class:`~envs.common.planner_executor.PlannerExecutorTeam`,
  the planner/executor system, its prompts and expert play;
- :mod:`envs.common.actions`: :func:`~envs.common.actions.parse_tagged`, a role's answer in its tag;
- :mod:`envs.webshop.team` (verifier, searcher, buyer), :mod:`envs.alfworld.team` and
  :mod:`envs.keychest.team` (planner, executor): the built-in teams, named in
  :data:`envs.registry.TEAM_ENV_SPECS`.

Advantages (pure numpy, exact):

- :mod:`hgpo_rllib.advantages.multi_agent`: the agent-wise rules and the vanilla multi-agent GRPO
  they replace (:func:`~hgpo_rllib.advantages.multi_agent.agent_wise_advantages`);
- :mod:`hgpo_rllib.advantages.step_table`: one row per agent turn
  (:meth:`~hgpo_rllib.advantages.step_table.StepTable.from_episodes`) and ``normalize_by``.

Sampling and learning on RLlib's multi-agent API:

- :mod:`hgpo_rllib.env_runner.grouped_multi_agent_env_runner`:
  :class:`~hgpo_rllib.env_runner.grouped_multi_agent_env_runner.GroupedMultiAgentEnvRunner`, whole
  rollout groups of team episodes, each turn batched per module;
- :mod:`hgpo_rllib.env_runner.metrics_callback`: team success and each agent's invalid answers;
- :mod:`hgpo_rllib.connectors.env_to_module.history_window`: each role's prompt with its team context;
- :mod:`hgpo_rllib.connectors.learner.group_advantages`: each module's rows of the table;
- :mod:`hgpo_rllib.algorithms.text_agent`:
  :meth:`~hgpo_rllib.algorithms.text_agent.TextAgentConfig.multi_agent` (roles to modules, the
  multi-agent runner);
- :mod:`hgpo_rllib.algorithms.validation`: a team env needs ``multi_agent()``, and it a team env;
- :mod:`hgpo_rllib.algorithms.hgpo.hgpo`: ``normalize_by`` ("agent" or "trajectory"), with every
  estimator;
- :mod:`hgpo_rllib.algorithms.per_module_minibatches`: each module's own optimiser steps
  (``minibatches_per_module``, the authors' adaptive mini-batch);
- :mod:`hgpo_rllib.algorithms.torch.text_agent_torch_learner`: idle rows for a DDP learner whose
  groups hold no turn of a role.

Running, evaluating, warm-starting:

- :mod:`hgpo_rllib.experiments.teams`: the tuned examples' teams (one LLM per role or shared) and a
  team built from warm starts; :mod:`hgpo_rllib.experiments.memory_plan` and
  :mod:`hgpo_rllib.experiments.memory_items`: the memory of several LLMs;
- :mod:`hgpo_rllib.evaluation.team`: ``rllib evaluate`` of a team (avg@k, pass@k, per-agent rates,
  :func:`~hgpo_rllib.evaluation.team.evaluate_team`);
- :mod:`hgpo_rllib.warm_start.demonstrations`: the expert team's demonstrations, per role with
  ``rllib sft --role`` (:mod:`hgpo_rllib.cli.sft`).

Outside the package: ``tuned_examples/drmas_webshop.py`` and ``tuned_examples/drmas_alfworld.py``,
``benchmarks/drmas_normalisation.py`` (global vs agent-wise normalisation on CPU), and the tests
``tests/envs/test_team_envs.py``, ``tests/advantages/test_advantages_multi_agent.py``,
``tests/connectors/test_multi_agent_learning.py`` and ``tests/end_to_end/test_drmas_training.py``.
"""

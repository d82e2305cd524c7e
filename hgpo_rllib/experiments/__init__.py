"""Running experiments: experiment files (:mod:`~hgpo_rllib.experiments.experiment_file`), the tuned
examples' typed settings (:mod:`~hgpo_rllib.experiments.settings`), their CPU, paper and team presets
(:mod:`~hgpo_rllib.experiments.cpu`, :mod:`~hgpo_rllib.experiments.paper`,
:mod:`~hgpo_rllib.experiments.teams`: Dr. MAS), run names, and the GPU memory plan
(:mod:`~hgpo_rllib.experiments.memory_plan`; each role's lines:
:mod:`~hgpo_rllib.experiments.memory_items`)."""

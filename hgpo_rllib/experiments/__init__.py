"""Running experiments: experiment files (:mod:`~hgpo_rllib.experiments.experiment_file`), the tuned
examples' presets and switches (:mod:`~hgpo_rllib.experiments.presets`), and the GPU memory plan
(:mod:`~hgpo_rllib.experiments.memory_plan`)."""

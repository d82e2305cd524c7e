"""ALFWorld (``hgpo/ALFWorld-v0``): the alfworld 0.4.2 text engine, playable without any download.

* :mod:`~envs.alfworld.env`: the Gymnasium environment (``ALFWorldEnv``).
* :mod:`~envs.alfworld.engine`: TextWorld's PDDL engine as alfworld configures it, plus the planner.
* :mod:`~envs.alfworld.games` / :mod:`~envs.alfworld.scenes`: games generated from a seed; the splits.
* :mod:`~envs.alfworld.real_rooms`: receptacle counts of real ALFWorld rooms (scene density).
* :mod:`~envs.alfworld.dataset`: the standard ALFWorld game files, when present.
* :mod:`~envs.alfworld.logic`: domain, grammar (0.4.2 commands, or json_2.1.1) and the six task types.
* :mod:`~envs.alfworld.prompts`: the verl-agent prompt and a tokenizer corpus.
"""

"""Your own text env, trained with `rllib train file examples/own_env.py` (no edit of the package)."""

from ray.tune.registry import register_env

from envs import EnvFacts, EvaluationFacts, Observation, TextEnv
from hgpo_rllib import HGPOConfig

COLOURS = ["red", "orange", "yellow", "green", "blue"]


class GuessEnv(TextEnv):
    """Find the hidden colour; each wrong guess is crossed off the list. The test split's task of a
    seed hides another colour than the training split's."""

    default_require_tags = False  # the whole answer is the guess (True: <think>/<action> tags)
    # `rllib evaluate` plays the test split (`--split train`: the training one) and reports the score.
    FACTS = EnvFacts(
        evaluation=EvaluationFacts(
            splits={"test": ("test",), "train": ("train",)}, default_split="test", score_columns=("score",)
        )
    )

    def __init__(self, split: str = "train", max_steps: int = 4, require_tags: bool | None = None):
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        super().__init__(max_steps=max_steps, require_tags=require_tags)
        self.split = split

    def _start_episode(self, seed: int | None, options: dict) -> tuple[Observation, str, str]:
        train_draw, test_draw = self.np_random.integers(len(COLOURS), size=2)
        self.secret = COLOURS[test_draw if self.split == "test" else train_draw]
        self.left = list(COLOURS)
        return Observation("Guess my colour.", list(self.left)), "find the hidden colour", "guess"

    def _execute(self, command: str) -> Observation:
        won = command == self.secret
        if command in self.left and not won:
            self.left.remove(command)
        text = "Right!" if won else f"Not {command}."
        score = len(self.left) / len(COLOURS) if won else 0.0  # the fewer wrong guesses, the higher
        return Observation(
            text, list(self.left), reward=float(won), terminated=won, won=won, extra_info={"score": score}
        )

    def _observation_unchanged(self) -> str:
        return "That is not a colour I know."


register_env("guess", lambda env_config: GuessEnv(**env_config))

config = (
    HGPOConfig()
    .environment("guess", env_config={"max_steps": 4})
    .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
    .training(group_size=4, groups_per_iteration=2, max_new_tokens=4)
)
stop = {"training_iteration": 5}
name = "guess_hgpo"

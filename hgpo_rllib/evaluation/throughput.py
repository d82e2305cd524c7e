"""How fast an evaluation played (issue 63 item 6): per policy, the episodes this process played, the
wall seconds of their play, episodes (goals) per hour and, for a policy that counts them, generated
tokens per second.

Only what this process plays is counted: episodes a resumed run finds saved, or copies from an earlier
output (``reuse``), took another process's time. Play seconds run from a (split, policy, seed)'s
first env until its last episode ends: env start-up and steps included, model loading (a team's
runner starting inside its first play is left out with :meth:`Throughput.exclude`) and table writing
not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hgpo_rllib.run_records import write_record

#: The output directory's throughput record (this run's figures; a rerun replaces it).
THROUGHPUT_RECORD = "throughput.json"


@dataclass
class PlayTime:
    """One policy's play in this process."""

    episodes: int = 0
    seconds: float = 0.0
    generated_tokens: int | None = None  # None: the policy generates no tokens (a baseline)

    @property
    def episodes_per_hour(self) -> float | None:
        return self.episodes * 3600 / self.seconds if self.seconds > 0 else None

    @property
    def generated_tokens_per_s(self) -> float | None:
        if self.generated_tokens is None or self.seconds <= 0:
            return None
        return self.generated_tokens / self.seconds


@dataclass
class Throughput:
    """The play of each policy of one evaluation in this process. ``token_counts`` gives, per policy
    that generates text, the count of tokens it has generated so far (read before and after each
    play); ``batch_size`` is the episodes in flight at once, recorded beside the figures; ``engines``
    gives, per policy that generates text, what it plays in (``torch_dtype`` and
    ``inference_backend``), recorded beside its figures."""

    batch_size: int
    token_counts: Mapping[str, Callable[[], int]] = field(default_factory=dict)
    engines: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    played: dict[str, PlayTime] = field(default_factory=dict)
    _excluded: float = 0.0

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` spent inside the play being timed, not playing, out of its time."""
        self._excluded += seconds

    def timed(self, policy: str, play: Callable[[], Sequence[Any]]) -> Sequence[Any]:
        """Run ``play`` (it returns one record per episode it played) and add its episodes, seconds
        and generated tokens to ``policy``'s."""
        count = self.token_counts.get(policy)
        tokens_before = count() if count is not None else 0
        self._excluded, start = 0.0, time.perf_counter()
        records = play()
        seconds = time.perf_counter() - start - self._excluded
        total = self.played.setdefault(policy, PlayTime())
        total.episodes += len(records)
        total.seconds += seconds
        if count is not None:
            total.generated_tokens = (total.generated_tokens or 0) + count() - tokens_before
        return records

    def lines(self) -> list[str]:
        """One line per policy that played here (or one saying nothing was)."""
        if not self.played:
            return ["- nothing played in this run: every episode was saved before or copied"]
        lines = []
        for policy, play in self.played.items():
            rate = play.episodes_per_hour
            line = f"- {policy}: {play.episodes} episodes in {play.seconds:.1f} s of play"
            line += f", {rate:,.1f} episodes per hour" if rate is not None else ""
            if play.generated_tokens_per_s is not None:
                line += f", {play.generated_tokens:,} generated tokens ({play.generated_tokens_per_s:,.1f}/s)"
            lines.append(line)
        return lines

    def record(self) -> dict[str, Any]:
        """The figures as :data:`THROUGHPUT_RECORD` holds them."""
        return {
            "batch_size": self.batch_size,
            "policies": {
                policy: {
                    "episodes": play.episodes,
                    "play_seconds": round(play.seconds, 3),
                    "episodes_per_hour": _rounded(play.episodes_per_hour),
                    "generated_tokens": play.generated_tokens,
                    "generated_tokens_per_s": _rounded(play.generated_tokens_per_s),
                    **self.engines.get(policy, {}),
                }
                for policy, play in self.played.items()
            },
        }

    def write(self, out_dir: Path) -> None:
        """Write :data:`THROUGHPUT_RECORD` into ``out_dir`` and print the lines."""
        write_record(out_dir / THROUGHPUT_RECORD, self.record())
        print(f"Played in this run (batch size {self.batch_size}):", *self.lines(), sep="\n")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)

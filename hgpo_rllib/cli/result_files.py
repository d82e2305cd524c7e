"""A trial's ``result.json`` and ``progress.csv`` with exactly one row per training iteration.

Tune's own loggers append. A trial that resumes from a checkpoint older than its last reported
iteration (``--resume`` after a kill, or a retry after a crash) reports those iterations again, so they
were repeated; and Tune's CSV logger keeps the header of the first run while the resumed rows carry
other keys, so the columns no longer line up (``pandas.read_csv`` fails). These two loggers replace
the rows from the re-reported iteration on, and rewrite the CSV with the union of the columns whenever
a new key appears. Like Tune's, they write in the trial's driver staging directory, which Tune syncs
to the storage path, and a resumed trial first copies its files back from there. Both write through
a temporary file and a rename, so a kill never leaves half a file; the temporary file lies outside
the synced directory, since Tune's syncer, listing a file that is then renamed away, fails with a
traceback (seen on Ctrl-C, whose final sync races the last iteration's write).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.result import EXPR_PROGRESS_FILE, EXPR_RESULT_FILE, TRAINING_ITERATION
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder

from hgpo_rllib.run_records import write_atomically


def _iteration(row: dict[str, Any]) -> int:
    try:
        return int(row.get(TRAINING_ITERATION) or 0)
    except (TypeError, ValueError):
        return 0


def _outside_synced_tree(trial: Any) -> Path:
    """The experiment's staging directory, above the ``driver_artifacts`` tree Tune uploads (a
    trial's ``local_path`` is ``<experiment staging>/driver_artifacts/<trial>``): same filesystem,
    never synced."""
    return Path(trial.local_path).parent.parent


def keep_before(rows: list[dict[str, Any]], iteration: int) -> tuple[list[dict[str, Any]], bool]:
    """``rows`` of the iterations before ``iteration`` (and whether any row was dropped)."""
    kept = [row for row in rows if _iteration(row) < iteration]
    return kept, len(kept) != len(rows)


class OneRowPerIterationJson(JsonLoggerCallback):
    """``result.json`` (one JSON object per line) with one line per iteration; ``params.json`` and
    ``params.pkl`` as Tune writes them."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[Any, list[dict[str, Any]]] = {}

    def log_trial_start(self, trial: Any) -> None:
        self.update_config(trial, trial.config)
        trial.init_local_path()
        self._restore_from_remote(EXPR_RESULT_FILE, trial)  # a resumed trial's rows, from storage
        path = Path(trial.local_path, EXPR_RESULT_FILE)
        rows = []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill: its iteration is reported again
        self._rows[trial] = rows

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._rows:
            self.log_trial_start(trial)
        rows, dropped = keep_before(self._rows[trial], _iteration(result))
        row = json.loads(json.dumps(result, cls=SafeFallbackEncoder))
        self._rows[trial] = [*rows, row]
        path = Path(trial.local_path, EXPR_RESULT_FILE)
        if dropped or not path.is_file():
            text = "".join(json.dumps(r) + "\n" for r in self._rows[trial])
            write_atomically(path, text, scratch=_outside_synced_tree(trial))
        else:
            with path.open("a") as out:
                out.write(json.dumps(row) + "\n")

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._rows.pop(trial, None)


class OneRowPerIterationCsv(CSVLoggerCallback):
    """``progress.csv`` (flattened results, ``a/b`` columns) with one row per iteration and a header
    that always names every column of every row."""

    def __init__(self) -> None:
        super().__init__()
        self._columns: dict[Any, list[str]] = {}
        self._rows: dict[Any, list[dict[str, Any]]] = {}

    def log_trial_start(self, trial: Any) -> None:
        trial.init_local_path()
        self._restore_from_remote(EXPR_PROGRESS_FILE, trial)
        path = Path(trial.local_path, EXPR_PROGRESS_FILE)
        columns: list[str] = []
        rows: list[dict[str, Any]] = []
        if path.is_file() and path.stat().st_size:
            reader = csv.DictReader(io.StringIO(path.read_text()))
            columns = list(reader.fieldnames or [])
            # A row whose fields outnumber the header (Tune's own logger after a resume) is unusable.
            rows = [{k: v for k, v in row.items() if k is not None} for row in reader if None not in row]
        self._columns[trial], self._rows[trial] = columns, rows

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._rows:
            self.log_trial_start(trial)
        flat = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        rows, dropped = keep_before(self._rows[trial], _iteration(flat))
        columns = self._columns[trial]
        new_columns = [key for key in flat if key not in columns]
        columns += new_columns
        self._rows[trial] = [*rows, flat]
        path = Path(trial.local_path, EXPR_PROGRESS_FILE)
        if dropped or new_columns or not path.is_file():
            text = io.StringIO()
            writer = csv.DictWriter(text, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self._rows[trial])
            write_atomically(path, text.getvalue(), scratch=_outside_synced_tree(trial))
        else:
            with path.open("a", newline="") as out:
                csv.DictWriter(out, columns, extrasaction="ignore").writerow(flat)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._columns.pop(trial, None)
        self._rows.pop(trial, None)


def result_file_callbacks() -> list[Any]:
    """The two loggers; Tune adds its own CSV and JSON loggers only when none of these types is given."""
    return [OneRowPerIterationJson(), OneRowPerIterationCsv()]

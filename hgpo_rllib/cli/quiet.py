"""Third-party log lines ``rllib train file`` hides because they are known to be harmless for our
runs, each with the reason. Everything else Ray, Tune and RLlib log still shows, and ``-v`` shows
these too. The filters are installed in the CLI's process and, through Ray's
``worker_process_setup_hook``, in every Ray worker it starts (where most of these lines come from).
"""

from __future__ import annotations

import logging
import sys

#: logger name -> (start of the message, why it is harmless).
HARMLESS_LINES: dict[str, tuple[tuple[str, str], ...]] = {
    "ray._common.deprecation": (
        (
            "DeprecationWarning: `RLModule(config=[RLModuleConfig object])`",
            "RLlib's own RLModule.__init__ builds the deprecated config object for every module; "
            "nothing of ours passes one",
        ),
    ),
    "ray.rllib.algorithms.algorithm_config": (
        ("You are running ", "RLlib announces its default (new) API stack, the one we use, once per process"),
    ),
    "ray.tune.utils.util": (("Install gputil", "GPU monitoring is optional; nvidia-smi shows the same"),),
    "ray.tune.trainable.trainable": (
        ("Trainable.setup took", "building an LLM module takes longer than Tune's 10 s hint threshold"),
    ),
    "ray.tune.analysis.experiment_analysis": (
        (
            "Failed to fetch metrics for",
            "a trial that finished no iteration (stopped while starting, or failed first) has no result "
            "files; the CLI's last lines say which, and why",
        ),
    ),
    "ray.tune.tune": (
        (
            "Wrote the latest version of all result files",
            "bookkeeping after every run; the CLI says where results are",
        ),
        (
            "Stop signal received",
            "Tune announcing the graceful stop the CLI asks for after Ctrl-C or SIGTERM; the CLI's own "
            "line has said what happens",
        ),
        (
            "Experiment has been interrupted",
            "Tune's resume hint names its Python API; the CLI's last line gives the command instead",
        ),
    ),
    "vllm.renderers.base": (
        (
            "Chat template warmup failed",
            "the module hands vLLM token ids (its engine starts without a tokenizer) and never asks it "
            "to render a chat; vLLM's start-up warm-up of the chat template has nothing to render with",
        ),
    ),
}


class _DropHarmless(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def _exit_quietly_in_finalizers(unraisable: sys.UnraisableHookArgs) -> None:
    """Ray's workers turn SIGTERM (how Ray stops an actor at shutdown) into ``SystemExit``; when the
    signal lands inside a finalizer such as ``EnvRunner.__del__``, Python prints "Exception ignored
    in ..." with a traceback of the exit Ray asked for. Those are dropped; every other unraisable
    exception goes to Python's default hook."""
    if issubclass(unraisable.exc_type, SystemExit):
        return
    sys.__unraisablehook__(unraisable)


def hide_harmless_lines() -> None:
    """Install the filters in this process (idempotent)."""
    for name, lines in HARMLESS_LINES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropHarmless) for f in logger.filters):
            logger.addFilter(_DropHarmless(tuple(start for start, _ in lines)))
    sys.unraisablehook = _exit_quietly_in_finalizers


def quiet_worker() -> None:
    """A Ray worker's setup: :func:`hide_harmless_lines`, and no progress bars from Hugging Face
    (transformers' "Loading weights" bars): Ray forwards a worker's output line by line, so each
    redraw of a bar would be a line of its own in the run's console."""
    hide_harmless_lines()
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()  # transformers copies hub's setting when first imported


#: For ``ray.init(runtime_env={"worker_process_setup_hook": ...})``.
WORKER_SETUP_HOOK = f"{__name__}.quiet_worker"

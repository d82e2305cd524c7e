"""Fixtures shared across test files, and test isolation.

Nothing a test does may land in the user's home: Ray's default results directory
(``~/ray_results``, read once when ``ray.train`` is imported, used by every algorithm built outside
Tune) and the default ALFWorld data directory both follow ``HOME``, so the whole session runs with
``HOME`` pointing at a temporary directory, set here before any test module imports Ray.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_HOME = tempfile.mkdtemp(prefix="hgpo-tests-home-")
os.environ["HOME"] = _HOME
os.environ.pop("CHECKPOINTS_DIR", None)
os.environ.pop("ALFWORLD_DATA", None)
# The main job's CPU default builds a 45-minute warm start on first use; tests run its random-init
# pipeline demo instead (tests of the warm-start path set the variable themselves).
os.environ["HGPO_WARM_START"] = "none"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def shop():
    """The WebShop catalog, goals and search index of the shipped catalog (loaded once)."""
    from envs.webshop.data import CATALOG_DIR, load_shop

    return load_shop(CATALOG_DIR)

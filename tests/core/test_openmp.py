"""OpenMP waiting: ``import hgpo_rllib`` sets a short spin before torch loads, and Ray's workers
inherit it; a user's own choice is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hgpo_rllib.openmp import SPIN_COUNT, USER_CHOICES, wait_briefly


def _env_after_import(**overrides: str) -> str:
    """``GOMP_SPINCOUNT`` in a fresh interpreter after ``import hgpo_rllib`` (which must not have
    loaded torch yet, or the setting would come too late for this process)."""
    env = {k: v for k, v in os.environ.items() if k not in USER_CHOICES} | overrides
    code = (
        "import os, sys, hgpo_rllib\n"
        "assert 'torch' not in sys.modules, 'hgpo_rllib loaded torch before setting GOMP_SPINCOUNT'\n"
        "print(os.environ.get('GOMP_SPINCOUNT'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_import_sets_a_short_spin_before_torch_loads_unless_the_user_chose() -> None:
    assert _env_after_import() == str(SPIN_COUNT)
    assert _env_after_import(GOMP_SPINCOUNT="77") == "77"
    assert _env_after_import(OMP_WAIT_POLICY="PASSIVE") == "None"


def test_wait_briefly_sets_only_what_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in USER_CHOICES:
        monkeypatch.delenv(var, raising=False)
    wait_briefly()
    assert os.environ["GOMP_SPINCOUNT"] == str(SPIN_COUNT)
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    wait_briefly()
    assert os.environ["GOMP_SPINCOUNT"] == "5"


@pytest.mark.usefixtures("ray_session")
def test_ray_workers_inherit_the_spin_count() -> None:
    import ray

    @ray.remote
    def worker_spin_count() -> str | None:
        return os.environ.get("GOMP_SPINCOUNT")

    assert os.environ.get("GOMP_SPINCOUNT") is not None  # conftest imports hgpo_rllib before Ray
    assert ray.get(worker_spin_count.remote()) == os.environ["GOMP_SPINCOUNT"]

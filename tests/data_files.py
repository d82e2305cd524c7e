"""The test data shipped in ``tests/data`` (xz-compressed JSON); see ``tests/data/README.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.webshop.data import read_json

DATA = Path(__file__).resolve().parent / "data"


def golden_cases(estimator: str) -> list[dict[str, Any]]:
    """The reference's advantage cases for "grpo", "gigpo" or "hgpo" (docs/hgpo_algorithm.md §8)."""
    return read_json(DATA / "golden" / f"{estimator}_cases.json.xz")["cases"]


def webshop_golden(name: str) -> dict[str, Any]:
    """One of the fixtures made by running the original WebShop code (tests/data/README.md)."""
    return read_json(DATA / "webshop" / f"webshop_{name}.json.xz")

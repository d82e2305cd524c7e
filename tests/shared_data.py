"""Where the tests find ../shared (reference fixtures and the WebShop data); library code never does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
GOLDEN = SHARED / "golden"
WEBSHOP_DATA = SHARED / "data" / "webshop"
WEBSHOP_GOLDEN = GOLDEN / "webshop"
requires_webshop_data = pytest.mark.skipif(
    not WEBSHOP_DATA.is_dir(), reason=f"WebShop data not found at {WEBSHOP_DATA}"
)


def golden_cases(estimator: str) -> list[dict[str, Any]]:
    """The reference's advantage cases for "grpo", "gigpo" or "hgpo" (hgpo_algorithm.md §8)."""
    return json.loads((GOLDEN / f"{estimator}_cases.json").read_text())["cases"]


def webshop_golden(name: str) -> dict[str, Any]:
    """One of the fixtures made by running the original WebShop code (golden/webshop/README.md)."""
    return json.loads((WEBSHOP_GOLDEN / f"webshop_{name}.json").read_text())

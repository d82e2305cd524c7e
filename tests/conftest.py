"""Fixtures shared across test files."""

from __future__ import annotations

import pytest
from shared_data import WEBSHOP_DATA


@pytest.fixture(scope="session")
def shop():
    """The WebShop catalog, goals and search index over the shared data (loaded once)."""
    from envs.webshop.data import load_shop

    return load_shop(WEBSHOP_DATA)

"""Fixtures shared across test files."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def shop():
    """The WebShop catalog, goals and search index of the shipped catalog (loaded once)."""
    from envs.webshop.data import CATALOG_DIR, load_shop

    return load_shop(CATALOG_DIR)

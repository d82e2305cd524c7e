"""The WebShop data files, loaded as the original's ``load_products`` loads them, plus goals and index.

``data_dir`` holds ``items_shuffle_1000.json`` (the catalog: a JSON list of product records) and
``items_ins_v2_1000.json`` (goal attributes by ASIN), each plain or xz-compressed (``.json.xz``).
Without ``data_dir`` or ``$WEBSHOP_DATA_DIR``, WebShop's own 1,000-product catalog shipped in
:data:`CATALOG_DIR` is used (compressed; WebShop's licence in ``catalog/LICENSE``), so the env works out
of the box; a user's folder (e.g. the full 1.18M-product catalog) still wins. Records may be raw (as
WebShop downloads them) or already processed (as the shipped catalog holds them); both give the same
products, because every derived field (``Title``, ``pricing``, ``Price``, ``options``, ``Attributes``,
...) is rebuilt from the raw fields by the original's rules.

Everything built from one pair of files (products, seeded prices, goals, search index) is an immutable
:class:`Shop`, cached per process and per file version, so environments after the first are cheap.
"""

from __future__ import annotations

import json
import lzma
import os
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from envs.webshop.goals import cumulative_weights, synthetic_goals
from envs.webshop.search import SEARCH_RETURN_N, LuceneBM25, document_text

DATA_DIR_ENV = "WEBSHOP_DATA_DIR"
CATALOG_DIR = Path(__file__).with_name("catalog")  #: the shipped 1,000-product catalog (xz-compressed)
COMPRESSED_SUFFIX = ".xz"
CATALOG_FILE = "items_shuffle_1000.json"
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
PRICE_SEED = 42  # seeds range prices, then goal price caps (the original leaves both unseeded)
DEFAULT_PRICE = 100.0  # what the original assumes for a product without pricing
NO_ATTRIBUTES = ["DUMMY_ATTR"]


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """``data_dir``, else ``$WEBSHOP_DATA_DIR``, else the shipped catalog (:data:`CATALOG_DIR`)."""
    if data_dir is None:
        data_dir = os.environ.get(DATA_DIR_ENV) or CATALOG_DIR
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"WebShop data_dir {str(path)!r} (from data_dir= or ${DATA_DIR_ENV}) is not a folder"
        )
    return path


def data_file(folder: Path, name: str) -> Path:
    """``folder/name``, or its compressed ``name.xz``; the error names both."""
    for path in (folder / name, folder / f"{name}{COMPRESSED_SUFFIX}"):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"WebShop data file {str(folder / name)!r} (or {name}{COMPRESSED_SUFFIX}) is missing"
    )


def _price_list(pricing: Any) -> list[float]:
    """The original's parse of a raw price string ("$12.99" or "$10.99$24.99"); lists pass through."""
    if isinstance(pricing, list):
        return [float(p) for p in pricing[:2]]
    if not pricing:
        return []
    return [float(Decimal(re.sub(r"[^\d.]", "", price))) for price in str(pricing).split("$")[1:]][:2]


def _options(customization: Any) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Option groups (lower-cased, "/" written " | ") and each value's image, as the original derives."""
    options: dict[str, list[str]] = {}
    images: dict[str, Any] = {}
    for name, contents in (customization or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            images[value] = content.get("image")
        options[name.lower()] = values
    return options, images


def normalize_product(record: Mapping[str, Any], attributes: Mapping[str, Any]) -> dict[str, Any]:
    """One catalog record with the fields WebShop's pages, search and reward use (``load_products``)."""
    product = dict(record)
    asin = product["asin"]
    product["Title"] = product["name"]
    product["Description"] = product["full_description"]
    bullets = product.get("small_description")
    product["BulletPoints"] = bullets if isinstance(bullets, list) else [bullets]
    product["Reviews"] = product.get("Reviews", [])
    product["Rating"] = product.get("Rating", "N.A.")
    pricing = _price_list(product.get("pricing")) or [DEFAULT_PRICE]
    product["pricing"] = pricing
    product["Price"] = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    if "customization_options" in product or "options" not in product:
        product["options"], product["option_to_image"] = _options(product.get("customization_options"))
    extra = attributes.get(asin, {})
    product["Attributes"] = extra.get("attributes", NO_ATTRIBUTES)
    product["instruction_text"] = extra.get("instruction")
    product["instruction_attributes"] = extra.get("instruction_attributes")
    product["MainImage"] = product["images"][0] if product.get("images") else None
    product["query"] = product["query"].lower().strip()
    return product


def load_products(catalog: list[Mapping[str, Any]], attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Normalised products in file order, without unusable or repeated ASINs (as the original)."""
    products, seen = [], set()
    for record in catalog:
        asin = record["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(normalize_product(record, attributes))
    return products


def product_prices(products: list[dict[str, Any]], rng: random.Random) -> dict[str, float]:
    """The price charged at "buy now": the listed one, or a uniform draw inside a listed range."""
    return {
        p["asin"]: p["pricing"][0] if len(p["pricing"]) == 1 else rng.uniform(*p["pricing"][:2])
        for p in products
    }


@dataclass(frozen=True, eq=False)
class Shop:
    """Everything one pair of data files defines. Shared between environments: treat as read-only."""

    products: tuple[dict[str, Any], ...]
    by_asin: Mapping[str, dict[str, Any]]
    prices: Mapping[str, float]  #: price charged at purchase, by ASIN (seeded draw for price ranges)
    goals: tuple[dict[str, Any], ...]
    cum_weights: tuple[float, ...]
    index: LuceneBM25

    def search(self, query: str) -> list[dict[str, Any]]:
        """The products Lucene returns for ``query`` (at most 50), best first."""
        return [self.products[i] for i in self.index.search(query, SEARCH_RETURN_N)]


def read_json(path: Path) -> Any:
    """A JSON file, plain or xz-compressed (by its suffix)."""
    opener = lzma.open if path.suffix == COMPRESSED_SUFFIX else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


@lru_cache(maxsize=4)
def _build_shop(catalog_path: Path, attributes_path: Path, _version: tuple[int, ...]) -> Shop:
    catalog = read_json(catalog_path)
    attributes = read_json(attributes_path)
    if not isinstance(catalog, list) or not isinstance(attributes, dict):
        raise ValueError(
            f"{catalog_path.name} must hold a JSON list and {attributes_path.name} a JSON object"
        )
    products = load_products(catalog, attributes)
    rng = random.Random(PRICE_SEED)
    prices = product_prices(products, rng)
    goals = synthetic_goals(products, prices, rng)
    index = LuceneBM25([document_text(p) for p in products], [p["asin"] for p in products])
    return Shop(
        products=tuple(products),
        by_asin={p["asin"]: p for p in products},
        prices=prices,
        goals=tuple(goals),
        cum_weights=tuple(cumulative_weights(goals)),
        index=index,
    )


def load_shop(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    catalog_file: str = CATALOG_FILE,
    attributes_file: str = ATTRIBUTES_FILE,
) -> Shop:
    """The :class:`Shop` of ``data_dir`` (default ``$WEBSHOP_DATA_DIR``, else the shipped catalog),
    built once per file version."""
    folder = resolve_data_dir(data_dir).resolve()
    paths = (data_file(folder, catalog_file), data_file(folder, attributes_file))
    version = tuple(v for path in paths for v in (path.stat().st_mtime_ns, path.stat().st_size))
    return _build_shop(*paths, version)

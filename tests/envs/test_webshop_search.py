"""WebShop search: agreement with the original's Lucene index, and the pieces that produce it."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import webshop_golden

from envs.webshop.search import LuceneBM25, analyze, length_to_norm, lucene_tokens, norm_to_length


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return webshop_golden("search")["cases"]


def _overlap(ours: list[str], reference: list[str]) -> float:
    if not reference:
        return float(not ours)
    return len(set(ours) & set(reference)) / len(reference)


def test_search_agrees_with_lucene(shop, cases) -> None:
    top1 = top10 = exact = 0.0
    for case in cases:
        ours = [p["asin"] for p in shop.search(case["query"])]
        assert len(ours) == case["total"], case["query"]
        top1 += ours[:1] == case["top10"][:1]
        top10 += _overlap(ours[:10], case["top10"])
        exact += ours == case["top50"]
    n = len(cases)
    assert top1 / n >= 0.97 and top10 / n >= 0.97
    assert exact / n >= 0.95  # measured: every top-50 list identical


def test_scores_match_lucene_to_its_printed_precision(shop, cases) -> None:
    """Lucene's scores (float32, rounded to 4 decimals by Anserini) against ours, rank by rank."""
    errors = []
    for case in cases:
        scores = shop.index.scores(case["query"])
        ranked = shop.index.search(case["query"])
        for doc, asin, reference in zip(ranked, case["top50"], case["top50_scores"], strict=False):
            if shop.products[doc]["asin"] == asin:
                errors.append(abs(float(scores[doc]) - reference))
    assert len(errors) > 4000 and max(errors) < 1e-4


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("3.5oz bottle", ["3.5oz", "bottle"]),
        ("men's shoes", ["men", "shoes"]),
        ("x-large t-shirt", ["x", "large", "t", "shirt"]),
        ("u.s.a. made", ["u.s.a", "made"]),
        ('1,000 mg; 2.5"', ["1,000", "mg", "2.5"]),
        ("size:large color: red", ["size:large", "color", "red"]),
        ("$19.99 100% #1", ["19.99", "100", "1"]),
        ("\u2764\ufe0flove \u2605 \u00ae", ["\u2764\ufe0f", "love", "\u2605", "\u00ae"]),
        ("\u65e5\u672c 'em _x_ \u00bd inch", ["\u65e5", "\u672c", "em", "_x_", "inch"]),
    ],
)
def test_tokens_follow_lucene_standard_tokenizer(text: str, tokens: list[str]) -> None:
    assert lucene_tokens(text) == tokens


def test_analysis_drops_stop_words_and_stems_as_lucene() -> None:
    # Martin Porter's departures (Lucene's PorterStemmer): "logi" -> "log", "bli" -> "ble"; words of
    # one or two letters are not stemmed.
    assert analyze("The assembly IS required for it") == ["assembl", "requir"]
    assert analyze("technology technologies happy xs") == ["technolog", "technolog", "happi", "xs"]


def test_length_norm_is_lucenes_small_float() -> None:
    lengths = np.arange(0, 200_000)
    norms = np.array([length_to_norm(int(n)) for n in lengths])
    decoded = np.array([norm_to_length(int(b)) for b in norms])
    assert (norms[:24] == lengths[:24]).all() and (np.diff(norms) >= 0).all()
    assert (decoded <= lengths).all() and (lengths - decoded < np.maximum(1, lengths / 8)).all()
    assert (decoded[:40] == lengths[:40]).all()
    assert length_to_norm(2**31 - 1) == 255
    assert all(length_to_norm(norm_to_length(b)) == b for b in range(256))


def test_ties_are_broken_by_doc_id_and_misses_are_dropped() -> None:
    index = LuceneBM25(["red shoe", "blue hat", "red shoe"], ["B2", "B0", "B1"])
    assert index.search("red") == [2, 0]
    assert index.search("xyzzy the and") == []
    assert index.search("red hat", k=1) == [1]

"""WebShop's pages in text mode: the visible text and the clickable elements of each HTML template.

The original renders Jinja templates and reads them back with BeautifulSoup: the observation is every
visible text node, stripped, joined by ``" [SEP] "``; the clickables are the ``.btn`` texts and
``.product-link`` texts (lower-cased), then the option radio values, in page order (a dict: a repeated
value keeps its first position and its last element). Each function here lists those nodes directly.
Whitespace follows BeautifulSoup: a node of only ASCII whitespace becomes ``"\\n"`` (dropped) when it
holds a newline and ``" "`` otherwise, which strips to an empty ``[SEP]`` field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SEP = " [SEP] "
_ASCII_SPACE = " \n\t\x0c\r"

BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SEARCH_BUTTON = "Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")  # ACTION_TO_TEMPLATE's keys


@dataclass(frozen=True)
class Clickable:
    """What a clickable text stands for: a button, a product link (``target`` = ASIN) or an option
    radio (``target`` = option group name)."""

    kind: str  # "button" | "product" | "option"
    target: str = ""


@dataclass(frozen=True)
class Page:
    """One rendered page: its visible text nodes and its clickables (lower-cased text -> element)."""

    name: str  # "start" | "results" | "item" | "description" | ... | "done"
    nodes: tuple[str, ...]
    clickables: Mapping[str, Clickable] = field(default_factory=dict)
    has_search_bar: bool = False

    @property
    def text(self) -> str:
        return SEP.join(self.nodes)


def _node(text: Any) -> str | None:
    """A template value as BeautifulSoup + ``t.strip()`` leave it: None when no node survives."""
    text = "None" if text is None else str(text)  # Jinja prints None as "None"
    if not text:
        return None
    if not text.strip(_ASCII_SPACE):
        return None if "\n" in text else ""
    return text.strip()


def _nodes(*texts: Any) -> tuple[str, ...]:
    return tuple(node for node in map(_node, texts) if node is not None)


def _clickables(
    buttons: Iterable[str], products: Iterable[str] = (), options: Iterable[tuple[str, str]] = ()
) -> dict[str, Clickable]:
    table = {text.lower(): Clickable("button") for text in buttons}
    table.update({asin.lower(): Clickable("product", asin) for asin in products})
    for group, value in options:
        table[value] = Clickable("option", group)
    return table


def _header(instruction: str, *buttons: str) -> tuple[str, ...]:
    return _nodes("Instruction:", instruction, BACK_TO_SEARCH, *buttons)


def start_page(instruction: str) -> Page:
    """The search page: logo, instruction, search box."""
    return Page(
        "start",
        _nodes("WebShop", "Instruction:", instruction, SEARCH_BUTTON),
        _clickables([SEARCH_BUTTON]),
        has_search_bar=True,
    )


def results_page(instruction: str, products: Sequence[Mapping[str, Any]], page: int, total: int) -> Page:
    """Search results: "Page p (Total results: n)", "< Prev" after page 1, "Next >" always."""
    buttons = [PREV_PAGE, NEXT_PAGE] if page > 1 else [NEXT_PAGE]
    nodes = [*_header(instruction), *_nodes(f"Page {page} (Total results: {total})", *buttons)]
    for product in products:
        nodes += _nodes(product["asin"], product["Title"], product["Price"])
    return Page(
        "results", tuple(nodes), _clickables([BACK_TO_SEARCH, *buttons], [p["asin"] for p in products])
    )


def item_page(instruction: str, product: Mapping[str, Any]) -> Page:
    """A product: option groups and values, title, price, rating, sub-page buttons, "Buy Now"."""
    nodes = list(_header(instruction, PREV_PAGE))
    options = []
    for group, values in product["options"].items():
        nodes += _nodes(group, *values)
        options += [(group, value) for value in values]
    nodes += _nodes(
        product["Title"],
        f"Price: {product['Price']}",
        f"Rating: {product['Rating']}",
        *SUB_PAGES[:3],
        BUY_NOW,
    )
    buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES[:3], BUY_NOW]
    return Page("item", tuple(nodes), _clickables(buttons, options=options))


def sub_page(instruction: str, product: Mapping[str, Any], which: str) -> Page:
    """A product's Description, Features (bullet points), Reviews or Attributes page."""
    if which == "Description":
        body = _nodes(product["Description"])
    elif which == "Features":
        body = _nodes(*(f" {bullet}" for bullet in product["BulletPoints"]))
    elif which == "Reviews":
        body = tuple(
            node
            for review in product["Reviews"]
            for node in _nodes(
                f'"{review.get("title", "")}"', review.get("score", ""), review.get("body", "")
            )
        )
    else:
        body = _nodes(
            *(f" {attribute}" for attribute in product["Attributes"]),
            product["category"],
            product["query"],
            product["product_category"],
        )
    return Page(
        which.lower(), (*_header(instruction, PREV_PAGE), *body), _clickables([BACK_TO_SEARCH, PREV_PAGE])
    )


def _html_safe_json(value: Any) -> str:
    """Flask's ``tojson`` filter: sorted keys, ASCII-only, HTML-sensitive characters escaped."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(char, escaped)
    return text


def done_page(asin: str, options: Mapping[str, str], score: float) -> Page:
    """The page after "Buy Now" (its hidden goal fields render empty, as in the original)."""
    nodes = _nodes(
        "Thank you for shopping with us!",
        "Your code: ",
        None,
        " (Paste it in your MTurk interface.)",
        "Purchased",
        "asin",
        asin,
        "options",
        _html_safe_json(options),
        "attrs",
        None,
        "category",
        None,
        "query",
        None,
        "product category",
        None,
        "Target",
        "asin",
        "options",
        "attrs",
        "price upper",
        "instuction text",
        "category",
        "product category",
        "query",
        "Goal ",
        None,
        "Reward",
        "Your score (min 0.0, max 1.0)",
        score,
        "Reward Details ",
        None,
    )
    return Page("done", nodes)

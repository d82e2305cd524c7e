"""One WebShop shopping session in text mode: the original's ``WebAgentTextEnv`` + ``SimServer`` logic.

:meth:`WebShopSession.step` takes an action string as the original's ``step`` does:

* ``name[arg]`` is parsed with the original's regex ``(.+)\\[(.+)\\]`` and ``arg`` is lower-cased.
* ``search[...]`` runs from **any** page (not only where the search box is) and shows results page 1.
* ``click[x]`` needs ``x`` to be exactly a clickable of the current page (``click[search]`` excepted).
  What a click does depends on its text, checked in the original's order: "buy now" (the only
  terminal action), "back to search", "next >"/"< prev" (by the kind of the current URL), the sub-page
  names, else a product link or an option value.
* Anything else leaves the page unchanged: reward 0, not done.

Quirks kept because published numbers were made with them: results are re-searched on every results
page; pages past the last still read "Total results: N"; "< Prev" on an item page returns to the
results page and forgets the chosen options; the kind of page is read from a URL that contains the
search keywords, so keywords such as "search_results" change where "< Prev" leads; the special
keywords ``<r>`` (50 random products), ``<c> category`` and ``<q> query`` list products without
search, and ``<a> ...`` raises (the original crashes there: it never passes its attribute table).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from envs.webshop import pages
from envs.webshop.data import Shop
from envs.webshop.reward import get_reward
from envs.webshop.search import SEARCH_RETURN_N

PRODUCTS_PER_PAGE = 10
_BASE_URL = "http://127.0.0.1:3000"
_ACTION = re.compile(r"(.+)\[(.+)\]")
_SUB_PAGES = {name.lower(): name for name in pages.SUB_PAGES}
_URL_KINDS = ("search_results", "item_page", "item_sub_page", "done")


class UnsupportedSearch(RuntimeError):
    """A special search the original cannot serve either (it crashes on it)."""


@dataclass(frozen=True)
class StepOutcome:
    """What one action did: ``executed`` (it was a valid search or click), the purchase ``score``
    (0 before "buy now"), ``done`` and, on purchase, the score's breakdown."""

    executed: bool
    score: float = 0.0
    done: bool = False
    reward_info: dict[str, Any] | None = None


_NO_OP = StepOutcome(executed=False)


def _url_kind(url: str) -> str:
    """The original's ``get_page_name``: the first page kind named anywhere in the URL."""
    return next((kind for kind in _URL_KINDS if kind in url), "")


class WebShopSession:
    """The state of one episode: the goal, the current page, and the original's session fields."""

    def __init__(self, shop: Shop, goal: dict[str, Any], session_id: str, rng: random.Random):
        self.shop = shop
        self.goal = goal
        self.session_id = session_id
        self._rng = rng  # draws the products of search[<r>]
        self.keywords: list[str] | None = None
        self.page_number: int | None = None
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.url = ""
        self.page = self._start()

    # ------------------------------------------------------------------------------------ reading
    @property
    def observation(self) -> str:
        return self.page.text

    @property
    def available_actions(self) -> dict[str, Any]:
        """The original's ``get_available_actions()``."""
        return {"has_search_bar": self.page.has_search_bar, "clickables": list(self.page.clickables)}

    def admissible_actions(self) -> list[str]:
        """The actions as verl-agent/RAGEN list them: a search placeholder, then ``click[x]``."""
        search = ["search[<your query>]"] if self.page.has_search_bar else []
        return search + [f"click[{text}]" for text in self.page.clickables]

    # ------------------------------------------------------------------------------------- acting
    def step(self, action: str) -> StepOutcome:
        """Apply one action string (see the module doc); unknown or inapplicable actions are no-ops."""
        match = _ACTION.match(action)
        if match is None:
            return _NO_OP
        name, arg = match.group(1), match.group(2).lower()
        if name == "search":
            self.keywords = arg.split(" ")
            self.page = self._results(1)
            return StepOutcome(executed=True)
        if name == "click" and arg in self.page.clickables and arg != "search":
            return self._click(arg)
        return _NO_OP

    def _click(self, text: str) -> StepOutcome:
        kind = _url_kind(self.url)
        if text == "buy now":
            return self._buy()
        if text == "back to search":
            self.page = self._start()
        elif text == "next >" and kind == "search_results":
            self.page = self._results(self.page_number + 1)
        elif text == "< prev" and kind == "search_results":
            self.page = self._results(self.page_number - 1)
        elif text == "< prev" and kind == "item_sub_page":
            self.page = self._item(text)
        elif text == "< prev" and kind == "item_page":
            self.page = self._results(self.page_number)
        elif text in _SUB_PAGES:
            self.page = self._sub_page(_SUB_PAGES[text])
        else:
            self.page = self._item(text)
        return StepOutcome(executed=True)

    # ------------------------------------------------------------------------------------ pages
    def _start(self) -> pages.Page:
        self.keywords, self.page_number, self.asin, self.options = None, None, None, {}
        self.url = f"{_BASE_URL}/{self.session_id}"
        return pages.start_page(self.goal["instruction_text"])

    def _keyword_path(self) -> str:
        return "+".join(self.keywords)

    def _results(self, page_number: int) -> pages.Page:
        self.page_number, self.asin, self.options = page_number, None, {}
        found = self._find_products(self.keywords)
        start = (page_number - 1) * PRODUCTS_PER_PAGE
        shown = found[start : page_number * PRODUCTS_PER_PAGE]
        self.url = f"{_BASE_URL}/search_results/{self.session_id}/{self._keyword_path()}/{page_number}"
        return pages.results_page(self.goal["instruction_text"], shown, page_number, len(found))

    def _find_products(self, keywords: list[str]) -> list[dict[str, Any]]:
        """``get_top_n_product_from_keywords``: special keywords first, else the Lucene search."""
        head = keywords[0]
        if head == "<r>":
            return self._rng.sample(self.shop.products, k=SEARCH_RETURN_N)
        if head == "<a>":
            raise UnsupportedSearch("search[<a> ...] crashes the original WebShop (no attribute table)")
        if head == "<c>":
            if len(keywords) < 2:
                raise UnsupportedSearch("search[<c>] without a category crashes the original WebShop")
            category = keywords[1].strip()
            return [p for p in self.shop.products if p["category"] == category]
        if head == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p for p in self.shop.products if p["query"] == query]
        return self.shop.search(" ".join(keywords))

    def _item(self, text: str) -> pages.Page:
        clicked = self.page.clickables[text]
        if clicked.kind == "product":
            self.asin = text.upper()
        elif clicked.kind == "option":
            self.options[clicked.target.lower()] = text
        self.url = (
            f"{_BASE_URL}/item_page/{self.session_id}/{self.asin}/{self._keyword_path()}/"
            f"{self.page_number}/{json.dumps(self.options)}"
        )
        return pages.item_page(self.goal["instruction_text"], self.shop.by_asin[self.asin])

    def _sub_page(self, which: str) -> pages.Page:
        self.url = (
            f"{_BASE_URL}/item_sub_page/{self.session_id}/{self.asin}/{self._keyword_path()}/"
            f"{self.page_number}/{which}/{self.options}"
        )
        return pages.sub_page(self.goal["instruction_text"], self.shop.by_asin[self.asin], which)

    def _buy(self) -> StepOutcome:
        product = self.shop.by_asin[self.asin]
        score, info = get_reward(product, self.goal, self.shop.prices[self.asin], self.options, verbose=True)
        self.url = f"{_BASE_URL}/done/{self.session_id}/{self.asin}/{self.options}"
        self.page = pages.done_page(self.asin, self.options, score)
        return StepOutcome(executed=True, score=score, done=True, reward_info=info)

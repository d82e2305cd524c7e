"""A WebShop demonstrator whose every choice follows from the page the policy sees.

Why this shape: the expert (:mod:`envs.webshop.expert`) clicks the goal's ASIN, which it knows from
the goal and the policy does not, and pages on when that ASIN is not shown. An imitator of it sees
choices its prompt cannot explain and learns their average: it buys a product of the right kind with
the wrong attributes (``docs/results/webshop_warm_start.md``). This buyer decides from the instruction
(on every page), the current page's text and admissible actions, and the commands of the prompt's
last K steps: it searches the instruction, clicks the first result within the instruction's price
limit (the shop ranks results by BM25 against the query; on 300 training goals this choice won 185,
against 167 for the best fuzzy title match and 72 for the token-set ratio), clicks each option value
the instruction asks for, and buys. Its thoughts are short fixed sentences naming the rule behind
the choice (the first result within the price limit; the kind of option asked for): thoughts that
copied the chosen title and price made the 3.7M-parameter imitator ramble on in prompt text, half its
answers invalid (``docs/results/webshop_warm_start.md``). Only won episodes
become demonstrations, so each shows a choice the page supported; like ALFWorld's searcher it labels
any state, the policy's own included.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from thefuzz import fuzz

from envs.webshop.expert import expert_subgoal
from envs.webshop.pages import SEP

_ASIN = re.compile(r"^[A-Z0-9]{10}$")
_PRICE = re.compile(r"\$([\d.]+)")
_PRICE_LIMIT = re.compile(r"price lower than ([\d.]+) dollars")
#: Clickables that are not option values on a product page.
_BUTTONS = {
    "back to search",
    "< prev",
    "next >",
    "buy now",
    "description",
    "features",
    "reviews",
    "attributes",
}
#: An option value counts as asked for when it matches a value the instruction names this closely.
MIN_OPTION_MATCH = 90


def instruction_of(observation: str) -> str:
    """The instruction every WebShop page shows after ``Instruction:``."""
    nodes = observation.split(SEP)
    return nodes[nodes.index("Instruction:") + 1] if "Instruction:" in nodes else ""


def asked_options(instruction: str) -> list[tuple[str, str]]:
    """The ``name: value`` pairs the instruction asks for, lower-cased (``color: pine forest green``)."""
    pairs = []
    for part in re.split(r",\s*(?:and\s+)?", instruction.lower()):
        if ": " in part:
            name, value = part.split(": ", 1)
            pairs.append((name.split()[-1] if name.split() else name, value.strip()))
    return pairs


def results(observation: str) -> list[tuple[str, str, float]]:
    """(ASIN, title, lowest price) of each product a results page lists."""
    nodes = observation.split(SEP)
    found = []
    for i, node in enumerate(nodes[:-2]):
        price = _PRICE.search(nodes[i + 2])
        if _ASIN.match(node) and price:
            found.append((node.lower(), nodes[i + 1], float(price.group(1))))
    return found


def decide(
    instruction: str, observation: str, recent_commands: Sequence[str], admissible: Sequence[str]
) -> tuple[str, str]:
    """(thought, command) on the current page, from what the prompt shows."""
    clickables = [a[len("click[") : -1] for a in admissible if a.startswith("click[")]
    if any(a.startswith("search[") for a in admissible):
        return "I search for what the instruction describes.", f"search[{instruction}]"
    if "buy now" in clickables:
        clicked = {c[len("click[") : -1] for c in recent_commands if c.startswith("click[")}
        values = [c for c in clickables if c not in _BUTTONS]
        for name, wanted in asked_options(instruction):
            best = max(values, key=lambda v: fuzz.ratio(v, wanted), default=None)
            if best is not None and best not in clicked and fuzz.ratio(best, wanted) >= MIN_OPTION_MATCH:
                return f"The instruction asks for this {name}.", f"click[{best}]"
        return "Every option the instruction asks for is chosen, so I buy it.", "click[buy now]"
    listed = [r for r in results(observation) if r[0] in clickables]
    if listed:
        limit = _PRICE_LIMIT.search(instruction.lower())
        affordable = [r for r in listed if limit is None or r[2] < float(limit.group(1))]
        asin = (affordable or listed)[0][0]
        where = "the first result" if asin == listed[0][0] else "the first result within the price limit"
        return f"I click {where}.", f"click[{asin}]"
    return "This page has nothing to choose, so I go back to search.", "click[back to search]"


class Searcher:
    """:class:`~hgpo_rllib.warm_start.demonstrations.Demonstrator` over :func:`decide`, remembering
    only the commands of the prompt's last ``history_length`` steps."""

    def __init__(self, history_length: int = 4):
        if history_length < 1:
            raise ValueError(f"the searcher needs at least one step of history, got {history_length}")
        self.history_length = history_length

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]:
        instruction = instruction_of(observations[-1])
        return decide(instruction, observations[-1], commands[-self.history_length :], admissible)

    def subgoal(
        self,
        env: Any,
        observations: Sequence[str],
        commands: Sequence[str],
        admissible: Sequence[str],
        command: str,
    ) -> str:
        """The phase of ``command``, read from the command and the page (as the expert's)."""
        return expert_subgoal(env, command)

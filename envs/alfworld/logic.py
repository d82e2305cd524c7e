"""The ALFWorld game logic (PDDL domain and TextWorld grammar) and the six task types.

Both texts come from the files shipped in the alfworld 0.4.2 wheel (``alfred.pddl``,
``alfred.twl2``). Two command grammars are offered (:data:`GRAMMARS`):

* ``"0.4.2"`` (default): the wheel's files as they are, i.e. the grammar of the ``json_2.1.2``
  games that ``alfworld-download`` fetches and verl-agent (the paper's code) plays: ``move X to Y``,
  ``You arrive at cabinet 8.`` after a ``go to``, and a ``help`` command (playable; the environment
  leaves it out of the admissible list, as verl-agent does).
* ``"2.1.1"``: the original json_2.1.1 grammar that earlier published traces (ReAct, Reflexion)
  show: ``put X in/on Y``, ``You arrive at loc N.`` and no ``help``. The conversion is the exact
  inverse of alfworld's own ``scripts/patch_tw-pddl.py`` (2.1.1 -> 2.1.2), checked when first loaded.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: Short names used in ALFWorld result tables.
TASK_CATEGORY: dict[str, str] = dict(
    zip(TASK_TYPES, ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2"), strict=True)
)
#: The placeholder the grammar's ``task`` rule carries until a game fills in its goal text.
TASK_PLACEHOLDER = "UNKNOWN GOAL"
#: Command grammars of generated games: the wheel's (json_2.1.2 games) and the original json_2.1.1.
GRAMMARS: tuple[str, ...] = ("0.4.2", "2.1.1")
DEFAULT_GRAMMAR = "0.4.2"
#: The command that prints the list of verbs; playable in 0.4.2 games, never listed as admissible.
HELP_COMMAND = "help"

# (0.4.2 text, json_2.1.1 text): the reverse of alfworld scripts/patch_tw-pddl.py.
_GRAMMAR_REVERSALS = (
    ("You arrive at {r.name}.", "You arrive at {lend.name}."),
    ("move {o} to {r}", "put {o} in/on {r}"),
    ("You move the {o.name} to the {r.name}.", "You put the {o.name} in/on the {r.name}."),
)


def check_grammar(grammar: str) -> str:
    if grammar not in GRAMMARS:
        raise ValueError(f"grammar must be one of {GRAMMARS}, got {grammar!r}")
    return grammar


def _drop_block(text: str, marker: str, open_char: str, close_char: str) -> str:
    """Remove ``marker`` and everything up to the bracket that closes the block it opens."""
    start = text.index(marker)
    depth = 0
    for end in range(start, len(text)):
        if text[end] == open_char:
            depth += 1
        elif text[end] == close_char:
            depth -= 1
            if depth == 0:
                return text[:start] + text[end + 1 :]
    raise ValueError(f"unbalanced block after {marker!r}")


@cache
def pddl_domain(grammar: str = DEFAULT_GRAMMAR) -> str:
    """The ALFRED PDDL domain; the 2.1.1 form lacks the ``help`` action (added to the files in 2.1.2)."""
    domain = Path(ALFRED_PDDL_PATH).read_text()
    if check_grammar(grammar) == "2.1.1":
        return _drop_block(domain, "(:action help", "(", ")")
    return domain


@cache
def grammar_template(grammar: str = DEFAULT_GRAMMAR) -> str:
    """The TextWorld grammar, with ``UNKNOWN GOAL`` still to be replaced by the task."""
    text = Path(ALFRED_TWL2_PATH).read_text()
    if check_grammar(grammar) == "0.4.2":
        return text
    for new, old in _GRAMMAR_REVERSALS:
        if text.count(new) < 1:
            raise RuntimeError(f"alfred.twl2 changed: {new!r} not found; update envs/alfworld/logic.py")
        text = text.replace(new, old)
    return _drop_block(text, "action help {", "{", "}")


def grammar_with_task(task_description: str, grammar: str = DEFAULT_GRAMMAR) -> str:
    """The grammar of one game: its ``task`` rule says ``Your task is to: <description>.``."""
    return grammar_template(grammar).replace(TASK_PLACEHOLDER, task_description)

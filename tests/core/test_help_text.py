"""Scripts describe themselves in ``--help`` with their docstring's first paragraph as plain text."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, SCRIPT_FILES

from hgpo_rllib.help_text import doc_summary


def test_the_first_paragraph_on_one_line_with_roles_and_literals_as_text() -> None:
    doc = """Evaluation throughput (issue 63 item 6): goals per hour of ``rllib
    evaluate``'s own loop (its policy and :func:`~hgpo_rllib.evaluation.rollout.play`, see
    :mod:`hgpo_rllib.evaluation` and :class:`the policy <hgpo_rllib.evaluation.Policy>`).

    The second paragraph is left out."""
    assert doc_summary(doc) == (
        "Evaluation throughput (issue 63 item 6): goals per hour of `rllib evaluate`'s own loop (its "
        "policy and `play`, see `hgpo_rllib.evaluation` and `the policy`)."
    )
    assert doc_summary(None) == doc_summary("") == ""


def parser_descriptions(path: Path) -> list[str]:
    """The source of each ``ArgumentParser(description=...)`` in ``path``."""
    tree = ast.parse(path.read_text())
    return [
        ast.unparse(keyword.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) == "ArgumentParser"
        for keyword in node.keywords
        if keyword.arg == "description"
    ]


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_script_parser_is_described_by_its_docstring_summary(script: Path) -> None:
    assert set(parser_descriptions(script)) <= {"doc_summary(__doc__)"}


def test_a_script_help_shows_sentences_without_rest_markup() -> None:
    help_text = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "eval_throughput.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Evaluation throughput" in help_text and "`play`)" in help_text
    assert ":func:" not in help_text and "``" not in help_text

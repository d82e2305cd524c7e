"""The README is a front page, and the documentation's links lead somewhere.

The README stays short (what it is, the two commands, what you will see, a paragraph and a link per
algorithm and topic; every figure lives in its docs page beside its result file), links every page
of ``docs/``, and every relative link of the README and the docs pages names a file that exists and,
with ``#anchor``, a heading of that file (GitHub's anchors). No network: web links are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

README = ROOT / "README.md"
#: Issue 65: the front page of the whole wave, other issues' lines included.
README_MAX_LINES = 220
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "results").rglob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def prose(text: str) -> str:
    """``text`` without fenced code blocks (their lines kept, empty) and without code spans."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation but ``-`` and ``_`` dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in ``path``; a repeated one also as ``-1``, ``-2``, ... as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        base = anchor(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file, or whose ``#anchor`` in a Markdown file, is missing."""
    broken = []
    for target in _LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto: ...
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment.lower() not in anchors(resolved):
            broken.append(f"{target} (no such heading)")
    return broken


def test_the_readme_is_a_front_page_of_at_most_220_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail to its docs page"
    )


def test_the_readme_links_every_docs_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _LINK.findall(prose(README.read_text()))}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md links no paragraph to: {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    """A missing file and a missing heading are found; good anchors (a repeated heading's second, a
    heading with code and punctuation, the page's own), web links and links in code are not."""
    (tmp_path / "other.md").write_text("# Title\n\n## The `x` part: one, two\n\n## Again\n\n## Again\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#the-x-part-one-two) [b](other.md#again-1) [c](missing.md) [d](other.md#nowhere)\n"
        "[e](https://example.com/x.md) `[f](in-code.md)`\n```\n[g](in-a-fence.md)\n```\n[h](#own)\n# Own\n"
    )
    assert broken_links(page) == ["missing.md (no such file)", "other.md#nowhere (no such heading)"]

"""Every name a script imports from a sibling script exists there (``benchmarks/lora_sync.py`` imported a
``build_lm`` that ``benchmarks/weight_sync.py`` no longer defined, and could not start)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import SCRIPT_FILES


def top_level_names(path: Path) -> set[str]:
    """The names ``path`` defines or imports at module level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def sibling_imports(path: Path) -> list[tuple[Path, str]]:
    """``(sibling file, name)`` for each ``from <sibling> import name`` in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            sibling = path.parent / f"{node.module}.py"
            found += [(sibling, alias.name) for alias in node.names if sibling.is_file()]
    return found


def missing_names(path: Path) -> list[str]:
    """``sibling.py: name`` for each name ``path`` imports from a sibling script that does not define it."""
    imports = sibling_imports(path)
    defined = {sibling: top_level_names(sibling) for sibling in {sibling for sibling, _ in imports}}
    return [f"{sibling.name}: {name}" for sibling, name in imports if name not in defined[sibling]]


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_names_imported_from_a_sibling_script_exist_there(script: Path) -> None:
    missing = missing_names(script)
    assert not missing, f"{script.name} imports what its sibling does not define: {missing}"


def test_the_checker_sees_a_missing_name(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("A = 1\ndef b():\n    pass\n")
    (tmp_path / "script.py").write_text("from helper import A, b, gone\n")
    assert missing_names(tmp_path / "script.py") == ["helper.py: gone"]

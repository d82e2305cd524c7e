"""The package's layering: imports point down, no cycles, and the pure parts stay light.

Layers, lowest first (the README's "Layout"): leaf modules (column names, checks, settings records,
OpenMP waiting, the CPU's features, handing freed memory back, a model's shape, the learner's FLOP count,
the numpy maths, the module config and API, the memory plan, the warm-start file format) <
``rl_module`` < ``connectors`` < ``env_runner`` < ``algorithms`` < ``evaluation`` < ``warm_start`` <
``experiments`` < ``cli``. Every import between project modules counts, function-level ones too, so
none can hide a cycle. No module is a re-export shim of an old path: the paths that old checkpoints
pickle resolve through one table, :mod:`hgpo_rllib.checkpoint_paths`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hgpo_rllib"
#: Module-name prefix -> layer; the longest matching prefix decides.
LAYERS = {
    "hgpo_rllib._imports": 0,
    "hgpo_rllib.checkpoint_paths": 0,
    "hgpo_rllib.openmp": 0,
    "hgpo_rllib.cpu_features": 0,
    "hgpo_rllib.host_memory": 0,
    "hgpo_rllib.columns": 0,
    "hgpo_rllib.model_shape": 0,
    "hgpo_rllib.learner_flops": 0,
    "hgpo_rllib.checks": 0,
    "hgpo_rllib.run_records": 0,
    "hgpo_rllib.torchvision_check": 0,
    "hgpo_rllib.orphans": 0,
    "hgpo_rllib.progress": 0,
    "hgpo_rllib.errors": 0,
    "hgpo_rllib.advantages": 0,
    "hgpo_rllib.rl_module.config": 0,
    "hgpo_rllib.rl_module.apis": 0,
    "hgpo_rllib.rl_module.prompts": 0,
    "hgpo_rllib.experiments.memory_plan": 0,
    "hgpo_rllib.experiments.memory_items": 0,
    "hgpo_rllib.warm_start.format": 0,
    "hgpo_rllib.rl_module": 1,
    "hgpo_rllib.connectors": 2,
    "hgpo_rllib.env_runner": 3,
    "hgpo_rllib.algorithms": 4,
    "hgpo_rllib.evaluation": 5,
    "hgpo_rllib.warm_start": 6,
    "hgpo_rllib.experiments": 7,
    "hgpo_rllib.cli": 8,
    "hgpo_rllib": 9,  # the package's own __init__ (lazy exports, OpenMP waiting)
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in PACKAGE.rglob("*.py")}


def _is_reexport_shim(tree: ast.Module) -> bool:
    """A module that only re-exports project names: after its docstring, nothing but imports (one of
    the package at least), name aliases, deprecation calls (``warn...(...)``) and a ``__main__`` guard."""
    imports_project = False
    for node in tree.body:
        if node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom):
            imports_project |= (node.module or "").startswith("hgpo_rllib")
        elif isinstance(node, ast.Import):
            imports_project |= any(alias.name.startswith("hgpo_rllib") for alias in node.names)
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if not (getattr(func, "id", None) or getattr(func, "attr", "")).startswith("warn"):
                return False
        elif not (isinstance(node, ast.If) and "__name__" in ast.dump(node.test)):
            return False
    return imports_project


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Project modules ``name`` imports anywhere in its body (``from a import b`` counts as ``a.b``
    when that is a module)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("hgpo_rllib")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hgpo_rllib"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m != name}


def _layer(name: str) -> int:
    prefix = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, tree, known) for name, tree in modules.items()}


def test_imports_point_down() -> None:
    upward = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in _graph().items()
        for b in targets
        if _layer(b) > _layer(a)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [node, nxt]))
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(cycles)


def test_the_checker_sees_function_level_imports_and_cycles() -> None:
    """The two tests above can fail: a function-level upward import is an edge, and a cycle is found."""
    tree = ast.parse("def f():\n    from hgpo_rllib.cli.train import run\n")
    assert _imports("hgpo_rllib.columns", tree, {"hgpo_rllib.cli.train"}) == {"hgpo_rllib.cli.train"}
    assert _layer("hgpo_rllib.cli.train") > _layer("hgpo_rllib.columns")
    assert _layer("hgpo_rllib.rl_module.config") < _layer("hgpo_rllib.rl_module.llm_rl_module")


def test_no_module_is_a_re_export_shim() -> None:
    """0.3.0 removed the 0.2.0 shims: every module of the package holds code of its own."""
    shims = [name for name, tree in _modules().items() if _is_reexport_shim(tree)]
    assert not shims, f"re-export shims: {shims}"


def test_the_shim_checker_sees_a_shim_and_passes_real_modules() -> None:
    shim = (
        '"""Deprecated path."""\nfrom hgpo_rllib._imports import warn_moved_module\n'
        "from hgpo_rllib.env_runner.env_pool import EnvCrash, EnvWorkerPool\nOldName = EnvCrash\n"
        "warn_moved_module(__name__, 'hgpo_rllib.env_runner.env_pool')\n"
        "if __name__ == '__main__':\n    raise SystemExit(0)\n"
    )
    assert _is_reexport_shim(ast.parse(shim))
    entry_point = "import sys\n\nfrom hgpo_rllib.cli import main\n\nsys.exit(main())\n"  # cli/__main__.py
    assert not _is_reexport_shim(ast.parse(entry_point))
    assert not _is_reexport_shim(ast.parse('"""A package."""\n'))
    assert not _is_reexport_shim(ast.parse((PACKAGE / "env_runner" / "__init__.py").read_text()))


def test_the_old_checkpoint_paths_are_one_table_and_no_file() -> None:
    """The module paths of 0.1.0 that checkpoints pickle have no file (a file there would be a shim,
    and dead: the table's import hook comes first); each names an object that its new module defines;
    a removed path that no checkpoint names does not import."""
    import importlib.util

    from hgpo_rllib.checkpoint_paths import OLD_MODULES, OLD_PACKAGES, PICKLED_PATHS

    for old in (*OLD_MODULES, *OLD_PACKAGES):
        relative = Path(*old.split(".")[1:])
        assert not (PACKAGE / relative.with_suffix(".py")).exists() and not (PACKAGE / relative).exists(), old
    modules = _modules()
    for old, new in PICKLED_PATHS.items():
        module, name = new.rsplit(".", 1)
        defined = {
            node.name for node in modules[module].body if isinstance(node, (ast.ClassDef, ast.FunctionDef))
        }
        assert name in defined, f"{old} -> {new}: {module} defines no {name}"
    for removed in ("hgpo_rllib.env_pool", "hgpo_rllib.memory", "hgpo_rllib.connectors.group_advantages"):
        assert importlib.util.find_spec(removed) is None, removed


@pytest.mark.parametrize(
    "module",
    [
        "hgpo_rllib.advantages",
        "hgpo_rllib.advantages.step_table",
        "hgpo_rllib.columns",
        "hgpo_rllib.help_text",
        "hgpo_rllib.learner_flops",
        "hgpo_rllib.model_shape",
        "hgpo_rllib.rl_module.config",
    ],
)
def test_pure_modules_load_neither_torch_transformers_nor_rllib(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(','.join(m for m in ('torch', 'transformers', 'peft', 'ray.rllib') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "", f"importing {module} loads {loaded.strip()}"


@pytest.mark.parametrize(
    "module",
    ["hgpo_rllib.rl_module.hidden_states", "hgpo_rllib.rl_module.logprobs", "hgpo_rllib.rl_module.models"],
)
def test_the_torch_level_modules_load_without_rllib(module: str) -> None:
    """benchmarks/tree_attention.py runs these on GPU machines that have torch and Transformers only."""
    code = f"import sys, {module}; print('ray' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False", f"importing {module} loads ray"


def test_the_iteration_trace_in_rllib_notes_names_what_exists() -> None:
    """docs/rllib_notes.md §5.1 traces one iteration through the code: every class it names (and
    ``Class.method``) must exist, so the trace cannot go stale silently."""
    import importlib
    import re

    notes = (PACKAGE.parent / "docs" / "rllib_notes.md").read_text()
    trace = notes.split("### 5.1 One iteration", 1)[1].split("```")[1]
    defined = {
        node.name: _module_name(path)
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    outside = {"NumpyToTensor", "AdamW", "True"}  # RLlib's and torch's names, and Python's
    missing = []
    for name, attr in re.findall(r"\b([A-Z][a-z][A-Za-z]*)(?:\.([a-z_]+))?", trace):
        if name in outside:
            continue
        if name not in defined:
            missing.append(name)
        elif attr and not hasattr(getattr(importlib.import_module(defined[name]), name), attr):
            missing.append(f"{name}.{attr}")
    assert not missing, f"docs/rllib_notes.md §5.1 names what the code lacks: {missing}"


def test_rllib_notes_describe_the_default_weight_route() -> None:
    """The weight sync in docs/rllib_notes.md (§3.5 and §5.1's trace) is the default route,
    ``weight_transfer="engine_dtype"``; RLlib's float32 ``get_state`` route appears only as the
    named alternative (``"float32_state"``), never as what a sync does."""
    import re

    from hgpo_rllib.algorithms import TextAgentConfig

    assert TextAgentConfig().weight_transfer == "engine_dtype", "the default changed: rewrite the notes"
    notes = (PACKAGE.parent / "docs" / "rllib_notes.md").read_text()
    trace = notes.split("### 5.1 One iteration", 1)[1].split("```")[1]
    section = notes.split("### 3.5 Weight sync", 1)[1].split("\n## ", 1)[0]
    default = re.compile(r'weight_transfer="engine_dtype"[^.\n]{0,20}\bthe default\b')
    for where, text in (("§5.1's trace", trace), ("§3.5", section)):
        named = default.search(" ".join(text.split()))
        assert named, f"docs/rllib_notes.md {where} does not name the default weight route (engine_dtype)"
    float32_lines = [
        line
        for line in trace.splitlines()
        if ("get_state" in line or "float32" in line.replace("float32_state", ""))
        and 'weight_transfer="float32_state"' not in line
    ]
    assert not float32_lines, f"§5.1's trace describes the float32 route as the sync: {float32_lines}"


# ------------------------------------------------------------------ settings never through os.environ
ROOT = PACKAGE.parent
#: Where the environment may be read or written, by variable: process knobs of Ray, Tune and OpenMP,
#: data and results folders, and Tune's W&B credential; never a run's setting (those are typed flags).
ALLOWED_VARIABLES = {
    "RAY_AIR_NEW_OUTPUT": "Tune's console output (a process knob)",
    "TUNE_DISABLE_SIGINT_HANDLER": "Tune's signal handling (a process knob)",
    "TUNE_GLOBAL_CHECKPOINT_S": "how often Tune saves its state (a process knob)",
    "GOMP_SPINCOUNT": "OpenMP waiting (a process knob)",
    "GLIBC_TUNABLES": "glibc's allocator (a process knob a benchmark records)",
    "WEBSHOP_DATA_DIR": "a data-directory reader",
    "ALFWORLD_DATA": "a data-directory reader",
    "CHECKPOINTS_DIR": "the results folder's reader",
    "WANDB_API_KEY": "Tune's Weights & Biases credential",
}
#: Files that pass the whole environment or a computed name, and why.
ALLOWED_DYNAMIC = {
    "hgpo_rllib/cli/__init__.py": "refuses the removed HGPO_* variables",
    "hgpo_rllib/openmp.py": "leaves the user's own OpenMP choices alone",
    "benchmarks/advantages.py": "one OpenMP/BLAS thread, set before numpy loads",
    "benchmarks/estimator_bias.py": "one OpenMP/BLAS thread, set before numpy loads",
    "benchmarks/openmp_waiting.py": "subprocesses without the OpenMP variables it compares",
    "benchmarks/test_suite_time.py": "the suite's subprocess with the checkout on PYTHONPATH",
    "benchmarks/vs_trl.py": "both sides' subprocesses: the same threads and OpenMP waiting, the checkout",
}
ENVIRON_FUNCTIONS = ("getenv", "putenv", "unsetenv")


def _environ_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, variable) of every read or write of the process environment in ``tree``: ``os.environ``
    in any form, ``os.getenv`` / ``putenv`` / ``unsetenv``; the variable is the literal name (or a
    module-level string constant) it is indexed or called with, else ``<dynamic>``."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def name_of(node: ast.AST | None) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        return "<dynamic>"

    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ("environ", *ENVIRON_FUNCTIONS):
                    uses.append((node.lineno, "<dynamic>"))
        if not (isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "os"):
            continue
        parent = parents.get(node)
        if node.attr in ENVIRON_FUNCTIONS:
            args = parent.args if isinstance(parent, ast.Call) else []
            uses.append((node.lineno, name_of(args[0] if args else None)))
        elif node.attr == "environ":
            if isinstance(parent, ast.Subscript):
                uses.append((node.lineno, name_of(parent.slice)))
            elif isinstance(parent, ast.Attribute) and isinstance(parents.get(parent), ast.Call):
                call = parents[parent]
                if parent.attr == "update":
                    uses += [(node.lineno, kw.arg or "<dynamic>") for kw in call.keywords]
                    uses += [(node.lineno, "<dynamic>") for _ in call.args]
                else:
                    uses.append((node.lineno, name_of(call.args[0] if call.args else None)))
            else:
                uses.append((node.lineno, "<dynamic>"))
    return uses


def _environ_violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        for line, variable in _environ_uses(ast.parse(path.read_text(), str(path))):
            allowed = variable in ALLOWED_VARIABLES or (
                variable == "<dynamic>" and relative in ALLOWED_DYNAMIC
            )
            if not allowed:
                found.append(f"{relative}:{line}: {variable}")
    return found


def test_no_setting_is_read_or_written_through_the_process_environment() -> None:
    files = [
        p
        for folder in ("hgpo_rllib", "envs", "benchmarks", "tuned_examples")
        for p in (ROOT / folder).rglob("*.py")
    ]
    assert _environ_violations(files) == []


def test_the_environ_checker_sees_every_form(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "import os\nfrom os import environ\nNAME = 'HGPO_K'\n"
        "a = os.environ['HGPO_ALPHA']\nb = os.environ.get(NAME)\nos.environ.update(HGPO_PRESET='cpu')\n"
        "c = os.getenv('MY_SETTING')\nd = dict(os.environ)\nos.environ.setdefault('CHECKPOINTS_DIR', 'x')\n"
    )
    uses = sorted(_environ_uses(ast.parse(source.read_text())))
    assert uses == [
        (2, "<dynamic>"),
        (4, "HGPO_ALPHA"),
        (5, "HGPO_K"),
        (6, "HGPO_PRESET"),
        (7, "MY_SETTING"),
        (8, "<dynamic>"),
        (9, "CHECKPOINTS_DIR"),
    ]


# ------------------------------------------------------------------ one concern per module
#: A package module longer than this is split along its concerns.
MAX_MODULE_LINES = 400
#: The cohesive exceptions, each with why it stays whole.
LONG_MODULES = {
    "hgpo_rllib/algorithms/text_agent.py": (
        "TextAgentConfig and TextAgent: the shared AlgorithmConfig and Algorithm subclasses, two classes "
        "RLlib drives whole (their checkpoint housekeeping is algorithms/checkpoints.py)"
    ),
    "hgpo_rllib/rl_module/llm_rl_module.py": "LLMRLModule: one RLModule class (checkpoints name its path)",
    "hgpo_rllib/algorithms/torch/text_agent_torch_learner.py": (
        "TextAgentTorchLearner: one Learner class RLlib drives whole (its micro-batched update, loss and "
        "metrics; FSDP and the FLOP meter are modules of their own)"
    ),
    "hgpo_rllib/advantages/hae.py": "HiPER's hierarchical advantage estimation: one estimator's maths",
}


def _module_lengths() -> dict[str, int]:
    """Lines of every module of the two packages, ``hgpo_rllib`` and ``envs``, by path."""
    files = [p for folder in ("hgpo_rllib", "envs") for p in (ROOT / folder).rglob("*.py")]
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in files}


def test_package_modules_stay_under_the_line_cap() -> None:
    long = {path: n for path, n in _module_lengths().items() if n > MAX_MODULE_LINES}
    unexplained = [f"{path} ({long[path]} lines)" for path in sorted(set(long) - set(LONG_MODULES))]
    assert not unexplained, (
        f"modules over {MAX_MODULE_LINES} lines: split each along its concerns, or name it in "
        f"LONG_MODULES with the reason it stays whole: {unexplained}"
    )
    shorter = sorted(set(LONG_MODULES) - set(long))
    assert not shorter, f"within the cap now (or gone): remove from LONG_MODULES: {shorter}"
    assert all(reason.strip() for reason in LONG_MODULES.values())


# ------------------------------------------------------------------ Dr. MAS's code map
DRMAS_MAP = PACKAGE / "drmas.py"


def _resolves(target: str) -> bool:
    """Whether a dotted name is a module of this repository, or a top-level name (``Class.method``
    too) defined in one, read from the source without importing it."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if source is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        scope: list[ast.stmt] = ast.parse(source.read_text()).body
        for name in rest:
            node = next((n for n in scope if name in _defined_names(n)), None)
            if node is None:
                return False
            scope = getattr(node, "body", [])
        return True
    return False


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _code_map_references(doc: str) -> tuple[list[str], list[str]]:
    """The dotted names a docstring cites (``:mod:``, ``:class:``, ...) and the files it names."""
    import re

    names = re.findall(r":(?:mod|class|func|meth|data|attr):`~?([\w.]+)`", doc)
    files = re.findall(r"``([\w/]+\.(?:py|md))``", doc) + re.findall(r"\b(docs/[\w/]+\.md)\b", doc)
    return names, files


def test_drmas_has_a_code_map_and_everything_it_names_exists() -> None:
    """``grep -ri drmas hgpo_rllib`` finds Dr. MAS's home: hgpo_rllib/drmas.py, a code map of its
    pieces across the layers; every module, name and file it cites must exist, so it cannot go stale."""
    doc = ast.get_docstring(ast.parse(DRMAS_MAP.read_text()))
    assert doc is not None and "drmas" in doc.lower()
    names, files = _code_map_references(doc)
    assert len(names) >= 20 and len(files) >= 5, (names, files)
    missing = [name for name in names if not _resolves(name)] + [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"hgpo_rllib/drmas.py names what the repository lacks: {missing}"


def test_the_code_map_checker_rejects_what_does_not_exist() -> None:
    assert _resolves("envs.common.team_env.TeamTextEnv.step")
    assert _resolves("hgpo_rllib.advantages.multi_agent")
    assert not _resolves("envs.common.team_env.PlannerExecutorTeam")  # moved to planner_executor
    assert not _resolves("hgpo_rllib.drmas_nowhere")
    assert not _resolves("envs.common.team_env.TeamTextEnv.no_such_method")
    names, files = _code_map_references(":func:`~a.b` and ``tests/x.py`` (docs/y.md)")
    assert (names, files) == (["a.b"], ["tests/x.py", "docs/y.md"])

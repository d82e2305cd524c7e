"""Checks of ``scripts/ship_warm_start.py``'s command line: the evaluation's dtype and engine flags
reach the evaluation's settings, its results folder and the command recorded with the warm start."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ship_warm_start.py"


def run_script(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    """The keywords the script hands ``ship_warm_start``, with the build and the shipping replaced."""
    spec = importlib.util.spec_from_file_location("ship_warm_start_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    handed: dict[str, Any] = {}
    monkeypatch.setattr(script, "build_warm_start", lambda recipe, cache, use_shipped: Path("built"))
    monkeypatch.setattr(script, "ship_warm_start", lambda recipe, built, **kwargs: handed.update(kwargs))
    monkeypatch.setattr(script, "describe", lambda shipped: "")
    monkeypatch.setattr(sys, "argv", ["ship_warm_start.py", *argv])
    script.main()
    return handed


def test_the_evaluation_plays_in_the_dtype_and_engine_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--model", "smollm2-135m-instruct", "--eval-dtype", "cpu", "--eval-inference-backend", "vllm"]
    handed = run_script(monkeypatch, argv)
    assert handed["evaluation"] == {
        "env": "alfworld",
        "split": "out",
        "seeds": [123],
        "torch_dtype": "cpu",
        "inference_backend": "vllm",
    }
    assert handed["output"].name == "alfworld_shipped_warm_start_eval_smollm2-135m-instruct_cpu_vllm"
    assert handed["build_command"] == (
        "python scripts/ship_warm_start.py --model smollm2-135m-instruct --eval-dtype cpu "
        "--eval-inference-backend vllm"
    )


def test_without_the_flags_the_evaluation_keeps_the_warm_starts_own(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = run_script(monkeypatch, ["--env", "webshop"])
    assert handed["evaluation"] == {
        "env": "webshop",
        "seeds": [123],
        "episodes": 100,
        "env_config": {"max_steps": 15},
    }
    assert handed["output"].name == "webshop_shipped_warm_start_eval"
    assert handed["build_command"] == "python scripts/ship_warm_start.py --env webshop"

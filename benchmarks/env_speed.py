"""Environment speed, all three envs in one table: ALFWorld, WebShop, KeyChest.

Run: ``python benchmarks/env_speed.py [--webshop-data DIR] [--alfworld-games N]``. Targets
(issue #3): ALFWorld step <= 60 ms and reset <= 0.6 s in realistic kitchens; KeyChest >= 20k env
steps/s. The table is kept in ``docs/results/env_speed.md``. The sections are the
``benchmarks/envs_*.py`` scripts, which also run alone. (Not named
``envs.py``: a script of that name would shadow the ``envs`` package for every benchmark here.)
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

from hgpo_rllib.help_text import doc_summary

HERE = Path(__file__).resolve().parent


def _section(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument(
        "--webshop-data",
        default=None,
        help="WebShop data folder (default $WEBSHOP_DATA_DIR, else the shipped catalog)",
    )
    parser.add_argument("--alfworld-games", type=int, default=12)
    args = parser.parse_args()
    rows = []
    alfworld = _section("envs_alfworld").alfworld_section(n_games=args.alfworld_games)
    step, reset = alfworld["step"], alfworld["reset_new_game"]
    rows += [  # CPU time too: on a shared machine it is the steadier figure
        (
            "ALFWorld",
            "step (kitchen, random admissible)",
            f"{step['mean']:.1f} ms wall, {step['cpu']:.1f} ms CPU",
            "<= 60 ms",
        ),
        (
            "ALFWorld",
            "reset (new task: generate + plan)",
            f"{reset['mean']:.0f} ms wall, {reset['cpu']:.0f} ms CPU",
            "<= 600 ms",
        ),
    ]
    web = _section("envs_webshop").webshop_timings(args.webshop_data, episodes=100)
    rows += [
        ("WebShop", "step (search/click)", f"{web['step_ms']:.2f} ms", ""),
        ("WebShop", "step with purchase scoring", f"{web['purchase_step_ms']:.2f} ms", ""),
        ("WebShop", "reset", f"{web['reset_ms']:.3f} ms", ""),
    ]
    steps_per_s = _section("envs_keychest").keychest_steps_per_second()
    rows.append(("KeyChest", "env steps/s (random admissible)", f"{steps_per_s:,.0f}", ">= 20,000"))
    table = "| env | measure | value | target |\n|---|---|---|---|\n"
    table += "\n".join("| " + " | ".join(row) + " |" for row in rows)
    print("\n" + table)
    from results_file import write_result  # benchmarks/ is on sys.path when run as a script

    write_result("env_speed", "Environment speed", table)


if __name__ == "__main__":
    main()

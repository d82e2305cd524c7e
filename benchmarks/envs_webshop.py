"""WebShop env timings: data load, env construction, reset, step, search and purchase scoring.

Why: rollouts run many WebShop envs per worker, so construction after the first must be cheap (the
catalog, goals and search index are cached per process) and a step must stay far below an LLM call.
Steps are measured on scripted-buyer episodes through ``step()`` with tagged outputs, as a policy
drives them (searches, clicks, and one scored purchase per episode).

Run: ``python benchmarks/envs_webshop.py`` (the shipped 1,000-product catalog; ``--data-dir`` or
``$WEBSHOP_DATA_DIR`` for another).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from envs.webshop import reward
from envs.webshop.data import load_shop
from envs.webshop.env import WebShopEnv
from envs.webshop.expert import ScriptedBuyer, tagged
from hgpo_rllib.help_text import doc_summary


def webshop_timings(
    data_dir: str | os.PathLike[str] | None = None, episodes: int = 200, queries: int = 500
) -> dict[str, float]:
    """Seconds for the first data load, an env construction and loading spaCy; mean milliseconds per
    reset, step, purchase (spaCy's noun tags are cached per name) and search; env steps per second."""
    start = time.perf_counter()
    shop = load_shop(data_dir)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    env = WebShopEnv(data_dir=data_dir)
    construct_s = time.perf_counter() - start
    start = time.perf_counter()
    reward.noun_tokens("warm up")
    spacy_s = time.perf_counter() - start

    texts = [goal["instruction_text"] for goal in shop.goals[:queries]]
    start = time.perf_counter()
    for text in texts:
        shop.search(text)
    search_ms = 1e3 * (time.perf_counter() - start) / len(texts)

    resets, steps, purchases = [], [], []
    for index in range(episodes):
        start = time.perf_counter()
        _, info = env.reset(options={"goal_index": index})
        resets.append(time.perf_counter() - start)
        buyer = ScriptedBuyer(env.current_goal)
        done = False
        while not done:
            action = tagged(buyer.act(info["available_actions"]))
            start = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            elapsed = time.perf_counter() - start
            done = terminated or truncated
            (purchases if terminated else steps).append(elapsed)
    return {
        "first_load_s": load_s,
        "env_construct_s": construct_s,
        "spacy_load_s": spacy_s,
        "reset_ms": 1e3 * statistics.mean(resets),
        "step_ms": 1e3 * statistics.mean(steps),
        "purchase_step_ms": 1e3 * statistics.mean(purchases),
        "search_ms": search_ms,
        "steps_per_s": len(steps + purchases) / sum(steps + purchases),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument(
        "--data-dir",
        default=None,
        help="WebShop data folder (default $WEBSHOP_DATA_DIR, else the shipped catalog)",
    )
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    timings = webshop_timings(args.data_dir, episodes=args.episodes)
    print(f"first data load (catalog, goals, index): {timings['first_load_s']:.2f} s")
    print(f"env construction after that: {timings['env_construct_s'] * 1e3:.2f} ms")
    print(f"spaCy tagger load (once per process, at the first purchase): {timings['spacy_load_s']:.2f} s")
    print(f"reset: {timings['reset_ms']:.3f} ms")
    print(f"step (search/click): {timings['step_ms']:.3f} ms")
    print(f"step with purchase scoring (spaCy, fuzzy match): {timings['purchase_step_ms']:.2f} ms")
    print(f"search (goal instruction, top 50): {timings['search_ms']:.3f} ms")
    print(f"scripted-buyer episodes: {timings['steps_per_s']:,.0f} env steps/s")

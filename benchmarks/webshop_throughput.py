"""WebShop env throughput next to its raw engine (BM25 search + reward), and baseline scores.

Run: python benchmarks/webshop_throughput.py [--products 3000] [--episodes 300] [--json-out FILE]

Prints, in one run on the bundled catalog:

* build cost: catalog generation and BM25 indexing (paid once per process);
* raw engine: ``BM25Search.search`` (bm25s) queries/s and ``get_reward`` calls/s;
* env: ``step`` calls/s for the expert and for a random policy over the admissible commands,
  and ``env.step("search[q]")`` next to ``engine.search(q)`` for the same queries — the ratio
  is what the env adds to the engine (page rendering, admissible commands, the expert);
* scores: success rate (reward 1) and mean reward of the expert, of upstream's rule baseline
  (search the instruction, click the first result, buy) and of the random policy, within 15 steps.

CPU time is printed next to wall time: on a shared machine wall time includes waiting for a core.
``--json-out`` writes every figure with the command, commit and machine load (``benchmarks/provenance.py``);
docs/webshop.md's tables are generated from that file (``python -m tools.docs_tables``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance, write_results  # noqa: E402
from agentgym_budget.envs.webshop.env import SEARCH_RETURN_N, WebShopEnv
from agentgym_budget.envs.webshop.reward import get_reward
from agentgym_budget.envs.webshop.search import BM25Search
from agentgym_budget.envs.webshop.synthetic import generate_catalog

STEP_LIMIT = 15


class Clock:
    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def run_episodes(env: WebShopEnv, policy: str, episodes: int, rng: np.random.Generator) -> tuple[int, float, float, Clock]:
    """(steps, success rate, mean reward, clock) for 'expert', 'random' or 'rule'."""
    steps, rewards = 0, []
    with Clock() as clock:
        for episode in range(episodes):
            _, info = env.reset(seed=episode)
            reward, terminated = 0.0, False
            for turn in range(STEP_LIMIT):
                if policy == "expert":
                    action = info["expert_action"]
                elif policy == "random":
                    action = info["admissible_commands"][int(rng.integers(len(info["admissible_commands"])))]
                else:  # upstream's rule baseline
                    products = [c for c in info["admissible_commands"] if c.startswith("click[B0")]
                    action = ("search[" + info["task"].split(", and price")[0] + "]") if turn == 0 else (
                        products[0] if products else "click[Buy Now]")
                _, reward, terminated, _, info = env.step(action)
                steps += 1
                if terminated:
                    break
            rewards.append(reward if terminated else 0.0)
    return steps, float(np.mean(np.array(rewards) == 1.0)), float(np.mean(rewards)), clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=3000)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--json-out", default=None, help="write every figure (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)

    with Clock() as generation:
        catalog = generate_catalog(seed=0, num_products=args.products)
    with Clock() as indexing:
        engine = BM25Search(catalog.documents(), [p["asin"] for p in catalog.products])
    print(f"catalog: {len(catalog)} products, {len(catalog.goals)} goals; generated in {generation.wall:.2f} s "
          f"(cpu {generation.cpu:.2f}), BM25 index built in {indexing.wall:.2f} s (cpu {indexing.cpu:.2f})")

    env = WebShopEnv(num_products=args.products)  # reuses nothing above: its own cached build
    queries = [g["instruction_text"].split(", and price")[0].lower() for g in catalog.goals[: args.episodes]]
    with Clock() as raw_search:
        for query in queries:
            engine.search(query, SEARCH_RETURN_N)
    env.reset(seed=0)
    with Clock() as env_search:
        for query in queries:
            env.unwrapped._search_cache.clear()  # measure a real search each time
            env.step(f"search[{query}]")
    goals = catalog.goals[: args.episodes]
    with Clock() as rewards:
        for goal in goals:
            get_reward(catalog.by_asin[goal["asin"]], goal, catalog.prices[goal["asin"]], goal["goal_options"])

    n = len(queries)
    print(f"\nraw engine   bm25s search: {n / raw_search.wall:8.0f} queries/s  ({1e3 * raw_search.wall / n:.2f} ms, cpu {1e3 * raw_search.cpu / n:.2f} ms)")
    print(f"             get_reward:   {len(goals) / rewards.wall:8.0f} calls/s    ({1e3 * rewards.wall / len(goals):.2f} ms)")
    print(f"env          search step:  {n / env_search.wall:8.0f} steps/s    ({1e3 * env_search.wall / n:.2f} ms, cpu {1e3 * env_search.cpu / n:.2f} ms)")
    print(f"ratio        env search step / raw search = {env_search.wall / raw_search.wall:.2f}x wall, {env_search.cpu / raw_search.cpu:.2f}x cpu")

    print(f"\n{'policy':<8}{'steps/s':>10}{'episodes/s':>12}{'success':>10}{'mean reward':>13}")
    rng = np.random.default_rng(0)
    policies = {}
    for policy in ("expert", "rule", "random"):
        steps, success, mean_reward, clock = run_episodes(env, policy, args.episodes, rng)
        policies[policy] = {"steps": steps, "success": success, "mean_reward": mean_reward, **_seconds(clock)}
        print(f"{policy:<8}{steps / clock.wall:>10.0f}{args.episodes / clock.wall:>12.1f}{success:>10.3f}{mean_reward:>13.3f}")
    print("(episodes/s include reset, which runs up to three searches to find the expert's query)")
    if args.json_out:
        results = {
            "products": len(catalog), "goals": len(catalog.goals), "episodes": args.episodes, "step_limit": STEP_LIMIT,
            "build": {"catalog_generation": _seconds(generation), "bm25_index": _seconds(indexing)},
            "queries": n, "raw_search": _seconds(raw_search), "env_search_step": _seconds(env_search),
            "get_reward_calls": len(goals), "get_reward": _seconds(rewards),
            "policies": policies,
        }
        print(f"wrote {write_results(args.json_out, started, results)}")


def _seconds(clock: Clock) -> dict[str, float]:
    """A clock's wall and CPU seconds, for the results file."""
    return {"wall_s": round(clock.wall, 6), "cpu_s": round(clock.cpu, 6)}


if __name__ == "__main__":
    main()

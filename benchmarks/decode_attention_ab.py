"""The hf backend's eager decode attention, A/B in one process: transformers' ``sdpa`` vs the grouped call.

A one-token query of a model whose query heads share key-value heads (SmolLM2: 9 query heads, 3
key-value heads) reaches the CPU attention kernel either as transformers passes it (all 9 heads,
``enable_gqa=True``) or grouped by the key-value head they share
(``HFChatBackend(decode_attention="grouped")``; ``"auto"`` picks it when the weights are not
float32).  Per weight dtype, two SmolLM2 policies, one per path (``decode_attention=
"transformers"`` / ``"grouped"``), play the same greedy KeyDoor episodes (held-out split, 32 in
flight, T=4, the best prompt), twice in alternation (A B A B); the CPU seconds of the decode steps, of the whole run, and whether both paths played
the same actions are written to ``--out``.

Run::

    python benchmarks/decode_attention_ab.py --out docs/data/smollm2-perf/decode-attention.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import provenance, write_results  # noqa: E402
from benchmarks.llm_rollout_throughput import ModelTimer  # noqa: E402
from benchmarks.smollm2_perf import PROMPT_OPTIONS, run_episodes  # noqa: E402


def compare(dtype: str, episodes: int, turns: int) -> dict[str, Any]:
    """Both decode paths of one dtype, alternated twice: CPU seconds per path and whether the actions agree."""
    import torch

    from agentgym_budget.policies import make_policy

    policies = {name: make_policy("hf", model="smollm2", model_kwargs={"dtype": getattr(torch, dtype)},
                                  decode_attention=choice, **PROMPT_OPTIONS)
                for name, choice in (("transformers_sdpa", "transformers"), ("grouped", "grouped"))}
    clocks = {name: ModelTimer(policy.backend) for name, policy in policies.items()}
    for policy in policies.values():
        run_episodes(policy, 8, 2, 8)  # warm-up
    figures: dict[str, dict[str, list[float]]] = {name: {"decode_cpu_s": [], "run_cpu_s": []} for name in policies}
    actions: dict[str, list[list[str]]] = {}
    for _ in range(2):
        for name, policy in policies.items():
            clock = clocks[name]
            clock.reset()
            run = run_episodes(policy, episodes, turns, episodes)
            figures[name]["decode_cpu_s"].append(clock.step_cpu)
            figures[name]["run_cpu_s"].append(run["cpu"])
            actions.setdefault(name, [record.actions for record in run["records"]])
    same = sum(a == b for a, b in zip(actions["transformers_sdpa"], actions["grouped"]))
    print(f"{dtype}: " + ", ".join(f"{name} decode {v['decode_cpu_s']} run {v['run_cpu_s']} CPU-s"
                                   for name, v in figures.items()) + f"; same actions {same} of {episodes}")
    return {"paths": figures, "same_actions": same, "episodes": episodes}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--episodes", type=int, default=32, help="episodes, all in flight")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    started = provenance(sys.argv if argv is None else ["benchmarks/decode_attention_ab.py", *argv])
    import torch

    import agentgym_budget  # noqa: F401  (registers the envs)

    torch.set_num_threads(args.threads)
    results = {"settings": {"episodes": args.episodes, "turns": args.turns, "threads": args.threads,
                            "torch": torch.__version__},
               "dtypes": {dtype: compare(dtype, args.episodes, args.turns) for dtype in args.dtypes.split(",")}}
    if args.out:
        print(f"wrote {write_results(args.out, started, results)}")
    return results


if __name__ == "__main__":
    main()

"""How often the old closest-match rule of ``parse_action`` played another command than the reply wrote.

Until issue 25, ``parse_action`` played the admissible command most similar to the reply's
command (``difflib`` ratio >= 0.8 over the whole command): "open red door" became "open green
door", "go to cabinet 9" became "go to cabinet 2".  Now the command is played as written
(exact matching, up to case, whitespace and trailing punctuation); near misses are mapped only
with ``matching="fuzzy"``, which never changes a number or swaps a word.

This plays ``--episodes`` episodes with the format-warmed-up tiny model (the trainer's starting
point: :func:`~agentgym_budget.train.warmup.format_warmup`, sampled at temperature 1 through
:func:`~agentgym_budget.train.rollout.training_policy`, commands played exactly) and, for every
turn, compares the command each rule plays:

* ``old != exact``: turns the old rule rewrote into another command; of those, ``crossed``: the
  rewrite named another colour or number (its colour words and numbers differ from the written
  command's), i.e. it credited the reply's tokens with the outcome of a different object;
* ``fuzzy != exact``: turns the new opt-in fuzzy rule rewrites (typos only).

The old rule is rebuilt here (:func:`old_closest_match`): the library no longer has it.

Run (KeyDoor: about a CPU-minute for two seeds; ALFWorld: about 5 CPU-minutes, nearly all of it the warm-up):
    python benchmarks/action_rewrites.py --env KeyDoor-v0 --episodes 256
    python benchmarks/action_rewrites.py --env ALFWorld-v0 --episodes 64 --budget fixed:10 --max-new-tokens 24

``--json-out FILE`` writes the counts per seed with the command, commit and machine load
(``benchmarks/provenance.py``); the table in experiments/action_rewrites/README.md is generated from that file.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentgym_budget.envs.toy.key_door import COLOURS  # noqa: E402
from agentgym_budget.episodes.outcome import episode_over  # noqa: E402
from agentgym_budget.episodes.runner import play_episodes  # noqa: E402
from agentgym_budget.policies.prompting import parse_action, strip_imagined_observation  # noqa: E402
from benchmarks.provenance import provenance, write_results  # noqa: E402

#: The counts of one seed, in the order they are printed and written.
COUNTS = ("turns", "exact: not admissible", "old != exact", "old != exact, crossed a colour/number", "fuzzy != exact")

# The old rule's own line patterns, frozen with it (the library's may change).
_ACTION_LINE = re.compile(r"^\s*action\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THOUGHT_LINE = re.compile(r"^\s*(think|thought)\s*:", re.IGNORECASE)


def old_closest_match(text: str, admissible: Sequence[str]) -> str:
    """``parse_action`` as it was before issue 25 (at 01caa2b), kept here only to count its rewrites."""
    matches = _ACTION_LINE.findall(text)
    if matches:
        raw = matches[-1]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        raw = next((line for line in lines if not _THOUGHT_LINE.match(line)), lines[0] if lines else "")
    action = raw.strip().strip("`'\"").strip().rstrip(".").strip()
    if not action:
        return "look"
    by_lower = {command.lower(): command for command in admissible}
    if action.lower() in by_lower:
        return by_lower[action.lower()]
    close = difflib.get_close_matches(action.lower(), list(by_lower), n=1, cutoff=0.8)
    return by_lower[close[0]] if close else action


def names_another_object(played: str, written: str) -> bool:
    """Whether ``played`` names other colours (KeyDoor's) or numbers than ``written`` (another door, another cabinet)."""
    def objects(command: str) -> set[str]:
        return {w for w in command.lower().split() if w in COLOURS or any(ch.isdigit() for ch in w)}
    return objects(played) != objects(written)


def count_turns(env_id: str, budget: str, episodes: int, warmup_steps: int, max_new_tokens: int, seed: int,
                batch: int) -> tuple[Counter, dict[str, float]]:
    """The counts of one warmed-up model's episodes, and the seconds of its warm-up and of its play."""
    import torch

    from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
    from agentgym_budget.train import TrainConfig
    from agentgym_budget.train.rollout import make_train_env, training_policy
    from agentgym_budget.train.sft import format_warmup

    torch.set_num_threads(1)
    start = time.perf_counter()
    model, tokenizer = tiny_model_and_tokenizer(env_id, seed=seed)
    config = TrainConfig(env_id=env_id, budget=budget, max_new_tokens=max_new_tokens, seed=seed)
    format_warmup(model, tokenizer, config, steps=warmup_steps)
    warmup_s = time.perf_counter() - start
    print(f"{env_id}: format warm-up {warmup_steps} steps ({warmup_s:.0f} s)", flush=True)
    policy = training_policy(model.eval(), tokenizer, config)
    counts: Counter = Counter()
    for first in range(0, episodes, batch):
        seeds = range(10_000 * (seed + 1) + first, 10_000 * (seed + 1) + min(first + batch, episodes))
        _play(policy, [make_train_env(config) for _ in seeds], list(seeds), counts)
    print(f"{env_id}: {episodes} episodes played ({time.perf_counter() - start:.0f} s)", flush=True)
    return counts, {"warmup_s": warmup_s, "play_s": time.perf_counter() - start - warmup_s}


def _play(policy, envs, seeds: list[int], counts: Counter) -> None:
    """Play one episode per env with ``policy`` (exact matching), all in flight together (the evaluator's loop,
    :func:`~agentgym_budget.episodes.runner.play_episodes`), counting what each rule would have played."""
    starts = [partial(_CountingEpisode, env, policy, seed, counts) for env, seed in zip(envs, seeds)]
    play_episodes(policy, starts, max(len(starts), 1), on_end=lambda episode: episode.env.close())


class _CountingEpisode:
    """One episode in flight (reset with ``seed``, the policy's seed too); each turn adds to ``counts``."""

    def __init__(self, env, policy, seed: int, counts: Counter) -> None:
        self.env, self.counts, self.done = env, counts, False
        self.state = policy.start(seed)
        self.obs, self.info = env.reset(seed=seed)

    def step(self, reply) -> None:
        _count(strip_imagined_observation(reply.text), reply.action, self.info["admissible_commands"], self.counts)
        self.obs, _, terminated, truncated, self.info = self.env.step(reply.action)
        self.done = episode_over(terminated, truncated)


def _count(reply: str, played: str, admissible: Sequence[str], counts: Counter) -> None:
    old = old_closest_match(reply, admissible)
    counts["turns"] += 1
    counts["exact: not admissible"] += played not in admissible
    if old != played:
        counts["old != exact"] += 1
        counts["old != exact, crossed a colour/number"] += names_another_object(old, played)
    counts["fuzzy != exact"] += parse_action(reply, admissible, matching="fuzzy") != played


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="KeyDoor-v0")
    parser.add_argument("--budget", default="mix:2,3,4,6")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--warmup-steps", type=int, default=150)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--seeds", default="0", help="comma list: one warmed-up model per seed")
    parser.add_argument("--batch", type=int, default=32, help="episodes per batched generation")
    parser.add_argument("--json-out", default=None, help="write the counts per seed (and provenance) to this JSON file")
    args = parser.parse_args()
    started = provenance(sys.argv)
    total: Counter = Counter()
    seeds = []
    for seed in (int(s) for s in args.seeds.split(",")):
        counts, seconds = count_turns(args.env, args.budget, args.episodes, args.warmup_steps, args.max_new_tokens,
                                      seed, args.batch)
        print(f"seed {seed}: {_report(counts)}", flush=True)
        total.update(counts)
        seeds.append({"seed": seed, "counts": {key: counts[key] for key in COUNTS}, **seconds})
    print(f"all: {_report(total)}")
    if args.json_out:
        settings = {key: getattr(args, key) for key in ("env", "budget", "episodes", "warmup_steps", "max_new_tokens")}
        print(f"wrote {write_results(args.json_out, started, {**settings, 'seeds': seeds})}")


def _report(counts: Counter) -> str:
    turns = max(counts["turns"], 1)
    return ", ".join(f"{key} {counts[key]} ({100 * counts[key] / turns:.1f} %)" if key != "turns" else
                     f"turns {counts[key]}" for key in COUNTS)


if __name__ == "__main__":
    main()

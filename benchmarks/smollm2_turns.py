"""What a KeyDoor policy does turn by turn: per state, how often it takes the key, opens the task's door, the
other door, or writes something that is no command (issue 36: why RL from the format-only SFT got no signal).

Plays ``--episodes`` KeyDoor episodes with the trainer's own policy (:func:`~agentgym_budget.train.rollout.
collect_episodes`: the prompt renderer, sampling and reply parser RL uses) from a model folder (an SFT output),
at the trainer's temperature, and counts each turn's command by the state it acted on (``no key`` / ``key
held``), against uniformly random admissible play (``take key`` 1/3, each door 1/3).  The invalid replies are
listed as written.

Writes ``<out>`` (JSON, with :func:`provenance.provenance`)::

    python benchmarks/smollm2_turns.py --model runs/sft-random --out docs/data/smollm2-rl/turns-sft-random.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance  # noqa: E402

#: What a turn's command did, by the state it acted on.
KINDS = ("take key", "task's door", "other door", "no command")


def command_kind(action: str, goal: str, doors: tuple[str, ...]) -> str:
    """One of :data:`KINDS` for ``action`` in a hall with ``doors`` whose task names ``goal``.

    Example:
        >>> [command_kind(a, "red", ("red", "blue")) for a in ("take key", "open red door", "open blue door",
        ...                                                     "open green door")]
        ['take key', "task's door", 'other door', 'no command']
    """
    if action == "take key":
        return "take key"
    if action == f"open {goal} door":
        return "task's door"
    if action in {f"open {door} door" for door in doors}:
        return "other door"
    return "no command"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model folder (an SFT output) or a model name")
    parser.add_argument("--out", required=True, help="the JSON results file")
    parser.add_argument("--split", default="train")
    parser.add_argument("--budget", default="mix:2,3,4")
    parser.add_argument("--prompt", default="short")
    parser.add_argument("--max-turns-shown", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1000, help="reset seeds seed, seed+1, ...; sampling seed 1")
    args = parser.parse_args(argv)

    import torch

    from agentgym_budget.train import TrainConfig
    from agentgym_budget.train.rollout import collect_episodes, make_train_env
    from agentgym_budget.train.sft import load_for_training

    torch.set_num_threads(args.threads)
    facts: dict = {"provenance": provenance(sys.argv if argv is None else ["benchmarks/smollm2_turns.py", *argv]),
                   "settings": vars(args)}
    config = TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": args.split}, budget=args.budget,
                         max_turns_shown=args.max_turns_shown, history="actions", prompt=args.prompt,
                         model=args.model, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                         progress_bar=False, tensorboard=False)
    model, tokenizer = load_for_training(args.model, config, "cpu")
    model.eval()
    envs = [make_train_env(config) for _ in range(args.episodes)]
    start = time.process_time()
    episodes = collect_episodes(model, tokenizer, envs, seeds=[args.seed + i for i in range(args.episodes)],
                                config=config, sampling_seed=1)
    facts["cpu_seconds"] = time.process_time() - start
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    invalid: collections.Counter = collections.Counter()
    for env, episode in zip(envs, episodes):
        doors, goal = env.unwrapped._doors, episode.task.split()[2]
        for turn in episode.turns:
            kind = command_kind(turn.action, goal, doors)
            counts[turn.state_key][kind] += 1
            if kind == "no command":
                invalid[tokenizer.decode(turn.action_ids, skip_special_tokens=True)] += 1
    summary = Path(args.model) / "sft.json"  # an SFT output folder: what made it
    if summary.exists():
        sft = json.loads(summary.read_text())
        facts["sft"] = {"source": sft["config"]["source"], "episodes": sft["episodes"], "turns": sft["turns"],
                        "steps": sft["config"]["steps"], "batch_size": sft["config"]["batch_size"],
                        "reply_loss_after": sft["reply_loss_after"]}
    facts["episodes"] = len(episodes)
    facts["won"] = sum(e.won for e in episodes)
    facts["lost"] = sum(e.lost for e in episodes)
    facts["turns"] = sum(len(e.turns) for e in episodes)
    facts["by_state"] = {state: {kind: counts[state][kind] for kind in KINDS} for state in sorted(counts)}
    facts["no_command_replies"] = invalid.most_common(20)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps({k: v for k, v in facts.items() if k not in ("provenance", "settings")}, indent=1))
    return facts


if __name__ == "__main__":
    main()

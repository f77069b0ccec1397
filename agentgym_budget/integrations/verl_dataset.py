"""Dataset files for verl's agent loop: one parquet row per episode, as verl's ``RLHFDataset`` reads them.

Each row is one prompt of verl's batch (verl plays it ``actor_rollout_ref.rollout.n`` times, a GRPO
group): ``agent_name`` picks :class:`~agentgym_budget.integrations.verl_agent_loop.BudgetAgentLoop`,
``extra_info`` names the episode — ``env_id``, ``seed``, ``budget`` (the spec, as a string),
``split``, ``index`` — and ``prompt`` holds the system instructions only (the env writes the user
turns once it is reset; the task follows the instructions then).  Every rollout of a row has its
seed, so the group plays one task under one budget: a budget mix is drawn per row, by the seed, as
``TurnBudget`` draws it; a curriculum's budget follows the progress of the group's first rollout.

The train file plays the family's training split (``split="train"``) and the held-out file its held-out
split (``EnvFamily.held_out_split``: ALFWorld's ``valid_unseen``, KeyDoor's ``test``); a family without
one is split by seed only (held-out seeds start at :data:`HELD_OUT_SEED_START`).  Written with pandas
(the ``[verl]`` extra has it); this module does not import verl.

Example:
    >>> rows = verl_rows("KeyDoor-Budget-v0", seeds=[0, 1], budget="mix:2,3", split="train")
    >>> rows[0]["agent_name"], rows[1]["extra_info"]
    ('agentgym_budget', {'env_id': 'KeyDoor-Budget-v0', 'seed': 1, 'budget': 'mix:2,3', 'split': 'train', 'index': 1})
    >>> [m["role"] for m in rows[0]["prompt"]], rows[0]["data_source"]
    (['system'], 'KeyDoor-Budget-v0')
    >>> verl_rows("KeyDoor-Budget-v0", seeds=[0], budget="mix:2,x")
    Traceback (most recent call last):
    ...
    ValueError: ...
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_budget.envs.registration import family_of
from agentgym_budget.policies.demonstrations import TRAINING_SPLIT
from agentgym_budget.policies.prompting import PROMPTS
from agentgym_budget.wrappers.budget_spec import parse_budget_spec

__all__ = ["AGENT_NAME", "HELD_OUT_SEED_START", "main", "splits_of", "verl_rows", "write_verl_dataset"]

#: The agent loop's registered name (``verl_agent_loop.AGENT_NAME``; kept here so that this module needs no verl).
AGENT_NAME = "agentgym_budget"
#: Held-out rows use seeds from here on, so that they never repeat a training seed.
HELD_OUT_SEED_START = 1_000_000


def splits_of(env_id: str) -> tuple[str | None, str | None]:
    """``(training split, held-out split)`` of ``env_id``'s family; ``(None, None)`` for a family without one."""
    held_out = family_of(env_id).held_out_split
    return (TRAINING_SPLIT, held_out) if held_out is not None else (None, None)


def verl_rows(env_id: str, seeds: Iterable[int], budget: str | int | None = None, *, split: str | None = None,
              system_prompt: str = "react", start_index: int = 0) -> list[dict[str, Any]]:
    """One ``RLHFDataset`` row per seed (see the module docstring); the spec and the id are checked here."""
    gym.spec(env_id)  # an unknown id fails now, not in the middle of a training run
    spec = None if budget is None else str(budget)
    if spec is not None:
        try:
            parse_budget_spec(spec)
        except (ValueError, TypeError) as error:
            raise ValueError(f"budget {spec!r}: {error}") from None
    instructions = PROMPTS.get(system_prompt, system_prompt)
    rows = []
    for index, seed in enumerate(seeds, start=start_index):
        if isinstance(seed, bool) or int(seed) != seed:
            raise ValueError(f"seeds must be integers, got {seed!r}")
        rows.append({
            "data_source": env_id,
            "agent_name": AGENT_NAME,
            "prompt": [{"role": "system", "content": instructions}],
            "ability": "agent",
            "reward_model": {"style": "env", "ground_truth": ""},  # the env scores the episode (reward_score)
            "extra_info": {"env_id": env_id, "seed": int(seed), "budget": spec, "split": split, "index": index},
        })
    return rows


def write_verl_dataset(out_dir: str | Path, env_id: str, budget: str | int | None, *, train: int,
                       held_out: int, held_out_budget: str | int | None = None,
                       system_prompt: str = "react") -> dict[str, Path]:
    """Write ``train.parquet`` (seeds ``0..train-1``, the training split) and ``held_out.parquet`` (seeds from
    :data:`HELD_OUT_SEED_START`, the held-out split, under ``held_out_budget``, default ``budget``); their paths."""
    import pandas as pd

    if train < 1 or held_out < 0:
        raise ValueError(f"train must be >= 1 and held_out >= 0, got train={train}, held_out={held_out}")
    train_split, held_out_split = splits_of(env_id)
    tables = {
        "train": verl_rows(env_id, range(train), budget, split=train_split, system_prompt=system_prompt),
        "held_out": verl_rows(env_id, range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + held_out),
                              budget if held_out_budget is None else held_out_budget, split=held_out_split,
                              system_prompt=system_prompt),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in tables.items():
        paths[name] = out / f"{name}.parquet"
        pd.DataFrame(rows).to_parquet(paths[name], index=False)
    return paths


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    """``python -m agentgym_budget.integrations.verl_dataset --env ALFWorld-Budget-v0 --budget mix:10,20,30,40,50 ...``"""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="a registered text env id, e.g. ALFWorld-Budget-v0")
    parser.add_argument("--budget", default=None, help="budget spec of the train rows (default: the id's)")
    parser.add_argument("--held-out-budget", default=None, help="budget spec of the held-out rows (default: --budget)")
    parser.add_argument("--train", type=int, default=2000, help="train rows (seeds 0..N-1)")
    parser.add_argument("--held-out", type=int, default=200, help="held-out rows")
    parser.add_argument("--system-prompt", default="react", help="react, action, or the instructions' text")
    parser.add_argument("--out", required=True, help="directory for train.parquet and held_out.parquet")
    args = parser.parse_args(argv)
    import agentgym_budget  # noqa: F401  (registers the envs)

    paths = write_verl_dataset(args.out, args.env, args.budget, train=args.train, held_out=args.held_out,
                               held_out_budget=args.held_out_budget, system_prompt=args.system_prompt)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return paths


if __name__ == "__main__":
    main()

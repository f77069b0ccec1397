"""SmolLM2-135M-Instruct on three env families, two prompts, two backends (issue 35, step 2).

Runs ``agentgym-budget eval`` once per cell of (env, prompt, backend) — the local ``hf`` policy
(fp32, de-quantised) and the ``openai`` policy against llama.cpp serving the shipped Q4_1 GGUF —
and keeps each run's small result files (``passkt.json``, ``passkt.csv``, ``task_counts.csv``)
under ``docs/data/smollm2-eval/<run>/`` with ``run.json``: the command, the commit, the wall
time and the machine's load average before and after.  ``--agreement`` measures how often the
greedy replies of the two backends agree on the same messages, on the first and on later turns of
held-out episodes (the ``hf`` replies play them), and re-asks llama.cpp each differing one with its
repeat penalty off; ``--tables`` prints the docs' tables from the kept files.

Example (the names of the runs; ``--run all`` runs them in priority order)::

    python benchmarks/smollm2_eval.py --run kd-best-hf,kd-best-served --tasks 2   # a timing probe
    python benchmarks/smollm2_eval.py --run all --agreement --tables

    >>> [run.name for run in RUNS][:4]
    ['kd-zero-served', 'kd-best-served', 'kd-zero-hf', 'kd-best-hf']
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.provenance and tools.llama_server, from a checkout

from benchmarks.provenance import git_commit  # noqa: E402
DATA = ROOT / "docs" / "data" / "smollm2-eval"
KEPT = ("passkt.json", "passkt.csv", "task_counts.csv")
#: Sampling temperature of every evaluation run (K attempts need different samples).
TEMPERATURE = 0.7


@dataclass(frozen=True)
class Family:
    """One env family as evaluated: the budgeted id, the held-out split, the grid and the example's env."""

    env: str
    split: str
    example_env: str
    tasks: int
    attempts: int
    ks: str
    ts: str


FAMILIES = {
    "kd": Family("KeyDoor-Budget-v0", "test", "KeyDoor-v0", 10, 2, "1,2", "2,4,6"),
    "tw": Family("TextWorld-CoinCollector-Budget-v0", "valid", "TextWorld-CoinCollector-v0", 5, 1, "1", "5,10"),
    "alf": Family("ALFWorld-Budget-v0", "valid_unseen", "ALFWorld-v0", 5, 1, "1", "5,10"),
}

#: The two prompts: today's default (ReAct) and the best found (one ``Action:`` line, a worked example
#: from the train split, stop at the end of the line or at a comma: SmolLM2 otherwise copies the start
#: of the command list, "take key, open red door"; no command of these envs has a comma).
PROMPTS: dict[str, dict[str, Any]] = {
    "zero": {"max_new_tokens": 32},
    "best": {"prompt": "action", "stop": ["\n", ","], "max_new_tokens": 16, "few_shot_candidates": 10},
}


@dataclass(frozen=True)
class Run:
    name: str
    family: str
    prompt: str
    backend: str  # "hf" or "served"


#: Priority order: KeyDoor both backends both prompts, then ALFWorld served, then the rest.
RUNS = [Run(f"{f}-{p}-{b}", f, p, b) for f, backends in (("kd", ("served", "hf")), ("alf", ("served",)),
                                                          ("tw", ("served", "hf")), ("alf", ("hf",)))
        for b in backends for p in ("zero", "best")]


def policy_args(run: Run, base_url: str | None) -> list[str]:
    """The ``--policy`` and ``--policy-arg`` flags of ``run``."""
    options: dict[str, Any] = {"temperature": TEMPERATURE, **PROMPTS[run.prompt]}
    if run.prompt == "best":
        options["few_shot_env"] = FAMILIES[run.family].example_env
    if run.backend == "hf":
        flags, options = ["--policy", "hf"], {"model": "smollm2", **options}
    else:
        flags, options = ["--policy", "openai"], {"model": "smollm2", "base_url": base_url, "api_key": "none",
                                                  "timeout": 300, **options}
    for key, value in options.items():
        flags += ["--policy-arg", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return flags


def eval_command(run: Run, out: Path, base_url: str | None, tasks: int | None) -> list[str]:
    """The ``agentgym-budget eval`` command line of ``run`` (``tasks`` overrides the family's count)."""
    family = FAMILIES[run.family]
    concurrency = "4" if run.backend == "served" else str((tasks or family.tasks) * family.attempts)
    return [sys.executable, "-m", "agentgym_budget.cli", "eval", "--env", family.env, "--env-arg",
            f"split={family.split}", *policy_args(run, base_url), "--tasks", str(tasks or family.tasks),
            "--attempts", str(family.attempts), "--k", family.ks, "--t", family.ts, "--concurrency", concurrency,
            "--out", str(out), "--overwrite", "--no-plots", "--no-progress", "--no-transcripts"]


def run_one(run: Run, base_url: str | None, tasks: int | None, scratch: Path) -> dict[str, Any]:
    """Run ``run``'s evaluation and keep its small files under :data:`DATA` (``tasks`` given: a probe, not kept)."""
    out = scratch / run.name
    command = eval_command(run, out, base_url, tasks)
    load_before, start = os.getloadavg(), time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    record = {"run": run.name, "command": command, "commit": git_commit(), "wall_s": round(time.perf_counter() - start, 1),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
              "returncode": result.returncode, "temperature": TEMPERATURE}
    print(json.dumps({k: record[k] for k in ("run", "wall_s", "returncode", "loadavg_after")}), flush=True)
    if result.returncode:
        print(result.stderr[-2000:], file=sys.stderr)
        return record
    if tasks is None:
        keep = DATA / run.name
        keep.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            shutil.copy(out / name, keep / name)
        (keep / "run.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def served(n_threads: int = 1) -> Any:
    """llama.cpp serving the shipped GGUF as ``smollm2`` (not started)."""
    from tools.llama_server import smollm2_server

    return smollm2_server(n_threads=n_threads, n_ctx=4096)


#: The agreement's episodes: (family, episodes = reset seeds 0 .., turns asked per episode at most).
AGREEMENT_EPISODES = (("kd", 20, 2), ("tw", 5, 2))


@dataclass
class _Pair:
    """One turn asked of both backends: the same messages, greedy."""

    family: str
    seed: int
    turn: int
    hf: Any  # PolicyReply
    served: Any  # PolicyReply
    messages: list[dict[str, str]]


def _agreement_pairs(prompt: str, family: str, episodes: int, turns: int, base_url: str) -> list[_Pair]:
    """Greedy replies of ``hf`` and the served model to every turn of ``episodes`` held-out episodes.

    The ``hf`` replies drive the episodes; at each turn the served policy gets the very same state
    (a copy of the ``hf`` episode's), so both are asked the same messages, turn 1 and later turns."""
    import copy

    import gymnasium as gym

    import agentgym_budget  # noqa: F401 - registers the envs
    from agentgym_budget.policies import make_policy

    spec = FAMILIES[family]
    options = {**PROMPTS[prompt], "temperature": 0.0}
    if prompt == "best":
        options["few_shot_env"] = spec.example_env
    local = make_policy("hf", model="smollm2", **options)
    remote = make_policy("openai", model="smollm2", base_url=base_url, api_key="none", timeout=300,
                         max_concurrency=1, **options)
    envs = [gym.make(spec.env, split=spec.split, budget=turns) for _ in range(episodes)]
    steps = [env.reset(seed=seed) for seed, env in enumerate(envs)]
    states = [local.start(seed) for seed in range(episodes)]
    live, pairs = list(range(episodes)), []
    for turn in range(turns):
        obs, infos = [steps[i][0] for i in live], [dict(steps[i][1]) for i in live]
        copies = [copy.deepcopy(states[i]) for i in live]
        messages = [remote.messages(c, o, info) for c, o, info in zip(copies, obs, infos)]
        served_replies = remote.act_batch(copies, obs, infos)
        local_replies = local.act_batch([states[i] for i in live], obs, infos)
        over = set()
        for i, mine, theirs, asked in zip(live, local_replies, served_replies, messages):
            pairs.append(_Pair(family, i, turn + 1, mine, theirs, asked))
            result = envs[i].step(mine.action)
            steps[i] = (result[0], result[4])
            if result[2] or result[3]:
                over.add(i)
                local.release(states[i])
        live = [i for i in live if i not in over]
        if not live:
            break
    for env in envs:
        env.close()
    return pairs


def _reask_without_penalty(base_url: str, pair: _Pair, sampling: dict[str, Any]) -> str:
    """The served greedy reply to the same messages with llama.cpp's repeat penalty off (``repeat_penalty=1``).

    llama-cpp-python's server applies ``repeat_penalty=1.1`` (over the reply's own tokens), ``top_k=40``
    and ``min_p=0.05`` unless a request sets them; the ``openai`` policy sends only the OpenAI fields.
    At temperature 0 only the repeat penalty can change a reply."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="none", timeout=300)
    reply = client.chat.completions.create(model="smollm2", messages=pair.messages, temperature=0.0,
                                           max_tokens=sampling["max_new_tokens"], stop=sampling.get("stop") or None,
                                           extra_body={"repeat_penalty": 1.0})
    return reply.choices[0].message.content or ""


def agreement(base_url: str, path: Path) -> dict[str, Any]:
    """How often greedy replies of ``hf`` (fp32) and llama.cpp (Q4_1) agree on the same prompts, turn 1 and later."""
    import torch

    torch.set_num_threads(1)
    groups, kept = [], []
    for prompt in PROMPTS:
        for family, episodes, turns in AGREEMENT_EPISODES:
            pairs = _agreement_pairs(prompt, family, episodes, turns, base_url)
            for pair in pairs:
                a, b = pair.hf.text.strip(), pair.served.text.strip()
                without = b if a == b else _reask_without_penalty(base_url, pair, PROMPTS[prompt]).strip()
                kept.append({"prompt": prompt, "family": family, "seed": pair.seed, "turn": pair.turn,
                             "hf": pair.hf.text, "served": pair.served.text, "served_repeat_penalty_1": without,
                             "hf_action": pair.hf.action, "served_action": pair.served.action})
            for which, chosen in (("first", [k for k in kept if k["turn"] == 1]), ("later", [k for k in kept if k["turn"] > 1])):
                chosen = [k for k in chosen if k["prompt"] == prompt and k["family"] == family]
                groups.append(_agreement_counts(prompt, family, which, chosen))
    record = {"commit": git_commit(), "loadavg": os.getloadavg(), "temperature": 0.0,
              "episodes": {family: {"episodes": n, "turns": t} for family, n, t in AGREEMENT_EPISODES},
              "groups": groups, "pairs": kept}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(groups), flush=True)
    return record


def _agreement_counts(prompt: str, family: str, turns: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [(p["hf"].strip(), p["served"].strip()) for p in pairs]
    return {"prompt": prompt, "family": family, "turns": turns, "pairs": len(pairs),
            "same_text": sum(a == b for a, b in texts),
            "one_text_starts_the_other": sum(a != b and (a.startswith(b) or b.startswith(a)) for a, b in texts),
            "same_action": sum(p["hf_action"] == p["served_action"] for p in pairs),
            "same_text_repeat_penalty_1": sum(p["hf"].strip() == p["served_repeat_penalty_1"] for p in pairs)}


def _cell(data: dict[str, Any], k: int, t: int) -> str:
    i, j = data["ks"].index(k), data["ts"].index(t)
    return f"{data['pass'][i][j]:.2f} [{data['ci_low'][i][j]:.2f}, {data['ci_high'][i][j]:.2f}]"


def tables(folder: Path) -> str:
    """The markdown tables of every kept run: Pass@(K,T) with 95 % CIs, behaviour, cost."""
    rows = ["| env (split) | prompt | backend | tasks × attempts | Pass@1 at T (95 % CI) | Pass@K at max T | "
            "expert agreement | invalid / no-effect / losing turns per episode | tokens per turn (prompt + reply) | wall s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for run in RUNS:
        if not (folder / run.name / "passkt.json").is_file():
            continue
        data = json.loads((folder / run.name / "passkt.json").read_text())
        meta = json.loads((folder / run.name / "run.json").read_text())
        k, t = data["ks"][-1], data["ts"][-1]
        pass1 = "; ".join(f"T={t_}: {_cell(data, 1, t_)}" for t_ in data["ts"])
        metrics, usage, steps = data["metrics"], data["usage"], data["timing"]["steps"]
        errors, episodes = metrics["error_recovery"]["errors_by_kind"], data["tasks"] * data["attempts"]
        tokens = (f"{usage['prompt_tokens'] / steps:.0f} + {usage['completion_tokens'] / steps:.1f}"
                  if usage.get("prompt_tokens") and steps else "n/a")
        split = data["config"]["env_kwargs"].get("split")
        rows.append(f"| {data['env_id']} ({split}) | {run.prompt} | {run.backend} | {data['tasks']} × {data['attempts']} | "
                    f"{pass1} | K={k},T={t}: {_cell(data, k, t)} | {metrics['decision_quality']['overall']:.2f} | "
                    f"{errors['invalid'] / episodes:.2f} / {errors['no_effect'] / episodes:.2f} / {errors['loss'] / episodes:.2f} | "
                    f"{tokens} | "
                    f"{meta['wall_s']:.0f} |")
    if (folder / "agreement.json").is_file():
        rows += ["", *agreement_table(json.loads((folder / "agreement.json").read_text()))]
    return "\n".join(rows)


def agreement_table(found: dict[str, Any]) -> list[str]:
    """The agreement rows: per env, prompt and turn group, how many greedy reply pairs agree, and how."""
    if "groups" not in found:
        return ["(agreement.json is from an older version of this script: re-run `--agreement`)"]
    names = {family: FAMILIES[family].env for family in FAMILIES}
    rows = ["| env | prompt | turns | reply pairs | same reply text | one reply starts the other (else differs) | "
            "same command | same text, llama.cpp repeat penalty off |", "|---|---|---|---|---|---|---|---|"]
    for group in found["groups"]:
        rows.append(f"| {names[group['family']]} | {group['prompt']} | {group['turns']} | {group['pairs']} | "
                    f"{group['same_text']} | {group['one_text_starts_the_other']} | {group['same_action']} | "
                    f"{group['same_text_repeat_penalty_1']} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--run", default="", help="comma-separated run names, or 'all'")
    parser.add_argument("--tasks", type=int, default=None, help="a probe: this many tasks, results not kept")
    parser.add_argument("--agreement", action="store_true", help="greedy reply agreement hf vs served, turn 1 and later")
    parser.add_argument("--tables", action="store_true", help="print the docs' markdown tables")
    parser.add_argument("--scratch", default="/tmp/smollm2-eval")
    args = parser.parse_args(argv)
    names = [r.name for r in RUNS] if args.run == "all" else [n for n in args.run.split(",") if n]
    unknown = sorted(set(names) - {r.name for r in RUNS})
    if unknown:
        parser.error(f"unknown runs {unknown}; known: {[r.name for r in RUNS]}")
    runs = [r for r in RUNS if r.name in names]
    if any(r.backend == "served" for r in runs) or args.agreement:
        with served() as server:
            for run in runs:
                if run.backend == "served":
                    run_one(run, server.base_url, args.tasks, Path(args.scratch))
            if args.agreement:
                agreement(server.base_url, DATA / "agreement.json")
    for run in runs:
        if run.backend == "hf":
            run_one(run, None, args.tasks, Path(args.scratch))
    if args.tables:
        print(tables(DATA))


if __name__ == "__main__":
    main()

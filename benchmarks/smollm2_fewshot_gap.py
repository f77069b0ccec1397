"""Why the evaluator's few-shot KeyDoor figure (Pass@1 at T=2: 1 of 20) sits below verifiers' (5 of 8 won).

Both play SmolLM2-135M-Instruct with the ``best`` prompt of ``benchmarks/smollm2_eval.py`` (one
``Action:`` line, one worked example, stop at a newline or a comma, temperature 0.7) on KeyDoor's
``test`` split, and at T=2 a win is exactly "take key" on turn 1, then "open <the task's door>"
on turn 2.  They differ in settings, not in the renderer (``--check-render`` shows the messages
are the same for the same settings): the eval table hides the budget and keeps earlier turns as
``history="replies"`` (the observation without its command list), the adapters' runs show it
(``[Turns left: 2 of 2]``) and keep the whole conversation (``history="append"``); and the
samples differ — ``benchmarks/smollm2_adapters.py verifiers`` sends one llama.cpp ``seed`` for
every request, so its 8 episodes share one random stream.

This script removes the sampling noise: for each held-out episode (reset seeds ``0 ..
episodes-1``) and each setting it computes, with the fp32 model, the exact probability that a
temperature-0.7 reply is "Action: take key" (then an end: a newline, a comma or the end of the
turn) on turn 1 and "Action: open <door>" on turn 2 after it — once under the ``hf`` backend's
sampler (temperature only) and once under llama-cpp-python's server defaults, which our
``openai`` policy does not override (top-k 40, min-p 0.05 before the temperature, repeat
penalty 1.1 over the reply's own tokens).  The product is the expected Pass@1 at T=2 of that
setting; the counts observed are then tested against it (Fisher's exact test between the two
runs, the binomial tail of each run under the expected rate).

Run (CPU, a few minutes)::

    python benchmarks/smollm2_fewshot_gap.py --episodes 20

writes ``docs/data/smollm2-eval/fewshot-gap.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks.provenance, from a checkout

from benchmarks.provenance import provenance  # noqa: E402

DATA = ROOT / "docs" / "data" / "smollm2-eval"
TEMPERATURE = 0.7
#: llama-cpp-python 0.3.x server defaults for a chat completion request that does not set them.
LLAMA_TOP_K, LLAMA_MIN_P, LLAMA_REPEAT_PENALTY = 40, 0.05, 1.1
#: (budget, budget shown, history) of each setting: the eval table's, the adapters', and the two between.
SETTINGS: dict[str, tuple[int, bool, str]] = {
    "eval table (budget hidden, history=replies)": (6, False, "replies"),
    "budget hidden, history=append": (6, False, "append"),
    "budget 2 shown, history=replies": (2, True, "replies"),
    "adapters (budget 2 shown, history=append)": (2, True, "append"),
}


def make_policy(history: str) -> Any:
    """The ``best`` prompt's ``LLMPolicy`` (its renderer only: the backend is never called).  The env shows
    the budget when made with ``show_budget=True``, as in the adapters' runs."""
    from agentgym_budget.policies.chat import Sampling
    from agentgym_budget.policies.factories import with_few_shot
    from agentgym_budget.policies.llm import LLMPolicy

    policy = LLMPolicy(types.SimpleNamespace(name="render-only"), Sampling(TEMPERATURE, 1.0, 16, ("\n", ",")),
                       prompt="action", history=history)
    return with_few_shot(policy, "KeyDoor-v0", few_shot_candidates=10)


class Scorer:
    """Exact reply probabilities of the fp32 model under the two samplers."""

    def __init__(self) -> None:
        import torch

        from agentgym_budget.policies.hf import load_model_and_tokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.model, self.tokenizer = load_model_and_tokenizer("smollm2", dtype=torch.float32)
        self.model.eval()
        vocab = len(self.tokenizer)
        ends = [i for i in range(vocab) if self._is_end(self.tokenizer.decode([i]))]
        ends += [self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.end_mask = torch.zeros(self.model.config.vocab_size, dtype=torch.bool)
        self.end_mask[sorted(set(ends))] = True
        self._memo: dict[str, dict[str, dict[str, float]]] = {}

    @staticmethod
    def _is_end(text: str) -> bool:
        """A token that ends the reply at a stop string (a newline or a comma), after at most spaces and a full stop
        or an exclamation mark (which the command parser drops)."""
        stripped = text.lstrip(" .!")
        return bool(stripped) and stripped[0] in "\n,"

    def step_probs(self, logits: Any, earlier: list[int]) -> dict[str, Any]:
        """The next-token distribution of each sampler from one position's logits."""
        torch = self.torch
        hf = torch.softmax(logits / TEMPERATURE, dim=-1)
        penalised = logits.clone()
        if earlier:  # llama.cpp's repeat penalty: the reply's own earlier tokens
            index = torch.tensor(sorted(set(earlier)))
            values = penalised[index]
            penalised[index] = torch.where(values > 0, values / LLAMA_REPEAT_PENALTY, values * LLAMA_REPEAT_PENALTY)
        keep = torch.zeros_like(penalised, dtype=torch.bool)
        keep[torch.topk(penalised, LLAMA_TOP_K).indices] = True
        keep &= penalised >= penalised.max() + math.log(LLAMA_MIN_P)
        llama = torch.softmax((penalised / TEMPERATURE).masked_fill(~keep, float("-inf")), dim=-1)
        return {"hf": hf, "llama": llama}

    def reply_probs(self, messages: list[dict[str, str]], candidates: list[str]) -> dict[str, dict[str, float]]:
        """``{sampler: {candidate: P(the reply is candidate, then an end)}}`` (memoised: settings share turn 1)."""
        key = json.dumps([messages, candidates])
        if key not in self._memo:
            self._memo[key] = self._reply_probs(messages, candidates)
        return self._memo[key]

    def _reply_probs(self, messages: list[dict[str, str]], candidates: list[str]) -> dict[str, dict[str, float]]:
        from agentgym_budget.policies.hf import encode_conversation

        torch = self.torch
        prompt = encode_conversation(self.tokenizer, messages)
        tails = [self.tokenizer(c, add_special_tokens=False)["input_ids"] for c in candidates]
        width = max(len(t) for t in tails)
        with torch.no_grad():  # the prompt once, then every candidate on a copy of its KV cache
            head = self.model(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
            cache = head.past_key_values
            cache.batch_repeat_interleave(len(tails))
            rows = torch.tensor([t + [t[-1]] * (width - len(t)) for t in tails])
            positions = torch.arange(len(prompt), len(prompt) + width).expand(len(tails), -1)
            rest = self.model(rows, past_key_values=cache, position_ids=positions).logits.float()
        logits = torch.cat([head.logits.float().expand(len(tails), -1, -1), rest], dim=1)
        if not self._memo:  # once: the cached path against one full forward pass of prompt + the first candidate
            with torch.no_grad():
                full = self.model(torch.tensor([prompt + tails[0]])).logits[0, len(prompt) - 1:].float()
            gap = float((full - logits[0, : len(tails[0]) + 1]).abs().max())
            if gap > 1e-3:
                raise RuntimeError(f"KV-cached candidate logits differ from a full forward pass by {gap}")
            print(f"cached vs full forward pass: max |logit difference| {gap:.2e}", flush=True)
        found: dict[str, dict[str, float]] = {"hf": {}, "llama": {}}
        for row, (candidate, tail) in enumerate(zip(candidates, tails)):
            totals = {"hf": 1.0, "llama": 1.0}
            for position in range(len(tail) + 1):
                probs = self.step_probs(logits[row, position], tail[:position])
                for sampler, p in probs.items():
                    totals[sampler] *= float(p[self.end_mask].sum() if position == len(tail) else p[tail[position]])
            for sampler in totals:
                found[sampler][candidate] = totals[sampler]
        return found


def episode_probs(scorer: Scorer, seed: int, budget: int, show: bool, history: str) -> dict[str, Any]:
    """Turn 1 and turn 2 (after "Action: take key") reply probabilities of one held-out episode."""
    from agentgym_budget.envs.registration import make_budget_env
    from agentgym_budget.policies.chat import Completion

    policy = make_policy(history)
    env = make_budget_env("KeyDoor-Budget-v0", budget, show_budget=show, split="test")
    obs, info = env.reset(seed=seed)
    commands = list(info["admissible_commands"])
    task_door = next(c for c in commands if c.startswith("open") and c.split()[1] in info["task"])
    state = policy.start(seed)
    first = scorer.reply_probs(policy.messages(state, obs, info), [f"Action: {c}" for c in commands])
    # record turn 1 as the policy would after the reply "Action: take key"
    from agentgym_budget.policies.prompting import split_budget

    policy._record(state, split_budget(obs, info)[0], policy._turn_message(obs, info),
                   Completion("Action: take key"), "Action: take key", "take key")
    obs, _, _, _, info = env.step("take key")
    second = scorer.reply_probs(policy.messages(state, obs, info), [f"Action: {c}" for c in info["admissible_commands"]])
    env.close()
    out: dict[str, Any] = {"seed": seed, "task_door": task_door}
    for sampler in ("hf", "llama"):
        p1, p2 = first[sampler], second[sampler]
        out[sampler] = {"turn1_take_key": p1["Action: take key"], "turn1_other_listed": sum(p1.values()) - p1["Action: take key"],
                        "turn2_task_door": p2[f"Action: {task_door}"], "turn2_take_key": p2["Action: take key"],
                        "turn2_other_door": sum(v for k, v in p2.items() if k not in (f"Action: {task_door}", "Action: take key")),
                        "win_t2": p1["Action: take key"] * p2[f"Action: {task_door}"]}
    return out


def fisher(won_a: int, n_a: int, won_b: int, n_b: int) -> float:
    from scipy.stats import fisher_exact

    return float(fisher_exact([[won_a, n_a - won_a], [won_b, n_b - won_b]]).pvalue)


def binomial_tail(won: int, n: int, p: float) -> dict[str, float]:
    """P(X >= won) and P(X <= won) for X ~ Binomial(n, p)."""
    from scipy.stats import binom

    return {"p_at_least": float(binom.sf(won - 1, n, p)), "p_at_most": float(binom.cdf(won, n, p))}


def observed() -> dict[str, dict[str, Any]]:
    """The wins at T=2 in the kept runs: the eval table's served/hf best rows and the adapters' runs."""
    runs: dict[str, dict[str, Any]] = {}
    for name in ("kd-best-served", "kd-best-hf"):
        data = json.loads((DATA / name / "passkt.json").read_text())
        n = data["tasks"] * data["attempts"]
        runs[f"eval {name}"] = {"won": round(data["pass"][0][data["ts"].index(2)] * n), "episodes": n,
                                "setting": "eval table (budget hidden, history=replies)"}
    for name in ("verifiers-best", "skyrl-best"):
        data = json.loads((ROOT / "docs" / "data" / "smollm2-adapters" / f"{name}.json").read_text())
        runs[name] = {"won": data["won"], "episodes": data["episodes"],
                      "setting": "adapters (budget 2 shown, history=append)"}
    return runs


def tables(path: Path) -> str:
    """The docs' tables from a results file: the expected rates per setting and sampler, then the runs against them."""
    if not path.is_file():
        return f"(no {path.name} yet: python benchmarks/smollm2_fewshot_gap.py)"
    report = json.loads(path.read_text(encoding="utf-8"))
    rows = ["| setting | sampler | P(turn 1: take key) | P(turn 2: the task's door) | P(turn 2: take key again) "
            "| P(turn 2: the other door) | expected Pass@1 at T=2 |", "|---|---|---|---|---|---|---|"]
    samplers = {"hf": "hf (temperature only)", "llama": "llama.cpp server defaults"}
    for name, setting in report["settings"].items():
        for sampler, label in samplers.items():
            mean = setting["mean"][sampler]
            rows.append(f"| {name} | {label} | {mean['turn1_take_key']:.3f} | {mean['turn2_task_door']:.3f} | "
                        f"{mean['turn2_take_key']:.3f} | {mean['turn2_other_door']:.3f} | {mean['win_t2']:.3f} |")
    rows += ["", "| run | setting | won at T=2 | expected (llama.cpp sampler) | P(as many or more) | P(as few or fewer) |",
             "|---|---|---|---|---|---|"]
    for name, run in report["observed"].items():
        tail = run["binomial_under_expected_llama"]
        rows.append(f"| {name} | {run['setting']} | {run['won']} / {run['episodes']} | "
                    f"{run['expected_win_t2']['llama'] * run['episodes']:.1f} / {run['episodes']} | "
                    f"{tail['p_at_least']:.3g} | {tail['p_at_most']:.3g} |")
    tests = "; ".join(f"{k}: p = {v:.3f}" for k, v in report["fisher_two_sided_p"].items())
    source = report["provenance"]
    rows += ["", f"Fisher's exact test (two-sided, as if every episode were an independent sample): {tests}.",
             f"From `docs/data/smollm2-eval/{path.name}`: `{source.get('command', '?')}` at commit "
             f"`{str(source.get('commit', '?'))[:10]}`, load average {source.get('load_average', '?')}, "
             f"{report['episodes']} held-out episodes (reset seeds 0-{report['episodes'] - 1}) per setting."]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=DATA / "fewshot-gap.json")
    args = parser.parse_args(argv)
    scorer = Scorer()
    settings: dict[str, Any] = {}
    for name, (budget, show, history) in SETTINGS.items():
        episodes = [episode_probs(scorer, seed, budget, show, history) for seed in range(args.episodes)]
        summary = {sampler: {key: round(sum(e[sampler][key] for e in episodes) / len(episodes), 4)
                             for key in episodes[0][sampler]} for sampler in ("hf", "llama")}
        settings[name] = {"budget": budget, "budget_shown": show, "history": history, "mean": summary,
                          "episodes": episodes}
        print(json.dumps({name: summary}), flush=True)
    runs = observed()
    for run in runs.values():
        expected = settings[run["setting"]]["mean"]
        run["expected_win_t2"] = {s: expected[s]["win_t2"] for s in ("hf", "llama")}
        run["binomial_under_expected_llama"] = binomial_tail(run["won"], run["episodes"], expected["llama"]["win_t2"])
    tests = {"verifiers-best vs eval kd-best-served": fisher(runs["verifiers-best"]["won"], runs["verifiers-best"]["episodes"],
                                                             runs["eval kd-best-served"]["won"], runs["eval kd-best-served"]["episodes"]),
             "verifiers-best vs skyrl-best": fisher(runs["verifiers-best"]["won"], runs["verifiers-best"]["episodes"],
                                                    runs["skyrl-best"]["won"], runs["skyrl-best"]["episodes"])}
    report = {"provenance": provenance(sys.argv if argv is None else ["benchmarks/smollm2_fewshot_gap.py", *argv]),
              "temperature": TEMPERATURE, "llama_defaults": {"top_k": LLAMA_TOP_K, "min_p": LLAMA_MIN_P,
                                                              "repeat_penalty": LLAMA_REPEAT_PENALTY},
              "episodes": args.episodes, "settings": settings, "observed": runs, "fisher_two_sided_p": tests}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"observed": runs, "fisher_two_sided_p": tests}, indent=1))


if __name__ == "__main__":
    main()

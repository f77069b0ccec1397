"""The CPU cost of a SmolLM2 GRPO update, today's path beside trunk reuse and shared prefixes, against the limit.

Three arms on the 50-update KeyDoor recipe's configuration (``docs/data/smollm2-rl/long/``: the SFT
folder, GiGPO, mix:2,3,4, LoRA r = 8 on the top 4 layers, short prompt, 2 tasks x G = 8, one
thread) and on KeyDoorRooms (budget mix:4,6,8): ``today`` (``TrainConfig.trunk_reuse`` and
``share_prefix`` off: the loss runs all 30 layers, every prompt prefills its own tokens),
``trunk_reuse`` (the loss runs the top 4 on the rollout's hidden states) and ``shared_prefix``
(trunk reuse, and a prefix several prompts share runs once).  The arms' updates are interleaved
(update 0 of every arm, then update 1, ...), so a change of load hits them alike; every arm plays
the same first update.  Per update: the trainer's ``cpu_*_seconds`` parts, and the rollout split
into prefill (``HFChatBackend._prefill`` and ``_share_prefixes``, which runs the shared prefixes) and
decode steps (``_step``), timed in CPU seconds.

**The limit**: the FLOPs each update must compute at least once — every distinct prompt prefix
token (a trie over the update's prompts: a group's shared task prompt and a conversation's earlier
turns count once) and every generated token through all layers, the LM head on the generated
tokens, and the top-N layers forward + backward (taken as 2x the forward; frozen weights need no
weight gradient) on the same distinct tokens with the LM head on the action tokens — divided by
the measured fp32 GEMM rate at those shapes (one thread, [tokens, hidden] x [hidden, 3 hidden]).
Attention's own FLOPs are left out (prompts of a few hundred tokens).

Run (the committed figures, ``docs/data/update-cost/results.json``)::

    python benchmarks/update_cost.py --sft-folder runs/sft-random40 --updates 3 --out docs/data/update-cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks.provenance import provenance, write_results  # noqa: E402
from benchmarks.smollm2_rl import PARTS  # noqa: E402

ENVS = {"KeyDoor-v0": "mix:2,3,4", "KeyDoorRooms-v0": "mix:4,6,8"}
#: arm: (TrainConfig.trunk_reuse, TrainConfig.share_prefix)
ARMS = {"today": (False, False), "trunk_reuse": (True, False), "shared_prefix": (True, True)}


class RolloutClock:
    """CPU seconds of every ``HFChatBackend`` prefill and decode step (class-wide: the trainer builds a backend per
    rollout), with the tokens they ran."""

    def __init__(self) -> None:
        from agentgym_budget.policies.hf import HFChatBackend

        self.prefill = self.decode = 0.0
        self.decode_tokens = self.prompt_tokens = self.prompt_tokens_run = self.unique_prompt_tokens = 0
        self.trie: dict = {}
        prefill, step, share = HFChatBackend._prefill, HFChatBackend._step, HFChatBackend._share_prefixes

        def timed_prefill(backend: Any, prompts: list, *args: Any, **kwargs: Any) -> Any:
            start, run = time.process_time(), backend.prompt_tokens_run
            try:
                return prefill(backend, prompts, *args, **kwargs)
            finally:
                self.prefill += time.process_time() - start
                self.prompt_tokens += sum(len(p) for p in prompts)  # every turn's whole prompt (the loss's)
                self.prompt_tokens_run += backend.prompt_tokens_run - run  # those not reused from the cache
                for prompt in prompts:  # distinct prefixes: a group's shared task prompt counts once
                    node = self.trie
                    for token in prompt:
                        if token not in node:
                            node[token] = {}
                            self.unique_prompt_tokens += 1
                        node = node[token]

        def timed_share(backend: Any, *args: Any, **kwargs: Any) -> Any:
            start, run = time.process_time(), backend.prompt_tokens_run
            try:
                return share(backend, *args, **kwargs)
            finally:
                self.prefill += time.process_time() - start
                self.prompt_tokens_run += backend.prompt_tokens_run - run  # the shared prefixes, run once

        def timed_step(backend: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            self.decode_tokens += len(batch.rows)
            try:
                return step(backend, batch, *args, **kwargs)
            finally:
                self.decode += time.process_time() - start

        HFChatBackend._prefill, HFChatBackend._step = timed_prefill, timed_step  # type: ignore[method-assign]
        HFChatBackend._share_prefixes = timed_share  # type: ignore[method-assign]
        self.backend_class = HFChatBackend

    def take(self) -> dict[str, float]:
        out = {"cpu_prefill_seconds": self.prefill, "cpu_decode_seconds": self.decode,
               "decode_tokens": self.decode_tokens, "prompt_tokens": self.prompt_tokens,
               "prompt_tokens_run": self.prompt_tokens_run, "unique_prompt_tokens": self.unique_prompt_tokens}
        self.prefill = self.decode = 0.0
        self.decode_tokens = self.prompt_tokens = self.prompt_tokens_run = self.unique_prompt_tokens = 0
        self.trie = {}
        return out


def gemm_rate(tokens: int, hidden: int, repeats: int = 20) -> float:
    """Measured fp32 FLOP/s of ``[tokens, hidden] @ [hidden, 3 hidden]`` (the MLP's shape), best of ``repeats``."""
    import torch

    a, b = torch.randn(tokens, hidden), torch.randn(hidden, 3 * hidden)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        best = min(best, time.process_time() - start)
    return 2 * tokens * hidden * 3 * hidden / best


def limit_seconds(model: Any, top: int, prompt_run: int, generated: int, loss_tokens: int, action_tokens: int,
                  rate: float) -> dict[str, float]:
    """The least CPU time of an update at ``rate`` FLOP/s (module docstring)."""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    per_layer = sum(p.numel() for p in decoder.layers[0].parameters() if p.ndim == 2)
    layers = len(decoder.layers)
    head_params = head.weight.numel()
    rollout = 2 * per_layer * layers * (prompt_run + generated) + 2 * head_params * generated
    loss = 3 * (2 * per_layer * top * loss_tokens + 2 * head_params * action_tokens)
    return {"rollout_flops": rollout, "loss_flops": loss, "limit_seconds": (rollout + loss) / rate}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-folder", required=True, help="the recipe's SFT folder (benchmarks/smollm2_rl.py)")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--work", default="runs/update-cost")
    parser.add_argument("--out", default=None, help="write results.json here")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from agentgym_budget.train import TrainConfig, Trainer

    torch.set_num_threads(1)
    started = provenance(sys.argv if argv is None else ["benchmarks/update_cost.py", *argv])
    clock = RolloutClock()
    results: dict[str, Any] = {"settings": vars(args), "envs": {}}
    for env_id in args.envs.split(","):
        trainers = {}
        for arm, (reuse, share) in ARMS.items():
            config = TrainConfig(
                env_id=env_id, budget=ENVS[env_id], env_kwargs={"split": "train"}, model=args.sft_folder,
                max_turns_shown=2, history="actions", prompt="short", seed=args.seed, total_updates=args.updates,
                tasks_per_update=2, group_size=8, max_new_tokens=10, micro_batch_size=8, lora_r=8, lora_layers=4,
                learning_rate=2e-3, advantage="gigpo", trunk_reuse=reuse, share_prefix=share, eval_every=0, save_every=0,
                torch_threads=1, output_dir=str(Path(args.work) / env_id / arm), progress_bar=False,
                tensorboard=False)
            trainers[arm] = Trainer(config)
        rows: dict[str, list[dict[str, float]]] = {arm: [] for arm in trainers}
        for _ in range(args.updates):
            for arm, trainer in trainers.items():
                clock.take()
                metrics = trainer.train_step()
                row = {k: v for k, v in metrics.items() if k.startswith("cpu_") or k in (
                    "update_turns", "action_tokens", "trunk_state_bytes", "success_rate")}
                row.update(clock.take())
                rows[arm].append(row)
                print(env_id, arm, json.dumps(row), flush=True)
        results["envs"][env_id] = _summary(rows)
    results["gemm_flops_per_second"] = gemm_rate(512, 576)
    for summary in results["envs"].values():
        for arm in summary["arms"].values():
            arm.update(limit_seconds(trainers["today"].model, 4, arm["unique_prompt_tokens"], arm["decode_tokens"],
                                     arm["unique_prompt_tokens"] + arm["action_tokens"], arm["action_tokens"],
                                     results["gemm_flops_per_second"]))
            arm["limit_cpu_seconds_per_turn"] = arm["limit_seconds"] / arm["update_turns"]
            arm["share_of_limit"] = arm["limit_cpu_seconds_per_turn"] / arm["cpu_seconds_per_turn"]
    print(json.dumps(results["envs"], indent=1))
    if args.out:
        write_results(Path(args.out) / "results.json", started, results)
    return results


def _summary(rows: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    arms = {}
    for arm, updates in rows.items():
        mean = {key: statistics.mean(u[key] for u in updates) for key in updates[0]}
        total = sum(mean[f"cpu_{part}_seconds"] for part in PARTS)
        mean["cpu_seconds_per_update"] = total
        mean["cpu_seconds_per_turn"] = total / mean["update_turns"]
        mean["per_turn"] = {part: mean[f"cpu_{part}_seconds"] / mean["update_turns"]
                            for part in (*PARTS, "prefill", "decode")}
        mean["loss_tokens"] = mean["prompt_tokens"] + mean["action_tokens"]  # every turn's prompt + reply
        arms[arm] = {"updates": updates, **mean}
    today = arms["today"]["cpu_seconds_per_turn"]
    return {"arms": arms, "ratio_per_turn": {arm: today / arms[arm]["cpu_seconds_per_turn"] for arm in arms}}


if __name__ == "__main__":
    main()

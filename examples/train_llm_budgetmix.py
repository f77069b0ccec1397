"""Train an LLM agent with BudgetMix (or fixed-budget, or curriculum) GRPO on any registered env.

Every :class:`~agentgym_budget.train.TrainConfig` field is a flag (``--help`` lists them).

    # CPU smoke run (agentgym_budget.train.keydoor_smoke_config): the offline tiny model on KeyDoor's
    # training set-ups, BudgetMix over 2..6 turns, evaluated on held-out set-ups; measured over 10 seeds
    # in experiments/learning_check/README.md (benchmarks/learning_check.py), about 3 CPU-minutes a seed
    python examples/train_llm_budgetmix.py --env-id KeyDoor-v0 --env-kwargs '{"split": "train"}' \\
        --budget mix:2,3,4,6 --total-updates 200 --tasks-per-update 16 --group-size 4 --update-epochs 2 \\
        --minibatches 2 --max-new-tokens 12 --eval-every 50 --eval-tasks 40 --eval-attempts 2 --eval-ks 1,2 \\
        --torch-threads 1 --output-dir runs/keydoor_mix

    # the same on 2 processes (torch.distributed: DDP over gloo on CPU; --distributed fsdp for FSDP2)
    torchrun --nproc_per_node 2 examples/train_llm_budgetmix.py --env-id KeyDoor-v0 --budget mix:2,3,4,6 \\
        --total-updates 200 --tasks-per-update 16 --group-size 4 --max-new-tokens 12 --output-dir runs/ddp

    # the comparison: the same run, one flag apart
    python examples/train_llm_budgetmix.py --env-id ALFWorld-v0 --model Qwen/Qwen2.5-0.5B-Instruct \\
        --budget fixed:30 --output-dir runs/fixed
    python examples/train_llm_budgetmix.py --env-id ALFWorld-v0 --model Qwen/Qwen2.5-0.5B-Instruct \\
        --budget mix:10,20,30,40,50 --output-dir runs/mix

Same as ``agentgym-budget train ...``.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agentgym_budget.train import train  # noqa: E402
from agentgym_budget.train.config import add_config_arguments, config_from_arguments  # noqa: E402

if __name__ == "__main__":
    parser = add_config_arguments(argparse.ArgumentParser(description=__doc__,
                                                          formatter_class=argparse.RawDescriptionHelpFormatter))
    train(config_from_arguments(parser.parse_args()))

"""Wrappers for any Gymnasium env: the turn budget and the process reward."""

from agentgym_budget.wrappers.budget import DEFAULT_BUDGET_TEMPLATE, TurnBudget, find_turn_budget
from agentgym_budget.wrappers.budget_spec import (
    BudgetSchedule,
    CurriculumBudget,
    FixedBudget,
    MixBudget,
    UniformBudget,
    parse_budget_spec,
)
from agentgym_budget.wrappers.process_reward import ProcessReward, ProcessSignal, register_subgoal_detector

__all__ = [
    "DEFAULT_BUDGET_TEMPLATE",
    "BudgetSchedule",
    "CurriculumBudget",
    "FixedBudget",
    "MixBudget",
    "ProcessReward",
    "ProcessSignal",
    "TurnBudget",
    "UniformBudget",
    "find_turn_budget",
    "parse_budget_spec",
    "register_subgoal_detector",
]

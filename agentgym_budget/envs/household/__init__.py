"""``SharedHousehold``: a multi-agent household text world as a PettingZoo env (extra ``multiagent``).

PettingZoo has no registry like Gymnasium's; ours makes it by name:
``agentgym_budget.envs.registration.make_multi_agent_env("SharedHousehold-v0")`` (see
:mod:`agentgym_budget.envs.household.shared_household` for the env itself).  PettingZoo is imported only when
the env is made.
"""

from typing import Any

__all__ = ["AGENT_NAMES", "OBJECTS", "RECEPTACLES", "SharedHouseholdEnv", "env", "parallel_env"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from agentgym_budget.envs.household import shared_household  # needs pettingzoo

    return getattr(shared_household, name)

"""The client of the agentgym-budget OpenEnv environment: OpenEnv's ``EnvClient`` for its types.

Example (a server on port 8000, e.g. ``uvicorn server.app:app --port 8000`` in this folder)::

    from agentgym_budget_env import BudgetEnv, TextAction

    with BudgetEnv(base_url="http://127.0.0.1:8000").sync() as client:
        result = client.reset(seed=0, budget=3)      # budget=: force this episode's budget
        while not result.done:
            result = client.step(TextAction(command="look"))
        obs = result.observation
        print(obs.budget, obs.turns_left, obs.terminated, obs.truncated)   # 3 0 False True
"""

from agentgym_budget.integrations.openenv_env import BudgetEnvClient as BudgetEnv

__all__ = ["BudgetEnv"]

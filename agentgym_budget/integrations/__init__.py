"""Adapters to other RL stacks; each module imports its library only when used.

* :mod:`agentgym_budget.integrations.sb3` — Stable-Baselines3 / sb3-contrib: text envs as
  ``Discrete`` over admissible commands with action masks and a ``Box`` observation encoder.
* :mod:`agentgym_budget.integrations.pettingzoo_budget` — turn budgets (per-agent or shared)
  for any PettingZoo ``ParallelEnv`` (AEC envs through PettingZoo's standard conversions).
* :mod:`agentgym_budget.integrations.vector` — Gymnasium vector envs over text envs
  (``AsyncVectorEnv`` without shared memory; autoreset modes).

LLM-RL libraries, each over :class:`~agentgym_budget.integrations.session.BudgetSession` (one
budgeted episode held for APIs that are not Gymnasium's):

* :mod:`agentgym_budget.integrations.trl_env` — TRL ``GRPOTrainer(environment_factory=...)`` (extra ``trl``).
* :mod:`agentgym_budget.integrations.verifiers_env` — a verifiers ``MultiTurnEnv`` (extra ``verifiers``).
* :mod:`agentgym_budget.integrations.verifiers_v1` — a verifiers v1 taskset and env (verifiers 0.4).
* :mod:`agentgym_budget.integrations.skyrl` — SkyRL-gym ``BaseTextEnv`` and registry (extra ``skyrl``).
* :mod:`agentgym_budget.integrations.openenv_env` — served over OpenEnv's HTTP/WebSocket server (extra ``openenv``).
* :mod:`agentgym_budget.integrations.verl_agent_loop` — a verl agent loop (extra ``verl``, in a venv of its own);
  :mod:`agentgym_budget.integrations.verl_dataset` writes its parquet rows (no verl needed).

The multi-agent household env itself is an environment: :mod:`agentgym_budget.envs.household`.
"""

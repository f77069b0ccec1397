"""Scale-out backends for rollouts.  Ray is imported only when a Ray executor is started.

* :class:`RayExecutor` — the evaluator's ``Executor`` on a pool of Ray actors (``--backend ray``):
  ``evaluate(..., executor=RayExecutor())``;
* :class:`RayRolloutPool` — the trainer's rollout pool on Ray actors (``--rollout-backend ray``):
  ``Trainer(config, rollout_pool=RayRolloutPool.for_config)``.

Both run on the one Ray driver, :class:`~agentgym_budget.distributed.driver.ActorDriver` (one
start, submit and replace loop, one death rule).

This layer sits above ``eval`` and ``train``: they are handed an executor or a pool and never
import this package.
"""

from agentgym_budget.distributed.driver import ActorPoolExhaustedError
from agentgym_budget.distributed.ray_executor import RayExecutor
from agentgym_budget.distributed.ray_rollouts import RayRolloutPool

__all__ = ["ActorPoolExhaustedError", "RayExecutor", "RayRolloutPool"]

"""Scale-out backends for rollouts.  Ray is imported only when a Ray executor is started.

* :class:`RayExecutor` — the evaluator's ``Executor`` on a pool of Ray actors (``--backend ray``).
"""

from agentgym_budget.distributed.ray_pool import ActorPoolExhaustedError, RayExecutor

__all__ = ["ActorPoolExhaustedError", "RayExecutor"]

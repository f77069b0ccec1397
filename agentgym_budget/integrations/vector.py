"""Gymnasium vector envs over text envs: :func:`make_text_vector_env`.

``gym.make_vec`` works with every agentgym_budget id; this helper only sets the two things
text envs need:

* ``shared_memory=False`` for ``AsyncVectorEnv``.  Gymnasium reads a ``Text`` observation out
  of shared memory once, into a tuple of ``str`` snapshots, not a view (as for ``Dict``
  spaces, Gymnasium issue #1164), so with shared memory every later observation reads as the
  initial zero buffer (``"000..."``).  Observations travel through the pipe instead.
* an explicit autoreset mode.  The default, ``NEXT_STEP`` (Gymnasium's default), returns the
  final observation of an episode as a normal step; the *next* ``step`` call resets that
  sub-env, ignores its action and returns the new episode's first observation with reward 0
  (``info["turn"] == 0`` tells such a step apart).  ``SAME_STEP`` resets at once and puts the
  final observation in ``infos["final_obs"]``.  LLM rollout loops usually want ``NEXT_STEP``:
  the prompt for every turn is the observation just returned, and the step after the end is
  skipped when building training samples.

Constructors are picklable (an env id and kwargs), so ``context="spawn"`` / ``"forkserver"``
work as well as the default fork.

Example:
    >>> from agentgym_budget.integrations.vector import make_text_vector_env
    >>> envs = make_text_vector_env("KeyDoor-Budget-v0", num_envs=2, mode="sync", budget=4)
    >>> observations, infos = envs.reset(seed=0)
    >>> observations[0].startswith("You are in a hall"), infos["budget"].tolist()
    (True, [4, 4])
    >>> envs.close()
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
from gymnasium.vector import AutoresetMode

__all__ = ["make_text_vector_env"]


def make_text_vector_env(
    env_id: str,
    num_envs: int,
    *,
    mode: Literal["async", "sync"] = "async",
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    context: str | None = None,
    **env_kwargs: Any,
) -> gym.vector.VectorEnv:
    """``gym.make_vec(env_id)`` with the settings text envs need (see the module docstring).

    Args:
        env_id: any registered text env id (e.g. ``"ALFWorld-Budget-v0"``).
        num_envs: number of sub-envs (``reset(seed=s)`` seeds them ``s, s+1, ...``).
        mode: ``"async"`` (one process per sub-env) or ``"sync"`` (in this process).
        autoreset_mode: ``NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        context: multiprocessing start method for ``"async"`` (``None``: the platform default).
        env_kwargs: passed to ``gym.make`` (``budget=`` etc. for ``-Budget-v0`` ids).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if mode not in ("async", "sync"):
        raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}")
    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode(autoreset_mode)}
    if mode == "async":
        vector_kwargs.update(shared_memory=False, context=context)
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs, **env_kwargs)

"""The seed streams of an episode: every seed derives from (base seed, task, attempt), never from
where or when the episode runs, so that every executor returns the same records for the same jobs.

* a *task* is an env reset seed: all attempts of task ``i`` reset the env with
  ``task_seed(seed, i)`` (the same game), and differ only through the policy's seed
  ``attempt_seed(seed, i, attempt)``.

Example:
    >>> task_seed(0, 3) == task_seed(0, 3) != task_seed(0, 4)
    True
    >>> attempt_seed(0, 3, 1) != attempt_seed(0, 3, 2)
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["attempt_seed", "task_seed"]


def task_seed(seed: int, task: int) -> int:
    """The env reset seed of ``task`` (the same for all its attempts)."""
    return int(np.random.SeedSequence([seed, task]).generate_state(1)[0])


def attempt_seed(seed: int, task: int, attempt: int) -> int:
    """The policy seed of one attempt at ``task``."""
    return int(np.random.SeedSequence([seed, task, attempt, 0x9A55]).generate_state(1)[0])


"""ScienceWorld (``ScienceWorld-v0``): the ``scienceworld`` package's simulator as a TextEnv.

ScienceWorld ships its simulator as a jar that runs on Java (8+) and is driven over py4j;
one JVM is started per env (about 3 s) and reused across resets; :meth:`close` stops it.

Semantics (where they differ from ``scienceworld.ScienceWorldEnv``):

* ``reward`` is the change in the task score this step divided by 100, so an episode's
  rewards sum to ``score / 100`` in ``[-1, 1]``; ``info["score"]`` is the 0-100 score;
* ``terminated`` only when the task is completed (``won``) or failed (``lost``: ScienceWorld
  sets the score to -100, e.g. after focusing on the wrong object).  ScienceWorld's own
  ``envStepLimit`` also reports ``done`` when the step limit is hit; it is disabled here, step
  limits are ``TimeLimit`` / ``TurnBudget`` truncations;
* ``info["admissible_commands"]`` is ScienceWorld's valid action-object combinations;
* with ``expert=True`` (default) the simulator's gold action sequence is the expert:
  ``info["expert_plan"]`` is the rest of it and ``info["expert_action"]`` its next action
  while the agent has followed it exactly; after any other action the gold path no longer
  applies (ScienceWorld time passes and objects change), so both become ``None`` / ``[]``
  for the rest of the episode.  Generating it makes a reset slower (0.5-2 s); gold paths are
  cached per (task, variation, simplifications);
* the first observation is the task description followed by ``look around``'s answer;
* lone surrogates (``"\\ud800"``, which UTF-8 cannot encode and py4j would fail to send) are
  replaced by U+FFFD before an action reaches the simulator; any string is a legal turn.

Determinism: the seed fixes the (task, variation), ScienceWorld rebuilds that world
identically, and unambiguous commands have the same outcomes.  Two things inside the
simulator depend on the JVM's history instead (Java identity hash order), so they can differ
between two episodes of the same variation: the referent names in the valid-action list
(e.g. ``book (Beowulf)`` vs ``book in shelf``), and the order of the choices in an
"Ambiguous request: Please enter the number ..." prompt.  Replaying actions by index into
``admissible_commands``, or answering those prompts by number, is therefore not reproducible;
only a fresh JVM per episode would make it so.

Task selection: ``task=`` a name (``"boil"``), a ScienceWorld task id (``"1-1"``) or an index
into :attr:`task_names`, or ``None`` for every task; ``variation=`` an index, or ``None`` to
draw one of the ``split``'s variations (ScienceWorld's own train / dev / test split).  Draws
use ``self.np_random``, so the same seed gives the same episode; ``reset(options={"task":
..., "variation": ...})`` picks both for one episode.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("ScienceWorld-v0", task="boil")
    >>> obs, info = env.reset(seed=0, options={"variation": 0})
    >>> info["task"].startswith("Your task is to boil water.")
    True
    >>> obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    >>> env.close()
"""

from __future__ import annotations

import re
import sys
from typing import Any

from agentgym_budget._optional import require
from agentgym_budget.envs.base import TextEnv

__all__ = ["SPLITS", "ScienceWorldEnv", "split_variations"]

#: ScienceWorld's variation splits.
SPLITS: tuple[str, ...] = ("train", "dev", "test")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

_EXTRA = "scienceworld"
_TASK_PREFIX = "Task Description:"


def split_variations(n_variations: int) -> tuple[list[int], list[int], list[int]]:
    """ScienceWorld's (train, dev, test) variation indices for a task with ``n_variations``.

    The simulator's own rule (``PythonInterface.getSets``): about 50 / 25 / 25 % in index
    order, with special cases below 5 variations.  Computed here because the simulator only
    answers for the task currently loaded, and loading one would replace the running episode
    (a test checks this against the simulator).
    """
    special = {0: ([], [], []), 1: ([0], [], [0]), 2: ([0], [], [1]), 3: ([0], [1], [2]), 4: ([0, 1], [2], [3])}
    if n_variations in special:
        return special[n_variations]
    size = n_variations // 4
    groups = [list(range(start, min(start + size, n_variations))) for start in range(0, n_variations, size)]
    return groups[0] + groups[1], groups[2], groups[3] + (groups[4] if len(groups) > 4 else [])


class ScienceWorldEnv(TextEnv):
    """ScienceWorld tasks as a TextEnv (see the module docstring).

    Args:
        task: task name, task id (``"1-1"``) or index; ``None`` draws a task per episode.
        variation: variation index; ``None`` draws one of ``split``'s variations per episode.
        split: ``"train"``, ``"dev"`` or ``"test"`` (ScienceWorld's variation split).
        simplifications: ScienceWorld's simplification string, e.g. ``"easy"`` or
            ``"teleportAction,openDoors"``.
        expert: generate the gold action sequence (the expert) at each reset.
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    def __init__(
        self,
        task: str | int | None = None,
        *,
        variation: int | None = None,
        split: str = "train",
        simplifications: str = "",
        expert: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        scienceworld = require("scienceworld", _EXTRA, "ScienceWorld-v0")
        # No step limit inside the simulator: its limit would end episodes as "done".
        self._sim: Any = scienceworld.ScienceWorldEnv("", envStepLimit=sys.maxsize)
        self.task_names: list[str] = list(self._sim.get_task_names())
        self._task = None if task is None else self._task_name(task)
        self._variation = None if variation is None else self._checked_variation(self._task, variation)
        self.split = split
        self.simplifications = simplifications
        self.expert = expert
        self._split_variations: dict[str, tuple[list[int], list[int], list[int]]] = {}
        self._gold_paths: dict[tuple[str, int, str], list[str]] = {}
        self._episode: tuple[str, int] = ("", 0)
        self._task_description = ""
        self._gold: list[str] = []
        self._on_gold_path = False
        self._score = 0

    # -- task selection -----------------------------------------------------------------
    def _task_name(self, task: str | int) -> str:
        """The simulator's name for a task given by name, id or index."""
        if isinstance(task, bool):
            raise ValueError(f"task must be a name, id or index, got {task!r}")
        if isinstance(task, int) or (isinstance(task, str) and task.isdigit()):
            index = int(task)
            if not 0 <= index < len(self.task_names):
                raise ValueError(f"task index must be in [0, {len(self.task_names)}), got {task!r}")
            return self.task_names[index]
        from scienceworld.utils import infer_task  # accepts names, "1-1" ids and paper titles

        name = infer_task(task)
        if name not in self.task_names:
            raise ValueError(f"unknown ScienceWorld task {task!r}; tasks: {self.task_names}")
        return name

    def _checked_variation(self, task: str | None, variation: int) -> int:
        if isinstance(variation, bool) or not isinstance(variation, int) or variation < 0:
            raise ValueError(f"variation must be a non-negative int, got {variation!r}")
        if task is not None and variation >= (n := self._sim.get_max_variations(task)):
            raise ValueError(f"task {task!r} has {n} variations (0..{n - 1}), got variation={variation}")
        return variation

    def variations(self, task: str, split: str | None = None) -> list[int]:
        """The variation indices of ``task`` in ``split`` (default: this env's split)."""
        split = split or self.split
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        task = self._task_name(task)
        if task not in self._split_variations:
            self._split_variations[task] = split_variations(self._sim.get_max_variations(task))
        return list(self._split_variations[task][SPLITS.index(split)])

    def _choose(self, options: dict[str, Any]) -> tuple[str, int]:
        task_option, variation_option = options.pop("task", None), options.pop("variation", None)
        if options:
            raise ValueError(f"ScienceWorld reset options are 'task' and 'variation', got {sorted(options)}")
        if task_option is not None:
            task = self._task_name(task_option)
        elif self._task is not None:
            task = self._task
        else:
            task = self.task_names[int(self.np_random.integers(len(self.task_names)))]
        if variation_option is not None:
            return task, self._checked_variation(task, variation_option)
        if self._variation is not None:
            return task, self._checked_variation(task, self._variation)
        pool = self.variations(task)
        if not pool:
            raise ValueError(f"task {task!r} has no {self.split!r} variations; pass variation= or another split")
        return task, pool[int(self.np_random.integers(len(pool)))]

    # -- TextEnv hooks ------------------------------------------------------------------
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task, variation = self._choose(options)
        self._episode = (task, variation)
        key = (task, variation, self.simplifications)
        generate_gold = self.expert and key not in self._gold_paths
        # load() alone rebuilds the world from (task, variation); ScienceWorldEnv.reset() would
        # load it a second time (and regenerate the gold path), so the first move is done here.
        self._sim.load(task, variation, self.simplifications, generateGoldPath=generate_gold)
        if generate_gold:
            self._gold_paths[key] = list(self._sim.get_gold_action_sequence())
        self._gold = list(self._gold_paths.get(key, []))
        self._on_gold_path = self.expert
        observation, _, _, sim_info = self._sim.step("look around")
        self._score = sim_info["score"]
        self._task_description = sim_info["taskDesc"].removeprefix(_TASK_PREFIX).strip()
        return f"{sim_info['taskDesc'].strip()}\n\n{observation.strip()}", self._info(sim_info)

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._on_gold_path:
            self._on_gold_path = bool(self._gold) and action.strip() == self._gold[0]
            self._gold = self._gold[1:] if self._on_gold_path else []
        observation, _, done, sim_info = self._sim.step(_LONE_SURROGATE.sub("\ufffd", action))
        score = sim_info["score"]
        reward, self._score = (score - self._score) / 100.0, score
        # With the simulator's step limit disabled, done means completed or failed (score < 0).
        return observation.strip(), reward, bool(done), self._info(sim_info, done=bool(done))

    def _info(self, sim_info: dict[str, Any], done: bool = False) -> dict[str, Any]:
        lost = sim_info["score"] < 0
        plan = self._gold if self._on_gold_path and not done else []
        task, variation = self._episode
        return {
            "admissible_commands": list(sim_info["valid"]),
            "won": done and not lost,
            "lost": lost,
            "task": self._task_description,
            "task_id": f"{task}/{variation}",
            "variation": variation,
            "score": sim_info["score"],
            "expert_action": plan[0] if plan else None,
            "expert_plan": list(plan),
        }

    def close(self) -> None:
        if getattr(self, "_sim", None) is not None:
            self._sim.close()
            # scienceworld's __del__ calls close() again, which writes to the dead JVM's pipe
            # (BrokenPipeError, printed as "Exception ignored"): make that second call a no-op.
            self._sim.close = lambda: None
            self._sim = None
        super().close()

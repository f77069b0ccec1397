"""``KeyDoor``: take the key, then open the door of the colour the task names.

A short-horizon text env with three admissible commands — ``take key`` and
``open <colour> door`` for the two doors in the room — built so that a tiny language model
can learn it with RL on a CPU in minutes, and so that a policy that ignores the task does
measurably worse than one that reads it:

* the goal door's colour is in the task, the other door is a distractor;
* opening a door without the key is answered ``"The <colour> door is locked."`` (no progress);
* opening the wrong door with the key sets off an alarm: the episode is *lost*
  (``terminated=True``, ``info["lost"]=True``);
* opening the goal door with the key wins (reward 1.0, ``terminated=True``).

The expert needs two turns.  A uniformly random policy over the admissible commands wins
1/9 = 0.111 of episodes within 2 turns, 0.309 within 4, and 0.264 under the smoke run's
``mix:2,3,4,6`` (exact: :func:`random_play_win_rate`).

Tasks are the 12 ordered (goal, distractor) pairs of four colours; ``reset(seed=...)``
draws one (and the door order) from ``self.np_random``, ``reset(options={"task": "red-blue"})``
picks ``goal-distractor`` explicitly.  ``split`` restricts the draws: ``"test"`` holds out
every set-up whose doors are red and blue or green and yellow (4 pairs, 8 set-ups with the door
order), ``"train"`` has the other 8 pairs (16 set-ups); ``"all"`` (the default) draws from all
12.  In ``train`` each pair of doors is seen with either door as the goal, so no policy can do
better than chance there without reading the task; ``test`` then asks for the same reading
with door pairs never seen in training (each colour is a goal in both splits).  Holding out
single pairs instead would leave a shortcut that the held-out set-ups punish: with red-blue
held out, a hall with a red and a blue door always has the goal blue in training.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("KeyDoor-v0")
    >>> obs, info = env.reset(seed=0, options={"task": "red-blue"})
    >>> info["task"], info["expert_plan"], info["state_key"]
    ('open the red door', ['take key', 'open red door'], 'no key')
    >>> obs, reward, terminated, truncated, info = env.step("take key")
    >>> obs, info["state_key"]
    ('You take the key.', 'key held')
    >>> obs, reward, terminated, truncated, info = env.step("open red door")
    >>> reward, terminated, info["won"]
    (1.0, True, True)
    >>> games = {gym.make("KeyDoor-v0", split="test").reset(seed=s)[1]["game"] for s in range(50)}
    >>> len(games), sorted({game.split(":")[0] for game in games})  # 4 held-out pairs x 2 door orders
    (8, ['blue-red', 'green-yellow', 'red-blue', 'yellow-green'])
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv, action_effect
from agentgym_budget.wrappers.budget_spec import (
    BudgetSchedule,
    FixedBudget,
    MixBudget,
    UniformBudget,
    parse_budget_spec,
)

__all__ = ["COLOURS", "SPLITS", "TASK_IDS", "KeyDoorEnv", "open_door", "pick_task", "random_play_win_rate",
           "split_task_ids"]

COLOURS: tuple[str, ...] = ("red", "blue", "green", "yellow")
#: Every task id, ``"<goal>-<distractor>"``.
TASK_IDS: tuple[str, ...] = tuple(f"{g}-{d}" for g, d in itertools.permutations(COLOURS, 2))
#: The held-out pairs: every pair whose doors are red and blue or green and yellow.
_TEST_IDS: tuple[str, ...] = ("red-blue", "blue-red", "green-yellow", "yellow-green")
#: The task ids of each ``split``.
SPLITS: dict[str, tuple[str, ...]] = {
    "all": TASK_IDS,
    "train": tuple(t for t in TASK_IDS if t not in _TEST_IDS),
    "test": _TEST_IDS,
}


def random_play_win_rate(budget: int | str | BudgetSchedule) -> Fraction:
    """The exact chance that a uniformly random policy over the 3 admissible commands wins.

    Within ``budget`` turns (an int), or averaged over the budgets a ``fixed``/``mix``/``uniform``
    spec (or schedule) draws (a curriculum's budget depends on training progress: refused).  Each turn the policy
    takes the key with probability 1/3; holding it, it opens the goal door with 1/3 (win), the
    other with 1/3 (lost); without it, a door is locked (no progress).  The chance level the
    learning check's figures are read against.

    Example:
        >>> float(random_play_win_rate(2)), round(float(random_play_win_rate(4)), 3)
        (0.1111111111111111, 0.309)
        >>> round(float(random_play_win_rate("mix:2,3,4,6")), 3)
        0.264
    """
    if not isinstance(budget, int):
        return _mean_over_budgets(budget)
    no_key, key, won = Fraction(1), Fraction(0), Fraction(0)
    for _ in range(budget):
        no_key, key, won = no_key * Fraction(2, 3), no_key / 3 + key / 3, won + key / 3
    return won


def _mean_over_budgets(spec: str | BudgetSchedule) -> Fraction:
    schedule = parse_budget_spec(spec) if isinstance(spec, str) else spec
    if isinstance(schedule, FixedBudget):
        return random_play_win_rate(schedule.budget)
    if isinstance(schedule, MixBudget):
        weights = [Fraction(w) for w in schedule.weights] if schedule.weights else [Fraction(1)] * len(schedule.budgets)
        return sum((w * random_play_win_rate(b) for b, w in zip(schedule.budgets, weights)), Fraction(0)) / sum(weights)
    if isinstance(schedule, UniformBudget):
        budgets = range(schedule.low, schedule.high + 1)
        return sum((random_play_win_rate(b) for b in budgets), Fraction(0)) / len(budgets)
    raise ValueError(f"random_play_win_rate: {spec!r} has no fixed distribution of budgets (use fixed, mix or uniform)")


def split_task_ids(split: str, env_name: str) -> tuple[str, ...]:
    """The task ids of ``split`` (:data:`SPLITS`), or a one-line error naming ``env_name``."""
    if split not in SPLITS:
        raise ValueError(f"{env_name} split must be one of {sorted(SPLITS)}, got {split!r}")
    return SPLITS[split]


def pick_task(np_random: Any, task_ids: tuple[str, ...], options: dict[str, Any], split: str,
              env_name: str) -> tuple[str, str]:
    """``(goal, distractor)`` of a reset: ``options["task"]``, else one drawn from ``task_ids``.

    Any other reset option, or a task outside the split, is a one-line error naming ``env_name``.
    """
    task_id = options.pop("task", None)
    if options:
        raise ValueError(f"{env_name} reset options are 'task' (and 'budget' under TurnBudget), got {sorted(options)}")
    if task_id is None:
        task_id = task_ids[int(np_random.integers(len(task_ids)))]
    if task_id not in task_ids:
        raise ValueError(f"unknown {env_name} task {task_id!r} in split {split!r}; tasks are {list(task_ids)}")
    goal, distractor = task_id.split("-")
    return goal, distractor


def open_door(colour: str, has_key: bool, goal: str) -> tuple[str, bool, bool]:
    """``(observation, won, lost)`` of opening the ``colour`` door: locked without the key, else win or alarm."""
    if not has_key:
        return f"The {colour} door is locked.", False, False
    if colour == goal:
        return f"You unlock the {colour} door and open it. You win!", True, False
    return f"You open the {colour} door. An alarm rings. You lose.", False, True


class KeyDoorEnv(TextEnv):
    """Take the key, then open the goal door (see the module docstring)."""

    max_observation_length = 256
    max_action_length = 64

    def __init__(self, split: str = "all", render_mode: str | None = None) -> None:
        self._task_ids = split_task_ids(split, "KeyDoor")
        super().__init__(render_mode=render_mode)
        self.split = split
        self._goal = self._distractor = ""
        self._doors: tuple[str, str] = ("", "")
        self._has_key = False
        self._done = False

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._goal, self._distractor = pick_task(self.np_random, self._task_ids, options, self.split, "KeyDoor")
        pair = [self._goal, self._distractor]
        self.np_random.shuffle(pair)
        self._doors = (pair[0], pair[1])
        self._has_key = False
        self._done = False
        observation = (
            f"You are in a hall with a {self._doors[0]} door and a {self._doors[1]} door. "
            f"A key lies on the floor.\nYour task is to: open the {self._goal} door."
        )
        return observation, self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = " ".join(action.lower().split())
        won = lost = False
        had_key, plan_before = self._has_key, len(self._plan())
        valid = not self._done and (command == "take key" or command in (f"open {door} door" for door in self._doors))
        if self._done:
            observation = INVALID_ACTION_FEEDBACK
        elif command == "take key":
            observation = "You already have the key." if self._has_key else "You take the key."
            self._has_key = True
        elif command in (f"open {door} door" for door in self._doors):
            observation, won, lost = open_door(command.split()[1], self._has_key, self._goal)
        else:
            observation = INVALID_ACTION_FEEDBACK
        self._done = self._done or won or lost
        info = self._info(won=won, lost=lost)
        # The state is (key held, game over): a locked door or a second "take key" changes nothing.
        info["action_effect"] = action_effect(valid=valid, changed=won or lost or self._has_key != had_key,
                                              won=won, lost=lost, plan_before=plan_before,
                                              plan_after=info["expert_plan_length"])
        return observation, float(won), won or lost, info

    def _plan(self) -> list[str]:
        return ([] if self._has_key else ["take key"]) + [f"open {self._goal} door"]

    def _info(self, won: bool = False, lost: bool = False) -> dict[str, Any]:
        plan = self._plan()
        return {
            "admissible_commands": ["take key"] + [f"open {door} door" for door in self._doors],
            "won": won,
            "lost": lost,
            "task": f"open the {self._goal} door",
            "task_id": f"{self._goal}-{self._distractor}",
            "game": f"{self._goal}-{self._distractor}:{self._doors[0]},{self._doors[1]}",  # the set-up, door order too
            "expert_action": plan[0],
            "expert_plan": plan,
            # None once the game is over without a win (no plan can win it any more)
            "expert_plan_length": 0 if won else None if self._done else len(plan),
            # the state (the set-up aside): the text can't tell it, "Nothing happens." is said in both
            "state_key": "over" if self._done else "key held" if self._has_key else "no key",
        }

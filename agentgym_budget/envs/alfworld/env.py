"""ALFWorld as a Gymnasium text env: household tasks in six types, bundled games, two engines.

Each episode plays one :class:`~agentgym_budget.envs.alfworld.game.AlfredGame` of the chosen
split, picked with ``self.np_random`` (so ``reset(seed=s)`` always gives the same game) or
by ``reset(options={"task": index_or_game_id})``.  Observations and admissible commands are
exactly the real engine's (upstream ALFWorld 0.4.2, ``AlfredTWEnv`` text); reward is 1.0 on
the step that wins, else 0.0, and the episode terminates when won.

``info`` holds ``admissible_commands``, ``won``, ``task`` (the goal sentence), ``task_type``,
``game`` (the game id), ``expert_action`` and ``expert_plan``.  The expert is upstream's
handcoded expert (:mod:`~agentgym_budget.envs.alfworld.expert`), seeded per episode from the
env's seed.  With ``expert_type="upstream"``, ``expert_action`` is exactly upstream
``AlfredExpert``'s ``extra.expert_plan[0]`` (its random draws aside, which are seeded here),
bugs included: ``"look"`` at reset, after an empty command, and whenever its expert's proposal
is not admissible or it raises; the expert re-plans after every other turn, refused ones too.
``expert_type="fixed"`` (the default for now: the evaluator's plan-length metrics need a
winning plan, which upstream's expert lacks on most pick-two tasks) repairs upstream's ``move``
bookkeeping (with it upstream fails most pick-two tasks), starts from no facts (see the expert module), and keeps the expert's action and plan
through a turn the game refuses (``"Nothing happens."``: its state unchanged), so junk turns
never disturb the expert-based metrics.  ``expert_plan`` is ``[expert_action]`` (upstream's
one-step plan) unless ``expert_plan_horizon > 1`` and the engine can copy its state (the fast
engine can): then it is the expert's rollout from the current state, up to that many actions or
the winning one.  ``expert_plan_length`` is that rollout's length when it wins (``None``
otherwise: a one-step or cut plan says nothing about the rest).  ``action_effect`` (see
:func:`~agentgym_budget.envs.base.action_effect`): a command outside the engine's admissible
commands is ``invalid``; ``look`` / ``inventory`` / ``examine`` / ``help`` (PDDL operators
without effects) are ``no_effect``; other commands are judged by the plan length.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("ALFWorld-v0", split="valid_seen", task_types=[1])
    >>> obs, info = env.reset(seed=0)
    >>> info["task_type"], obs.splitlines()[0]
    ('pick_and_place_simple', '-= Welcome to TextWorld, ALFRED! =-')
    >>> for _ in range(50):
    ...     obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    ...     if terminated or truncated:
    ...         break
    >>> reward, info["won"]
    (1.0, True)
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any

from agentgym_budget.envs.alfworld.engine import AlfredEngine, CloneableAlfredEngine, EngineStep, make_engine
from agentgym_budget.envs.alfworld.expert import EXPERT_TYPES, HandCodedExpert, start_facts
from agentgym_budget.envs.alfworld.game import AlfredGame, load_games
from agentgym_budget.envs.base import TextEnv, action_effect
from agentgym_budget.text import INVALID_ACTION_FEEDBACK

__all__ = ["ALFWorldEnv"]

_NO_EXPERT_ACTION = "look"  # what upstream AlfredExpert reports when its expert has nothing admissible
#: alfred.pddl's operators without effects (they only set Fast Downward's unobservable
#: ``checked`` facts): an admissible command with one of these verbs leaves the state as it was.
_OBSERVE_ONLY_VERBS = frozenset({"look", "inventory", "examine", "help"})


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks (see the module docstring).

    Args:
        split: ``"train"``, ``"valid_seen"`` (in-distribution eval) or ``"valid_unseen"``
            (held-out rooms).
        task_types: task type names or upstream ids 1..6 (``None`` = all six).
        engine: ``"fast"`` (pure Python, step-for-step identical to the real engine) or
            ``"textworld"`` (the real engine, extra ``alfworld``), or an engine object.
        data_dir: an upstream ``json_2.1.1`` folder to play instead of the bundled games
            (default: the ``ALFWORLD_DATA`` environment variable, else the bundled games).
        expert_plan_horizon: length of ``info["expert_plan"]`` when the engine can be copied.
        expert_type: ``"fixed"`` (the default, see the module docstring) or ``"upstream"``
            (upstream's expert action exactly).
        max_plan_len: play only games the expert wins in at most this many actions
            (:attr:`~agentgym_budget.envs.alfworld.game.AlfredGame.expert_plan_len`; ``None`` = all).
        include_sliced: ``False`` leaves out the sliced-object tasks (upstream's released games have none).
        render_mode: ``None``, ``"ansi"`` or ``"human"``.
    """

    def __init__(
        self,
        split: str = "train",
        task_types: Iterable[int | str] | None = None,
        engine: str | AlfredEngine = "fast",
        data_dir: str | os.PathLike[str] | None = None,
        expert_plan_horizon: int = 1,
        render_mode: str | None = None,
        expert_type: str = "fixed",
        max_plan_len: int | None = None,
        include_sliced: bool = True,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if expert_plan_horizon < 1:
            raise ValueError(f"expert_plan_horizon must be >= 1, got {expert_plan_horizon}")
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"expert_type must be one of {list(EXPERT_TYPES)}, got {expert_type!r}")
        self.expert_type = expert_type
        self.split = split
        self.games: list[AlfredGame] = load_games(split, task_types, data_dir, max_plan_len, include_sliced)
        if not self.games:
            raise ValueError(
                f"no ALFWorld games in split {split!r} for task_types={task_types!r}, max_plan_len={max_plan_len!r}, "
                f"include_sliced={include_sliced!r}; relax the filters"
            )
        self._game_index = {game.id: index for index, game in enumerate(self.games)}
        self.engine: AlfredEngine = make_engine(engine) if isinstance(engine, str) else engine
        self.expert_plan_horizon = expert_plan_horizon
        self.game: AlfredGame | None = None
        self._expert: HandCodedExpert | None = None
        self._expert_action = _NO_EXPERT_ACTION
        self._won = False
        # The expert's plan from the current state, and whether it ends with the winning action.
        self._plan: list[str] = [_NO_EXPERT_ACTION]
        self._plan_wins = False

    # -- TextEnv hooks -------------------------------------------------------------------------
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        index = self._task_index(options["task"]) if "task" in options else int(self.np_random.integers(len(self.games)))
        self.game = self.games[index]
        expert_seed = int(self.np_random.integers(2**63))
        step = self.engine.reset(self.game)
        self._won = step.won
        self._expert = HandCodedExpert(
            self.game.task_params, random.Random(expert_seed), expert_type=self.expert_type,
            # upstream's expert reads the engine's facts, the start state's included
            start_facts=start_facts(self.game) if self.expert_type == "upstream" else None,
        )
        self._expert_action = self._expert.start(step.observation)
        self._plan, self._plan_wins = self._roll_out_plan(step.won)
        return step.observation, self._info(step)

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.game is None:
            raise RuntimeError("ALFWorldEnv.step() called before reset()")
        before = self._last_info
        step = self.engine.step(action)
        reward = 1.0 if step.won and not self._won else 0.0
        self._won = step.won
        refused = step.observation.strip() == INVALID_ACTION_FEEDBACK and action != self._expert_action and not step.won
        if refused and self.expert_type == "fixed":
            # The game refused the agent's action: its state is unchanged, so is the expert's (its
            # plan is a function of the game state and its seeded draws, not of the commands tried).
            return step.observation, reward, step.won, self._info(step)
        self._expert_action = self._advance_expert(self._expert, action, step)
        self._plan, self._plan_wins = self._next_plan(action, step.won)
        info = self._info(step)
        # Both engines apply exactly the admissible commands (after strip()), anything else changes nothing.
        command = action.strip()
        info["action_effect"] = action_effect(
            valid=command in before["admissible_commands"], changed=command.split(" ", 1)[0] not in _OBSERVE_ONLY_VERBS,
            won=reward > 0, plan_before=before["expert_plan_length"], plan_after=info["expert_plan_length"])
        return step.observation, reward, step.won, info

    def close(self) -> None:
        self.engine.close()
        super().close()

    # -- helpers -------------------------------------------------------------------------------
    def _task_index(self, task: int | str) -> int:
        if isinstance(task, str):
            if task not in self._game_index:
                raise ValueError(f"unknown ALFWorld game id {task!r} in split {self.split!r}")
            return self._game_index[task]
        if isinstance(task, bool) or not isinstance(task, int) or not 0 <= task < len(self.games):
            raise ValueError(f"options['task'] must be a game id or an index in [0, {len(self.games)}), got {task!r}")
        return task

    @staticmethod
    def _advance_expert(expert: HandCodedExpert | None, action: str, step: EngineStep) -> str:
        """The expert's next action after ``action`` (``"look"`` when it has none, like upstream)."""
        if expert is None:
            return _NO_EXPERT_ACTION
        return expert.reported_action(action, step.observation, step.admissible_commands)

    def _next_plan(self, action: str, won: bool) -> tuple[list[str], bool]:
        """The plan after ``action``: the rest of the current one when the agent followed it."""
        plan = self._plan
        if self._plan_wins and not won and len(plan) > 1 and action == plan[0] and plan[1] == self._expert_action:
            # Engine and expert are deterministic: a new rollout would replay plan[1:] exactly.
            return plan[1:], True
        return self._roll_out_plan(won)

    def _roll_out_plan(self, won: bool) -> tuple[list[str], bool]:
        """The expert's rollout from the current state on a copy of the engine (and whether it wins)."""
        plan = [self._expert_action]
        if self.expert_plan_horizon == 1 or won or not isinstance(self.engine, CloneableAlfredEngine):
            return plan, False
        engine = self.engine.clone()
        expert = self._expert.clone() if self._expert is not None else None
        wins = False
        while len(plan) < self.expert_plan_horizon:
            step = engine.step(plan[-1])
            if step.won:
                wins = True
                break
            plan.append(self._advance_expert(expert, plan[-1], step))
        engine.close()
        return plan, wins

    def _info(self, step: EngineStep) -> dict[str, Any]:
        assert self.game is not None
        return {
            "admissible_commands": list(step.admissible_commands),
            "won": step.won,
            "task": self.game.goal,
            "task_type": self.game.task_type,
            "game": self.game.id,
            "expert_action": self._expert_action,
            "expert_plan": list(self._plan),
            # The whole remaining plan is known only when the rollout reached the win (or it is won).
            "expert_plan_length": 0 if step.won else len(self._plan) if self._plan_wins else None,
        }

"""ALFWorld as a Gymnasium text env: household tasks in six types, bundled games, two engines.

Each episode plays one :class:`~agentgym_budget.envs.alfworld.game.AlfredGame` of the chosen
split, picked with ``self.np_random`` (so ``reset(seed=s)`` always gives the same game) or
by ``reset(options={"task": index_or_game_id})``.  Observations and admissible commands are
exactly the real engine's (upstream ALFWorld 0.4.2, ``AlfredTWEnv`` text); reward is 1.0 on
the step that wins, else 0.0, and the episode terminates when won.

``info`` holds ``admissible_commands``, ``won``, ``task`` (the goal sentence), ``task_type``,
``game`` (the game id), ``expert_action``, ``expert_plan`` and ``expert_plan_length``.  The
experts are upstream's handcoded expert (:mod:`~agentgym_budget.envs.alfworld.expert`), seeded
per episode from the env's seed, in one of two behaviours (``expert_type``):

* ``"upstream"`` (the default: results compare with published numbers): ``expert_action`` is
  exactly upstream ``AlfredExpert``'s ``extra.expert_plan[0]`` (its random draws aside, which
  are seeded here), bugs included: ``"look"`` at reset, after an empty command, and whenever its
  expert's proposal is not admissible or it raises; it re-plans after every other turn, refused
  ones too; its ``move`` bookkeeping bug loses most pick-two tasks.
* ``"fixed"``: repairs that bookkeeping (wins every bundled eval game), starts from no facts (see
  the expert module), and keeps its action and plan through a turn the game refuses
  (``"Nothing happens."``: its state unchanged).

Which fields follow ``expert_type`` and which do not:

* ``expert_action`` and ``expert_plan`` are the chosen expert's.  ``expert_plan`` is
  ``[expert_action]`` (upstream's one-step plan) unless ``expert_plan_horizon > 1`` and the engine
  can copy its state (the fast engine can): then it is that expert's rollout from the current
  state, up to that many actions or the winning one.
* ``expert_plan_length`` and ``action_effect`` (what the evaluator's plan-length metrics read)
  come from a winning *reference*, the ``"fixed"`` expert, whatever ``expert_type`` is: the same
  turns get the same values in both modes.  ``expert_plan_length`` is the length of the
  reference's rollout (on a copy of the engine, up to ``expert_plan_horizon`` actions) when it
  wins, ``0`` once won, ``None`` otherwise (a one-step or cut plan says nothing about the rest;
  so always ``None`` with ``expert_plan_horizon=1`` or an engine without ``clone()``, where no
  reference is run).  ``action_effect`` (see :func:`~agentgym_budget.envs.base.action_effect`):
  a command outside the engine's admissible commands is ``invalid``; ``look`` / ``inventory`` /
  ``examine`` / ``help`` (PDDL operators without effects) are ``no_effect``; other commands are
  judged by ``expert_plan_length`` before and after.

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
from agentgym_budget.envs.alfworld.expert import EXPERT_TYPES, HandCodedExpert
from agentgym_budget.envs.alfworld.game import AlfredGame, load_games
from agentgym_budget.envs.base import TextEnv, action_effect
from agentgym_budget.text import INVALID_ACTION_FEEDBACK

__all__ = ["ALFWorldEnv"]

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
        expert_plan_horizon: the longest rollout (``info["expert_plan"]`` and the reference plan
            behind ``info["expert_plan_length"]``) when the engine can be copied.
        expert_type: ``"upstream"`` (the default: upstream's expert action exactly, bugs
            included) or ``"fixed"``; it picks ``expert_action`` / ``expert_plan`` only (see
            the module docstring).
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
        expert_type: str = "upstream",
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
        self._won = False
        # The expert whose action info reports (expert_type's) and the winning reference the
        # plan-length metrics read (the fixed expert; None when plans cannot be rolled out).
        self._expert: _ExpertTrack | None = None
        self._reference: _ExpertTrack | None = None

    # -- TextEnv hooks -------------------------------------------------------------------------
    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        index = self._task_index(options["task"]) if "task" in options else int(self.np_random.integers(len(self.games)))
        self.game = self.games[index]
        expert_seed = int(self.np_random.integers(2**63))
        step = self.engine.reset(self.game)
        self._won = step.won
        self._close_experts()
        self._expert = self._start_expert(self.expert_type, expert_seed, step)
        if self.expert_type == "fixed":
            self._reference = self._expert
        else:  # only a rollout says anything about the plan's length: no rollouts, no reference to pay for
            self._reference = self._start_expert("fixed", expert_seed, step) if self._plans_roll_out() else None
        return step.observation, self._info(step)

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.game is None or self._expert is None:
            raise RuntimeError("ALFWorldEnv.step() called before reset()")
        before = self._last_info
        step = self.engine.step(action)
        reward = 1.0 if step.won and not self._won else 0.0
        self._won = step.won
        for expert in self._experts():
            if expert.follow(action, step):
                expert.replan(action, step.won, self.engine, self.expert_plan_horizon)
        info = self._info(step)
        # Both engines apply exactly the admissible commands (after strip()), anything else changes nothing.
        command = action.strip()
        info["action_effect"] = action_effect(
            valid=command in before["admissible_commands"], changed=command.split(" ", 1)[0] not in _OBSERVE_ONLY_VERBS,
            won=reward > 0, plan_before=before["expert_plan_length"], plan_after=info["expert_plan_length"])
        return step.observation, reward, step.won, info

    def close(self) -> None:
        self._close_experts()
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

    def _experts(self) -> list[_ExpertTrack]:
        """The experts following the episode: the reported one, and the reference unless it is the same."""
        experts = [self._expert] if self._expert is not None else []
        if self._reference is not None and self._reference is not self._expert:
            experts.append(self._reference)
        return experts

    def _close_experts(self) -> None:
        for expert in self._experts():
            expert.close()

    def _plans_roll_out(self) -> bool:
        """Whether plans are rollouts (longer than the next action): a horizon and a copyable engine."""
        return self.expert_plan_horizon > 1 and isinstance(self.engine, CloneableAlfredEngine)

    def _start_expert(self, expert_type: str, seed: int, step: EngineStep) -> _ExpertTrack:
        """A ``expert_type`` expert that has read the intro, seeded with ``seed``, and its plan."""
        assert self.game is not None
        expert = HandCodedExpert.for_game(self.game, random.Random(seed), expert_type=expert_type)
        track = _ExpertTrack(expert, expert.start(step.observation), keeps_through_refusals=expert_type == "fixed")
        track.roll_out(self.engine, self.expert_plan_horizon, step.won)
        return track

    def _info(self, step: EngineStep) -> dict[str, Any]:
        assert self.game is not None and self._expert is not None
        reference = self._reference
        return {
            "admissible_commands": list(step.admissible_commands),
            "won": step.won,
            "task": self.game.goal,
            "task_type": self.game.task_type,
            "game": self.game.id,
            "expert_action": self._expert.action,
            "expert_plan": list(self._expert.plan),
            # The reference's whole remaining plan: known only when its rollout reached the win (or it is won).
            "expert_plan_length": 0 if step.won else len(reference.plan) if reference and reference.plan_wins else None,
            # the engine state where the engine can name it (the fast engine): GiGPO's anchor states
            **({"state_key": self.engine.state_key()} if hasattr(self.engine, "state_key") else {}),
        }


class _ExpertTrack:
    """One expert following the episode: the action it reports now and its plan from the current state.

    ``keeps_through_refusals``: a turn the game refuses (``"Nothing happens."``) leaves the expert
    as it was (the fixed expert: its plan is a function of the game state and its seeded draws, not
    of the commands tried); upstream's re-plans after it.
    """

    def __init__(self, expert: HandCodedExpert, action: str, keeps_through_refusals: bool) -> None:
        self.expert = expert
        self.action = action
        self.keeps_through_refusals = keeps_through_refusals
        self.plan: list[str] = [action]
        self.plan_wins = False  # whether ``plan`` ends with the winning action
        # A plan cut at the horizon: the engine copy and expert twin that rolled it out (the copy's
        # state is just before plan[-1]), so following the plan costs one more step, not a rollout.
        self._ahead: tuple[CloneableAlfredEngine, HandCodedExpert] | None = None

    def follow(self, action: str, step: EngineStep) -> bool:
        """Move the expert past the agent's ``action`` (False: a refused turn left it as it was)."""
        refused = step.observation.strip() == INVALID_ACTION_FEEDBACK and action != self.action and not step.won
        if refused and self.keeps_through_refusals:
            return False
        self.action = _reported_action(self.expert, action, step)
        return True

    def replan(self, action: str, won: bool, engine: AlfredEngine, horizon: int) -> None:
        """The plan after ``action``: the rest of the current one when the agent followed it."""
        plan = self.plan
        if not won and len(plan) > 1 and action == plan[0] and plan[1] == self.action:
            # Engine and expert are deterministic: a new rollout would replay plan[1:] exactly
            # (and, for a plan cut at the horizon, one action further).
            self.plan = plan[1:]
            if not self.plan_wins:
                self._play_ahead(horizon)
            return
        self.roll_out(engine, horizon, won)

    def roll_out(self, engine: AlfredEngine, horizon: int, won: bool) -> None:
        """The plan: the expert's rollout from the current state on a copy of ``engine``, up to
        ``horizon`` actions or the winning one (just the next action when the engine cannot be copied)."""
        self.close()
        self.plan, self.plan_wins = [self.action], False
        if horizon == 1 or won or not isinstance(engine, CloneableAlfredEngine):
            return
        self._ahead = (engine.clone(), self.expert.clone())
        self._play_ahead(horizon)

    def _play_ahead(self, horizon: int) -> None:
        """Extend the plan on the copy until it wins (the copy is then dropped) or has ``horizon`` actions."""
        assert self._ahead is not None
        engine, expert = self._ahead
        plan = self.plan
        while len(plan) < horizon:
            step = engine.step(plan[-1])
            if step.won:
                self.plan_wins = True
                self.close()
                return
            if expert.timed_out:
                # The rest of the plan is "look", which changes nothing (so never wins): no need to
                # play it (random play spends a fifth of its rollout steps here).  The copies stay
                # valid: the engine's state is the one before each look, and the expert only says "look".
                plan.extend(["look"] * (horizon - len(plan)))
                return
            plan.append(_reported_action(expert, plan[-1], step))

    def close(self) -> None:
        """Drop the engine copy, if any."""
        if self._ahead is not None:
            self._ahead[0].close()
            self._ahead = None


def _reported_action(expert: HandCodedExpert, action: str, step: EngineStep) -> str:
    """The expert's next action after ``action`` (``"look"`` when it has none, like upstream)."""
    return expert.reported_action(action, step.observation, step.admissible_commands)

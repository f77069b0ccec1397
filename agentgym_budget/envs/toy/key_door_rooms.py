"""``KeyDoorRooms``: KeyDoor's task with the key and the doors in different rooms of a corridor.

The same task as :mod:`~agentgym_budget.envs.toy.key_door` — take the key, then open the door of
the colour the task names; the wrong door with the key loses (``terminated=True``,
``info["lost"]=True``), a door without the key is ``"The <colour> door is locked."``, the goal
door with the key wins (reward 1.0) — but the agent walks to get there, so the expert needs 4 to
6 turns and a turn budget between 2 and 8 decides the outcome:

* 3, 4 or 5 rooms in a row (drawn per episode); the agent starts in room 1, the westmost;
* the key lies in one of the rooms (any of them, drawn per episode);
* the two doors are in the last room, the eastmost;
* the commands are ``go east`` / ``go west`` (where there is a room that way), ``take key`` (where
  the key lies) and ``open <colour> door`` (in the last room, one per door): at most 4 admissible
  commands in any state.  Any other command is ``"Nothing happens."`` (``action_effect="invalid"``).

A room's description (the reset observation and the answer to a move) names the room and its
number of rooms, what lies there, the exits, and whether the agent carries the key; the reset
observation ends with the task line, as KeyDoor's does.

The expert walks east to the key, takes it, walks on to the last room and opens the goal door:
``rooms + 1`` turns wherever the key lies.  ``reset`` draws the number of rooms uniformly from
(3, 4, 5), so plan lengths 4, 5 and 6 each come with probability 1/3.  Each task has 24 set-ups
(2 door orders x 12 (rooms, key room) pairs: 3 + 4 + 5): 6 with a 4-turn plan, 8 with 5 turns,
10 with 6 turns; a set-up is drawn with probability 1/2 * 1/3 * 1/rooms.  No episode can be won in
fewer than 4 turns.  A uniformly random policy over the admissible commands wins 2.0% of episodes
within 4 turns (13/648), 5.8% within 6 and 10.0% within 8 (exact; see
``tests/test_key_door_rooms.py``).

Tasks and ``split`` are KeyDoor's (:data:`~agentgym_budget.envs.toy.key_door.SPLITS`): the 12
ordered (goal, distractor) pairs of four colours; ``"test"`` holds out every set-up whose doors
are red and blue or green and yellow (4 tasks, 96 set-ups), ``"train"`` has the other 8 tasks
(192 set-ups), each pair of doors with either door as the goal, so that no policy can beat chance
there without reading the task; ``"all"`` (the default) has all 12 (288 set-ups).  The rooms and
the key are drawn the same way in every split: the split holds out door pairs, not layouts.
``reset(seed=...)`` draws the task, then the number of rooms, the key's room and the door order
from ``self.np_random``; ``reset(options={"task": "red-blue"})`` picks the task explicitly.

Example:
    >>> import gymnasium as gym
    >>> import agentgym_budget
    >>> env = gym.make("KeyDoorRooms-v0")
    >>> obs, info = env.reset(seed=12, options={"task": "red-blue"})
    >>> print(obs)
    You are in room 1 of 4. Exits: east.
    Your task is to: open the red door.
    >>> info["game"], info["admissible_commands"]
    ('red-blue:blue,red:rooms=4,key=2', ['go east'])
    >>> info["expert_plan"]
    ['go east', 'take key', 'go east', 'go east', 'open red door']
    >>> print(env.step("go east")[0])
    You are in room 2 of 4. A key lies on the floor. Exits: east, west.
    >>> print(env.step("take key")[0])
    You take the key.
    >>> obs, reward, terminated, truncated, info = env.step("open red door")  # not here: not a command now
    >>> obs, info["action_effect"]
    ('Nothing happens.', 'invalid')
    >>> print(env.step("go east")[0])
    You are in room 3 of 4. Exits: east, west. You carry the key.
    >>> print(env.step("go east")[0])
    You are in room 4 of 4. There is a blue door and a red door. Exits: west. You carry the key.
    >>> obs, reward, terminated, truncated, info = env.step("open red door")
    >>> reward, terminated, info["won"], info["turn"]
    (1.0, True, True, 6)
"""

from __future__ import annotations

from typing import Any

from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK, TextEnv, action_effect
from agentgym_budget.envs.toy.key_door import COLOURS, SPLITS, TASK_IDS, open_door, pick_task, split_task_ids

__all__ = ["COLOURS", "ROOM_COUNTS", "SPLITS", "TASK_IDS", "KeyDoorRoomsEnv"]

#: The numbers of rooms ``reset`` draws from (uniformly); the expert needs ``rooms + 1`` turns.
ROOM_COUNTS: tuple[int, ...] = (3, 4, 5)


class KeyDoorRoomsEnv(TextEnv):
    """Walk to the key, take it, walk to the doors, open the goal door (see the module docstring)."""

    max_observation_length = 256
    max_action_length = 64

    def __init__(self, split: str = "all", render_mode: str | None = None) -> None:
        self._task_ids = split_task_ids(split, "KeyDoorRooms")
        super().__init__(render_mode=render_mode)
        self.split = split
        self._goal = self._distractor = ""
        self._doors: tuple[str, str] = ("", "")
        self._rooms = self._key_room = self._room = 0  # rooms are numbered from 0 (west) here, from 1 in text
        self._has_key = False
        self._done = False

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._goal, self._distractor = pick_task(self.np_random, self._task_ids, options, self.split, "KeyDoorRooms")
        self._rooms = ROOM_COUNTS[int(self.np_random.integers(len(ROOM_COUNTS)))]
        self._key_room = int(self.np_random.integers(self._rooms))
        pair = [self._goal, self._distractor]
        self.np_random.shuffle(pair)
        self._doors = (pair[0], pair[1])
        self._room, self._has_key, self._done = 0, False, False
        return f"{self._describe()}\nYour task is to: open the {self._goal} door.", self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = " ".join(action.lower().split())
        valid = not self._done and command in self._admissible()
        state_before, plan_before = (self._room, self._has_key), len(self._plan())
        won = lost = False
        if not valid:
            observation = INVALID_ACTION_FEEDBACK
        elif command.startswith("go "):
            self._room += 1 if command == "go east" else -1
            observation = self._describe()
        elif command == "take key":
            observation, self._has_key = "You take the key.", True
        else:  # open <colour> door, in the last room
            observation, won, lost = open_door(command.split()[1], self._has_key, self._goal)
        self._done = self._done or won or lost
        info = self._info(won=won, lost=lost)
        # The state is (room, key held, game over): only a locked door leaves it as it was.
        changed = won or lost or (self._room, self._has_key) != state_before
        info["action_effect"] = action_effect(valid=valid, changed=changed, won=won, lost=lost,
                                              plan_before=plan_before, plan_after=info["expert_plan_length"])
        return observation, float(won), won or lost, info

    def _describe(self) -> str:
        """The current room: its number, the key if it lies here, the doors, the exits, the key if carried."""
        parts = [f"You are in room {self._room + 1} of {self._rooms}."]
        if self._room == self._key_room and not self._has_key:
            parts.append("A key lies on the floor.")
        if self._room == self._rooms - 1:
            parts.append(f"There is a {self._doors[0]} door and a {self._doors[1]} door.")
        exits = [way for way, open_ in (("east", self._room < self._rooms - 1), ("west", self._room > 0)) if open_]
        parts.append(f"Exits: {', '.join(exits)}.")
        if self._has_key:
            parts.append("You carry the key.")
        return " ".join(parts)

    def _admissible(self) -> list[str]:
        commands = []
        if self._room < self._rooms - 1:
            commands.append("go east")
        if self._room > 0:
            commands.append("go west")
        if self._room == self._key_room and not self._has_key:
            commands.append("take key")
        if self._room == self._rooms - 1:
            commands += [f"open {door} door" for door in self._doors]
        return commands

    def _plan(self) -> list[str]:
        room, plan = self._room, []
        if not self._has_key:
            way = "go east" if self._key_room > room else "go west"
            plan += [way] * abs(self._key_room - room) + ["take key"]
            room = self._key_room
        return plan + ["go east"] * (self._rooms - 1 - room) + [f"open {self._goal} door"]

    def _info(self, won: bool = False, lost: bool = False) -> dict[str, Any]:
        plan = self._plan()
        return {
            "admissible_commands": self._admissible(),
            "won": won,
            "lost": lost,
            "task": f"open the {self._goal} door",
            "task_id": f"{self._goal}-{self._distractor}",
            # the set-up: task, door order, number of rooms, the key's room (numbered from 1)
            "game": f"{self._goal}-{self._distractor}:{self._doors[0]},{self._doors[1]}"
                    f":rooms={self._rooms},key={self._key_room + 1}",
            "expert_action": plan[0],
            "expert_plan": plan,
            # None once the game is over without a win (no plan can win it any more)
            "expert_plan_length": 0 if won else None if self._done else len(plan),
            # the state (the set-up aside): "You take the key." or "Nothing happens." do not name the room
            "state_key": "over" if self._done else f"room {self._room + 1}, key {'held' if self._has_key else 'not held'}",
        }

"""The episode record of an evaluation and the per-turn facts it keeps.

An evaluation is a list of :class:`EpisodeJob` — (task, attempt, budget) — that an executor
(:mod:`~agentgym_budget.episodes.process_pool`, :mod:`~agentgym_budget.episodes.runner`) turns into
:class:`EpisodeRecord` s.  A record holds what the metrics need from one episode: the actions
and, per turn, the env's facts (:func:`turn_facts`: expert match, admissibility, effect, plan
left); with transcripts on, what the agent saw and said (:func:`transcript_turn`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentgym_budget.episodes.schema import NOT_IN_FILE, Bit, Index, Known, NonNegative, RecordError, Ternary, Turn, checked
from agentgym_budget.episodes.policy import PolicyReply
from agentgym_budget.text import UNKNOWN, admissibility  # UNKNOWN: re-exported, the records' marker

__all__ = [
    "EpisodeJob",
    "EpisodeRecord",
    "TURN_FACTS",
    "UNKNOWN",
    "expert_match_of",
    "game_of",
    "plan_length_of",
    "records_for_budget",
    "transcript_turn",
    "turn_facts",
]



@dataclass(frozen=True, order=True)
class EpisodeJob:
    """One episode to run: attempt ``attempt`` at task ``task`` with a budget of ``budget`` turns."""

    task: int
    attempt: int
    budget: int


@dataclass
class EpisodeRecord:
    """What the metrics need from one episode, compactly; per-turn lists have one entry per turn.

    Per turn ``t`` (1-based; index ``t - 1``), about the action taken in the state left by
    turn ``t - 1``:

    * ``expert_match``: 1 if the action is the expert's action in that state (or one of its
      actions, ``info["expert_actions"]``), 0 if not, -1 if the env gives no expert action;
    * ``admissible``: 1 if the action was in ``info["admissible_commands"]``, 0 if not, -1 if
      the list was empty;
    * ``no_effect``: 1 if the env's ``info["action_effect"]`` was ``"no_effect"``;
    * ``plan_left``: the expert's remaining plan length after the turn
      (``info["expert_plan_length"]``, else ``len(info["expert_plan"])``), -1 if unknown;
    * ``effect``: the env's ``info["action_effect"]`` (``""`` if the env does not report it).

    ``plan_length`` is the remaining plan length at reset (-1 if unknown); ``won_turn`` the
    turn at which the task was won (``None``: not won within ``budget``), ``lost_turn`` the
    turn at which it was lost; ``game`` names the game the reset seed drew (``info["game"]``,
    else ``info["task_id"]``), to tell seeds that draw the same game.  ``prompt_tokens`` and
    ``completion_tokens`` add up what an LLM policy's backend reported over the episode
    (``None``: not reported).  ``seconds`` (wall time; with episodes in flight together it
    includes waiting for the others) is informational and excluded from equality.  Records
    written before ``effect``, ``lost_turn``, ``game`` and the token counts existed load with
    their defaults.

    ``env_failures`` counts the times the env raised while this episode was played (the one fault
    policy, :mod:`~agentgym_budget.episodes.runner`: an episode whose env raises is replayed once
    in a fresh env); ``failed`` is true when the replay's env raised too: the episode then counts
    as not won, ``error`` says what the env raised, and its turns are those the last attempt
    played.  The three are written to ``episodes.jsonl`` only when set, so the files of a run
    without faults are what they were before the fault policy existed.

    ``transcript`` (``None`` unless transcripts were asked for) is what the agent saw and said,
    one :func:`transcript_turn` dict per turn, and ``final_observation`` what the env showed
    after the last turn.  Both are excluded from equality and from :meth:`to_dict`
    (``episodes.jsonl``): transcripts are stored apart, in ``transcripts.jsonl.gz`` (see
    :mod:`~agentgym_budget.eval.transcripts`).

    The trainer's :class:`~agentgym_budget.train.rollout.Episode` records the same kind of run
    for the learner (prompt and action tokens per turn, the return) rather than for the metrics.
    """

    task: Index
    attempt: Index
    budget: Turn
    won_turn: Turn | None
    turns: Index
    plan_length: Known
    actions: list[str]
    expert_match: list[Ternary]
    admissible: list[Ternary]
    no_effect: list[Bit]
    plan_left: list[Known]
    prompt_tokens: Index | None = None
    completion_tokens: Index | None = None
    seconds: NonNegative = field(default=0.0, compare=False)
    effect: list[str] = field(default_factory=list)
    lost_turn: Turn | None = None
    game: str = ""
    env_failures: Index = 0
    failed: bool = False
    error: str = ""
    transcript: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_FILE)
    final_observation: str | None = field(default=None, compare=False, repr=False, metadata=NOT_IN_FILE)

    @property
    def won(self) -> bool:
        return self.won_turn is not None

    def won_within(self, turns: int) -> bool:
        """Whether the task was won within the first ``turns`` turns: the attempt's outcome under a budget of ``turns``.

        This is not a second budget rule but :class:`~agentgym_budget.wrappers.TurnBudget`'s,
        read back from a longer run (the shortcut mode, :mod:`~agentgym_budget.eval.evaluate`):
        ``TurnBudget(T)`` truncates the step that spends ``T`` and a win on that step still
        counts (``terminated`` and ``truncated`` together, as ``TimeLimit`` does), so the
        episode under ``T`` is won iff the same episode under a larger budget was won at a
        turn ``<= T`` — whenever its first ``T`` turns are the same, which holds for a policy
        that never sees the budget (same env and policy seeds; ``resolve_mode`` refuses the
        shortcut otherwise).  ``test_shortcut_and_per_t_agree_for_a_budget_agnostic_policy``
        checks the two ways agree.
        """
        return self.won_turn is not None and self.won_turn <= turns

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able record, without the transcript."""
        data = dataclasses.asdict(dataclasses.replace(self, transcript=None, final_observation=None))
        del data["transcript"], data["final_observation"]
        for name, unset in _FAULT_DEFAULTS.items():  # written only when the env raised
            if data[name] == unset:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> EpisodeRecord:
        """The record of a parsed ``episodes.jsonl`` line, checked: a key, type or range its type
        hints do not allow (:func:`~agentgym_budget.episodes.schema.checked`), or per-turn facts that
        contradict ``turns``, is a :class:`~agentgym_budget.episodes.schema.RecordError` naming the field.

        Example:
            >>> EpisodeRecord.from_dict({**EpisodeRecord(0, 0, 4, 2, 2, 2, ["a", "b"], [1, 1], [1, 1], [0, 0],
            ...                          [1, 0]).to_dict(), "won_turn": 3})
            Traceback (most recent call last):
            ...
            agentgym_budget.episodes.schema.RecordError: won_turn: turn 3 of an episode of 2 turns
        """
        record = cls(**checked(cls, data))
        problem = record._contradiction()
        if problem:
            raise RecordError(problem)
        return record

    def _contradiction(self) -> str | None:
        """What in the record contradicts the rest (``None``: nothing) — the checks no single field's type can make."""
        if self.turns > self.budget:
            return f"turns: {self.turns} turns in a budget of {self.budget}"
        for name in ("actions", *TURN_FACTS):
            entries = len(getattr(self, name))
            if entries != self.turns and not (name == "effect" and entries == 0):  # effect: [] in old records
                return f"{name}: {entries} entries for {self.turns} turns"
        for name in ("won_turn", "lost_turn"):
            turn = getattr(self, name)
            if turn is not None and turn > self.turns:
                return f"{name}: turn {turn} of an episode of {self.turns} turns"
        return None

#: The fault fields of an :class:`EpisodeRecord` and their values when the env never raised.
_FAULT_DEFAULTS: dict[str, Any] = {"env_failures": 0, "failed": False, "error": ""}


def plan_length_of(info: dict[str, Any]) -> int:
    """The expert's remaining plan length in ``info`` (-1 if unknown).

    ``info["expert_plan_length"]`` when the env reports it (``None``: unknown); else, for envs
    that predate it, ``len(info["expert_plan"])``.
    """
    if "expert_plan_length" in info:
        length = info["expert_plan_length"]
        return UNKNOWN if length is None else int(length)
    plan = info.get("expert_plan")
    return len(plan) if isinstance(plan, (list, tuple)) else UNKNOWN


def game_of(info: dict[str, Any]) -> str:
    """The game a reset drew, from its info: ``info["game"]``, else ``info["task_id"]`` (``""``: unknown)."""
    game = info.get("game", info.get("task_id"))
    return "" if game is None else str(game)


#: The per-turn lists of an :class:`EpisodeRecord` that :func:`turn_facts` fills.
TURN_FACTS = ("expert_match", "admissible", "no_effect", "plan_left", "effect")


def turn_facts(action: str, info_before: dict[str, Any], info_after: dict[str, Any]) -> dict[str, Any]:
    """What one turn contributes to an :class:`EpisodeRecord`: ``action`` was taken in the
    state ``info_before`` describes and led to ``info_after`` (the env's facts, no text read).

    Example:
        >>> before = {"admissible_commands": ["take key", "open red door"], "expert_action": "take key"}
        >>> after = {"action_effect": "no_effect", "expert_plan_length": 2}
        >>> turn_facts("open red door", before, after)
        {'expert_match': 0, 'admissible': 1, 'no_effect': 1, 'plan_left': 2, 'effect': 'no_effect', 'lost': False}
    """
    commands = info_before.get("admissible_commands") or ()
    effect = str(info_after.get("action_effect", ""))
    return {
        "expert_match": expert_match_of(action, info_before),
        "admissible": admissibility(action, commands),
        "no_effect": int(effect == "no_effect"),
        "plan_left": plan_length_of(info_after),
        "effect": effect,
        "lost": bool(info_after.get("lost")) and not info_before.get("lost"),
    }


def expert_match_of(action: str, info: dict[str, Any]) -> int:
    """1 if ``action`` is the expert's in the state ``info`` describes, 0 if not, -1 if the env has no expert."""
    choices = info.get("expert_actions")
    if isinstance(choices, (list, tuple)) and choices:
        return int(action in choices)
    expert = info.get("expert_action")
    if isinstance(expert, str) and expert:
        return int(action == expert)
    return UNKNOWN


def transcript_turn(turn: int, observation: str, reply: PolicyReply, info: dict[str, Any],
                    reward: float, terminated: bool, truncated: bool, next_info: dict[str, Any]) -> dict[str, Any]:
    """One turn of a transcript: the agent saw ``observation`` (with ``info``), answered ``reply``,
    and the env's ``step`` returned ``reward, terminated, truncated, next_info`` (the next
    observation is the following turn's ``observation``, or the record's ``final_observation``).

    Example:
        >>> row = transcript_turn(1, "A door.", PolicyReply("open door", "Thought: open it.\\nAction: open door"),
        ...     {"admissible_commands": ["open door", "look"], "expert_action": "open door"}, 1.0,
        ...     True, False, {"won": True})
        >>> row["action"], row["admissible"], row["expert_action"], row["won"], row["action_effect"]
        ('open door', True, 'open door', True, None)
        >>> row["written_action"] is None  # the reply wrote the command that was played
        True
    """
    commands = info.get("admissible_commands") or ()
    experts = info.get("expert_actions")
    expert = experts[0] if isinstance(experts, (list, tuple)) and experts else info.get("expert_action") or None
    return {
        "turn": turn, "observation": observation, "reply": reply.text, "action": reply.action,
        "written_action": reply.written_action,  # the reply's own spelling, when the played one differs
        "won": bool(next_info.get("won", False)), "reward": float(reward), "terminated": bool(terminated),
        "truncated": bool(truncated), "action_effect": next_info.get("action_effect"),
        "expert_action": expert if isinstance(expert, str) else None,
        "admissible": reply.action in commands if commands else None,
        "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
    }


def records_for_budget(records: Iterable[EpisodeRecord], budget: int) -> list[EpisodeRecord]:
    """Per (task, attempt): the record with the smallest budget ``>= budget``.

    Whether it was won within ``budget`` turns is then the outcome of that attempt at that
    budget: in the shortcut mode this is the largest-budget rollout, in the per-budget mode
    the rollout at ``budget`` itself.
    """
    chosen: dict[tuple[int, int], EpisodeRecord] = {}
    for record in records:
        key = (record.task, record.attempt)
        if record.budget >= budget and (key not in chosen or record.budget < chosen[key].budget):
            chosen[key] = record
    return list(chosen.values())


"""One definition of an invalid action (``agentgym_budget.text.is_invalid``): the evaluator's
metrics, the trainer's count and ProcessReward's penalty give the same verdict on the same turn."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.episodes.records import turn_facts
from agentgym_budget.text import is_invalid
from agentgym_budget.train.rollout import Episode, _Recorder
from agentgym_budget.wrappers import ProcessReward


class _ScriptedPolicy:
    """Just what the trainer's recorder asks of a policy: a per-episode state."""

    def start(self, seed: int) -> None:
        return None


def _reply(action: str) -> SimpleNamespace:
    return SimpleNamespace(action=action, completion=SimpleNamespace(prompt_ids=[1], completion_ids=[2], hidden_states=None))


def test_a_command_the_env_accepts_though_not_listed_is_valid_for_trainer_evaluator_and_penalty() -> None:
    # KeyDoor applies "TAKE KEY" (it normalises case) though its list says "take key": the env's
    # verdict is "progress".  The trainer used to count it invalid by the list alone.
    env = ProcessReward(gym.make("KeyDoor-v0"), "invalid_penalty", potential_based=False)
    _, before = env.reset(seed=0, options={"task": "red-blue"})
    _, _, _, _, after = env.step("TAKE KEY")
    assert after["action_effect"] == "progress" and "TAKE KEY" not in before["admissible_commands"]
    facts = turn_facts("TAKE KEY", before, after)
    assert not is_invalid(facts["admissible"], facts["effect"])  # the evaluator's metrics
    assert after["process_reward"] == 0.0  # the penalty

    episode = Episode(seed=0, task="", budget=0)
    recorder = _Recorder(episode, gym.make("KeyDoor-v0"), _ScriptedPolicy(), policy_seed=0)
    for action in ["TAKE KEY", "dance"]:
        recorder.step(_reply(action))
    assert episode.invalid_actions == 1  # "dance" only

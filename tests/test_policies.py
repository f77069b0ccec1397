"""Baseline policies, the policy registry, prompt building and action parsing (LLM policies: test_llm_policy.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from agentgym_budget.policies import (
    ExpertPolicy,
    NoisyExpertPolicy,
    Policy,
    RandomPolicy,
    build_messages,
    make_policy,
    parse_action,
    policy_names,
    register_policy,
)

INFO = {"admissible_commands": ["go east", "go west", "look"], "expert_action": "go east", "task": "walk east"}


def actions(policy: Policy, seed: int, n: int = 200) -> list[str]:
    policy.reset(seed=seed)
    return [policy.act("obs", INFO) for _ in range(n)]


def test_registry_has_the_baselines_and_builds_by_name() -> None:
    assert {"random", "expert", "noisy-expert", "hf"} <= set(policy_names())
    assert isinstance(make_policy("noisy-expert", p=0.3), NoisyExpertPolicy)
    assert isinstance(make_policy("random"), Policy)
    with pytest.raises(ValueError, match="unknown policy 'nope'.*noisy-expert"):
        make_policy("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_policy("random")(ExpertPolicy)


def test_random_policy_is_uniform_over_admissible_and_seeded() -> None:
    picks = actions(RandomPolicy(), seed=1, n=3000)
    counts = Counter(picks)
    assert set(counts) == set(INFO["admissible_commands"])
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())
    assert picks[:50] == actions(RandomPolicy(), seed=1, n=50)
    assert picks[:50] != actions(RandomPolicy(), seed=2, n=50)


def test_expert_policy_plays_the_expert_action_and_needs_one() -> None:
    assert set(actions(ExpertPolicy(), seed=0, n=5)) == {"go east"}
    with pytest.raises(KeyError, match="expert_action"):
        ExpertPolicy().act("obs", {"admissible_commands": ["look"]})


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_noisy_expert_follows_the_expert_with_probability_p(p: float) -> None:
    picks = actions(NoisyExpertPolicy(p=p), seed=0, n=3000)
    expected = p + (1 - p) / 3  # random moves hit the expert action a third of the time
    assert picks.count("go east") / 3000 == pytest.approx(expected, abs=0.04)
    assert not NoisyExpertPolicy(p=p).reads_budget


def test_noisy_expert_rejects_bad_p() -> None:
    with pytest.raises(ValueError, match="p must be in"):
        NoisyExpertPolicy(p=1.5)


def test_build_messages_has_task_history_budget_and_commands() -> None:
    history = [("You are at the start.", "Thought: east.\nAction: go east"), ("You are at position 1.", None)]
    messages = build_messages("walk east", history, budget_text="[Turns left: 4 of 5]", admissible=["go east", "look"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].endswith("Your task is to: walk east")
    assert messages[1]["content"] == "Observation: You are at the start."  # budget and commands: latest turn only
    assert messages[2]["content"] == "Thought: east.\nAction: go east"
    assert messages[3]["content"].splitlines() == [
        "Observation: You are at position 1.", "[Turns left: 4 of 5]", "Available commands: go east, look"]
    assert "Turns left" not in str(build_messages("walk east", history))
    short = build_messages("t", history, max_turns_shown=1)
    assert [m["role"] for m in short] == ["system", "user"] and "position 1" in short[1]["content"]


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Thought: go.\nAction: go east", "go east"),
        ("Thought: x\nAction: look\nThought: no\naction:  GO WEST. ", "go west"),  # last Action wins, case
        ("Action: `go eats`", "go eats"),  # a near miss is played as written (fuzzy matching is opt-in)
        ("Action:  Go\tWEST !", "go west"),  # case, inner whitespace, trailing punctuation: the admissible spelling
        ("Action: fly to the moon", "fly to the moon"),  # kept: the env answers it in-game
        ("go east", "go east"),  # no Action: line -> first line
        ("Thought: east is right\ngo east", "go east"),  # a ReAct thought is not the command
        ("think: where is the key?", "think: where is the key"),  # only a thought: passed on (cleaned), answered in-game
        ("   \n", "look"),
    ],
)
def test_parse_action(reply: str, expected: str) -> None:
    assert parse_action(reply, ["go east", "go west", "look"]) == expected


def test_parse_action_without_admissible_list() -> None:
    assert parse_action("Action: Open Door.") == "Open Door"


DOORS = ["open blue door", "open green door", "take key"]


@pytest.mark.parametrize("matching", ["exact", "fuzzy"])
def test_a_command_naming_another_thing_is_played_as_written(matching: str) -> None:
    """The issue's case: the old closest-match rule played "open green door" for "open red door"
    and "go to cabinet 2" for "go to cabinet 9"; neither rule may cross a colour or a number."""
    assert parse_action("Action: open red door", DOORS, matching=matching) == "open red door"
    assert parse_action("Action: go to cabinet 9", ["go to cabinet 2", "look"], matching=matching) == "go to cabinet 9"


def test_fuzzy_matching_fixes_typos_only() -> None:
    assert parse_action("Action: opn blue door", DOORS, matching="fuzzy") == "open blue door"
    assert parse_action("Action: opn blue door", DOORS) == "opn blue door"  # exact: no typo fixing
    assert parse_action("Action: go to cabnet 2", ["go to cabinet 2", "go to cabinet 9"], matching="fuzzy") == (
        "go to cabinet 2")
    # a written word that is another admissible word or a colour is not a typo
    assert parse_action("Action: open drawer 1", ["open drawers 1", "open drawer 2"], matching="fuzzy") == (
        "open drawer 1")
    assert parse_action("Action: take brown 1", ["take crown 1"], matching="fuzzy") == "take brown 1"
    # a different number of words is not a typo; two equally good candidates: ambiguous, played as written
    assert parse_action("Action: open blue", DOORS, matching="fuzzy") == "open blue"
    assert parse_action("Action: go to countertp 1", ["go to countertop 1", "go to countertops 1"],
                        matching="fuzzy") == "go to countertp 1"


def test_parse_action_rejects_an_unknown_matching_mode() -> None:
    with pytest.raises(ValueError, match="action matching must be one of"):
        parse_action("Action: look", ["look"], matching="closest")


def test_a_plain_policy_is_copied_only_for_episodes_in_flight_together() -> None:
    from agentgym_budget.policies import as_batch_policy

    class Uncopyable(ExpertPolicy):
        def __deepcopy__(self, memo):
            raise RuntimeError("holds a live model")

    prototype = Uncopyable()
    batch = as_batch_policy(prototype)
    first = batch.start(seed=0)
    assert first is prototype  # one episode at a time: the policy itself, never a copy
    batch.release(first)
    assert batch.start(seed=1) is prototype
    with pytest.raises(TypeError, match="cannot be copied for several episodes in flight.*concurrency=1"):
        batch.start(seed=2)  # a second episode while the first still runs

"""Baseline policies, the policy registry, prompt building and action parsing, the hf policy."""

from __future__ import annotations

from collections import Counter

import pytest

from agentgym_budget.policies import (
    ExpertPolicy,
    NoisyExpertPolicy,
    Policy,
    RandomPolicy,
    build_prompt,
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


def test_build_prompt_has_task_history_budget_and_commands() -> None:
    history = [("You are at the start.", "go east"), ("You are at position 1.", None)]
    prompt = build_prompt(history, task="walk east", budget_text="[Turns left: 4 of 5]", admissible=["go east", "look"])
    lines = prompt.splitlines()
    assert "Your task is to: walk east" in lines
    assert lines.index("Observation: You are at the start.") < lines.index("Action: go east") < lines.index(
        "Observation: You are at position 1.")
    assert "[Turns left: 4 of 5]" in lines and "Available commands: go east, look" in lines
    assert lines[-1] == "Thought:"
    assert "Turns left" not in build_prompt(history, task="walk east")
    short = build_prompt(history, task="t", max_turns_shown=1)
    assert "You are at the start." not in short and "You are at position 1." in short


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Thought: go.\nAction: go east", "go east"),
        ("Thought: x\nAction: look\nThought: no\naction:  GO WEST. ", "go west"),  # last Action wins, case
        ("Action: `go eats`", "go east"),  # near miss snaps to the admissible command
        ("Action: fly to the moon", "fly to the moon"),  # kept: the env answers it in-game
        ("go east", "go east"),  # no Action: line -> first line
        ("   \n", "look"),
    ],
)
def test_parse_action(reply: str, expected: str) -> None:
    assert parse_action(reply, ["go east", "go west", "look"]) == expected


def test_parse_action_without_admissible_list() -> None:
    assert parse_action("Action: Open Door.") == "Open Door"


def test_hf_policy_with_a_tiny_random_model_offline() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_budget.policies.hf import HFPolicy, tiny_random_lm

    model, tokenizer = tiny_random_lm(seed=0)
    assert tokenizer.decode(tokenizer("go east 1")["input_ids"]) == "go east 1"
    policy = make_policy("hf", model=model, tokenizer=tokenizer, max_new_tokens=6, show_budget=True)
    assert isinstance(policy, HFPolicy) and policy.reads_budget
    info = {**INFO, "turns_left": 3, "budget": 5}
    assert "[Turns left: 3 of 5]" in policy.prompt("You are at the start.", info)
    policy.reset(seed=0)
    first = [policy.act("You are at the start.", info), policy.act("You are at position 1.", info)]
    assert all(isinstance(a, str) and a for a in first)
    assert "Action: " + first[0] in policy.prompt("next", info)  # the history is kept
    policy.reset(seed=0)
    assert [policy.act("You are at the start.", info), policy.act("You are at position 1.", info)] == first


def test_hf_policy_greedy_decoding_and_generation_path() -> None:
    pytest.importorskip("torch")
    from agentgym_budget.policies.hf import HFPolicy, tiny_random_lm

    model, tokenizer = tiny_random_lm(seed=1)
    policy = HFPolicy(model, tokenizer, max_new_tokens=4, temperature=0.0, list_admissible=False)
    assert not policy.reads_budget
    assert "Available commands" not in policy.prompt("obs", INFO)
    assert policy.generate("Thought:") == policy.generate("Thought:")
    with pytest.raises(ValueError, match="temperature"):
        HFPolicy(model, tokenizer, temperature=-1)

"""info["action_effect"] and info["expert_plan_length"]: every backend sets them from its engine state."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget._optional import is_installed
from agentgym_budget.envs.base import TextEnv, action_effect
from agentgym_budget.text import ACTION_EFFECTS


def play(env: gym.Env, actions: list[str], **reset: Any) -> list[tuple[str, int | None]]:
    """``(action_effect, expert_plan_length)`` after each action."""
    env.reset(**reset)
    out = []
    for action in actions:
        *_, info = env.step(action)
        assert info["action_effect"] in ACTION_EFFECTS
        out.append((info["action_effect"], info["expert_plan_length"]))
    return out


def test_the_rule_in_its_order() -> None:
    assert action_effect(valid=False, lost=True) == "invalid"
    assert action_effect(valid=True, lost=True, won=True) == "regress"
    assert action_effect(valid=True, won=True, changed=False) == "progress"
    assert action_effect(valid=True, changed=False, plan_before=3, plan_after=2) == "no_effect"
    assert action_effect(valid=True, plan_before=3, plan_after=4, score_delta=1.0) == "regress"
    assert action_effect(valid=True, plan_before=None, plan_after=4, score_delta=1.0) == "progress"
    assert action_effect(valid=True, score_delta=-0.5) == "regress"
    assert action_effect(valid=True, plan_before=2, plan_after=2) == "neutral"


class _Silent(TextEnv):
    """A backend that reports no effect of its own: the base default applies."""

    def __init__(self, effect: str | None = None) -> None:
        super().__init__()
        self.effect = effect
        self.left = 2

    def _info(self) -> dict[str, Any]:
        return {"admissible_commands": ["go"], "won": self.left == 0, "task": "go twice",
                "expert_plan": ["go"] * self.left}

    def _reset_game(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.left = 2
        return "start", self._info()

    def _step_game(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action == "go":
            self.left -= 1
        info = self._info()
        if self.effect is not None:
            info["action_effect"] = self.effect
        return "ok", float(self.left == 0), self.left == 0, info


def test_base_default_for_a_backend_without_the_fact_and_a_bad_value_is_a_backend_bug() -> None:
    env = _Silent()
    env.reset()
    assert [env.step(a)[4]["action_effect"] for a in ("fly", "go", "go")] == ["invalid", "progress", "progress"]
    bad = _Silent(effect="great")
    bad.reset()
    with pytest.raises(RuntimeError, match="action_effect"):
        bad.step("go")


def test_key_door() -> None:
    env = gym.make("KeyDoor-v0")
    steps = play(env, ["open red door", "dance", "take key", "take key", "open blue door"],
                 seed=0, options={"task": "red-blue"})
    assert steps == [("no_effect", 2), ("invalid", 2), ("progress", 1), ("no_effect", 1), ("regress", None)]
    steps = play(env, ["take key", "open red door"], seed=0, options={"task": "red-blue"})
    assert steps == [("progress", 1), ("progress", 0)]


@pytest.mark.parametrize("engine", [
    "fast",
    pytest.param("textworld", marks=[pytest.mark.slow, pytest.mark.skipif(
        not all(is_installed(m) for m in ("textworld", "alfworld", "fast_downward")), reason="needs the alfworld extra")]),
])
def test_alfworld_both_engines(engine: str) -> None:
    env = gym.make("ALFWorld-v0", split="valid_seen", task_types=[1], engine=engine, expert_plan_horizon=100)
    _, info = env.reset(seed=0)
    n = info["expert_plan_length"]
    if engine == "textworld":  # the real engine cannot be copied: no expert rollout, no plan length
        assert n is None and info["expert_plan"] == ["look"]
    else:
        assert n == len(info["expert_plan"]) > 1
    # (The expert's plan itself may change on a turn that changed nothing: issue 14, not judged here.)
    effects = [env.step(action)[4]["action_effect"] for action in ["dance", "look", "inventory", "examine nothing"]]
    assert effects == ["invalid", "no_effect", "no_effect", "invalid"]
    _, info = env.reset(seed=0)
    assert info["expert_action"] == "look"  # upstream's expert starts by looking: no effect, yet its plan step
    *_, info = env.step("look")
    known = n is not None
    assert (info["action_effect"], info["expert_plan_length"]) == ("no_effect", n - 1 if known else None)
    wrong = next(c for c in info["admissible_commands"] if c.startswith("go to") and c != info["expert_action"])
    *_, info = env.step(info["expert_action"])
    assert (info["action_effect"], info["expert_plan_length"]) == (("progress", n - 2) if known else ("neutral", None))
    *_, after = env.step(wrong)
    expected = action_effect(valid=True, plan_before=info["expert_plan_length"], plan_after=after["expert_plan_length"])
    assert after["action_effect"] == expected  # judged by the plan, not the text
    info = after
    for _ in range(100):
        *_, info = env.step(info["expert_action"])
        if info["won"]:
            break
    assert (info["action_effect"], info["expert_plan_length"]) == ("progress", 0)
    env.close()


def test_alfworld_one_step_plans_give_no_plan_length() -> None:
    env = gym.make("ALFWorld-v0", split="valid_seen")
    _, info = env.reset(seed=0)
    assert info["expert_plan_length"] is None
    *_, info = env.step("dance")
    assert info["action_effect"] == "invalid"


@pytest.mark.skipif(not is_installed("textworld"), reason="needs pip install 'agentgym-budget[textworld]'")
def test_textworld() -> None:
    env = gym.make("TextWorld-CoinCollector-v0")
    _, info = env.reset(seed=0)
    n, plan = info["expert_plan_length"], list(info["expert_plan"])
    assert n == len(plan) > 0
    # Inform 7 does not count an unknown verb or a blocked exit as a move; "look" changes no fact.
    steps = play(env, ["dance", "look", plan[0], plan[0], "restart"], seed=0)
    assert steps[:3] == [("invalid", n), ("no_effect", n), ("progress", n - 1)]
    assert steps[4] == ("invalid", n - 1)  # refused before the engine
    env.reset(seed=0)
    for action in plan:
        *_, info = env.step(action)
    assert (info["action_effect"], info["expert_plan_length"], info["won"]) == ("progress", 0, True)
    env.close()


@pytest.mark.skipif(not all(is_installed(m) for m in ("bm25s", "Stemmer", "rapidfuzz")),
                    reason="needs pip install 'agentgym-budget[webshop]'")
def test_webshop() -> None:
    env = gym.make("WebShop-v0", num_products=300)
    _, info = env.reset(seed=0)
    plan = list(info["expert_plan"])
    n = len(plan)
    steps = play(env, ["click[nonsense]", plan[0], plan[0], "click[Back to Search]", *plan], seed=0)
    assert steps[:4] == [("invalid", n), ("progress", n - 1), ("no_effect", n - 1), ("regress", n)]
    assert steps[-1] == ("progress", 0)
    assert [e for e, _ in steps[4:]] == ["progress"] * n
    env.close()


@pytest.mark.slow  # starts a JVM and generates a gold path
@pytest.mark.skipif(not is_installed("scienceworld"), reason="needs pip install 'agentgym-budget[scienceworld]'")
def test_scienceworld() -> None:
    env = gym.make("ScienceWorld-v0", task="find-living-thing")
    _, info = env.reset(seed=0, options={"variation": 0})
    plan = list(info["expert_plan"])
    n = len(plan)
    # An action the simulator does not carry out keeps the agent on the gold path.
    steps = play(env, ["dance wildly", "inventory", plan[0]], seed=0, options={"variation": 0})
    assert steps[0] == ("invalid", n)
    assert steps[1] == ("no_effect", n)
    assert steps[2][1] == n - 1
    env.reset(seed=0, options={"variation": 0})
    for action in plan:
        *_, info = env.step(action)
    assert (info["action_effect"], info["expert_plan_length"], info["won"]) == ("progress", 0, True)
    env.close()

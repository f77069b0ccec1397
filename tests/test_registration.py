"""Every registered env passes Gymnasium's checker; ids, errors and import cost."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget._optional import MissingBackendError, require
from agentgym_budget.envs.registration import FAMILIES, family_of

ALL_IDS = [env_id for family in FAMILIES for env_id in family.ids]
# ScienceWorld's defaults draw a new task per reset and compute its gold path (seconds each);
# one fixed task without the expert checks the same API in a fraction of the time.
QUICK_KWARGS = {"ScienceWorld": {"task": 0, "expert": False}}


def _skip_if_missing(env_id: str) -> None:
    family = family_of(env_id)
    if not family.installed:
        pytest.skip(f"{env_id} needs pip install 'agentgym-budget[{family.extra}]'")


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_on_every_registered_env(env_id):
    _skip_if_missing(env_id)
    env = gym.make(env_id, **QUICK_KWARGS.get(family_of(env_id).name, {}))
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=0)
        assert {"admissible_commands", "won", "lost", "task", "turn"} <= info.keys()
        assert isinstance(info["admissible_commands"], list) and isinstance(info["won"], bool)
        obs, reward, terminated, truncated, info = env.step("xyzzy plugh")  # invalid => in-game outcome
        assert env.observation_space.contains(obs)
    finally:
        env.close()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_budget_ids_apply_turn_budget_with_passthrough_options(family):
    _skip_if_missing(family.ids[1])
    env = gym.make(family.ids[1], budget=2, show_budget=True, **QUICK_KWARGS.get(family.name, {}))
    try:
        obs, info = env.reset(seed=0)
        assert info["budget"] == 2 and obs.endswith("[Turns left: 2 of 2]")
        env.step("xyzzy")
        *_, truncated, info = env.step("xyzzy")
        assert truncated and info["turns_left"] == 0
    finally:
        env.close()


def test_budget_ids_run_to_the_budget_past_the_registered_step_limit():
    env = gym.make("KeyDoor-Budget-v0", budget=20)  # KeyDoor-v0 stops at 8 steps
    assert env.spec.max_episode_steps is None
    for options, budget in ((None, 20), ({"budget": 40}, 40)):  # drawn, then forced above it
        _, info = env.reset(seed=0, options=options)
        for turn in range(1, budget + 1):
            _, _, terminated, truncated, info = env.step("look")
            assert (terminated, truncated, info["turns_left"]) == (False, turn == budget, budget - turn)
    env.close()


def test_alfworld_budget_mix_draws_varied_budgets_reproducibly():
    def budgets(seed):
        env = gym.make("ALFWorld-Budget-v0", budget="mix")
        out = [env.reset(seed=seed)[1]["budget"]] + [env.reset()[1]["budget"] for _ in range(199)]
        env.close()
        return out

    first = budgets(0)
    assert len(set(first)) >= 3
    assert first == budgets(0)
    assert first != budgets(1)


def test_alfworld_budget_default_is_the_50_turn_protocol():
    env = gym.make("ALFWorld-Budget-v0")
    assert env.reset(seed=0)[1]["budget"] == 50
    env.close()


def test_unknown_ids_and_malformed_budgets_are_clear_errors():
    with pytest.raises(gym.error.NameNotFound, match="known ids"):
        family_of("Nope-v0")
    with pytest.raises(ValueError, match="Accepted forms"):
        gym.make("ALFWorld-Budget-v0", budget="mix:ten")


def test_missing_backend_names_the_extra():
    with pytest.raises(MissingBackendError, match=r"pip install 'agentgym-budget\[webshop\]'"):
        require("no_such_module_abc", "webshop", "WebShop-v0")


def test_import_is_light():
    """No heavy backend is imported by ``import agentgym_budget`` (its time: benchmarks/import_time.py)."""
    code = (
        "import sys; import agentgym_budget; "
        "print(sorted(m for m in ('torch', 'transformers', 'textworld', 'alfworld', 'scienceworld', "
        "'matplotlib', 'stable_baselines3', 'sb3_contrib', 'pettingzoo', 'ray', 'bm25s', 'scipy') if m in sys.modules))"
    )
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    print("heavy modules imported by agentgym_budget:", heavy)
    assert heavy == "[]"

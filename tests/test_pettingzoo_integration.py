"""PettingZoo: the SharedHousehold multi-agent text world and the turn-budget wrappers pass
PettingZoo's own API tests; budget semantics on our env and on PettingZoo's own test envs."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import api_test, parallel_api_test  # noqa: E402
from pettingzoo.test.example_envs import generated_agents_env_v0, generated_agents_parallel_v0  # noqa: E402
from pettingzoo.utils.conversions import parallel_to_aec  # noqa: E402

from agentgym_budget.envs.household import SharedHouseholdEnv, env, parallel_env  # noqa: E402
from agentgym_budget.integrations.pettingzoo_budget import AECTurnBudget, ParallelTurnBudget  # noqa: E402


def expert_episode(par_env, seed: int = 0, max_steps: int = 50):
    observations, infos = par_env.reset(seed=seed)
    steps = []
    while par_env.agents and len(steps) < max_steps:
        actions = {agent: infos[agent]["expert_action"] for agent in par_env.agents}
        out = par_env.step(actions)
        steps.append((actions, *out))
        infos = out[4]
    return steps


# -- the world --------------------------------------------------------------------------------
@pytest.mark.parametrize("n_agents", [1, 2, 3])
def test_parallel_api_test_passes(n_agents: int) -> None:
    parallel_api_test(parallel_env(n_agents=n_agents), num_cycles=200)


@pytest.fixture
def text_aware_api_test(monkeypatch):
    """PettingZoo's AEC ``api_test`` with its dtype check taught about ``Text`` spaces.

    ``api_test`` assumes array observations: it compares ``space.dtype`` with
    ``observation.dtype``, which a ``str`` does not have.  For ``Text`` spaces only, that one
    comparison is replaced by a ``str`` check (``space.contains(obs)`` is asserted just before
    it by ``api_test`` itself); every other check runs unchanged.
    """
    import importlib

    import gymnasium

    module = importlib.import_module("pettingzoo.test.api_test")  # the module, not the function of that name

    original = module._test_observation_space_compatibility

    def compatible(expected, seen, recursed_keys):
        if isinstance(expected, gymnasium.spaces.Text):
            assert isinstance(seen, str), f"observation {seen!r} of a Text space is not a str"
            return
        original(expected, seen, recursed_keys)

    monkeypatch.setattr(module, "_test_observation_space_compatibility", compatible)

    def run(aec_env, num_cycles: int = 200) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Observation is not a NumPy array")
            api_test(aec_env, num_cycles=num_cycles)

    return run


def test_aec_api_test_passes(text_aware_api_test) -> None:
    text_aware_api_test(env(n_agents=2))


@pytest.mark.parametrize("seed", range(10))
def test_expert_team_wins_and_two_agents_are_faster_than_one(seed: int) -> None:
    solo, team = expert_episode(parallel_env(n_agents=1, n_objects=2), seed), expert_episode(parallel_env(n_agents=2), seed)
    assert all(solo[-1][2].values()) and all(team[-1][2].values())  # shared reward 1.0 for everyone
    assert all(team[-1][3].values()) and not any(team[-1][4].values())
    assert team[-1][5]["alice"]["won"]
    assert len(team) < len(solo)


def test_same_seed_same_episode_and_task_option() -> None:
    a, b = parallel_env(), parallel_env()
    assert a.reset(seed=3) == b.reset(seed=3)
    _, infos = a.reset(seed=4, options={"task": 1})
    _, infos2 = b.reset(seed=5, options={"task": 1})
    assert infos["alice"]["task"] == infos2["bob"]["task"]


def test_each_agent_has_its_own_view_and_commands_and_sees_the_others() -> None:
    world = SharedHouseholdEnv(n_agents=2)
    _, infos = world.reset(seed=0)
    item = world.goal[0]
    world.where[item] = "fridge 1"
    observations, *_ , infos = world.step({"alice": "go to fridge 1", "bob": "go to shelf 1"})
    assert observations["alice"].startswith("You arrive at fridge 1.") and item in observations["alice"]
    assert "bob: You arrive at shelf 1." in observations["alice"]
    assert f"take {item} from fridge 1" in infos["alice"]["admissible_commands"]
    assert f"take {item} from fridge 1" not in infos["bob"]["admissible_commands"]


def test_simultaneous_grab_goes_to_the_first_agent() -> None:
    world = SharedHouseholdEnv(n_agents=2)
    world.reset(seed=0)
    item = world.goal[0]
    world.where[item] = "fridge 1"
    world.step({"alice": "go to fridge 1", "bob": "go to fridge 1"})
    observations, *_ = world.step({"alice": f"take {item} from fridge 1", "bob": f"take {item} from fridge 1"})
    assert world.holding == {"alice": item, "bob": None}
    assert observations["bob"].startswith(f"You reach for the {item}, but it is gone.")


def test_invalid_actions_are_answered_in_game() -> None:
    world = SharedHouseholdEnv(n_agents=2)
    world.reset(seed=0)
    observations, rewards, *_ = world.step({"alice": "dance", "bob": 42})
    assert observations["alice"].startswith("Nothing happens.") and observations["bob"].startswith("Nothing happens.")
    assert world.agents == ["alice", "bob"]


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="n_agents"):
        SharedHouseholdEnv(n_agents=0)
    with pytest.raises(ValueError, match="n_objects"):
        SharedHouseholdEnv(n_objects=99)
    with pytest.raises(ValueError, match="render_mode"):
        SharedHouseholdEnv(render_mode="rgb_array")


# -- the parallel budget wrapper ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["shared", "per_agent"])
def test_budget_wrapper_passes_parallel_api_test(mode: str) -> None:
    parallel_api_test(ParallelTurnBudget(parallel_env(), budget="mix:3,5", mode=mode, show_budget=True), num_cycles=50)


@pytest.mark.parametrize("mode", ["shared", "per_agent"])
def test_budget_wrapper_passes_aec_api_test_through_the_standard_conversion(mode: str, text_aware_api_test) -> None:
    text_aware_api_test(parallel_to_aec(ParallelTurnBudget(parallel_env(), budget=4, mode=mode)), num_cycles=50)


def test_shared_budget_truncates_everyone_at_once() -> None:
    wrapped = ParallelTurnBudget(parallel_env(), budget=2, mode="shared", show_budget=True)
    observations, infos = wrapped.reset(seed=0)
    assert observations["alice"].endswith("[Turns left: 2 of 2]")
    _, _, _, truncations, infos = wrapped.step({"alice": "look", "bob": "look"})
    assert truncations == {"alice": False, "bob": False} and infos["bob"]["turns_left"] == 1
    observations, _, terminations, truncations, infos = wrapped.step({"alice": "look", "bob": "look"})
    assert truncations == {"alice": True, "bob": True} and not any(terminations.values())
    assert wrapped.agents == [] and observations["bob"].endswith("[Turns left: 0 of 2]")


def test_per_agent_budget_lets_the_others_finish_the_task() -> None:
    """bob's budget runs out after 1 turn; alice alone still wins within hers."""
    wrapped = ParallelTurnBudget(parallel_env(), budget="mix:1,30", mode="per_agent")
    _, infos = wrapped.reset(seed=3)
    assert (infos["alice"]["budget"], infos["bob"]["budget"]) == (30, 1)
    steps = []
    while wrapped.agents and len(steps) < 40:
        out = wrapped.step({a: infos[a]["expert_action"] for a in wrapped.agents})
        steps.append(out)
        infos = out[4]
    assert steps[0][3] == {"alice": False, "bob": True}
    assert all("bob" not in out[0] for out in steps[1:])  # gone for the caller
    assert steps[-1][2] == {"alice": True} and steps[-1][1] == {"alice": 1.0}
    assert steps[-1][4]["alice"]["turn"] == len(steps)


def test_budget_options_and_errors() -> None:
    wrapped = ParallelTurnBudget(parallel_env(), budget="mix:3,5")
    _, infos = wrapped.reset(seed=0, options={"budget": 9})
    assert infos["alice"]["budget"] == 9
    with pytest.raises(ValueError, match="int >= 1"):
        wrapped.reset(options={"budget": 0})
    with pytest.raises(ValueError, match="mode"):
        ParallelTurnBudget(parallel_env(), budget=3, mode="team")
    with pytest.raises(ValueError, match="malformed budget spec"):
        ParallelTurnBudget(parallel_env(), budget="mix:a")


def test_budget_draws_are_seeded_and_do_not_change_the_world() -> None:
    plain, wrapped = parallel_env(), ParallelTurnBudget(parallel_env(), budget="uniform:1-50", mode="per_agent")
    obs_plain, _ = plain.reset(seed=11)
    obs_wrapped, infos = wrapped.reset(seed=11)
    assert obs_plain == obs_wrapped
    draws = [infos[a]["budget"] for a in wrapped.agents]
    _, infos = wrapped.reset(seed=11)
    assert draws == [infos[a]["budget"] for a in wrapped.agents]


def test_curriculum_progress_counts_episodes() -> None:
    wrapped = ParallelTurnBudget(parallel_env(), budget="curriculum:10->2@4:step", mode="shared")
    budgets = []
    for episode in range(6):
        _, infos = wrapped.reset(seed=episode)
        budgets.append(infos["alice"]["budget"])
    assert budgets == [10, 10, 10, 10, 2, 2]


# -- on PettingZoo's own envs ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["shared", "per_agent"])
def test_budget_on_pettingzoos_generated_agents_parallel_env(mode: str) -> None:
    """PettingZoo's own test env (agents appear mid-episode; every live agent must get an action)."""
    wrapped = ParallelTurnBudget(generated_agents_parallel_v0.parallel_env(), budget=3, mode=mode, noop_action=0)
    parallel_api_test(wrapped, num_cycles=30)
    observations, infos = wrapped.reset(seed=0)
    first = list(wrapped.agents)
    for turn in range(1, 4):
        actions = {a: wrapped.action_space(a).sample() for a in wrapped.agents}
        observations, rewards, terminations, truncations, infos = wrapped.step(actions)
        assert all(truncations[a] == (turn == 3) for a in first if a in truncations)
    assert not set(first) & set(wrapped.agents)
    if mode == "shared":
        assert wrapped.agents == []


# -- the AEC budget wrapper -----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["shared", "per_agent"])
@pytest.mark.parametrize("noop_action", [None, 0])
def test_aec_budget_on_pettingzoos_generated_agents_env(mode: str, noop_action, text_aware_api_test) -> None:
    text_aware_api_test(AECTurnBudget(generated_agents_env_v0.env(), budget="mix:3,7", mode=mode,
                                      noop_action=noop_action), num_cycles=40)


@pytest.mark.parametrize("mode", ["shared", "per_agent"])
@pytest.mark.parametrize("noop_action", [None, "wait"])
def test_aec_budget_on_the_household_passes_api_test(mode: str, noop_action, text_aware_api_test) -> None:
    text_aware_api_test(AECTurnBudget(env(), budget="mix:3,7", mode=mode, noop_action=noop_action, show_budget=True),
                        num_cycles=40)


def play_aec(aec_env, policy, max_moves: int = 200) -> list[tuple]:
    """Every (agent, reward, terminated, truncated, info) seen by the caller, in order."""
    seen = []
    for agent in aec_env.agent_iter(max_moves):
        _, reward, terminated, truncated, info = aec_env.last()
        seen.append((agent, reward, terminated, truncated, dict(info)))
        aec_env.step(None if terminated or truncated else policy(agent, info))
    return seen


def test_aec_shared_budget_counts_moves_and_ends_everyone() -> None:
    wrapped = AECTurnBudget(env(), budget=3, mode="shared")
    wrapped.reset(seed=0)
    seen = play_aec(wrapped, lambda agent, info: "look")
    # alice, bob, alice move (3 moves), then both are shown truncated once (in agents order, as
    # PettingZoo orders dead agents) and removed.
    assert [(a, t) for a, _, _, t, _ in seen] == [("alice", False), ("bob", False), ("alice", False),
                                                  ("alice", True), ("bob", True)]
    assert seen[-1][4]["turn"] == 3 and seen[-1][4]["turns_left"] == 0
    assert wrapped.agents == []


def test_aec_per_agent_budget_with_noop_lets_the_other_agent_win() -> None:
    wrapped = AECTurnBudget(env(), budget="mix:1,40", mode="per_agent", noop_action="wait")
    wrapped.reset(seed=3)
    assert (wrapped.infos["alice"]["budget"], wrapped.infos["bob"]["budget"]) == (40, 1)
    seen = play_aec(wrapped, lambda agent, info: info["expert_action"])
    bob = [s for s in seen if s[0] == "bob"]
    assert [s[3] for s in bob] == [False, True]  # one move, then shown truncated and removed
    assert seen[-1][0] == "alice" and seen[-1][2] and seen[-1][1] == 1.0  # alice finished the task alone
    assert wrapped.env.unwrapped.holding["bob"] is None  # bob only waited after his budget ran out


def test_aec_per_agent_budget_without_noop_ends_everyone() -> None:
    wrapped = AECTurnBudget(env(), budget="mix:1,40", mode="per_agent")
    wrapped.reset(seed=3)
    seen = play_aec(wrapped, lambda agent, info: "look")
    assert [(a, t) for a, _, _, t, _ in seen] == [("alice", False), ("bob", False), ("alice", True), ("bob", True)]

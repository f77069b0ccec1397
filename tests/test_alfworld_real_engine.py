"""The real ALFWorld engine (TextWorld PddlEnv + Fast Downward) and upstream's handcoded expert.

Needs the ``alfworld`` extra.  The real engine takes seconds per reset (Fast Downward
translates the PDDL problem), so the fast tests use the smallest bundled games and the wider
checks are marked slow.
"""

from __future__ import annotations

import random

import pytest
from gymnasium.utils.env_checker import check_env

from agentgym_budget._optional import is_installed
from agentgym_budget.envs.alfworld.game import TASK_TYPES, AlfredGame, load_games

pytestmark = pytest.mark.skipif(
    not all(is_installed(m) for m in ("textworld", "alfworld", "fast_downward")),
    reason="needs the alfworld extra: pip install 'agentgym-budget[alfworld]'",
)


def smallest_game(task_type: str, split: str = "valid_seen") -> AlfredGame:
    """The game with the shortest PDDL problem: the quickest for Fast Downward to translate.

    Not a sliced task: upstream has none (its expert has no slicing subgoals to compare with).
    """
    games = [g for g in load_games(split, include_sliced=False) if g.task_type == task_type]
    return min(games, key=lambda g: len(g.pddl_problem))


@pytest.fixture(scope="module")
def engine():
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine

    engine = TextWorldAlfredEngine(facts=True)  # facts: upstream's expert reads them
    yield engine
    engine.close()


def test_real_engine_plays_a_stored_walkthrough_to_the_win(engine) -> None:
    game = smallest_game("pick_and_place_simple")
    first = engine.reset(game)
    assert first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.")
    assert first.observation.endswith(f"\n\nYour task is to: {game.goal}.")
    assert first.admissible_commands == sorted(set(first.admissible_commands)) and not first.won
    assert engine.step("Go to the moon").observation == "Nothing happens."
    for turn, action in enumerate(game.walkthrough, start=1):
        step = engine.step(action)
        assert step.won == (turn == len(game.walkthrough)), (turn, action, step.observation)


def upstream_and_port_actions(game: AlfredGame, engine, seed: int = 123, max_turns: int = 50) -> tuple[list[str], list[str]]:
    """Both experts, driven like AlfredExpert, on one expert-played episode of the real engine.

    Upstream's ``HandCodedTWAgent`` reads PDDL facts and the global ``random``; the port reads
    only text and an injected ``random.Random``; both are seeded alike (upstream mode).
    """
    from alfworld.agents.expert import HandCodedTWAgent

    from agentgym_budget.envs.alfworld.expert import HandCodedExpert

    upstream = HandCodedTWAgent(max_steps=200)
    upstream.task_params = dict(game.task_params)
    upstream.policy = upstream.get_task_policy(upstream.task_params)(upstream.task_params, max_steps=200)
    # upstream's expert reads the engine's facts, the start state's too (a target starting cold)
    port = HandCodedExpert.for_game(game, random.Random(seed), expert_type="upstream")
    random.seed(seed)
    step = engine.reset(game)
    upstream.observe(step.observation)
    command = port.start(step.observation)
    upstream_actions, port_actions = [], []
    for _ in range(max_turns):
        step = engine.step(command)
        if step.won:
            break
        state = engine.last_state
        try:
            upstream_actions.append(upstream.act(state, 0, state["won"], command))
        except Exception as e:  # noqa: BLE001 - upstream's timeouts/IndexErrors end the comparison
            upstream_actions.append(f"raised {type(e).__name__}")
        try:
            port_actions.append(port.next_action(command, step.observation, step.admissible_commands))
        except Exception as e:  # noqa: BLE001
            port_actions.append(f"raised {type(e).__name__}")
        if upstream_actions[-1] != port_actions[-1] or upstream_actions[-1].startswith("raised"):
            break
        command = upstream_actions[-1] if upstream_actions[-1] in step.admissible_commands else "look"
    return upstream_actions, port_actions


def test_expert_port_matches_upstream_handcoded_expert_on_a_small_game(engine) -> None:
    upstream, port = upstream_and_port_actions(smallest_game("pick_and_place_simple"), engine)
    assert len(upstream) > 2 and port == upstream


@pytest.mark.slow
@pytest.mark.parametrize("task_type", list(TASK_TYPES.values()))
def test_expert_port_matches_upstream_handcoded_expert_per_task_type(engine, task_type: str) -> None:
    for split in ("valid_seen", "valid_unseen"):
        upstream, port = upstream_and_port_actions(smallest_game(task_type, split), engine)
        assert port == upstream


@pytest.mark.slow
def test_check_env_on_the_real_engine() -> None:
    from agentgym_budget.envs.alfworld.env import ALFWorldEnv

    small = [smallest_game("pick_and_place_simple").id]
    env = ALFWorldEnv(split="valid_seen", task_types=[1], engine="textworld")
    env.games = [g for g in env.games if g.id in small]  # one small game keeps the resets short
    check_env(env, skip_render_check=True)

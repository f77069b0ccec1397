"""The expert in upstream mode (the default) reports exactly upstream ``AlfredExpert``'s next action.

``tests/data/alfworld_upstream_expert_golden.json.gz`` holds episodes recorded on the real
engine with upstream's own ``AlfredExpert(handcoded)`` (``benchmarks/alfworld_equivalence.py
--golden``, see :mod:`tools.alfworld.upstream_expert`): the commands played, the expert's seed
and upstream's ``extra.expert_plan[0]`` after each.  They cover the cases where upstream's
expert differs from the fixed one: empty commands, refused commands, a target already in a
goal-type receptacle or cold in a fridge at the start, and pick-two tasks (the ``move`` bug).
Replayed here on the fast engine, needing no ``alfworld``.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from agentgym_budget.envs.alfworld.env import ALFWorldEnv
from agentgym_budget.envs.alfworld.expert import HandCodedExpert, start_facts
from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
from agentgym_budget.envs.alfworld.game import AlfredGame

GOLDEN = Path(__file__).parent / "data" / "alfworld_upstream_expert_golden.json.gz"


def _episodes() -> list[dict]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _target_starts_in_goal_receptacle(game: AlfredGame) -> bool:
    facts = start_facts(game)
    return any(o.split()[0] == game.object_target and r.split()[0] == game.parent_target for o, r in facts["inreceptacle"])


def test_golden_episodes_cover_the_cases_where_upstreams_expert_differs() -> None:
    episodes = _episodes()
    games = [AlfredGame.from_record(e["game"]) for e in episodes]
    commands = [t[0] for e in episodes for t in e["transcript"][1:]]
    assert commands.count("") >= 5
    assert sum(_target_starts_in_goal_receptacle(g) and g.task_type != "pick_and_place_simple" for g in games) >= 2
    assert any(g.task_type == "pick_two_obj_and_place" for g in games)
    assert sum(len(e["expert_actions"]) for e in episodes) >= 300


def test_upstream_mode_replays_upstreams_alfred_expert_action_for_action() -> None:
    compared = 0
    for episode in _episodes():
        game = AlfredGame.from_record(episode["game"])
        engine = FastAlfredEngine()
        expert = HandCodedExpert.for_game(game, random.Random(episode["expert_seed"]), expert_type="upstream")
        step = engine.reset(game)
        actions = [expert.start(step.observation)]
        for command, *_ in episode["transcript"][1:]:
            step = engine.step(command)
            actions.append(expert.reported_action(command, step.observation, step.admissible_commands))
        assert actions == episode["expert_actions"], game.id
        compared += len(actions)
    assert compared >= 300


def test_env_reports_the_upstream_experts_action_after_every_command_empty_and_refused_ones_too() -> None:
    """The env (``expert_type="upstream"``) drives the expert like AlfredExpert: ``"look"`` after an
    empty command (the expert only observes), a re-plan after every other command."""
    env = ALFWorldEnv(split="valid_seen", engine="fast", expert_type="upstream")
    rng = random.Random(0)
    empty_seen = replanned_after_refusal = 0
    for seed in range(8):
        _, info = env.reset(seed=seed)
        twin = env._expert.expert.clone()  # replays the env's expert from the same state
        for _ in range(40):
            roll, before = rng.random(), info["expert_action"]
            # upstream's bookkeeping takes "go to R" for a move to R even when the game refuses it
            command = "" if roll < 0.15 else "go to nowhere 9" if roll < 0.3 else before
            obs, _, terminated, _, info = env.step(command)
            assert info["expert_action"] == twin.reported_action(command, obs, info["admissible_commands"])
            if command == "":
                assert info["expert_action"] == "look"
                empty_seen += 1
            replanned_after_refusal += command == "go to nowhere 9" and info["expert_action"] != before
            if terminated:
                break
    assert empty_seen >= 10 and replanned_after_refusal >= 3


@pytest.mark.parametrize("expert_type", ["upstream", "fixed"])
def test_after_an_empty_command_upstream_says_look_and_fixed_keeps_its_action(expert_type: str) -> None:
    env = ALFWorldEnv(split="valid_seen", engine="fast", expert_type=expert_type)
    _, info = env.reset(seed=3)
    *_, info = env.step(info["expert_action"])  # "look" at reset; now a real action
    before = info["expert_action"]
    assert before.startswith("go to ")
    *_, info = env.step("")
    assert info["expert_action"] == ("look" if expert_type == "upstream" else before)


def test_unknown_expert_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"expert_type must be one of \['upstream', 'fixed'\]"):
        ALFWorldEnv(split="valid_seen", engine="fast", expert_type="planner")


@pytest.mark.parametrize("expert_type, facts", [("upstream", None), ("fixed", {"holds": []})])
def test_an_expert_built_with_the_wrong_start_facts_for_its_type_is_a_clear_error(expert_type: str, facts) -> None:
    game = AlfredGame.from_record(_episodes()[0]["game"])
    with pytest.raises(ValueError, match=rf"build it with HandCodedExpert.for_game\(game, rng, expert_type='{expert_type}'\)"):
        HandCodedExpert(game.task_params, random.Random(0), expert_type=expert_type, start_facts=facts)


def test_the_cached_admissible_view_answers_upstreams_scans_and_is_never_stale() -> None:
    """The expert's view of an admissible list (cached per distinct list) gives exactly the answers of
    upstream's scans: ``any(pattern in command ...)`` over the commands and the de-numbered ones,
    ``pattern in de-numbered list``; lists from several games and turns, each checked afresh."""
    from agentgym_budget.envs.alfworld.expert import _admissible_view, _remove_num_ids
    from agentgym_budget.envs.alfworld.game import load_games

    engine, rng, lists = FastAlfredEngine(), random.Random(0), []
    for game in load_games("valid_seen")[:3]:
        step = engine.reset(game)
        for _ in range(30):
            lists.append(step.admissible_commands)
            step = engine.step(rng.choice(step.admissible_commands))
    # Patterns of every game against every list: "take " is upstream's test with no placed object yet.
    words = {" ".join(c.split()[:n]) for commands in lists for c in commands for n in (2, 3, 10)}
    patterns = {"take ", *words, *map(_remove_num_ids, words)}
    outcomes = set()
    for commands in lists:
        view, wo_num_ids = _admissible_view(tuple(commands)), [_remove_num_ids(c) for c in commands]
        for pattern in patterns:
            found = pattern in view.wo_num_ids_text
            assert found == any(pattern in c for c in wo_num_ids)
            assert (pattern in view.commands_text) == any(pattern in c for c in commands)
            assert (pattern in view.wo_num_ids) == (pattern in wo_num_ids)
            outcomes.add(found)
    assert outcomes == {True, False}
    commands = ["look", "go to table 1"]
    before = _admissible_view(tuple(commands))
    commands.append("take apple 2 from table 1")  # the list changes: a new view, the old one unchanged
    assert "take apple" not in before.wo_num_ids_text and "take apple" in _admissible_view(tuple(commands)).wo_num_ids_text

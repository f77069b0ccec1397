"""Differential test: the fast ALFWorld engine against the real one, step for step.

Both engines get the same commands (expert trajectories, expert with random detours, random
admissible and inadmissible strings); at every step the observation, the admissible commands
(order included), ``won`` and the handcoded expert's next action must be identical.  The
fast variant plays a few games (about 20 s); the ``long`` one (``pytest -m long``) every bundled eval game.  The
full run is ``benchmarks/alfworld_equivalence.py``.
"""

from __future__ import annotations

import random

import pytest

from agentgym_budget._optional import is_installed
from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
from tools.alfworld.differential import MODES, compare_episode
from tools.alfworld.fuzz import fuzz_game

pytestmark = pytest.mark.skipif(
    not all(is_installed(m) for m in ("textworld", "alfworld", "fast_downward")),
    reason="the real ALFWorld engine is not installed (pip install 'agentgym-budget[alfworld]')",
)


def _bundled(split: str) -> list:
    from agentgym_budget.envs.alfworld.game import load_games

    try:
        return load_games(split)
    except (FileNotFoundError, OSError):
        return []


@pytest.fixture(scope="module")
def reference():
    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine

    engine = TextWorldAlfredEngine()
    yield engine
    engine.close()


def _check(reference, games, steps: int, seed: int) -> int:
    rng = random.Random(seed)
    compared = 0
    for index, game in enumerate(games):
        report = compare_episode(reference, FastAlfredEngine(), game, random.Random(rng.randrange(2**31)),
                                 steps=steps, mode=MODES[index % len(MODES)])
        assert not report.mismatches, str(report.mismatches[0])
        compared += report.steps
    return compared


def test_fast_engine_matches_the_real_one_on_a_sample(reference):
    games = [fuzz_game(random.Random(f"ci-{i}"), index=i) for i in range(2)]
    eval_games = _bundled("valid_seen") + _bundled("valid_unseen")
    games += random.Random(0).sample(eval_games, min(2, len(eval_games)))
    assert _check(reference, games, steps=12, seed=0) == 13 * len(games)  # reset + 12 commands each


@pytest.mark.long
def test_fast_engine_matches_the_real_one_on_every_eval_game(reference):
    games = _bundled("valid_seen") + _bundled("valid_unseen")
    games += [fuzz_game(random.Random(f"ci-slow-{i}"), index=i) for i in range(20)]
    assert _check(reference, games, steps=30, seed=1) > 0


def test_real_engine_fails_on_an_unreachable_goal_where_the_fast_engine_plays():
    """Pins the one deliberate difference (docs/alfworld-fast.md)."""
    from test_alfworld_fast import UNREACHABLE_GOAL, kitchen_game

    from agentgym_budget.envs.alfworld.textworld_engine import TextWorldAlfredEngine

    game = kitchen_game(task_type="pick_and_place_simple", goal_sentence="put a apple in coffeemachine", goal=UNREACHABLE_GOAL)
    with pytest.raises(KeyError, match="val1"):
        TextWorldAlfredEngine().reset(game)
    assert FastAlfredEngine().reset(game).won is False


@pytest.mark.slow  # two real-engine episodes: ~10 s
def test_memoized_parsers_leave_the_real_engine_output_unchanged(monkeypatch):
    """``memoize_textworld_parsers`` (the equivalence benchmark's speed-up) must not change a single step."""
    import importlib

    from agentgym_budget.envs.alfworld import textworld_engine

    for module in map(importlib.import_module, textworld_engine._PARSER_MODULES):  # TextWorld's own parsers first
        original = getattr(module._parse_and_convert, "__wrapped__", module._parse_and_convert)
        monkeypatch.setattr(module, "_parse_and_convert", original)
    game = fuzz_game(random.Random("memo"), index=0)
    transcripts = []
    for memoized in (False, True):
        if memoized:
            textworld_engine.memoize_textworld_parsers()
            assert all(getattr(importlib.import_module(name)._parse_and_convert, "_agentgym_memoized", False)
                       for name in textworld_engine._PARSER_MODULES)
        report = compare_episode(textworld_engine.TextWorldAlfredEngine(), FastAlfredEngine(), game,
                                 random.Random(3), steps=25, mode="noisy_expert", record=True)
        assert not report.mismatches, str(report.mismatches[0])
        transcripts.append(report.transcript)
    assert len(transcripts[0]) == 26 and transcripts[0] == transcripts[1]


def test_hash_order_ties_are_only_pick_two_states_with_two_placed_targets() -> None:
    """Upstream takes "the" placed object from a hash-ordered fact set: only there may the experts part."""
    from agentgym_budget.envs.alfworld.fast import FastAlfredEngine
    from agentgym_budget.envs.alfworld.game import load_games
    from tools.alfworld.differential import _ExpertPair

    game = next(g for g in load_games("valid_seen") if g.task_type == "pick_two_obj_and_place")
    pair = _ExpertPair(game, 0, FastAlfredEngine())
    facts = pair.experts[-1].facts
    target, parent = game.object_target, game.parent_target
    facts.in_receptacle = [(f"{target} 1", f"{parent} 1")]
    assert not pair.upstream_order_matters()
    facts.in_receptacle.append((f"{target} 2", f"{parent} 2"))
    assert pair.upstream_order_matters()
    other = next(g for g in load_games("valid_seen") if g.task_type == "pick_and_place_simple")
    simple = _ExpertPair(other, 0, FastAlfredEngine())
    simple.experts[-1].facts.in_receptacle = [(f"{other.object_target} {i}", f"{other.parent_target} {i}") for i in (1, 2)]
    assert not simple.upstream_order_matters()

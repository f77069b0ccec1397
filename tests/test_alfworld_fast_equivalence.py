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


# The hash-order tie of the first v2 run (docs/data/alfworld-equivalence-v2/run1.json), rebuilt by
# benchmarks/alfworld_tie_recheck.py: upstream's expert took 'go to sidetable 2' where ours takes the card.
TIE_GAME = "pick_two_obj_and_place-CreditCard-None-Drawer-216/trial_valid_seen_00077"
TIE_EXPERT_SEED = 306858506
TIE_COMMANDS = ["look", "go to sofa 1", "go to sidetable 1", "go to sidetable 2", "take creditcard 1 from sidetable 2",
                "go to drawer 1", "open drawer 1", "move creditcard 1 to drawer 1", "go to sidetable 2", "look",
                "go to diningtable 1", "go to sidetable 2", "look", "go to drawer 2", "go to sidetable 2", "look",
                "go to drawer 1"]


def _observation_after(game, commands: list[str]) -> str:
    engine = FastAlfredEngine()
    step = engine.reset(game)
    for command in commands:
        step = engine.step(command)
    return step.observation


@pytest.mark.slow  # four replays of upstream's expert, each in a fresh process: ~30-60 s
def test_a_tie_is_excused_only_when_upstream_itself_picks_either_way_under_other_hash_seeds():
    from tools.alfworld.differential import check_hash_order_tie

    [game] = [g for g in _bundled("valid_seen") if g.id == TIE_GAME] or pytest.skip("the bundled eval games are missing")
    there = _observation_after(game, TIE_COMMANDS)
    tie = check_hash_order_tie(game, TIE_EXPERT_SEED, TIE_COMMANDS, "take creditcard 1 from drawer 1", there,
                               hash_seeds=(1, 3), theirs="go to sidetable 2")
    assert tie.confirmed and tie.choices == {1: "take creditcard 1 from drawer 1", 3: "go to sidetable 2"}
    # five commands in, upstream's pick is the same under both hash seeds: a parting there is no tie
    early = TIE_COMMANDS[:5]
    stable = check_hash_order_tie(game, TIE_EXPERT_SEED, early, "go to sofa 1", _observation_after(game, early),
                                  hash_seeds=(1, 3))
    assert not stable.confirmed and set(stable.choices.values()) == {"go to drawer 1"}


def test_a_parting_in_a_hash_ordered_state_is_a_tie_only_when_the_check_confirms_it(monkeypatch):
    """compare_episode's wiring, without the real engine: upstream is played by our expert on the fast engine,
    made to pick something else at step 3 of a pick-two game."""
    from agentgym_budget.envs.alfworld.expert import HandCodedExpert
    from tools.alfworld import differential

    class PartingUpstream:
        def __init__(self) -> None:
            self.fast, self.expert_error, self.steps = FastAlfredEngine(), None, 0

        def reset(self, game):
            self.game, self.steps = game, 0
            step = self.fast.reset(game)
            self.observation = step.observation
            return step

        def seed_expert(self, seed: int) -> None:
            self.expert = HandCodedExpert.for_game(self.game, random.Random(seed), expert_type="upstream")
            self.expert_action = self.expert.start(self.observation)

        def step(self, command: str):
            step = self.fast.step(command)
            self.steps += 1
            action = self.expert.reported_action(command, step.observation, step.admissible_commands)
            self.expert_action = "upstream's other pick" if self.steps == 3 else action
            return step

    game = next(g for g in _bundled("valid_seen") if g.task_type == "pick_two_obj_and_place")
    checked = []

    def check(game_, expert_seed, commands, ours, observation, hash_seeds, theirs=None):
        checked.append((list(commands), observation))
        return differential.TieCheck({1: ours if confirm else "upstream's other pick"}, ours)

    monkeypatch.setattr(differential, "check_hash_order_tie", check)
    monkeypatch.setattr(differential._ExpertPair, "upstream_order_matters", lambda self: True)
    for confirm in (True, False):
        report = compare_episode(PartingUpstream(), FastAlfredEngine(), game, random.Random(0), steps=10, mode="expert")
        assert len(checked[-1][0]) == 3 and checked[-1][1] == _observation_after(game, checked[-1][0])
        assert report.tie_check is not None and report.tie_check.confirmed is confirm
        if confirm:
            assert report.hash_order_tie is not None and not report.mismatches and report.steps == 4
        else:
            assert report.hash_order_tie is None and report.mismatches[0].field == "expert_action"
            assert report.mismatches[0].expected == "upstream's other pick"

"""Stopping rules scored from records: exact against brute force over every order, ``never`` equals the cells."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from agentgym_budget.episodes.records import EpisodeRecord
from agentgym_budget.eval.cost import sequential_cost
from agentgym_budget.eval.passkt import pass_at_k
from agentgym_budget.eval.stopping import (NeverStop, NoEffect, NoProgress, attempt_outcome, parse_rule,
                                           parse_rules, rule_point, task_value)


def _record(rng: np.random.Generator, task: int, attempt: int, budget: int = 12) -> EpisodeRecord:
    """A random attempt: turns, a win or not, random no-effect flags and a plan that sometimes shrinks."""
    won = bool(rng.random() < 0.4)
    turns = int(rng.integers(1, budget + 1))
    lost = not won and turns < budget
    no_effect = [int(x) for x in rng.random(turns) < 0.4]
    plan, left = 6, []
    for _ in range(turns):
        plan = max(plan - int(rng.random() < 0.4), 0)
        left.append(plan)
    return EpisodeRecord(task, attempt, budget, turns if won else None, turns, 6, ["x"] * turns, [-1] * turns,
                         [-1] * turns, no_effect, left, lost_turn=turns if lost else None)


def _brute(outcomes, k: int, budget: float) -> tuple[float, float]:
    """Play every order of the attempts literally."""
    wins, costs = [], []
    for order in itertools.permutations(outcomes):
        spent, won = 0, False
        for count, (w, turns, _) in enumerate(order):
            if count == k or spent >= budget:
                break
            room = budget - spent
            if turns >= room:
                won, spent = w and turns <= room, spent + min(turns, room)
                break
            spent += turns
            if w:
                won = True
                break
        wins.append(won)
        costs.append(spent)
    return float(np.mean(wins)), float(np.mean(costs))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rule", [NeverStop(), NoEffect(2), NoProgress(2)])
def test_exact_against_every_order(seed, rule):
    rng = np.random.default_rng(seed)
    records = [_record(rng, 0, a) for a in range(5)]
    outcomes = [attempt_outcome(r, rule, 10) for r in records]
    for k in (1, 3, 5):
        for budget in (math.inf, 7, 15, 31):
            assert task_value(outcomes, k, budget) == pytest.approx(_brute(outcomes, k, budget))


def test_never_equals_the_plain_cells():
    rng = np.random.default_rng(3)
    records = [_record(rng, task, a) for task in range(7) for a in range(4)]
    for k in (1, 2, 4):
        for t in (3, 8, 12):
            point = rule_point(records, NeverStop(), k, t, bootstrap=0)
            won = np.array([[r.won_within(t) for r in records if r.task == task] for task in range(7)])
            turns = np.array([[min(r.turns, t) for r in records if r.task == task] for task in range(7)], float)
            assert point.success == pytest.approx(np.mean([pass_at_k(4, int(w.sum()), k) for w in won]))
            assert point.turns == pytest.approx(sequential_cost(turns, won, k).mean())
            assert point.cut_rate == 0.0


def test_a_cut_spends_fewer_turns_and_gives_them_to_the_next_attempt():
    # attempt 0 flails (no effect from turn 1), attempt 1 wins at turn 4
    flail = EpisodeRecord(0, 0, 10, None, 10, -1, ["x"] * 10, [-1] * 10, [-1] * 10, [1] * 10, [-1] * 10)
    win = EpisodeRecord(0, 1, 10, 4, 4, -1, ["x"] * 4, [-1] * 4, [-1] * 4, [0] * 4, [-1] * 4)
    plain = rule_point([flail, win], NeverStop(), 2, 10, 10, bootstrap=0)
    cut = rule_point([flail, win], NoEffect(2), 2, 10, 10, bootstrap=0)
    assert plain.success == 0.5 and plain.turns == 7.0   # flail first: 10 turns, budget gone
    assert cut.success == 1.0 and cut.turns == 5.0       # flail cut after 2, then the win: (2+4 + 4) / 2


def test_no_progress_counts_stalls_from_the_best_so_far():
    record = EpisodeRecord(0, 0, 8, None, 6, 5, ["x"] * 6, [-1] * 6, [-1] * 6, [0] * 6, [4, 5, 4, 3, 3, 3])
    assert NoProgress(2).cut_turn(record) == 3   # 5 and 4 after a low of 4: two stalls
    assert NoProgress(3).cut_turn(record) is None


@pytest.mark.parametrize("spec, message", [
    ("nope:2", "unknown rule 'nope'"), ("no-effect", "m must be a whole number >= 1"),
    ("no-progress:x", "m must be a whole number"), ("never:3", "takes no parameter"), (" , ", "at least one")])
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_rules(spec)
    assert "\n" not in str(error.value)


def test_specs_round_trip():
    assert [parse_rule(r.name).name for r in parse_rules("never,no-effect:2,no-progress:3")] == \
        ["never", "no-effect:2", "no-progress:3"]


def test_t_beyond_the_records_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="exceeds the recorded budget 12"):
        rule_point([_record(rng, 0, 0)], NeverStop(), 1, 13)

"""Budget-spec grammar and schedule semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from agentgym_budget.wrappers.budget_spec import (
    DEFAULT_MIX_BUDGETS,
    CurriculumBudget,
    FixedBudget,
    MixBudget,
    UniformBudget,
    parse_budget_spec,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (30, FixedBudget(30)),
        ("30", FixedBudget(30)),
        ("fixed:30", FixedBudget(30)),
        (" fixed : 30 ", FixedBudget(30)),
        ("mix", MixBudget(DEFAULT_MIX_BUDGETS)),
        ("mix:10,20,30,50", MixBudget((10, 20, 30, 50))),
        ("uniform:5-50", UniformBudget(5, 50)),
        ("curriculum:50->10@20000", CurriculumBudget(((0, 50), (20000, 10)), "episodes", "linear")),
        ("curriculum:50->10@20000steps", CurriculumBudget(((0, 50), (20000, 10)), "steps", "linear")),
        ("curriculum:10->30@300episodes:step", CurriculumBudget(((0, 10), (300, 30)), "episodes", "step")),
    ],
)
def test_spec_strings_parse(spec, expected):
    assert parse_budget_spec(spec) == expected


def test_mode_options():
    assert parse_budget_spec("mix", budgets=(10, 20, 30, 50)) == MixBudget((10, 20, 30, 50))
    assert parse_budget_spec("mix", low=5, high=50) == UniformBudget(5, 50)
    assert parse_budget_spec("mix", budgets=(10, 20), weights=(3, 1)).weights == (3.0, 1.0)
    curriculum = parse_budget_spec("curriculum", schedule=[(0, 50), (10_000, 10)], progress_unit="steps")
    assert curriculum == CurriculumBudget(((0, 50), (10_000, 10)), "steps", "linear")
    schedule = FixedBudget(7)
    assert parse_budget_spec(schedule) is schedule


@pytest.mark.parametrize(
    ("spec", "bad_part"),
    [
        ("fixed:", ""),
        ("fixed:abc", "abc"),
        ("fixed:0", "0"),
        ("mix:10,x", "x"),
        ("mix:10,,20", ""),
        ("uniform:50", "50"),
        ("uniform:a-b", "a"),
        ("curriculum:50-10@100", "50-10@100"),
        ("curriculum", "(no schedule)"),
        ("random", "random"),
        ("", ""),
        ("-5", "-5"),
    ],
)
def test_malformed_specs_name_the_bad_part_and_the_accepted_forms(spec, bad_part):
    with pytest.raises(ValueError) as excinfo:
        parse_budget_spec(spec)
    message = str(excinfo.value)
    assert "Accepted forms" in message or "budget" in message
    assert repr(bad_part) in message or bad_part in message
    if "malformed" in message:
        assert "'uniform:LOW-HIGH'" in message and "'fixed:T'" in message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": "fixed:10", "budgets": (1, 2)},
        {"budget": "uniform:1-5", "schedule": [(0, 1)]},
        {"budget": "mix:10,20", "budgets": (10, 20)},
        {"budget": "mix", "low": 5},
        {"budget": "mix", "budgets": (10,), "weights": (1, 2)},
        {"budget": "mix", "budgets": (10, 20), "weights": (-1, 2)},
        {"budget": "mix", "budgets": ()},
        {"budget": "uniform:9-3"},
        {"budget": "curriculum", "schedule": [(10, 5), (0, 50)]},
        {"budget": "curriculum", "schedule": [(0, 50)], "interpolation": "cubic"},
        {"budget": "curriculum", "schedule": [(0, 50)], "progress_unit": "epochs"},
        {"budget": 0},
        {"budget": True},
        {"budget": 2.5},
    ],
)
def test_bad_options_raise_value_error(kwargs):
    spec = kwargs.pop("budget")
    with pytest.raises(ValueError):
        parse_budget_spec(spec, **kwargs)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_parser_never_raises_anything_but_value_error(text):
    try:
        schedule = parse_budget_spec(text)
    except ValueError:
        return
    assert schedule.max_budget >= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=8))
def test_mix_string_round_trip(budgets):
    schedule = parse_budget_spec("mix:" + ",".join(map(str, budgets)))
    assert schedule.budgets == tuple(budgets)
    rng = np.random.default_rng(0)
    assert {schedule.sample(rng, 0) for _ in range(50)} <= set(budgets)


def test_mix_draws_are_uniform_over_the_set():
    schedule = parse_budget_spec("mix:10,20,30,50")
    rng = np.random.default_rng(123)
    draws = [schedule.sample(rng, 0) for _ in range(8000)]
    counts = [draws.count(b) for b in (10, 20, 30, 50)]
    assert stats.chisquare(counts).pvalue > 1e-3


def test_weighted_mix_follows_its_weights():
    schedule = parse_budget_spec("mix", budgets=(10, 50), weights=(3, 1))
    rng = np.random.default_rng(7)
    draws = np.array([schedule.sample(rng, 0) for _ in range(8000)])
    counts = [(draws == 10).sum(), (draws == 50).sum()]
    assert stats.chisquare(counts, f_exp=[6000, 2000]).pvalue > 1e-3


def test_uniform_range_covers_its_ends_and_nothing_else():
    schedule = parse_budget_spec("uniform:5-8")
    rng = np.random.default_rng(1)
    draws = [schedule.sample(rng, 0) for _ in range(4000)]
    assert set(draws) == {5, 6, 7, 8}
    assert stats.chisquare([draws.count(b) for b in (5, 6, 7, 8)]).pvalue > 1e-3


def test_weighted_mix_max_budget_ignores_zero_weight():
    assert parse_budget_spec("mix", budgets=(10, 50), weights=(1, 0)).max_budget == 10


@pytest.mark.parametrize(
    ("progress", "linear", "step"),
    [(0, 50, 50), (5_000, 30, 50), (9_999, 10, 50), (10_000, 10, 10), (50_000, 10, 10)],
)
def test_curriculum_values(progress, linear, step):
    points = [(0, 50), (10_000, 10)]
    assert parse_budget_spec("curriculum", schedule=points).value_at(progress) == linear
    assert parse_budget_spec("curriculum", schedule=points, interpolation="step").value_at(progress) == step


def test_multi_point_step_curriculum_like_scaling_inter():
    schedule = CurriculumBudget(((0, 10), (100, 20), (200, 30)), interpolation="step")
    assert [schedule.value_at(p) for p in (0, 99, 100, 150, 200, 10_000)] == [10, 10, 20, 20, 30, 30]
    assert schedule.max_budget == 30


BIG = 10**4400  # more digits than Python converts to or from a string


@pytest.mark.parametrize(
    ("spec", "kwargs", "match"),
    [
        ("mix", {"budgets": 10}, "budgets= must be a sequence"),
        ("mix", {"budgets": (10, 20), "weights": 5}, "weights must be a sequence"),
        ("mix", {"budgets": (10, 20), "weights": (None, 1)}, "a weight must be a real number"),
        ("curriculum", {"schedule": [5]}, "a schedule point must be a sequence"),
        ("curriculum", {"schedule": [("a", 10)]}, "progress must be a real number"),
        ("curriculum", {"schedule": [(0, BIG)]}, "1..1000000"),
        ("uniform:1-" + str(10**27), {}, "largest budget, 1000000"),
        ("curriculum:10->" + str(10**30) + "@100", {}, "largest budget, 1000000"),
        ("9" * 4400, {}, "largest budget, 1000000"),
        (BIG, {}, "over 4000 digits"),
        (1_000_001, {}, "1..1000000"),
        ("mix:١٠", {}, "bad part '١٠'"),  # Arabic-Indic digits are not 10
        ("١٠", {}, "bad part '١٠'"),
        ("mix:", {}, "empty set"),
        ("mix", {"progress_unit": "bogus"}, "progress_unit must be"),
        ("30", {"interpolation": "bogus"}, "interpolation must be"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else type(v).__name__,  # repr(BIG) would fail
)
def test_wrong_types_and_absurd_sizes_are_value_errors_up_front(spec, kwargs, match):
    with pytest.raises(ValueError, match=match) as excinfo:
        parse_budget_spec(spec, **kwargs)
    assert len(str(excinfo.value)) < 600  # the message never echoes a huge argument whole


def test_largest_budget_is_accepted_and_drawn():
    assert parse_budget_spec("uniform:1-1000000").sample(np.random.default_rng(0), 0) in range(1, 1_000_001)
    assert parse_budget_spec("fixed:0005") == FixedBudget(5)


def test_budget_template_must_be_a_string():
    import gymnasium as gym

    import agentgym_budget  # noqa: F401

    with pytest.raises(ValueError, match="budget_template must be a str"):
        gym.make("KeyDoor-Budget-v0", budget_template=5)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.text(alphabet="0123456789-:,>@ mixuniformcurriculum١٠", max_size=30)),
       st.one_of(st.none(), st.integers(), st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)),
                                                     max_size=3)))
def test_any_spec_and_option_raise_only_value_error(spec, option):
    for kwargs in ({"budgets": option}, {"weights": option}, {"schedule": option}, {}):
        try:
            schedule = parse_budget_spec(spec, **kwargs)
        except ValueError:
            continue
        assert 1 <= schedule.max_budget <= 1_000_000
        schedule.sample(np.random.default_rng(0), 0)

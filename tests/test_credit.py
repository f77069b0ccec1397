"""Per-turn credit of the trainer (train/grpo.py): process rewards as returns-to-go on top of the
outcome advantage, with the loss rule.  Episodes are played for real through the training env
(``make_train_env``: TurnBudget + ProcessReward), scripted, then scored as the trainer scores them.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import agentgym_budget  # noqa: F401  (registers the envs)
from agentgym_budget.train.config import TrainConfig
from agentgym_budget.train.grpo import group_advantages, process_returns_to_go, turn_credits, turn_samples
from agentgym_budget.train.rollout import Episode, Turn, make_train_env


def _play(config: TrainConfig, actions: list[str], reset_options: dict | None = None, seed: int = 0) -> Episode:
    env = make_train_env(config)
    obs, info = env.reset(seed=seed, options=reset_options)
    episode = Episode(seed=seed, task=str(info["task"]), budget=int(info["budget"]))
    for action in actions:
        obs, _, terminated, truncated, info = env.step(action)
        episode.turns.append(Turn([1], [2], action, float(info.get("process_reward", 0.0))))
        episode.won = episode.won or bool(info.get("won"))
        episode.terminated = bool(terminated)
        if terminated or truncated:
            break
    return episode


def _scores(episodes: list[Episode], coef: float = 0.1) -> list[float]:
    """Each episode's overall credit as the trainer gives it: its first turn's advantage."""
    advantages = group_advantages(torch.tensor([float(e.won) for e in episodes]), len(episodes))
    samples = turn_samples(episodes, advantages, process_coef=coef)
    starts = [sum(len(e.turns) for e in episodes[:i]) for i in range(len(episodes))]
    return [samples[s].advantage for s in starts]


def _key_door(signal: str, budget: int = 4) -> TrainConfig:
    return TrainConfig(env_id="KeyDoor-v0", budget=f"fixed:{budget}", process_reward=signal)


@pytest.mark.parametrize("coef", [0.1, 1.0, 10.0])
def test_key_door_ranks_win_over_timeout_with_progress_over_timeout_without_over_loss(coef):
    config, task = _key_door("expert_progress"), {"task": "red-blue"}
    win = _play(config, ["take key", "open red door"], task)
    timeout_progress = _play(config, ["take key", "open green door", "look", "look"], task)
    timeout_nothing = _play(config, ["open red door", "open red door", "look", "look"], task)
    loss = _play(config, ["take key", "open blue door"], task)
    assert (win.won, loss.lost, timeout_progress.terminated, timeout_nothing.terminated) == (True, True, False, False)
    s_win, s_progress, s_nothing, s_loss = _scores([win, timeout_progress, timeout_nothing, loss], coef)
    assert s_win > s_progress > s_nothing >= s_loss
    # The old telescoping form paid the loss as much as the win (2.0 vs 2.0): here it keeps nothing.
    assert sum(t.process_reward for t in loss.turns) > 0  # the env's raw signal did reward the loss...
    assert process_returns_to_go([t.process_reward for t in loss.turns], lost=True)[0] == 0.0  # ...credit doesn't


def test_invalid_actions_are_charged_in_episodes_that_end_in_a_win_or_a_loss():
    config, task = _key_door("invalid_penalty"), {"task": "red-blue"}
    clean_win = _play(config, ["take key", "open red door"], task)
    sloppy_win = _play(config, ["dance", "take key", "open red door"], task)
    clean_loss = _play(config, ["take key", "open blue door"], task)
    sloppy_loss = _play(config, ["dance", "take key", "open blue door"], task)
    win_scores = _scores([clean_win, sloppy_win, clean_loss, sloppy_loss])
    assert win_scores[0] > win_scores[1] and win_scores[2] > win_scores[3]
    assert process_returns_to_go([t.process_reward for t in sloppy_win.turns], lost=False)[0] == -1.0
    assert process_returns_to_go([t.process_reward for t in sloppy_loss.turns], lost=True)[0] == -1.0


@pytest.mark.slow
def test_scripted_alfworld_episode_ranks_win_over_progress_over_nothing():
    config = TrainConfig(env_id="ALFWorld-v0", budget="fixed:60", process_reward="expert_progress",
                         env_kwargs={"expert_plan_horizon": 100, "expert_type": "fixed"})  # a plan that wins
    env = make_train_env(config)
    _, info = env.reset(seed=3)
    plan = list(info["expert_plan"])
    env.close()
    assert len(plan) >= 4
    win = _play(config, plan, seed=3)
    half = _play(config, plan[: len(plan) // 2] + ["look"] * 60, seed=3)
    nothing = _play(config, ["look"] * 60, seed=3)
    assert win.won and not half.won and not nothing.won and not half.terminated
    s_win, s_half, s_nothing = _scores([win, half, nothing])
    assert s_win > s_half > s_nothing


@given(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0]), min_size=1, max_size=12),
       st.lists(st.sampled_from([-1.0, 0.0]), min_size=1, max_size=12), st.booleans())
def test_a_loss_never_scores_above_a_timeout_with_the_same_progress(before, tail, lost_with_gain):
    # Same turns up to the end; one episode times out there, the other loses on one more turn.
    timeout = process_returns_to_go(before, lost=False)[0]
    loss = process_returns_to_go([*before, 2.0 if lost_with_gain else -1.0], lost=True)[0]
    assert loss <= timeout and loss <= 0.0


@given(st.lists(st.sampled_from([-1.0, 1.0]), min_size=0, max_size=10), st.integers(1, 4),
       st.sampled_from([0.1, 1.0, 5.0]))
def test_shaping_cannot_reorder_two_failures_that_make_no_progress(wander, pad, coef):
    # Two timeouts with outcome 0 whose process rewards sum to zero (they wander and come back):
    # their overall credit is equal whatever the detours, so shaping does not pick one.
    back = [-r for r in reversed(wander)]
    a = Episode(0, "t", 10, [Turn([1], [2], "x", r) for r in [*wander, *back]] or [Turn([1], [2], "x", 0.0)])
    b = Episode(0, "t", 10, [Turn([1], [2], "x", 0.0) for _ in range(pad)])
    s_a, s_b = _scores([a, b], coef)
    assert s_a == pytest.approx(s_b)


# -- group normalisation of the process rewards (train/grpo.py turn_credits, issue 40) ---------------
def _episode(rewards: list[float], won: bool = False, lost: bool = False) -> Episode:
    return Episode(0, "t", 8, [Turn([1], [2], "x", r) for r in rewards], won=won, terminated=won or lost)


def test_group_norm_credits_progress_relative_to_the_group_with_known_values():
    # One group: a win [1, 1] and a timeout [1, 0, 0] -> pooled rewards 1, 1, 1, 0, 0:
    # mean 0.6, unbiased std sqrt(0.3); normalised 1 -> 0.4/s, 0 -> -0.6/s; then returns-to-go.
    win, timeout = _episode([1.0, 1.0], won=True), _episode([1.0, 0.0, 0.0])
    s = 0.3 ** 0.5
    credits = turn_credits([win, timeout], group_size=2, norm="rewards")
    assert credits[0] == pytest.approx([0.8 / s, 0.4 / s], rel=1e-5)
    assert credits[1] == pytest.approx([-0.8 / s, -1.2 / s, -0.6 / s], rel=1e-5)
    # norm="none" is each episode's own process_returns_to_go
    assert turn_credits([win, timeout], 2, norm="none") == [[2.0, 1.0], [1.0, 0.0, 0.0]]


def test_group_norm_applies_the_loss_rule_first_and_keeps_groups_apart():
    loss = _episode([1.0, 0.0], lost=True)  # loss rule: [1, -1]
    win = _episode([1.0, 1.0], won=True)
    same_a, same_b = _episode([1.0, 1.0]), _episode([1.0, 1.0])
    credits = turn_credits([loss, win, same_a, same_b], group_size=2, norm="rewards")
    # group 1 pools 1, -1, 1, 1: mean 0.5, std 1 -> normalised 0.5, -1.5 | 0.5, 0.5 (eps aside)
    assert credits[0] == pytest.approx([-1.0, -1.5], rel=1e-5) and credits[1] == pytest.approx([1.0, 0.5], rel=1e-5)
    # group 2: every turn made the same progress -> no process credit at all
    assert credits[2] == [0.0, 0.0] and credits[3] == [0.0, 0.0]
    # the default then standardises group 1's returns-to-go -1, -1.5, 1, 0.5 (mean -0.25) and leaves group 2 at 0
    standard = turn_credits([loss, win, same_a, same_b], group_size=2)
    spread = ((0.75**2 + 1.25**2 + 1.25**2 + 0.75**2) / 3) ** 0.5
    assert standard[0] == pytest.approx([-0.75 / spread, -1.25 / spread], rel=1e-5)
    assert standard[1] == pytest.approx([1.25 / spread, 0.75 / spread], rel=1e-5)
    assert standard[2] == [0.0, 0.0] and standard[3] == [0.0, 0.0]


def test_group_norm_standardises_the_returns_to_go_with_known_values():
    # The win [1, 1] and timeout [1, 0, 0] above: returns-to-go of the normalised rewards
    # (0.8, 0.4 | -0.8, -1.2, -0.6) / sqrt(0.3), then standardised over the 5 turns: mean -0.28,
    # centred 1.08, 0.68, -0.52, -0.92, -0.32, unbiased std sqrt(2.848 / 4) (the 1/sqrt(0.3) cancels).
    win, timeout = _episode([1.0, 1.0], won=True), _episode([1.0, 0.0, 0.0])
    spread = (2.848 / 4) ** 0.5
    credits = turn_credits([win, timeout], group_size=2)
    assert credits[0] == pytest.approx([1.08 / spread, 0.68 / spread], rel=1e-5)
    assert credits[1] == pytest.approx([-0.52 / spread, -0.92 / spread, -0.32 / spread], rel=1e-5)


def test_group_norm_does_not_push_a_keydoorrooms_group_down_as_a_whole():
    # Issue 40's KeyDoorRooms decline, on a hand-built group of its 4-room set-up (plan of 5 turns,
    # budget 8): a win; a loss (wrong door, its progress forfeit by the loss rule); two timeouts
    # that walk to the doors and then stall there (invalid actions).  Returns-to-go of per-turn
    # normalised rewards count the end-of-episode penalties once per earlier turn: the credit
    # averaged -0.97 per turn and pushed 20 of the 26 turns down, the win's door turn up by
    # less than the stalls were pushed down.  Standardised, it has mean 0 over the group's turns.
    group = [_episode([1.0] * 5, won=True), _episode([1.0] * 4 + [0.0], lost=True),
             _episode([1.0] * 4 + [0.0] * 4), _episode([1.0] * 3 + [0.0] * 5)]
    old = [g for episode in turn_credits(group, 4, norm="rewards") for g in episode]
    assert sum(old) / len(old) == pytest.approx(-0.9749, abs=1e-3) and sum(g > 0 for g in old) == 6
    credits = turn_credits(group, 4)
    pooled = torch.tensor([g for episode in credits for g in episode], dtype=torch.float64)
    assert float(pooled.mean()) == pytest.approx(0.0, abs=1e-9)
    assert float(pooled.std()) == pytest.approx(1.0, rel=1e-5)
    # the ranking within the group is kept: every turn of the win above every turn of the loss,
    # the win's door turn above the stalls at the doors, the loss's door turn below them
    win, loss, stall, _ = credits
    assert min(win) > max(loss) and win[4] > max(stall[4:]) and loss[4] < min(stall[4:])


@given(st.lists(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0]), min_size=1, max_size=8), min_size=2, max_size=5),
       st.sampled_from([1.0, 0.9]))
def test_group_norm_is_an_increasing_affine_map_of_the_rewards_credit_with_mean_zero(rewards, gamma):
    episodes = [_episode(r) for r in rewards]
    before = [g for e in turn_credits(episodes, len(episodes), gamma, norm="rewards") for g in e]
    after = [g for e in turn_credits(episodes, len(episodes), gamma) for g in e]
    assert sum(after) == pytest.approx(0.0, abs=1e-6)
    for (a, b), (x, y) in zip(zip(before, before[1:]), zip(after, after[1:])):
        assert (a < b - 1e-9) <= (x < y)  # order kept (ties aside)


@given(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=1, max_size=6), st.integers(1, 6))
def test_group_norm_charges_dithering_before_the_same_progress(progress, dither):
    # Two timeouts with the same progress; one dithers (invalid, 0) first.  Raw returns-to-go credit
    # every dithering turn with the progress that follows; normalised, the dithering episode's first
    # turn gets less than the direct one's whenever the group made net progress.
    direct, slow = _episode(progress), _episode([0.0] * dither + progress)
    raw = turn_credits([direct, slow], 2, norm="none")
    assert raw[0][0] == raw[1][0] == pytest.approx(sum(progress))
    normed = turn_credits([direct, slow], 2, norm="group")
    if sum(progress) > 0:
        assert normed[1][0] < normed[0][0]


def test_turn_credits_refuses_an_unknown_norm_and_a_broken_layout():
    with pytest.raises(ValueError, match=r"norm must be one of \('none', 'rewards', 'group'\)"):
        turn_credits([_episode([1.0])], 1, norm="z")
    with pytest.raises(ValueError, match=r"episodes must be \[groups \* 2\]"):
        turn_credits([_episode([1.0])], 2)

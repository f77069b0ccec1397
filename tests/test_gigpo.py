"""GiGPO's step-level group advantages (train/gigpo.py): hand-built groups with known answers, the option."""

import math

import pytest

torch = pytest.importorskip("torch")

import gymnasium as gym  # noqa: E402

import agentgym_budget  # noqa: E402, F401  (registers the envs)
from agentgym_budget.train.config import TrainConfig  # noqa: E402
from agentgym_budget.train.gigpo import discounted_returns, state_key, step_advantages  # noqa: E402
from agentgym_budget.train.grpo import turn_samples  # noqa: E402
from agentgym_budget.train.rollout import Episode, Turn  # noqa: E402


def _episode(keys, won=False, failed=False):
    return Episode(seed=0, task="t", budget=4, won=won, failed=failed,
                   turns=[Turn([7], [1, 2], f"a{t}", state_key=k) for t, k in enumerate(keys)])


def _close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a == pytest.approx(e, abs=1e-6)


def test_discounted_step_returns_pay_a_faster_win_more():
    assert discounted_returns([0.0, 0.0, 1.0], gamma=0.95) == pytest.approx([0.9025, 0.95, 1.0])
    assert discounted_returns([], gamma=0.95) == []


def test_two_episodes_that_share_their_first_state_and_diverge():
    # the win takes 2 turns (returns 0.5, 1), the loss 3 (returns 0, 0, 0); only the first state is shared
    group = [_episode(["hall", "key held"], won=True), _episode(["hall", "locked", "nothing"], won=False)]
    centred = step_advantages(group, group_size=2, gamma=0.5, scale_by_std=False)
    _close(centred[0], [0.25, 0.0])
    _close(centred[1], [-0.25, 0.0, 0.0])
    scaled = step_advantages(group, group_size=2, gamma=0.5, scale_by_std=True)
    std = math.sqrt(0.125) + 1e-6  # unbiased std of (0.5, 0), plus eps
    _close(scaled[0], [0.25 / std, 0.0])
    _close(scaled[1], [-0.25 / std, 0.0, 0.0])


def test_a_state_revisited_within_one_episode_joins_the_same_step_group():
    # episode 0 acts twice from "hall" (returns 0.25 then 0.5), episode 1 once (0.5): mean 5/12
    group = [_episode(["hall", "hall", "key held"], won=True), _episode(["hall", "other"], won=True)]
    advantages = step_advantages(group, group_size=2, gamma=0.5, scale_by_std=False)
    _close(advantages[0], [0.25 - 5 / 12, 0.5 - 5 / 12, 0.0])
    _close(advantages[1], [0.5 - 5 / 12, 0.0])


def test_singleton_step_groups_get_zero_step_advantage():
    group = [_episode(["a", "b"], won=True), _episode(["c", "d", "e"], won=False)]
    for scale in (True, False):
        assert step_advantages(group, group_size=2, gamma=0.9, scale_by_std=scale) == [[0.0, 0.0], [0.0, 0.0, 0.0]]


def test_equal_returns_from_a_shared_state_give_zero_and_groups_stay_apart():
    # group 1: both lose from "hall" (no signal); group 2: same key text, but another task's group
    episodes = [_episode(["hall"], won=False), _episode(["hall"], won=False),
                _episode(["hall"], won=True), _episode(["hall", "x"], won=True)]
    advantages = step_advantages(episodes, group_size=2, gamma=0.5, scale_by_std=False)
    assert advantages[:2] == [[0.0], [0.0]]
    _close(advantages[2], [0.25])  # returns 1 and 0.5 within group 2 only
    _close(advantages[3], [-0.25, 0.0])


def test_a_failed_episode_joins_no_step_group_and_the_layout_is_checked():
    group = [_episode(["hall"], won=True), _episode([], failed=True), _episode(["hall"], won=False)]
    advantages = step_advantages(group, group_size=3, gamma=1.0, scale_by_std=False)
    assert advantages[1] == []
    _close(advantages[0] + advantages[2], [0.5, -0.5])
    with pytest.raises(ValueError, match=r"groups \* 2"):
        step_advantages(group, group_size=2, gamma=1.0)


def test_turn_samples_add_omega_times_the_step_advantage():
    group = [_episode(["hall", "key held"], won=True), _episode(["hall", "locked"], won=False)]
    steps = step_advantages(group, group_size=2, gamma=0.5, scale_by_std=False)
    samples = turn_samples(group, torch.tensor([0.7, -0.7]), step_advantages=steps, step_coef=2.0)
    _close([s.advantage for s in samples], [0.7 + 2 * 0.25, 0.7, -0.7 - 2 * 0.25, -0.7])
    plain = turn_samples(group, torch.tensor([0.7, -0.7]))
    _close([s.advantage for s in plain], [0.7, 0.7, -0.7, -0.7])


def test_the_state_key_leaves_out_the_budget_line_and_prefers_the_envs_key():
    shown = gym.make("KeyDoor-Budget-v0", budget=3, show_budget=True)
    hidden = gym.make("KeyDoor-Budget-v0", budget=5, show_budget=False)
    obs, info = shown.reset(seed=4)
    assert "Turns left" in obs
    assert state_key(obs, info) == state_key(*hidden.reset(seed=4))
    assert "Turns left" not in state_key(*shown.step("dance")[::4])
    assert state_key("You take the key.", {"state_key": ("key", 1)}) == "('key', 1)"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"gigpo_gamma": 0.0}, r"gigpo_gamma must be in \(0, 1\], got 0.0"),
    ({"gigpo_gamma": 1.5}, r"gigpo_gamma must be in \(0, 1\], got 1.5"),
    ({"gigpo_omega": -1.0}, "gigpo_omega must be a finite number >= 0, got -1.0"),
    ({"gigpo_omega": float("nan")}, "gigpo_omega must be a finite number >= 0, got nan"),
    ({"advantage": "gipo"}, "advantage must be one of"),
])
def test_config_rejects_bad_gigpo_settings_in_one_line(overrides, message):
    with pytest.raises(ValueError, match=message) as error:
        TrainConfig(**overrides)
    assert "\n" not in str(error.value)


def test_config_takes_gigpo_with_every_budget_spec():
    for budget in ("fixed:3", "mix:2,3,4", "uniform:2-5", "curriculum:6->2@100"):
        config = TrainConfig(advantage="gigpo", budget=budget, gigpo_omega=0.5, gigpo_gamma=1.0)
        assert (config.advantage, config.gigpo_omega, config.gigpo_gamma) == ("gigpo", 0.5, 1.0)


def test_the_trainer_runs_an_update_with_gigpo_on_keydoor(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from agentgym_budget.train import Trainer, trainer as trainer_module

    calls = []

    def spy(episodes, group_size, gamma, scale_by_std):
        calls.append((episodes, group_size, gamma, scale_by_std))
        return step_advantages(episodes, group_size, gamma, scale_by_std)

    monkeypatch.setattr(trainer_module, "step_advantages", spy)
    config = TrainConfig(env_id="KeyDoor-v0", budget="mix:2,3", show_budget=True, model="tiny",
                         format_warmup_steps=0, seed=2, total_updates=1, tasks_per_update=2, group_size=3,
                         max_new_tokens=4, learning_rate=1e-2, entropy_coef=0.01, kl_coef=0.0,
                         advantage="gigpo", gigpo_gamma=0.9, eval_every=0, save_every=0, torch_threads=1,
                         output_dir=str(tmp_path), progress_bar=False, tensorboard=False)
    trainer = Trainer(config)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    (metrics,) = trainer.train()

    assert math.isfinite(metrics["loss"]) and metrics["optimizer_steps"] == 1
    assert 0 < metrics["shared_state_turns"] <= 1  # at least every group's first turns share a state
    assert any(not torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    ((episodes, group_size, gamma, scale_by_std),) = calls
    assert (len(episodes), group_size, gamma, scale_by_std) == (6, 3, 0.9, True)
    for start in (0, 3):  # a group shares the task, the budget and so its first state (budget line left out)
        group = episodes[start:start + 3]
        assert len({(e.task, e.budget) for e in group}) == 1
        assert len({e.turns[0].state_key for e in group}) == 1
        assert all("Turns left" not in turn.state_key for e in group for turn in e.turns)


@pytest.mark.parametrize("env_id", ["KeyDoor-v0", "KeyDoorRooms-v0"])
def test_keydoor_envs_key_the_state_where_the_text_cannot(env_id):
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    start = state_key(obs, info)
    obs, *_, info = env.step("dance")  # "Nothing happens.": the same state as at the start
    assert (obs, state_key(obs, info)) == ("Nothing happens.", start)
    plan = info["expert_plan"]
    for action in plan[:plan.index("take key") + 1]:
        env.step(action)
    obs, *_, info = env.step("dance")  # the same text, another state: the key is held now
    assert obs == "Nothing happens." and state_key(obs, info) not in (start, "over")


def test_alfworld_fast_engine_keys_location_inventory_and_receptacle_states():
    env = gym.make("ALFWorld-v0", engine="fast")
    obs, info = env.reset(seed=0)
    start = info["state_key"]
    assert start.startswith("at ") and "holding nothing" in start
    for look_only in ("dance wildly", "look", "inventory"):  # nothing changes: the same anchor state
        assert env.step(look_only)[4]["state_key"] == start
    keys = {start}
    for _ in range(12):  # the expert's plan changes location, inventory and receptacles
        obs, _, terminated, _, info = env.step(info["expert_action"])
        keys.add(info["state_key"])
        if terminated:
            break
    assert len(keys) > 3 and any("holding nothing" not in key for key in keys)
    env.reset(seed=0)
    assert env.unwrapped._last_info["state_key"] == start  # the same state, the same key

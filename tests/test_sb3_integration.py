"""SB3 integration: DiscreteCommands passes SB3's env checker, masks match the admissible
commands, encoders are stable and pluggable, and MaskablePPO learns through it."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.integrations.sb3 import CommandFeatures, DiscreteCommands, HashingBagOfWords, MaskablePolicy
from agentgym_budget.wrappers import TurnBudget
from scripted_envs import LineWorld

pytest.importorskip("stable_baselines3")
sb3_contrib = pytest.importorskip("sb3_contrib")


@pytest.mark.parametrize("make", [
    lambda: DiscreteCommands(gym.make("KeyDoor-Budget-v0", budget="mix:2,4"), max_actions=4),
    lambda: DiscreteCommands(LineWorld(), max_actions=5),
    lambda: DiscreteCommands(TurnBudget(LineWorld(), budget=6, show_budget=True), max_actions=4),
])
def test_sb3_env_checker_passes(make) -> None:
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3's checker warns about anything it dislikes
        check_env(make(), warn=True)


def test_actions_index_the_admissible_commands_and_masks_match() -> None:
    env = DiscreteCommands(LineWorld(), max_actions=5)
    _, info = env.reset(seed=0, options={"task": 3})
    assert info["admissible_commands"] == ["back", "forward", "wait"]
    assert env.action_masks().tolist() == [True, True, True, False, False]
    _, _, _, _, info = env.step(1)
    assert info["command"] == "forward"
    assert env.action_masks().tolist() == [True, True, True, True, False]  # "jump" is admissible at square 1
    assert np.array_equal(info["action_mask"], env.action_masks())
    obs, reward, terminated, truncated, info = env.step(4)  # masked out: an in-game no-op, not a crash
    assert info["command"] == "" and env.unwrapped.position == 1 and not terminated


def test_commands_past_max_actions_warn_once_and_are_cut() -> None:
    env = DiscreteCommands(LineWorld(), max_actions=2)
    with pytest.warns(UserWarning, match="max_actions=2"):
        env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.step(1)


def test_budget_feature_follows_turn_budget() -> None:
    plain = DiscreteCommands(LineWorld(), max_actions=4)
    budgeted = DiscreteCommands(TurnBudget(LineWorld(), budget="mix:4,8"), max_actions=4)
    assert budgeted.observation_space.shape[0] == plain.observation_space.shape[0] + 1
    obs, _ = budgeted.reset(seed=0, options={"budget": 4})
    assert obs[-1] == pytest.approx(4 / 8)
    obs, *_ = budgeted.step(2)
    assert obs[-1] == pytest.approx(3 / 8)
    with pytest.raises(ValueError, match="TurnBudget"):
        DiscreteCommands(LineWorld(), budget_feature=True)
    assert DiscreteCommands(TurnBudget(LineWorld(), budget=4), budget_feature=False).features.budget_scale is None


def test_features_say_which_slot_holds_which_command() -> None:
    features = CommandFeatures(max_actions=3, budget_scale=None)
    info = {"task": "open the red door", "admissible_commands": ["take key", "open red door"]}
    encoded = features.encode("You see a red door.", info)
    slots = encoded[features.text_encoder.dim:].reshape(3, features.slot_dim)
    assert slots[0, -2:].tolist() == [0.0, 0.0]  # "take key": no word in task or observation
    assert slots[1, -2:].tolist() == [1.0, pytest.approx(2 / 3)]
    assert not slots[2].any()
    assert features.space.contains(encoded)


def test_hashing_is_stable_across_processes() -> None:
    """CRC32, not Python's salted hash(): subprocesses (vector envs, eval workers) agree."""
    code = "from agentgym_budget.integrations.sb3 import HashingBagOfWords as H; print(H(64)('go to fridge 1').nonzero()[0].tolist())"
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": str(s), "PYTHONPATH": ":".join(sys.path)}).stdout
        for s in (1, 2)
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(HashingBagOfWords(64)("go to fridge 1").nonzero()[0].tolist())


def test_a_custom_text_encoder_plugs_in() -> None:
    class Length:
        dim = 1

        def __call__(self, text: str) -> np.ndarray:
            return np.array([min(len(text) / 100, 1.0)], dtype=np.float32)

    env = DiscreteCommands(LineWorld(), max_actions=4, text_encoder=Length(), command_encoder=Length())
    assert env.observation_space.shape == (1 + 4 * 3,)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_actions"):
        DiscreteCommands(LineWorld(), max_actions=0)
    with pytest.raises(ValueError, match="Text action space"):
        DiscreteCommands(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="dim"):
        HashingBagOfWords(0)


def _win_rate(policy: MaskablePolicy, episodes: int = 60) -> float:
    env = gym.make("KeyDoor-Budget-v0", budget=4)
    wins = 0
    for episode in range(episodes):
        policy.reset(seed=episode)
        obs, info = env.reset(seed=10_000 + episode)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            done = terminated or truncated
        wins += bool(info["won"])
    return wins / episodes


def _key_door_model(n_envs: int = 8):
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    vec_env = make_vec_env(lambda: DiscreteCommands(gym.make("KeyDoor-Budget-v0", budget=4), max_actions=4),
                           n_envs=n_envs, seed=0)
    model = sb3_contrib.MaskablePPO("MlpPolicy", vec_env, n_steps=32, batch_size=128, n_epochs=4,
                                    learning_rate=3e-3, seed=0, policy_kwargs={"net_arch": [32]})
    return model, vec_env.envs[0].get_wrapper_attr("features")


def test_maskable_ppo_trains_through_the_masks_and_plays_as_a_seeded_policy() -> None:
    model, features = _key_door_model(n_envs=2)
    model.learn(64)  # one rollout + update through action_masks()
    policy = MaskablePolicy(model, features)
    assert policy.reads_budget and policy.name == "maskable-ppo"
    env = gym.make("KeyDoor-Budget-v0", budget=4)
    obs, info = env.reset(seed=3)
    runs = []
    for _ in range(2):
        policy.reset(seed=7)
        runs.append([policy.act(obs, info) for _ in range(6)])
    assert runs[0] == runs[1]  # all randomness from reset(seed)
    assert set(runs[0]) <= set(info["admissible_commands"])
    probs = policy.action_probabilities(obs, info)
    assert probs[3] == 0.0 and probs.sum() == pytest.approx(1.0)  # the empty slot is masked


@pytest.mark.slow
def test_maskable_ppo_learns_key_door() -> None:
    model, features = _key_door_model()
    before = _win_rate(MaskablePolicy(model, features))
    model.learn(4096)
    after = _win_rate(MaskablePolicy(model, features, deterministic=True))
    # A random policy over the admissible commands wins about 30% within 4 turns.
    assert before < 0.5 < after, (before, after)

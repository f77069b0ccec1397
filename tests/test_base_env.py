"""The text-env contract, on a tiny env that follows it."""

from __future__ import annotations

import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_env import CorridorEnv

from agentgym_budget.envs.base import CHARSET, INVALID_ACTION_FEEDBACK, REQUIRED_INFO_KEYS, TextEnv, to_charset


def test_check_env_passes():
    check_env(CorridorEnv(render_mode="ansi"))


def test_info_keys_and_turn_counting():
    env = CorridorEnv()
    _, info = env.reset(seed=0)
    assert REQUIRED_INFO_KEYS <= info.keys() and info["turn"] == 0
    obs, reward, terminated, truncated, info = env.step("sing")
    assert (obs, reward, terminated, truncated, info["turn"]) == (INVALID_ACTION_FEEDBACK, 0.0, False, False, 1)


@pytest.mark.parametrize("action", [3, None, b"look", ["look"]])
def test_non_string_actions_raise_type_error(action):
    env = CorridorEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be str"):
        env.step(action)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_string_is_a_turn(action):
    env = CorridorEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs) and info["turn"] == 1 and not truncated


def test_to_charset():
    assert to_charset("caf\u00e9 \u2014 na\u00efve") == "cafe ? naive"
    cut = to_charset("x" * 50, max_length=20)
    assert len(cut) == 20 and cut.endswith("[...]")
    assert set(to_charset("\u4e2d\u6587\ttab\nline")) <= set(CHARSET)


def test_backend_missing_an_info_key_fails_loudly():
    class Broken(CorridorEnv):
        def _info(self, won=False, lost=False):
            return {"won": won}

    with pytest.raises(RuntimeError, match="admissible_commands"):
        Broken().reset(seed=0)


def test_bad_render_mode():
    with pytest.raises(ValueError, match="render_mode"):
        CorridorEnv(render_mode="rgb_array")


def test_textenv_is_abstract():
    with pytest.raises(TypeError):
        TextEnv()

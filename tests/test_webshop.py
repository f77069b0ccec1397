"""WebShop backend: env contract, expert, determinism, invalid actions, pages, search, catalogs."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym_budget  # noqa: F401  (registers the ids)
from agentgym_budget._optional import MissingBackendError
from agentgym_budget.envs.base import INVALID_ACTION_FEEDBACK
from agentgym_budget.envs.registration import family_of

pytestmark = pytest.mark.skipif(
    not family_of("WebShop-v0").installed,
    reason="WebShop extra not installed (pip install 'agentgym-budget[webshop]')",
)

SMALL = 300  # a small generated catalog for tests that build their own


@pytest.fixture(scope="module")
def env():
    env = gym.make("WebShop-v0")
    yield env
    env.close()


def run_plan(env, plan):
    reward, terminated, info = 0.0, False, {}
    for action in plan:
        _, reward, terminated, truncated, info = env.step(action)
        assert not truncated
        if terminated:
            break
    return reward, terminated, info


def test_check_env_passes(env):
    check_env(env.unwrapped, skip_render_check=True)


def test_default_limits(env):
    assert env.spec.max_episode_steps == 15
    budget_env = gym.make("WebShop-Budget-v0")
    _, info = budget_env.reset(seed=0)
    assert info["budget"] == 15


def test_first_page_is_upstreams_search_page(env):
    obs, info = env.reset(seed=3)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {info['task']} [SEP] Search"
    assert info["page"] == "search" and not info["won"] and not info["lost"]
    assert info["expert_action"] in info["admissible_commands"]
    assert all(c.startswith("search[") for c in info["admissible_commands"])


@pytest.mark.parametrize("seed", range(40))
def test_expert_wins_within_its_plan_and_the_step_limit(env, seed):
    _, info = env.reset(seed=seed)
    plan = info["expert_plan"]
    assert 3 <= len(plan) <= env.spec.max_episode_steps
    for action in plan[:-1]:
        assert action in info["admissible_commands"]
        _, reward, terminated, _, info = env.step(action)
        assert reward == 0.0 and not terminated
    _, reward, terminated, _, info = env.step(plan[-1])
    assert (reward, terminated, info["won"], info["lost"]) == (1.0, True, True, False)
    assert info["turn"] == len(plan)
    assert info["reward_info"]["r_type"] == 1.0


@pytest.mark.parametrize("seed", range(10))
def test_expert_recovers_from_any_page(env, seed):
    """Wander randomly (without buying), then follow the expert: it still wins."""
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        choices = [c for c in info["admissible_commands"] if c != "click[Buy Now]"]
        _, _, _, _, info = env.step(choices[int(rng.integers(len(choices)))])
    reward, terminated, info = run_plan(env, info["expert_plan"])
    assert (reward, terminated, info["won"]) == (1.0, True, True)


def test_random_episodes_do_not_crash_and_rewards_are_in_range(env):
    rng = np.random.default_rng(0)
    for episode in range(15):
        _, info = env.reset(seed=100 + episode)
        terminated = truncated = False
        while not (terminated or truncated):
            if rng.random() < 0.2:
                action = env.action_space.sample()
            else:
                action = info["admissible_commands"][int(rng.integers(len(info["admissible_commands"])))]
            _, reward, terminated, truncated, info = env.step(action)
            assert 0.0 <= reward <= 1.0
            if not terminated:
                assert reward == 0.0
        assert terminated or info["turn"] == env.spec.max_episode_steps


def test_same_seed_same_episode():
    def rollout(seed):
        env = gym.make("WebShop-v0")
        obs, info = env.reset(seed=seed)
        trace = [(obs, info["task_id"], tuple(info["admissible_commands"]))]
        rng = np.random.default_rng(1)
        for _ in range(8):
            action = info["admissible_commands"][int(rng.integers(len(info["admissible_commands"])))]
            obs, reward, terminated, _, info = env.step(action)
            trace.append((obs, reward, tuple(info["admissible_commands"])))
            if terminated:
                break
        return trace

    assert rollout(7) == rollout(7)
    assert rollout(7)[0] != rollout(8)[0]


@pytest.mark.parametrize(
    "action",
    ["", "   ", "click[]", "search[]", "click[nonexistent button]", "search", "click", "[", "]", "click[",
     "click[search]", "click[Buy Now]", "click[Next >]", "buy[B000000000]", "search[   ]", "héllo wörld ☃",
     "click[b0]" * 200],
)  # fmt: skip
def test_invalid_actions_change_nothing_and_never_raise(env, action):
    obs, _ = env.reset(seed=0)
    after, reward, terminated, truncated, info = env.step(action)
    assert after == f"{INVALID_ACTION_FEEDBACK}\n{obs}"
    assert (reward, terminated, truncated, info["action_valid"], info["page"]) == (0.0, False, False, False, "search")


def test_non_string_action_raises_type_error(env):
    env.reset(seed=0)
    with pytest.raises(TypeError):
        env.step(3)


def test_actions_are_case_insensitive_and_search_works_from_any_page(env):
    _, info = env.reset(seed=1)
    _, _, _, _, info = env.step(info["expert_plan"][0])
    asin = next(c for c in info["admissible_commands"] if c.startswith("click[B0"))[len("click["):-1]
    _, _, _, _, info = env.step(f"  CLICK[{asin.lower()}]  ")
    assert info["action_valid"] and info["page"] == "item"
    _, _, _, _, info = env.step("Click[BUY NOW]")  # the same button, any case
    assert info["page"] == "done"
    _, info = env.reset(seed=1)
    env.step(info["expert_plan"][0])
    env.step("click[Next >]")
    obs, _, _, _, info = env.step("search[red running shoes]")  # not listed, still accepted
    assert info["page"] == "results" and "Page 1 (Total results: " in obs


def test_navigation_between_pages(env):
    _, info = env.reset(seed=2)
    obs, *_, info = env.step(info["expert_plan"][0])
    assert obs.startswith("Instruction: [SEP] ") and " [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B" in obs
    assert "click[< Prev]" not in info["admissible_commands"]
    obs, *_, info = env.step("click[Next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    obs, *_, info = env.step("click[< Prev]")
    assert "Page 1 (Total results: 50)" in obs
    product = next(c for c in info["admissible_commands"] if c.startswith("click[B0"))
    obs, *_, info = env.step(product)
    assert info["page"] == "item" and obs.endswith("[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    asin = product[len("click["):-1]
    catalog_product = env.unwrapped.catalog.by_asin[asin]
    obs, *_, info = env.step("click[Features]")
    assert info["page"] == "item_sub" and obs.endswith(" [SEP] ".join(catalog_product["BulletPoints"]))
    assert info["admissible_commands"] == ["click[Back to Search]", "click[< Prev]"]
    obs, *_, info = env.step("click[< Prev]")
    assert info["page"] == "item"
    obs, *_, info = env.step("click[Description]")
    assert obs.endswith(catalog_product["Description"])
    obs, *_, info = env.step("click[Back to Search]")
    assert info["page"] == "search" and obs.startswith("WebShop [SEP] ")


def test_wrong_purchase_is_lost_with_partial_reward(env):
    _, info = env.reset(seed=4, options={"task": env.unwrapped.goal_indices[4]})
    goal = env.unwrapped.catalog.goals[int(info["task_id"])]
    env.step(f"search[{goal['query']}]")
    _, _, _, _, info = env.step("click[Next >]")
    other = next(c for c in info["admissible_commands"] if c.startswith("click[B0") and goal["asin"] not in c)
    env.step(other)
    _, reward, terminated, _, info = env.step("click[Buy Now]")
    assert terminated and 0.0 <= reward < 1.0 and info["lost"] and not info["won"]
    assert info["purchased"]["asin"] == other[len("click["):-1]
    obs, reward, terminated, _, info = env.step("click[Back to Search]")  # after the end
    assert (obs, reward, terminated) == (INVALID_ACTION_FEEDBACK, 0.0, True)


def test_task_option_and_splits():
    env = gym.make("WebShop-v0", split="test")
    indices = env.unwrapped.goal_indices
    assert (indices.start, indices.stop) == (0, 500)
    _, info = env.reset(options={"task": "7"})
    assert info["task_id"] == "7"
    with pytest.raises(ValueError, match="not in the 'test' split"):
        env.reset(options={"task": 2000})
    with pytest.raises(ValueError, match="goal indices"):
        env.reset(options={"task": "seven"})
    with pytest.raises(ValueError, match="reset options"):
        env.reset(options={"bogus": 1})
    with pytest.raises(ValueError, match="split must be"):
        gym.make("WebShop-v0", split="validation")
    train, dev = (gym.make("WebShop-v0", split=s).unwrapped.goal_indices for s in ("train", "dev"))
    assert (dev.start, dev.stop, train.start, train.stop) == (500, 1500, 1500, 3000)


def test_missing_extra_names_it(monkeypatch):
    from agentgym_budget.envs.webshop.env import load_shop

    monkeypatch.setitem(sys.modules, "bm25s", None)  # makes `import bm25s` fail
    with pytest.raises(MissingBackendError, match=r"agentgym-budget\[webshop\]"):
        load_shop(num_products=301)


# -- upstream data files ---------------------------------------------------------------
def _upstream_files(tmp_path):
    def product(asin, name, query, colors, pricing):
        return {
            "asin": asin, "name": name, "query": query, "category": "fashion",
            "product_category": "Clothing › Women › Dresses", "full_description": f"{name}. machine wash.",
            "small_description": ["soft fabric"], "pricing": pricing, "images": ["x.jpg"],
            "customization_options": {"Color": [{"value": c, "image": None} for c in colors]},
        }  # fmt: skip

    products = [
        product("B0DRESS001", "Floral Summer Dress", "women's dresses", ["Navy Blue", "Red"], "$25.99"),
        product("B0DRESS002", "Striped Maxi Dress", "women's dresses", ["Black", "Crème/Gold"], "$19.99 - $29.99"),
        product("B0SHOES001", "Trail Running Shoes", "running shoes", ["Grey"], "$59.00"),
        product("nan", "Broken", "x", [], ""),
    ]
    human = {"B0DRESS001": [{"instruction": "i want a floral summer dress in navy blue.",
                             "instruction_attributes": ["machine wash"], "instruction_options": ["navy blue"]}]}
    attributes = {"B0DRESS001": {"attributes": ["machine wash", "floral print"]}}
    paths = {}
    for name, data in (("items_shuffle.json", products), ("items_human_ins.json", human), ("items_ins_v2.json", attributes)):
        (tmp_path / name).write_text(json.dumps(data))
        paths[name] = str(tmp_path / name)
    return paths


def test_upstream_catalog_files_load_and_the_expert_wins(tmp_path):
    paths = _upstream_files(tmp_path)
    env = gym.make(
        "WebShop-v0", catalog_path=paths["items_shuffle.json"], goals_path=paths["items_human_ins.json"],
        attributes_path=paths["items_ins_v2.json"],
    )  # fmt: skip
    catalog = env.unwrapped.catalog
    assert len(catalog) == 3 and len(catalog.goals) == 1  # "nan" asin skipped, as upstream
    assert catalog.by_asin["B0DRESS001"]["options"] == {"color": ["navy blue", "red"]}
    assert catalog.by_asin["B0DRESS002"]["pricing"] == [19.99, 29.99]
    assert catalog.by_asin["B0SHOES001"]["Attributes"] == ["DUMMY_ATTR"]
    _, info = env.reset(seed=0)
    assert info["task"].startswith("i want a floral summer dress in navy blue")
    assert info["expert_plan"][-2:] == ["click[navy blue]", "click[Buy Now]"]
    reward, terminated, info = run_plan(env, info["expert_plan"])
    assert (reward, terminated, info["won"]) == (1.0, True, True)


def test_non_ascii_option_values_are_clickable_as_shown(tmp_path):
    paths = _upstream_files(tmp_path)
    env = gym.make("WebShop-v0", catalog_path=paths["items_shuffle.json"], goals_path=paths["items_human_ins.json"])
    assert env.unwrapped.catalog.by_asin["B0DRESS002"]["options"]["color"] == ["black", "crème | gold"]
    env.reset(seed=0)
    env.step("search[striped maxi dress]")
    obs, *_, info = env.step("click[B0DRESS002]")
    assert "[SEP] creme | gold [SEP]" in obs and "click[creme | gold]" in info["admissible_commands"]
    *_, info = env.step("click[creme | gold]")
    assert info["action_valid"] and env.unwrapped._session.options == {"color": "crème | gold"}


def test_upstream_catalog_errors_are_specific(tmp_path):
    paths = _upstream_files(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gym.make("WebShop-v0", catalog_path=str(tmp_path / "missing.json"), goals_path=paths["items_human_ins.json"])
    with pytest.raises(ValueError, match="needs goals_path"):
        gym.make("WebShop-v0", catalog_path=paths["items_shuffle.json"])


def test_catalog_path_from_environment_variable(tmp_path, monkeypatch):
    paths = _upstream_files(tmp_path)
    monkeypatch.setenv("AGENTGYM_WEBSHOP_CATALOG", paths["items_shuffle.json"])
    monkeypatch.setenv("AGENTGYM_WEBSHOP_GOALS", paths["items_human_ins.json"])
    assert len(gym.make("WebShop-v0").unwrapped.catalog) == 3

"""The adaptive budget: its grammar, its draws per task, its feedback through the trainer, checkpoints."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import agentgym_budget  # noqa: F401 - registers the envs
from agentgym_budget.train.rollout import _budget_schedule_state, _fresh_env
from agentgym_budget.train.sharding import set_budget_progress
from agentgym_budget.wrappers import TurnBudget
from agentgym_budget.wrappers.budget_spec import AdaptiveBudget, OutcomeSchedule, parse_budget_spec

torch.set_num_threads(1)


# -- grammar ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("adaptive:2..8", AdaptiveBudget(tuple(range(2, 9)))),
        ("adaptive:2,3,4,6", AdaptiveBudget((2, 3, 4, 6))),
        ("adaptive:6,2,4", AdaptiveBudget((2, 4, 6))),
        (" Adaptive : 2 .. 4 : explore = 0.25 , by = seed ", AdaptiveBudget((2, 3, 4), explore=0.25, by="seed")),
        ("adaptive:2..4:pool=no,memory=10,hopeless=0.2,mastered=0.8",
         AdaptiveBudget((2, 3, 4), pool=False, memory=10, hopeless=0.2, mastered=0.8)),
    ],
)
def test_adaptive_specs_parse(spec, expected):
    assert parse_budget_spec(spec) == expected


def test_adaptive_keyword_forms():
    assert parse_budget_spec("adaptive", budgets=(4, 2)) == AdaptiveBudget((2, 4))
    assert parse_budget_spec("adaptive", low=2, high=4) == AdaptiveBudget((2, 3, 4))
    assert isinstance(parse_budget_spec("adaptive:2..4"), OutcomeSchedule)
    assert not isinstance(parse_budget_spec("mix:2,4"), OutcomeSchedule)


@pytest.mark.parametrize(
    ("spec", "kwargs", "names"),
    [
        ("adaptive", {}, "give the adaptive budgets once"),
        ("adaptive:2..8", {"budgets": (2, 3)}, "give the adaptive budgets once"),
        ("adaptive", {"low": 2}, "both low= and high="),
        ("adaptive:2..8", {"weights": (1, 2)}, "does not use the option(s) ['weights']"),
        ("adaptive:2..x", {}, "bad part '2..x'"),
        ("adaptive:8..2", {}, "must go up"),
        ("adaptive:1..1000", {}, "at most 64"),
        ("adaptive:2,2", {}, "distinct"),
        ("adaptive:0..3", {}, "a budget must be an int in 1..1000000"),
        ("adaptive:2..8:foo=1", {}, "bad adaptive option 'foo=1'"),
        ("adaptive:2..8:explore", {}, "bad adaptive option 'explore'"),
        ("adaptive:2..8:explore=1.5", {}, "explore must be in 0..1"),
        ("adaptive:2..8:explore=nan", {}, "explore must be in 0..1"),
        ("adaptive:2..8:explore=x", {}, "bad value in adaptive option 'explore=x'"),
        ("adaptive:2..8:by=room", {}, "by must be 'task', 'seed' or 'all'"),
        ("adaptive:2..8:pool=maybe", {}, "bad value in adaptive option 'pool=maybe'"),
        ("adaptive:2..8:memory=0", {}, "memory must be an int >= 1"),
        ("adaptive:2..8:hopeless=0.9,mastered=0.5", {}, "must be below mastered"),
        ("adaptive:2..8:explore=0.1,explore=0.2", {}, "each at most once"),
    ],
)
def test_bad_adaptive_specs_are_one_line_errors_that_name_the_problem(spec, kwargs, names):
    with pytest.raises(ValueError) as excinfo:
        parse_budget_spec(spec, **kwargs)
    message = str(excinfo.value)
    assert "\n" not in message and names in message


def test_the_accepted_forms_name_the_adaptive_mode():
    with pytest.raises(ValueError, match=r"'adaptive:LOW\.\.HIGH'"):
        parse_budget_spec("adaptiv:2..8")


# -- draws ---------------------------------------------------------------------------------------
def _expert_episode(env, seed, plan_extra=0):
    """Play ``env`` from ``reset(seed)``: ``plan_extra`` wasted turns ("look"), then the expert plan."""
    obs, info = env.reset(seed=seed)
    key = info["budget_key"]
    turns, won, terminated, truncated = 0, False, False, False
    while not (terminated or truncated):
        action = "look" if turns < plan_extra else info["expert_plan"][0]
        obs, _, terminated, truncated, info = env.step(action)
        turns += 1
        won = won or bool(info.get("won"))
    return info["budget"], turns, won, terminated, key


def _train_like(env_count, episodes, spec="adaptive:2..8", plan_extra=0, seed=0):
    """``episodes`` episodes over ``env_count`` env copies: the table handed to each before its reset,
    the outcome recorded after (what the trainer does, one episode per update)."""
    schedule = parse_budget_spec(spec)
    envs = [TurnBudget(gym.make("KeyDoor-v0", split="train"), budget=spec) for _ in range(env_count)]
    outcomes, budgets, rng = {}, [], np.random.default_rng(seed)
    for i in range(episodes):
        env = envs[i % env_count]
        set_budget_progress([env], i, 0, outcomes)
        budget, turns, won, terminated, key = _expert_episode(env, int(rng.integers(2**31)), plan_extra)
        schedule.record(outcomes, key, budget, turns, won, terminated)
        budgets.append(budget)
    return budgets, outcomes


def test_draws_are_deterministic_for_a_seed_and_the_same_on_every_env_copy():
    a, table_a = _train_like(env_count=1, episodes=120, spec="adaptive:2..8:explore=0.3")
    b, table_b = _train_like(env_count=3, episodes=120, spec="adaptive:2..8:explore=0.3")
    assert a == b and table_a == table_b
    c, _ = _train_like(env_count=1, episodes=120, spec="adaptive:2..8:explore=0.3", seed=1)
    assert c != a


def test_converges_to_the_tight_budget_on_a_task_the_agent_always_wins_quickly():
    budgets, outcomes = _train_like(env_count=2, episodes=400)  # the expert: 2 turns, every KeyDoor task
    late = budgets[-200:]
    assert late.count(2) / len(late) > 0.8  # the tightest budget; the rest is exploration at the largest
    assert set(late) <= {2, 8}
    assert all(AdaptiveBudget(tuple(range(2, 9))).states(outcomes, key)[0] == "mastered" for key in outcomes)


def test_converges_to_the_budget_that_suffices_when_the_agent_needs_more_turns():
    budgets, outcomes = _train_like(env_count=1, episodes=800, spec="adaptive:2..8:explore=0", plan_extra=2)
    assert set(budgets[-100:]) == {4}  # 2 wasted turns + the 2-turn plan: 4 turns, always won
    states = {tuple(AdaptiveBudget(tuple(range(2, 9))).states(outcomes, key)) for key in outcomes}
    assert states == {("hopeless",) * 2 + ("mastered",) * 5} and len(outcomes) == 8  # every train task


def test_a_written_off_budget_comes_back_when_the_agent_improves():
    schedule, outcomes, rng = AdaptiveBudget((2, 4), explore=0.0), {}, np.random.default_rng(0)
    for _ in range(60):  # an agent that needs 4 turns: 2 is hopeless, 4 mastered
        budget = schedule.sample_task(rng, 0, "k", outcomes)
        schedule.record(outcomes, "k", budget, turns=min(budget, 4), won=budget >= 4, terminated=budget >= 4)
    assert schedule.states(outcomes, "k") == ["hopeless", "mastered"]
    for _ in range(30):  # now it wins in 2 turns at budget 4: pooled, that is a win at 2 too
        schedule.record(outcomes, "k", 4, turns=2, won=True, terminated=True)
    assert schedule.states(outcomes, "k")[0] != "hopeless" and schedule.sample_task(rng, 0, "k", outcomes) == 2


def test_pooling_counts_an_outcome_at_every_budget_it_decides():
    pooled, played = AdaptiveBudget((2, 4, 6)), AdaptiveBudget((2, 4, 6), pool=False)
    table = {}
    pooled.record(table, "k", budget=4, turns=3, won=True, terminated=True)  # won at turn 3
    pooled.record(table, "k", budget=4, turns=4, won=False, terminated=False)  # timed out at 4
    pooled.record(table, "k", budget=6, turns=1, won=False, terminated=True)  # lost at turn 1
    assert table == {"k": {2: [0.0, 3.0], 4: [1.0, 2.0], 6: [1.0, 1.0]}}
    only = {}
    played.record(only, "k", budget=4, turns=3, won=True, terminated=True)
    assert only == {"k": {4: [1.0, 0.0]}}


def test_task_keys():
    info = gym.make("KeyDoor-v0").reset(seed=0, options={"task": "red-blue"})[1]
    assert AdaptiveBudget((2,)).task_key(info, 7) == "red-blue"  # KeyDoor's task id: the door pair
    assert AdaptiveBudget((2,)).task_key({"task": "open the red door"}, 7) == "open the red door"
    assert AdaptiveBudget((2,)).task_key({}, 7) == "seed:7"  # an env that names no task: per reset seed
    assert AdaptiveBudget((2,), by="seed").task_key(info, 7) == "seed:7"
    assert AdaptiveBudget((2,), by="all").task_key(info, 7) == "*"
    env = TurnBudget(gym.make("KeyDoor-v0"), budget="adaptive:2..4")
    assert env.reset(seed=3, options={"task": "blue-red"})[1]["budget_key"] == "blue-red"
    assert "budget_key" not in TurnBudget(gym.make("KeyDoor-v0"), budget="mix:2,4").reset(seed=3)[1]


def test_a_retried_episode_draws_the_budget_the_first_attempt_drew():
    spec = "adaptive:2..8"
    outcomes = {"red-green": {2: [0.0, 40.0], 3: [0.0, 40.0]}}  # 2 and 3 hopeless for this task
    env = TurnBudget(gym.make("KeyDoor-v0", split="train"), budget=spec)
    set_budget_progress([env], 5, 0, outcomes)
    first = env.reset(seed=11, options={"task": "red-green"})[1]["budget"]
    fresh = _fresh_env(lambda: TurnBudget(gym.make("KeyDoor-v0", split="train"), budget=spec),
                       _budget_schedule_state(env))
    assert fresh.get_wrapper_attr("outcomes") is outcomes
    assert fresh.reset(seed=11, options={"task": "red-green"})[1]["budget"] == first == 4


# -- the trainer: outcomes fed back, logged, checkpointed ------------------------------------------
@pytest.fixture(scope="module")
def warm_model_path(tmp_path_factory):
    from tiny_models import save_warm_tiny_model

    return save_warm_tiny_model(tmp_path_factory.mktemp("warm_model"), steps=40)


def _config(output_dir, model, **overrides):
    from agentgym_budget.train import TrainConfig

    base = dict(env_id="KeyDoor-v0", budget="adaptive:2..4:explore=0.5,by=all,memory=6", model=model,
                output_dir=str(output_dir), seed=3, total_updates=3, tasks_per_update=2, group_size=2,
                max_new_tokens=12, learning_rate=1e-3, update_epochs=1, minibatches=1, micro_batch_size=8,
                kl_coef=0.0, eval_every=0, save_every=1, torch_threads=1, progress_bar=False, tensorboard=False)
    return TrainConfig(**{**base, **overrides})


def test_trainer_feeds_outcomes_logs_choices_and_resumes_the_table(warm_model_path, tmp_path):
    from agentgym_budget.train import Trainer

    straight = Trainer(_config(tmp_path / "a", warm_model_path))
    history = straight.train()
    for row in history:  # the choices, per update
        shares = [row[f"budget_share_T{t}"] for t in (2, 3, 4)]
        assert sum(shares) == pytest.approx(1.0)
        assert row["budget_mean"] == pytest.approx(sum(t * s for t, s in zip((2, 3, 4), shares)))
    cells = straight.budget_outcomes["*"]
    assert sum(map(sum, cells.values())) > 0  # fed every update's episodes

    interrupted = Trainer(_config(tmp_path / "b", warm_model_path, total_updates=2))
    interrupted.train()
    table_after_two = json.loads(json.dumps(interrupted.budget_outcomes))
    resumed = Trainer(_config(tmp_path / "b", warm_model_path, resume="auto"))
    assert json.loads(json.dumps(resumed.budget_outcomes)) == table_after_two  # saved in the checkpoint
    resumed.train()
    assert resumed.budget_outcomes == straight.budget_outcomes
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if not k.endswith("_seconds")} for r in rows] == \
        [{k: v for k, v in r.items() if not k.endswith("_seconds")} for r in history]


# -- the trainer's rollouts on Ray: the table still fed by every episode, the actors draw from it ------
@pytest.fixture
def ray_instance(monkeypatch):
    """A throwaway local Ray instance of one logical CPU (one rollout actor), its workers on this checkout."""
    ray = pytest.importorskip("ray")
    from pathlib import Path

    tests_dir = Path(__file__).resolve().parent
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    # actors are separate processes: they import this checkout's package (the instance inherits the environment)
    monkeypatch.setenv("PYTHONPATH", f"{tests_dir.parent}:{tests_dir}")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 2**20)
    yield ray
    ray.shutdown()


@pytest.mark.slow  # two tiny-model trainers (3 updates each) and torch in one actor: ~1-2 min on 2 busy cores
def test_trainer_with_ray_rollouts_feeds_every_episode_and_draws_from_the_table(warm_model_path, tmp_path,
                                                                                 ray_instance):
    from agentgym_budget.distributed import RayRolloutPool
    from agentgym_budget.train import Trainer

    # pool=no: each episode is counted once, at its own budget, so the table's total is the episode count
    spec = "adaptive:2..4:explore=0.5,by=all,pool=no,memory=1000,hopeless=0.6"
    runs = {}
    for backend in ("local", "ray"):
        config = _config(tmp_path / backend, warm_model_path, budget=spec, save_every=0, rollout_shards=2,
                         rollout_backend=backend, rollout_actors=1)
        trainer = Trainer(config, RayRolloutPool.for_config if backend == "ray" else None)
        history = [{k: v for k, v in row.items() if not k.endswith("_seconds")} for row in trainer.train()]
        runs[backend] = trainer, history
    (local, local_history), (remote, remote_history) = runs["local"], runs["ray"]
    table = remote.budget_outcomes
    assert sum(map(sum, table["*"].values())) == remote.episodes_done == 12  # 3 updates x 2 tasks x 2
    assert table == local.budget_outcomes
    # the budgets drawn on the actor each update (budget_share_T*) are the ones drawn locally from the same table
    assert remote_history == local_history
    # ... and the actor did draw from the table: with no outcomes a draw is 2 (the tightest) or 4 (explore), never 3;
    # 3 comes only once the fed table has written 2 off (hopeless=0.6: a few losses at 2 suffice)
    assert remote_history[0]["budget_share_T3"] == 0 < max(row["budget_share_T3"] for row in remote_history[1:])

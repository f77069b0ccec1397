"""The fault policy for envs that raise mid-episode (train/rollout.py): retried once in a fresh env,
then that episode alone is dropped (zero advantage, outside its group's baseline); the update goes
on and counts the faults."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import agentgym_budget  # noqa: F401
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
from agentgym_budget.train import TrainConfig, Trainer
from agentgym_budget.train import rollout
from agentgym_budget.train import trainer as trainer_module
from agentgym_budget.train.grpo import group_advantages
from agentgym_budget.train.rollout import collect_episodes
from agentgym_budget.train.sharding import LocalRolloutPool
from scripted_envs import FaultyEnv


@pytest.fixture
def faults(monkeypatch):
    """Every training env (the rollout pool's and the retries') under ``FaultyEnv``."""
    original = rollout.make_train_env
    monkeypatch.setattr(rollout, "make_train_env", lambda config: FaultyEnv(original(config)))
    return FaultyEnv.isolated(monkeypatch)


CONFIG = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4, torch_threads=1)


def _collect(seeds: list[int]) -> list:
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    envs = [rollout.make_train_env(CONFIG) for _ in seeds]
    return collect_episodes(model, tokenizer, envs, seeds=seeds, config=CONFIG, sampling_seed=5)


def _actions(episodes) -> list:
    return [[(t.prompt_ids, t.action_ids) for t in e.turns] for e in episodes]


def test_a_one_off_fault_is_played_again_in_a_fresh_env_as_if_it_never_happened(faults):
    clean = _collect([7, 7, 9, 9])
    faults.seeds, faults.turn, faults.budget = {9}, 2, 1  # the first env of seed 9 raises once, at its 2nd step
    faults.made = 0
    with pytest.warns(RuntimeWarning, match=r"seed 9 raised at step 2: ConnectionError: backend lost"):
        retried = _collect([7, 7, 9, 9])
    assert [e.env_failures for e in retried] == [0, 0, 1, 0]
    assert not any(e.failed for e in retried)
    assert faults.made == 4 + 1  # one fresh env for the retry
    # same reset seed and sampling seed: the retried episode is the one the fault interrupted
    assert _actions(retried) == _actions(clean)
    assert [(e.won, e.budget, e.task) for e in retried] == [(e.won, e.budget, e.task) for e in clean]


def test_a_lasting_fault_fails_its_episodes_and_spares_the_others(faults):
    faults.seeds, faults.turn = {9}, 0  # every reset with seed 9 raises
    with pytest.warns(RuntimeWarning, match="raised at reset"):
        episodes = _collect([7, 7, 9, 9])
    assert [(e.failed, e.env_failures, len(e.turns)) for e in episodes[2:]] == [(True, 2, 0), (True, 2, 0)]
    assert [(e.failed, e.env_failures, len(e.turns)) for e in episodes[:2]] == [(False, 0, 3), (False, 0, 3)]


def _fault_config(tmp_path, group_size: int) -> TrainConfig:
    return TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", model="tiny", format_warmup_steps=20,
                       output_dir=str(tmp_path), seed=3, total_updates=2, tasks_per_update=2, group_size=group_size,
                       max_new_tokens=8, update_epochs=1, minibatches=1, micro_batch_size=8, kl_coef=0.05,
                       eval_every=0, save_every=0, torch_threads=1, progress_bar=False, tensorboard=False)


def _first_task(config: TrainConfig) -> int:
    """The task seed of update 1's first group (train_step's draw)."""
    return int(np.random.default_rng([config.seed, 0]).integers(0, 2**31 - 1, size=config.tasks_per_update)[0])


def test_advantages_mask_a_failed_episode_and_keep_its_groups_survivors():
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])  # 3 groups of 3
    failed = [False, False, True, True, False, False, True, True, False]
    for estimator in ("grpo", "rloo"):
        masked = group_advantages(returns, 3, estimator, failed=failed)
        survivors = group_advantages(torch.tensor([1.0, 0.0]), 2, estimator)  # group 1 without its failed member
        torch.testing.assert_close(masked[:3], torch.cat([survivors, torch.zeros(1)]))
        assert masked[3:].tolist() == [0.0] * 6  # a failed episode and groups with < 2 survivors: no signal
    clean = [False] * 9  # without a failure: the same bits as without the flags
    assert torch.equal(group_advantages(returns, 3, failed=clean), group_advantages(returns, 3))


def test_a_failing_episode_costs_that_episode_not_its_group_nor_the_update(faults, tmp_path, monkeypatch):
    config = _fault_config(tmp_path, group_size=3)
    credited = []  # the advantages the trainer hands to turn_samples, per update
    real_turn_samples = trainer_module.turn_samples
    monkeypatch.setattr(trainer_module, "turn_samples", lambda episodes, advantages, *args: (
        credited.append((episodes, advantages)), real_turn_samples(episodes, advantages, *args))[1])
    # the env that plays update 1's first episode raises at step 1, and so does its retry's (the 7th env made)
    faults.seeds, faults.turn, faults.instances = {_first_task(config)}, 1, {0, 6}
    with pytest.warns(RuntimeWarning, match=f"seed {_first_task(config)} raised at step 1"):
        history = Trainer(config).train()
    assert [(h["env_failures"], h["dropped_episodes"]) for h in history] == [(2, 1), (0, 0)]
    assert [h["episodes"] for h in history] == [5, 11]  # the failed episode is not counted as played
    episodes, advantages = credited[0]
    assert [e.failed for e in episodes] == [True] + [False] * 5 and not episodes[0].turns  # no loss tokens
    # the failed flags reach the advantages (their numbers: the test above; the tiny model wins nothing here)
    returns = torch.tensor([float(e.won) for e in episodes])
    torch.testing.assert_close(advantages, group_advantages(returns, 3, failed=[e.failed for e in episodes]))
    assert all(math.isfinite(h["loss"]) for h in history)


def test_a_group_that_loses_every_episode_gives_no_signal_and_the_update_goes_on(faults, tmp_path):
    config = _fault_config(tmp_path, group_size=2)
    faults.seeds, faults.turn = {_first_task(config)}, 2  # both episodes of update 1's first group, on every attempt
    with pytest.warns(RuntimeWarning, match=f"seed {_first_task(config)} raised at step 2"):
        history = Trainer(config).train()
    assert [h["update"] for h in history] == [1, 2]
    assert [(h["env_failures"], h["dropped_episodes"]) for h in history] == [(4, 2), (0, 0)]  # 2 episodes x 2 tries
    assert [h["episodes"] for h in history] == [2, 6]  # the failed episodes are not counted as played
    assert history[0]["zero_advantage_groups"] >= 0.5  # the emptied group gives no policy-gradient signal
    assert all(math.isfinite(h["loss"]) for h in history)


def test_the_retry_draws_the_budget_the_first_attempt_drew(faults):
    # a curriculum at its end: a fresh env (progress 0) would draw 4 turns unless the progress is carried over
    config = TrainConfig(env_id="KeyDoor-v0", budget="curriculum:4->2@10", max_new_tokens=4, torch_threads=1)
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    envs = [rollout.make_train_env(config) for _ in range(2)]
    for env in envs:
        env.get_wrapper_attr("set_progress")(10)
    faults.seeds, faults.turn, faults.budget = {9}, 1, 1
    with pytest.warns(RuntimeWarning, match="seed 9 raised at step 1"):
        episodes = collect_episodes(model, tokenizer, envs, seeds=[9, 9], config=config, sampling_seed=0)
    assert [(e.env_failures, e.budget, len(e.turns)) for e in episodes] == [(1, 2, 2), (0, 2, 2)]


def test_the_env_that_raised_leaves_the_pool(faults):
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    made = [rollout.make_train_env(CONFIG) for _ in range(4)]
    pool = list(made)
    faults.seeds, faults.turn, faults.budget = {9}, 2, 1  # pool[2] raises once; the retry's env plays the episode
    with pytest.warns(RuntimeWarning, match="seed 9 raised at step 2"):
        collect_episodes(model, tokenizer, pool, seeds=[7, 7, 9, 9], config=CONFIG, sampling_seed=5)
    assert [a is b for a, b in zip(pool, made)] == [True, True, False, True]
    assert (faults.made, faults.closed) == (5, 1)  # the raising env closed; the retry's env kept in its place
    faults.budget = None  # now seed 9 always raises: the retry's env is not kept either, another fresh one is
    retry_env = pool[2]
    with pytest.warns(RuntimeWarning, match="seed 9 raised at step 2"):
        episodes = collect_episodes(model, tokenizer, pool, seeds=[7, 7, 9, 7], config=CONFIG, sampling_seed=5)
    assert episodes[2].failed and pool[2] is not retry_env
    assert (faults.made, faults.closed) == (7, 3)


def test_a_pool_plays_later_shards_on_the_replacement(faults):
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4, torch_threads=1, group_size=2,
                         tasks_per_update=2)
    pool = LocalRolloutPool(config, model, tokenizer)
    first = pool.envs[0]
    faults.seeds, faults.turn, faults.budget = {9}, 1, 1
    with pytest.warns(RuntimeWarning, match="seed 9 raised at step 1"):
        episodes = pool.collect(model, seeds=[9, 9, 7, 7], sampling_seed=0, shards=2)  # shard 2 reuses envs[:2]
    # shard 2 played on the replacement: the closed env that raised would refuse to play
    assert [e.env_failures for e in episodes] == [1, 0, 0, 0] and not any(e.failed for e in episodes)
    assert pool.envs[0] is not first
    pool.close()

"""RayExecutor: same records as the local executors, faults lose nothing and count nothing twice.

A local Ray instance is started once for this module (more logical CPUs than the machine
has, so that runs with more actors than cores are possible) and shut down at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import numpy as np

from agentgym_budget._optional import MissingBackendError
from agentgym_budget.eval import evaluate
from agentgym_budget.eval.episode_log import EvaluationInterrupted, read_episodes
from agentgym_budget.episodes.records import EpisodeJob
from agentgym_budget.episodes.runner import RolloutSpec, SerialExecutor

ray = pytest.importorskip("ray")

from agentgym_budget.distributed import ActorPoolExhaustedError, RayExecutor  # noqa: E402

LOGICAL_CPUS = 6
SPEC = RolloutSpec("KeyDoor-Budget-v0", "noisy-expert", seed=7, max_budget=6, policy_kwargs={"p": 0.4})
JOBS = [EpisodeJob(task, attempt, 6) for task in range(24) for attempt in range(5)]


@pytest.fixture(scope="module")
def ray_instance():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local instance
    tests_dir = Path(__file__).resolve().parent
    # Actors are separate processes: let them import this package and the tests' helper policies.
    # (Set in the environment the local instance inherits rather than as a runtime_env, so that
    # actors can use Ray's prestarted workers.)
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(tests_dir.parent), str(tests_dir), old_path or ""])
    ray.init(num_cpus=LOGICAL_CPUS, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 2**20)
    yield ray
    ray.shutdown()
    if old_path is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = old_path


@pytest.fixture(scope="module")
def reference():
    return SerialExecutor().run(SPEC, JOBS)


@pytest.mark.parametrize(("actors", "chunk_size"), [(1, None), (2, 1), (LOGICAL_CPUS, 7)])
def test_same_records_as_local_for_any_actor_count(ray_instance, reference, actors, chunk_size):
    # LOGICAL_CPUS actors are more actors than this machine's cores: chunks finish in any order.
    seen = []
    with RayExecutor(actors=actors, chunk_size=chunk_size) as executor:
        records = executor.run(SPEC, JOBS, on_record=seen.append)
        assert len(executor.actors) == actors
        again = executor.run(SPEC, list(reversed(JOBS)))  # actors and envs are reused across runs
    assert records == reference
    assert again == list(reversed(reference))
    assert sorted(seen, key=lambda r: (r.task, r.attempt)) == reference  # every job reported exactly once


def test_killed_actor_loses_nothing_and_counts_nothing_twice(ray_instance, reference):
    seen = []
    with RayExecutor(actors=3, chunk_size=4) as executor:
        executor.start()
        victim = executor.actors[0]

        def kill_once(record):
            seen.append(record)
            if len(seen) == 1:
                ray.kill(victim)

        with pytest.warns(RuntimeWarning, match="actor died"):
            records = executor.run(SPEC, JOBS, on_record=kill_once)
        assert executor.actor_failures >= 1
        assert victim not in executor.actors and len(executor.actors) == 3  # replaced
    assert records == reference
    assert len(seen) == len(JOBS)
    assert {(r.task, r.attempt, r.budget) for r in seen} == {(j.task, j.attempt, j.budget) for j in JOBS}


EVAL_ARGS = dict(ks=(1, 2, 4), ts=(2, 4, 6), tasks=16, attempts=4, seed=5, policy_kwargs={"p": 0.4}, bootstrap=50)


def assert_same_result(a, b) -> None:
    np.testing.assert_array_equal(a.successes, b.successes)
    np.testing.assert_array_equal(a.grid.mean, b.grid.mean)
    np.testing.assert_array_equal(a.grid.ci_low, b.grid.ci_low)
    assert a.metrics == b.metrics and a.mode == b.mode


@pytest.mark.parametrize("mode", ["shortcut", "per_t"])
def test_evaluate_on_ray_resumes_a_local_run_and_equals_it(ray_instance, tmp_path, mode):
    local = evaluate("KeyDoor-Budget-v0", "noisy-expert", workers=1, mode=mode, **EVAL_ARGS)
    seen = []

    def stop(record):
        seen.append(record)
        if len(seen) == 20:
            raise KeyboardInterrupt

    with pytest.raises(EvaluationInterrupted, match="--resume"):
        evaluate("KeyDoor-Budget-v0", "noisy-expert", mode=mode, out=tmp_path, on_record=stop, **EVAL_ARGS)
    with RayExecutor(actors=3) as executor:
        on_ray = evaluate("KeyDoor-Budget-v0", "noisy-expert", mode=mode, executor=executor, workers=3, out=tmp_path,
                          resume=True, **EVAL_ARGS)
    assert_same_result(on_ray, local)
    assert on_ray.config["executor"] == "RayExecutor" and on_ray.timing["resumed_episodes"] == 20
    assert len(read_episodes(tmp_path)) == on_ray.timing["episodes"]  # no episode twice in the log


def test_evaluate_with_a_killed_actor_logs_every_episode_once(ray_instance, tmp_path):
    local = evaluate("KeyDoor-Budget-v0", "noisy-expert", **EVAL_ARGS)
    with RayExecutor(actors=2, chunk_size=3) as executor:
        executor.start()
        victim = executor.actors[1]
        seen = []

        def kill_once(record):
            seen.append(record)
            if len(seen) == 2:
                ray.kill(victim)

        with pytest.warns(RuntimeWarning, match="actor died"):
            result = evaluate("KeyDoor-Budget-v0", "noisy-expert", executor=executor, out=tmp_path,
                              on_record=kill_once, **EVAL_ARGS)
        assert executor.actor_failures >= 1
    assert_same_result(result, local)
    assert len(read_episodes(tmp_path)) == len(seen) == result.timing["episodes"]  # read_episodes rejects repeats


def test_chunk_that_keeps_killing_actors_gives_a_clear_error(ray_instance):
    from ray_helpers import ExitOnTask

    spec = RolloutSpec("KeyDoor-Budget-v0", ExitOnTask(seed=SPEC.seed, task=3), seed=SPEC.seed, max_budget=6)
    with RayExecutor(actors=1, chunk_size=5, max_chunk_failures=2) as executor:
        with pytest.warns(RuntimeWarning), pytest.raises(ActorPoolExhaustedError, match="lost its actor 2 times"):
            executor.run(spec, JOBS)


def test_error_in_policy_is_raised_not_retried(ray_instance):
    from ray_helpers import RaiseOnTask

    spec = RolloutSpec("KeyDoor-Budget-v0", RaiseOnTask(seed=SPEC.seed, task=2), seed=SPEC.seed, max_budget=6)
    with RayExecutor(actors=1) as executor:
        with pytest.raises(ValueError, match="policy bug on purpose"):
            executor.run(spec, JOBS)
        assert executor.actor_failures == 0


def test_more_actors_than_cluster_cpus_is_a_clear_error(ray_instance):
    with pytest.raises(ValueError, match="CPUs but the Ray cluster has"):
        RayExecutor(actors=LOGICAL_CPUS + 1).start()


def test_duplicate_jobs_rejected(ray_instance):
    with pytest.raises(ValueError, match="duplicates"):
        RayExecutor(actors=1).run(SPEC, JOBS[:2] * 2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="actors"):
        RayExecutor(actors=0)
    with pytest.raises(ValueError, match="chunk_size"):
        RayExecutor(actors=1, chunk_size=0)


def test_missing_ray_names_the_extra(monkeypatch):
    from agentgym_budget.distributed.driver import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # makes ``import ray`` fail
    with pytest.raises(MissingBackendError, match=r"pip install 'agentgym-budget\[ray\]'"):
        import_ray()


def test_package_import_does_not_import_ray():
    import subprocess

    code = "import sys, agentgym_budget, agentgym_budget.distributed, agentgym_budget.episodes.process_pool; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


# -- the trainer's group rollouts ---------------------------------------------------------------


def test_shards_are_whole_groups_with_their_own_sampling_seeds():
    from agentgym_budget.train.sharding import shard_seeds

    seeds = [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert shard_seeds(seeds, 2, sampling_seed=7, shards=1) == [(seeds, 7)]
    shards = shard_seeds(seeds, 2, sampling_seed=7, shards=3)
    assert [s for s, _ in shards] == [[1, 1, 2, 2], [3, 3, 4, 4], [5, 5]]
    assert len({seed for _, seed in shards}) == 3 and shards == shard_seeds(seeds, 2, 7, 3)
    assert shards != shard_seeds(seeds, 2, 8, 3)
    with pytest.raises(ValueError, match="groups of 3"):
        shard_seeds(seeds, 3, 7, 2)


@pytest.mark.slow  # builds the tiny model and starts torch in each actor: ~1-2 min on 2 busy cores
def test_trainer_rollouts_on_ray_give_the_local_learner_batch(ray_instance):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_budget.distributed import RayRolloutPool
    from agentgym_budget.train import TrainConfig, make_train_env, tiny_model_and_tokenizer
    from agentgym_budget.train.sharding import collect_sharded
    from agentgym_budget.train.grpo import group_advantages, turn_samples

    config = TrainConfig(env_id="KeyDoor-v0", budget="mix:2,3,4", tasks_per_update=4, group_size=2, max_new_tokens=4)
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    seeds = [11, 11, 12, 12, 13, 13, 14, 14]
    envs = [make_train_env(config) for _ in seeds]

    def learner_batch(episodes):
        returns = torch.tensor([float(e.won) for e in episodes])  # as Trainer._update computes them
        advantages = group_advantages(returns, config.group_size, config.advantage, config.scale_by_std)
        return turn_samples(episodes, advantages, config.process_reward_coef, config.process_gamma)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: one thread is much faster on a busy machine (actors copy it)
    with RayRolloutPool(config, model, tokenizer, actors=2) as pool:
        for update in range(2):  # new weights each update, shipped once
            local = collect_sharded(model, tokenizer, envs, seeds, config, sampling_seed=update, shards=3)
            remote = pool.collect(model, seeds, sampling_seed=update, shards=3)
            assert remote == local
            assert learner_batch(remote) == learner_batch(local)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.mul_(1.5)
        assert len({e.turns[0].action for e in local}) > 1  # the samples differ: the check has teeth
        ray.kill(pool.actors[0])
        with pytest.warns(RuntimeWarning, match="rollout actor died"):
            assert pool.collect(model, seeds, sampling_seed=9, shards=4) == collect_sharded(
                model, tokenizer, envs, seeds, config, sampling_seed=9, shards=4)
        assert pool.actor_failures == 1
    torch.set_num_threads(threads)


@pytest.mark.slow  # two tiny-model trainers and torch in each actor: ~1-2 min on 2 busy cores
def test_trainer_with_ray_rollouts_learns_exactly_as_local(ray_instance, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_budget.distributed import RayRolloutPool
    from agentgym_budget.train import TrainConfig, Trainer

    def run(backend):
        config = TrainConfig(env_id="KeyDoor-v0", budget="mix:2,3", tasks_per_update=2, group_size=2, total_updates=2,
                             max_new_tokens=4, learning_rate=1e-3, entropy_coef=0.01, eval_every=0, save_every=0,
                             tensorboard=False, progress_bar=False, torch_threads=1, rollout_shards=2,
                             rollout_backend=backend, output_dir=str(tmp_path / backend))
        trainer = Trainer(config, RayRolloutPool.for_config if backend == "ray" else None)
        history = [{k: v for k, v in m.items() if not k.endswith("_seconds")} for m in trainer.train()]
        return history, trainer.model.state_dict()

    local_history, local_weights = run("local")
    ray_history, ray_weights = run("ray")
    assert ray_history == local_history
    assert any(m["grad_norm"] > 0 for m in local_history)  # the weights did move: the comparison has teeth
    assert local_weights.keys() == ray_weights.keys()
    assert all(torch.equal(local_weights[name], ray_weights[name]) for name in local_weights)


@pytest.mark.slow  # the tiny model and torch in an actor: ~1 min on 2 busy cores
def test_a_rollout_actor_plays_on_with_the_env_that_replaced_one_that_raised(ray_instance, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ray_helpers import FAULTY_KEY_DOOR, FaultyKeyDoorConfig
    from scripted_envs import FaultyEnv
    from agentgym_budget.distributed import RayRolloutPool
    from agentgym_budget.train import make_train_env, tiny_model_and_tokenizer
    from agentgym_budget.train.sharding import collect_sharded

    FaultyEnv.isolated(monkeypatch)  # this process's first env sets the faults, as the actor's does
    # Seed 9's first env raises once, at its 1st step; the retry's fresh env plays the episode and takes its place.
    config = FaultyKeyDoorConfig(env_id=FAULTY_KEY_DOOR, budget="fixed:3", tasks_per_update=2, group_size=2,
                                 max_new_tokens=4, torch_threads=1,
                                 env_kwargs={"fault_seeds": (9,), "fault_turn": 1, "fault_budget": 1})
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    seeds = [9, 9, 7, 7]
    envs = [make_train_env(config) for _ in seeds]
    with RayRolloutPool(config, model, tokenizer, actors=1) as pool:
        # One actor plays both shards on the same two envs: the second shard plays on the replacement (the
        # closed env that raised would refuse to play: one more env failure).  Then a second update on them.
        for update, failures in enumerate(([1, 0, 0, 0], [0, 0, 0, 0])):
            remote = pool.collect(model, seeds, sampling_seed=update, shards=2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the local fault's warning
                local = collect_sharded(model, tokenizer, envs, seeds, config, sampling_seed=update, shards=2)
            assert [e.env_failures for e in remote] == failures
            assert not any(e.failed for e in remote)
            assert remote == local
        assert pool.actor_failures == 0  # the env's fault did not cost the actor


_LISTENERS_SCRIPT = """
import os, subprocess, psutil
from agentgym_budget.distributed import RayExecutor
from agentgym_budget.episodes.records import EpisodeJob
from agentgym_budget.episodes.runner import RolloutSpec
with RayExecutor(actors=1, init_kwargs={"num_cpus": 1, "log_to_driver": False}) as executor:
    executor.run(RolloutSpec("KeyDoor-Budget-v0", "expert", seed=0, max_budget=4), [EpisodeJob(0, 0, 4)])
    pids = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    for line in lines:
        if any(f"pid={pid}," in line for pid in pids):
            print(line.split()[3], line.split("users:")[-1])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("ss"), reason="needs Linux and ss")
def test_local_ray_instance_listens_on_loopback_only(tmp_path):
    # In a child: this module's own instance is started by the fixture, not by the executor.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", _LISTENERS_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    listeners = done.stdout.splitlines()
    assert any("gcs_server" in line for line in listeners) and any("raylet" in line for line in listeners)
    exposed = [line for line in listeners if line.split()[0].rsplit(":", 1)[0] not in
               ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")]
    assert not exposed, exposed


def test_a_served_model_error_under_ray_is_the_in_process_one_line(ray_instance):
    """A server that refuses the key: the same ServedModelError in-process and from a Ray actor."""
    pytest.importorskip("openai")
    from test_served_trust import Hostile, _serve

    from agentgym_budget.policies.served import ServedModelError

    server = _serve(Hostile())
    hostile = next(server)
    try:
        hostile.mode = "401"
        spec = RolloutSpec("KeyDoor-Budget-v0", "openai", seed=SPEC.seed, max_budget=2,
                           policy_kwargs={"model": "m", "base_url": hostile.url, "max_retries": 0, "timeout": 5.0})
        with pytest.raises(ServedModelError) as local:
            SerialExecutor().run(spec, JOBS[:1])
        with RayExecutor(actors=1) as executor:
            with pytest.raises(ServedModelError) as remote:
                executor.run(spec, JOBS[:1])
        assert str(remote.value) == str(local.value) and "\n" not in str(remote.value)
    finally:
        server.close()

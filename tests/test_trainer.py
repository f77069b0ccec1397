"""The reference trainer: credit, batching, prompting, and the whole loop end to end on CPU."""

import json
import math

import numpy as np
import pytest
import torch

from agentgym_budget.train import TrainConfig, Trainer
from agentgym_budget.train.grpo import TurnSample, collate, group_advantages
from agentgym_budget.policies.tiny_model import tiny_model_and_tokenizer
from agentgym_budget.train.trainer import _numpy_rng_state, _set_numpy_rng_state, load_trainer_state
from tiny_models import save_warm_tiny_model

torch.set_num_threads(1)


# -- credit -----------------------------------------------------------------------------------
def test_grpo_advantages_are_normalised_within_each_group():
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(returns, group_size=4)
    first = torch.tensor([1.0, 0.0, 0.0, 0.0])
    expected = (first - first.mean()) / (first.std() + 1e-6)
    torch.testing.assert_close(adv[:4], expected)
    assert adv[4:].tolist() == [0.0] * 4  # all-equal group: no signal
    torch.testing.assert_close(group_advantages(returns, 4, scale_by_std=False)[:4], first - first.mean())


def test_rloo_advantage_is_return_minus_mean_of_the_others():
    returns = torch.tensor([3.0, 1.0, 2.0])
    adv = group_advantages(returns, group_size=3, estimator="rloo")
    torch.testing.assert_close(adv, torch.tensor([3 - 1.5, 1 - 2.5, 2 - 2.0]))


def test_group_advantages_reject_a_ragged_batch():
    with pytest.raises(ValueError, match="groups"):
        group_advantages(torch.zeros(5), group_size=2)


# -- batching -----------------------------------------------------------------------------------
def test_collate_puts_only_action_tokens_in_the_loss():
    samples = [TurnSample([5, 6, 7, 8, 9], prompt_length=3, advantage=0.5),
               TurnSample([1, 2, 3], prompt_length=2, advantage=-1.0)]
    batch = collate(samples, pad_id=0, aggregation="token-mean")
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    # position p predicts token p+1: action tokens 8, 9 (row 0) and 3 (row 1)
    assert batch["rows"].tolist() == [0, 0, 1] and batch["positions"].tolist() == [2, 3, 1]
    assert batch["targets"].tolist() == [8, 9, 3]
    assert batch["advantages"].tolist() == [0.5, 0.5, -1.0]
    assert batch["weights"].tolist() == [1.0, 1.0, 1.0]
    assert collate(samples, 0, "turn-mean")["weights"].tolist() == [0.5, 0.5, 1.0]


# -- the whole loop -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def warm_model_path(tmp_path_factory):
    """A tiny model after a short format warm-up (random admissible commands), saved like a HF model."""
    return save_warm_tiny_model(tmp_path_factory.mktemp("warm_model"), steps=80)


def _config(output_dir, model, **overrides):
    base = dict(env_id="KeyDoor-v0", budget="mix:3,4", model=model, output_dir=str(output_dir), seed=3,
                total_updates=3, tasks_per_update=2, group_size=4, max_new_tokens=12, learning_rate=1e-3,
                update_epochs=2, minibatches=1, micro_batch_size=8, kl_coef=0.05,
                process_reward="expert_progress", process_reward_coef=0.5,
                eval_every=0, save_every=1, torch_threads=1, progress_bar=False, tensorboard=False)
    return TrainConfig(**{**base, **overrides})


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_three_updates_end_to_end_then_resume_reproduces_the_next_update(warm_model_path, tmp_path):
    straight = Trainer(_config(tmp_path / "a", warm_model_path))
    initial = {k: v.clone() for k, v in straight.model.state_dict().items()}
    history = straight.train()

    assert [h["update"] for h in history] == [1, 2, 3]
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["grad_norm"]) for h in history)
    # the policy-gradient term did act: a group with an outcome spread, or a process credit (the config has one)
    assert any(h["zero_advantage_groups"] < 1 or h["pg_loss"] != 0 for h in history)
    assert sum(h["optimizer_steps"] for h in history) > 0
    changed = [k for k, v in straight.model.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed, "no parameter changed"
    assert (tmp_path / "a" / "checkpoints" / "update_000003" / "trainer_state.pt").is_file()

    interrupted = Trainer(_config(tmp_path / "b", warm_model_path, total_updates=2))
    interrupted.train()
    resumed = Trainer(_config(tmp_path / "b", warm_model_path, resume="auto"))
    assert resumed.update == 2
    resumed.train()

    for key, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value, rtol=0, atol=0)
    a, b = _read_jsonl(tmp_path / "a" / "metrics.jsonl"), _read_jsonl(tmp_path / "b" / "metrics.jsonl")
    strip = [{k: v for k, v in row.items() if not k.endswith("_seconds")} for row in a], \
        [{k: v for k, v in row.items() if not k.endswith("_seconds")} for row in b]
    assert strip[0] == strip[1]  # same seed: same episodes, losses and updates, resumed or not


def test_curriculum_budget_follows_the_global_episode_count(warm_model_path, tmp_path):
    config = _config(tmp_path, warm_model_path, budget="curriculum:4->2@16", total_updates=2, tasks_per_update=2,
                     update_epochs=1, kl_coef=0.0, process_reward=None, save_every=0)
    history = Trainer(config).train()  # 8 episodes per update: progress 0 then 8
    assert [h["budget_mean"] for h in history] == [4.0, 3.0]


def test_periodic_evaluation_goes_through_the_evaluator(warm_model_path, tmp_path):
    config = _config(tmp_path, warm_model_path, total_updates=1, tasks_per_update=2, group_size=2, eval_every=1,
                     eval_tasks=3, eval_attempts=2, eval_ks=(1, 2), eval_ts=(2, 4), save_every=0, kl_coef=0.0)
    Trainer(config).train()
    from agentgym_budget.eval import PassKTResult

    result = PassKTResult.load(tmp_path / "eval" / "update_000001" / "passkt.json")
    assert result.ks == (1, 2) and result.ts == (2, 4) and result.n_tasks == 3
    rows = _read_jsonl(tmp_path / "eval.jsonl")
    assert [row["update"] for row in rows] == [0, 1]  # before the first update, and at the end
    assert "eval/pass@2,T=4" in rows[0]


def test_household_env_loop_runs_and_is_deterministic_for_a_seed(tmp_path):
    """ALFWorld (embedded fast engine) with an un-warmed tiny model: the loop runs and repeats exactly."""
    def run(folder):
        config = TrainConfig(env_id="ALFWorld-v0", budget="fixed:2", model="tiny", format_warmup_steps=0,
                             output_dir=str(folder), seed=5,
                             total_updates=1, tasks_per_update=2, group_size=2, max_new_tokens=6,
                             entropy_coef=0.01, kl_coef=0.0, eval_every=0, save_every=0, torch_threads=1,
                             progress_bar=False, tensorboard=False, max_prompt_tokens=256)
        trainer = Trainer(config)
        initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        history = trainer.train()
        return history, initial, trainer.model.state_dict()

    (h1, init1, final1), (h2, _, final2) = run(tmp_path / "1"), run(tmp_path / "2")
    assert h1[0]["budget_mean"] == 2.0 and h1[0]["turns_mean"] == 2.0 and math.isfinite(h1[0]["loss"])
    assert any(not torch.equal(final1[k], init1[k]) for k in final1)
    for key in final1:
        torch.testing.assert_close(final1[key], final2[key], rtol=0, atol=0)
    assert ({k: v for k, v in h1[0].items() if not k.endswith("_seconds")}
            == {k: v for k, v in h2[0].items() if not k.endswith("_seconds")})


#: Seeds of the slow learning test, three that learned in the committed learning check
#: (docs/data/learning-check/, experiments/learning_check/README.md gives the whole distribution: seed 1 is one that does not).
LEARNING_TEST_SEEDS = (0, 2, 3)


@pytest.mark.slow  # three seeds of the documented smoke run in parallel processes: ~10 CPU-minutes
def test_the_documented_smoke_run_learns_in_at_least_two_of_three_fixed_seeds(tmp_path):
    """Training success >= 0.8 over the last 20 updates and Pass@(1,T=2) >= 0.8 on held-out set-ups."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from agentgym_budget.train.learning_check import train_and_evaluate

    folders = [str(tmp_path / f"seed_{seed}") for seed in LEARNING_TEST_SEEDS]
    with ProcessPoolExecutor(len(folders), mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(train_and_evaluate, LEARNING_TEST_SEEDS, folders))
    summary = [(run.seed, round(run.last_success, 2), run.held_out_pass1) for run in runs]
    assert sum(run.learned for run in runs) >= 2, summary


def test_model_dependent_defaults_and_their_limits():
    assert (TrainConfig().format_warmup_steps, TrainConfig().learning_rate, TrainConfig().kl_coef) == (400, 1e-3, 0.02)
    other = TrainConfig(model="some/hf-model")
    assert (other.format_warmup_steps, other.learning_rate, other.kl_coef) == (0, 1e-5, 0.0)
    assert TrainConfig(learning_rate=1e-3, kl_coef=0.0).learning_rate == 1e-3
    with pytest.raises(ValueError, match="model='tiny' only"):
        TrainConfig(model="some/hf-model", format_warmup_steps=10)


def test_the_trainer_refuses_fuzzy_action_matching():
    with pytest.raises(ValueError, match="the loss must score the tokens that determined the action"):
        TrainConfig(action_matching="fuzzy")
    with pytest.raises(ValueError, match="action_matching must be 'exact'"):
        TrainConfig.from_dict({"action_matching": "closest"})
    assert TrainConfig().action_matching == "exact"


def test_append_history_records_each_turns_prompt_as_the_last_one_plus_its_sampled_reply():
    from agentgym_budget.train.rollout import collect_episodes, make_train_env

    config = TrainConfig(env_id="KeyDoor-v0", budget="fixed:3", max_new_tokens=4, history="append")
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0")
    envs = [make_train_env(config) for _ in range(2)]
    episodes = collect_episodes(model, tokenizer, envs, seeds=[3, 4], config=config, sampling_seed=0)
    chained = 0
    for episode in episodes:
        for before, after in zip(episode.turns, episode.turns[1:]):
            # the loss's sample of a later turn holds the earlier turns' sampled ids exactly
            assert after.prompt_ids[: len(before.prompt_ids) + len(before.action_ids)] == (before.prompt_ids
                                                                                           + before.action_ids)
            chained += 1
    assert chained >= 2
    assert TrainConfig().history == "actions"  # the prompt the learning results were measured with
    with pytest.raises(ValueError, match="history must be 'actions' or 'append'"):
        TrainConfig(history="replies")


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="group_size"):
        TrainConfig(group_size=1)
    with pytest.raises(ValueError, match="malformed budget spec"):
        TrainConfig(budget="sometimes")
    with pytest.raises(ValueError, match="loss_aggregation"):
        TrainConfig(loss_aggregation="sum")


def test_cli_flags_map_onto_train_config():
    import argparse

    from agentgym_budget.train.config import add_config_arguments, config_from_arguments

    parser = add_config_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--env-id", "ALFWorld-v0", "--budget", "mix:10,20", "--eval-ks", "1,2", "--no-list-admissible",
                              "--max-turns-shown", "none", "--env-kwargs", '{"engine": "fast"}', "--kl-coef", "0.01"])
    config = config_from_arguments(args)
    assert (config.env_id, config.budget, config.eval_ks, config.list_admissible) == ("ALFWorld-v0", "mix:10,20", (1, 2), False)
    assert config.max_turns_shown is None and config.env_kwargs == {"engine": "fast"} and config.kl_coef == 0.01
    assert config_from_arguments(parser.parse_args([])) == TrainConfig()


class _Exploit:
    """Unpickling this runs a shell command (what a crafted trainer_state.pt could do)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_crafted_trainer_state_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"update": 1, "payload": _Exploit(marker)}, tmp_path / "trainer_state.pt")
    with pytest.raises(ValueError, match="refusing to load"):
        load_trainer_state(tmp_path / "trainer_state.pt")
    assert not marker.exists()
    # What save_checkpoint writes does load that way (the numpy RNG state is stored as a tensor).
    np.random.seed(5)
    torch.save({"rng": _numpy_rng_state()}, tmp_path / "ok.pt")
    expected = np.random.random(3)
    np.random.seed(6)
    _set_numpy_rng_state(load_trainer_state(tmp_path / "ok.pt")["rng"])
    assert np.array_equal(np.random.random(3), expected)


def test_the_logged_return_is_the_credited_one_not_the_success_again() -> None:
    from types import SimpleNamespace

    from agentgym_budget.train.grpo import turn_credits
    from agentgym_budget.train.trainer import _EpisodeFacts

    turns = [SimpleNamespace(process_reward=r) for r in (1.0, 0.0, 1.0)]
    lost = SimpleNamespace(won=False, lost=True, budget=4, turns=turns, invalid_actions=1, budget_key="", terminated=True)
    won = SimpleNamespace(won=True, lost=False, budget=4, turns=turns, invalid_actions=0, budget_key="", terminated=True)
    with_process = TrainConfig(process_reward="expert_progress", process_reward_coef=0.5)
    won_credits, lost_credits = turn_credits([won, lost], group_size=1, norm="none")
    assert _EpisodeFacts.of(won, with_process, won_credits).credited_return == 1.0 + 0.5 * 2.0  # outcome + coef * G_0
    assert _EpisodeFacts.of(lost, with_process, lost_credits).credited_return == 0.0  # a loss keeps no net progress
    grouped = turn_credits([won, lost], group_size=2, norm="group")  # the trainer's default: what it credits
    assert _EpisodeFacts.of(won, with_process, grouped[0]).credited_return == pytest.approx(1.0 + 0.5 * grouped[0][0])
    assert _EpisodeFacts.of(won, TrainConfig(), won_credits) == (True, 4, 3, 0, 2.0, 1.0, 0, "", True)  # no process reward

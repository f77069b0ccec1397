"""The trainer evaluates on held-out tasks: the family's held-out split by default."""

import pytest

import agentgym_budget  # noqa: F401
from agentgym_budget.train import TrainConfig
from agentgym_budget.train.trainer import evaluation_env_kwargs


@pytest.mark.parametrize("env_id, split", [("ALFWorld-v0", "valid_unseen"), ("ALFWorld-Budget-v0", "valid_unseen"),
                                           ("ScienceWorld-v0", "dev"), ("TextWorld-Cooking-v0", "valid")])
def test_auto_evaluates_on_the_familys_held_out_split(env_id, split):
    kwargs, held_out = evaluation_env_kwargs(TrainConfig(env_id=env_id, show_budget=True))
    assert kwargs == {"show_budget": True, "split": split} and held_out


def test_an_explicit_split_and_same():
    config = TrainConfig(env_id="ALFWorld-v0", eval_split="valid_seen", env_kwargs={"engine": "fast"})
    assert evaluation_env_kwargs(config) == ({"engine": "fast", "show_budget": False, "split": "valid_seen"}, True)
    same = TrainConfig(env_id="ALFWorld-v0", eval_split="same", env_kwargs={"split": "valid_seen"})
    assert evaluation_env_kwargs(same) == ({"split": "valid_seen", "show_budget": False}, False)


def test_evaluating_on_the_training_split_is_refused():
    config = TrainConfig(env_id="ALFWorld-v0", eval_split="train")
    with pytest.raises(ValueError, match="'train' is the training split"):
        evaluation_env_kwargs(config)


def test_families_without_a_split_say_their_evaluation_is_not_held_out():
    assert evaluation_env_kwargs(TrainConfig(env_id="TextWorld-v0")) == ({"show_budget": False}, False)
    # KeyDoor trains on every set-up by default: its 'test' set-ups are held out only under split='train'.
    assert evaluation_env_kwargs(TrainConfig(env_id="KeyDoor-v0")) == ({"show_budget": False, "split": "test"}, False)
    assert evaluation_env_kwargs(TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}))[1] is True
    # WebShop trains on all goals by default, so its test goals are not held out unless training uses 'train'.
    assert evaluation_env_kwargs(TrainConfig(env_id="WebShop-v0"))[1] is False
    assert evaluation_env_kwargs(TrainConfig(env_id="WebShop-v0", env_kwargs={"split": "train"}))[1] is True


def test_trainer_logs_whether_its_evaluation_was_held_out(tmp_path):
    from agentgym_budget.train import Trainer

    config = TrainConfig(env_id="KeyDoor-v0", total_updates=1, tasks_per_update=2, group_size=2, max_new_tokens=4,
                         format_warmup_steps=0,
                         eval_tasks=2, eval_attempts=1, eval_ks=(1,), eval_ts=(2,), eval_plots=False,
                         output_dir=str(tmp_path), progress_bar=False, tensorboard=False)
    Trainer(config).train()
    import json

    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["eval/held_out"] == 0.0
    held_out = Trainer(TrainConfig(**{**config.to_dict(), "env_kwargs": {"split": "train"},
                                      "output_dir": str(tmp_path / "held_out")})).train
    held_out()
    rows = [json.loads(line) for line in (tmp_path / "held_out" / "eval.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["eval/held_out"] == 1.0

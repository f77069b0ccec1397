"""SFT on demonstrations: the data is the trainer's prompt, from the training split only, and cloning it works."""

import json
import math
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym_budget.cli import main  # noqa: E402
from agentgym_budget.envs.registration import make_budget_env  # noqa: E402
from agentgym_budget.policies.chat import Completion  # noqa: E402
from agentgym_budget.policies.demonstrations import play_demonstrations, training_env_kwargs  # noqa: E402
from agentgym_budget.policies.llm import LLMPolicy  # noqa: E402
from agentgym_budget.policies.tiny_model import env_corpus, tiny_model_and_tokenizer  # noqa: E402
from agentgym_budget.train import sft as sft_module  # noqa: E402
from agentgym_budget.train.config import SFTConfig, TrainConfig  # noqa: E402
from agentgym_budget.train.learning_check import train_and_evaluate  # noqa: E402
from agentgym_budget.train.rollout import policy_options  # noqa: E402
from agentgym_budget.train.sft import (chat_rows, demonstrations, format_warmup, load_for_training,  # noqa: E402
                                       reply_loss, sft, sft_samples, supervised_steps)

torch.set_num_threads(1)

#: KeyDoor's held-out halls: a red and a blue door, or a green and a yellow one (envs/toy/key_door.py).
HELD_OUT_PAIRS = ({"red", "blue"}, {"green", "yellow"})


def held_out_hall(text: str) -> bool:
    """Whether ``text`` shows a hall of the held-out split (both doors of a held-out pair)."""
    doors = set(re.findall(r"\b(red|blue|green|yellow) door", text))
    return any(pair <= doors for pair in HELD_OUT_PAIRS)


class _Replay:
    """A chat backend answering with given texts (to replay a demonstrated episode through an LLMPolicy)."""

    name = "replay"

    def __init__(self):
        self.texts = []

    def complete(self, conversations, seeds, sampling, **options):
        return [Completion(text=self.texts.pop(0)) for _ in conversations]


# -- the data -----------------------------------------------------------------------------------
@pytest.mark.parametrize("history, show_budget", [("actions", False), ("actions", True), ("append", True)])
def test_rows_are_what_the_llm_policy_renders_for_the_same_episode(history, show_budget):
    config = TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget="fixed:3",
                         show_budget=show_budget, history=history, format_warmup_steps=0)
    played = demonstrations(config, "random", episodes=6, seed=11)
    assert sum(map(len, played)) >= 6
    for index, episode in enumerate(played):
        rows = chat_rows([episode])
        backend = _Replay()
        policy = LLMPolicy(backend, **policy_options(config))  # the trainer's renderer, rebuilt independently
        state = policy.start(11 + index)
        env = make_budget_env("KeyDoor-v0", 3, show_budget=show_budget, split="train")
        obs, info = env.reset(seed=11 + index)
        for row in rows:
            *prompt, target = row["messages"]
            assert prompt == policy.messages(state, obs, info)  # the renderer's own output, message for message
            assert target["role"] == "assistant" and target["content"].startswith("Action: ")
            backend.texts.append(target["content"])
            [reply] = policy.act_batch([state], [obs], [info])
            assert state.history[-1][1] == target["content"]  # what later turns show of the reply
            obs, _, terminated, truncated, info = env.step(reply.action)
        assert terminated or truncated or info.get("won")


def test_expert_demonstrations_win_and_random_ones_are_admissible():
    def make():
        return make_budget_env("KeyDoor-v0", 4, split="train")

    expert = play_demonstrations(make, "expert", episodes=5)
    assert all(len(episode) == 2 for episode in expert)  # take key, open the goal door: won
    for episode in play_demonstrations(make, "random", episodes=5, seed=3):
        for turn in episode:
            listed = turn.messages[-1]["content"].split("Available commands: ")[1]
            assert turn.reply.removeprefix("Action: ") in listed.split(", ")


def test_an_evaluation_split_is_refused_in_one_line():
    for env_id, split in [("KeyDoor-v0", "test"), ("KeyDoor-v0", "all"), ("ALFWorld-v0", "valid_unseen")]:
        with pytest.raises(ValueError, match=f"training split only: {env_id} split='{split}'") as error:
            training_env_kwargs(env_id, {"split": split})
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="training split only"):
        sft(SFTConfig(env_kwargs={"split": "test"}, steps=1, episodes=1))  # before any model is built


def test_the_cli_refuses_an_evaluation_split(capsys):
    assert main(["sft", "--env-kwargs", '{"split": "test"}', "--episodes", "1", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgym-budget sft: error: training data comes from the training split only")
    assert err.count("\n") == 1


def test_the_format_warmup_reads_only_training_tasks(monkeypatch):
    seen = []
    real = sft_module.sft_samples
    monkeypatch.setattr(sft_module, "sft_samples", lambda tokenizer, played, *a: seen.extend(played) or real(
        tokenizer, played, *a))
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    # the trainer trains on every set-up here (split 'all'): the warm-up still reads the train split only
    format_warmup(model, tokenizer, TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "all"}), steps=2,
                  batch_size=60)
    texts = [m["content"] for episode in seen for turn in episode for m in turn.messages]
    assert len(seen) == 40 and texts
    assert not any(held_out_hall(text) for text in texts)
    assert any("red door" in text for text in texts)  # the check can see a colour: red is in train halls


def test_the_tiny_tokenizer_learns_from_training_tasks_only():
    corpus = env_corpus("KeyDoor-v0")
    assert len(corpus) > 40 and not any(held_out_hall(text) for text in corpus)
    assert held_out_hall("a red door and a blue door")  # the check itself catches one


def test_the_learning_check_refuses_an_overlapping_evaluation_before_training(tmp_path):
    with pytest.raises(ValueError, match="overlap the training ones"):
        train_and_evaluate(0, str(tmp_path), env_kwargs={})
    assert not any(tmp_path.iterdir())


def test_the_learning_check_script_refuses_it_before_any_worker_starts(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_check.py"
    done = subprocess.run([sys.executable, str(script), "--seeds", "1", "--set", "env_kwargs={}", "--out",
                           str(tmp_path / "out")], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.startswith("learning_check: the evaluation tasks")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


# -- cloning ------------------------------------------------------------------------------------
def test_sft_lowers_the_loss_on_its_own_data():
    config = TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget="fixed:4", format_warmup_steps=0)
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    samples = sft_samples(tokenizer, demonstrations(config, "expert", episodes=30, seed=0))
    before = reply_loss(model, tokenizer, samples)
    losses = supervised_steps(model, tokenizer, samples, steps=20, batch_size=16, learning_rate=3e-3)
    after = reply_loss(model, tokenizer, samples)
    assert all(math.isfinite(loss) for loss in losses)
    assert after < 0.5 * before, (before, after)
    # the reply target ends with the end-of-turn token the trainer's sampler stops on
    assert all(s.input_ids[-1] == tokenizer.eos_token_id for s in samples)


def test_the_sft_command_saves_a_model_the_trainer_loads(tmp_path):
    out = tmp_path / "sft"
    assert main(["sft", "--source", "random", "--episodes", "8", "--steps", "3", "--batch-size", "4",
                 "--torch-threads", "1", "--output-dir", str(out)]) == 0
    summary = json.loads((out / "sft.json").read_text())
    assert summary["episodes"] == 8 and len(summary["losses"]) == 3
    model, tokenizer = load_for_training(str(out), TrainConfig(model=str(out)), "cpu")
    assert model.config.vocab_size == len(tokenizer)
    datasets = pytest.importorskip("datasets")
    rows = datasets.load_from_disk(str(out / "dataset"))
    assert len(rows) == summary["turns"] and rows[0]["messages"][-1]["role"] == "assistant"


# -- TRL ----------------------------------------------------------------------------------------
def test_trls_own_sft_trainer_takes_the_dataset_as_is(tmp_path):
    trl = pytest.importorskip("trl")
    from agentgym_budget.integrations.trl_env import chatml_tool_tokenizer
    from agentgym_budget.train.sft import chat_dataset

    config = TrainConfig(env_id="KeyDoor-v0", env_kwargs={"split": "train"}, budget="fixed:4", format_warmup_steps=0)
    dataset = chat_dataset(demonstrations(config, "expert", episodes=4, seed=0))
    assert dataset.column_names == ["messages"]
    model, tokenizer = tiny_model_and_tokenizer("KeyDoor-v0", seed=0)
    tokenizer = chatml_tool_tokenizer(tokenizer, model)  # the tiny tokenizer has no chat template
    args = trl.SFTConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2, learning_rate=1e-3,
                         logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                         dataloader_num_workers=0)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)


def test_the_prompt_option_reaches_the_sft_rows_and_the_trainers_policy():
    """--prompt short: the demonstrations and the trainer's policy open with the same short system prompt;
    the default stays the ReAct one; an unknown name is refused in one line."""
    from agentgym_budget.policies.prompting import SHORT_PROMPT, SYSTEM_PROMPT

    sft_config = SFTConfig(source="random", env_kwargs={"split": "train"}, budget="fixed:3", prompt="short")
    config = sft_config.training_config()
    assert config.prompt == "short" and TrainConfig().prompt == "react"
    [episode] = demonstrations(config, "random", episodes=1, seed=3)
    assert episode[0].messages[0]["content"].startswith(SHORT_PROMPT + "\n\n")
    assert LLMPolicy(_Replay(), **policy_options(config)).system_prompt == SHORT_PROMPT
    assert LLMPolicy(_Replay(), **policy_options(TrainConfig())).system_prompt == SYSTEM_PROMPT
    with pytest.raises(ValueError, match="prompt must be one of"):
        TrainConfig(prompt="tiny")

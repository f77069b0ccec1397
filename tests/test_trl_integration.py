"""TRL: GRPOTrainer's environment mode over our budgeted envs, on CPU with the tiny model."""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

trl = pytest.importorskip("trl", reason="needs the trl extra")
torch = pytest.importorskip("torch")

from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling  # noqa: E402

import agentgym_budget  # noqa: E402,F401
from agentgym_budget.integrations.session import BudgetSession  # noqa: E402
from agentgym_budget.integrations.trl_env import (  # noqa: E402
    BudgetToolEnv,
    chatml_tool_tokenizer,
    environment_factory,
    episode_reward,
)
from agentgym_budget.wrappers import ProcessReward  # noqa: E402

ENV_ID = "ALFWorld-Budget-v0"
BUDGETS = (1, 2, 3)
INSTRUCTION = "Solve the household task. Call the act tool with one admissible command per turn."


def tool_call_text(command: str) -> str:
    """What the Qwen2.5 template renders for an assistant message that calls ``act(command)``."""
    call = json.dumps({"name": "act", "arguments": {"command": command}})
    return f"<tool_call>\n{call}\n</tool_call><|im_end|>"


def test_tool_env_plays_the_episode_and_ends_it() -> None:
    make_env = environment_factory(ENV_ID, budget="mix", budgets=BUDGETS, show_budget=True)
    env = make_env()
    # TRL makes tools of the public methods: only act (reset is TRL's own hook).
    assert [name for name in dir(BudgetToolEnv) if not name.startswith("_") and callable(getattr(BudgetToolEnv, name))
            ] == ["act", "reset"]
    text = env.reset(prompt=[{"role": "user", "content": "ignored"}], seed=4, budget=2)
    assert "[Turns left: 2 of 2]" in text and "Available commands: " in text
    assert "Turns left: 1 of 2" in env.act("look")
    assert env.act("look").endswith("The episode is over: the turn budget is spent.")
    assert env.session.outcome == "truncated"
    # Later calls: answered, not played, not an error (TRL would count a failed tool call), and
    # naming no tool the model does not have (there is no 'reset' tool).
    after = env.act("look")
    assert after.startswith("The episode is over: the turn budget is spent.") and "reset" not in after
    assert env.session.turn == 2 and env.session.outcome == "truncated"
    # An expert episode terminates: outcome 'terminated', reward 1.
    mirror = BudgetSession(ENV_ID, budget=50)
    mirror.reset(seed=5)
    env.reset(seed=5, budget=50)
    while not mirror.done:
        action = mirror.info["expert_action"]
        mirror.step(action)
        last = env.act(action)
    assert last.endswith("the task was completed.") and env.session.outcome == "terminated"
    logged: dict = {}
    assert episode_reward([env], log_extra=logged.__setitem__) == [1.0]
    assert logged["outcome"] == ["terminated"] and logged["budget"] == [50]


def test_process_reward_is_part_of_the_episode_return() -> None:
    env = environment_factory("KeyDoor-Budget-v0", budget=3,
                              wrappers=[lambda e: ProcessReward(e, "invalid_penalty", 0.5, potential_based=False)])()
    env.reset(seed=0, options={"task": "red-blue"})
    env.act("dance")
    env.act("take key")
    env.act("open red door")
    assert episode_reward([env]) == [pytest.approx(1.0 - 0.5)]  # won, and -0.5 for the one invalid action


def test_the_factory_pickles_with_picklable_wrappers() -> None:
    invalid_penalty = functools.partial(ProcessReward, signal="invalid_penalty", coef=0.5, potential_based=False)
    factory = environment_factory("KeyDoor-Budget-v0", budget="mix:2,3", wrappers=[invalid_penalty], show_budget=True)
    env = pickle.loads(pickle.dumps(factory))()
    env.reset(seed=0, budget=2)
    env.act("dance")
    assert env.session.budget == 2 and episode_reward([env]) == [pytest.approx(-0.5)]


class _Spawned(Exception):
    """TRL's worker got past its pickling check and would spawn its child now."""


class _SpawnContext:
    def Process(self, **kwargs):  # noqa: N802 (multiprocessing's name)
        raise _Spawned


def trl_async_worker_start(**loop_kwargs) -> None:
    """TRL's async GRPO worker's own ``start()``, which pickles the factory for its spawned child,
    stopped at the spawn (its ``__init__`` needs vLLM, which a CPU test machine lacks)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    worker_module = pytest.importorskip("trl.experimental.async_grpo.async_rollout_worker")

    class Unstarted(worker_module.AsyncRolloutWorker):
        def __init__(self) -> None:  # the parent-side state start() reads; no queues, no vLLM
            self._process, self._loop_kwargs, self._mp_ctx = None, loop_kwargs, _SpawnContext()
            self._heartbeat_value = worker_module.mp.get_context("spawn").Value("d", 0.0)

        def __getattr__(self, name: str) -> None:  # the queues and events start() hands to the child
            return None

    Unstarted().start()


def test_trl_async_worker_accepts_the_factory() -> None:
    factory = environment_factory(ENV_ID, budget="mix", budgets=BUDGETS,
                                  wrappers=[functools.partial(ProcessReward, signal="invalid_penalty", coef=0.1)])
    with pytest.raises(_Spawned):
        trl_async_worker_start(environment_factory=factory, reward_funcs=[episode_reward])
    # What the factory used to be, a closure, is refused by that same check.
    with pytest.raises(TypeError, match="must be picklable"):
        trl_async_worker_start(environment_factory=lambda: BudgetToolEnv(ENV_ID), reward_funcs=[episode_reward])


def test_a_row_without_seed_warns() -> None:
    env = environment_factory("KeyDoor-Budget-v0", budget="mix:2,3")()
    with pytest.warns(UserWarning, match="no 'seed'.*group baseline"):
        env.reset(prompt=[{"role": "user", "content": "play"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset(prompt=[{"role": "user", "content": "play"}], seed=3)


def test_the_docs_prompt_and_observation_are_separate_lines() -> None:
    # TRL appends reset()'s text to the last user message as is: the prompt must end the line.
    section = (Path(__file__).parents[1] / "docs" / "integrations.md").read_text().split("### TRL", 1)[1]
    content = re.search(r'"content": "([^"]*)"', section).group(1).encode().decode("unicode_escape")
    first = BudgetToolEnv(ENV_ID, budget=2).reset(seed=0)
    assert content.endswith("\n") and (content + first).splitlines()[1] == first.splitlines()[0]


def random_tool_episodes(tokenizer, episodes: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, tool-call ids)`` for every turn of random play, rendered as TRL renders rollouts."""
    rng = np.random.default_rng(seed)
    env = BudgetToolEnv(ENV_ID, budget=max(BUDGETS), show_budget=True)
    samples = []
    for episode in range(episodes):
        messages = [{"role": "user", "content": INSTRUCTION + "\n" + env.reset(seed=1000 + episode)}]
        while not env.session.done:
            command = str(rng.choice(env.session.admissible_commands))
            prefix = tokenizer.apply_chat_template(messages, tools=[env.act], add_generation_prompt=True,
                                                   tokenize=True, return_dict=False)
            samples.append((prefix, tokenizer(tool_call_text(command), add_special_tokens=False)["input_ids"]))
            messages += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "act", "arguments": {"command": command}}}]},
                {"role": "tool", "name": "act", "content": env.act(command)}]
    return samples


def template_phrases(tokenizer) -> list[str]:
    """The fixed text the chat template writes around messages (system header with the tool schema,
    tool-call and tool-response wrappers), cut at the special tokens and at the messages' text."""
    env = BudgetToolEnv("KeyDoor-Budget-v0", budget=1)
    marks = ["MARKUSER", "MARKCOMMAND", "MARKRESULT"]
    messages = [{"role": "user", "content": marks[0]},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "act", "arguments": {"command": marks[1]}}}]},
                {"role": "tool", "name": "act", "content": marks[2]}]
    text = tokenizer.apply_chat_template(messages, tools=[env.act], add_generation_prompt=True, tokenize=False)
    for separator in [*marks, *tokenizer.all_special_tokens, "<tool_call>", "</tool_call>"]:
        text = text.replace(separator, "\0")
    return sorted({chunk for chunk in text.split("\0") if len(chunk) >= 4})


def tiny_tool_model():
    """The project's tiny model, its tokenizer given TRL's Qwen2.5 template and the template's fixed
    phrases as tokens: the tiny tokenizer already makes the env's stock phrases a token or two, and
    this does the same for the template's, so a prompt is ~100 tokens and a tool call ~6 to learn."""
    from agentgym_budget.policies.tiny_model import build_tokenizer, env_corpus, tiny_model

    tokenizer = chatml_tool_tokenizer(build_tokenizer(env_corpus("ALFWorld-v0")))
    tokenizer.add_tokens(template_phrases(tokenizer))
    return tiny_model(tokenizer, seed=0), tokenizer


def tool_call_warmup(model, tokenizer, steps: int, seed: int = 0, lr: float = 5e-3) -> list[float]:
    """Supervised steps teaching the tiny random model the tool-call format with *random* commands
    (as ``format_warmup`` does for the ReAct format): afterwards it calls ``act`` with admissible
    commands, knowing nothing about which one is right.  Multi-turn: later turns see tool results."""
    samples = random_tool_episodes(tokenizer, episodes=16, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        batch = [samples[i] for i in torch.randint(len(samples), (8,), generator=generator).tolist()]
        width = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        for row, (prompt, target) in enumerate(batch):
            ids[row, : len(prompt) + len(target)] = torch.tensor(prompt + target)
            labels[row, len(prompt): len(prompt) + len(target)] = torch.tensor(target)
        loss = model(input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id),
                     labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


def test_a_chat_models_vocabulary_is_kept_under_trls_tool_template() -> None:
    """SmolLM2's case: a ChatML chat model whose template has no tool syntax gets TRL's template, no new tokens."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    from agentgym_budget.policies.tiny_model import build_tokenizer, env_corpus

    tokenizer = build_tokenizer(env_corpus("KeyDoor-v0"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                               "{% endfor %}")  # ChatML without tools, as SmolLM2's
    assert not supports_tool_calling(tokenizer)
    size = len(tokenizer)
    chatml_tool_tokenizer(tokenizer)
    assert len(tokenizer) == size and "<tool_call>" not in tokenizer.get_vocab()
    assert tokenizer.chat_template == qwen2_5_chat_template and supports_tool_calling(tokenizer)
    assert tokenizer.eos_token == "<|im_end|>"
    # a tokenizer without any template (the tiny one) still gets the tags as tokens
    bare = chatml_tool_tokenizer(build_tokenizer(env_corpus("KeyDoor-v0")))
    assert "<tool_call>" in bare.get_vocab()


def test_trl_renders_and_parses_our_tool_calls() -> None:
    model, tokenizer = tiny_tool_model()
    assert supports_tool_calling(tokenizer)
    add_response_schema(tokenizer)  # what GRPOTrainer does: TRL recognises its own Qwen2.5 template
    env = BudgetToolEnv(ENV_ID, budget=2)
    prefix = tokenizer.apply_chat_template([{"role": "user", "content": env.reset(seed=0)}], tools=[env.act],
                                           add_generation_prompt=True, tokenize=True, return_dict=False)
    ids = tokenizer(tool_call_text("go to toilet 1"), add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, ids, prefix=prefix, tools=[env.act])
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "act",
                                                                    "arguments": {"command": "go to toilet 1"}}}]


def instruction_rows(seeds: Iterable[int]):
    """The training set: the instruction prompt, one row per game seed (TRL passes ``seed`` to ``reset``)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": INSTRUCTION + "\n"}], "seed": seed}
                              for seed in seeds])


def grpo_args(tmp_path, max_steps: int):
    """GRPO on CPU: one group of 4 rollouts per step, each step's completions logged to a parquet table."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, max_steps=max_steps, per_device_train_batch_size=4,
        # room for every tool result: a turn's observation lists up to ~30 objects in the bundled rooms
        num_generations=4, learning_rate=1e-3, max_completion_length=1200,
        max_tool_calling_iterations=max(BUDGETS) + 1, logging_steps=1, log_completions=True, report_to="none",
        save_strategy="no", seed=0, dataloader_num_workers=0, bf16=False, temperature=0.7,
    )


@pytest.mark.slow
def test_grpo_trainer_takes_optimizer_steps_on_alfworld_budget_mix(tmp_path) -> None:
    import pandas as pd
    from trl import GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    model, tokenizer = tiny_tool_model()
    losses = tool_call_warmup(model, tokenizer, steps=100)
    assert losses[-1] < losses[0] / 4, losses
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=grpo_args(tmp_path, max_steps=3),
        train_dataset=instruction_rows(seeds=range(6)), reward_funcs=[episode_reward],
        # The invalid-action process reward: episodes of random commands differ in it, so GRPO's
        # group-normalised advantages are not all zero (the tiny model never wins in 3 turns).
        environment_factory=environment_factory(ENV_ID, budget="mix", budgets=BUDGETS, show_budget=True, wrappers=[
            functools.partial(ProcessReward, signal="invalid_penalty", coef=0.1)]),
    )
    trainer.train()

    assert trainer.state.global_step == 3  # three optimizer updates
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert changed, "no parameter changed"
    # The logged rollouts: one parquet table per logging step, with the budget each episode drew.
    tables = sorted((tmp_path / "completions").glob("completions_*.parquet"))
    assert len(tables) == 3
    rows = pd.concat([pd.read_parquet(t) for t in tables])
    assert set(rows["budget"]) <= set(BUDGETS) and rows["budget"].nunique() > 1
    for budget, prompt, completion, outcome, turns in zip(rows["budget"], rows["prompt"], rows["completion"],
                                                          rows["outcome"], rows["turns"]):
        assert f"[Turns left: {budget} of {budget}]" in prompt[-1]["content"]  # the model sees its budget
        tool_results = [m for m in completion if m["role"] == "tool"]
        assert turns <= budget and outcome in ("terminated", "truncated", "running")
        if outcome == "truncated":
            assert turns == budget and "turn budget is spent" in tool_results[budget - 1]["content"]
    # The warmed-up model calls the tool, so the budget really ends episodes.
    assert (rows["outcome"] == "truncated").mean() > 0.5, rows[["budget", "turns", "outcome"]]
    assert any(entry.get("grad_norm", 0) > 0 for entry in trainer.state.log_history)
    logged = [entry for entry in trainer.state.log_history if "episode/budget" in entry]
    assert len(logged) == 3 and all(min(BUDGETS) <= e["episode/budget"] <= max(BUDGETS) for e in logged)


@pytest.mark.slow
def test_grpo_trainer_steps_on_when_one_rollout_of_the_group_loses_its_env(tmp_path, monkeypatch) -> None:
    """TRL's own trainer, not a stand-in: one rollout's env raises mid-episode, and again in the fresh env the
    session replays it in; that rollout ends failed (reward None, logged), the other three and the step go on."""
    import pandas as pd
    from trl import GRPOTrainer

    from scripted_envs import FaultyEnv

    faults = FaultyEnv.isolated(monkeypatch)
    faults.seeds, faults.turn, faults.budget = set(range(6)), 1, 2  # the first tool call raises, and its replay
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    model, tokenizer = tiny_tool_model()
    tool_call_warmup(model, tokenizer, steps=100)  # so the model calls the tool, reaching the raising step
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=grpo_args(tmp_path, max_steps=1),
        train_dataset=instruction_rows(seeds=range(6)), reward_funcs=[episode_reward],
        environment_factory=environment_factory(ENV_ID, budget=max(BUDGETS), show_budget=True,
                                                wrappers=[FaultyEnv]),
    )
    with pytest.warns(RuntimeWarning, match=r"raised at step 1: ConnectionError: backend lost at turn 1"):
        trainer.train()

    assert trainer.state.global_step == 1
    assert (faults.budget, faults.closed >= 2) == (0, True)  # both raises happened; both raising envs were closed
    (table,) = (tmp_path / "completions").glob("completions_*.parquet")
    rows = pd.read_parquet(table)
    assert list(rows["outcome"]).count("failed") == 1, rows[["outcome", "turns", "env_failures"]]
    assert sorted(rows["env_failures"]) == [0, 0, 0, 2]
    failed = rows[rows["outcome"] == "failed"].iloc[0]
    tool_results = [m["content"] for m in failed["completion"] if m["role"] == "tool"]
    # the failed call's answer: the game as it was before the command, then why the episode is over
    assert tool_results[0].endswith("The episode is over: the game's environment failed (ConnectionError: backend "
                                    "lost at turn 1 (at step 1)); this episode does not count.")
    logged = [entry for entry in trainer.state.log_history if "episode/env_failures" in entry]
    assert [(e["episode/env_failures"], e["episode/failed"]) for e in logged] == [(2.0, 0.25)]


def keydoor_expert_call(conversation: str) -> str:
    """The tool call (or, once the game answered twice, a closing reply) KeyDoor's expert makes next,
    read from the conversation so far: take the key, then open the task's door (a win in two turns)."""
    answered = conversation.count("<tool_response>")
    if answered >= 2:
        return "Done.<|im_end|>"
    if answered == 0:
        return tool_call_text("take key")
    return tool_call_text("open " + re.search(r"Your task is to: open the (\w+) door", conversation).group(1) + " door")


@pytest.mark.slow
def test_grpo_trainer_logs_a_win_on_the_budgets_last_turn_as_terminated(tmp_path, monkeypatch) -> None:
    """TRL's own trainer runs its tool loop, our env, the reward and the logging; only the model's sampling is
    scripted (the expert, so the win lands on the last turn of a budget of 2; a budget of 1 runs out first)."""
    import pandas as pd
    from datasets import Dataset
    from trl import GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    model, tokenizer = tiny_tool_model()
    args = grpo_args(tmp_path, max_steps=2)
    args.max_completion_length = 2000  # KeyDoor's text in the ALFWorld-trained tokenizer: many byte tokens
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "Open the door: call act per turn.\n"}],
                               "seed": seed, "budget": budget} for seed, budget in [(0, 2), (1, 1)]])
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=rows,
                          reward_funcs=[episode_reward],
                          environment_factory=environment_factory("KeyDoor-Budget-v0", budget="mix:1,2"))

    def scripted_generation(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls = [keydoor_expert_call(tokenizer.decode(ids)) for ids in prompt_ids]
        return [tokenizer(call, add_special_tokens=False)["input_ids"] for call in calls], None

    monkeypatch.setattr(trainer, "_generate_single_turn", scripted_generation)
    trainer.train()

    assert trainer.state.global_step == 2
    table = pd.concat([pd.read_parquet(t) for t in sorted((tmp_path / "completions").glob("completions_*.parquet"))])
    outcomes = sorted(set(zip(table["budget"], table["turns"], table["outcome"], table["won"])))
    # budget 2: the expert's second command wins on the budget's last turn: terminated and won, not truncated
    assert outcomes == [(1, 1, "truncated", False), (2, 2, "terminated", True)], table[["budget", "turns", "outcome"]]
    assert len(table) == 8
    by_budget = {int(e["episode/budget"]): e for e in trainer.state.log_history if "episode/budget" in e}
    assert (by_budget[2]["episode/terminated"], by_budget[2]["episode/truncated"]) == (1.0, 0.0)
    assert (by_budget[1]["episode/terminated"], by_budget[1]["episode/truncated"]) == (0.0, 1.0)

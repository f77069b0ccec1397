"""Few-shot prompts (issue 35, step 2): the layout of the conversation, the example's split, the default unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest

import agentgym_budget  # noqa: F401 - registers the envs
from agentgym_budget.envs.toy.key_door import SPLITS
from agentgym_budget.policies.few_shot import EXAMPLE_SPLIT, expert_example
from agentgym_budget.policies.factories import make_openai_policy, with_few_shot
from agentgym_budget.policies.llm import LLMPolicy
from agentgym_budget.policies.prompting import (ACTION_PROMPT, SYSTEM_PROMPT, chat_messages, system_message,
                                                task_line, turn_message)

BACKEND = SimpleNamespace(name="none")


def first_turn(split: str = "test", seed: int = 0) -> tuple[str, dict]:
    env = gym.make("KeyDoor-Budget-v0", split=split, budget=4)
    return env.reset(seed=seed)


def test_the_few_shot_conversation_is_laid_out_as_documented():
    obs, info = first_turn()
    policy = with_few_shot(LLMPolicy(BACKEND, prompt="action"), "KeyDoor-v0")
    messages = policy.messages(policy.start(0), obs, info)
    example_task, example_turns = expert_example("KeyDoor-v0")
    assert messages[0] == system_message(info["task"], ACTION_PROMPT)
    shown = messages[1:-1]  # the worked example: user/assistant per expert turn
    assert [m["role"] for m in shown] == ["user", "assistant"] * len(example_turns)
    assert shown[0]["content"] == f"{task_line(example_task)}\n{example_turns[0][0]}"
    assert [m["content"] for m in shown[2::2]] == [message for message, _ in example_turns[1:]]
    assert [m["content"] for m in shown[1::2]] == [reply for _, reply in example_turns]
    assert messages[-1] == {"role": "user", "content": f"{task_line(info['task'])}\n{turn_message(obs, info)}"}


def test_the_example_is_rendered_by_turn_message_from_the_train_split():
    task, turns = expert_example("KeyDoor-v0", seed=3)
    env = gym.make("KeyDoor-v0", split=EXAMPLE_SPLIT)
    obs, info = env.reset(seed=3)
    assert EXAMPLE_SPLIT == "train" and info["game"].split(":")[0] in SPLITS["train"]
    assert info["game"].split(":")[0] not in SPLITS["test"]
    assert (task, turns[0]) == (info["task"], (turn_message(obs, info), f"Action: {info['expert_action']}"))
    assert turns[-1][1] == f"Action: open {task.split()[2]} door"  # the expert's last command wins


def test_examples_keep_the_episode_turns_after_them():
    turns = [("Observation: a", "Action: look"), ("Observation: b", None)]
    plain, shot = chat_messages("t", turns), chat_messages("t", turns, examples=[("e", [("Observation: x", "Action: y")])])
    assert shot[3:] == [{**plain[1], "content": "Your task is to: t\nObservation: a"}, *plain[2:]]


def test_the_default_prompt_is_unchanged():
    obs, info = first_turn()
    policy = LLMPolicy(BACKEND)
    messages = policy.messages(policy.start(0), obs, info)
    assert policy.system_prompt == SYSTEM_PROMPT and policy.examples == ()
    assert messages == [system_message(info["task"]), {"role": "user", "content": turn_message(obs, info)}]


def test_stop_strings_and_temperature_reach_the_sampling():
    policy = make_openai_policy("m", base_url="http://127.0.0.1:9/v1", api_key="x", stop="\n", temperature=0.3,
                                prompt="action")
    assert policy.sampling.stop == ("\n",) and policy.sampling.temperature == 0.3
    assert policy.system_prompt == ACTION_PROMPT


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": "chatty"}, "prompt must be one of"),
    ({"few_shot_env": "KeyDoor-Budget-v0"}, "without a budget"),
    ({"few_shot_env": "NoSuchEnv-v0"}, "cannot make 'NoSuchEnv-v0'"),
])
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        make_openai_policy("m", base_url="http://127.0.0.1:9/v1", api_key="x", **kwargs)
    assert "\n" not in str(error.value)


def test_an_append_only_few_shot_conversation_shows_the_task_line_once_and_only_grows():
    """History "append" with examples: turn 2's conversation is turn 1's plus the reply and the new message
    (before, the first message's task line was recorded with it and laid out twice)."""
    from agentgym_budget.policies.chat import Completion

    class Recording:
        name = "recording"

        def __init__(self):
            self.seen = []

        def complete(self, conversations, seeds, sampling, **_):
            self.seen += [list(c) for c in conversations]
            return [Completion("Action: take key") for _ in conversations]

    backend = Recording()
    policy = with_few_shot(LLMPolicy(backend, history="append"), "KeyDoor-v0")
    env = gym.make("KeyDoor-Budget-v0", split="test", budget=3, show_budget=True)
    obs, info = env.reset(seed=0)
    state = policy.start(0)
    [reply] = policy.act_batch([state], [obs], [info])
    obs, _, _, _, info = env.step(reply.action)
    policy.act_batch([state], [obs], [info])
    first, second = backend.seen
    assert second[: len(first)] == first
    assert second[len(first):] == [{"role": "assistant", "content": "Action: take key"},
                                   {"role": "user", "content": turn_message(obs, info)}]
    assert first[-1]["content"].startswith(f"{task_line(info['task'])}\nObservation: ")  # the task line once
